//! The masked decoding loop, independent of any real model or tokenizer: it runs
//! against `LanguageModel` (a real GGUF model, or a scripted one in tests) and a
//! `Codec` (the GGUF tokenizer, or a byte-level vocabulary in tests).
//!
//! One step:
//! 1. A sampled token is committed to the matcher at once but fed to the model only
//!    at the next step, so that forced bytes after it can join it. If the schema
//!    forces the next bytes (`{"sku":"` at the start, `,"date":` after a value),
//!    tokenise them *together with that pending token* (token healing: the model's
//!    `"` and the forced `,"date":` are fed as `","`, `date`, as the tokenizer writes
//!    the text), keep the canonical prefix (no token could span its end; the bytes
//!    after it are left to the model under the mask), commit those tokens without
//!    sampling and feed everything in one forward pass (jump-forward).
//! 2. Otherwise tell the matcher how many tokens are left (it steers to the shortest
//!    valid completion when the budget runs low), then sample. Greedy checks the
//!    argmax first and computes the full mask only when the argmax is refused;
//!    temperature sampling always computes the full mask. With `null_lookahead`, a
//!    nullable field's `null` is first weighed against its best value (see
//!    [`decode_masked`]).
//! 3. EOS is allowed only in an accepting state; the loop stops at EOS, or when the
//!    matcher is finished (accepting and nothing can follow; the last tokens are then
//!    not fed, as their logits would never be read).
//!
//! Each output records its jump-forward spans and whether they are canonical (the
//! tokenizer's own encoding of the final text at that place, [`canonical_spans`]).

use std::time::{Duration, Instant};

use formwork_grammar::matcher::Matcher;
use formwork_grammar::toktrie::TokenSet;
use formwork_models::runtime::LanguageModel;

use crate::sampling::Sampler;

use super::confidence::{self, Chosen, NullOdds, Probs};
use super::ground::{self, Grounding};

/// What the loop needs from a tokenizer.
pub trait Codec {
    /// Token ids for `text`, special-token text *not* interpreted.
    fn encode(&self, text: &str) -> Vec<u32>;
    /// Raw bytes of every token id.
    fn token_bytes(&self) -> &[Vec<u8>];
    /// Ids that end a generation.
    fn eos_ids(&self) -> &[u32];
}

impl Codec for formwork_models::tokenizer::GgufTokenizer {
    fn encode(&self, text: &str) -> Vec<u32> {
        // Forced text is plain JSON; a failure here would be a tokenizer bug, and
        // the loop then falls back to sampling (an empty list forces nothing).
        self.encode_plain(text).unwrap_or_default()
    }
    fn token_bytes(&self) -> &[Vec<u8>] {
        formwork_models::tokenizer::GgufTokenizer::token_bytes(self)
    }
    fn eos_ids(&self) -> &[u32] {
        formwork_models::tokenizer::GgufTokenizer::eos_ids(self)
    }
}

/// Why the loop stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// The model chose EOS in an accepting state.
    Eos,
    /// The text is complete and nothing may follow it.
    Finished,
    /// The token budget ran out before acceptance (cannot happen when steering
    /// works; reported, never hidden).
    Budget,
    /// The per-record time limit ran out.
    Timeout,
    /// The [`Watch`] asked to stop (a server's client went away).
    Cancelled,
}

/// Watches a run: called with the output bytes so far before every step (so the
/// text grows between two calls by what the last feed added). Returning `false`
/// stops the run with [`Stop::Cancelled`]. A server streams deltas and notices a
/// client that went away through it.
#[derive(Clone)]
pub struct Watch(pub std::sync::Arc<dyn Fn(&[u8]) -> bool + Send + Sync>);

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watch(..)")
    }
}

impl Watch {
    fn stops(opts: &DecodeOptions, bytes: &[u8]) -> bool {
        opts.watch.as_ref().is_some_and(|w| !(w.0)(bytes))
    }
}

#[derive(Clone, Debug)]
pub struct DecodeOptions {
    pub max_tokens: usize,
    /// Feed the bytes the schema forces without sampling them (see the module doc).
    pub jump_forward: bool,
    /// With jump-forward: tokenise a sampled token together with the forced bytes
    /// after it (token healing at the left edge of a forced span). On by default;
    /// off only to measure the split of forced text tokenised alone.
    pub heal_forced: bool,
    /// Greedy only: at a nullable field, score the `null` branch against the best
    /// value branch before committing (see [`decode_masked`]).
    pub null_lookahead: bool,
    /// Added to the logits of the tokens that start `null` where a nullable field's
    /// `null` competes with a value ([`Matcher::null_competes`]), before the token is
    /// picked: a prior for "null unless the document says so", in nats. 0 leaves the
    /// model's choice alone.
    pub null_bias: f32,
    pub deadline: Option<Instant>,
    /// Sees the text as it grows, and may stop the run (see [`Watch`]).
    pub watch: Option<Watch>,
    /// Grounded fields ([`super::ground`]): each grounded string is judged as it is
    /// completed, and one the document does not state is taken back and written `null`.
    pub grounding: Option<std::sync::Arc<Grounding>>,
    /// Tool turns: where the model's own best token is refused and begins like a
    /// call, the call's opener is picked (see [`Redirect`]).
    pub redirect: Option<std::sync::Arc<Redirect>>,
    /// Record each chosen token's probability under the mask, and the odds of `null`
    /// where it competes ([`DecodeOutput::probs`], read by [`super::confidence`]).
    /// Greedy decoding then computes the full mask at every step it picks a token.
    pub confidence: bool,
}

/// A model that means to call a tool but starts it its own way (a bare `{"name"`, a
/// code fence, a tag) is taken at its word: where its best token, before the mask, is
/// one of `from` and refused, and `to` is allowed, `to` is picked. The tool grammar
/// refuses `from` exactly where a line of text begins and allows the opener there,
/// so this is the decision "call or text" read from the model, not a change of the
/// mask: the output stays what the grammar allows. A code fence is either: ```` ```json ````
/// opens a call, ```` ```python ```` a code answer. So for a token of `fence` the model is
/// asked one token further (a forward pass on a snapshot): a language other than JSON
/// leaves the choice to the mask (text). The best token is the argmax of the logits
/// under any sampling, so the decision is the same at every temperature.
#[derive(Clone, Debug)]
pub struct Redirect {
    pub from: TokenSet,
    /// The tokens of `from` that open a code fence without naming JSON.
    pub fence: TokenSet,
    pub to: u32,
}

impl Redirect {
    /// Tokens whose bytes, after any whitespace, begin with one of `starts`; `to` is
    /// the opener's token.
    pub fn new(codec: &dyn Codec, starts: &[u8], to: u32) -> Redirect {
        let vocab = codec.token_bytes();
        let eos = codec.eos_ids();
        let mut from = TokenSet::new(vocab.len());
        let mut fence = TokenSet::new(vocab.len());
        for (i, b) in vocab.iter().enumerate() {
            let first = b.iter().find(|c| !c.is_ascii_whitespace());
            if first.is_some_and(|c| starts.contains(c)) && !eos.contains(&(i as u32)) {
                from.allow(i as u32);
                if first == Some(&b'`') && !b.windows(4).any(|w| w.eq_ignore_ascii_case(b"json")) {
                    fence.allow(i as u32);
                }
            }
        }
        Redirect { from, fence, to }
    }

    /// Whether the token after a fence (its language, or the text on its next line)
    /// begins a call: JSON, a brace, a bracket, a tag, or nothing yet.
    pub fn fence_opens_call(next: &[u8]) -> bool {
        let t: Vec<u8> = next
            .iter()
            .copied()
            .skip_while(|c| c.is_ascii_whitespace() || *c == b'`')
            .collect();
        t.is_empty()
            || matches!(t[0], b'{' | b'[' | b'<')
            || t.len() >= 4 && t[..4].eq_ignore_ascii_case(b"json")
            || t.len() >= 4 && t[..4].eq_ignore_ascii_case(b"tool")
    }
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            max_tokens: 512,
            jump_forward: true,
            heal_forced: true,
            null_lookahead: false,
            null_bias: 0.0,
            deadline: None,
            watch: None,
            grounding: None,
            redirect: None,
            confidence: false,
        }
    }
}

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
    /// Every point where `null` competed with a value and the model picked a token
    /// (not those the lookahead decided), in order.
    pub null_decisions: Vec<NullDecision>,
    /// Grounded strings the document does not state, taken back and written `null`.
    pub grounded_nulls: usize,
    /// Grounded strings that failed but could not be taken back (no snapshot before
    /// them, or the grammar refused `null` there); they stay in the output.
    pub grounded_kept: usize,
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
    pub probs: Probs,
}

impl DecodeOutput {
    fn empty() -> Self {
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
    fn chose(&mut self, codec: &dyn Codec, opts: &DecodeOptions, tok: u32, p: f64) {
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
    fn push(&mut self, codec: &dyn Codec, toks: &[u32], sampled: bool, forced: bool) {
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
    fn forward(
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
    fn append(&mut self, b: DecodeOutput) {
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

/// The whole characters at the start of `bytes` (a split character is sampled).
fn whole_chars(bytes: &[u8]) -> &str {
    match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
    }
}

/// Commits to `matcher` and returns the tokens to feed next, and whether they carry
/// forced bytes. `pending` is a sampled token already committed but not yet fed.
///
/// With jump-forward, the forced bytes after it are tokenised *together with* the
/// pending token's bytes (`"` then forced `,"date":` is fed as `","`, `date`, as the
/// tokenizer writes `","date":`), so the left edge of a forced span is canonical;
/// the right edge is cut by [`Matcher::canonical_forced_prefix`] before any token
/// that could span it, and those bytes are left to the model under the mask. When
/// the joint tokens do not cover the pending token, it is fed alone followed by
/// the forced text tokenised alone (the split before healing). At most `cap`
/// tokens are fed. Empty: nothing to feed, the model decides next.
fn plan_feed(
    matcher: &mut Matcher,
    codec: &dyn Codec,
    pending: Option<u32>,
    opts: &DecodeOptions,
    cap: usize,
) -> (Vec<u32>, bool) {
    let forced = if opts.jump_forward {
        matcher.forced_bytes()
    } else {
        Vec::new()
    };
    let text = whole_chars(&forced);
    if text.is_empty() {
        return (pending.into_iter().collect(), false);
    }
    if let (Some(t), true) = (pending, opts.heal_forced) {
        if let Some(toks) = heal(matcher, codec, t, text, cap) {
            return (toks, true);
        }
    }
    let mut toks: Vec<u32> = pending.into_iter().collect();
    let sampled = toks.len();
    let f = codec.encode(text);
    let keep = matcher
        .canonical_forced_prefix(&f)
        .min(cap.saturating_sub(sampled));
    for &t in &f[..keep] {
        if !matcher.is_allowed(t) || matcher.commit(t).is_err() {
            break;
        }
        toks.push(t);
    }
    let forced = toks.len() > sampled;
    (toks, forced)
}

/// The pending token `t` and the forced `text` after it as the tokenizer writes them
/// together, cut at the canonical prefix; `None` (matcher untouched) when that does
/// not reach past `t`'s bytes, or the tokenizer does not spell the text back.
fn heal(
    matcher: &mut Matcher,
    codec: &dyn Codec,
    t: u32,
    text: &str,
    cap: usize,
) -> Option<Vec<u32>> {
    let vocab = codec.token_bytes();
    let head = std::str::from_utf8(vocab.get(t as usize)?).ok()?;
    let joint = format!("{head}{text}");
    let g = codec.encode(&joint);
    let mut spelled = Vec::with_capacity(joint.len());
    for &x in &g {
        spelled.extend_from_slice(vocab.get(x as usize)?);
    }
    if spelled != joint.as_bytes() {
        return None;
    }
    let mut m = matcher.clone();
    m.rollback(1);
    let keep = m.canonical_forced_prefix(&g).min(cap);
    let mut covered = 0;
    let mut n = 0;
    for &x in &g[..keep] {
        if !m.is_allowed(x) || m.commit(x).is_err() {
            break;
        }
        covered += vocab[x as usize].len();
        n += 1;
    }
    if covered <= head.len() {
        return None;
    }
    *matcher = m;
    Some(g[..n].to_vec())
}

/// The temperature the sampler divides the logits by (greedy: 1).
fn temperature(sampler: &Sampler) -> f64 {
    match sampler.sampling() {
        crate::sampling::Sampling::Temperature { temperature, .. } => *temperature,
        crate::sampling::Sampling::Greedy => 1.0,
    }
}

/// The probability of `tok` under the softmax of `logits / temp` over the tokens
/// `mask` allows (0 when it is not among them).
fn masked_p(logits: &[f32], mask: &TokenSet, tok: u32, temp: f64) -> f64 {
    allowed_p(logits, |t| mask.contains(t), tok, temp)
}

/// [`masked_p`] over the tokens `allowed` takes.
fn allowed_p(logits: &[f32], allowed: impl Fn(u32) -> bool, tok: u32, temp: f64) -> f64 {
    let ok = |t: usize, x: f32| allowed(t as u32) && x.is_finite();
    let mx = (logits.iter().enumerate())
        .filter(|&(t, &x)| ok(t, x))
        .map(|(_, &x)| x as f64 / temp)
        .fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = (logits.iter().enumerate())
        .filter(|&(t, &x)| ok(t, x))
        .map(|(_, &x)| (x as f64 / temp - mx).exp())
        .sum();
    match logits.get(tok as usize) {
        Some(&x) if ok(tok as usize, x) && sum > 0.0 => (x as f64 / temp - mx).exp() / sum,
        _ => 0.0,
    }
}

/// Samples under `mask` (already computed) and, when `prob`, the token's probability
/// under it ([`masked_p`]; NaN otherwise).
fn sample_p(
    sampler: &mut Sampler,
    logits: &[f32],
    mask: &TokenSet,
    prob: bool,
) -> Option<(u32, f64)> {
    let t = sampler.sample(logits, |t| mask.contains(t))?;
    let p = if prob {
        masked_p(logits, mask, t, temperature(sampler))
    } else {
        f64::NAN
    };
    Some((t, p))
}

/// The next token under the mask, and with `prob` its probability under the mask.
/// Greedy checks the argmax first and computes the full mask only when the argmax is
/// refused (or `prob` needs it); temperature sampling always masks.
fn pick(
    matcher: &mut Matcher,
    sampler: &mut Sampler,
    logits: &[f32],
    mask: &mut TokenSet,
    stats: &mut DecodeStats,
    prob: bool,
) -> Option<(u32, f64)> {
    if sampler.sampling().is_greedy() && !prob {
        match crate::sampling::argmax(logits, |_| true) {
            Some(t) if matcher.is_allowed(t) => return Some((t, f64::NAN)),
            _ => {}
        }
    }
    full_mask(matcher, mask, stats);
    sample_p(sampler, logits, mask, prob)
}

/// Where `null` competes: the probability under the mask (at `temp`) of the tokens
/// that start `null`, and of the best allowed token that does not.
fn null_odds(logits: &[f32], mask: &TokenSet, codec: &dyn Codec, temp: f64) -> (f64, f64) {
    let vocab = codec.token_bytes();
    let eos = codec.eos_ids();
    let ok = |t: usize, x: f32| mask.contains(t as u32) && x.is_finite();
    let mx = (logits.iter().enumerate())
        .filter(|&(t, &x)| ok(t, x))
        .map(|(_, &x)| x as f64 / temp)
        .fold(f64::NEG_INFINITY, f64::max);
    let (mut sum, mut null, mut best) = (0.0, 0.0, 0.0f64);
    for (t, &x) in logits.iter().enumerate() {
        if !ok(t, x) {
            continue;
        }
        let e = (x as f64 / temp - mx).exp();
        sum += e;
        if starts_null(vocab, t as u32) {
            null += e;
        } else if !eos.contains(&(t as u32)) {
            best = best.max(e);
        }
    }
    if sum > 0.0 {
        (null / sum, best / sum)
    } else {
        (0.0, 0.0)
    }
}

/// [`pick`] where `null` competes with a value: records the [`NullDecision`], and
/// adds `null_bias` (`opts.null_bias`, or minus infinity where grounding refuses
/// `null`) to the logits of the tokens that start `null` first.
fn pick_null_or_value(
    matcher: &mut Matcher,
    codec: &dyn Codec,
    sampler: &mut Sampler,
    logits: &[f32],
    mask: &mut TokenSet,
    null_bias: f32,
    opts: &DecodeOptions,
    out: &mut DecodeOutput,
) -> Option<(u32, f64)> {
    full_mask(matcher, mask, &mut out.stats);
    let vocab = codec.token_bytes();
    let eos = codec.eos_ids();
    let starts_n = |t: u32| starts_null(vocab, t);
    let allowed = |t: u32| mask.contains(t) && !eos.contains(&t);
    let best_null = crate::sampling::argmax(logits, |t| allowed(t) && starts_n(t));
    let best_value = crate::sampling::argmax(logits, |t| allowed(t) && !starts_n(t));
    let gap = match (best_null, best_value) {
        (Some(n), Some(v)) => logits[n as usize] - logits[v as usize],
        _ => return sample_p(sampler, logits, mask, opts.confidence),
    };
    let biased;
    let seen = if null_bias == 0.0 {
        logits
    } else {
        let mut b = logits.to_vec();
        for (t, x) in b.iter_mut().enumerate() {
            if starts_n(t as u32) {
                *x += null_bias;
            }
        }
        biased = b;
        &biased
    };
    let tok = sample_p(sampler, seen, mask, opts.confidence);
    if opts.confidence {
        let (null, value) = null_odds(seen, mask, codec, temperature(sampler));
        out.probs.odds.push(NullOdds {
            at: out.bytes.len(),
            null,
            value,
        });
    }
    out.stats.null_decisions.push(NullDecision {
        at: out.bytes.len(),
        gap,
        null: tok.is_some_and(|(t, _)| starts_n(t)),
    });
    tok
}

/// Whether token `t` starts `null` (at a choice where `null` competes, the only
/// literal that starts with `n`).
fn starts_null(vocab: &[Vec<u8>], t: u32) -> bool {
    vocab.get(t as usize).and_then(|b| b.first()) == Some(&b'n')
}

/// Bytes after which compact JSON may start a value (`"a":`, `[`, `,` in an array).
fn value_may_follow(b: u8) -> bool {
    matches!(b, b':' | b',' | b'[')
}

/// Token ids with a byte after which a value may start: the only ones that can carry a
/// choice between `null` and a value inside them (`":"` starts a string, `":null` is
/// null) or end right before one (`":`).
fn crossing_candidates(codec: &dyn Codec) -> Vec<u32> {
    let eos = codec.eos_ids();
    codec
        .token_bytes()
        .iter()
        .enumerate()
        .filter(|(t, b)| b.iter().any(|&c| value_may_follow(c)) && !eos.contains(&(*t as u32)))
        .map(|(t, _)| t as u32)
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Crossing {
    /// The token goes on into `null`.
    Null,
    /// The token goes on into another value.
    Value,
    /// The token ends where `null` competes (the next step chooses).
    Undecided,
}

/// The allowed tokens of `candidates` that cross or reach a point where `null`
/// competes with a value, with the class and the offset in the token's bytes where
/// that value starts.
fn crossing_tokens(
    matcher: &mut Matcher,
    vocab: &[Vec<u8>],
    mask: &TokenSet,
    candidates: &[u32],
) -> Vec<(u32, Crossing, usize)> {
    let mut out = Vec::new();
    for &t in candidates {
        if !mask.contains(t) {
            continue;
        }
        let bytes = &vocab[t as usize];
        for j in 0..bytes.len() {
            if !value_may_follow(bytes[j]) {
                continue;
            }
            if matcher.commit_bytes(&bytes[..=j]).is_err() {
                break;
            }
            let competes = matcher.null_competes();
            matcher.rollback(1);
            if competes {
                let class = match bytes.get(j + 1) {
                    None => Crossing::Undecided,
                    Some(b'n') => Crossing::Null,
                    Some(_) => Crossing::Value,
                };
                out.push((t, class, j + 1));
                break;
            }
        }
    }
    out
}

/// [`pick`] with a null bias where no `null` competes at this state but tokens cross
/// one: `":"` (a string starts inside the token), `":null`, or `":` (the next step
/// chooses). The bias means "every way to `null` weighs `e^bias` times more", so
/// `null`-crossing tokens get `+bias` and tokens that end at the choice get
/// `ln(p e^bias + 1 - p)`, where `p` is the model's probability of `null` right after
/// the best of them: one forward pass on a snapshot, spent only when that token could
/// win (always, when sampling). The next step then adds the bias to `null` as at any
/// choice. Records a [`NullDecision`] when the picked token decides.
#[allow(clippy::too_many_arguments)]
fn pick_across_null(
    model: &dyn LanguageModel,
    codec: &dyn Codec,
    matcher: &mut Matcher,
    sampler: &mut Sampler,
    logits: &[f32],
    pos: usize,
    mask: &mut TokenSet,
    opts: &DecodeOptions,
    out: &mut DecodeOutput,
    candidates: &[u32],
) -> formwork_models::Result<Option<(u32, f64)>> {
    full_mask(matcher, mask, &mut out.stats);
    let vocab = codec.token_bytes();
    let classes = crossing_tokens(matcher, vocab, mask, candidates);
    let best = |c: Crossing| {
        classes
            .iter()
            .filter(|x| x.1 == c)
            .map(|x| (x.0, logits[x.0 as usize]))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    };
    let (bv, bn, bu) = (
        best(Crossing::Value),
        best(Crossing::Null),
        best(Crossing::Undecided),
    );
    if bv.is_none() && bn.is_none() {
        return Ok(sample_p(sampler, logits, mask, opts.confidence));
    }
    let b = opts.null_bias;
    let rival = bv
        .map(|x| x.1)
        .into_iter()
        .chain(bn.map(|x| x.1 + b))
        .fold(f32::NEG_INFINITY, f32::max);
    // The probability of `null` after the best token that ends at the choice.
    let mut p_null: Option<f64> = None;
    if let Some((u, lu)) = bu {
        if !sampler.sampling().is_greedy() || lu + b.max(0.0) > rival {
            let mut snap = model.snapshot();
            let next = snap.forward(&[u], pos)?;
            out.stats.forward_passes += 1;
            out.stats.lookahead_forward_passes += 1;
            let mut after = matcher.clone();
            if after.commit(u).is_ok() {
                let mut m2 = TokenSet::new(vocab.len().max(next.len()));
                after.compute_mask(&mut m2);
                let eos = codec.eos_ids();
                let ok = |t: usize| m2.contains(t as u32) && !eos.contains(&(t as u32));
                let mx = next
                    .iter()
                    .enumerate()
                    .filter(|(t, _)| ok(*t))
                    .map(|(_, &x)| x as f64)
                    .fold(f64::NEG_INFINITY, f64::max);
                let (mut all, mut nul) = (0.0, 0.0);
                for (t, &x) in next.iter().enumerate() {
                    if ok(t) {
                        let e = (x as f64 - mx).exp();
                        all += e;
                        if starts_null(vocab, t as u32) {
                            nul += e;
                        }
                    }
                }
                if all > 0.0 {
                    p_null = Some(nul / all);
                }
            }
        }
    }
    let undecided_shift = p_null.map_or(0.0, |p| (p * (b as f64).exp() + (1.0 - p)).ln() as f32);
    let mut biased = logits.to_vec();
    for &(t, c, _) in &classes {
        match c {
            Crossing::Null => biased[t as usize] += b,
            Crossing::Undecided => biased[t as usize] += undecided_shift,
            Crossing::Value => {}
        }
    }
    let tok = sample_p(sampler, &biased, mask, opts.confidence);
    if let Some(&(_, c, j)) = tok.and_then(|(t, _)| classes.iter().find(|x| x.0 == t)) {
        if c != Crossing::Undecided {
            // Null's best way against the value's best way, before the bias.
            let (pn, pv) = p_null.map_or((0.0, f64::NEG_INFINITY), |p| (p.ln(), (1.0 - p).ln()));
            let via_u = |lp: f64| bu.map_or(f64::NEG_INFINITY, |(_, l)| l as f64 + lp);
            let null_way = bn.map_or(f64::NEG_INFINITY, |x| x.1 as f64).max(via_u(pn));
            let value_way = bv.map_or(f64::NEG_INFINITY, |x| x.1 as f64).max(via_u(pv));
            out.stats.null_decisions.push(NullDecision {
                at: out.bytes.len() + j,
                gap: (null_way - value_way) as f32,
                null: c == Crossing::Null,
            });
        }
    }
    Ok(tok)
}

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
struct Grounder<'a> {
    g: Option<&'a Grounding>,
    checkpoint: Option<Checkpoint>,
    judged: usize,
}

impl Grounder<'_> {
    /// Does grounding refuse `null` for the value that starts here (a date field the
    /// document gives a day, [`Grounding::refuses_null`])?
    fn refuses_null(&self, out: &DecodeOutput) -> bool {
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
    fn checkpoint(
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
    fn back(
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

/// Run masked decoding from `logits` (the model's output after the prompt, whose
/// length is `pos`).
///
/// **Null lookahead** (`null_lookahead`, greedy only). At a decision point where a
/// `null` literal and another value may both start ([`Matcher::null_competes`]),
/// both branches are decoded on snapshots of the model and clones of the matcher:
/// the best allowed token starting with `n` (then `null`'s forced rest and the
/// separator), and the best allowed other token, continued greedily under the mask.
/// Each branch ends at the first decision point after its value is complete: after
/// a byte where the matcher's state is the state after `null`, or that state followed
/// by `,` `}` `]` (so both end at the same separator), or after 64 tokens. The rule:
/// **the higher mean natural-log probability per token wins**, over every token the
/// branch feeds, sampled and forced alike, each under the model's full softmax (no
/// mask). A tie goes to the greedy first choice. The winner's model, matcher and
/// logits replace the current ones, exactly as if it had been decoded directly;
/// branches feed one token a pass (each token needs its logits), and do not look
/// ahead again inside.
pub fn decode_masked(
    model: &mut Box<dyn LanguageModel>,
    codec: &dyn Codec,
    matcher: &mut Matcher,
    sampler: &mut Sampler,
    mut logits: Vec<f32>,
    mut pos: usize,
    opts: &DecodeOptions,
) -> formwork_models::Result<DecodeOutput> {
    let started = Instant::now();
    let vocab = codec.token_bytes().len().max(logits.len());
    let mut mask = TokenSet::new(vocab);
    let mut out = DecodeOutput::empty();
    let eos = codec.eos_ids();
    let mut pending: Option<u32> = None;
    // With a null bias: the tokens that may carry a value's start inside them.
    let mut crossers: Option<Vec<u32>> = None;
    let mut grounder = Grounder {
        g: opts.grounding.as_deref(),
        checkpoint: None,
        judged: 0,
    };
    loop {
        if Watch::stops(opts, &out.bytes) {
            out.stop = Stop::Cancelled;
            break;
        }
        // 1. Feed the pending sampled token and the forced bytes after it (jump-forward).
        if pending.is_some() || opts.jump_forward {
            let cap = opts.max_tokens.saturating_sub(out.tokens.len());
            if pending.is_none() {
                matcher.set_budget(cap);
            }
            let sampled = pending.is_some();
            let (toks, forced) = plan_feed(matcher, codec, pending.take(), opts, cap);
            if !toks.is_empty() {
                out.push(codec, &toks, sampled, forced);
                if let Some(l) = grounder.back(model, codec, matcher, &mut pos, &mut out)? {
                    logits = l;
                    continue;
                }
                if matcher.is_finished() {
                    // Nothing can follow: the logits after these tokens are never read.
                    out.stop = Stop::Finished;
                    break;
                }
                logits = out.forward(model.as_mut(), &toks, &mut pos)?;
                continue;
            }
        }
        if matcher.is_finished() {
            out.stop = Stop::Finished;
            break;
        }
        let used = out.tokens.len();
        if used >= opts.max_tokens {
            out.stop = if matcher.is_accepting() {
                Stop::Finished
            } else {
                Stop::Budget
            };
            break;
        }
        if opts.deadline.is_some_and(|d| Instant::now() >= d) {
            out.stop = Stop::Timeout;
            break;
        }
        let left = opts.max_tokens - used;
        matcher.set_budget(left);
        grounder.checkpoint(model.as_ref(), matcher, pos, &out);

        let refuse_null = matcher.null_competes() && grounder.refuses_null(&out);
        // 2. Null against a value, both scored before committing.
        if opts.null_lookahead
            && sampler.sampling().is_greedy()
            && matcher.null_competes()
            && !refuse_null
        {
            if let Some(w) = null_lookahead(
                model.as_ref(),
                codec,
                matcher,
                &mut mask,
                &logits,
                pos,
                opts,
                used,
                &mut out.stats,
            )? {
                *model = w.model;
                *matcher = w.matcher;
                logits = w.logits;
                pos = w.pos;
                let finished = w.finished;
                out.append(w.out);
                if let Some(l) = grounder.back(model, codec, matcher, &mut pos, &mut out)? {
                    logits = l;
                    continue;
                }
                if finished {
                    out.stop = Stop::Finished;
                    break;
                }
                continue;
            }
        }

        // 3. Sample under the mask (steered when the budget restricts it).
        out.steered |= matcher.is_steering();
        let mut redirected = None;
        if let Some(r) = &opts.redirect {
            let best = crate::sampling::argmax(&logits, |_| true);
            if let Some(best) = best.filter(|&b| {
                r.from.contains(b) && !matcher.is_allowed(b) && matcher.is_allowed(r.to)
            }) {
                let call = if r.fence.contains(best) {
                    // Ask the model what follows its fence, on a snapshot.
                    let mut peek = model.snapshot();
                    let next_logits = peek.forward(&[best], pos)?;
                    out.stats.forward_passes += 1;
                    crate::sampling::argmax(&next_logits, |_| true).is_some_and(|n| {
                        Redirect::fence_opens_call(&codec.token_bytes()[n as usize])
                    })
                } else {
                    true
                };
                redirected = call.then_some(r.to);
            }
        }
        let picked = if let Some(to) = redirected {
            let p = if opts.confidence {
                full_mask(matcher, &mut mask, &mut out.stats);
                masked_p(&logits, &mask, to, temperature(sampler))
            } else {
                f64::NAN
            };
            Some((to, p))
        } else if matcher.null_competes() {
            let bias = if refuse_null {
                f32::NEG_INFINITY
            } else {
                opts.null_bias
            };
            pick_null_or_value(
                matcher, codec, sampler, &logits, &mut mask, bias, opts, &mut out,
            )
        } else if opts.null_bias != 0.0 {
            let c = crossers.get_or_insert_with(|| crossing_candidates(codec));
            pick_across_null(
                model.as_ref(),
                codec,
                matcher,
                sampler,
                &logits,
                pos,
                &mut mask,
                opts,
                &mut out,
                c,
            )?
        } else {
            pick(
                matcher,
                sampler,
                &logits,
                &mut mask,
                &mut out.stats,
                opts.confidence,
            )
        };
        let Some((tok, p)) = picked else {
            // No token allowed: the matcher is accepting with nothing allowed
            // after it, or the vocabulary cannot spell what the schema needs.
            out.stop = if matcher.is_accepting() {
                Stop::Finished
            } else {
                Stop::Budget
            };
            break;
        };
        if eos.contains(&tok) {
            debug_assert!(matcher.is_accepting());
            out.stop = Stop::Eos;
            break;
        }
        out.chose(codec, opts, tok, p);
        commit_sampled(matcher, tok)?;
        if matcher.is_finished() {
            out.push(codec, &[tok], true, false);
            if let Some(l) = grounder.back(model, codec, matcher, &mut pos, &mut out)? {
                logits = l;
                continue;
            }
            out.stop = Stop::Finished;
            break;
        }
        // Fed at the top of the loop, together with any forced bytes after it.
        pending = Some(tok);
    }
    out.stats.decode_time = started.elapsed();
    let (noncanonical, bad) = canonical_spans(codec, &out.tokens, &out.bytes, &out.forced_ranges);
    out.stats.noncanonical = noncanonical;
    out.stats.forced_spans_noncanonical = bad;
    Ok(out)
}

fn commit_sampled(matcher: &mut Matcher, tok: u32) -> formwork_models::Result<()> {
    matcher.commit(tok).map_err(|_| {
        // The mask and the commit disagree: a bug, reported as such.
        formwork_models::ModelError::Tokenizer(format!(
            "matcher refused token {tok} that its own mask allowed"
        ))
    })
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

/// The end of a lookahead branch: its text, tokens and state.
struct Branch {
    model: Box<dyn LanguageModel>,
    matcher: Matcher,
    logits: Vec<f32>,
    pos: usize,
    out: DecodeOutput,
    finished: bool,
    logprob: f64,
    scored: usize,
    passes: usize,
}

impl Branch {
    fn mean(&self) -> f64 {
        self.logprob / self.scored.max(1) as f64
    }
}

/// The most tokens a lookahead branch decodes.
const LOOKAHEAD_MAX_TOKENS: usize = 64;

fn log_softmax_at(logits: &[f32], t: u32) -> f64 {
    let mx = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&x| (x as f64 - mx).exp()).sum();
    logits
        .get(t as usize)
        .map_or(f64::NEG_INFINITY, |&x| x as f64 - mx - sum.ln())
}

/// Scores the `null` branch against the best value branch (see [`decode_masked`]);
/// `None` when one of them has no allowed first token.
#[allow(clippy::too_many_arguments)]
fn null_lookahead(
    model: &dyn LanguageModel,
    codec: &dyn Codec,
    matcher: &mut Matcher,
    mask: &mut TokenSet,
    logits: &[f32],
    pos: usize,
    opts: &DecodeOptions,
    used: usize,
    stats: &mut DecodeStats,
) -> formwork_models::Result<Option<Branch>> {
    full_mask(matcher, mask, stats);
    let vocab = codec.token_bytes();
    let eos = codec.eos_ids();
    let starts_n = |t: u32| starts_null(vocab, t);
    let allowed = |t: u32| mask.contains(t) && !eos.contains(&t);
    let null_first = crate::sampling::argmax(logits, |t| allowed(t) && starts_n(t));
    let value_first = crate::sampling::argmax(logits, |t| allowed(t) && !starts_n(t));
    let (Some(nf), Some(vf)) = (null_first, value_first) else {
        return Ok(None);
    };
    // The states where the value is complete: after `null`, or after it and a separator.
    let mut after_null = matcher.clone();
    if after_null.commit_bytes(b"null").is_err() {
        return Ok(None);
    }
    let mut ends = vec![after_null.state_id()];
    for c in [b',', b'}', b']'] {
        let mut m = after_null.clone();
        if m.commit_bytes(&[c]).is_ok() {
            ends.push(m.state_id());
        }
    }
    let greedy_null = crate::sampling::argmax(logits, allowed) == Some(nf);
    let mut branches = Vec::with_capacity(2);
    for first in [nf, vf] {
        let mut b = run_branch(
            model.snapshot(),
            matcher.clone(),
            codec,
            logits.to_vec(),
            pos,
            first,
            opts,
            used,
            &ends,
            masked_p(logits, mask, first, 1.0),
        )?;
        if opts.confidence {
            let (null, value) = null_odds(logits, mask, codec, 1.0);
            b.out.probs.odds.insert(0, NullOdds { at: 0, null, value });
        }
        stats.forward_passes += b.passes;
        stats.lookahead_forward_passes += b.passes;
        stats.mask_ns.extend_from_slice(&b.out.stats.mask_ns);
        branches.push(b);
    }
    stats.lookaheads += 1;
    let value = branches.pop().expect("two branches");
    let null = branches.pop().expect("two branches");
    let (a, b) = (null.mean(), value.mean());
    let null_wins = a > b || (a == b && greedy_null);
    let mut w = if null_wins {
        stats.lookahead_null_wins += 1;
        null
    } else {
        value
    };
    // The branch's masks are counted once, above.
    w.out.stats.mask_ns.clear();
    Ok(Some(w))
}

/// Decodes one branch from `first` (see [`decode_masked`]), feeding one token a
/// pass and adding up each token's log-probability.
#[allow(clippy::too_many_arguments)]
fn run_branch(
    mut model: Box<dyn LanguageModel>,
    mut matcher: Matcher,
    codec: &dyn Codec,
    mut logits: Vec<f32>,
    mut pos: usize,
    first: u32,
    opts: &DecodeOptions,
    used: usize,
    ends: &[u32],
    first_p: f64,
) -> formwork_models::Result<Branch> {
    let mut walker = matcher.clone();
    let mut walked = 0;
    let mut ended = false;
    commit_sampled(&mut matcher, first)?;
    let mut pending = Some(first);
    let mut out = DecodeOutput::empty();
    out.chose(codec, opts, first, first_p);
    let mut mask = TokenSet::new(codec.token_bytes().len().max(logits.len()));
    let mut greedy = Sampler::new(crate::sampling::Sampling::Greedy, 0);
    let (mut logprob, mut scored, mut passes) = (0.0, 0, 0);
    let mut finished = false;
    loop {
        let cap = opts.max_tokens.saturating_sub(used + out.tokens.len());
        if pending.is_none() {
            matcher.set_budget(cap);
        }
        let sampled = pending.is_some();
        let (toks, forced) = plan_feed(&mut matcher, codec, pending.take(), opts, cap);
        if !toks.is_empty() {
            out.push(codec, &toks, sampled, forced);
            finished = matcher.is_finished();
            for (i, &t) in toks.iter().enumerate() {
                logprob += log_softmax_at(&logits, t);
                scored += 1;
                if finished && i + 1 == toks.len() {
                    break;
                }
                logits = model.forward(&[t], pos)?;
                passes += 1;
                pos += 1;
            }
            if finished {
                break;
            }
            continue;
        }
        // A decision point: has the text passed the end of the value?
        while !ended && walked < out.bytes.len() {
            ended = walker.commit_bytes(&out.bytes[walked..walked + 1]).is_err()
                || ends.contains(&walker.state_id());
            walked += 1;
        }
        if ended
            || out.tokens.len() >= LOOKAHEAD_MAX_TOKENS
            || cap == 0
            || opts.deadline.is_some_and(|d| Instant::now() >= d)
        {
            break;
        }
        matcher.set_budget(cap);
        out.steered |= matcher.is_steering();
        let Some((tok, p)) = pick(
            &mut matcher,
            &mut greedy,
            &logits,
            &mut mask,
            &mut out.stats,
            opts.confidence,
        ) else {
            break;
        };
        if codec.eos_ids().contains(&tok) {
            break;
        }
        out.chose(codec, opts, tok, p);
        commit_sampled(&mut matcher, tok)?;
        pending = Some(tok);
    }
    Ok(Branch {
        model,
        matcher,
        logits,
        pos,
        out,
        finished,
        logprob,
        scored,
        passes,
    })
}

fn full_mask(matcher: &mut Matcher, mask: &mut TokenSet, stats: &mut DecodeStats) {
    let t = Instant::now();
    matcher.compute_mask(mask);
    stats.mask_ns.push(t.elapsed().as_nanos() as u64);
}

/// What ends a free run besides EOS, the budget, the deadline and the watch.
#[derive(Clone, Copy)]
pub enum Until<'a> {
    /// The end of the first complete JSON object or array. Free decoding's answer is
    /// what the tolerant extractor takes, so whatever the model would write after it
    /// is never read.
    FirstValue,
    /// Nothing else: prose, such as a chat answer. Tokens that `is_special` names
    /// (control tokens other than EOS) add no bytes.
    End { is_special: &'a dyn Fn(u32) -> bool },
}

/// Free decoding: sample without a mask, one token a pass, until EOS, the budget,
/// the deadline, the watch or what `until` names. A step where no token can be
/// sampled (every logit NaN) ends the run as EOS does.
pub fn decode_free(
    model: &mut dyn LanguageModel,
    codec: &dyn Codec,
    sampler: &mut Sampler,
    mut logits: Vec<f32>,
    mut pos: usize,
    opts: &DecodeOptions,
    until: Until<'_>,
) -> formwork_models::Result<DecodeOutput> {
    let started = Instant::now();
    let mut out = DecodeOutput::empty();
    let eos = codec.eos_ids();
    let mut first = FirstValue::default();
    loop {
        if out.tokens.len() >= opts.max_tokens {
            out.stop = Stop::Budget;
            break;
        }
        if opts.deadline.is_some_and(|d| Instant::now() >= d) {
            out.stop = Stop::Timeout;
            break;
        }
        if Watch::stops(opts, &out.bytes) {
            out.stop = Stop::Cancelled;
            break;
        }
        let Some(tok) = sampler
            .sample(&logits, |_| true)
            .filter(|t| !eos.contains(t))
        else {
            out.stop = Stop::Eos;
            break;
        };
        match until {
            Until::End { is_special } if is_special(tok) => {
                out.tokens.push(tok);
                out.stats.tokens_generated += 1;
            }
            _ => {
                if opts.confidence {
                    let p = allowed_p(&logits, |_| true, tok, temperature(sampler));
                    out.chose(codec, opts, tok, p);
                }
                out.push(codec, &[tok], true, false)
            }
        }
        if matches!(until, Until::FirstValue) && first.feed(&out.bytes) {
            out.stop = Stop::Finished;
            break;
        }
        if out.tokens.len() >= opts.max_tokens {
            out.stop = Stop::Budget;
            break;
        }
        logits = out.forward(model, &[tok], &mut pos)?;
    }
    out.stats.decode_time = started.elapsed();
    Ok(out)
}

/// Watches a growing text for the end of its first complete JSON object or array.
#[derive(Default, Debug)]
struct FirstValue {
    scanned: usize,
    start: Option<usize>,
    depth: u32,
    in_str: bool,
    esc: bool,
}

impl FirstValue {
    /// Scans the bytes added since the last call; true once an object or array
    /// has closed and its text parses as JSON.
    fn feed(&mut self, text: &[u8]) -> bool {
        while self.scanned < text.len() {
            let i = self.scanned;
            let b = text[i];
            self.scanned += 1;
            let Some(start) = self.start else {
                if b == b'{' || b == b'[' {
                    self.start = Some(i);
                    self.depth = 1;
                }
                continue;
            };
            if self.in_str {
                if self.esc {
                    self.esc = false;
                } else if b == b'\\' {
                    self.esc = true;
                } else if b == b'"' {
                    self.in_str = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_str = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        self.start = None;
                        if serde_json::from_slice::<serde::de::IgnoredAny>(&text[start..=i]).is_ok()
                        {
                            return true;
                        }
                    }
                }
                _ => {}
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::FirstValue;

    fn ends_at(chunks: &[&str]) -> Option<usize> {
        let mut f = FirstValue::default();
        let mut text = Vec::new();
        for (k, c) in chunks.iter().enumerate() {
            text.extend_from_slice(c.as_bytes());
            if f.feed(&text) {
                return Some(k);
            }
        }
        None
    }

    #[test]
    fn stops_after_the_first_complete_value() {
        assert_eq!(
            ends_at(&["Sure: ", "{\"a\":", "[1,2]", "}", " more"]),
            Some(3)
        );
        // Brackets and quotes inside strings do not count.
        assert_eq!(ends_at(&["{\"a\":\"}]\\\"{\"", "}"]), Some(1));
        // A balanced span that is not JSON is skipped; the next value ends it.
        assert_eq!(ends_at(&["{oops}", " [true]"]), Some(1));
        assert_eq!(ends_at(&["{\"a\": 1", ", \"b\": {}"]), None);
        assert_eq!(ends_at(&["no json at all"]), None);
    }
}
