//! jsonschema's errors, mapped to pydantic-core's `type` names and messages.
//!
//! | JSON Schema keyword | `type` | message |
//! | --- | --- | --- |
//! | `required`, `dependentRequired`, `dependencies` | `missing` | Field required |
//! | `additionalProperties`, `unevaluatedProperties` | `extra_forbidden` | Extra inputs are not permitted |
//! | `type` | `int_type`, `float_type`, `string_type`, `bool_type`, `dict_type` (`model_type` for an object schema with `properties`), `list_type`, `none_required` | Input should be a valid integer; Input should be an object; Input should be a valid array (Pydantic's JSON-mode words) |
//! | `type: string` with `format` date, date-time, time, duration, uuid | `date_type`, `datetime_type`, `time_type`, `time_delta_type`, `uuid_type` | Input should be a valid date |
//! | `type` with several types | the first non-null one's name | Input should be a valid integer or a valid string (`null` is named only alone) |
//! | `maximum` / `minimum` | `less_than_equal` / `greater_than_equal` | Input should be less than or equal to 5000 |
//! | `exclusiveMaximum` / `exclusiveMinimum` | `less_than` / `greater_than` | Input should be greater than 0 |
//! | `multipleOf` | `multiple_of` | Input should be a multiple of 0.01 |
//! | `maxLength` / `minLength` | `string_too_long` / `string_too_short` | String should have at most 200 characters |
//! | `pattern` | `string_pattern_mismatch` | String should match pattern '^a' |
//! | `enum` (inline), `const` | `literal_error` | Input should be 'a', 'b' or 'c' |
//! | `enum` as a whole `$defs` entry (Pydantic's `Enum` class) | `enum` | Input should be 'a' or 'b' |
//! | `maxItems` / `minItems` and properties | `too_long` / `too_short` | List should have at most 3 items after validation, not 5 |
//! | `format` | `date_parsing`, `time_parsing`, `datetime_parsing`, `time_delta_parsing`, `uuid_parsing`, `url_parsing`, `ip_v4_address`, `ip_v6_address`, `email_parsing`, `hostname_parsing`, else `format_mismatch` | Input should be a valid date in the format YYYY-MM-DD |
//! | `anyOf` / `oneOf` | as pydantic-core's unions: `Optional[X]` gives X's errors; a tagged union the tagged member's (`union_tag_invalid`, `union_tag_not_found`); any other every member's, under its name (see `unions.rs`) | `["code", "int"]` Input should be a valid integer |
//!
//! Errors come in the model's field order (`order.rs`). `tests/validate_pydantic.rs` checks
//! all this against Pydantic's own `ValidationError`, and lists where formwork differs.
//!
//! Names with no pydantic-core counterpart (`unique_items`, `not`, `contains`, `one_of_multiple`,
//! `false_schema`, ...) are snake_case and stable: tests pin them.

use jsonschema::error::{TypeKind, ValidationErrorKind as K};
use jsonschema::{JsonType, ValidationError};
use serde_json::Value;

use crate::pointer::{escape, unescape};

use super::render::py_repr;
use super::unions::{parent_path, schema_at, Union};
use super::{LineError, LocItem};

/// The longest string (in characters) kept in [`LineError::input`].
pub const INPUT_CUT: usize = 50;

/// Map one jsonschema error to line errors (a few kinds give several, e.g. one
/// `extra_forbidden` per unexpected key), appended to `out`. `root` is the validated
/// instance, used to tell array indices from object keys in the location.
/// `schema` is the schema validated against (the keywords around an error are looked up
/// in it: a model's `properties`, a union's `discriminator` and branches); `Value::Null`
/// when unknown.
pub fn map_error(
    err: &ValidationError<'_>,
    root: &Value,
    schema: &Value,
    out: &mut Vec<LineError>,
) {
    map_error_at(err, root, schema, out, 0)
}

pub(super) fn map_error_at(
    err: &ValidationError<'_>,
    root: &Value,
    schema: &Value,
    out: &mut Vec<LineError>,
    union_depth: usize,
) {
    if let K::AnyOf { context } | K::OneOfNotValid { context } = err.kind() {
        let keyword = if matches!(err.kind(), K::AnyOf { .. }) {
            "any_of"
        } else {
            "one_of"
        };
        let pointer = err.instance_path().to_string();
        let loc = loc_from_pointer(root, &pointer);
        let schema_path = err.schema_path().to_string();
        let union = Union {
            keyword,
            context,
            loc: &loc,
            schema_path: &schema_path,
            instance: err.instance(),
            root,
            schema,
        };
        union.map(out, union_depth);
        return;
    }
    map_leaf(err, root, schema, out)
}

/// Every kind but the unions: no recursion except `propertyNames`' single inner error.
#[inline(never)]
fn map_leaf(err: &ValidationError<'_>, root: &Value, schema: &Value, out: &mut Vec<LineError>) {
    let pointer = err.instance_path().to_string();
    let loc = loc_from_pointer(root, &pointer);
    let schema_path = err.schema_path().to_string();
    let instance: &Value = err.instance();
    let line = |loc: Vec<LocItem>, ty: &str, msg: String, input: &Value| LineError {
        loc,
        msg,
        r#type: ty.to_string(),
        input: cut_input(input),
        schema_path: schema_path.clone(),
        fields: Vec::new(),
    };
    match err.kind() {
        K::Required { property } => {
            let mut l = loc.clone();
            l.push(LocItem::Key(
                property.as_str().unwrap_or_default().to_string(),
            ));
            out.push(line(l, "missing", "Field required".into(), instance));
        }
        K::AdditionalProperties { unexpected } | K::UnevaluatedProperties { unexpected } => {
            for key in unexpected {
                let mut l = loc.clone();
                l.push(LocItem::Key(key.clone()));
                let input = instance.get(key.as_str()).unwrap_or(&Value::Null);
                out.push(line(
                    l,
                    "extra_forbidden",
                    "Extra inputs are not permitted".into(),
                    input,
                ));
            }
        }
        K::Type { kind } => {
            let types: Vec<JsonType> = match kind {
                TypeKind::Single(t) => vec![*t],
                TypeKind::Multiple(set) => set.into_iter().collect(),
            };
            let (mut ty, mut msg) = type_message(&types);
            let here = schema_at(schema, parent_path(&schema_path));
            // A Pydantic model (an object schema with `properties`) is `model_type`, a
            // `dict[str, X]` is `dict_type`; both say "an object" in JSON mode.
            if types == [JsonType::Object] && here.is_some_and(|s| s.get("properties").is_some()) {
                ty = "model_type";
            }
            // A date, a UUID, ...: Pydantic's type is the format's, not `string_type`.
            if types == [JsonType::String] {
                let format = here.and_then(|s| s.get("format")).and_then(Value::as_str);
                if let Some((t, m)) = format.and_then(format_type) {
                    (ty, msg) = (t, m.to_string());
                }
            }
            out.push(line(loc, ty, msg, instance));
        }
        K::Maximum { limit } => out.push(line(
            loc,
            "less_than_equal",
            format!("Input should be less than or equal to {}", num_text(limit)),
            instance,
        )),
        K::Minimum { limit } => out.push(line(
            loc,
            "greater_than_equal",
            format!(
                "Input should be greater than or equal to {}",
                num_text(limit)
            ),
            instance,
        )),
        K::ExclusiveMaximum { limit } => out.push(line(
            loc,
            "less_than",
            format!("Input should be less than {}", num_text(limit)),
            instance,
        )),
        K::ExclusiveMinimum { limit } => out.push(line(
            loc,
            "greater_than",
            format!("Input should be greater than {}", num_text(limit)),
            instance,
        )),
        K::MultipleOf { multiple_of } => out.push(line(
            loc,
            "multiple_of",
            format!("Input should be a multiple of {}", num_text(multiple_of)),
            instance,
        )),
        K::MaxLength { limit } => out.push(line(
            loc,
            "string_too_long",
            format!(
                "String should have at most {limit} character{}",
                plural(*limit)
            ),
            instance,
        )),
        K::MinLength { limit } => out.push(line(
            loc,
            "string_too_short",
            format!(
                "String should have at least {limit} character{}",
                plural(*limit)
            ),
            instance,
        )),
        K::Pattern { pattern } => out.push(line(
            loc,
            "string_pattern_mismatch",
            format!("String should match pattern '{pattern}'"),
            instance,
        )),
        K::BacktrackLimitExceeded { .. } | K::RegexEngineFailure { .. } => out.push(line(
            loc,
            "pattern_error",
            "String could not be matched against the pattern within the regex engine's limits"
                .into(),
            instance,
        )),
        K::Enum { options } => {
            let ty = if is_enum_definition(&schema_path) {
                "enum"
            } else {
                "literal_error"
            };
            let opts: Vec<Value> = options.as_array().cloned().unwrap_or_default();
            out.push(line(
                loc,
                ty,
                format!("Input should be {}", or_list(&opts)),
                instance,
            ))
        }
        K::Constant { expected_value } => out.push(line(
            loc,
            "literal_error",
            format!("Input should be {}", py_repr(expected_value)),
            instance,
        )),
        K::Format { format } => {
            let (ty, msg) = format_message(format);
            out.push(line(loc, ty, msg, instance))
        }
        K::MaxItems { limit } => {
            let (what, n) = container_len(instance);
            out.push(line(
                loc,
                "too_long",
                format!(
                    "{what} should have at most {limit} item{} after validation, not {n}",
                    plural(*limit)
                ),
                instance,
            ))
        }
        K::MinItems { limit } => {
            let (what, n) = container_len(instance);
            out.push(line(
                loc,
                "too_short",
                format!(
                    "{what} should have at least {limit} item{} after validation, not {n}",
                    plural(*limit)
                ),
                instance,
            ))
        }
        K::MaxProperties { limit } => {
            let (what, n) = container_len(instance);
            out.push(line(
                loc,
                "too_long",
                format!(
                    "{what} should have at most {limit} item{} after validation, not {n}",
                    plural(*limit)
                ),
                instance,
            ))
        }
        K::MinProperties { limit } => {
            let (what, n) = container_len(instance);
            out.push(line(
                loc,
                "too_short",
                format!(
                    "{what} should have at least {limit} item{} after validation, not {n}",
                    plural(*limit)
                ),
                instance,
            ))
        }
        K::AdditionalItems { limit } => {
            let n = instance.as_array().map_or(0, Vec::len);
            out.push(line(
                loc,
                "too_long",
                format!(
                    "Tuple should have at most {limit} item{} after validation, not {n}",
                    plural(*limit as u64)
                ),
                instance,
            ))
        }
        K::UnevaluatedItems { unexpected } => {
            let n = instance.as_array().map_or(0, Vec::len);
            let allowed = n.saturating_sub(unexpected.len());
            out.push(line(
                loc,
                "too_long",
                format!(
                    "Tuple should have at most {allowed} item{} after validation, not {n}",
                    plural(allowed as u64)
                ),
                instance,
            ))
        }
        K::UniqueItems => out.push(line(
            loc,
            "unique_items",
            "List should have unique items".into(),
            instance,
        )),
        K::Contains => out.push(line(
            loc,
            "contains",
            "List should contain the required number of items matching the `contains` schema"
                .into(),
            instance,
        )),
        K::FalseSchema => {
            // `false` under `properties`/`additionalProperties`/`patternProperties` forbids a
            // key: pydantic calls that extra_forbidden. Elsewhere (an item past a tuple, a
            // `not: {}` branch) it is a plain "nothing allowed here".
            let parent = schema_path.rsplit('/').nth(1).unwrap_or_default();
            let last = schema_path.rsplit('/').next().unwrap_or_default();
            if last == "additionalProperties"
                || last == "unevaluatedProperties"
                || parent == "properties"
                || parent == "patternProperties"
            {
                out.push(line(
                    loc,
                    "extra_forbidden",
                    "Extra inputs are not permitted".into(),
                    instance,
                ))
            } else if matches!(
                last,
                "items" | "additionalItems" | "unevaluatedItems" | "prefixItems"
            ) || parent == "prefixItems"
            {
                out.push(line(
                    loc,
                    "too_long",
                    "Tuple should have no item at this position".into(),
                    instance,
                ))
            } else {
                out.push(line(
                    loc,
                    "false_schema",
                    "No value is allowed here".into(),
                    instance,
                ))
            }
        }
        K::Not { schema } => out.push(line(
            loc,
            "not",
            format!(
                "Input should not be valid against {}",
                cut_text(&schema.to_string(), INPUT_CUT)
            ),
            instance,
        )),
        K::PropertyNames { error } => {
            // The inner error's instance is the key; locate it under the object.
            let mut inner = Vec::new();
            map_error(error, &Value::Null, &Value::Null, &mut inner);
            for mut e in inner {
                let mut l = loc.clone();
                if let Some(key) = error.instance().as_str() {
                    l.push(LocItem::Key(key.to_string()));
                }
                e.loc = l;
                e.msg = format!("Key should be valid: {}", e.msg);
                out.push(e);
            }
        }
        K::AnyOf { .. } | K::OneOfNotValid { .. } => {
            unreachable!("unions are mapped by map_error_at")
        }
        K::OneOfMultipleValid { .. } => out.push(line(
            loc,
            "one_of_multiple",
            "Input should match exactly one schema in oneOf, but matches several".into(),
            instance,
        )),
        K::ContentEncoding { content_encoding } => out.push(line(
            loc,
            "content_encoding",
            format!("String should be valid {content_encoding}"),
            instance,
        )),
        K::FromUtf8 { .. } => out.push(line(
            loc,
            "content_encoding",
            "String should decode to valid UTF-8".into(),
            instance,
        )),
        K::ContentMediaType { content_media_type } => out.push(line(
            loc,
            "content_media_type",
            format!("String should be valid {content_media_type}"),
            instance,
        )),
        K::Custom { keyword, message } => out.push(line(
            loc,
            "custom",
            format!("{keyword}: {message}"),
            instance,
        )),
        K::Referencing(e) => out.push(line(
            loc,
            "ref_error",
            format!("Reference could not be resolved: {e}"),
            instance,
        )),
    }
}

fn type_name(t: JsonType) -> (&'static str, &'static str) {
    match t {
        JsonType::Integer => ("int_type", "a valid integer"),
        JsonType::Number => ("float_type", "a valid number"),
        JsonType::String => ("string_type", "a valid string"),
        JsonType::Boolean => ("bool_type", "a valid boolean"),
        JsonType::Object => ("dict_type", "an object"),
        JsonType::Array => ("list_type", "a valid array"),
        JsonType::Null => ("none_required", "None"),
    }
}

/// `type` with several names: the others' phrases, `null` named only when alone (as
/// Pydantic's `Optional[int]` says "Input should be a valid integer").
fn type_message(types: &[JsonType]) -> (&'static str, String) {
    let mut ordered: Vec<JsonType> = types
        .iter()
        .copied()
        .filter(|t| *t != JsonType::Null)
        .collect();
    if ordered.is_empty() && types.contains(&JsonType::Null) {
        ordered.push(JsonType::Null);
    }
    let ty = ordered.first().map_or("none_required", |t| type_name(*t).0);
    let phrases: Vec<String> = ordered
        .iter()
        .map(|t| type_name(*t).1.to_string())
        .collect();
    (ty, format!("Input should be {}", join_or(&phrases)))
}

/// The type error of a string with a `format` Pydantic parses into its own type.
fn format_type(format: &str) -> Option<(&'static str, &'static str)> {
    Some(match format {
        "date" => ("date_type", "Input should be a valid date"),
        "date-time" => ("datetime_type", "Input should be a valid datetime"),
        "time" => ("time_type", "Input should be a valid time"),
        "duration" => ("time_delta_type", "Input should be a valid timedelta"),
        "uuid" => (
            "uuid_type",
            "UUID input should be a string, bytes or UUID object",
        ),
        _ => return None,
    })
}

fn format_message(format: &str) -> (&'static str, String) {
    let (ty, what): (&'static str, String) = match format {
        "date" => ("date_parsing", "a valid date in the format YYYY-MM-DD".into()),
        "time" => (
            "time_parsing",
            "a valid time in the format HH:MM:SS[.ffffff] with a UTC offset (RFC 3339)".into(),
        ),
        "date-time" => (
            "datetime_parsing",
            "a valid datetime in the format YYYY-MM-DDTHH:MM:SS[.ffffff] with a UTC offset (RFC 3339)"
                .into(),
        ),
        "duration" => (
            "time_delta_parsing",
            "a valid ISO 8601 duration, e.g. P3DT4H".into(),
        ),
        "uuid" => ("uuid_parsing", "a valid UUID".into()),
        "uri" => ("url_parsing", "a valid absolute URI".into()),
        "uri-reference" => ("url_parsing", "a valid URI reference".into()),
        "ipv4" => ("ip_v4_address", "a valid IPv4 address".into()),
        "ipv6" => ("ip_v6_address", "a valid IPv6 address".into()),
        "email" | "idn-email" => ("email_parsing", "a valid email address".into()),
        "hostname" | "idn-hostname" => ("hostname_parsing", "a valid hostname".into()),
        other => ("format_mismatch", format!("a valid {other}")),
    };
    (ty, format!("Input should be {what}"))
}

/// `enum` directly at `/$defs/<Name>/enum` (or `/definitions/...`): how Pydantic exports an
/// `Enum` class. Inline enums are `Literal[...]` in Pydantic.
fn is_enum_definition(schema_path: &str) -> bool {
    let parts: Vec<&str> = schema_path.split('/').collect();
    parts.len() == 4
        && parts[0].is_empty()
        && (parts[1] == "$defs" || parts[1] == "definitions")
        && parts[3] == "enum"
}

fn container_len(v: &Value) -> (&'static str, usize) {
    match v {
        Value::Array(a) => ("List", a.len()),
        Value::Object(o) => ("Dictionary", o.len()),
        _ => ("Value", 0),
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `'a'`, `'a' or 'b'`, `'a', 'b' or 'c'`: pydantic's literal list.
fn or_list(values: &[Value]) -> String {
    let reprs: Vec<String> = values.iter().map(py_repr).collect();
    join_or(&reprs)
}

pub(super) fn join_or(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {}", init.join(", "), last),
    }
}

/// A number's JSON text, as written in the schema (exact; no float formatting).
fn num_text(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

/// The JSON type name used in messages: `object`, `array`, `string`, ...
pub fn json_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Cut a value to about [`INPUT_CUT`] characters, keeping its JSON type: a long string keeps
/// its first 47 characters and `...`; an array or object keeps its first members while the
/// compact JSON stays within the limit, then a `"..."` member (key `"..."` for objects).
pub fn cut_input(v: &Value) -> Value {
    cut_value(v, INPUT_CUT, 0)
}

/// Containers deeper than this inside an input are shown as `"..."`.
const CUT_DEPTH: usize = 8;

fn cut_value(v: &Value, budget: usize, depth: usize) -> Value {
    if depth >= CUT_DEPTH && matches!(v, Value::Array(_) | Value::Object(_)) {
        return Value::String("...".into());
    }
    match v {
        Value::String(s) => Value::String(cut_text(s, budget)),
        Value::Array(items) => {
            let mut kept = Vec::new();
            let mut used = 2;
            for (i, item) in items.iter().enumerate() {
                let c = cut_value(item, budget.saturating_sub(used).max(8), depth + 1);
                let len = compact_len(&c) + 1;
                if used + len > budget && i > 0 || used + len > budget * 2 {
                    kept.push(Value::String("...".into()));
                    break;
                }
                used += len;
                kept.push(c);
            }
            Value::Array(kept)
        }
        Value::Object(map) => {
            let mut kept = serde_json::Map::new();
            let mut used = 2;
            for (i, (k, item)) in map.iter().enumerate() {
                let key = cut_text(k, budget);
                let c = cut_value(
                    item,
                    budget.saturating_sub(used + key.len()).max(8),
                    depth + 1,
                );
                let len = compact_len(&c) + key.len() + 4;
                if used + len > budget && i > 0 || used + len > budget * 2 {
                    kept.insert("...".into(), Value::String("...".into()));
                    break;
                }
                used += len;
                kept.insert(key, c);
            }
            Value::Object(kept)
        }
        other => other.clone(),
    }
}

fn compact_len(v: &Value) -> usize {
    serde_json::to_string(v).map_or(0, |s| s.chars().count())
}

/// The first `limit - 3` characters and `...` when `s` is longer than `limit` characters.
pub fn cut_text(s: &str, limit: usize) -> String {
    if s.chars().count() <= limit {
        return s.to_string();
    }
    let keep = limit.saturating_sub(3);
    let mut out: String = s.chars().take(keep).collect();
    out.push_str("...");
    out
}

/// Turn an instance JSON Pointer into loc items, walking `root` to tell an array index from
/// an object key that looks like a number. Without the value (`root` not reaching there),
/// all-digit tokens are taken as indices.
pub fn loc_from_pointer(root: &Value, pointer: &str) -> Vec<LocItem> {
    let mut loc = Vec::new();
    if pointer.is_empty() {
        return loc;
    }
    let mut cur = Some(root);
    for raw in pointer.split('/').skip(1) {
        let token = unescape(raw);
        match cur {
            Some(Value::Array(items)) => match token.parse::<usize>() {
                Ok(i) => {
                    cur = items.get(i);
                    loc.push(LocItem::Index(i));
                }
                Err(_) => {
                    cur = None;
                    loc.push(LocItem::Key(token));
                }
            },
            Some(Value::Object(map)) => {
                cur = map.get(&token);
                loc.push(LocItem::Key(token));
            }
            _ => {
                cur = None;
                match token.parse::<usize>() {
                    Ok(i) if !token.starts_with('0') || token == "0" => loc.push(LocItem::Index(i)),
                    _ => loc.push(LocItem::Key(token)),
                }
            }
        }
    }
    loc
}

/// RFC 6901 pointer from unescaped tokens.
pub fn pointer_from_tokens(tokens: &[String]) -> String {
    let mut s = String::new();
    for t in tokens {
        s.push('/');
        s.push_str(&escape(t));
    }
    s
}

/// RFC 6901 pointer from loc items.
pub fn pointer_from_loc(loc: &[LocItem]) -> String {
    let tokens: Vec<String> = loc
        .iter()
        .map(|l| match l {
            LocItem::Key(k) => k.clone(),
            LocItem::Index(i) => i.to_string(),
        })
        .collect();
    pointer_from_tokens(&tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cut_input_keeps_short_values_and_cuts_long_ones() {
        assert_eq!(cut_input(&json!("abc")), json!("abc"));
        let long = "x".repeat(200);
        let cut = cut_input(&json!(long));
        assert_eq!(cut.as_str().unwrap().chars().count(), 50);
        assert!(cut.as_str().unwrap().ends_with("..."));
        let arr: Vec<u32> = (0..100).collect();
        let cut = cut_input(&json!(arr));
        let n = cut.as_array().unwrap().len();
        assert!(n > 3 && n < 30, "kept {n}");
        assert_eq!(cut.as_array().unwrap().last().unwrap(), &json!("..."));
    }

    #[test]
    fn loc_tells_indices_from_numeric_keys() {
        let v = json!({"a": [{"7": 1}]});
        assert_eq!(
            loc_from_pointer(&v, "/a/0/7"),
            vec![
                LocItem::Key("a".into()),
                LocItem::Index(0),
                LocItem::Key("7".into())
            ]
        );
        assert_eq!(
            loc_from_pointer(&json!({"a/b": 1}), "/a~1b"),
            vec![LocItem::Key("a/b".into())]
        );
    }

    #[test]
    fn enum_definitions_are_told_from_literals() {
        assert!(is_enum_definition("/$defs/Urgenza/enum"));
        assert!(!is_enum_definition("/properties/esito/enum"));
        assert!(!is_enum_definition("/$defs/Riga/properties/urgenza/enum"));
    }
}
