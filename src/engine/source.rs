//! `--source-strings`: mark the free-text fields of a schema as spans of the document.
//!
//! [`mark_free_text`] adds `"x-formwork-source": mode` to every *nullable free-text string*:
//! a subschema whose `type` is `["string", "null"]` (in any order), or the string branch of an
//! `anyOf`/`oneOf` whose other branch is `{"type": "null"}`, where the string has no `enum`,
//! `const`, `format` or `pattern` (a `$ref` branch is resolved inside the document to decide,
//! and the keyword goes beside the `$ref`). Strings that may not be null are left alone: a
//! value that must exist cannot be forced to be a span of a document that lacks it. `$defs`
//! and `definitions` are walked like the properties, so a `Location` def used through `$ref`
//! is marked once, for every use. Pure: a new value, the input untouched.

use formwork_grammar::source::SourceMode;
use serde_json::{Map, Value};

const KEYWORD: &str = "x-formwork-source";

/// The schema with `"x-formwork-source": mode` on every nullable free-text string.
pub fn mark_free_text(schema: &Value, mode: SourceMode) -> Value {
    let mut out = schema.clone();
    walk(&mut out, schema, mode, 0);
    out
}

/// Nesting walked at most (the validator refuses deeper schemas anyway).
const MAX_DEPTH: usize = 128;

/// The names in a subschema's `type` (a string or a list).
pub(super) fn type_names(m: &Map<String, Value>) -> Vec<&str> {
    match m.get("type") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn free_text(m: &Map<String, Value>) -> bool {
    !["enum", "const", "format", "pattern"]
        .iter()
        .any(|k| m.contains_key(*k))
}

/// A `$ref` inside the document, followed (a few hops at most).
pub(super) fn resolve<'a>(root: &'a Value, mut v: &'a Value) -> &'a Value {
    for _ in 0..8 {
        let Some(r) = v.get("$ref").and_then(Value::as_str) else {
            break;
        };
        let Some(p) = r.strip_prefix('#') else {
            break;
        };
        match root.pointer(p) {
            Some(t) => v = t,
            None => break,
        }
    }
    v
}

/// A string-only, free-text subschema (after its `$ref`)?
fn string_branch(root: &Value, v: &Value) -> bool {
    let Value::Object(own) = v else { return false };
    let Value::Object(m) = resolve(root, v) else {
        return false;
    };
    type_names(m) == ["string"] && free_text(m) && free_text(own)
}

fn null_branch(v: &Value) -> bool {
    match v {
        Value::Object(m) => {
            type_names(m) == ["null"] || m.get("enum") == Some(&Value::Array(vec![Value::Null]))
        }
        _ => false,
    }
}

fn walk(v: &mut Value, root: &Value, mode: SourceMode, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let Value::Object(m) = v else { return };
    let names = type_names(m);
    if names.len() == 2 && names.contains(&"string") && names.contains(&"null") && free_text(m) {
        m.insert(KEYWORD.into(), mode.as_str().into());
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = m.get_mut(key) {
            if branches.len() == 2 {
                for (s, n) in [(0, 1), (1, 0)] {
                    if string_branch(root, &branches[s]) && null_branch(&branches[n]) {
                        if let Value::Object(b) = &mut branches[s] {
                            b.insert(KEYWORD.into(), mode.as_str().into());
                        }
                    }
                }
            }
        }
    }
    for (k, child) in m.iter_mut() {
        match k.as_str() {
            "properties" | "patternProperties" | "$defs" | "definitions" => {
                if let Value::Object(c) = child {
                    for s in c.values_mut() {
                        walk(s, root, mode, depth + 1);
                    }
                }
            }
            "additionalProperties" | "additionalItems" | "then" | "else" => {
                walk(child, root, mode, depth + 1)
            }
            "items" | "prefixItems" | "allOf" | "anyOf" | "oneOf" => match child {
                Value::Array(a) => {
                    for s in a {
                        walk(s, root, mode, depth + 1);
                    }
                }
                _ => walk(child, root, mode, depth + 1),
            },
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn marked(v: &Value, p: &str) -> Option<String> {
        v.pointer(p)?.get(KEYWORD)?.as_str().map(String::from)
    }

    #[test]
    fn marks_nullable_free_text_through_defs_and_unions() {
        let s = json!({
            "$defs": {
                "Location": {"type": "object", "properties": {
                    "city": {"type": ["string", "null"], "minLength": 1},
                    "code": {"type": ["null", "string"], "pattern": "^[A-Z]{2}$"}
                }},
                "Name": {"type": "string", "maxLength": 40},
                "Day": {"type": "string", "format": "date"}
            },
            "type": "object",
            "properties": {
                "name": {"anyOf": [{"$ref": "#/$defs/Name"}, {"type": "null"}]},
                "day": {"anyOf": [{"$ref": "#/$defs/Day"}, {"type": "null"}]},
                "date": {"anyOf": [{"type": "null"}, {"type": "string", "format": "date"}]},
                "kind": {"enum": ["a", "b", null]},
                "kind2": {"type": ["string", "null"], "enum": ["a", null]},
                "title": {"type": "string"},
                "count": {"type": ["integer", "null"]},
                "notes": {"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "null"}]}},
                "loc": {"$ref": "#/$defs/Location"}
            }
        });
        let out = mark_free_text(&s, SourceMode::Words);
        let w = Some("words".to_string());
        assert_eq!(marked(&out, "/$defs/Location/properties/city"), w);
        assert_eq!(marked(&out, "/$defs/Location/properties/code"), None);
        assert_eq!(marked(&out, "/properties/name/anyOf/0"), w);
        assert_eq!(
            marked(&out, "/$defs/Name"),
            None,
            "the def itself may be used elsewhere"
        );
        assert_eq!(marked(&out, "/properties/day/anyOf/0"), None);
        assert_eq!(marked(&out, "/properties/date/anyOf/1"), None);
        assert_eq!(marked(&out, "/properties/kind"), None);
        assert_eq!(marked(&out, "/properties/kind2"), None);
        assert_eq!(marked(&out, "/properties/title"), None, "not nullable");
        assert_eq!(marked(&out, "/properties/count"), None);
        assert_eq!(marked(&out, "/properties/notes/items/oneOf/0"), w);
        // Pure: the input is untouched, and marking twice changes nothing more.
        assert!(!s.to_string().contains(KEYWORD));
        assert_eq!(mark_free_text(&out, SourceMode::Words), out);
        let sub = mark_free_text(&s, SourceMode::Substring);
        assert_eq!(
            marked(&sub, "/$defs/Location/properties/city").as_deref(),
            Some("substring")
        );
    }

    #[test]
    fn snips_schemas_mark_their_verbatim_fields() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/data/extraction/schemas");
        let Ok(rd) = std::fs::read_dir(&dir) else {
            eprintln!("skipped: no {}", dir.display());
            return;
        };
        for e in rd.flatten() {
            let s: Value =
                serde_json::from_str(&std::fs::read_to_string(e.path()).unwrap()).unwrap();
            let out = mark_free_text(&s, SourceMode::Substring);
            let n = out.to_string().matches(KEYWORD).count();
            assert!(n >= 1, "{}: {n} marked", e.path().display());
            // The grammar takes the result.
            formwork_grammar::compile::compile(&out, &Default::default()).unwrap();
        }
    }
}
