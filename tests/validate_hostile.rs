//! Bad input gives an error, with no panic and no stack overflow. The deep cases run in a
//! thread with the default 2 MiB stack (not the main thread's 8 MiB), as a server's worker
//! would.

use formwork::validate::{SchemaError, Validator, Verdict, MAX_DEPTH};
use serde_json::{json, Value};

/// Run `f` in a fresh thread with the standard stack size.
fn on_normal_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(f)
        .unwrap()
        .join()
        .expect("no panic, no overflow")
}

/// A value nested `depth` levels deep, built and later dropped without recursion.
fn nested_arrays(depth: usize) -> Value {
    let mut v = json!(1);
    for _ in 0..depth {
        v = Value::Array(vec![v]);
    }
    v
}

/// Built by hand: `json!` serializes an interpolated value by reference, recursively.
fn nested_schema(depth: usize) -> Value {
    let mut v = json!({"type": "integer"});
    for _ in 0..depth {
        let mut m = serde_json::Map::new();
        m.insert("type".into(), Value::from("array"));
        m.insert("items".into(), v);
        v = Value::Object(m);
    }
    v
}

/// serde_json's drop recurses; take a deep value apart iteratively.
fn dismantle(v: Value) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(a) => stack.extend(a),
            Value::Object(o) => stack.extend(o.into_iter().map(|(_, c)| c)),
            _ => {}
        }
    }
}

#[test]
fn a_schema_that_is_not_a_schema() {
    assert_eq!(
        Validator::new(&json!(42)).unwrap_err(),
        SchemaError::NotASchema { found: "number" }
    );
    assert!(matches!(
        Validator::new(&json!([{"type": "string"}])),
        Err(SchemaError::NotASchema { found: "array" })
    ));
    // `true` and `false` are schemas.
    assert!(Validator::new(&json!(true)).unwrap().check("1").is_valid());
    assert!(!Validator::new(&json!(false)).unwrap().check("1").is_valid());
    // Invalid for the meta-schema: named by pointer.
    let e = Validator::new(&json!({"properties": {"a": {"type": 5}}})).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("/properties/a/type"), "{text}");
    assert!(!text.contains('\n'));
    // Unknown draft.
    let e = Validator::new(&json!({"$schema": "http://example.com/my-meta"})).unwrap_err();
    assert!(e.to_string().contains("http://example.com/my-meta"), "{e}");
}

#[test]
fn a_schema_text_that_is_not_json_is_a_cli_error() {
    // The library takes a parsed schema; the CLI turns unparsable text into exit code 2 (see
    // validate_cli.rs). Here: serde_json refuses it with a position, without panicking.
    let r = serde_json::from_str::<Value>("{\"type\": ");
    assert!(r.is_err());
}

#[test]
fn remote_and_unresolvable_refs_are_named() {
    let e = Validator::new(&json!({"$ref": "https://example.com/schemas/order.json"})).unwrap_err();
    match &e {
        SchemaError::Reference { reference, .. } => {
            assert_eq!(reference, "https://example.com/schemas/order.json")
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("never fetches"), "{e}");
    let e = Validator::new(&json!({"properties": {"a": {"$ref": "#/$defs/Missing"}}})).unwrap_err();
    assert!(e.to_string().contains("#/$defs/Missing"), "{e}");
    // A relative ref with no base resolves against nothing: also named, never fetched.
    let e = Validator::new(&json!({"$ref": "other.json"})).unwrap_err();
    assert!(e.to_string().contains("other.json"), "{e}");
    // A cycle of refs is not an infinite loop.
    let v = Validator::new(&json!({
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
        "$ref": "#/$defs/a"
    }));
    if let Ok(v) = v {
        let _ = v.check("1");
    }
}

#[test]
fn instance_text_100k_levels_deep_is_not_json() {
    let verdict = on_normal_stack(|| {
        let v = Validator::new(&json!({"items": {"$ref": "#"}})).unwrap();
        let text = "[".repeat(100_000) + &"]".repeat(100_000);
        v.check(&text)
    });
    let Verdict::NotJson(e) = verdict else {
        panic!("{verdict:?}")
    };
    assert!(e.msg.contains("recursion limit"), "{e}");
    assert_eq!(e.line, 1);
}

#[test]
fn instance_value_100k_levels_deep_is_refused_before_validation() {
    let (kind, loc_len, deep) = on_normal_stack(|| {
        let v = Validator::new(&json!({"items": {"$ref": "#"}})).unwrap();
        let deep = nested_arrays(100_000);
        let verdict = v.check_value(&deep);
        let kind = verdict.errors().first().map(|e| e.r#type.clone());
        let loc_len = verdict.errors().first().map(|e| e.loc.len());
        dismantle(deep);
        (kind, loc_len, verdict.kind())
    });
    assert_eq!(deep, "schema_invalid");
    assert_eq!(kind.as_deref(), Some("nesting_too_deep"));
    assert_eq!(loc_len, Some(MAX_DEPTH));
}

#[test]
fn at_the_depth_limit_validation_still_runs_on_a_normal_stack() {
    let verdicts = on_normal_stack(|| {
        let v = Validator::new(&json!({
            "$defs": {"n": {"anyOf": [{"type": "integer"}, {"type": "array", "items": {"$ref": "#/$defs/n"}}]}},
            "$ref": "#/$defs/n"
        }))
        .unwrap();
        let ok = nested_arrays(MAX_DEPTH);
        let text_bad = "[".repeat(MAX_DEPTH - 1) + "\"x\"" + &"]".repeat(MAX_DEPTH - 1);
        let r = (v.check_value(&ok).kind(), v.check(&text_bad).kind());
        dismantle(ok);
        r
    });
    assert_eq!(verdicts, ("valid", "schema_invalid"));
}

#[test]
fn schema_100k_levels_deep_is_refused() {
    let err = on_normal_stack(|| {
        let s = nested_schema(100_000);
        let e = Validator::new(&s).unwrap_err();
        dismantle(s);
        e
    });
    assert!(
        matches!(
            err,
            SchemaError::TooDeep {
                limit: MAX_DEPTH,
                ..
            }
        ),
        "{err}"
    );
    // And as text, serde_json refuses it first.
    let text = "{\"items\":".repeat(100_000) + "{}" + &"}".repeat(100_000);
    assert!(serde_json::from_str::<Value>(&text).is_err());
}

#[test]
fn a_50_mb_string() {
    let big = "x".repeat(50 * 1024 * 1024);
    let text = format!("{{\"motivo\": \"{big}\"}}");
    let v = Validator::new(&json!({
        "title": "T", "type": "object",
        "properties": {"motivo": {"type": "string", "maxLength": 200}}
    }))
    .unwrap();
    let verdict = v.check(&text);
    let errors = verdict.errors();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].r#type, "string_too_long");
    // The input is cut, and so is the rendering.
    assert_eq!(errors[0].input.as_str().unwrap().chars().count(), 50);
    let rendered = formwork::validate::render_pydantic("T", errors);
    assert!(rendered.len() < 300, "{}", rendered.len());
    // Tolerant extraction of a 50 MB text without any JSON in it finds nothing (that its
    // scans stay linear is counted by the extractor's own tests, and timed by
    // `cargo bench --bench validate_hostile`).
    let (verdict, found) = v.check_tolerant(&format!("{{{big}"));
    assert!(matches!(verdict, Verdict::NotJson(_)));
    assert!(found.is_none());
}

#[test]
fn bad_rules_are_schema_errors_naming_the_pointer() {
    let cases = [
        (json!({"x-formwork-rules": {}}), "/x-formwork-rules"),
        (
            json!({"x-formwork-rules": [{"field": "/a", "op": "~", "other": "/b"}]}),
            "/x-formwork-rules/0/op",
        ),
        (
            json!({"x-formwork-rules": [{"field": "a", "op": ">", "other": "/b"}]}),
            "/x-formwork-rules/0/field",
        ),
        (
            json!({"x-formwork-rules": [{"field": "/a", "op": ">"}]}),
            "/x-formwork-rules/0",
        ),
        (
            json!({"x-formwork-rules": [{"assert": 3}]}),
            "/x-formwork-rules/0/assert",
        ),
        (
            json!({"x-formwork-rules": [{"asert": {}}]}),
            "/x-formwork-rules/0/asert",
        ),
        (
            json!({"x-formwork-rules": [{"assert": {"$ref": "#/$defs/nope"}}]}),
            "/x-formwork-rules/0/assert",
        ),
        (
            json!({"not": {"x-formwork-rules": []}}),
            "/not/x-formwork-rules",
        ),
    ];
    for (schema, pointer) in cases {
        let e = Validator::new(&schema).unwrap_err();
        assert!(e.to_string().contains(pointer), "{schema}: {e}");
    }
}
