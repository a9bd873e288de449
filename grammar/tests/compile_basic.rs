//! One check per construct: what the automaton accepts and refuses, byte by byte.

use formwork_grammar::compile::{compile, CompileError, Config, Whitespace};
use formwork_grammar::ByteAutomaton;
use serde_json::{json, Value};

fn auto(schema: Value) -> std::sync::Arc<formwork_grammar::compile::Automaton> {
    compile(&schema, &Config::default()).unwrap_or_else(|e| panic!("{schema}: {e}"))
}

#[track_caller]
fn check(schema: Value, yes: &[&str], no: &[&str]) {
    let a = auto(schema.clone());
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
    // Shortest completion from the start is accepted.
    let c = a.shortest_completion(&a.start());
    assert!(
        a.accepts(&c),
        "{schema}: shortest completion {:?} not accepted",
        String::from_utf8_lossy(&c)
    );
}

fn err(schema: Value) -> CompileError {
    match compile(&schema, &Config::default()) {
        Ok(_) => panic!("{schema} should not compile"),
        Err(e) => e,
    }
}

#[test]
fn literals_and_types() {
    check(
        json!({"type": "null"}),
        &["null"],
        &["nul", "true", " null"],
    );
    check(
        json!({"type": "boolean"}),
        &["true", "false"],
        &["null", "tru"],
    );
    check(
        json!({"type": ["string", "null"]}),
        &["null", "\"a\""],
        &["1"],
    );
    check(
        json!({"enum": ["a", 1, null, {"x": [1, 2]}]}),
        &["\"a\"", "1", "null", "{\"x\":[1,2]}"],
        &["\"b\"", "2", "{}"],
    );
    check(json!({"const": "hi"}), &["\"hi\""], &["\"h\"", "\"hii\""]);
    check(
        json!({"type": "string", "enum": ["a", 1]}),
        &["\"a\""],
        &["1"],
    );
    check(
        json!(true),
        &["1", "\"x\"", "{\"a\":[1,{}]}", "[]"],
        &["", "{\"a\"}"],
    );
}

#[test]
fn integers_with_bounds() {
    check(
        json!({"type": "integer", "minimum": -5, "maximum": 12}),
        &["-5", "0", "12", "9", "-1"],
        &["-6", "13", "120", "1.0", "-0", "01"],
    );
    check(
        json!({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3}),
        &["1", "2"],
        &["0", "3"],
    );
    check(
        json!({"type": "integer", "minimum": 100}),
        &["100", "12345"],
        &["99", "-100"],
    );
    check(
        json!({"type": "integer", "multipleOf": 7, "minimum": 10, "maximum": 30}),
        &["14", "21", "28"],
        &["7", "35", "15"],
    );
    check(
        json!({"type": "integer", "maximum": 5, "exclusiveMaximum": true, "$schema": "http://json-schema.org/draft-04/schema#"}),
        &["4"],
        &["5"],
    );
    // No dead ends: after "1", "2" would need more digits than allowed in [10, 19].
    let a = auto(json!({"type": "integer", "minimum": 10, "maximum": 19}));
    let s = a.step(&a.start(), b'1').unwrap();
    assert!(a.step(&s, b'2').is_some());
    assert!(a.step(&a.start(), b'2').is_none());
    assert!(a.step(&a.start(), b'-').is_none());
}

#[test]
fn numbers_with_decimals() {
    check(
        json!({"type": "number", "minimum": 0.5, "maximum": 2.25}),
        &["0.5", "1", "2.25", "2.2", "0.75"],
        &["0.4", "2.26", "2.250001", "3"],
    );
    check(
        json!({"type": "number", "exclusiveMinimum": -1.5, "maximum": -0.5}),
        &["-1.4", "-0.5", "-1"],
        &["-1.5", "-0.4", "0"],
    );
    check(
        json!({"type": "number", "multipleOf": 0.25}),
        &["0.25", "1.5", "-2"],
        &["0.3"],
    );
    check(
        json!({"type": "number"}),
        &["1.5", "-0.001", "123456789012345"],
        &["1.", ".5", "1e5", "1234567890123456"],
    );
}

#[test]
fn strings() {
    check(
        json!({"type": "string", "minLength": 2, "maxLength": 3}),
        &["\"ab\"", "\"abc\"", "\"\\n\\t\"", "\"é€\""],
        &["\"a\"", "\"abcd\""],
    );
    check(
        json!({"type": "string"}),
        &["\"a\\\"b\"", "\"\\u0001\"", "\"\\\\\""],
        &["\"\\u0041\"", "\"\\/\"", "\"a\nb\""],
    );
    check(
        json!({"type": "string", "pattern": "^[a-z]+$", "maxLength": 3}),
        &["\"abc\""],
        &["\"abcd\"", "\"ab1\"", "\"\""],
    );
    check(
        json!({"type": "string", "pattern": "b"}),
        &["\"abc\"", "\"b\""],
        &["\"ac\""],
    );
    check(
        json!({"type": "string", "pattern": "^\\d{3}-\\d{4}$"}),
        &["\"555-1234\""],
        &["\"55-1234\""],
    );
    // Pattern and length together: "^a*$" with minLength 2, maxLength 2.
    let a = auto(json!({"type": "string", "pattern": "^a*b?$", "minLength": 2, "maxLength": 2}));
    assert!(
        a.accepts(b"\"aa\"")
            && a.accepts(b"\"ab\"")
            && !a.accepts(b"\"a\"")
            && !a.accepts(b"\"aab\"")
    );
    let s = [b'"', b'a', b'b']
        .iter()
        .fold(a.start(), |s, &b| a.step(&s, b).unwrap());
    assert!(a.step(&s, b'b').is_none());
    // A pattern DFA of a few hundred states under a length bound (JSONSchemaBench
    // o21456): the shortest-text search tries one byte per DFA class and UTF-8 role, so
    // it no longer runs out of budget and calls the schema unsatisfiable.
    check(
        json!({"type": "string", "minLength": 5, "maxLength": 254,
               "pattern": "^[^@^\\s]+@[^@^\\.^\\s]+(\\.[^@^\\.^\\s]*)*.gov.uk"}),
        &["\"a@b.gov.uk\"", "\"x.y@dept.co.gov.uk/extra\""],
        &["\"a@b.gov\"", "\"a b@c.gov.uk\""],
    );
    // Negated class escapes inside a class are nested classes (ECMA's union).
    check(
        json!({"type": "string", "pattern": "^[\\S]+$"}),
        &["\"a-b\"", "\"\u{e9}\""],
        &["\"a b\"", "\"a\u{a0}\"", "\"a\u{2028}\"", "\"\""],
    );
    check(
        json!({"type": "string", "pattern": "^[^\\S]+$"}),
        &["\" \"", "\" \\t\u{3000}\""],
        &["\"a\"", "\" a\""],
    );
    check(
        json!({"type": "string", "pattern": "^[x\\D]+$"}),
        &["\"x\"", "\"ab-\""],
        &["\"a1\""],
    );
    check(
        json!({"type": "string", "pattern": "^[1\\W]+$"}),
        &["\"1-!\"", "\" \""],
        &["\"1a\"", "\"_\""],
    );
}

#[test]
fn formats() {
    check(
        json!({"type": "string", "format": "date"}),
        &["\"2024-02-29\"", "\"2023-12-31\""],
        &["\"2023-02-29\"", "\"2024-13-01\"", "\"1900-02-29\""],
    );
    // Years from 0001 (Python's `date`, so Pydantic, has no year 0); every fourth
    // century is a leap year.
    check(
        json!({"type": "string", "format": "date"}),
        &[
            "\"0001-01-01\"",
            "\"0004-02-29\"",
            "\"0400-02-29\"",
            "\"2000-02-29\"",
            "\"9996-02-29\"",
            "\"0020-02-29\"",
        ],
        &[
            "\"0000-01-01\"",
            "\"0000-02-29\"",
            "\"0100-02-29\"",
            "\"2100-02-29\"",
        ],
    );
    check(
        json!({"format": "date-time", "type": "string"}),
        &[
            "\"2024-01-01T10:00:00Z\"",
            "\"2024-01-01T10:00:00.5+02:00\"",
        ],
        &["\"2024-01-01 10:00:00Z\""],
    );
    check(
        json!({"format": "uuid", "type": "string"}),
        &["\"123e4567-e89b-12d3-a456-426614174000\""],
        &["\"123\""],
    );
    check(
        json!({"format": "ipv4", "type": "string"}),
        &["\"192.168.0.1\""],
        &["\"256.1.1.1\"", "\"01.1.1.1\""],
    );
    check(
        json!({"format": "email", "type": "string"}),
        &["\"a.b@example.com\""],
        &["\"a@b\""],
    );
    // Special-use domains (RFC 6761), which email-validator (Pydantic's EmailStr) refuses.
    check(
        json!({"format": "email", "type": "string"}),
        &["\"a@b.tester\"", "\"a@test.com\"", "\"a@b.internal\""],
        &[
            "\"a@b.test\"",
            "\"a@b.c.LOCAL\"",
            "\"a@x-y.arpa\"",
            "\"a@b.Onion\"",
        ],
    );
    assert!(matches!(
        err(json!({"type": "string", "format": "color-hex"})),
        CompileError::Unsupported { .. }
    ));
}

#[test]
fn objects_in_schema_order() {
    let s = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}}, "required": ["a", "c"]});
    check(
        s.clone(),
        &["{\"a\":1,\"c\":true}", "{\"a\":1,\"b\":\"x\",\"c\":false}"],
        &[
            "{\"c\":true,\"a\":1}",
            "{\"a\":1}",
            "{\"a\":1,\"c\":true,\"d\":1}",
            "{}",
        ],
    );
    let a = auto(s);
    // The key of `a` is forced.
    let st = a.step(&a.start(), b'{').unwrap();
    assert!(a.step(&st, b'}').is_none());
    // additionalProperties as a schema: dict[str, int].
    check(
        json!({"type": "object", "additionalProperties": {"type": "integer"}}),
        &["{}", "{\"x\":1,\"y\":2}"],
        &["{\"x\":\"s\"}"],
    );
    // Extra keys must not repeat a listed name.
    check(
        json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "integer"}}),
        &["{\"a\":\"s\",\"b\":1}", "{\"b\":1}"],
        &["{\"a\":1}", "{\"b\":1,\"a\":2}"],
    );
    check(
        json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "minProperties": 1, "maxProperties": 1}),
        &["{\"a\":1}", "{\"b\":1}"],
        &["{}", "{\"a\":1,\"b\":2}"],
    );
}

/// Optional properties whose keys share prefixes (one of them an escaped quote) are
/// matched in one trie thread, not one thread per candidate: the texts accepted, the
/// bytes allowed inside a shared prefix and the shortest completions stay exact.
#[test]
fn keys_with_shared_prefixes() {
    let s = json!({"type": "object", "properties": {
        "ab": {"type": "integer"}, "a": {"type": "boolean"}, "abc": {"type": "null"},
        "a\"q": {"type": "integer"}, "b": {"type": "string"}, "r": {"type": "integer"},
        "abd": {"type": "integer"}
    }, "required": ["r"], "minProperties": 2});
    check(
        s.clone(),
        &[
            "{\"ab\":1,\"r\":2}",
            "{\"a\":true,\"r\":2}",
            "{\"abc\":null,\"r\":2}",
            "{\"a\\\"q\":1,\"r\":2}",
            "{\"ab\":1,\"abc\":null,\"a\\\"q\":3,\"b\":\"\",\"r\":0,\"abd\":1}",
            "{\"r\":1,\"abd\":2}",
        ],
        &[
            "{\"r\":1}",
            "{\"abc\":null,\"ab\":1,\"r\":2}",
            "{\"a\":1,\"r\":2}",
            "{\"ac\":1,\"r\":2}",
            "{\"abd\":1,\"r\":2}",
            "{\"r\":1,\"ab\":2}",
        ],
    );
    let a = auto(s);
    let at = |text: &str| {
        let mut st = a.start();
        for &b in text.as_bytes() {
            st = a.step(&st, b).unwrap_or_else(|| panic!("refused {text}"));
        }
        st
    };
    let allowed = |text: &str| -> String {
        let st = at(text);
        (0..=255u8)
            .filter(|&b| a.step(&st, b).is_some())
            .map(char::from)
            .collect()
    };
    assert_eq!(allowed("{\""), "abr");
    assert_eq!(allowed("{\"a"), "\"\\b");
    assert_eq!(allowed("{\"ab"), "\"c");
    assert_eq!(allowed("{\"ab\":1,\""), "abr");
    // Shortest completions from inside a shared prefix: the cheapest candidate wins,
    // and with `minProperties` two members are needed.
    let sc = |text: &str| String::from_utf8(a.shortest_completion(&at(text))).unwrap();
    // (`"a"` is a boolean: `b":0` is shorter than `":false`.)
    assert_eq!(sc("{\"a"), "b\":0,\"r\":0}");
    assert_eq!(sc("{\"ab"), "\":0,\"r\":0}");
    assert_eq!(sc("{\""), "ab\":0,\"r\":0}");
    for t in ["{\"a", "{\"ab", "{\"", "{\"ab\":1,\"a"] {
        let mut full = t.as_bytes().to_vec();
        full.extend(a.shortest_completion(&at(t)));
        assert!(a.accepts(&full), "{}", String::from_utf8_lossy(&full));
    }
}

#[test]
fn arrays() {
    check(
        json!({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2}),
        &["[1]", "[1,2]"],
        &["[]", "[1,2,3]", "[1,]"],
    );
    check(
        json!({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false}),
        &["[]", "[\"a\"]", "[\"a\",1]"],
        &["[\"a\",1,2]", "[1]"],
    );
    check(
        json!({"type": "array", "items": [{"type": "string"}], "additionalItems": false, "$schema": "http://json-schema.org/draft-07/schema#"}),
        &["[\"a\"]"],
        &["[\"a\",1]"],
    );
}

#[test]
fn combinators() {
    check(
        json!({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]}),
        &["1", "\"a\""],
        &["\"ab\""],
    );
    check(
        json!({"oneOf": [{"type": "integer"}, {"type": "string"}]}),
        &["1", "\"a\""],
        &["null"],
    );
    check(
        json!({"oneOf": [{"const": "a"}, {"const": "b"}]}),
        &["\"a\"", "\"b\""],
        &["\"c\""],
    );
    assert!(matches!(
        err(json!({"oneOf": [{"type": "integer"}, {"type": "number"}]})),
        CompileError::Unsupported { .. }
    ));
    check(
        json!({"allOf": [{"type": "integer", "minimum": 0}, {"maximum": 5}]}),
        &["0", "5"],
        &["6", "-1"],
    );
    check(
        json!({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"properties": {"a": {"minimum": 3}}}], "type": "object"}),
        &["{\"a\":3}"],
        &["{\"a\":2}"],
    );
    check(
        json!({"type": "object", "properties": {"k": {"type": "string"}, "v": {}}, "anyOf": [{"required": ["k"]}, {"required": ["v"]}]}),
        &["{\"k\":\"x\"}", "{\"v\":1}", "{\"k\":\"x\",\"v\":1}"],
        &["{}"],
    );
}

#[test]
fn refs_and_recursion() {
    let s = json!({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"], "additionalProperties": false}}, "$ref": "#/$defs/node"});
    check(
        s,
        &[
            "{\"v\":1}",
            "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]}]}",
        ],
        &["{\"v\":1,\"kids\":[{}]}"],
    );
    check(
        json!({"definitions": {"a": {"type": "integer"}}, "properties": {"x": {"$ref": "#/definitions/a"}}, "type": "object"}),
        &["{\"x\":1}"],
        &["{\"x\":\"a\"}"],
    );
    assert!(matches!(
        err(json!({"$ref": "#/nope"})),
        CompileError::Unsupported { .. }
    ));
    assert!(matches!(
        err(json!({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})),
        CompileError::Unsupported { .. }
    ));
}

#[test]
fn unsupported_and_lenient() {
    let s = json!({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true}}});
    match err(s.clone()) {
        CompileError::Unsupported {
            keyword, pointer, ..
        } => {
            assert_eq!(keyword, "uniqueItems");
            assert_eq!(pointer, "/properties/a/uniqueItems");
        }
        e => panic!("{e}"),
    }
    let a = compile(
        &s,
        &Config {
            lenient: true,
            ..Config::default()
        },
    )
    .unwrap();
    assert_eq!(a.relaxed().len(), 1);
    assert_eq!(a.relaxed()[0].pointer, "/properties/a/uniqueItems");
    let msg = err(json!({"type": "string", "not": {"pattern": "a"}})).to_string();
    assert!(msg.contains("`not`") && msg.contains("/not"), "{msg}");
}

#[test]
fn whitespace() {
    let s = json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}, "required": ["a"]});
    let a = auto(s.clone());
    assert!(!a.accepts(b"{ \"a\":[1]}"));
    let f = compile(
        &s,
        &Config {
            whitespace: Whitespace::Flexible { max_run: 3 },
            ..Config::default()
        },
    )
    .unwrap();
    assert!(f.accepts(b" {\n  \"a\" : [ 1 , 2 ]\n} "));
    assert!(!f.accepts(b"{    \"a\":[1]}"));
}

#[test]
fn plain_chars_hint() {
    let a = auto(json!({"type": "string", "maxLength": 5}));
    let s = a.step(&a.start(), b'"').unwrap();
    assert_eq!(a.plain_chars_allowed(&s), Some(5));
    let s = a.step(&s, b'x').unwrap();
    assert_eq!(a.plain_chars_allowed(&s), Some(4));
    let p = auto(json!({"type": "string", "pattern": "^a"}));
    let s = p.step(&p.start(), b'"').unwrap();
    assert_eq!(p.plain_chars_allowed(&s), None);
}

#[test]
fn empty_and_limits() {
    assert!(matches!(
        err(json!({"type": "integer", "minimum": 5, "maximum": 4})),
        CompileError::Empty { .. }
    ));
    assert!(matches!(err(json!(false)), CompileError::Empty { .. }));
    let mut deep = json!({"type": "integer"});
    for _ in 0..100 {
        deep = json!({"allOf": [deep]});
    }
    let cfg = Config {
        limits: formwork_grammar::compile::Limits {
            depth: 50,
            ..Default::default()
        },
        ..Config::default()
    };
    assert!(matches!(
        compile(&deep, &cfg),
        Err(CompileError::Limit { .. })
    ));
}

#[test]
fn pattern_properties_apply_to_listed_names() {
    // "ab" matches "^a": it must be an integer too; "b" is free; pattern-only keys are not generated.
    let s = json!({"type": "object", "properties": {"ab": {"type": ["integer", "string"]}, "b": {"type": "string"}}, "patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": false});
    check(
        s,
        &["{\"ab\":1,\"b\":\"x\"}"],
        &["{\"ab\":\"s\"}", "{\"ac\":1}"],
    );
}

#[test]
fn one_of_narrowed_to_disjoint() {
    // S1: branch 0 must omit `b`, which branch 1 requires.
    let s = json!({"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a"]}, {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}]});
    check(s, &["{\"a\":1}", "{\"b\":2}"], &["{\"a\":1,\"b\":2}"]);
    // S2: closed branches with different properties; `{}` matches both, so it is refused.
    let s = json!({"oneOf": [{"type": "object", "properties": {"x": {"type": "integer"}}, "additionalProperties": false}, {"type": "object", "properties": {"y": {"type": "integer"}}, "additionalProperties": false}]});
    check(s, &["{\"x\":1}", "{\"y\":1}"], &["{}"]);
}

#[test]
fn dependencies_and_not() {
    let s = json!({"type": "object", "properties": {"card": {"type": "string"}, "billing": {"type": "string"}}, "dependencies": {"card": ["billing"]}});
    check(
        s,
        &[
            "{}",
            "{\"billing\":\"b\"}",
            "{\"card\":\"c\",\"billing\":\"b\"}",
        ],
        &["{\"card\":\"c\"}"],
    );
    let s = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "not": {"required": ["a", "b"]}});
    check(s, &["{\"a\":1}", "{\"b\":1}", "{}"], &["{\"a\":1,\"b\":2}"]);
    check(
        json!({"not": {"type": "integer"}}),
        &["\"s\"", "null"],
        &["1", "1.5"],
    );
}

#[test]
fn format_on_non_strings_and_aliases() {
    check(
        json!({"type": "integer", "format": "int32"}),
        &["5"],
        &["\"5\""],
    );
    check(
        json!({"type": "string", "format": "url"}),
        &["\"https://example.com/a\""],
        &["\"nope\""],
    );
}

#[test]
fn if_then_else_and_general_not() {
    let s = json!({"type": "object", "properties": {"kind": {"enum": ["a", "b"]}, "n": {"type": "integer"}}, "required": ["kind"],
        "if": {"properties": {"kind": {"const": "a"}}}, "then": {"required": ["n"]}, "else": {"not": {"required": ["n"]}}});
    check(
        s,
        &["{\"kind\":\"a\",\"n\":1}"],
        &["{\"kind\":\"a\"}", "{\"kind\":\"b\",\"n\":1}"],
    );
    // `not` with a range: only the part certainly outside it is produced.
    check(
        json!({"type": "integer", "not": {"minimum": 3, "maximum": 5}}),
        &["2", "6"],
        &["3", "5"],
    );
}

/// Pydantic's `Annotated[A | B | C, Field(discriminator="kind")]`, with `defs` for the
/// branches and `disc` for the discriminator object.
fn tagged(defs: Value, disc: Value) -> Value {
    let names: Vec<String> = defs.as_object().unwrap().keys().cloned().collect();
    let refs: Vec<Value> = names
        .iter()
        .map(|n| json!({"$ref": format!("#/$defs/{n}")}))
        .collect();
    json!({"$defs": defs, "oneOf": refs, "discriminator": disc})
}

fn obj(props: Value, req: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": req})
}

fn refusal(schema: Value) -> (String, String, String) {
    match err(schema) {
        CompileError::Unsupported {
            keyword,
            pointer,
            why,
        } => (keyword, pointer, why),
        e => panic!("{e}"),
    }
}

#[test]
fn discriminator_on_disjoint_tags() {
    let defs = json!({
        "A": obj(json!({"kind": {"const": "a"}, "x": {"type": "integer"}}), &["kind", "x"]),
        "B": obj(json!({"kind": {"enum": ["b", "bb"]}, "x": {"type": "string"}}), &["kind", "x"]),
    });
    let map = json!({"a": "#/$defs/A", "b": "#/$defs/B", "bb": "#/$defs/B"});
    check(
        tagged(
            defs.clone(),
            json!({"propertyName": "kind", "mapping": map}),
        ),
        &[r#"{"kind":"a","x":1}"#, r#"{"kind":"bb","x":"s"}"#],
        &[
            r#"{"kind":"a","x":"s"}"#,
            r#"{"kind":"c","x":1}"#,
            r#"{"x":1}"#,
        ],
    );
    check(
        tagged(defs, json!({"propertyName": "kind"})),
        &[r#"{"kind":"b","x":"s"}"#],
        &[r#"{"kind":"b","x":1}"#],
    );
    // Inline branches and an `anyOf`; the tag pinned through a `$ref`.
    check(
        json!({"$defs": {"T": {"const": 2}}, "discriminator": {"propertyName": "t"}, "anyOf": [
            obj(json!({"t": {"const": 1}}), &["t"]),
            obj(json!({"t": {"$ref": "#/$defs/T"}, "y": {"type": "null"}}), &["t", "y"]),
        ]}),
        &[r#"{"t":1}"#, r#"{"t":2,"y":null}"#],
        &[r#"{"t":2}"#, r#"{"t":3}"#],
    );
}

/// A tag with a default (`kind: Literal["a"] = "a"`) is not `required`, so `{"x":1}`
/// matches both branches and the generic oneOf check refuses the schema; the
/// discriminator proves the branches disjoint once the tag is required, as Pydantic and
/// OpenAPI read it (Pydantic: "Unable to extract tag using discriminator").
#[test]
fn discriminator_requires_a_defaulted_tag() {
    let defs = json!({
        "A": obj(json!({"kind": {"const": "a", "default": "a"}, "x": {"type": "integer"}}), &["x"]),
        "B": obj(json!({"kind": {"const": "b", "default": "b"}, "x": {"type": "integer"}}), &["x"]),
    });
    let mut plain = tagged(defs.clone(), json!({}));
    plain.as_object_mut().unwrap().remove("discriminator");
    let (kw, ptr, why) = refusal(plain);
    assert_eq!((kw.as_str(), ptr.as_str()), ("oneOf", "/oneOf"), "{why}");
    let map = json!({"a": "#/$defs/A", "b": "#/$defs/B"});
    check(
        tagged(defs, json!({"propertyName": "kind", "mapping": map})),
        &[r#"{"kind":"a","x":1}"#, r#"{"kind":"b","x":1}"#],
        &[r#"{"x":1}"#, r#"{"kind":"c","x":1}"#],
    );
}

#[test]
fn discriminator_refusals_name_the_branch() {
    let a = obj(json!({"kind": {"const": "a"}}), &["kind"]);
    let cases = [
        (
            tagged(
                json!({"A": a, "B": obj(json!({"kind": {"type": "string"}}), &["kind"])}),
                json!({"propertyName": "kind"}),
            ),
            r#"branch 1 (#/$defs/B) does not pin "kind" to a literal (const or enum)"#,
        ),
        (
            tagged(
                json!({"A": a, "B": obj(json!({"other": {"const": "b"}}), &["other"])}),
                json!({"propertyName": "kind"}),
            ),
            r#"branch 1 (#/$defs/B) does not pin "kind" to a literal (const or enum)"#,
        ),
        (
            tagged(
                json!({"A": a, "B": obj(json!({"kind": {"enum": ["b", "a"]}}), &["kind"])}),
                json!({"propertyName": "kind"}),
            ),
            r#"branch 0 (#/$defs/A) and branch 1 (#/$defs/B) both pin "kind" to "a""#,
        ),
        (
            tagged(
                json!({"A": a, "B": {"properties": {"kind": {"const": "b"}}, "required": ["kind"]}}),
                json!({"propertyName": "kind"}),
            ),
            "branch 1 (#/$defs/B) admits values that are not objects",
        ),
        (
            tagged(
                json!({"A": a, "B": obj(json!({"kind": {"const": "b"}}), &["kind"])}),
                json!({"propertyName": "kind", "mapping": {"a": "#/$defs/B", "b": "#/$defs/B"}}),
            ),
            r#"mapping "a" names branch 1 (#/$defs/B), which does not pin "kind" to "a""#,
        ),
        (
            tagged(
                json!({"A": a, "B": obj(json!({"kind": {"enum": ["b", "c"]}}), &["kind"])}),
                json!({"propertyName": "kind", "mapping": {"a": "#/$defs/A", "b": "#/$defs/B"}}),
            ),
            r#"branch 1 (#/$defs/B) pins "kind" to "c", which mapping does not list"#,
        ),
        (
            json!({"$defs": {"A": a, "Z": {}}, "oneOf": [{"$ref": "#/$defs/A"}],
                   "discriminator": {"propertyName": "kind", "mapping": {"a": "#/$defs/Z"}}}),
            r#"mapping "a" names #/$defs/Z, which is no branch of the oneOf"#,
        ),
        (
            tagged(
                json!({"A": a, "B": {"type": "object", "properties": {"x": {}}, "additionalProperties": false}}),
                json!({"propertyName": "kind"}),
            ),
            r#"branch 1 (#/$defs/B) allows no value of "kind""#,
        ),
        (
            json!({"type": "object", "discriminator": {"propertyName": "kind"}}),
            "no sibling oneOf or anyOf to discriminate",
        ),
    ];
    for (s, want) in cases {
        let (kw, ptr, why) = refusal(s.clone());
        assert_eq!(kw, "discriminator", "{s}");
        assert_eq!(ptr, "/discriminator", "{s}");
        assert_eq!(why, want, "{s}");
    }
    // Nested: the pointer is the discriminator's own.
    let s = json!({"type": "object", "properties": {"p": {"oneOf": [
        obj(json!({"k": {"const": 1}}), &["k"]),
        obj(json!({"k": {"const": 1.0}}), &["k"]),
    ], "discriminator": {"propertyName": "k"}}}});
    let (_, ptr, why) = refusal(s.clone());
    assert_eq!(ptr, "/properties/p/discriminator");
    assert!(why.contains("both pin \"k\" to 1"), "{why}");
    // Lenient: recorded, and the oneOf is read without it.
    let lenient = compile(
        &s,
        &Config {
            lenient: true,
            ..Config::default()
        },
    )
    .unwrap();
    let kws: Vec<&str> = lenient
        .relaxed()
        .iter()
        .map(|r| r.keyword.as_str())
        .collect();
    assert_eq!(kws, ["discriminator", "oneOf"]);
    // A schema as a mapping target names the branch equal to it (Pydantic writes a
    // branch that is itself a union out in full).
    let inner = json!({"oneOf": [{"$ref": "#/$defs/A"}]});
    let s = json!({"$defs": {"A": a, "B": obj(json!({"kind": {"const": "b"}}), &["kind"])},
        "oneOf": [inner, {"$ref": "#/$defs/B"}],
        "discriminator": {"propertyName": "kind", "mapping": {"a": inner, "b": "#/$defs/B"}}});
    check(
        s,
        &[r#"{"kind":"a"}"#, r#"{"kind":"b"}"#],
        &[r#"{"kind":"c"}"#],
    );
    let s = json!({"$defs": {"A": a}, "oneOf": [{"$ref": "#/$defs/A"}],
        "discriminator": {"propertyName": "kind", "mapping": {"a": {"$ref": "#/$defs/A", "title": "x"}}}});
    let (_, _, why) = refusal(s);
    assert_eq!(
        why,
        r#"mapping "a" names a schema, which is no branch of the oneOf"#
    );
    // Malformed: invalid at the field.
    let e = err(json!({"oneOf": [], "discriminator": {"propertyName": 3}})).to_string();
    assert!(e.contains("/discriminator/propertyName"), "{e}");
}

/// A leading negative look-ahead, `^(?!X)Y`, is `Y` without the strings `X` starts:
/// Pydantic's `Decimal` pattern (before it, refused as look-around).
#[test]
fn pattern_with_leading_negative_lookahead() {
    check(
        json!({"type": "string", "pattern": "^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$"}),
        &[
            r#""1.5""#,
            r#""-0.5""#,
            r#""+3""#,
            r#""007""#,
            r#""1.""#,
            r#"".5""#,
        ],
        &[
            r#""""#,
            r#""-""#,
            r#""+.""#,
            r#"".""#,
            r#""-.""#,
            r#""1.2.3""#,
            r#""1a""#,
        ],
    );
    // Not anchored at the end: no string that starts with `ab`.
    check(
        json!({"type": "string", "pattern": "^(?!ab)[a-z]+$"}),
        &[r#""ac""#, r#""b""#, r#""a""#],
        &[r#""ab""#, r#""abc""#, r#""""#],
    );
    for p in ["^(?!a)b|c", "^a(?!b)", "(?!a)b", "^(?<!a)b", "^(?!a"] {
        let (kw, _, why) = refusal(json!({"type": "string", "pattern": p}));
        assert_eq!(kw, "pattern", "{p}: {why}");
    }
}
