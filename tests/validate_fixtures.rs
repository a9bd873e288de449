//! Every case in `tests/data/validate/cases/*.cases.json` (copied from
//! `../shared/fixtures/instances/`) gives its expected verdict, and its expected `loc` and
//! `type` where given.
//!
//! The vacation cases say `"valid": true, "semantic_valid": false` for the cross-field
//! failures: valid for the contract's shape, invalid for its meaning. So the rules do not go
//! into the schema as plain `if`/`then` (that would make them schema errors); they go into
//! `x-formwork-rules` in `schemas/vacation.rules.schema.json`, a copy of the fixture schema
//! with the rules added (standard `if`/`then` inside `assert`, and one comparison), and the
//! plain fixture schema must give the same `valid` verdicts without them.

use std::path::{Path, PathBuf};

use formwork::validate::{LocItem, Validator, Verdict};
use serde_json::Value;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/validate")
}

fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn validator(name: &str) -> Validator {
    Validator::new(&load(&data().join("schemas").join(name))).expect(name)
}

fn loc_of(v: &Value) -> Vec<LocItem> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| match x {
            Value::String(s) => LocItem::Key(s.clone()),
            Value::Number(n) => LocItem::Index(n.as_u64().unwrap() as usize),
            other => panic!("bad loc item {other}"),
        })
        .collect()
}

/// The verdict a case is judged on: strict when it parses, tolerant otherwise.
fn judge(v: &Validator, case: &Value) -> (Verdict, Verdict) {
    let text = case["text"].as_str().unwrap();
    let strict = v.check(text);
    let (tolerant, _) = v.check_tolerant(text);
    (strict, tolerant)
}

#[test]
fn decision_cases() {
    let v = validator("decision.schema.json");
    let cases = load(&data().join("cases/decision.cases.json"));
    let mut checked = 0;
    for case in cases.as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let text = case["text"].as_str().unwrap();
        let (strict, tolerant) = judge(&v, case);
        if let Some(parse) = case.get("parse").and_then(Value::as_bool) {
            assert_eq!(
                !matches!(strict, Verdict::NotJson(_)),
                parse,
                "{name}: strict parse verdict {strict:?}"
            );
        }
        if let Some(tp) = case.get("tolerant_parse").and_then(Value::as_bool) {
            assert_eq!(
                !matches!(tolerant, Verdict::NotJson(_)),
                tp,
                "{name}: tolerant parse"
            );
            let (_, extracted) = v.check_tolerant(text);
            let x = extracted.unwrap_or_else(|| panic!("{name}: extraction not reported"));
            assert!(x.stripped_fence || x.had_surrounding_text, "{name}: {x:?}");
        }
        let verdict = if case.get("parse") == Some(&Value::Bool(false)) {
            tolerant
        } else {
            strict
        };
        let valid = case["valid"].as_bool().unwrap();
        assert_eq!(verdict.is_valid(), valid, "{name}: {verdict:?}");
        if let Some(expected) = case.get("errors").and_then(Value::as_array) {
            let Verdict::SchemaInvalid(errors) = &verdict else {
                panic!("{name}: expected schema errors, got {verdict:?}")
            };
            let got: Vec<(Vec<LocItem>, String)> = errors
                .iter()
                .map(|e| (e.loc.clone(), e.r#type.clone()))
                .collect();
            let want: Vec<(Vec<LocItem>, String)> = expected
                .iter()
                .map(|e| (loc_of(&e["loc"]), e["type"].as_str().unwrap().to_string()))
                .collect();
            assert_eq!(got, want, "{name}");
        }
        checked += 1;
    }
    assert_eq!(checked, 9);
}

#[test]
fn vacation_cases_with_rules() {
    let ruled = validator("vacation.rules.schema.json");
    let plain = validator("vacation.schema.json");
    assert!(ruled.has_rules() && !plain.has_rules());
    let cases = load(&data().join("cases/vacation.cases.json"));
    // Our own expectation of where each semantic failure points (the fixtures give none).
    let expected_semantic: &[(&str, &[&str], &[&str])] = &[
        (
            "reversed range",
            &["end_date"],
            &["/end_date", "/start_date"],
        ),
        (
            "complete without end",
            &["end_date"],
            &["/status", "/end_date"],
        ),
        (
            "complete with a question",
            &["clarification_question"],
            &["/status", "/clarification_question"],
        ),
        (
            "needs clarification without question",
            &["clarification_question"],
            &["/status", "/clarification_question"],
        ),
        (
            "not a request with dates",
            &["start_date"],
            &["/status", "/start_date"],
        ),
    ];
    let mut semantic_seen = 0;
    for case in cases.as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let text = case["text"].as_str().unwrap();
        let verdict = ruled.check(text);
        let base = plain.check(text);
        if case.get("parse") == Some(&Value::Bool(false)) {
            assert!(
                matches!(verdict, Verdict::NotJson(_)),
                "{name}: {verdict:?}"
            );
            assert!(matches!(base, Verdict::NotJson(_)), "{name}");
            continue;
        }
        let valid = case["valid"].as_bool().unwrap();
        // The plain fixture schema gives the fixture's shape verdict.
        assert_eq!(base.is_valid(), valid, "{name} (plain schema): {base:?}");
        if !valid {
            assert!(
                matches!(verdict, Verdict::SchemaInvalid(_)),
                "{name}: {verdict:?}"
            );
            continue;
        }
        let semantic_valid = case["semantic_valid"].as_bool().unwrap();
        if semantic_valid {
            assert!(verdict.is_valid(), "{name}: {verdict:?}");
            continue;
        }
        let Verdict::SemanticInvalid(errors) = &verdict else {
            panic!("{name}: expected a semantic verdict, got {verdict:?}")
        };
        semantic_seen += 1;
        let (_, loc, fields) = expected_semantic
            .iter()
            .find(|(n, _, _)| *n == name)
            .unwrap_or_else(|| panic!("no expectation for {name}"));
        assert_eq!(errors.len(), 1, "{name}: {errors:#?}");
        let e = &errors[0];
        assert_eq!(e.r#type, "semantic");
        let want_loc: Vec<LocItem> = loc.iter().map(|s| LocItem::Key(s.to_string())).collect();
        assert_eq!(e.loc, want_loc, "{name}");
        assert_eq!(
            e.fields,
            fields.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            "{name}"
        );
        for f in *fields {
            assert!(
                e.msg.contains(&f[1..]),
                "{name}: message names {f}: {}",
                e.msg
            );
        }
        assert!(
            e.schema_path.starts_with("/x-formwork-rules/"),
            "{}",
            e.schema_path
        );
    }
    assert_eq!(semantic_seen, expected_semantic.len());
}

#[test]
fn the_vacation_rules_name_their_rule_in_the_schema_path() {
    let v = validator("vacation.rules.schema.json");
    let verdict = v.check(
        r#"{"status":"complete","start_date":"2027-06-12","end_date":"2027-06-10","clarification_question":null}"#,
    );
    let e = &verdict.errors()[0];
    assert_eq!(e.schema_path, "/x-formwork-rules/1");
    assert_eq!(
        e.msg,
        "the end date is not before the start date: end_date should be greater than or equal to \
         start_date (end_date='2027-06-10', start_date='2027-06-12')"
    );
    assert_eq!(e.input, Value::String("2027-06-10".into()));
}
