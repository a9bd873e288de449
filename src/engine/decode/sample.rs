//! Step 3, picking a token under the mask: handed the matcher, the sampler and the
//! logits, it computes the mask when it must (greedy tries the argmax first), samples,
//! and gives the pick's probability under the mask for confidence.

use std::time::Instant;

use formwork_grammar::matcher::Matcher;
use formwork_grammar::toktrie::TokenSet;

use crate::sampling::Sampler;

use super::DecodeStats;

/// The temperature the sampler divides the logits by (greedy: 1).
pub(super) fn temperature(sampler: &Sampler) -> f64 {
    match sampler.sampling() {
        crate::sampling::Sampling::Temperature { temperature, .. } => *temperature,
        crate::sampling::Sampling::Greedy => 1.0,
    }
}

/// The probability of `tok` under the softmax of `logits / temp` over the tokens
/// `mask` allows (0 when it is not among them).
pub(super) fn masked_p(logits: &[f32], mask: &TokenSet, tok: u32, temp: f64) -> f64 {
    allowed_p(logits, |t| mask.contains(t), tok, temp)
}

/// [`masked_p`] over the tokens `allowed` takes.
pub(super) fn allowed_p(logits: &[f32], allowed: impl Fn(u32) -> bool, tok: u32, temp: f64) -> f64 {
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
pub(super) fn sample_p(
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
pub(super) fn pick(
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

pub(super) fn full_mask(matcher: &mut Matcher, mask: &mut TokenSet, stats: &mut DecodeStats) {
    let t = Instant::now();
    matcher.compute_mask(mask);
    stats.mask_ns.push(t.elapsed().as_nanos() as u64);
}

/// Cap on the tokens [`best_fitting`] tries, best first.
pub(super) const MAX_TRIED: usize = 4096;

/// The best token, by logit, that `mask` allows and `fits` takes (a quotation's next
/// token), among the best [`MAX_TRIED`] allowed ones.
pub(super) fn best_fitting(
    logits: &[f32],
    mask: &TokenSet,
    fits: impl Fn(u32) -> bool,
) -> Option<u32> {
    best_allowed(logits, mask, MAX_TRIED)
        .into_iter()
        .find(|&t| fits(t))
}

/// The tokens `mask` allows (finite logits), best first, at most `k` of them.
fn best_allowed(logits: &[f32], mask: &TokenSet, k: usize) -> Vec<u32> {
    let mut order: Vec<u32> = (0..logits.len() as u32)
        .filter(|&t| mask.contains(t) && logits[t as usize].is_finite())
        .collect();
    let by_logit = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]);
    if order.len() > k && k > 0 {
        order.select_nth_unstable_by(k - 1, by_logit);
        order.truncate(k);
    }
    order.sort_unstable_by(by_logit);
    order
}
