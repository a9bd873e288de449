//! Strict and exact: no coercion, integers beyond 64 bits, decimals beyond f64, and the
//! formats the validator promises asserted (not annotated).

use formwork::validate::{Validator, Verdict};
use serde_json::{json, Value};

fn schema(text: &str) -> Validator {
    Validator::new(&serde_json::from_str::<Value>(text).unwrap()).unwrap()
}

fn types(v: &Verdict) -> Vec<String> {
    v.errors().iter().map(|e| e.r#type.clone()).collect()
}

#[test]
fn a_numeric_string_is_not_an_integer() {
    let v = schema(r#"{"type": "integer"}"#);
    let verdict = v.check(r#""250""#);
    assert_eq!(types(&verdict), ["int_type"]);
    assert_eq!(verdict.errors()[0].msg, "Input should be a valid integer");
    assert!(v.check("250").is_valid());
    // JSON Schema counts 1.0 as an integer (zero fractional part); so do we.
    assert!(v.check("1.0").is_valid());
    assert_eq!(types(&v.check("true")), ["int_type"]);
    let s = schema(r#"{"type": "string"}"#);
    assert_eq!(types(&s.check("250")), ["string_type"]);
    let b = schema(r#"{"type": "boolean"}"#);
    assert_eq!(types(&b.check(r#""true""#)), ["bool_type"]);
}

#[test]
fn multiple_of_a_hundredth_is_exact() {
    let v = schema(r#"{"multipleOf": 0.01}"#);
    assert!(v.check("19.99").is_valid());
    assert!(v.check("0.07").is_valid());
    assert!(v.check("12345678901234567890.01").is_valid());
    let bad = v.check("19.991");
    assert_eq!(types(&bad), ["multiple_of"]);
    assert_eq!(bad.errors()[0].msg, "Input should be a multiple of 0.01");
    let tenth = schema(r#"{"multipleOf": 0.1}"#);
    assert!(tenth.check("0.3").is_valid());
}

#[test]
fn integers_beyond_64_bits() {
    let v = schema(r#"{"type": "integer", "maximum": 18446744073709551616}"#);
    assert!(v.check("18446744073709551615").is_valid());
    assert!(v.check("18446744073709551616").is_valid());
    let over = v.check("18446744073709551617");
    assert_eq!(types(&over), ["less_than_equal"]);
    assert_eq!(
        over.errors()[0].msg,
        "Input should be less than or equal to 18446744073709551616"
    );
    // The value survives exactly into the verdict.
    let Verdict::Valid(value) = v.check("18446744073709551615") else {
        unreachable!()
    };
    assert_eq!(value.to_string(), "18446744073709551615");
    let three = schema(r#"{"multipleOf": 3}"#);
    assert!(three.check("123456789012345678901234567890").is_valid());
    assert!(!three.check("123456789012345678901234567891").is_valid());
}

#[test]
fn decimals_beyond_f64() {
    let v = schema(r#"{"exclusiveMaximum": 0.1}"#);
    assert_eq!(types(&v.check("0.1000000000000000000001")), ["less_than"]);
    assert!(v.check("0.0999999999999999999999").is_valid());
    let m = schema(r#"{"minimum": 0.1000000000000000000001}"#);
    assert_eq!(types(&m.check("0.1")), ["greater_than_equal"]);
    let c = schema(r#"{"const": 0.30000000000000000001}"#);
    assert_eq!(types(&c.check("0.30000000000000000002")), ["literal_error"]);
}

#[test]
fn huge_exponents_are_numbers_not_errors() {
    let v = schema(r#"{"type": "integer", "maximum": 5000}"#);
    let verdict = v.check("1e400");
    assert_eq!(types(&verdict), ["less_than_equal"]);
    assert_eq!(verdict.errors()[0].input.to_string(), "1e+400");
    assert!(v.check("-1e400").is_valid());
    let n = schema(r#"{"type": "number", "minimum": 1e400}"#);
    assert_eq!(types(&n.check("1e399")), ["greater_than_equal"]);
    assert_eq!(
        types(&schema(r#"{"type": "integer"}"#).check("1e-400")),
        ["int_type"]
    );
}

#[test]
fn the_listed_formats_are_asserted() {
    // (format, valid examples, invalid examples)
    let table: &[(&str, &[&str], &[&str])] = &[
        (
            "date",
            &["2027-06-12", "2028-02-29"],
            &["2027-02-30", "12/06/2027", "2027-6-1"],
        ),
        (
            "time",
            &["10:00:00Z", "23:59:59.5+02:00"],
            &["25:00:00Z", "10:00"],
        ),
        (
            "date-time",
            &["2027-06-12T10:00:00Z", "2027-06-12T10:00:00.123+01:00"],
            &["2027-06-12 10:00", "2027-06-12T25:00:00Z"],
        ),
        ("duration", &["P1D", "PT4H30M", "P3W"], &["P1", "1D", "PT"]),
        ("email", &["a.b@example.com"], &["not an email", "a@@b"]),
        (
            "hostname",
            &["example.com", "a-b.c"],
            &["-foo", "a..b", "exa mple.com"],
        ),
        ("ipv4", &["192.168.0.1"], &["1.2.3", "256.0.0.1"]),
        (
            "ipv6",
            &["::1", "2001:db8::8a2e:370:7334"],
            &["12345::", "1.2.3.4"],
        ),
        (
            "uuid",
            &["123e4567-e89b-12d3-a456-426614174000"],
            &["123e4567e89b12d3a456426614174000x", "foo"],
        ),
        (
            "uri",
            &["https://example.com/a?b#c", "urn:isbn:0451450523"],
            &["foo", "//no-scheme"],
        ),
    ];
    for (format, good, bad) in table {
        let v = Validator::new(&json!({"type": "string", "format": format})).unwrap();
        for g in *good {
            assert!(
                v.check_value(&json!(g)).is_valid(),
                "{format}: {g} should be valid"
            );
        }
        for b in *bad {
            let verdict = v.check_value(&json!(b));
            assert!(
                matches!(verdict, Verdict::SchemaInvalid(_)),
                "{format}: {b} should be invalid, got {verdict:?}"
            );
            let e = &verdict.errors()[0];
            assert_eq!(e.schema_path, "/format", "{format}");
            assert_ne!(e.r#type, "format_mismatch", "{format} has a named type");
        }
        // Formats are asserted in every draft, not only where the draft says so.
        let old = Validator::new(&json!({
            "$schema": "http://json-schema.org/draft-04/schema#", "format": format
        }))
        .unwrap();
        assert!(
            !old.check_value(&json!(bad[0])).is_valid(),
            "{format} under draft 4"
        );
    }
}
