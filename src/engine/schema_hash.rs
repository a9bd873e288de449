//! The one `schema_sha256` of a schema, for `extract`, `bench` and `serve` alike.
//!
//! It is the sha256 of the schema's canonical text: compact, with the keywords of every
//! schema object sorted, so that `{"type": .., "properties": ..}` and `{"properties": ..,
//! "type": ..}` are one schema (one hash, one compiled grammar in the server's cache).
//! What is **not** sorted is what the order means something for: the names in
//! `properties` (formwork writes an object's properties in the order they are listed, so
//! two orders are two different answers), every array (`required`, `anyOf`, `enum`, ...),
//! and data (`const`, `enum`, `default`, `examples`, and any keyword formwork does not
//! know, such as `x-` extensions), which are kept as given.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Keywords whose value is one subschema.
const ONE: &[&str] = &[
    "additionalProperties",
    "unevaluatedProperties",
    "items",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
/// Keywords whose value is an array of subschemas (the array's order kept).
const LIST: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// Keywords whose value maps names to subschemas, where the names' order means nothing.
const MAP_SORTED: &[&str] = &["$defs", "definitions", "dependentSchemas"];
/// Keywords whose value maps names to subschemas in an order that counts.
const MAP_ORDERED: &[&str] = &["properties", "patternProperties"];

/// The sha256 (lower-case hex) of [`canonical_text`].
pub fn schema_sha256(schema: &Value) -> String {
    sha256_hex(canonical_text(schema).as_bytes())
}

/// The compact canonical text of a schema (module doc).
pub fn canonical_text(schema: &Value) -> String {
    serde_json::to_string(&canonical(schema)).expect("a serde_json::Value always serialises")
}

/// Lower-case hex of the sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The schema with its keywords sorted at every level (module doc).
pub fn canonical(schema: &Value) -> Value {
    let Value::Object(m) = schema else {
        // `true`, `false`, or not a schema: kept as it is.
        return schema.clone();
    };
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    let mut out = Map::with_capacity(m.len());
    for k in keys {
        let v = &m[k];
        let k_str = k.as_str();
        let c = match v {
            Value::Object(sub) if MAP_ORDERED.contains(&k_str) => {
                Value::Object(sub.iter().map(|(n, s)| (n.clone(), canonical(s))).collect())
            }
            Value::Object(sub) if MAP_SORTED.contains(&k_str) => {
                let mut names: Vec<&String> = sub.keys().collect();
                names.sort();
                Value::Object(
                    names
                        .into_iter()
                        .map(|n| (n.clone(), canonical(&sub[n])))
                        .collect(),
                )
            }
            Value::Array(items) if LIST.contains(&k_str) => {
                Value::Array(items.iter().map(canonical).collect())
            }
            _ if ONE.contains(&k_str) => canonical(v),
            _ => v.clone(),
        };
        out.insert(k.clone(), c);
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reorder(v: &Value, keys: &[&str]) -> Value {
        let m = v.as_object().unwrap();
        assert_eq!(m.len(), keys.len());
        Value::Object(
            keys.iter()
                .map(|k| (k.to_string(), m[*k].clone()))
                .collect(),
        )
    }

    #[test]
    fn keyword_order_does_not_count() {
        let a = json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "string", "maxLength": 3}}});
        let inner = reorder(&a["properties"]["a"], &["maxLength", "type"]);
        let mut b = reorder(&a, &["properties", "required", "type"]);
        b["properties"]["a"] = inner;
        assert_ne!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        assert_eq!(schema_sha256(&a), schema_sha256(&b));
        assert_eq!(canonical_text(&a), canonical_text(&b));
        assert_eq!(schema_sha256(&a).len(), 64);
    }

    #[test]
    fn property_order_counts_at_every_depth() {
        let a = json!({"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}});
        let b = json!({"type": "object", "properties": {"y": {"type": "integer"}, "x": {"type": "integer"}}});
        assert_ne!(schema_sha256(&a), schema_sha256(&b));
        // The same below `items`, `anyOf` and `$defs`.
        for wrap in [
            |s: Value| json!({"type": "array", "items": s}),
            |s: Value| json!({"anyOf": [s, {"type": "null"}]}),
            |s: Value| json!({"$defs": {"T": s}, "$ref": "#/$defs/T"}),
        ] {
            assert_ne!(
                schema_sha256(&wrap(a.clone())),
                schema_sha256(&wrap(b.clone()))
            );
        }
    }

    #[test]
    fn a_property_named_like_a_keyword_keeps_its_place() {
        // `properties` and `type` here are property names, not keywords.
        let a =
            json!({"properties": {"type": {"type": "string"}, "properties": {"type": "string"}}});
        let b =
            json!({"properties": {"properties": {"type": "string"}, "type": {"type": "string"}}});
        assert_ne!(schema_sha256(&a), schema_sha256(&b));
        let c = canonical(&a);
        let names: Vec<&String> = c["properties"].as_object().unwrap().keys().collect();
        assert_eq!(names, ["type", "properties"]);
    }

    #[test]
    fn data_and_arrays_are_kept_as_given() {
        let a = json!({"const": {"b": 1, "a": 2}, "enum": ["z", "a"], "x-formwork-source": {"q": 1, "p": 2}});
        let c = canonical(&a);
        assert_eq!(
            serde_json::to_string(&c["const"]).unwrap(),
            r#"{"b":1,"a":2}"#
        );
        assert_eq!(c["enum"], json!(["z", "a"]));
        assert_eq!(
            serde_json::to_string(&c["x-formwork-source"]).unwrap(),
            r#"{"q":1,"p":2}"#
        );
        let b = json!({"const": {"a": 2, "b": 1}, "enum": ["z", "a"], "x-formwork-source": {"q": 1, "p": 2}});
        assert_ne!(schema_sha256(&a), schema_sha256(&b));
        // `$defs` names are sorted: their order means nothing.
        let d1 = json!({"$defs": {"A": {"type": "string"}, "B": {"type": "integer"}}});
        let d2 = json!({"$defs": {"B": {"type": "integer"}, "A": {"type": "string"}}});
        assert_eq!(schema_sha256(&d1), schema_sha256(&d2));
    }
}
