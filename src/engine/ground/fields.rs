//! Which fields of a schema are grounded, read off the schema: the nullable strings
//! (free text, enums of strings), the nullable dates, those marked `"anywhere"`, the
//! evidence fields, and the enums whose members a free-text sibling may not take
//! ([`super::Grounding::names_sibling_member`]). Pure: a walk over the schema, no
//! document.

use serde_json::Value;

use crate::pointer::escape;

use super::super::source::{resolve, type_names};
use super::{fold, ANYWHERE, EVIDENCE, KEYWORD, MAX_DEPTH};

/// What a (resolved) subschema admits, for grounding: a quotable string, `null`, both.
#[derive(Default, Clone, Copy)]
pub(super) struct Admits {
    pub(super) string: bool,
    pub(super) null: bool,
    /// Something else too (a number, an object, a formatted string...).
    pub(super) other: bool,
}

pub(super) fn admits(root: &Value, v: &Value, depth: usize) -> Admits {
    let mut a = Admits::default();
    let own = v;
    let v = resolve(root, v);
    let (Value::Object(m), Value::Object(o)) = (v, own) else {
        a.other = true;
        return a;
    };
    if depth > 8 {
        a.other = true;
        return a;
    }
    if let Some(Value::Array(e)) = m.get("enum") {
        for x in e {
            match x {
                Value::Null => a.null = true,
                Value::String(_) => a.string = true,
                _ => a.other = true,
            }
        }
        return a;
    }
    if m.contains_key("const") {
        a.other = true;
        return a;
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(bs)) = m.get(key) {
            for b in bs {
                let x = admits(root, b, depth + 1);
                a.string |= x.string;
                a.null |= x.null;
                a.other |= x.other;
            }
            return a;
        }
    }
    let formatted = ["format", "pattern"]
        .iter()
        .any(|k| m.contains_key(*k) || o.contains_key(*k));
    for t in type_names(m) {
        match t {
            "null" => a.null = true,
            "string" if !formatted => a.string = true,
            _ => a.other = true,
        }
    }
    if type_names(m).is_empty() {
        a.other = true;
    }
    a
}

/// The string members of `v`'s `enum` (or of the enums of its `anyOf`/`oneOf`
/// branches), folded; empty for anything else.
fn enum_strings(root: &Value, v: &Value, depth: usize) -> Vec<String> {
    let Value::Object(m) = resolve(root, v) else {
        return Vec::new();
    };
    if depth > 8 {
        return Vec::new();
    }
    if let Some(Value::Array(e)) = m.get("enum") {
        return e.iter().filter_map(Value::as_str).map(fold).collect();
    }
    let mut out = Vec::new();
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(bs)) = m.get(key) {
            for b in bs {
                out.extend(enum_strings(root, b, depth + 1));
            }
        }
    }
    out
}

/// Is `v` marked grounded: `"x-formwork-grounded": true`, or `"anywhere"` (judged
/// against the whole document, greeting and signature included)?
pub(super) fn marked(v: &Value) -> bool {
    matches!(v.get(KEYWORD), Some(Value::Bool(true))) || marked_anywhere(v)
}

fn marked_anywhere(v: &Value) -> bool {
    v.get(KEYWORD).and_then(Value::as_str) == Some(ANYWHERE)
}

/// Is `v` a string with `format: date` (and no `pattern`, `enum` or `const`)?
fn date_string(root: &Value, v: &Value) -> bool {
    let Value::Object(m) = resolve(root, v) else {
        return false;
    };
    m.get("format").and_then(Value::as_str) == Some("date")
        && ["pattern", "enum", "const", "anyOf", "oneOf"]
            .iter()
            .all(|k| !m.contains_key(*k))
        && type_names(m) == ["string"]
}

fn null_only(root: &Value, v: &Value) -> bool {
    let Value::Object(m) = resolve(root, v) else {
        return false;
    };
    type_names(m) == ["null"] || m.get("const") == Some(&Value::Null)
}

/// Is `v` a nullable date: `anyOf`/`oneOf` of a `format: date` string and `null`, or
/// `type: ["string", "null"]` with `format: date`?
fn nullable_date(root: &Value, v: &Value) -> bool {
    let Value::Object(m) = resolve(root, v) else {
        return false;
    };
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(bs)) = m.get(key) {
            return bs.len() == 2
                && ((date_string(root, &bs[0]) && null_only(root, &bs[1]))
                    || (null_only(root, &bs[0]) && date_string(root, &bs[1])));
        }
    }
    let mut t = type_names(m);
    t.sort_unstable();
    m.get("format").and_then(Value::as_str) == Some("date")
        && t == ["null", "string"]
        && ["pattern", "enum", "const"]
            .iter()
            .all(|k| !m.contains_key(*k))
}

/// The instance-pointer patterns of the grounded text fields of `schema`, in schema
/// order.
pub fn grounded_patterns(schema: &Value, all_nullable_strings: bool) -> Vec<String> {
    grounded_fields(schema, all_nullable_strings).0
}

/// The grounded text fields and the grounded date fields of `schema`, as patterns.
pub fn grounded_fields(schema: &Value, all_nullable_strings: bool) -> (Vec<String>, Vec<String>) {
    let f = fields(schema, all_nullable_strings);
    (f.text, f.dates)
}

/// The grounded fields of a schema, as instance-pointer patterns.
#[derive(Default)]
pub(super) struct Fields {
    pub(super) text: Vec<String>,
    pub(super) dates: Vec<String>,
    /// Those of both marked `"anywhere"`.
    pub(super) anywhere: Vec<String>,
    /// Does a field of an array's object rows admit a string (one that
    /// [`super::Grounding::first_item`] may cut)?
    pub(super) row_strings: bool,
    /// The fields marked [`EVIDENCE`].
    pub(super) evidence: Vec<String>,
    /// The fields that are an `enum` of strings, with their members, folded.
    pub(super) enums: Vec<(String, Vec<String>)>,
}

pub(super) fn fields(schema: &Value, all_nullable_strings: bool) -> Fields {
    let mut out = Fields::default();
    walk(
        schema,
        schema,
        &mut String::new(),
        all_nullable_strings,
        &mut out,
        0,
    );
    out
}

fn walk(root: &Value, v: &Value, pat: &mut String, all: bool, out: &mut Fields, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let m = resolve(root, v);
    let is_evidence = |x: &Value| x.get(EVIDENCE) == Some(&Value::Bool(true));
    if (is_evidence(v) || is_evidence(m)) && !out.evidence.contains(pat) {
        out.evidence.push(pat.clone());
    }
    let grounded = all || marked(v) || marked(m);
    if grounded && (marked_anywhere(v) || marked_anywhere(m)) && !out.anywhere.contains(pat) {
        out.anywhere.push(pat.clone());
    }
    if grounded && nullable_date(root, v) {
        if !out.dates.contains(pat) {
            out.dates.push(pat.clone());
        }
        return;
    }
    let members = enum_strings(root, v, 0);
    if !members.is_empty() && !out.enums.iter().any(|(p, _)| p == pat) {
        out.enums.push((pat.clone(), members));
    }
    let a = admits(root, v, 0);
    out.row_strings |= a.string && pat.contains("/*/");
    let groundable = a.string && a.null && !a.other;
    if groundable && grounded {
        if !out.text.contains(pat) {
            out.text.push(pat.clone());
        }
        return;
    }
    let Value::Object(m) = m else { return };
    for (step, x) in children(m) {
        let b = pat.len();
        pat.push_str(&step);
        walk(root, x, pat, all, out, depth + 1);
        pat.truncate(b);
    }
}

/// The subschemas under `m` an instance's values are read with, each with the step it
/// adds to the instance pattern: `/key` for a property, `/*` for array items
/// (`items`, `prefixItems`), nothing for an `anyOf`/`oneOf`/`allOf` branch; in that
/// order.
pub(crate) fn children(m: &serde_json::Map<String, Value>) -> Vec<(String, &Value)> {
    let mut out: Vec<(String, &Value)> = Vec::new();
    if let Some(Value::Object(props)) = m.get("properties") {
        out.extend(props.iter().map(|(k, x)| (format!("/{}", escape(k)), x)));
    }
    match m.get("items") {
        Some(Value::Array(a)) => out.extend(a.iter().map(|x| ("/*".to_string(), x))),
        Some(x @ Value::Object(_)) => out.push(("/*".to_string(), x)),
        _ => {}
    }
    if let Some(Value::Array(a)) = m.get("prefixItems") {
        out.extend(a.iter().map(|x| ("/*".to_string(), x)));
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(bs)) = m.get(key) {
            out.extend(bs.iter().map(|x| (String::new(), x)));
        }
    }
    out
}
