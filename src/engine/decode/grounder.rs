//! Grounding take-backs in the masked loop: handed the output as it grows, it keeps a
//! model snapshot and matcher clone before each value that may be grounded, judges
//! each grounded string when it closes, and on one the document does not state goes
//! back and writes `null` in its place.

use formwork_grammar::matcher::Matcher;
use formwork_models::runtime::LanguageModel;

use super::super::confidence::{self, Chosen};
use super::super::ground::{self, Grounding};
use super::{Codec, DecodeOutput};

/// The loop's state just before a value that may be grounded: where a grounded string
/// that fails is taken back to.
struct Checkpoint {
    model: Box<dyn LanguageModel>,
    matcher: Matcher,
    pos: usize,
    tokens: usize,
    bytes: usize,
    ranges: usize,
}

/// The loop's grounding: the checkpoint before the value being written, and how far
/// the output's strings have been judged. Inert without grounded fields.
pub(super) struct Grounder<'a> {
    g: Option<&'a Grounding>,
    checkpoint: Option<Checkpoint>,
    judged: usize,
}

impl<'a> Grounder<'a> {
    /// Inert when `g` is `None`.
    pub(super) fn new(g: Option<&'a Grounding>) -> Self {
        Grounder {
            g,
            checkpoint: None,
            judged: 0,
        }
    }

    /// Does grounding refuse `null` for the value that starts here (a date field the
    /// document gives a day, [`Grounding::refuses_null`])?
    pub(super) fn refuses_null(&self, out: &DecodeOutput) -> bool {
        let Some(g) = self.g else { return false };
        let s = ground::scan(&out.bytes);
        let Some(p) = &s.next_value else { return false };
        let earlier = s
            .strings
            .iter()
            .filter(|e| g.covers(&e.pattern))
            .map(|e| e.value.as_str());
        g.refuses_null(p, earlier)
    }

    /// Takes a [`Checkpoint`] when the text ends where the next value may be grounded.
    pub(super) fn checkpoint(
        &mut self,
        model: &dyn LanguageModel,
        matcher: &Matcher,
        pos: usize,
        out: &DecodeOutput,
    ) {
        let Some(g) = self.g else { return };
        let s = ground::scan(&out.bytes);
        let worth = match (&s.next_value, &s.before_value_in) {
            (Some(p), _) => g.covers(p),
            (None, Some(c)) => g.covers_inside(c),
            _ => false,
        };
        if worth && self.checkpoint.as_ref().map(|c| c.bytes) != Some(out.bytes.len()) {
            self.checkpoint = Some(Checkpoint {
                model: model.snapshot(),
                matcher: matcher.clone(),
                pos,
                tokens: out.tokens.len(),
                bytes: out.bytes.len(),
                ranges: out.forced_ranges.len(),
            });
        }
    }

    /// Judges the grounded strings completed since the last call (the output has
    /// grown, and the model has not been fed its new tokens). On the first that does
    /// not stand, goes back to the checkpoint before it, writes the same bytes up to
    /// the value and `null` in its place (one forward pass), and returns the logits
    /// after them; the loop goes on from there. `None`: nothing taken back.
    pub(super) fn back(
        &mut self,
        model: &mut Box<dyn LanguageModel>,
        codec: &dyn Codec,
        matcher: &mut Matcher,
        pos: &mut usize,
        out: &mut DecodeOutput,
    ) -> formwork_models::Result<Option<Vec<f32>>> {
        let Some(g) = self.g else { return Ok(None) };
        let scan = ground::scan(&out.bytes);
        let since = self.judged;
        self.judged = out.bytes.len();
        for (i, s) in scan
            .strings
            .iter()
            .enumerate()
            .filter(|(_, s)| s.end > since)
        {
            let earlier = scan.strings[..i]
                .iter()
                .filter(|e| g.covers(&e.pattern))
                .map(|e| e.value.as_str());
            if !g.covers(&s.pattern) || g.judge(&s.pattern, &s.value, earlier) {
                continue;
            }
            let Some(cp) = self.checkpoint.take_if(|c| c.bytes <= s.start) else {
                out.stats.grounded_kept += 1;
                continue;
            };
            let mut text = out.bytes[cp.bytes..s.start].to_vec();
            text.extend_from_slice(b"null");
            let replay = std::str::from_utf8(&text)
                .ok()
                .map(|t| codec.encode(t))
                .unwrap_or_default();
            let mut m = cp.matcher.clone();
            let ok = !replay.is_empty()
                && replay
                    .iter()
                    .all(|&t| m.is_allowed(t) && m.commit(t).is_ok());
            if !ok {
                out.stats.grounded_kept += 1;
                continue;
            }
            *model = cp.model;
            *matcher = m;
            let p = confidence::value_p(
                &out.probs.chosen,
                s.start,
                s.end,
                confidence::Combine::Product,
            );
            let probs = &mut out.probs;
            probs.taken_back.push(Chosen {
                at: s.start,
                len: s.end - s.start,
                p,
            });
            probs.chosen.retain(|c| c.at < cp.bytes);
            probs.odds.retain(|o| o.at < cp.bytes);
            out.tokens.truncate(cp.tokens);
            out.bytes.truncate(cp.bytes);
            out.forced_ranges.truncate(cp.ranges);
            out.push(codec, &replay, false, true);
            *pos = cp.pos;
            let logits = out.forward(model.as_mut(), &replay, pos)?;
            out.stats.grounded_nulls += 1;
            self.judged = out.bytes.len();
            return Ok(Some(logits));
        }
        Ok(None)
    }
}
