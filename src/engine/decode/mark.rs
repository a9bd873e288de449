//! A place in the masked loop to go back to by truncating the model's KV cache (no
//! snapshot): the matcher, the position and the output's lengths there, and, where the
//! loop may resume with nothing written, the logits. Grounding's take-backs
//! (`grounder`) and grounded tool arguments (`ground_args`) both go back this way.

use formwork_grammar::matcher::Matcher;
use formwork_models::runtime::LanguageModel;

use super::{Codec, DecodeOutput};

#[derive(Clone)]
pub(super) struct Mark {
    pub(super) matcher: Matcher,
    /// The logits at the mark, kept when the loop may resume there with nothing
    /// written ([`Mark::replay`] of an empty text).
    logits: Option<Vec<f32>>,
    pub(super) pos: usize,
    pub(super) tokens: usize,
    pub(super) bytes: usize,
    pub(super) ranges: usize,
}

impl Mark {
    /// The loop as it stands: `matcher` at `pos` after `out`, with the logits there
    /// when given.
    pub(super) fn at(
        matcher: &Matcher,
        logits: Option<&[f32]>,
        pos: usize,
        out: &DecodeOutput,
    ) -> Mark {
        Mark {
            matcher: matcher.clone(),
            logits: logits.map(<[f32]>::to_vec),
            pos,
            tokens: out.tokens.len(),
            bytes: out.bytes.len(),
            ranges: out.forced_ranges.len(),
        }
    }

    /// Back to the mark, then `text` as forced tokens: the model's cache truncated,
    /// `matcher`, `pos` and `out` as they were there (the probabilities recorded at
    /// `keep` bytes or later dropped), then the text pushed and fed. The logits after
    /// it (the mark's own for an empty text). `None`, with nothing changed, when the
    /// grammar refuses the text, the text is empty and no logits were kept, or the
    /// model cannot truncate its cache.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn replay(
        &self,
        model: &mut dyn LanguageModel,
        codec: &dyn Codec,
        matcher: &mut Matcher,
        pos: &mut usize,
        out: &mut DecodeOutput,
        text: &[u8],
        keep: usize,
    ) -> formwork_models::Result<Option<Vec<f32>>> {
        let replay = match std::str::from_utf8(text) {
            Ok("") => Vec::new(),
            Ok(t) => codec.encode(t),
            Err(_) => return Ok(None),
        };
        if replay.is_empty() && (!text.is_empty() || self.logits.is_none()) {
            return Ok(None);
        }
        let mut m = self.matcher.clone();
        let ok = replay
            .iter()
            .all(|&t| m.is_allowed(t) && m.commit(t).is_ok());
        if !ok || !model.truncate(self.pos) {
            return Ok(None);
        }
        *matcher = m;
        out.probs.chosen.retain(|c| c.at < keep);
        out.probs.odds.retain(|o| o.at < keep);
        out.tokens.truncate(self.tokens);
        out.bytes.truncate(self.bytes);
        out.forced_ranges.truncate(self.ranges);
        *pos = self.pos;
        if replay.is_empty() {
            return Ok(self.logits.clone());
        }
        out.push(codec, &replay, false, true);
        out.forward(model, &replay, pos).map(Some)
    }
}
