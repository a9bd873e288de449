//! Grounded tool arguments: a string argument (or a string of a turn's final answer)
//! must be *stated in the conversation*, the user's messages and the tools' results.
//!
//! A small model asked to call `reorder(sku)` after "reorder SKU-11" writes `"sku": ""`,
//! and asked for `forest_growth(location)` about "Yellowstone National Park" writes a URL.
//! Both are valid against the tool's `parameters`; neither is in the conversation. Which
//! strings are judged: a subschema marked `"x-formwork-grounded": true` (any string,
//! an enum's included), and with the request's opt-in every *free-text* string of every
//! tool's `parameters` and of the `response_format` answer: `type` `"string"` (or with
//! `"null"`) without `enum`, `const`, `format` or `pattern`, at any depth, array items
//! included. A value is stated when, compared case-insensitively with runs of
//! whitespace as one space, it occurs in the conversation; the empty string never is.
//!
//! What happens to one that is not (the loop's side, [`crate::engine::decode`]): a
//! nullable string becomes `null`, as `--grounded` does for a document; any other is
//! written again from its first character as a *quotation*: each token must keep the
//! string a piece of the conversation, and the model picks the best such token, so the
//! value becomes the span of the conversation the model rates highest. Unlike
//! `x-formwork-source`, a value the model writes from the conversation is never
//! touched. Pure: no model, no I/O.

use std::collections::HashMap;

use serde_json::Value;

use super::super::source::resolve;
use super::fields::{admits, marked};
use super::{fold, MAX_DEPTH};

/// One grounded string: its pattern (`/items/*/sku`), and whether it may be `null`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgField {
    pub pattern: String,
    pub nullable: bool,
}

/// Where the JSON value being written starts in a tool turn's output, and the
/// grounded strings of its schema.
#[derive(Clone, Copy, Debug)]
pub struct Region<'a> {
    /// Byte offset of the value's first byte (`{`).
    pub start: usize,
    /// Byte offset just past its last byte, when it is complete (the call's closing tag
    /// is written); the output's end otherwise.
    pub end: usize,
    pub fields: &'a [ArgField],
}

/// The grounded strings of a turn's tools and answer, with the conversation they are
/// judged against.
#[derive(Clone, Debug, Default)]
pub struct ArgGrounding {
    tools: HashMap<String, Vec<ArgField>>,
    answer: Vec<ArgField>,
    /// The conversation, folded ([`fold`]).
    folded: String,
    /// The conversation with each run of whitespace one space (not trimmed): what a
    /// quotation is read from ([`ArgGrounding::quotable`]).
    spaced: String,
}

impl ArgGrounding {
    /// The grounded strings of each tool's `parameters` (`(name, schema)`) and of the
    /// final answer's schema, every free-text one when `all`, else the marked ones,
    /// judged against `conversation`. `None` when no string is grounded.
    pub fn new<'a>(
        tools: impl IntoIterator<Item = (&'a str, &'a Value)>,
        answer: Option<&Value>,
        all: bool,
        conversation: &str,
    ) -> Option<ArgGrounding> {
        let mut g = ArgGrounding {
            folded: fold(conversation),
            spaced: conversation
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
            ..ArgGrounding::default()
        };
        for (name, schema) in tools {
            let f = fields(schema, all);
            if !f.is_empty() {
                g.tools.insert(name.to_string(), f);
            }
        }
        if let Some(s) = answer {
            g.answer = fields(s, all);
        }
        (!g.tools.is_empty() || !g.answer.is_empty()).then_some(g)
    }

    /// The grounded strings of tool `name`'s arguments.
    pub fn tool_fields(&self, name: &str) -> &[ArgField] {
        self.tools.get(name).map_or(&[], Vec::as_slice)
    }

    /// Is `value` stated in the conversation? The empty string never is.
    pub fn stated(&self, value: &str) -> bool {
        let v = fold(value);
        !v.is_empty() && self.folded.contains(&v)
    }

    /// Is `text` a piece of the conversation that a quotation may be or begin with, in
    /// its own case ([`super::quote::quotable_in`] on the conversation with single
    /// spaces)? Stricter than [`ArgGrounding::stated`], which judges what the model
    /// wrote.
    pub fn quotable(&self, text: &str, closed: bool) -> bool {
        super::quote::quotable_in(&self.spaced, text, closed)
    }

    /// Do these bytes (a quotation's start that ends inside a character) occur in the
    /// conversation?
    pub fn quotable_bytes(&self, bytes: &[u8]) -> bool {
        super::quote::bytes_occur(self.spaced.as_bytes(), bytes)
    }

    /// The JSON value of a tool turn's output being written or last written: the
    /// arguments of its last call (after `<tool_call>\n{"name": "…", "arguments": `),
    /// or its final answer when the turn answers in JSON. `None` when the output is in
    /// neither, or they have no grounded strings.
    pub fn region<'s>(&'s self, out: &[u8]) -> Option<Region<'s>> {
        use formwork_grammar::tools::{CALL_MID, CALL_OPEN};
        let open = find_last(out, CALL_OPEN);
        let Some(open) = open else {
            // A JSON answer starts the turn (text may not start with `{` or `[`).
            let starts = out.first().is_some_and(|&b| b == b'{' || b == b'[');
            return (starts && !self.answer.is_empty()).then_some(Region {
                start: 0,
                end: out.len(),
                fields: &self.answer,
            });
        };
        let name_at = open + CALL_OPEN.len();
        let mid = find_last(&out[name_at..], CALL_MID)? + name_at;
        let name = std::str::from_utf8(&out[name_at..mid]).ok()?;
        let fields = self.tools.get(name)?;
        let start = mid + CALL_MID.len();
        // The call's end: the `}` of `{"name": …}` before its closing tag.
        let end = find_last(&out[start..], b"}\n</tool_call>").map_or(out.len(), |e| start + e);
        Some(Region { start, end, fields })
    }
}

impl super::quote::Quotable for ArgGrounding {
    fn quotable(&self, text: &str, closed: bool) -> bool {
        ArgGrounding::quotable(self, text, closed)
    }
    fn quotable_bytes(&self, bytes: &[u8]) -> bool {
        ArgGrounding::quotable_bytes(self, bytes)
    }
}

impl ArgGrounding {
    /// How much of a turn's output may be shown (streamed): all of it but a grounded
    /// string still open, which may yet be taken back.
    pub fn safe(&self, out: &[u8]) -> usize {
        let Some(r) = self.region(out) else {
            return out.len();
        };
        match super::scan(&out[r.start..r.end]).open_string {
            Some((p, start)) if r.fields.iter().any(|f| f.pattern == p) => r.start + start,
            _ => out.len(),
        }
    }
}

fn find_last(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if hay.len() < needle.len() {
        return None;
    }
    (0..=hay.len() - needle.len())
        .rev()
        .find(|&i| &hay[i..i + needle.len()] == needle)
}

/// The grounded strings of `schema`.
fn fields(schema: &Value, all: bool) -> Vec<ArgField> {
    let mut out = Vec::new();
    walk(schema, schema, &mut String::new(), all, &mut out, 0);
    out
}

fn walk(
    root: &Value,
    v: &Value,
    pat: &mut String,
    all: bool,
    out: &mut Vec<ArgField>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    let m = resolve(root, v);
    let a = admits(root, v, 0);
    if a.string && !a.other {
        let is_marked = marked(v) || marked(m);
        let grounded = is_marked || (all && free_text(root, v));
        if grounded && !out.iter().any(|f| f.pattern == *pat) {
            out.push(ArgField {
                pattern: pat.clone(),
                nullable: a.null,
            });
        }
        return;
    }
    let Value::Object(m) = m else { return };
    for (step, x) in super::children(m) {
        let b = pat.len();
        pat.push_str(&step);
        walk(root, x, pat, all, out, depth + 1);
        pat.truncate(b);
    }
}

/// A string subschema with no `enum` or `const` anywhere in it (a closed set of
/// values is the tool's, not a quotation); `admits` has already ruled out formats.
fn free_text(root: &Value, v: &Value) -> bool {
    fn closed(root: &Value, v: &Value, depth: usize) -> bool {
        let m = resolve(root, v);
        let Value::Object(m) = m else { return false };
        if m.contains_key("enum") || m.contains_key("const") {
            return true;
        }
        depth < 8
            && ["anyOf", "oneOf"].iter().any(|k| {
                m.get(*k)
                    .and_then(Value::as_array)
                    .is_some_and(|bs| bs.iter().any(|b| closed(root, b, depth + 1)))
            })
    }
    !closed(root, v, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn order() -> Value {
        json!({
            "type": "object",
            "properties": {
                "sku": {"type": "string"},
                "unit": {"type": "string", "enum": ["pz", "kg"]},
                "note": {"type": ["string", "null"]},
                "when": {"type": "string", "format": "date"},
                "qty": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "code": {"type": "string", "enum": ["A", "B"], "x-formwork-grounded": true},
                "loc": {"$ref": "#/$defs/Loc"}
            },
            "$defs": {"Loc": {"type": "object", "properties": {"city": {"type": "string"}}}},
            "required": ["sku"]
        })
    }

    #[test]
    fn free_text_strings_are_grounded_with_the_opt_in_and_marked_ones_always() {
        let s = order();
        let g = ArgGrounding::new([("reorder", &s)], None, true, "x").unwrap();
        let got: Vec<(&str, bool)> = g
            .tool_fields("reorder")
            .iter()
            .map(|f| (f.pattern.as_str(), f.nullable))
            .collect();
        assert_eq!(
            got,
            [
                ("/sku", false),
                ("/note", true),
                ("/tags/*", false),
                ("/code", false),
                ("/loc/city", false)
            ]
        );
        let g = ArgGrounding::new([("reorder", &s)], None, false, "x").unwrap();
        let got: Vec<&str> = g
            .tool_fields("reorder")
            .iter()
            .map(|f| f.pattern.as_str())
            .collect();
        assert_eq!(got, ["/code"]);
        let plain = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        assert!(ArgGrounding::new([("f", &plain)], None, false, "x").is_none());
    }

    #[test]
    fn stated_is_case_and_space_blind_and_a_quotation_keeps_to_word_edges() {
        let s = order();
        let g = ArgGrounding::new(
            [("reorder", &s)],
            None,
            true,
            "Please reorder  SKU-11\nfor Bari.",
        )
        .unwrap();
        assert!(g.stated("sku-11"));
        assert!(g.stated("reorder sku-11 for"));
        assert!(!g.stated(""));
        assert!(!g.stated("  "));
        assert!(!g.stated("SKU-12"));
        // A quotation starts and ends at word edges, with single spaces.
        assert!(g.quotable("SKU", false));
        assert!(!g.quotable("KU", false), "not from mid-word");
        assert!(!g.quotable("SK", true), "not ending mid-word");
        assert!(g.quotable("SKU-11", true));
        assert!(g.quotable("reorder SKU-11", true));
        assert!(
            !g.quotable("reorder sku-11", true),
            "the conversation's case"
        );
        assert!(!g.quotable("reorder  SKU", false), "two spaces");
        assert!(!g.quotable(" SKU", false) && !g.quotable("SKU-11 ", true));
        assert!(!g.quotable("", true) && g.quotable("", false));
    }

    #[test]
    fn the_region_is_the_last_calls_arguments_or_the_json_answer() {
        let s = order();
        let answer = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        let g = ArgGrounding::new([("reorder", &s)], Some(&answer), true, "x").unwrap();
        let out = b"<tool_call>\n{\"name\": \"reorder\", \"arguments\": {\"sku\":\"A\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"reorder\", \"arguments\": {\"sku\":\"B";
        let r = g.region(out).unwrap();
        assert_eq!(&out[r.start..r.end], b"{\"sku\":\"B");
        let done =
            b"<tool_call>\n{\"name\": \"reorder\", \"arguments\": {\"sku\":\"A\"}}\n</tool_call>";
        let r = g.region(done).unwrap();
        assert_eq!(&done[r.start..r.end], b"{\"sku\":\"A\"}");
        // Still writing the name, or a tool without grounded strings: none.
        assert!(g.region(b"<tool_call>\n{\"name\": \"reor").is_none());
        assert!(g
            .region(b"<tool_call>\n{\"name\": \"other\", \"arguments\": {")
            .is_none());
        let r = g.region(b"{\"city\":\"Ba").unwrap();
        assert_eq!((r.start, r.fields[0].pattern.as_str()), (0, "/city"));
        assert!(g.region(b"Sure, here").is_none());
        // An open grounded string is held back from the stream; a closed one is not.
        let open = b"<tool_call>\n{\"name\": \"reorder\", \"arguments\": {\"qty\":2,\"sku\":\"SK";
        assert_eq!(g.safe(open), open.len() - 3);
        let closed = b"<tool_call>\n{\"name\": \"reorder\", \"arguments\": {\"sku\":\"SK\"";
        assert_eq!(g.safe(closed), closed.len());
        assert_eq!(g.safe(b"Sure"), 4);
    }
}
