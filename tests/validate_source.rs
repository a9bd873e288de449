//! `x-formwork-source` in the validator (docs/source.md): with a document, marked strings
//! that are not spans are `semantic` failures typed `not_in_source`; without one, the keyword
//! is inert. The CLI's `--source FILE` does the same.

use std::io::Write;
use std::process::{Command, Stdio};

use formwork::validate::{LocItem, Validator, Verdict};
use serde_json::{json, Value};

fn schema() -> Value {
    json!({
        "title": "Booking",
        "$defs": {"Loc": {"type": "object", "properties": {
            "city": {"type": ["string", "null"], "x-formwork-source": "words"}
        }}},
        "type": "object",
        "properties": {
            "name": {"anyOf": [{"type": "string", "x-formwork-source": "substring"}, {"type": "null"}]},
            "loc": {"$ref": "#/$defs/Loc"},
            "tags": {"type": "array", "items": {"type": "string", "x-formwork-source": "words"}},
            "n": {"type": "integer"}
        },
        "x-formwork-rules": [{"field": "/n", "op": ">", "other": "/n"}]
    })
}

const DOC: &str = "Table at Chez Nous in \"Paris\"\nfor 2, please";

fn errors(v: &Validator, text: &str) -> Vec<(Vec<LocItem>, String, String)> {
    match v.check(text) {
        Verdict::SemanticInvalid(e) => e.into_iter().map(|e| (e.loc, e.r#type, e.msg)).collect(),
        Verdict::Valid(_) => Vec::new(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn marked_values_must_be_spans_of_the_document() {
    let mut s = schema();
    s.as_object_mut().unwrap().remove("x-formwork-rules");
    let v = Validator::with_source(&s, DOC).unwrap();
    let ok = r#"{"name": "ez No", "loc": {"city": "\"Paris\"\nfor"}, "tags": ["Chez Nous", "2, please"], "n": 1}"#;
    assert!(v.check(ok).is_valid(), "{:?}", v.check(ok));
    assert!(v
        .check(r#"{"name": null, "loc": {"city": null}}"#)
        .is_valid());
    let bad = r#"{"name": "Chez Vous", "loc": {"city": "Pari"}, "tags": ["Nous", "hez"], "n": 1}"#;
    let e = errors(&v, bad);
    let locs: Vec<String> = e
        .iter()
        .map(|(l, _, _)| {
            l.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(".")
        })
        .collect();
    assert_eq!(locs, ["name", "loc.city", "tags.1"], "{e:?}");
    assert!(e.iter().all(|(_, t, _)| t == "not_in_source"));
    assert!(e[1].2.contains("word boundaries"), "{}", e[1].2);
    // The empty string is never a span.
    assert_eq!(errors(&v, r#"{"name": ""}"#).len(), 1);
    // A schema error stays a schema error.
    assert!(matches!(
        v.check(r#"{"n": "x", "name": "zz"}"#),
        Verdict::SchemaInvalid(_)
    ));
    // Without a document the keyword is inert.
    assert!(Validator::new(&s).unwrap().check(bad).is_valid());
}

#[test]
fn source_errors_sit_beside_rule_errors() {
    let v = Validator::with_source(&schema(), DOC).unwrap();
    let e = errors(&v, r#"{"name": "nope", "n": 1}"#);
    let types: Vec<&str> = e.iter().map(|(_, t, _)| t.as_str()).collect();
    assert_eq!(types, ["semantic", "not_in_source"], "{e:?}");
}

#[test]
fn a_bad_keyword_value_is_a_schema_error_at_its_pointer() {
    let s = json!({"properties": {"a": {"type": "string", "x-formwork-source": "lines"}}});
    let e = Validator::with_source(&s, DOC).unwrap_err().to_string();
    assert!(e.contains("/properties/a") && e.contains("lines"), "{e}");
}

#[test]
fn cli_source_flag() {
    let dir = std::env::temp_dir().join(format!("formwork-source-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sp = dir.join("s.json");
    let dp = dir.join("doc.txt");
    let mut s = schema();
    s.as_object_mut().unwrap().remove("x-formwork-rules");
    std::fs::write(&sp, s.to_string()).unwrap();
    std::fs::write(&dp, DOC).unwrap();
    let run = |args: &[&str], input: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_formwork"))
            .arg("validate")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let _ = c.stdin.take().unwrap().write_all(input.as_bytes());
        let o = c.wait_with_output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let sps = sp.to_string_lossy().into_owned();
    let dps = dp.to_string_lossy().into_owned();
    let bad = r#"{"name": "Chez Vous"}"#;
    let (code, out) = run(&["--schema", &sps, "--source", &dps], bad);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("type=not_in_source") && out.contains("name"),
        "{out}"
    );
    let (code, out) = run(&["--schema", &sps, "--source", &dps, "--json"], bad);
    assert_eq!(code, Some(1));
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["verdict"], "semantic_invalid");
    assert_eq!(j["errors"][0]["type"], "not_in_source");
    assert_eq!(
        run(&["--schema", &sps], bad).0,
        Some(0),
        "inert without --source"
    );
    assert_eq!(
        run(&["--schema", &sps, "--source", &dps], r#"{"name": "Chez"}"#).0,
        Some(0)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
