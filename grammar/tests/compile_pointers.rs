//! Compile errors name their place in one form, RFC 6901's JSON Pointer (`/pattern`,
//! `""` for the root), never the URI-fragment form (`#/pattern`).

use formwork_grammar::compile::{compile, CompileError, Config, Limits};
use serde_json::{json, Value};

fn small_dfas() -> Config {
    Config {
        limits: Limits {
            dfa_states: 8,
            ..Limits::default()
        },
        ..Config::default()
    }
}

fn pointer(e: &CompileError) -> &str {
    match e {
        CompileError::Unsupported { pointer, .. }
        | CompileError::InvalidSchema { pointer, .. }
        | CompileError::Limit { pointer, .. }
        | CompileError::Empty { pointer }
        | CompileError::NoSpan { pointer } => pointer,
    }
}

// A regression: an oversized `pattern` was reported at "#" rather than at /pattern.
#[test]
fn oversized_pattern_is_reported_at_its_keyword_pointer() {
    let e = compile(
        &json!({"type": "string", "pattern": "^[a-z]{40}$"}),
        &small_dfas(),
    )
    .err()
    .expect("the DFA limit");
    match &e {
        CompileError::Limit { what, pointer, .. } => {
            assert_eq!(*what, "DFA states");
            assert_eq!(pointer, "/pattern");
        }
        other => panic!("expected the DFA limit, got {other:?}"),
    }
    assert!(e.to_string().ends_with(r#"at "/pattern""#), "{e}");

    let nested = json!({"type": "object", "properties": {"a/b": {"type": "string", "pattern": "^[a-z]{40}$"}}});
    let e = compile(&nested, &small_dfas())
        .err()
        .expect("the DFA limit");
    assert_eq!(pointer(&e), "/properties/a~1b/pattern", "{e}");
}

#[test]
fn compile_errors_use_rfc6901_pointers_only() {
    let cases: Vec<(Value, Config, &str)> = vec![
        (
            json!({"type": "string", "pattern": "^(?<=a)b$"}),
            Config::default(),
            "/pattern",
        ),
        (
            json!({"properties": {"x": {"type": "string", "format": "no-such-format"}}}),
            Config::default(),
            "/properties/x/format",
        ),
        (json!({"minimum": "three"}), Config::default(), "/minimum"),
        (
            json!({"type": "string", "enum": [1]}),
            Config::default(),
            "",
        ),
        (
            json!({"$defs": {"s": {"type": "string", "pattern": "^[a-z]{40}$"}}, "$ref": "#/$defs/s"}),
            small_dfas(),
            "/$defs/s/pattern",
        ),
    ];
    for (schema, cfg, want) in cases {
        let e = compile(&schema, &cfg)
            .err()
            .unwrap_or_else(|| panic!("{schema} compiled"));
        assert_eq!(pointer(&e), want, "{schema}: {e}");
        assert!(!e.to_string().contains("\"#"), "{schema}: {e}");
    }
}

// Found by reading `percent_decode` (2026-12-02): a `%` followed by one hex
// digit and then a multi-byte character sliced the str inside that character, a
// panic on any `$ref` such as `#/$defs/%aé`. Now a `%` without two hex digits is
// kept as it is, and escapes decode byte by byte (a UTF-8 name split in `%XX`s).
#[test]
fn percent_before_a_multibyte_character_in_a_ref_is_an_error_not_a_panic() {
    let defs = json!({"é": {"type": "integer"}, "%aé": {"type": "boolean"}});
    let s = json!({"$defs": defs, "$ref": "#/$defs/%aé"});
    let a = compile(&s, &Config::default()).expect("`%aé` names itself");
    assert!(a.accepts(b"true") && !a.accepts(b"1"));
    let s = json!({"$defs": defs, "$ref": "#/$defs/%C3%A9"});
    let a = compile(&s, &Config::default()).expect("`%C3%A9` is `é`");
    assert!(a.accepts(b"1") && !a.accepts(b"true"));
    let s = json!({"$defs": defs, "$ref": "#/$defs/%é"});
    let e = compile(&s, &Config::default())
        .err()
        .expect("no `%é` definition");
    assert_eq!(pointer(&e), "/$ref", "{e}");
}
