//! What a run hands back: `DecodeOutput` (tokens, bytes, forced spans, probabilities)
//! with its `DecodeStats` and `NullDecision`s, the bookkeeping every stage calls to
//! record a choice, a feed or a forward pass, and `canonical_spans`, which judges the
//! finished output against the tokenizer's own encoding.

use std::time::Duration;

use formwork_models::runtime::LanguageModel;

use super::super::confidence::{Chosen, NullOdds, Probs};
use super::{Codec, DecodeOptions, Stop};

#[derive(Clone, Debug, Default)]
pub struct DecodeStats {
    pub tokens_generated: usize,
    pub tokens_forced: usize,
    /// Every forward pass after the prompt, the lookahead's included.
    pub forward_passes: usize,
    /// Nanoseconds of each full mask computation.
    pub mask_ns: Vec<u64>,
    pub decode_time: Duration,
    /// Feeds that carried forced bytes (one forced span each).
    pub forced_spans: usize,
    /// Forced spans whose tokens are not the tokenizer's own encoding of the final
    /// text at that place (see [`canonical_spans`]).
    pub forced_spans_noncanonical: usize,
    /// The output's tokens differ from the tokenizer's encoding of the output text
    /// (forced or sampled, anywhere).
    pub noncanonical: bool,
    /// Decision points where the null lookahead ran.
    pub lookaheads: usize,
    /// Of those, the ones `null` won.
    pub lookahead_null_wins: usize,
    /// Forward passes spent inside the lookahead, both branches (counted in
    /// `forward_passes` too). The winner's passes would mostly have been spent
    /// anyway, though one token at a time instead of one pass per forced span.
    pub lookahead_forward_passes: usize,
    /// `null`s weighed against the best whole value the document offers
    /// (`DecodeOptions::weigh_nulls`), and of those, the ones whose value was taken
    /// instead (the null lookahead).
    pub nulls_weighed: usize,
    pub weighed_values_taken: usize,
    /// Forward passes spent weighing (counted in `forward_passes` too).
    pub weigh_forward_passes: usize,
    /// Every `null` weighed against a quotation that stands, in order.
    pub weighed: Vec<WeighedNull>,
    /// Every point where `null` competed with a value and the model picked a token
    /// (not those the lookahead decided), in order.
    pub null_decisions: Vec<NullDecision>,
    /// Grounded strings the document does not state, taken back and written `null`.
    /// Rows of an array that repeated an earlier row, taken back (the array closed
    /// before them; [`crate::engine::ground::Grounding::repeats_row`]).
    pub rows_dropped: usize,
    /// Such rows that could not be taken back (no mark before them, the schema wants
    /// more rows, or the model cannot truncate its cache).
    pub rows_kept: usize,
    /// Strings of a row that held several items, cut to their first while decoding
    /// ([`crate::engine::ground::Grounding::first_item`]).
    pub items_cut: usize,
    /// Such strings that could not be cut (no mark before them, the grammar refused
    /// the cut value, or the model cannot truncate its cache).
    pub items_kept: usize,
    /// Evidence quotations taken to the end of their clause
    /// ([`crate::engine::ground::Grounding::whole_evidence`]).
    pub quotes_extended: usize,
    pub grounded_nulls: usize,
    /// Grounded strings that failed but could not be taken back (no snapshot before
    /// them, or the grammar refused `null` there); they stay in the output.
    pub grounded_kept: usize,
    /// Grounded tool arguments the conversation does not state, written again as a
    /// quotation of it ([`crate::engine::ground::args`]; those written `null` count in
    /// `grounded_nulls`).
    pub args_quoted: usize,
    /// Such arguments that stay as the model wrote them (no mark before them, the
    /// model cannot truncate its cache, or no token keeps the string a quotation).
    pub args_kept: usize,
}

/// A `null` weighed against the document's best quotation.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct WeighedNull {
    /// Output bytes before the value (where it starts).
    pub at: usize,
    /// The quotation's text, and its probability given that a value is written.
    pub quotation: String,
    pub p: f64,
    /// Whether it was written instead of the `null`.
    pub taken: bool,
}

/// One choice between `null` and a value at a nullable field.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct NullDecision {
    /// Output bytes before the value (where it starts).
    pub at: usize,
    /// The best allowed `null` token's logit minus the best allowed other token's,
    /// before any bias: how much more (or, below 0, less) likely null is, in nats.
    pub gap: f32,
    /// Whether the picked token starts `null`.
    pub null: bool,
}

#[derive(Clone, Debug)]
pub struct DecodeOutput {
    pub tokens: Vec<u32>,
    pub bytes: Vec<u8>,
    pub stop: Stop,
    /// True when the budget steering had to take over (the text is valid but
    /// shorter than the model wanted).
    pub steered: bool,
    pub stats: DecodeStats,
    /// Token ranges `[start, end)` of `tokens` fed by jump-forward, one per forced span.
    pub forced_ranges: Vec<(usize, usize)>,
    /// With [`DecodeOptions::confidence`]: the chosen tokens' probabilities, at byte
    /// offsets of `bytes`.
    ///
    /// [`DecodeOptions::confidence`]: super::DecodeOptions::confidence
    pub probs: Probs,
}

impl DecodeOutput {
    pub(crate) fn empty() -> Self {
        DecodeOutput {
            tokens: Vec::new(),
            bytes: Vec::new(),
            stop: Stop::Budget,
            steered: false,
            stats: DecodeStats::default(),
            forced_ranges: Vec::new(),
            probs: Probs::default(),
        }
    }

    /// Records the model's choice of `tok`, about to be written at the end of the
    /// output, with its probability `p` under the mask.
    pub(super) fn chose(&mut self, codec: &dyn Codec, opts: &DecodeOptions, tok: u32, p: f64) {
        if opts.confidence {
            self.probs.chosen.push(Chosen {
                at: self.bytes.len(),
                len: codec.token_bytes().get(tok as usize).map_or(0, Vec::len),
                p,
            });
        }
    }

    /// Records tokens about to be fed: `sampled` when the first was the model's
    /// choice, `forced` when the feed carried forced bytes.
    pub(super) fn push(&mut self, codec: &dyn Codec, toks: &[u32], sampled: bool, forced: bool) {
        let start = self.tokens.len();
        for &t in toks {
            self.bytes
                .extend_from_slice(&codec.token_bytes()[t as usize]);
        }
        self.tokens.extend_from_slice(toks);
        let generated = usize::from(sampled).min(toks.len());
        self.stats.tokens_generated += generated;
        self.stats.tokens_forced += toks.len() - generated;
        if forced {
            self.forced_ranges.push((start, self.tokens.len()));
            self.stats.forced_spans += 1;
        }
    }

    /// Feeds `toks` (already recorded by [`push`](Self::push)) to `model` at `*pos`,
    /// moves `*pos` past them and counts the pass: the logits after them.
    pub(super) fn forward(
        &mut self,
        model: &mut dyn LanguageModel,
        toks: &[u32],
        pos: &mut usize,
    ) -> formwork_models::Result<Vec<f32>> {
        let logits = model.forward(toks, *pos)?;
        self.stats.forward_passes += 1;
        *pos += toks.len();
        Ok(logits)
    }

    /// Appends a lookahead branch that won.
    pub(super) fn append(&mut self, b: DecodeOutput) {
        let base = self.tokens.len();
        let at = self.bytes.len();
        (self.probs.chosen).extend(b.probs.chosen.iter().map(|c| Chosen {
            at: c.at + at,
            ..*c
        }));
        (self.probs.odds).extend(b.probs.odds.iter().map(|o| NullOdds {
            at: o.at + at,
            ..*o
        }));
        self.tokens.extend_from_slice(&b.tokens);
        self.bytes.extend_from_slice(&b.bytes);
        self.steered |= b.steered;
        self.forced_ranges
            .extend(b.forced_ranges.iter().map(|&(s, e)| (s + base, e + base)));
        self.stats.tokens_generated += b.stats.tokens_generated;
        self.stats.tokens_forced += b.stats.tokens_forced;
        self.stats.forced_spans += b.stats.forced_spans;
        self.stats.mask_ns.extend_from_slice(&b.stats.mask_ns);
    }
}

/// Whether `tokens` (spelling `bytes`) differ from the tokenizer's own encoding of
/// the text, and how many of the `ranges` (forced spans) are not canonical: a span
/// is canonical when the encoding of the whole text has a token starting at the
/// span's first byte and continues with exactly the span's tokens. Text that is not
/// UTF-8 (a budget cut inside a character) is not judged: `(false, 0)`.
pub fn canonical_spans(
    codec: &dyn Codec,
    tokens: &[u32],
    bytes: &[u8],
    ranges: &[(usize, usize)],
) -> (bool, usize) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return (false, 0);
    };
    let canon = codec.encode(text);
    let vocab = codec.token_bytes();
    let len = |t: u32| vocab.get(t as usize).map_or(0, |b| b.len());
    let mut at = std::collections::HashMap::new();
    let mut off = 0;
    for (i, &t) in canon.iter().enumerate() {
        at.insert(off, i);
        off += len(t);
    }
    let mut starts = Vec::with_capacity(tokens.len());
    let mut off = 0;
    for &t in tokens {
        starts.push(off);
        off += len(t);
    }
    let bad = ranges
        .iter()
        .filter(|&&(s, e)| {
            let ok = at.get(&starts[s]).is_some_and(|&i| {
                canon
                    .get(i..i + (e - s))
                    .is_some_and(|c| c == &tokens[s..e])
            });
            !ok
        })
        .count();
    (canon != tokens, bad)
}
