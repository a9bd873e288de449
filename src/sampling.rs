//! Sampling over a logit vector with an optional token mask.
//!
//! The mask is applied *before* the choice for every strategy, greedy included:
//! a disallowed token can never be picked, whatever its logit. (candle's
//! `LogitsProcessor` skips its sampling hook for argmax, which is why formwork
//! samples here instead.)

use rand::distr::Distribution;
use rand::SeedableRng;

/// How to pick the next token.
#[derive(Clone, Debug, PartialEq)]
pub enum Sampling {
    /// The allowed token with the largest logit (ties: lowest id). Reproducible.
    Greedy,
    /// Softmax at `temperature`, optionally restricted to the smallest set of
    /// allowed tokens whose probability reaches `top_p`.
    Temperature {
        temperature: f64,
        top_p: Option<f64>,
    },
}

impl Sampling {
    /// `temperature <= 0` (or absent) means greedy, as in most CLIs.
    pub fn from_args(temperature: Option<f64>, top_p: Option<f64>) -> Self {
        match temperature {
            Some(t) if t > 1e-7 => Sampling::Temperature {
                temperature: t,
                top_p,
            },
            _ => Sampling::Greedy,
        }
    }

    pub fn is_greedy(&self) -> bool {
        matches!(self, Sampling::Greedy)
    }
}

/// A seeded sampler: the same seed, logits and masks give the same tokens.
pub struct Sampler {
    sampling: Sampling,
    rng: rand::rngs::StdRng,
}

impl Sampler {
    pub fn new(sampling: Sampling, seed: u64) -> Self {
        Self {
            sampling,
            rng: rand::rngs::StdRng::seed_from_u64(seed),
        }
    }

    pub fn sampling(&self) -> &Sampling {
        &self.sampling
    }

    /// Pick a token among those for which `allowed(id)` is true. Returns `None`
    /// only when no token is allowed.
    pub fn sample(&mut self, logits: &[f32], allowed: impl Fn(u32) -> bool) -> Option<u32> {
        match self.sampling.clone() {
            Sampling::Greedy => argmax(logits, allowed),
            Sampling::Temperature { temperature, top_p } => {
                let mut cands: Vec<(u32, f64)> = logits
                    .iter()
                    .enumerate()
                    .filter(|(i, l)| allowed(*i as u32) && l.is_finite())
                    .map(|(i, &l)| (i as u32, l as f64 / temperature))
                    .collect();
                if cands.is_empty() {
                    return None;
                }
                let max = cands.iter().map(|c| c.1).fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for c in cands.iter_mut() {
                    c.1 = (c.1 - max).exp();
                    sum += c.1;
                }
                for c in cands.iter_mut() {
                    c.1 /= sum;
                }
                if let Some(p) = top_p.filter(|p| *p > 0.0 && *p < 1.0) {
                    cands.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                    let mut acc = 0.0;
                    let mut keep = 0;
                    for c in &cands {
                        keep += 1;
                        acc += c.1;
                        if acc >= p {
                            break;
                        }
                    }
                    cands.truncate(keep);
                }
                let weights: Vec<f64> = cands.iter().map(|c| c.1).collect();
                let dist = rand::distr::weighted::WeightedIndex::new(&weights).ok()?;
                Some(cands[dist.sample(&mut self.rng)].0)
            }
        }
    }
}

/// The allowed id with the largest finite logit; ties go to the lowest id.
pub fn argmax(logits: &[f32], allowed: impl Fn(u32) -> bool) -> Option<u32> {
    let mut best: Option<(u32, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if !allowed(i as u32) || l.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| l > b) {
            best = Some((i as u32, l));
        }
    }
    best.map(|b| b.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_respects_the_mask() {
        let logits = [5.0, 1.0, 3.0];
        assert_eq!(argmax(&logits, |_| true), Some(0));
        assert_eq!(argmax(&logits, |i| i != 0), Some(2));
        assert_eq!(argmax(&logits, |_| false), None);
    }

    #[test]
    fn temperature_sampling_never_leaves_the_mask_and_is_seeded() {
        let logits = [10.0, 9.0, 0.0, -1.0];
        let mut a = Sampler::new(
            Sampling::Temperature {
                temperature: 2.0,
                top_p: None,
            },
            7,
        );
        let mut b = Sampler::new(
            Sampling::Temperature {
                temperature: 2.0,
                top_p: None,
            },
            7,
        );
        let mut seen = [0usize; 4];
        for _ in 0..500 {
            let x = a.sample(&logits, |i| i >= 2).unwrap();
            assert_eq!(Some(x), b.sample(&logits, |i| i >= 2));
            seen[x as usize] += 1;
        }
        assert_eq!(seen[0] + seen[1], 0);
        assert!(seen[2] > seen[3] && seen[3] > 0, "{seen:?}");
    }

    #[test]
    fn top_p_keeps_the_head() {
        let logits = [10.0, 0.0, 0.0];
        let mut s = Sampler::new(
            Sampling::Temperature {
                temperature: 1.0,
                top_p: Some(0.5),
            },
            1,
        );
        for _ in 0..100 {
            assert_eq!(s.sample(&logits, |_| true), Some(0));
        }
    }
}
