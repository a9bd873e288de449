//! A reasoning model's think block: its markers, read from the model itself, and where
//! a rendered prompt leaves the block.
//!
//! The markers are never one model's: a tag pair `<X>` / `</X>` whose name holds
//! `think` or `reason` (`<think>` for Qwen3 and the DeepSeek-R1 distills), found in the
//! chat template, else as a pair of tokens in the vocabulary. A model with neither
//! cannot think, and a request that asks it to is refused ([`ThinkMarkers::find`]
//! returns `None`; the caller names the model).

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
