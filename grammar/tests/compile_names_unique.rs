//! `propertyNames` and `uniqueItems`: enforced exactly where decidable, refused elsewhere
//! with the keyword and its JSON Pointer.

use formwork_grammar::compile::{compile, CompileError, Config};
use formwork_grammar::ByteAutomaton;
use serde_json::{json, Value};

#[track_caller]
fn check(schema: Value, yes: &[&str], no: &[&str]) {
    let a = compile(&schema, &Config::default()).unwrap_or_else(|e| panic!("{schema}: {e}"));
    for t in yes {
        assert!(
            a.accepts(t.as_bytes()),
            "{schema} should accept {t} (refused at byte {})",
            a.accepted_prefix(t.as_bytes())
        );
    }
    for t in no {
        assert!(!a.accepts(t.as_bytes()), "{schema} should refuse {t}");
    }
    let c = a.shortest_completion(&a.start());
    assert!(
        a.accepts(&c),
        "{schema}: shortest completion {:?} not accepted",
        String::from_utf8_lossy(&c)
    );
}

#[track_caller]
fn refused(schema: Value, kw: &str, ptr: &str) {
    match compile(&schema, &Config::default()) {
        Ok(_) => panic!("{schema} should not compile"),
        Err(CompileError::Unsupported {
            keyword, pointer, ..
        }) => {
            assert_eq!(keyword, kw, "{schema}");
            assert_eq!(pointer, ptr, "{schema}");
        }
        Err(e) => panic!("{schema}: {e}"),
    }
}

#[test]
fn property_names_listed() {
    // A listed name that fails propertyNames is never generated.
    check(
        json!({"type": "object", "properties": {"ab": {"type": "integer"}, "toolong": {"type": "integer"}},
               "propertyNames": {"maxLength": 3}, "additionalProperties": false}),
        &["{}", "{\"ab\":1}"],
        &["{\"toolong\":1}", "{\"ab\":1,\"toolong\":2}"],
    );
    check(
        json!({"type": "object", "properties": {"a_b": {}, "AB": {"type": "null"}},
               "propertyNames": {"pattern": "^[a-z_]+$"}}),
        &["{\"a_b\":1}", "{}"],
        &["{\"AB\":null}"],
    );
    check(
        json!({"type": "object", "properties": {"x": {"type": "null"}, "y": {"type": "null"}},
               "propertyNames": {"enum": ["x", "z"]}}),
        &["{\"x\":null}"],
        &["{\"y\":null}"],
    );
    // A required name that fails: the object alternative is unsatisfiable.
    check(
        json!({"anyOf": [{"type": "object", "properties": {"bad": {}}, "required": ["bad"],
                          "propertyNames": {"const": "good"}},
                         {"type": "null"}]}),
        &["null"],
        &["{\"bad\":1}", "{}"],
    );
}

#[test]
fn property_names_extra_keys() {
    // Free-form keys (no `properties`): only keys of the key language.
    check(
        json!({"type": "object", "additionalProperties": {"type": "integer"},
               "propertyNames": {"pattern": "^[a-c]+$", "maxLength": 2}}),
        &["{}", "{\"a\":1}", "{\"ab\":1,\"cc\":2}"],
        &["{\"d\":1}", "{\"abc\":1}", "{\"\":1}", "{\"a\":\"x\"}"],
    );
    check(
        json!({"type": "object", "propertyNames": {"minLength": 2}}),
        &["{\"ab\":null}", "{}"],
        &["{\"a\":null}"],
    );
    // An enum of names becomes optional listed properties.
    check(
        json!({"type": "object", "additionalProperties": {"type": "boolean"},
               "propertyNames": {"enum": ["p", "q"]}}),
        &["{\"p\":true}", "{\"p\":true,\"q\":false}", "{}"],
        &["{\"r\":true}", "{\"p\":1}"],
    );
    // Listed names excluded, extra keys still in the language.
    check(
        json!({"type": "object", "properties": {"a": {"type": "null"}}, "additionalProperties": {"type": "integer"},
               "propertyNames": {"pattern": "^a+$"}}),
        &["{\"a\":null}", "{\"a\":null,\"aa\":1}"],
        &["{\"a\":1}", "{\"b\":1}"],
    );
    // The key language is exhausted by the listed names: no extra keys at all.
    check(
        json!({"type": "object", "properties": {"a": {"type": "null"}}, "additionalProperties": {"type": "integer"},
               "propertyNames": {"pattern": "^a$"}}),
        &["{\"a\":null}", "{}"],
        &["{\"a\":null,\"b\":1}", "{\"b\":1}"],
    );
    // propertyNames: false admits only the empty object.
    check(
        json!({"type": "object", "properties": {"a": {}}, "propertyNames": false}),
        &["{}"],
        &["{\"a\":1}", "{\"b\":1}"],
    );
    // Keys must be strings: a non-string key schema admits no key.
    check(
        json!({"type": "object", "propertyNames": {"type": "number"}}),
        &["{}"],
        &["{\"a\":1}"],
    );
    // Object literals are checked against propertyNames.
    check(
        json!({"enum": [{"a": 1}, {"bb": 1}], "propertyNames": {"maxLength": 1}}),
        &["{\"a\":1}"],
        &["{\"bb\":1}"],
    );
}

#[test]
fn property_names_lenient_unneeded() {
    // The old refusal is gone: strict compile records nothing relaxed.
    let a = compile(
        &json!({"type": "object", "propertyNames": {"format": "email"}}),
        &Config {
            lenient: true,
            ..Config::default()
        },
    )
    .unwrap();
    assert!(a.relaxed().is_empty());
}

#[test]
fn property_names_refused() {
    // What the key schema cannot enforce is refused at its own pointer.
    refused(
        json!({"type": "object", "propertyNames": {"format": "no-such-format"}}),
        "format",
        "/propertyNames/format",
    );
    refused(
        json!({"type": "object", "properties": {"a": {}}, "propertyNames": {"not": {"pattern": "b"}}}),
        "not",
        "/propertyNames/not",
    );
}

#[test]
fn unique_items_enforced() {
    check(
        json!({"type": "array", "items": {"type": "integer"}, "maxItems": 1, "uniqueItems": true}),
        &["[]", "[1]"],
        &["[1,1]", "[1,2]"],
    );
    check(
        json!({"type": "array", "prefixItems": [{"const": "a"}, {"enum": ["b", "c"]}],
               "items": false, "uniqueItems": true}),
        &["[]", "[\"a\"]", "[\"a\",\"b\"]", "[\"a\",\"c\"]"],
        &["[\"a\",\"a\"]", "[\"a\",\"b\",\"c\"]"],
    );
    check(
        json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
               "items": [{"type": "null"}, {"type": "boolean"}], "additionalItems": false,
               "uniqueItems": true}),
        &["[null,true]"],
        &["[null,null]"],
    );
    // Disjoint JSON types never repeat.
    check(
        json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}, {"type": "object"}],
               "items": false, "minItems": 2, "uniqueItems": true}),
        &["[\"a\",1]", "[\"a\",1,{}]"],
        &["[\"a\"]", "[1,\"a\"]"],
    );
    // Literal arrays are checked for duplicates.
    check(
        json!({"enum": [[1, 1], [1, 2]], "uniqueItems": true}),
        &["[1,2]"],
        &["[1,1]"],
    );
    // An open list of literals (Pydantic's `set[Literal[...]]`): no literal twice.
    check(
        json!({"type": "object", "properties": {"a": {"type": "array", "maxItems": 2,
               "items": {"enum": [1, 2]}, "uniqueItems": true}}}),
        &["{\"a\":[1,2]}", "{\"a\":[2,1]}", "{\"a\":[]}"],
        &["{\"a\":[1,1]}", "{\"a\":[2,2]}", "{\"a\":[1,2,1]}"],
    );
    check(
        json!({"type": "array", "items": {"type": "string", "enum": ["x", "y", "xy"]},
               "uniqueItems": true}),
        &["[]", "[\"x\",\"xy\",\"y\"]", "[\"xy\",\"x\"]"],
        &[
            "[\"x\",\"x\"]",
            "[\"xy\",\"y\",\"xy\"]",
            "[\"x\",\"y\",\"xy\",\"x\"]",
        ],
    );
    check(
        json!({"type": "array", "items": {"type": "boolean"}, "minItems": 2, "uniqueItems": true}),
        &["[true,false]", "[false,true]"],
        &["[true,true]", "[true]", "[true,false,true]"],
    );
    check(
        json!({"type": "array", "items": {"enum": [1, 10, null, "1"]}, "uniqueItems": true}),
        &["[10,1,null,\"1\"]", "[1,10]"],
        &["[10,10]", "[null,1,null]"],
    );
    // Shortest completions take the shortest unused literals.
    let a = compile(
        &json!({"type": "array", "items": {"enum": ["bb", "a", "ccc"]}, "minItems": 2,
                "uniqueItems": true}),
        &Config::default(),
    )
    .unwrap();
    let at = |text: &[u8]| {
        text.iter()
            .fold(a.start(), |s, &b| a.step(&s, b).expect("prefix accepted"))
    };
    assert_eq!(a.shortest_completion(&a.start()), b"[\"a\",\"bb\"]");
    assert_eq!(a.shortest_completion(&at(b"[\"a\",")), b"\"bb\"]");
    assert_eq!(a.shortest_completion(&at(b"[\"bb\"")), b",\"a\"]");
    assert_eq!(a.shortest_completion(&at(b"[\"bb\",\"a\"")), b"]");
    // Not an array: the keyword does not apply.
    check(
        json!({"type": "string", "uniqueItems": true}),
        &["\"a\""],
        &[],
    );
}

/// `minProperties` with unlisted keys (Pydantic's `dict[str, str]` with `min_length=1`):
/// one extra key counts, because its name differs from every listed one; more would
/// need distinct names, which the grammar does not track.
#[test]
fn min_properties_reached_by_one_extra_key() {
    check(
        json!({"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}}),
        &["{\"a\":\"x\"}", "{\"a\":\"x\",\"b\":\"y\"}", "{\"\":\"\"}"],
        &["{}"],
    );
    check(
        json!({"type": "object", "properties": {"p": {"type": "integer"}}, "minProperties": 2,
               "maxProperties": 3, "additionalProperties": {"type": "string"}}),
        &["{\"p\":1,\"x\":\"y\"}", "{\"p\":1,\"x\":\"y\",\"z\":\"\"}"],
        &[
            "{\"p\":1}",
            "{\"x\":\"y\"}",
            "{\"p\":1,\"x\":\"y\",\"z\":\"\",\"w\":\"\"}",
        ],
    );
    let a = compile(
        &json!({"type": "object", "properties": {"p": {"type": "integer"}}, "minProperties": 2,
                "additionalProperties": {"type": "boolean"}}),
        &Config::default(),
    )
    .unwrap();
    assert_eq!(a.shortest_completion(&a.start()), b"{\"p\":0,\"\":true}");
    // Two extra keys could be one repeated key: not enforceable, so no instance.
    assert!(compile(
        &json!({"type": "object", "minProperties": 2, "additionalProperties": {"type": "string"}}),
        &Config::default()
    )
    .is_err());
}

#[test]
fn unique_items_refused() {
    refused(
        json!({"type": "array", "items": {"type": "integer"}, "uniqueItems": true}),
        "uniqueItems",
        "/uniqueItems",
    );
    // Literal items, but `1.0` and `1` are one value: not kept apart by text.
    refused(
        json!({"type": "object", "properties": {"a": {"type": "array",
               "items": {"enum": [1, 1.5, 2]}, "uniqueItems": true}}}),
        "uniqueItems",
        "/properties/a/uniqueItems",
    );
    // More items needed than distinct literals exist: no instance at all.
    assert!(compile(
        &json!({"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 3, "uniqueItems": true}),
        &Config::default()
    )
    .is_err());
    // Same type, not finite.
    refused(
        json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "string"}],
               "items": false, "uniqueItems": true}),
        "uniqueItems",
        "/uniqueItems",
    );
    // Overlapping literal sets.
    refused(
        json!({"type": "array", "prefixItems": [{"enum": [1, 2]}, {"enum": [2, 3]}],
               "items": false, "uniqueItems": true}),
        "uniqueItems",
        "/uniqueItems",
    );
}

/// Random walks through the allowed bytes of each enforced schema, judged by the validator.
#[test]
fn walks_are_valid() {
    use rand::{Rng, SeedableRng};
    let schemas = [
        json!({"type": "object", "additionalProperties": {"type": "integer"},
               "propertyNames": {"pattern": "^[a-c]+$", "maxLength": 2}}),
        json!({"type": "object", "properties": {"a": {"type": "null"}, "toolong": {}},
               "additionalProperties": {"type": "integer"},
               "propertyNames": {"pattern": "^a+$", "maxLength": 3}}),
        json!({"type": "object", "additionalProperties": {"type": "boolean"},
               "propertyNames": {"enum": ["p", "q", 1]}, "minProperties": 1}),
        json!({"type": "object", "propertyNames": {"format": "email"}}),
        json!({"type": "array", "items": {"enum": ["a", "b", "ab", 1, 12, true, null]},
               "minItems": 2, "uniqueItems": true}),
        json!({"type": "object", "properties": {"p": {"type": "integer"}}, "minProperties": 2,
               "additionalProperties": {"type": "string", "maxLength": 2}}),
        json!({"type": "object", "minProperties": 1, "additionalProperties": {"type": "boolean"}}),
        json!({"type": "object", "properties": {"a": {}}, "propertyNames": false}),
        json!({"type": "array", "prefixItems": [{"type": "string"}, {"enum": [1, 2]}, {"type": "boolean"}],
               "items": false, "uniqueItems": true}),
        json!({"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 1,
               "uniqueItems": true}, "maxItems": 1, "uniqueItems": true}),
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    for schema in &schemas {
        let v = jsonschema::options()
            .should_validate_formats(true)
            .build(schema)
            .unwrap();
        let a = compile(schema, &Config::default()).unwrap_or_else(|e| panic!("{schema}: {e}"));
        for _ in 0..300 {
            let mut s = a.start();
            let mut text = Vec::new();
            loop {
                if a.is_accepting(&s) && (rng.random_bool(0.1) || text.len() > 60) {
                    break;
                }
                let allowed: Vec<u8> = (0..=255u8).filter(|&b| a.step(&s, b).is_some()).collect();
                if text.len() > 60 || allowed.is_empty() {
                    let c = a.shortest_completion(&s);
                    for &b in &c {
                        s = a.step(&s, b).expect("completion allowed");
                    }
                    text.extend(c);
                    break;
                }
                let ascii: Vec<u8> = allowed.iter().copied().filter(|&b| b < 0x80).collect();
                let pool = if ascii.is_empty() { &allowed } else { &ascii };
                let b = pool[rng.random_range(0..pool.len())];
                s = a.step(&s, b).unwrap();
                text.push(b);
            }
            assert!(a.is_accepting(&s), "{schema}: not accepting");
            let inst: Value = serde_json::from_slice(&text).unwrap();
            assert!(
                v.is_valid(&inst),
                "{schema}: invalid {}",
                String::from_utf8_lossy(&text)
            );
        }
    }
}
