//! `x-formwork-source`: string values quoted from the document.
//!
//! A marked string must be a *span* of the document, compared after JSON unescaping
//! (the decoded characters, not the escaped text):
//! - `substring`: a non-empty contiguous substring;
//! - `words`: a non-empty substring `doc[i..j]` where `i` is the start or follows a
//!   character that is not alphanumeric, and `j` is the end or precedes a character that
//!   is not alphanumeric (`char::is_alphanumeric`, so Unicode letters and digits).
//!
//! The empty string is never a span: an absent value is `null` where the schema allows it.
//! [`crate::compile::Automaton::with_source`] builds the automaton that enforces this;
//! [`is_span`] is the plain check (the validator's, and the tests' reference).

pub use crate::ir::SourceMode;

impl SourceMode {
    /// The keyword's value: `"substring"` or `"words"`.
    pub fn parse(s: &str) -> Option<SourceMode> {
        match s {
            "substring" => Some(SourceMode::Substring),
            "words" => Some(SourceMode::Words),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SourceMode::Substring => "substring",
            SourceMode::Words => "words",
        }
    }
}

/// Is `value` a span of `doc` under `mode`?
pub fn is_span(doc: &str, value: &str, mode: SourceMode) -> bool {
    if value.is_empty() {
        return false;
    }
    if mode == SourceMode::Substring {
        return doc.contains(value);
    }
    let alnum_before = |i: usize| {
        doc[..i]
            .chars()
            .next_back()
            .is_some_and(char::is_alphanumeric)
    };
    let alnum_at = |j: usize| doc[j..].chars().next().is_some_and(char::is_alphanumeric);
    // Every occurrence, overlapping ones included.
    let mut from = 0;
    while let Some(k) = doc[from..].find(value) {
        let i = from + k;
        let j = i + value.len();
        if !alnum_before(i) && !alnum_at(j) {
            return true;
        }
        from = i + doc[i..].chars().next().map_or(1, char::len_utf8);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_by_mode() {
        let d = "Book a table at Chez Nous, 7pm; \"quoted\"\nnext";
        let w = SourceMode::Words;
        let s = SourceMode::Substring;
        assert!(is_span(d, "Chez Nous", w));
        assert!(is_span(d, "hez", s) && !is_span(d, "hez", w));
        assert!(is_span(d, "Nous, 7pm", w));
        assert!(!is_span(d, "Nous,", s) || is_span(d, "Nous,", w));
        assert!(is_span(d, "\"quoted\"\nnext", w));
        assert!(!is_span(d, "", s) && !is_span(d, "", w));
        assert!(!is_span(d, "7p", w) && is_span(d, "7pm", w));
        // Overlapping occurrences: the second "aa" of "aaa b" is not aligned, "aa a" is not
        // in the text; "a" alone is aligned nowhere but "a a" is.
        assert!(!is_span("aaa b", "aa", w));
        assert!(is_span("aa aa", "aa", w));
        assert!(is_span("xé é", "é", w) && !is_span("xé", "é", w));
    }
}
