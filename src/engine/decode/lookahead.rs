//! The null lookahead (`DecodeOptions::null_lookahead`, greedy): handed the model,
//! the matcher and the logits at a nullable field, it decodes the `null` branch and
//! the best value branch on snapshots and clones, scores them by mean log-probability
//! per token, and returns the winner's state for the loop to take over.

use std::time::Instant;

use formwork_grammar::matcher::Matcher;
use formwork_grammar::toktrie::TokenSet;
use formwork_models::runtime::LanguageModel;

use crate::sampling::Sampler;

use super::super::confidence::NullOdds;
use super::feed::{commit_sampled, plan_feed};
use super::null::{null_odds, starts_null};
use super::sample::{full_mask, masked_p, pick};
use super::{Codec, DecodeOptions, DecodeOutput, DecodeStats};

/// The end of a lookahead branch: its text, tokens and state.
pub(super) struct Branch {
    pub(super) model: Box<dyn LanguageModel>,
    pub(super) matcher: Matcher,
    pub(super) logits: Vec<f32>,
    pub(super) pos: usize,
    pub(super) out: DecodeOutput,
    pub(super) finished: bool,
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
///
/// [`decode_masked`]: super::decode_masked
#[allow(clippy::too_many_arguments)]
pub(super) fn null_lookahead(
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
            b.out.probs.odds.insert(
                0,
                NullOdds {
                    at: 0,
                    null,
                    value,
                    whole: None,
                },
            );
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
///
/// [`decode_masked`]: super::decode_masked
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
