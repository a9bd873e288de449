//! Grounded tool arguments in the masked loop ([`crate::engine::ground::args`]): marks
//! the place before each grounded string of a call's arguments (or of a JSON final
//! answer), judges the string when it closes and, when the conversation does not state
//! it, goes back to the mark (the model's cache truncated there) and writes `null`
//! where the schema allows it, or else the string again as a quotation: while it is
//! open, each pick is the best token the mask allows that keeps the string a piece of
//! the conversation ([`ArgGrounder::pick_quoted`]). Each string is written again once
//! at most. Inert without an [`ArgGrounding`].

use formwork_grammar::matcher::Matcher;
use formwork_grammar::toktrie::TokenSet;
use formwork_models::runtime::LanguageModel;

use super::super::ground::args::ArgField;
use super::super::ground::quote::quoted_fits;
use super::super::ground::{self, ArgGrounding};
use super::mark::Mark;
use super::sample::{best_fitting, full_mask, masked_p};
use super::{Codec, DecodeOutput};

pub(super) struct ArgGrounder<'a> {
    g: Option<&'a ArgGrounding>,
    mark: Option<Mark>,
    /// Output bytes judged so far.
    judged: usize,
    /// The opening quote (output offset) of the string being written as a quotation.
    quoting: Option<usize>,
    /// The strings (output offsets of their opening quotes) already written again.
    redone: Vec<usize>,
}

impl<'a> ArgGrounder<'a> {
    pub(super) fn new(g: Option<&'a ArgGrounding>) -> Self {
        ArgGrounder {
            g,
            mark: None,
            judged: 0,
            quoting: None,
            redone: Vec::new(),
        }
    }

    /// Marks the place when the output ends just before a grounded string (or just
    /// after its opening quote, which the grammar forced).
    pub(super) fn checkpoint(
        &mut self,
        matcher: &Matcher,
        logits: &[f32],
        pos: usize,
        out: &DecodeOutput,
    ) {
        let Some(g) = self.g else { return };
        if self.quoting.is_some() {
            return;
        }
        let Some(r) = g.region(&out.bytes) else {
            return;
        };
        let s = ground::scan(&out.bytes[r.start..r.end]);
        let at_value = s
            .next_value
            .as_deref()
            .is_some_and(|p| field(r.fields, p).is_some());
        // Just after the opening quote, unless the place before it is marked already
        // (a nullable string: `null` goes there).
        let at_quote = s.open_string.as_ref().is_some_and(|(p, start)| {
            r.start + start + 1 == out.bytes.len()
                && field(r.fields, p).is_some()
                && self
                    .mark
                    .as_ref()
                    .is_none_or(|m| m.bytes != r.start + start)
        });
        if (at_value || at_quote) && self.mark.as_ref().map(|m| m.bytes) != Some(out.bytes.len()) {
            self.mark = Some(Mark::at(matcher, Some(logits), pos, out));
        }
    }

    /// Is the loop writing a string as a quotation (pick with [`Self::pick_quoted`])?
    pub(super) fn quoting(&self) -> bool {
        self.quoting.is_some()
    }

    /// Judges the grounded strings closed since the last call. On the first the
    /// conversation does not state: back to the mark before it, then `null` (a nullable
    /// string) or the opening quote with quoting on; returns the logits from there.
    pub(super) fn back(
        &mut self,
        model: &mut dyn LanguageModel,
        codec: &dyn Codec,
        matcher: &mut Matcher,
        pos: &mut usize,
        out: &mut DecodeOutput,
    ) -> formwork_models::Result<Option<Vec<f32>>> {
        let Some(g) = self.g else { return Ok(None) };
        let since = self.judged;
        self.judged = out.bytes.len();
        let Some(r) = g.region(&out.bytes) else {
            self.quoting = None;
            return Ok(None);
        };
        let s = ground::scan(&out.bytes[r.start..r.end]);
        for v in s.strings.iter().filter(|v| r.start + v.end > since) {
            let start = r.start + v.start;
            if self.quoting == Some(start) {
                self.quoting = None;
            }
            let Some(f) = field(r.fields, &v.pattern) else {
                continue;
            };
            if g.stated(&v.value) || self.redone.contains(&start) {
                continue;
            }
            let Some(mark) = self.mark.take_if(|m| m.bytes <= start + 1) else {
                out.stats.args_kept += 1;
                continue;
            };
            let open = out.bytes[start] == b'"';
            let mut text = out.bytes[mark.bytes.min(start)..start].to_vec();
            if mark.bytes > start {
                // The mark is after the opening quote (the grammar forced it).
                text.clear();
            } else if f.nullable {
                text.extend_from_slice(b"null");
            } else if open {
                text.push(b'"');
            }
            let Some(logits) = self.replay(model, codec, matcher, pos, out, &mark, &text)? else {
                out.stats.args_kept += 1;
                continue;
            };
            self.redone.push(start);
            if f.nullable && mark.bytes <= start {
                out.stats.grounded_nulls += 1;
            } else {
                out.stats.args_quoted += 1;
                self.quoting = Some(start);
            }
            return Ok(Some(logits));
        }
        Ok(None)
    }

    /// Back to `mark`, then `text` as forced tokens ([`Mark::replay`]); the logits
    /// after them. `None` when the grammar refuses the text or the model cannot
    /// truncate its cache.
    #[allow(clippy::too_many_arguments)]
    fn replay(
        &mut self,
        model: &mut dyn LanguageModel,
        codec: &dyn Codec,
        matcher: &mut Matcher,
        pos: &mut usize,
        out: &mut DecodeOutput,
        mark: &Mark,
        text: &[u8],
    ) -> formwork_models::Result<Option<Vec<f32>>> {
        let logits = mark.replay(model, codec, matcher, pos, out, text, mark.bytes)?;
        if logits.is_some() {
            self.judged = out.bytes.len();
        }
        Ok(logits)
    }

    /// The pick while a string is written as a quotation: the best token, by logit,
    /// that the mask allows and that keeps the string a piece of the conversation (or
    /// closes it as one). `None` when none of the best [`super::sample::MAX_TRIED`] does: quoting
    /// stops and the loop picks as usual.
    pub(super) fn pick_quoted(
        &mut self,
        matcher: &mut Matcher,
        codec: &dyn Codec,
        logits: &[f32],
        mask: &mut TokenSet,
        out: &mut DecodeOutput,
    ) -> Option<(u32, f64)> {
        let (g, start) = (self.g?, self.quoting?);
        full_mask(matcher, mask, &mut out.stats);
        let so_far = &out.bytes[start + 1..];
        let bytes = codec.token_bytes();
        let fits = |t: u32| quoted_fits(g, so_far, &bytes[t as usize]);
        match best_fitting(logits, mask, fits) {
            Some(t) => Some((t, masked_p(logits, mask, t, 1.0))),
            None => {
                self.quoting = None;
                out.stats.args_kept += 1;
                None
            }
        }
    }
}

fn field<'f>(fields: &'f [ArgField], pattern: &str) -> Option<&'f ArgField> {
    fields.iter().find(|f| f.pattern == pattern)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_quoted_token_fits_while_the_string_is_a_piece_of_the_conversation() {
        let s = json!({"type": "object", "properties": {"sku": {"type": "string"}}});
        let g = ArgGrounding::new([("f", &s)], None, true, "Reorder SKU-11, caffè.").unwrap();
        assert!(quoted_fits(&g, b"", b"SKU"));
        assert!(!quoted_fits(&g, b"", b"KU"), "not from mid-word");
        assert!(!quoted_fits(&g, b"", b"sku"), "the conversation's own case");
        assert!(!quoted_fits(&g, b"SK", b"\""), "not to mid-word");
        assert!(quoted_fits(&g, b"SKU", b"-11"));
        assert!(quoted_fits(&g, b"SKU-11", b"\"}"), "closes as a quotation");
        assert!(
            !quoted_fits(&g, b"", b"\""),
            "the empty string is never stated"
        );
        assert!(!quoted_fits(&g, b"SKU", b"-12"));
        assert!(!quoted_fits(&g, b"SK", b"U\\"), "no escapes");
        // A character split across tokens.
        let e = "caff\u{e8}".as_bytes();
        assert!(quoted_fits(&g, b"", &e[..5]));
        assert!(quoted_fits(&g, &e[..5], &e[5..]));
        // A lead byte is taken only where the conversation goes on with it.
        assert!(!quoted_fits(&g, b"t", &"t\u{360}".as_bytes()[1..2]));
    }
}
