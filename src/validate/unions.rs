//! `anyOf` / `oneOf` with no branch valid, reported as pydantic-core reports its unions
//! (checked against Pydantic's own `ValidationError` by `tests/validate_pydantic.rs`):
//!
//! | union | Pydantic | errors |
//! | --- | --- | --- |
//! | one branch and `null` | `Optional[X]` | X's errors, at the value's own `loc` |
//! | `discriminator` with `propertyName` | `Field(discriminator=...)` | the tagged branch's errors under `loc + [tag]`; `union_tag_not_found` without the tag, `union_tag_invalid` for an unknown one |
//! | any other | a smart `Union[...]` | every branch's errors, each under `loc + [the branch's name]`: `int`, `str`, `literal['s','m']`, a model's title, `list[int]`, ... |
//!
//! Deeper than [`MAX_UNION_DEPTH`] levels of unions, one `any_of` / `one_of` error.

use jsonschema::ValidationError;
use serde_json::Value;

use super::errors::{cut_input, map_error_at};
use super::render::py_repr;
use super::{LineError, LocItem};

/// How many `anyOf`/`oneOf` levels are looked into; deeper unions give one
/// `any_of`/`one_of` error. Bounds the recursion (and the stack) whatever the instance.
const MAX_UNION_DEPTH: usize = 16;

/// The schema at a JSON Pointer into `schema` (a canonical schema path, `$ref`s resolved).
pub(super) fn schema_at<'s>(schema: &'s Value, pointer: &str) -> Option<&'s Value> {
    schema.pointer(pointer)
}

/// The pointer one level up: `/properties/a/type` -> `/properties/a`.
pub(super) fn parent_path(pointer: &str) -> &str {
    pointer.rsplit_once('/').map_or("", |(head, _)| head)
}

/// One failed union, as jsonschema reported it.
pub(super) struct Union<'a, 'e> {
    pub keyword: &'static str,
    /// Each branch's errors.
    pub context: &'a [Vec<ValidationError<'e>>],
    pub loc: &'a [LocItem],
    /// `.../anyOf` or `.../oneOf`.
    pub schema_path: &'a str,
    pub instance: &'a Value,
    pub root: &'a Value,
    pub schema: &'a Value,
}

impl Union<'_, '_> {
    pub fn map(&self, out: &mut Vec<LineError>, depth: usize) {
        if depth >= MAX_UNION_DEPTH {
            out.push(self.line(
                self.loc.to_vec(),
                self.keyword,
                format!(
                    "Input should match at least one schema in {}",
                    if self.keyword == "any_of" {
                        "anyOf"
                    } else {
                        "oneOf"
                    }
                ),
            ));
            return;
        }
        let branches: Vec<Vec<LineError>> = self
            .context
            .iter()
            .map(|errs| {
                let mut lines = Vec::new();
                for e in errs {
                    map_error_at(e, self.root, self.schema, &mut lines, depth + 1);
                }
                lines
            })
            .collect();
        let schemas: Option<&Vec<Value>> =
            schema_at(self.schema, self.schema_path).and_then(Value::as_array);
        let schemas = schemas.filter(|s| s.len() == branches.len());
        if let Some(schemas) = schemas {
            if self.discriminated(schemas, &branches, out) {
                return;
            }
            let non_null: Vec<usize> = (0..schemas.len())
                .filter(|&i| !is_null_schema(self.schema, &schemas[i]))
                .collect();
            if let [only] = non_null[..] {
                out.extend(branches[only].iter().cloned());
                return;
            }
        }
        for (i, lines) in branches.into_iter().enumerate() {
            // `Optional[Union[...]]`: the `null` member's "Input should be None" is not said.
            if schemas.is_some_and(|s| is_null_schema(self.schema, &s[i]) && s.len() > 1) {
                continue;
            }
            let label = match schemas {
                Some(s) => branch_label(self.schema, &s[i], 0),
                None => format!("{}[{i}]", self.keyword),
            };
            for mut line in lines {
                let at = self.loc.len().min(line.loc.len());
                line.loc.insert(at, LocItem::Key(label.clone()));
                out.push(line);
            }
        }
    }

    /// A union with `discriminator.propertyName` (Pydantic's tagged union): the tag picks
    /// the branch. False when the tags cannot be read from the schema.
    fn discriminated(
        &self,
        schemas: &[Value],
        branches: &[Vec<LineError>],
        out: &mut Vec<LineError>,
    ) -> bool {
        let union = schema_at(self.schema, parent_path(self.schema_path));
        let Some(disc) = union.and_then(|u| u.get("discriminator")) else {
            return false;
        };
        let Some(prop) = disc.get("propertyName").and_then(Value::as_str) else {
            return false;
        };
        let Some(tags) = self.tags(disc, prop, schemas) else {
            return false;
        };
        let Value::Object(map) = self.instance else {
            out.push(self.line(
                self.loc.to_vec(),
                "dict_type",
                "Input should be an object".into(),
            ));
            return true;
        };
        let Some(tag) = map.get(prop) else {
            out.push(self.line(
                self.loc.to_vec(),
                "union_tag_not_found",
                format!("Unable to extract tag using discriminator '{prop}'"),
            ));
            return true;
        };
        let tag_text = match tag {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match tags.iter().find(|(t, _)| *t == tag_text) {
            Some((_, i)) if !branches[*i].is_empty() => {
                for mut line in branches[*i].iter().cloned() {
                    let at = self.loc.len().min(line.loc.len());
                    line.loc.insert(at, LocItem::Key(tag_text.clone()));
                    out.push(line);
                }
            }
            // The tagged branch accepts the value: another keyword of the union failed.
            Some(_) => return false,
            None => {
                let expected: Vec<String> = tags
                    .iter()
                    .map(|(t, _)| py_repr(&Value::String(t.clone())))
                    .collect();
                out.push(self.line(
                    self.loc.to_vec(),
                    "union_tag_invalid",
                    format!(
                        "Input tag '{tag_text}' found using '{prop}' does not match any of the expected tags: {}",
                        expected.join(", ")
                    ),
                ));
            }
        }
        true
    }

    /// Each tag with the index of its branch: `mapping` in its order, else each branch's
    /// `const` (or one-value `enum`) at `properties/<prop>`.
    fn tags(&self, disc: &Value, prop: &str, schemas: &[Value]) -> Option<Vec<(String, usize)>> {
        if let Some(mapping) = disc.get("mapping").and_then(Value::as_object) {
            let mut out = Vec::new();
            for (tag, target) in mapping {
                let target = target.as_str()?;
                let i = schemas
                    .iter()
                    .position(|s| s.get("$ref").and_then(Value::as_str) == Some(target))?;
                out.push((tag.clone(), i));
            }
            return Some(out);
        }
        let mut out = Vec::new();
        for (i, s) in schemas.iter().enumerate() {
            let s = resolve(self.schema, s);
            let p = s.get("properties")?.get(prop)?;
            let p = resolve(self.schema, p);
            let values: Vec<&Value> = match (p.get("const"), p.get("enum")) {
                (Some(c), _) => vec![c],
                (None, Some(Value::Array(e))) => e.iter().collect(),
                _ => return None,
            };
            for v in values {
                out.push((v.as_str()?.to_string(), i));
            }
        }
        Some(out)
    }

    fn line(&self, loc: Vec<LocItem>, ty: &str, msg: String) -> LineError {
        LineError {
            loc,
            msg,
            r#type: ty.to_string(),
            input: cut_input(self.instance),
            schema_path: self.schema_path.to_string(),
            fields: Vec::new(),
        }
    }
}

/// A local `$ref` resolved (one level; a `$ref` that does not resolve is left as it is).
pub(super) fn resolve<'s>(root: &'s Value, s: &'s Value) -> &'s Value {
    match s.get("$ref").and_then(Value::as_str) {
        Some(r) => r
            .strip_prefix('#')
            .and_then(|p| root.pointer(p))
            .unwrap_or(s),
        None => s,
    }
}

pub(super) fn is_null_schema(root: &Value, s: &Value) -> bool {
    let s = resolve(root, s);
    s.get("type").and_then(Value::as_str) == Some("null")
        || s.get("const") == Some(&Value::Null)
        || s.get("enum") == Some(&Value::Array(vec![Value::Null]))
}

/// The name pydantic-core gives a union's member, from the member's schema: `int`,
/// `constrained-str`, `literal['s','m']`, `list[int]`, `dict[str,int]`, a model's or an
/// enum's title, `nullable[int]`; `any` when the schema says nothing it could be named by.
pub(super) fn branch_label(root: &Value, s: &Value, depth: usize) -> String {
    if depth > 8 {
        return "any".into();
    }
    if s.get("$ref").is_some() {
        let target = resolve(root, s);
        if let Some(title) = target.get("title").and_then(Value::as_str) {
            if target.get("properties").is_some() {
                return title.to_string();
            }
            if target.get("enum").is_some() {
                return match target.get("type").and_then(Value::as_str) {
                    Some("string") => format!("str-enum[{title}]"),
                    Some("integer") => format!("int-enum[{title}]"),
                    Some("number") => format!("float-enum[{title}]"),
                    _ => format!("enum[{title}]"),
                };
            }
        }
        if !std::ptr::eq(target, s) {
            return branch_label(root, target, depth + 1);
        }
    }
    if let Some(c) = s.get("const") {
        return format!("literal[{}]", py_repr(c));
    }
    if let Some(Value::Array(values)) = s.get("enum") {
        let reprs: Vec<String> = values.iter().map(py_repr).collect();
        return format!("literal[{}]", reprs.join(","));
    }
    let has = |keys: &[&str]| keys.iter().any(|k| s.get(*k).is_some());
    let numeric = [
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
    ];
    match s.get("type").and_then(Value::as_str) {
        Some("integer") if has(&numeric) => "constrained-int".into(),
        Some("integer") => "int".into(),
        Some("number") if has(&numeric) => "constrained-float".into(),
        Some("number") => "float".into(),
        Some("boolean") => "bool".into(),
        Some("null") => "none".into(),
        Some("string") => match s.get("format").and_then(Value::as_str) {
            Some("date") => "date".into(),
            Some("date-time") => "datetime".into(),
            Some("time") => "time".into(),
            Some("duration") => "timedelta".into(),
            Some("uuid") => "uuid".into(),
            _ if has(&["minLength", "maxLength", "pattern"]) => "constrained-str".into(),
            _ => "str".into(),
        },
        Some("array") => match s.get("items") {
            Some(items) if items.is_object() => {
                format!("list[{}]", branch_label(root, items, depth + 1))
            }
            _ => "list[any]".into(),
        },
        Some("object") => {
            if let (Some(title), Some(_)) =
                (s.get("title").and_then(Value::as_str), s.get("properties"))
            {
                return title.to_string();
            }
            match s.get("additionalProperties") {
                Some(v) if v.is_object() => {
                    format!("dict[str,{}]", branch_label(root, v, depth + 1))
                }
                _ => "dict[str,any]".into(),
            }
        }
        _ => match s.get("anyOf").and_then(Value::as_array) {
            Some(members) => {
                let (nulls, others): (Vec<&Value>, Vec<&Value>) =
                    members.iter().partition(|m| is_null_schema(root, m));
                let labels: Vec<String> = others
                    .iter()
                    .map(|m| branch_label(root, m, depth + 1))
                    .collect();
                match (nulls.is_empty(), &labels[..]) {
                    (false, [one]) => format!("nullable[{one}]"),
                    _ => format!("union[{}]", labels.join(",")),
                }
            }
            None => s
                .get("title")
                .and_then(Value::as_str)
                .unwrap_or("any")
                .to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn branch_labels_are_pydantic_cores() {
        let root = json!({"$defs": {
            "Cat": {"title": "Cat", "type": "object", "properties": {"k": {"const": "cat"}}},
            "Level": {"title": "Level", "enum": ["low", "high"], "type": "string"}
        }});
        let cases = [
            (json!({"type": "integer"}), "int"),
            (json!({"type": "integer", "minimum": 0}), "constrained-int"),
            (json!({"type": "string", "maxLength": 3}), "constrained-str"),
            (json!({"type": "string", "format": "date"}), "date"),
            (
                json!({"enum": ["s", "m"], "type": "string"}),
                "literal['s','m']",
            ),
            (json!({"const": 1}), "literal[1]"),
            (
                json!({"type": "array", "items": {"type": "number"}}),
                "list[float]",
            ),
            (
                json!({"type": "object", "additionalProperties": {"type": "integer"}}),
                "dict[str,int]",
            ),
            (json!({"$ref": "#/$defs/Cat"}), "Cat"),
            (json!({"$ref": "#/$defs/Level"}), "str-enum[Level]"),
            (
                json!({"anyOf": [{"type": "integer"}, {"type": "null"}]}),
                "nullable[int]",
            ),
        ];
        for (s, want) in cases {
            assert_eq!(branch_label(&root, &s, 0), want, "{s}");
        }
    }

    #[test]
    fn parent_paths() {
        assert_eq!(parent_path("/properties/a/anyOf"), "/properties/a");
        assert_eq!(parent_path("/anyOf"), "");
        assert_eq!(parent_path(""), "");
    }
}
