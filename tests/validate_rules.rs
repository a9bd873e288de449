//! `x-formwork-rules` (docs/rules.md): comparisons, assertions, `when`, rules inside nested
//! subschemas, and the rule that rules never change the schema verdict.

use formwork::validate::{LocItem, Validator, Verdict};
use serde_json::{json, Value};

fn k(s: &str) -> LocItem {
    LocItem::Key(s.into())
}

#[test]
fn numbers_compare_exactly() {
    let v = Validator::new(&json!({
        "type": "object",
        "properties": {"min": {"type": "number"}, "max": {"type": "number"}},
        "x-formwork-rules": [{"field": "/max", "op": ">", "other": "/min"}]
    }))
    .unwrap();
    assert!(v
        .check(r#"{"min": 0.1, "max": 0.1000000000000000000001}"#)
        .is_valid());
    let verdict = v.check(r#"{"min": 0.1000000000000000000001, "max": 0.1}"#);
    let Verdict::SemanticInvalid(errors) = &verdict else {
        panic!("{verdict:?}")
    };
    assert_eq!(errors[0].loc, vec![k("max")]);
    assert_eq!(errors[0].fields, ["/max", "/min"]);
    assert_eq!(
        errors[0].msg,
        "max should be greater than min (max=0.1, min=0.1000000000000000000001)"
    );
    assert!(v.check(r#"{"min": 1e400, "max": 1e401}"#).is_valid());
    assert!(!v
        .check(r#"{"min": 18446744073709551617, "max": 18446744073709551616}"#)
        .is_valid());
}

#[test]
fn missing_or_null_fields_skip_a_comparison() {
    let v = Validator::new(&json!({
        "x-formwork-rules": [{"field": "/end", "op": ">=", "other": "/start"}]
    }))
    .unwrap();
    assert!(v.check(r#"{"start": "2027-01-02"}"#).is_valid());
    assert!(v
        .check(r#"{"start": "2027-01-02", "end": null}"#)
        .is_valid());
    assert!(!v
        .check(r#"{"start": "2027-01-02", "end": "2027-01-01"}"#)
        .is_valid());
    // Date-times compare as instants.
    assert!(v
        .check(r#"{"start": "2027-01-02T10:00:00+02:00", "end": "2027-01-02T08:30:00Z"}"#)
        .is_valid());
}

#[test]
fn values_that_cannot_be_ordered_are_a_semantic_error() {
    let v = Validator::new(&json!({
        "x-formwork-rules": [{"field": "/a", "op": "<", "other": "/b"}]
    }))
    .unwrap();
    let verdict = v.check(r#"{"a": "apple", "b": 3}"#);
    let e = &verdict.errors()[0];
    assert_eq!(e.r#type, "semantic");
    assert!(e.msg.contains("cannot be ordered"), "{}", e.msg);
    assert!(e.msg.contains("a string and a number"), "{}", e.msg);
    // Equality works on any values.
    let eq = Validator::new(&json!({
        "x-formwork-rules": [{"field": "/password", "op": "==", "other": "/confirm"}]
    }))
    .unwrap();
    assert!(eq.check(r#"{"password": "x", "confirm": "x"}"#).is_valid());
    assert!(!eq.check(r#"{"password": "x", "confirm": "y"}"#).is_valid());
}

#[test]
fn when_limits_a_rule() {
    let v = Validator::new(&json!({
        "x-formwork-rules": [{
            "when": {"properties": {"kind": {"const": "range"}}, "required": ["kind"]},
            "field": "/hi", "op": ">=", "other": "/lo"
        }]
    }))
    .unwrap();
    assert!(v.check(r#"{"kind": "other", "lo": 5, "hi": 1}"#).is_valid());
    let verdict = v.check(r#"{"kind": "range", "lo": 5, "hi": 1}"#);
    assert_eq!(verdict.errors()[0].fields, ["/kind", "/hi", "/lo"]);
}

#[test]
fn dependent_required_as_a_rule() {
    let v = Validator::new(&json!({
        "type": "object",
        "x-formwork-rules": [{
            "name": "shipping_needs_address",
            "assert": {"dependentRequired": {"ship": ["address"]}}
        }]
    }))
    .unwrap();
    let verdict = v.check(r#"{"ship": true}"#);
    let Verdict::SemanticInvalid(errors) = &verdict else {
        panic!("{verdict:?}")
    };
    assert_eq!(errors[0].loc, vec![k("address")]);
    assert_eq!(errors[0].fields, ["/ship", "/address"]);
    assert_eq!(
        errors[0].msg,
        "rule 'shipping_needs_address' failed: Field required (fields: ship, address)"
    );
    assert_eq!(
        errors[0].schema_path,
        "/x-formwork-rules/0/assert/dependentRequired"
    );
}

#[test]
fn rules_in_a_definition_apply_to_every_item() {
    let v = Validator::new(&json!({
        "type": "object",
        "$defs": {"Line": {
            "type": "object",
            "properties": {"qty": {"type": "integer"}, "max_qty": {"type": "integer"}},
            "x-formwork-rules": [{"field": "/qty", "op": "<=", "other": "/max_qty"}]
        }},
        "properties": {"lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}}}
    }))
    .unwrap();
    let verdict = v.check(
        r#"{"lines": [{"qty": 1, "max_qty": 5}, {"qty": 9, "max_qty": 5}, {"qty": 7, "max_qty": 6}]}"#,
    );
    let Verdict::SemanticInvalid(errors) = &verdict else {
        panic!("{verdict:?}")
    };
    let locs: Vec<&Vec<LocItem>> = errors.iter().map(|e| &e.loc).collect();
    assert_eq!(
        locs,
        [
            &vec![k("lines"), LocItem::Index(1), k("qty")],
            &vec![k("lines"), LocItem::Index(2), k("qty")]
        ]
    );
    assert_eq!(errors[0].fields, ["/lines/1/qty", "/lines/1/max_qty"]);
    assert_eq!(errors[0].schema_path, "/$defs/Line/x-formwork-rules/0");
}

#[test]
fn rules_under_an_optional_model_apply_when_the_model_is_there() {
    // Pydantic's Optional[Model]: anyOf [{$ref}, {type: null}].
    let v = Validator::new(&json!({
        "$defs": {"Range": {
            "type": "object",
            "x-formwork-rules": [{"field": "/hi", "op": ">=", "other": "/lo"}]
        }},
        "properties": {"r": {"anyOf": [{"$ref": "#/$defs/Range"}, {"type": "null"}]}}
    }))
    .unwrap();
    assert!(v.check(r#"{"r": null}"#).is_valid());
    assert!(v.check(r#"{"r": {"lo": 1, "hi": 2}}"#).is_valid());
    let verdict = v.check(r#"{"r": {"lo": 3, "hi": 2}}"#);
    let Verdict::SemanticInvalid(errors) = &verdict else {
        panic!("{verdict:?}")
    };
    assert_eq!(errors[0].loc, vec![k("r"), k("hi")]);
}

#[test]
fn rules_never_change_the_schema_verdict() {
    let v = Validator::new(&json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "x-formwork-rules": [{"field": "/a", "op": "<", "other": "/b"}]
    }))
    .unwrap();
    // Schema errors first and alone: the rule is not reported alongside.
    let verdict = v.check(r#"{"a": "x", "b": 1}"#);
    assert_eq!(verdict.kind(), "schema_invalid");
    assert!(verdict.errors().iter().all(|e| e.r#type != "semantic"));
    // And a schema without rules is unaffected by the keyword's absence.
    let plain = Validator::new(&json!({"type": "object"})).unwrap();
    assert!(!plain.has_rules());
    let Verdict::Valid(value) = plain.check(r#"{"a": 1}"#) else {
        unreachable!()
    };
    assert_eq!(value, json!({"a": 1}));
}

#[test]
fn every_broken_rule_is_reported() {
    let v = Validator::new(&json!({
        "x-formwork-rules": [
            {"field": "/a", "op": "<", "other": "/b"},
            {"field": "/b", "op": "<", "other": "/c"},
            {"assert": {"required": ["d", "e"]}}
        ]
    }))
    .unwrap();
    let verdict = v.check(r#"{"a": 3, "b": 2, "c": 1}"#);
    let paths: Vec<&str> = verdict
        .errors()
        .iter()
        .map(|e| e.schema_path.as_str())
        .collect();
    assert_eq!(
        paths,
        [
            "/x-formwork-rules/0",
            "/x-formwork-rules/1",
            "/x-formwork-rules/2/assert/required",
            "/x-formwork-rules/2/assert/required"
        ]
    );
    let v2: Value = verdict.to_json();
    assert_eq!(v2["verdict"], "semantic_invalid");
    assert_eq!(v2["error_count"], 4);
}

#[test]
fn a_validator_is_shared_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Validator>();
    let v = std::sync::Arc::new(
        Validator::new(&json!({"x-formwork-rules": [{"field": "/a", "op": "<", "other": "/b"}]}))
            .unwrap(),
    );
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let v = v.clone();
            std::thread::spawn(move || v.check(&format!(r#"{{"a": {i}, "b": 2}}"#)).is_valid())
        })
        .collect();
    let got: Vec<bool> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(got, [true, true, false, false]);
}
