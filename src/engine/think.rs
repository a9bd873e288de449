//! A reasoning model's think block: its markers, read from the model itself, where
//! a rendered prompt leaves the block, and a turn's plan in tokens, which chat
//! ([`super::chat`]) and extraction ([`super::Engine::extract`]) share: the prompt
//! rendered with `enable_thinking`, the open, close and separator tokens
//! ([`Engine::think_prompt`]), and the thought itself ([`Engine::think_first`]).
//!
//! The markers are never one model's: a tag pair `<X>` / `</X>` whose name holds
//! `think` or `reason` (`<think>` for Qwen3 and the DeepSeek-R1 distills), found in the
//! chat template, else as a pair of tokens in the vocabulary. A model with neither
//! cannot think, and a request that asks it to is refused ([`ThinkMarkers::find`]
//! returns `None`; the caller names the model).

use formwork_models::chat::ChatMessage;
use formwork_models::tokenizer::GgufTokenizer;

use super::decode::{DecodeOptions, ThinkPlan, Thought, Watch};
use super::Engine;
use crate::sampling::Sampler;

/// The thought budget of `formwork extract --think` and of serve's
/// `reasoning_effort: medium`, in tokens.
pub const DEFAULT_BUDGET: usize = 1024;

/// The open and close markers of a think block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThinkMarkers {
    pub open: String,
    pub close: String,
}

/// Where a rendered prompt leaves the think block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// The prompt ends inside an open block (a template that always opens it).
    Open,
    /// The prompt ends after a closed block (Qwen3's `enable_thinking: false`).
    Closed,
    /// No block yet: the model (or the engine) opens it.
    Absent,
}

impl ThinkMarkers {
    /// The markers of a model, from its chat template first, then its vocabulary
    /// (the raw bytes of every token).
    ///
    /// ```
    /// use formwork::engine::think::ThinkMarkers;
    /// let tpl = "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}\
    ///            {{ content.split('</think>')[-1] }}";
    /// let m = ThinkMarkers::find(Some(tpl), &[]).unwrap();
    /// assert_eq!((m.open.as_str(), m.close.as_str()), ("<think>", "</think>"));
    /// assert_eq!(ThinkMarkers::find(Some("{{ messages }}"), &[]), None);
    /// ```
    pub fn find(template: Option<&str>, vocab: &[Vec<u8>]) -> Option<ThinkMarkers> {
        if let Some(m) = template.and_then(from_text) {
            return Some(m);
        }
        let texts: Vec<&str> = vocab
            .iter()
            .filter_map(|b| std::str::from_utf8(b).ok())
            .collect();
        texts.iter().find_map(|t| {
            let name = t.strip_prefix("</")?.strip_suffix('>')?;
            let open = format!("<{name}>");
            (is_think_name(name) && texts.contains(&open.as_str())).then(|| ThinkMarkers {
                open,
                close: t.to_string(),
            })
        })
    }

    /// Where `prompt` (the rendered prompt text) leaves the block: its text after the
    /// last open marker holds no close marker (open), or it ends with a close marker
    /// (closed), or neither.
    pub fn block(&self, prompt: &str) -> Block {
        let tail = prompt.trim_end();
        if tail.ends_with(&self.close) {
            return Block::Closed;
        }
        match prompt.rfind(&self.open) {
            Some(at)
                if !prompt[at..].contains(&self.close) && prompt[at..].trim_end() == self.open =>
            {
                Block::Open
            }
            _ => Block::Absent,
        }
    }
}

/// The one-line refusal of a budget above 0 on a model without think markers.
pub fn no_markers(model: &str, budget: usize) -> String {
    format!(
        "the model {model} has no think markers in its chat template or vocabulary, so it cannot think (a thought budget of {budget} tokens was asked)"
    )
}

/// A thinking turn's plan, in tokens.
pub(crate) struct ThinkTokens {
    pub open: Vec<u32>,
    pub close: Vec<u32>,
    pub close_text: Vec<u8>,
    pub after: Vec<u32>,
    pub budget: usize,
}

impl ThinkTokens {
    /// The tokens the engine may feed around the thought: open, close, separator.
    pub fn markers(&self) -> usize {
        self.open.len() + self.close.len() + self.after.len()
    }
}

/// The prompt of a turn and how it thinks.
pub(crate) struct TurnPrompt {
    pub ids: Vec<u32>,
    /// The `enable_thinking` the template was rendered with (`None`: left undefined).
    pub thinking: Option<bool>,
    /// The plan of the thought; `None` when the turn answers at once.
    pub think: Option<ThinkTokens>,
}

/// Why a turn's prompt cannot be made.
#[derive(Debug)]
pub(crate) enum PromptError {
    /// The template or the tokenizer failed.
    Prompt(String),
    /// A budget above 0 on a model without think markers ([`no_markers`]).
    NoMarkers(String),
}

impl std::fmt::Display for PromptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PromptError::Prompt(m) | PromptError::NoMarkers(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for PromptError {}

impl Engine {
    /// The model's think markers ([`ThinkMarkers::find`]), `None` when it cannot think.
    pub fn think_markers(&self) -> Option<ThinkMarkers> {
        let tok = &self.loaded.tokenizer;
        ThinkMarkers::find(tok.chat_template(), tok.token_bytes())
    }

    /// The prompt of a turn, and how it thinks. `think`: `None` renders the template
    /// as it is; `Some(n)` renders it with `enable_thinking` set (`n > 0`). A budget of
    /// 0 with a template that wrote no closed block gets the empty block appended (the
    /// model answers at once), and a budget above 0 gets the open marker fed unless the
    /// prompt already opened it. A model without markers takes `Some(0)` as `None`
    /// and refuses a budget above 0.
    pub(crate) fn think_prompt(
        &self,
        messages: &[ChatMessage],
        think: Option<usize>,
    ) -> Result<TurnPrompt, PromptError> {
        let prompt_err = |e: anyhow::Error| PromptError::Prompt(format!("{e:#}"));
        let as_is = |engine: &Engine| -> Result<TurnPrompt, PromptError> {
            Ok(TurnPrompt {
                ids: engine.prompt_tokens(messages).map_err(prompt_err)?,
                thinking: None,
                think: None,
            })
        };
        let Some(budget) = think else {
            return as_is(self);
        };
        let Some(m) = self.think_markers() else {
            if budget == 0 {
                // No thought asked of a model that cannot think: the turn as it is.
                return as_is(self);
            }
            return Err(PromptError::NoMarkers(no_markers(
                &self.loaded.name,
                budget,
            )));
        };
        let tok: &GgufTokenizer = &self.loaded.tokenizer;
        let on = budget > 0;
        let mut ids = self
            .prompt_tokens_thinking(messages, Some(on))
            .map_err(prompt_err)?;
        let text = super::prompt::render_thinking(tok, messages, Some(on))
            .map_err(|e| PromptError::Prompt(e.to_string()))?
            .text;
        let enc = |s: &str| {
            tok.encode(s)
                .map_err(|e| PromptError::Prompt(format!("the think marker {s:?}: {e}")))
        };
        let block = m.block(&text);
        let mut turn = TurnPrompt {
            ids: Vec::new(),
            thinking: Some(on),
            think: None,
        };
        if block == Block::Closed || (block == Block::Absent && !on) {
            if block == Block::Absent {
                ids.extend(enc(&format!("{}\n\n{}\n\n", m.open, m.close))?);
            }
            turn.ids = ids;
            return Ok(turn);
        }
        let open = match block {
            Block::Open => Vec::new(),
            _ => enc(&format!("{}\n", m.open))?,
        };
        turn.ids = ids;
        turn.think = Some(ThinkTokens {
            open,
            close: enc(&m.close)?,
            close_text: m.close.clone().into_bytes(),
            after: enc("\n\n")?,
            budget,
        });
        Ok(turn)
    }

    /// The thought of a turn planned by [`Engine::think_prompt`], from the prompt's
    /// `logits` at `pos` ([`super::decode::think`]): `opts.max_tokens` bounds the whole
    /// turn, and `min_answer` tokens of it stay for the answer.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn think_first(
        &mut self,
        t: &ThinkTokens,
        sampler: &mut Sampler,
        logits: Vec<f32>,
        pos: usize,
        opts: &DecodeOptions,
        min_answer: usize,
        watch: Option<Watch>,
    ) -> formwork_models::Result<Thought> {
        let tok: &GgufTokenizer = &self.loaded.tokenizer;
        let is_special = |id: u32| tok.is_special(id);
        let plan = ThinkPlan {
            open: &t.open,
            close: &t.close,
            close_text: &t.close_text,
            after: &t.after,
            budget: t.budget,
            is_special: &is_special,
            watch,
        };
        super::decode::think(
            self.loaded.model.as_mut(),
            tok,
            sampler,
            logits,
            pos,
            opts,
            &plan,
            min_answer,
        )
    }
}

fn is_think_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    !n.is_empty()
        && n.len() <= 32
        && (n.contains("think") || n.contains("reason"))
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '|' | '-'))
}

/// The first close tag `</X>` in `text` with a think name whose open tag `<X>` is there too.
fn from_text(text: &str) -> Option<ThinkMarkers> {
    let mut rest = text;
    while let Some(at) = rest.find("</") {
        let after = &rest[at + 2..];
        if let Some(end) = after.find('>') {
            let name = &after[..end];
            let open = format!("<{name}>");
            if is_think_name(name) && text.contains(&open) {
                return Some(ThinkMarkers {
                    open,
                    close: format!("</{name}>"),
                });
            }
        }
        rest = after;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn think() -> ThinkMarkers {
        ThinkMarkers {
            open: "<think>".into(),
            close: "</think>".into(),
        }
    }

    #[test]
    fn markers_come_from_the_template_or_the_vocabulary() {
        let vocab: Vec<Vec<u8>> = ["a", "<reasoning>", "</reasoning>", "</b>"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let m = ThinkMarkers::find(None, &vocab).unwrap();
        assert_eq!(m.open, "<reasoning>");
        assert_eq!(m.close, "</reasoning>");
        // A close tag alone, or a tag that is not about thought, is no marker.
        assert_eq!(
            ThinkMarkers::find(Some("</think> <b></b>"), &vocab[..1]),
            None
        );
    }

    #[test]
    fn the_block_a_prompt_leaves() {
        let m = think();
        assert_eq!(m.block("<|im_start|>assistant\n<think>\n"), Block::Open);
        assert_eq!(
            m.block("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
            Block::Closed
        );
        assert_eq!(m.block("<|im_start|>assistant\n"), Block::Absent);
        // An earlier turn's closed block does not open this one.
        assert_eq!(
            m.block("<think>x</think>y<|im_end|>\n<|im_start|>assistant\n"),
            Block::Absent
        );
    }
}
