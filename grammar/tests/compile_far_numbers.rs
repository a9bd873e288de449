//! Numbers beyond what 15 digits reach: bounds are read exactly and the range is written
//! with a fixed exponent (`formwork_grammar::num`, far numbers).

use formwork_grammar::compile::{compile, Config};
use formwork_grammar::ByteAutomaton;
use serde_json::Value;

fn valid(schema: &Value, text: &str) -> bool {
    let v = jsonschema::options().build(schema).expect("a valid schema");
    v.is_valid(&serde_json::from_str::<Value>(text).expect("JSON"))
}

// A regression: `{"type":"number","minimum":1e400,"maximum":1e401}` compiled to "no
// valid instance the grammar can produce", though 2e400 is valid.
#[test]
fn number_between_1e400_and_1e401_compiles_and_2e400_is_producible() {
    let schema: Value =
        serde_json::from_str(r#"{"type":"number","minimum":1e400,"maximum":1e401}"#).unwrap();
    let a = compile(&schema, &Config::default()).expect("compiles");
    assert!(a.accepts(b"2e400"), "2e400 is refused");
    assert!(a.accepts(b"1e400") && a.accepts(b"10e400") && a.accepts(b"9.99e400"));
    for text in [
        "0.9e400", "10.5e400", "2e399", "2", "2e401", "-2e400", "2e4000",
    ] {
        assert!(!a.accepts(text.as_bytes()), "{text} accepted");
        assert!(!valid(&schema, text), "{text}");
    }
    let shortest = a.shortest_completion(&a.start());
    let text = String::from_utf8(shortest).unwrap();
    assert_eq!(text, "1e400");
    assert!(valid(&schema, &text) && valid(&schema, "2e400"));
}

#[test]
fn far_bounds_are_exact_at_the_edges_and_for_negatives() {
    // Exclusive bounds exclude exactly the bound (the mantissa has at most 15 digits).
    let schema: Value = serde_json::from_str(
        r#"{"type":"number","exclusiveMinimum":1e400,"exclusiveMaximum":3e400}"#,
    )
    .unwrap();
    let a = compile(&schema, &Config::default()).expect("compiles");
    assert!(!a.accepts(b"1e400") && !a.accepts(b"3e400"));
    assert!(a.accepts(b"2e400") && a.accepts(b"1.00000000000001e400"));
    // Negative far ranges mirror.
    let schema: Value =
        serde_json::from_str(r#"{"minimum":-5e300,"maximum":-1e300,"type":"integer"}"#).unwrap();
    let a = compile(&schema, &Config::default()).expect("compiles");
    assert!(a.accepts(b"-3e300") && !a.accepts(b"-6e300") && !a.accepts(b"-0.5e300"));
    assert!(valid(&schema, "-3e300"));
    // multipleOf keeps its grid.
    let schema: Value =
        serde_json::from_str(r#"{"minimum":1e30,"maximum":1e31,"multipleOf":7}"#).unwrap();
    let a = compile(&schema, &Config::default()).expect("compiles");
    let mut s = a.start();
    let mut text = Vec::new();
    for &b in &a.shortest_completion(&s) {
        s = a.step(&s, b).unwrap();
        text.push(b);
    }
    let text = String::from_utf8(text).unwrap();
    assert!(valid(&schema, &text), "{text}");
}

#[test]
fn far_bounds_meet_in_all_of_and_not() {
    // allOf narrows the far range; not cuts it.
    let schema: Value = serde_json::from_str(
        r#"{"allOf":[{"minimum":1e400},{"maximum":5e400},{"not":{"minimum":3e400}}],"type":"number"}"#,
    )
    .unwrap();
    let a = compile(&schema, &Config::default()).expect("compiles");
    assert!(a.accepts(b"2e400"));
    assert!(!a.accepts(b"3e400") && !a.accepts(b"4e400"));
    // Branches with far ranges that overlap are not disjoint: oneOf is refused, not
    // compiled to a union that admits values matching both.
    let schema: Value =
        serde_json::from_str(r#"{"oneOf":[{"minimum":1e400},{"minimum":2e400}],"type":"number"}"#)
            .unwrap();
    if let Ok(a) = compile(&schema, &Config::default()) {
        assert!(!a.accepts(b"3e400"), "3e400 matches both branches");
    }
    // A far range does not swallow small literals nor a small range.
    let schema: Value = serde_json::from_str(r#"{"enum": [1, 2], "maximum": 1e400}"#).unwrap();
    let a = compile(&schema, &Config::default()).expect("compiles");
    assert!(a.accepts(b"1") && a.accepts(b"2"));
}

#[test]
fn bounds_beyond_ten_thousand_digits_are_infinite() {
    let schema: Value = serde_json::from_str(r#"{"type":"number","maximum":1e20000}"#).unwrap();
    let a = compile(&schema, &Config::default()).expect("compiles");
    assert!(a.accepts(b"12.5"));
    let schema: Value = serde_json::from_str(r#"{"type":"number","minimum":1e20000}"#).unwrap();
    assert!(compile(&schema, &Config::default()).is_err());
}
