//! Fuzz targets over the root crate: the validator and the tolerant extractor on
//! arbitrary text, and one JSONL batch line. Bad input must give a verdict or a one-line
//! error, never a panic.
//!
//! Meant to be included by path from a root-crate smoke test, like `grammar_targets.rs`,
//! so it only uses what the root crate's tests have.

use std::collections::HashSet;
use std::sync::OnceLock;

use formwork::batch::{parse_line, plan, Item};
use formwork::validate::{extract_json, Validator};
use serde_json::Value;

/// A few schemas that exercise the validator's paths (types, formats, rules, nesting).
fn validators() -> &'static [(Value, Validator)] {
    static V: OnceLock<Vec<(Value, Validator)>> = OnceLock::new();
    V.get_or_init(|| {
        [
            r#"{"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer","minimum":0}},"required":["name"],"additionalProperties":false}"#,
            r#"{"type":"array","items":{"type":["number","null"],"multipleOf":0.5},"maxItems":4}"#,
            r#"{"type":"object","properties":{"when":{"type":"string","format":"date"},"mail":{"type":"string","format":"email"}}}"#,
            r#"{"oneOf":[{"const":1},{"type":"string","pattern":"^[a-z]+$"}]}"#,
            r#"{"type":"number","minimum":1e400,"maximum":1e401}"#,
        ]
        .iter()
        .map(|s| {
            let schema: Value = serde_json::from_str(s).expect("JSON");
            let v = Validator::new(&schema).expect("a valid schema");
            (schema, v)
        })
        .collect()
    })
}

/// Target `validate`: the tolerant extractor, then each validator (strict and tolerant)
/// on the text. The extracted value is a bracketed span of the text, and a JSON text is
/// extracted as JSON; a text the strict check finds valid must parse as JSON.
pub fn validate(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(x) = extract_json(text) {
        assert!(
            text.contains(x.value_text.as_str()),
            "the extracted value is not a span of the text"
        );
        // A balanced span; when none parses, the first balanced one is returned so the
        // caller reports its parse error (src/validate/extract.rs), so it need not parse.
        let t = x.value_text.as_bytes();
        assert!(
            matches!(
                (t.first(), t.last()),
                (Some(b'{'), Some(b'}')) | (Some(b'['), Some(b']'))
            ),
            "the extracted value is not a bracketed span: {:?}",
            x.value_text
        );
        // A text that is itself a JSON object or array is extracted whole, and parses.
        if let Ok(Value::Object(_) | Value::Array(_)) = serde_json::from_str::<Value>(text.trim()) {
            serde_json::from_str::<Value>(&x.value_text).unwrap_or_else(|e| {
                panic!(
                    "a JSON text extracted as non-JSON ({e}): {:?}",
                    x.value_text
                )
            });
        }
    }
    for (schema, v) in validators() {
        let strict = v.check(text);
        let _ = strict.to_json();
        for e in strict.errors() {
            let _ = e.loc_string();
        }
        if strict.is_valid() {
            serde_json::from_str::<Value>(text.trim())
                .unwrap_or_else(|e| panic!("valid for {schema} but not JSON ({e}): {text:?}"));
        }
        let (tolerant, _) = v.check_tolerant(text);
        let _ = tolerant.to_json();
        if strict.is_valid() {
            assert!(
                tolerant.is_valid(),
                "strict valid, tolerant not: {text:?} for {schema}"
            );
        }
    }
}

/// Target `batch_line`: one input line, as the batch reads it. A record needs an id
/// (string or number) and a text; anything else is a one-line error under `line:N`; the
/// same line twice is a record and a `duplicate id` error.
pub fn batch_line(data: &[u8]) {
    match parse_line(data, 7) {
        Ok((id, _text)) => {
            assert!(id.is_string() || id.is_number(), "id {id}");
            assert!(std::str::from_utf8(data).is_ok());
        }
        Err((_, msg)) => {
            assert!(msg.starts_with("input line 7: "), "{msg}");
            assert!(!msg.contains('\n'), "a multi-line error: {msg:?}");
        }
    }
    let items = plan(&[data.to_vec(), data.to_vec()], &HashSet::new());
    let blank = data.iter().all(u8::is_ascii_whitespace);
    assert_eq!(items.len(), if blank { 0 } else { 2 }, "{items:?}");
    if let [first, second] = items.as_slice() {
        let dup = matches!(
            second,
            Item::Error {
                duplicate: true,
                ..
            }
        );
        // A line with an id of its own is a duplicate the second time; a line without
        // one is reported under `line:N`, a different N each time.
        match first {
            Item::Record { .. } => assert!(dup, "{items:?}"),
            Item::Error { id, .. } => {
                let fallback = id.as_str().is_some_and(|s| s.starts_with("line:"));
                assert_eq!(dup, !fallback, "{items:?}");
            }
            Item::Done => panic!("nothing is done in an empty output"),
        }
    }
}
