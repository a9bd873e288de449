//! Inputs the fuzz targets found, minimised, each named after what it pins. The full
//! inputs are kept in `fuzz/corpus/TARGET/` under the same names.

use formwork_grammar::compile::{compile, CompileError, Config};
use serde_json::json;

fn lenient() -> Config {
    Config {
        lenient: true,
        ..Config::default()
    }
}

// See: fuzz target `compile_structured`, input `not_of_narrowed_not` (found by the stable
// smoke run). `not {not X}` negated the *narrowed* reading of `not X` (the non-arrays:
// "some item fails X's items" cannot be written as a conjunction), so it accepted every
// array, `[0]` too, though X's items need at least 6.
#[test]
fn not_of_a_narrowed_not_is_refused_not_widened() {
    let x = json!({"type": "array", "items": {"minimum": 6}});
    let schema = json!({"not": {"not": x}});
    match compile(&schema, &Config::default()) {
        Err(CompileError::Unsupported {
            keyword, pointer, ..
        }) => {
            assert_eq!((keyword.as_str(), pointer.as_str()), ("not", "/not"));
        }
        Err(e) => panic!("expected `not` refused at /not, got {e}"),
        Ok(a) => panic!("compiled; accepts [0]: {}", a.accepts(b"[0]")),
    }
    // Lenient: the outer `not` is relaxed (the validator checks it), never widened into
    // the grammar; what is generated is still valid for X-free reasons only.
    let a = compile(&schema, &lenient()).expect("compiles leniently");
    assert!(a
        .relaxed()
        .iter()
        .any(|r| r.keyword == "not" && r.pointer == "/not"));
    // The case as found: `not {anyOf: [not X, not Y]}`.
    let found = json!({"not": {"anyOf": [
        {"not": {"type": "array", "items": {"type": "integer", "minimum": 6, "maximum": 35, "multipleOf": 2}, "minItems": 0, "maxItems": 1}},
        {"not": {"if": {"type": "string", "minLength": 0, "maxLength": 4}, "then": {"type": ["null", "boolean"]}, "else": true}}
    ]}});
    if let Ok(a) = compile(&found, &Config::default()) {
        assert!(!a.accepts(b"[0]"), "[0] accepted");
    }
}

// The same for the other consumers of an exact reading: an `if` condition and the
// branches of a `oneOf`.
#[test]
fn if_and_one_of_over_a_narrowed_schema_are_refused() {
    let narrowed = json!({"not": {"type": "array", "items": {"minimum": 6}}});
    let cond = json!({"if": narrowed, "then": {"type": "array", "maxItems": 0}, "else": true});
    let e = compile(&cond, &Config::default()).err().expect("refused");
    assert!(
        matches!(&e, CompileError::Unsupported { keyword, pointer, .. } if keyword == "if" && pointer == "/if"),
        "{e}"
    );
    let one = json!({"oneOf": [narrowed, {"type": "string"}]});
    let e = compile(&one, &Config::default()).err().expect("refused");
    assert!(
        matches!(&e, CompileError::Unsupported { keyword, pointer, .. } if keyword == "oneOf" && pointer == "/oneOf"),
        "{e}"
    );
    // A plain `not` still compiles, exactly as before.
    let a = compile(&json!({"not": {"type": "string"}}), &Config::default()).unwrap();
    assert!(a.accepts(b"1") && !a.accepts(b"\"a\""));
}
