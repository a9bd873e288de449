//! JSON Pointers that name a place in the values a schema admits, checked before any
//! work starts (`extract --review-field`): a pointer without its leading `/`, or one that
//! names a field the schema has no room for, would never fire, and nothing would say so.

use serde_json::Value;

/// Why `pointer` cannot name a value of `schema` (one line, without the flag's name),
/// or `Ok` when some value the schema admits has something there.
pub fn check(schema: &Value, pointer: &str) -> Result<(), String> {
    let tokens = tokens(pointer)?;
    let (mut at, mut deepest) = (String::new(), String::new());
    if holds(schema, schema, &tokens, 0, &mut at, &mut deepest) {
        Ok(())
    } else {
        let at = deepest;
        Err(format!(
            "the schema has no value at this JSON Pointer (nothing can be at {})",
            if at.is_empty() { "/" } else { &at }
        ))
    }
}

/// The reference tokens of an RFC 6901 pointer, `~1` and `~0` decoded.
pub fn tokens(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!(
            "not a JSON Pointer: it starts with `/`, as in /{pointer}"
        ));
    };
    rest.split('/')
        .map(|t| {
            let mut out = String::new();
            let mut chars = t.chars();
            while let Some(c) = chars.next() {
                match c {
                    '~' => match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => {
                            return Err(format!(
                                "not a JSON Pointer: `~` must be followed by 0 or 1 (in `{t}`)"
                            ))
                        }
                    },
                    c => out.push(c),
                }
            }
            Ok(out)
        })
        .collect()
}

/// Recursion bound for `$ref` cycles: past it, a pointer is taken as possible.
const MAX_DEPTH: usize = 64;

/// Whether some value admitted by `schema` has something at `tokens`, `at` being the
/// path so far. `deepest` keeps the longest prefix of the pointer that was reachable,
/// for the message.
fn holds(
    root: &Value,
    schema: &Value,
    tokens: &[String],
    depth: usize,
    at: &mut String,
    deepest: &mut String,
) -> bool {
    let Some((first, rest)) = tokens.split_first() else {
        return true;
    };
    if depth > MAX_DEPTH {
        return true;
    }
    let m = match schema {
        Value::Bool(b) => return *b,
        Value::Object(m) => m,
        _ => return true,
    };
    if let Some(Value::String(r)) = m.get("$ref") {
        let target = r.strip_prefix('#').and_then(|p| {
            if p.is_empty() {
                Some(root)
            } else {
                root.pointer(p)
            }
        });
        match target {
            Some(t) if holds(root, t, tokens, depth + 1, at, deepest) => return true,
            Some(_) => {}
            // A reference formwork cannot follow here: do not refuse the flag for it.
            None => return true,
        }
    }
    for kw in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = m.get(kw) {
            if branches
                .iter()
                .any(|b| holds(root, b, tokens, depth + 1, at, deepest))
            {
                return true;
            }
        }
    }
    // A `$ref` or a composition with no structure of its own is only what its targets
    // are: not an open schema.
    let composed = ["$ref", "allOf", "anyOf", "oneOf"]
        .iter()
        .any(|k| m.contains_key(*k));
    let own = [
        "type",
        "properties",
        "patternProperties",
        "additionalProperties",
        "items",
        "prefixItems",
    ];
    if composed && !own.iter().any(|k| m.contains_key(*k)) {
        return false;
    }
    let types: Vec<&str> = match m.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let typed = !types.is_empty();
    let may = |t: &str| !typed || types.contains(&t);
    let step = |sub: &Value, at: &mut String, deepest: &mut String| {
        let len = at.len();
        at.push('/');
        at.push_str(&first.replace('~', "~0").replace('/', "~1"));
        if at.len() > deepest.len() {
            deepest.clone_from(at);
        }
        if holds(root, sub, rest, depth + 1, at, deepest) {
            return true;
        }
        at.truncate(len);
        false
    };
    if may("object") {
        if let Some(sub) = m.get("properties").and_then(|p| p.get(first.as_str())) {
            if step(sub, at, deepest) {
                return true;
            }
        }
        match (m.get("additionalProperties"), m.get("patternProperties")) {
            (_, Some(Value::Object(p))) if !p.is_empty() => return true,
            (Some(sub @ Value::Object(_)), _) => {
                if step(sub, at, deepest) {
                    return true;
                }
            }
            (Some(Value::Bool(true)), _) => return true,
            // No word about other properties and none listed: an open object.
            (None, _) if !m.contains_key("properties") => return true,
            _ => {}
        }
    }
    if may("array") {
        if let Ok(i) = first.parse::<usize>() {
            let prefix = m.get("prefixItems").and_then(Value::as_array);
            let items = m.get("items");
            let sub = match (prefix.and_then(|p| p.get(i)), items) {
                (Some(s), _) => Some(s),
                (None, Some(Value::Array(tuple))) => tuple.get(i).or(m.get("additionalItems")),
                (None, Some(s)) => Some(s),
                (None, None) if prefix.is_some() => None,
                (None, None) => return true,
            };
            if let Some(sub) = sub {
                if step(sub, at, deepest) {
                    return true;
                }
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn order() -> Value {
        json!({
            "type": "object",
            "properties": {
                "campi_incerti": {"type": ["array", "null"], "items": {"type": "string"}},
                "righe": {"type": "array", "items": {"$ref": "#/$defs/Riga"}},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "a/b": {"type": "string"}
            },
            "required": ["righe"],
            "additionalProperties": false,
            "$defs": {"Riga": {"type": "object", "properties": {"sku": {"type": "string"}}}}
        })
    }

    #[test]
    fn a_pointer_into_the_schema_is_accepted() {
        let s = order();
        for p in [
            "",
            "/campi_incerti",
            "/campi_incerti/0",
            "/righe/3/sku",
            "/note",
            "/a~1b",
        ] {
            assert_eq!(check(&s, p), Ok(()), "{p}");
        }
    }

    #[test]
    fn a_pointer_without_its_slash_or_with_a_bad_escape_is_refused() {
        let e = check(&order(), "campi_incerti").unwrap_err();
        assert!(e.contains("/campi_incerti"), "{e}");
        assert!(check(&order(), "/a~2b").unwrap_err().contains("~"));
    }

    #[test]
    fn a_field_the_schema_has_no_room_for_is_refused_with_where_it_stops() {
        let s = order();
        let e = check(&s, "/campi_incert").unwrap_err();
        assert!(e.ends_with("at /)"), "{e}");
        let e = check(&s, "/righe/0/skuu").unwrap_err();
        assert!(e.contains("at /righe/0)"), "{e}");
        assert!(check(&s, "/righe/x").is_err());
        assert!(check(&s, "/note/x").is_err(), "a string has no fields");
    }

    #[test]
    fn an_open_schema_takes_any_pointer() {
        assert_eq!(check(&json!({}), "/anything/0"), Ok(()));
        assert_eq!(check(&json!(true), "/x"), Ok(()));
        assert_eq!(check(&json!({"type": "object"}), "/x"), Ok(()));
        assert!(check(&json!(false), "/x").is_err());
        let s = json!({"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "integer"}});
        assert_eq!(check(&s, "/zzz"), Ok(()));
        assert!(check(&s, "/zzz/0").is_err());
    }
}
