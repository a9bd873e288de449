//! One field against the gold, handed a predicted value and the expected one:
//! equality (strings folded unless exact), the leaf fields of an answer, the slot
//! outcome (hit, wrong, false fill, miss, empty), placeholder strings, and free-text
//! values that are not a span of the record's text.

use serde::Serialize;
use serde_json::Value;

use crate::pointer::escape;

/// Field-level comparison.
pub fn field_equal(pred: &Value, gold: &Value, exact_strings: bool) -> bool {
    match (pred, gold) {
        (Value::String(a), Value::String(b)) if !exact_strings => {
            a.trim().to_lowercase() == b.trim().to_lowercase()
        }
        (Value::Number(a), Value::Number(b)) => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => a.to_string() == b.to_string(),
        },
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| field_equal(x, y, exact_strings))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, x)| b.get(k).is_some_and(|y| field_equal(x, y, exact_strings)))
        }
        _ => pred == gold,
    }
}

/// The leaf fields of `expected` as (JSON Pointer, gold value). Objects are
/// walked; arrays and scalars are leaves.
pub fn leaf_fields(expected: &Value) -> Vec<(String, Value)> {
    fn walk(v: &Value, path: String, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, x) in m {
                    walk(x, format!("{path}/{}", escape(k)), out);
                }
            }
            _ => out.push((path, v.clone())),
        }
    }
    let mut out = Vec::new();
    walk(expected, String::new(), &mut out);
    out
}

/// What a model's value for one leaf field is, against the gold. "Empty" is null (or
/// absent), or `false`: a boolean slot is filled when it is true, as in SNIPS, where
/// `use_current_location` is true exactly when the slot is annotated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotOutcome {
    /// Gold filled, prediction equal to it.
    Hit,
    /// Both filled, not equal.
    Wrong,
    /// Gold empty, prediction filled.
    FalseFill,
    /// Gold filled, prediction empty.
    Miss,
    /// Both empty.
    Empty,
}

/// Null, absent, or `false`.
pub fn is_empty_value(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null) | Some(Value::Bool(false)))
}

pub fn slot_outcome(pred: Option<&Value>, gold: &Value, exact_strings: bool) -> SlotOutcome {
    match (is_empty_value(pred), is_empty_value(Some(gold))) {
        (true, true) => SlotOutcome::Empty,
        (false, true) => SlotOutcome::FalseFill,
        (true, false) => SlotOutcome::Miss,
        (false, false) => {
            if field_equal(pred.expect("filled"), gold, exact_strings) {
                SlotOutcome::Hit
            } else {
                SlotOutcome::Wrong
            }
        }
    }
}

/// Texts that are no answer: what a model writes instead of null, and the schema's own
/// words (every property name, spaced and not, every title and description), all
/// trimmed and lowercased.
pub fn placeholder_texts(schema: &Value) -> std::collections::BTreeSet<String> {
    let mut out: std::collections::BTreeSet<String> = [
        "",
        "n/a",
        "na",
        "none",
        "null",
        "unknown",
        "not specified",
        "not mentioned",
        "not stated",
        "not provided",
        "unspecified",
        "-",
        "?",
        "...",
        "string",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    fn walk(v: &Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("title" | "description", Value::String(t)) => {
                            out.insert(t.trim().to_lowercase());
                        }
                        ("properties", Value::Object(props)) => {
                            for name in props.keys() {
                                out.insert(name.to_lowercase());
                                out.insert(name.replace('_', " ").to_lowercase());
                            }
                        }
                        _ => {}
                    }
                    walk(x, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(schema, &mut out);
    out
}

/// Pointers of the string values in `value` (all leaves, inside arrays too) that are
/// placeholders.
pub fn find_placeholders(value: &Value, texts: &std::collections::BTreeSet<String>) -> Vec<String> {
    fn walk(
        v: &Value,
        path: String,
        texts: &std::collections::BTreeSet<String>,
        out: &mut Vec<String>,
    ) {
        match v {
            Value::String(s) if texts.contains(&s.trim().to_lowercase()) => out.push(path),
            Value::Object(m) => {
                for (k, x) in m {
                    walk(x, format!("{path}/{}", escape(k)), texts, out);
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(x, format!("{path}/{i}"), texts, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, String::new(), texts, &mut out);
    out
}

/// The filled nullable free-text strings of `value` (those `--source-strings` marks,
/// [`crate::engine::source::mark_free_text`]), and the pointers of those that are not a
/// substring of `text` (the same span rule as the grammar's, exact bytes). Counted with
/// the validator's own `not_in_source` check: against an empty text every non-empty
/// marked string fails, which counts them.
pub fn spans_not_in_text(schema: &Value, value: &Value, text: &str) -> (usize, Vec<String>) {
    let marked = crate::engine::source::mark_free_text(
        schema,
        formwork_grammar::source::SourceMode::Substring,
    );
    let failures = |doc: &str| -> Vec<String> {
        let Ok(v) = crate::validate::Validator::with_source(&marked, doc) else {
            return Vec::new();
        };
        match v.check_value(value) {
            crate::validate::Verdict::SemanticInvalid(errs) => errs
                .into_iter()
                .filter(|e| e.r#type == "not_in_source")
                .map(|e| crate::validate::errors::pointer_from_loc(&e.loc))
                .collect(),
            _ => Vec::new(),
        }
    };
    (failures("").len(), failures(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_fold_case_unless_exact() {
        assert!(field_equal(&json!(" Paris "), &json!("paris"), false));
        assert!(!field_equal(&json!(" Paris "), &json!("paris"), true));
        assert!(field_equal(&json!(6), &json!(6.0), false));
        assert!(!field_equal(&json!(null), &json!("x"), false));
        assert!(!field_equal(&json!(true), &json!("true"), false));
    }

    #[test]
    fn leaves_walk_objects_only() {
        let f = leaf_fields(&json!({"a": 1, "loc": {"city": "X", "state": null}, "l": [1, 2]}));
        let names: Vec<&str> = f.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(names, ["/a", "/loc/city", "/loc/state", "/l"]);
    }

    #[test]
    fn values_not_in_the_text_are_counted_whatever_the_mode() {
        let schema = json!({"type": "object", "properties": {
            "city": {"type": ["string", "null"]},
            "state": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "kind": {"type": ["string", "null"], "enum": ["a", "b", null]},
            "note": {"type": "string"}
        }});
        let text = "Book a table in Rome, please";
        // city is a span; state is invented; kind (an enum) and note (not nullable) are
        // not free text and are not looked at; null is not a value.
        let v = json!({"city": "Rome", "state": "Lazio", "kind": "a", "note": "xyz"});
        assert_eq!(
            spans_not_in_text(&schema, &v, text),
            (2, vec!["/state".to_string()])
        );
        let v = json!({"city": "rome", "state": null, "kind": null, "note": "x"});
        // Exact bytes, as the grammar's constraint: a case change is not a span.
        assert_eq!(
            spans_not_in_text(&schema, &v, text),
            (1, vec!["/city".to_string()])
        );
    }

    #[test]
    fn placeholders_are_no_answers_and_the_schemas_own_words() {
        let t = placeholder_texts(&json!({"properties": {"sku_grezzo": {"title": "Sku Grezzo",
            "description": "Il codice"}}}));
        for p in [
            "",
            "n/a",
            "unknown",
            "sku grezzo",
            "sku_grezzo",
            "il codice",
        ] {
            assert!(t.contains(p), "{p}");
        }
        let found = find_placeholders(
            &json!({"a": " Sku Grezzo ", "b": "SKU 11", "c": ["N/A", "x"], "d": {"e": ""}}),
            &t,
        );
        assert_eq!(found, ["/a", "/c/0", "/d/e"]);
    }
}
