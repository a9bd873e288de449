//! The masked decoding loop, independent of any real model or tokenizer: it runs
//! against `LanguageModel` (a real GGUF model, or a scripted one in tests) and a
//! `Codec` (the GGUF tokenizer, or a byte-level vocabulary in tests).
//!
//! One step:
//! 1. If the schema forces the next bytes (`{"sku":"` at the start), tokenise them,
//!    keep the canonical prefix, commit those tokens without sampling and feed them
//!    to the model in one forward pass (jump-forward).
//! 2. Otherwise tell the matcher how many tokens are left (it steers to the shortest
//!    valid completion when the budget runs low), then sample. Greedy checks the
//!    argmax first and computes the full mask only when the argmax is refused;
//!    temperature sampling always computes the full mask.
//! 3. EOS is allowed only in an accepting state; the loop stops at EOS, or when the
//!    matcher is finished (accepting and nothing can follow).

use std::time::{Duration, Instant};

use formwork_grammar::matcher::Matcher;
use formwork_grammar::toktrie::TokenSet;
use formwork_models::runtime::LanguageModel;

use crate::sampling::Sampler;

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
}

#[derive(Clone, Debug)]
pub struct DecodeOptions {
    pub max_tokens: usize,
    pub jump_forward: bool,
    pub deadline: Option<Instant>,
}

#[derive(Clone, Debug, Default)]
pub struct DecodeStats {
    pub tokens_generated: usize,
    pub tokens_forced: usize,
    pub forward_passes: usize,
    /// Nanoseconds of each full mask computation.
    pub mask_ns: Vec<u64>,
    pub decode_time: Duration,
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
}

impl DecodeOutput {
    fn empty() -> Self {
        DecodeOutput {
            tokens: Vec::new(),
            bytes: Vec::new(),
            stop: Stop::Budget,
            steered: false,
            stats: DecodeStats::default(),
        }
    }
}

/// Run masked decoding from `logits` (the model's output after the prompt, whose
/// length is `pos`).
pub fn decode_masked(
    model: &mut dyn LanguageModel,
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
    loop {
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

        // 1. Jump-forward over forced bytes.
        if opts.jump_forward {
            let forced = matcher.forced_bytes();
            if !forced.is_empty() {
                // Tokenise only whole characters; a split character is sampled.
                let text = match std::str::from_utf8(&forced) {
                    Ok(t) => t,
                    Err(e) => std::str::from_utf8(&forced[..e.valid_up_to()]).unwrap_or(""),
                };
                let mut toks = if text.is_empty() {
                    Vec::new()
                } else {
                    codec.encode(text)
                };
                let keep = matcher.canonical_forced_prefix(&toks).min(left);
                toks.truncate(keep);
                let mut committed = 0;
                for &t in &toks {
                    if !matcher.is_allowed(t) || matcher.commit(t).is_err() {
                        break;
                    }
                    committed += 1;
                }
                toks.truncate(committed);
                if !toks.is_empty() {
                    for &t in &toks {
                        out.bytes
                            .extend_from_slice(&codec.token_bytes()[t as usize]);
                    }
                    out.tokens.extend_from_slice(&toks);
                    out.stats.tokens_forced += toks.len();
                    logits = model.forward(&toks, pos)?;
                    out.stats.forward_passes += 1;
                    pos += toks.len();
                    continue;
                }
            }
        }

        // 2. Sample under the mask (steered when the budget restricts it).
        out.steered |= matcher.is_steering();
        let choice = if sampler.sampling().is_greedy() {
            let top = crate::sampling::argmax(&logits, |_| true);
            match top {
                Some(t) if matcher.is_allowed(t) => Some(t),
                _ => {
                    full_mask(matcher, &mut mask, &mut out.stats);
                    sampler.sample(&logits, |t| mask.contains(t))
                }
            }
        } else {
            full_mask(matcher, &mut mask, &mut out.stats);
            sampler.sample(&logits, |t| mask.contains(t))
        };
        let Some(tok) = choice else {
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
        if matcher.commit(tok).is_err() {
            // The mask and the commit disagree: a bug, reported as such.
            return Err(formwork_models::ModelError::Tokenizer(format!(
                "matcher refused token {tok} that its own mask allowed"
            )));
        }

        out.bytes
            .extend_from_slice(&codec.token_bytes()[tok as usize]);
        out.tokens.push(tok);
        out.stats.tokens_generated += 1;
        if matcher.is_finished() {
            out.stop = Stop::Finished;
            break;
        }
        logits = model.forward(&[tok], pos)?;
        out.stats.forward_passes += 1;
        pos += 1;
    }
    out.stats.decode_time = started.elapsed();
    Ok(out)
}

fn full_mask(matcher: &mut Matcher, mask: &mut TokenSet, stats: &mut DecodeStats) {
    let t = Instant::now();
    matcher.compute_mask(mask);
    stats.mask_ns.push(t.elapsed().as_nanos() as u64);
}

/// Free decoding: sample without a mask until EOS or the budget.
pub fn decode_free(
    model: &mut dyn LanguageModel,
    codec: &dyn Codec,
    sampler: &mut Sampler,
    mut logits: Vec<f32>,
    mut pos: usize,
    opts: &DecodeOptions,
) -> formwork_models::Result<DecodeOutput> {
    let started = Instant::now();
    let mut out = DecodeOutput::empty();
    let eos = codec.eos_ids();
    let mut first = FirstValue::default();
    while out.tokens.len() < opts.max_tokens {
        if opts.deadline.is_some_and(|d| Instant::now() >= d) {
            out.stop = Stop::Timeout;
            break;
        }
        let Some(tok) = sampler.sample(&logits, |_| true) else {
            break;
        };
        if eos.contains(&tok) {
            out.stop = Stop::Eos;
            break;
        }
        out.bytes
            .extend_from_slice(&codec.token_bytes()[tok as usize]);
        out.tokens.push(tok);
        out.stats.tokens_generated += 1;
        // The answer is the first complete JSON value (what the tolerant extractor
        // takes); whatever the model would write after it is never read.
        if first.feed(&out.bytes) {
            out.stop = Stop::Finished;
            break;
        }
        if out.tokens.len() >= opts.max_tokens {
            break;
        }
        logits = model.forward(&[tok], pos)?;
        out.stats.forward_passes += 1;
        pos += 1;
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
