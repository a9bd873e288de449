//! Picks where `null` competes with a value: handed the logits, the mask and the
//! output so far, it adds the null bias (or refuses `null` for grounding) at the
//! choice or across tokens that cross it, and records each `NullDecision` and the
//! odds of `null` for confidence.

use formwork_grammar::matcher::Matcher;
use formwork_grammar::toktrie::TokenSet;
use formwork_models::runtime::LanguageModel;

use crate::sampling::Sampler;

use super::super::confidence::NullOdds;
use super::sample::{full_mask, sample_p, temperature};
use super::{Codec, DecodeOptions, DecodeOutput, NullDecision};

/// Where `null` competes: the probability under the mask (at `temp`) of the tokens
/// that start `null`, and of the best allowed token that does not.
pub(super) fn null_odds(
    logits: &[f32],
    mask: &TokenSet,
    codec: &dyn Codec,
    temp: f64,
) -> (f64, f64) {
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
///
/// [`pick`]: super::sample::pick
pub(super) fn pick_null_or_value(
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
            whole: None,
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
pub(super) fn starts_null(vocab: &[Vec<u8>], t: u32) -> bool {
    vocab.get(t as usize).and_then(|b| b.first()) == Some(&b'n')
}

/// Bytes after which compact JSON may start a value (`"a":`, `[`, `,` in an array).
fn value_may_follow(b: u8) -> bool {
    matches!(b, b':' | b',' | b'[')
}

/// Token ids with a byte after which a value may start: the only ones that can carry a
/// choice between `null` and a value inside them (`":"` starts a string, `":null` is
/// null) or end right before one (`":`).
pub(super) fn crossing_candidates(codec: &dyn Codec) -> Vec<u32> {
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
///
/// [`pick`]: super::sample::pick
#[allow(clippy::too_many_arguments)]
pub(super) fn pick_across_null(
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
