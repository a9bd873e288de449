//! The draft comes from `$schema`; without it, draft 2020-12 (`DEFAULT_DRAFT`).

use formwork::validate::{Draft, SchemaError, Validator, DEFAULT_DRAFT};
use serde_json::json;

#[test]
fn without_schema_the_default_is_2020_12() {
    assert_eq!(DEFAULT_DRAFT, Draft::Draft202012);
    let v = Validator::new(&json!({"prefixItems": [{"type": "integer"}], "items": false})).unwrap();
    assert_eq!(v.draft(), Draft::Draft202012);
    assert!(v.check("[1]").is_valid());
    assert_eq!(v.check("[1, 2]").errors()[0].r#type, "too_long");
    assert_eq!(v.check(r#"["a"]"#).errors()[0].r#type, "int_type");
    // The draft-7 tuple form is a schema error under 2020-12, loudly.
    assert!(matches!(
        Validator::new(&json!({"items": [{"type": "integer"}]})),
        Err(SchemaError::Invalid { .. })
    ));
    // dependentRequired is a 2019-09+ keyword: honoured by default.
    let d = Validator::new(&json!({"dependentRequired": {"a": ["b"]}})).unwrap();
    assert_eq!(d.check(r#"{"a": 1}"#).errors()[0].r#type, "missing");
}

#[test]
fn declared_drafts_are_honoured() {
    let cases = [
        ("http://json-schema.org/draft-04/schema#", Draft::Draft4),
        ("http://json-schema.org/draft-04/schema", Draft::Draft4),
        ("https://json-schema.org/draft-06/schema#", Draft::Draft6),
        ("http://json-schema.org/draft-07/schema#", Draft::Draft7),
        (
            "https://json-schema.org/draft/2019-09/schema",
            Draft::Draft201909,
        ),
        (
            "https://json-schema.org/draft/2020-12/schema",
            Draft::Draft202012,
        ),
    ];
    for (uri, draft) in cases {
        let v = Validator::new(&json!({"$schema": uri, "type": "integer"})).unwrap();
        assert_eq!(v.draft(), draft, "{uri}");
        assert_eq!(v.check(r#""250""#).errors()[0].r#type, "int_type", "{uri}");
    }
}

#[test]
fn draft_4_forms() {
    let v = Validator::new(&json!({
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {
            "pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": false},
            "n": {"type": "number", "maximum": 10, "exclusiveMaximum": true}
        }
    }))
    .unwrap();
    assert!(v.check(r#"{"pair": ["a", 1], "n": 9.5}"#).is_valid());
    let verdict = v.check(r#"{"pair": ["a", 1, 2], "n": 10}"#);
    let types: Vec<&str> = verdict.errors().iter().map(|e| e.r#type.as_str()).collect();
    assert_eq!(types, ["too_long", "less_than"]);
}

#[test]
fn draft_7_dependencies() {
    let v = Validator::new(&json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "dependencies": {"ship": ["address"]}
    }))
    .unwrap();
    let verdict = v.check(r#"{"ship": true}"#);
    assert_eq!(verdict.errors()[0].r#type, "missing");
    assert_eq!(verdict.errors()[0].loc_string(), "address");
}

#[test]
fn the_suite_runner_can_force_a_default() {
    let v = Validator::with_default_draft(&json!({"items": [{"type": "integer"}]}), Draft::Draft7)
        .unwrap();
    assert_eq!(v.draft(), Draft::Draft7);
    assert!(!v.check(r#"["a"]"#).is_valid());
    // A declared $schema still wins over the default.
    let v = Validator::with_default_draft(
        &json!({"$schema": "https://json-schema.org/draft/2020-12/schema"}),
        Draft::Draft4,
    )
    .unwrap();
    assert_eq!(v.draft(), Draft::Draft202012);
}
