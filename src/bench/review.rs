//! Review by confidence: handed a group's records, it ranks every gold leaf by its
//! confidence and tells what share of the wrong values a reviewer catches in the least
//! confident 5/10/20%, below each threshold, per confidence rule, and the calibration
//! bins.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::engine::confidence::Rule;

use super::stats::ratio;
use super::RecordResult;

/// Review by confidence, over every gold leaf of the group's records: a value is
/// wrong when it is not equal to the gold (a wrong value, a false fill or a miss).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Review {
    pub values: usize,
    pub wrong: usize,
    /// The shares of the wrong values among the least confident 5%, 10% and 20% of the
    /// values (ties at the cut taken in proportion: what a random order among them
    /// gives on average).
    pub caught_5: f64,
    pub caught_10: f64,
    pub caught_20: f64,
    /// Values below each threshold: their share of all values, and of the wrong ones.
    pub below: Vec<Below>,
    /// Ten confidence bins, [0, 0.1) to [0.9, 1].
    pub calibration: Vec<Bin>,
    /// `caught_5`, `caught_10`, `caught_20` under each confidence rule, by name
    /// ([`Rule::name`]; the report's figures are `product+odds`).
    pub rules: BTreeMap<String, [f64; 3]>,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Below {
    pub threshold: f64,
    pub share_of_values: f64,
    pub share_of_wrong: f64,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Bin {
    pub lo: f64,
    pub hi: f64,
    pub values: usize,
    pub mean_confidence: f64,
    pub accuracy: f64,
}

/// The thresholds [`Review::below`] reports.
pub const REVIEW_THRESHOLDS: [f64; 4] = [0.2, 0.5, 0.8, 0.9];

/// The share of the wrong values among the least confident `frac` of `items`
/// (confidence, right), ties at the cut taken in proportion.
pub fn caught(items: &[(f64, bool)], frac: f64) -> f64 {
    let wrong = items.iter().filter(|x| !x.1).count();
    if wrong == 0 {
        return f64::NAN;
    }
    let mut sorted: Vec<(f64, bool)> = items.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut budget = (frac * items.len() as f64).round();
    let mut got = 0.0;
    let mut i = 0;
    while i < sorted.len() && budget > 0.0 {
        let j = i + sorted[i..]
            .iter()
            .take_while(|x| x.0 == sorted[i].0)
            .count();
        let n = (j - i) as f64;
        let w = sorted[i..j].iter().filter(|x| !x.1).count() as f64;
        let take = budget.min(n);
        got += w * take / n;
        budget -= take;
        i = j;
    }
    got / wrong as f64
}

/// [`Review`] of the records `rs`.
pub fn review(rs: &[&RecordResult]) -> Review {
    let items_of = |k: usize| -> Vec<(f64, bool)> {
        rs.iter()
            .flat_map(|r| {
                let conf = r.rule_confidence.get(k).unwrap_or(&r.confidence);
                r.field_hits
                    .iter()
                    .map(move |(f, &hit)| (conf.get(f).copied().unwrap_or(1.0), hit))
            })
            .collect()
    };
    let items = items_of(0);
    let wrong = items.iter().filter(|x| !x.1).count();
    let below = REVIEW_THRESHOLDS
        .iter()
        .map(|&t| Below {
            threshold: t,
            share_of_values: ratio(items.iter().filter(|x| x.0 < t).count(), items.len()),
            share_of_wrong: ratio(items.iter().filter(|x| x.0 < t && !x.1).count(), wrong),
        })
        .collect();
    let calibration = (0..10)
        .map(|b| {
            let (lo, hi) = (b as f64 / 10.0, (b + 1) as f64 / 10.0);
            let inb: Vec<&(f64, bool)> = (items.iter())
                .filter(|x| x.0 >= lo && (x.0 < hi || b == 9))
                .collect();
            Bin {
                lo,
                hi,
                values: inb.len(),
                mean_confidence: inb.iter().map(|x| x.0).sum::<f64>() / inb.len().max(1) as f64,
                accuracy: ratio(inb.iter().filter(|x| x.1).count(), inb.len()),
            }
        })
        .collect();
    let rules = Rule::all()
        .into_iter()
        .enumerate()
        .map(|(k, rule)| {
            let it = items_of(k);
            (
                rule.name(),
                [caught(&it, 0.05), caught(&it, 0.10), caught(&it, 0.20)],
            )
        })
        .collect();
    Review {
        values: items.len(),
        wrong,
        caught_5: caught(&items, 0.05),
        caught_10: caught(&items, 0.10),
        caught_20: caught(&items, 0.20),
        below,
        calibration,
        rules,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn review_catches_wrong_values_from_the_least_confident_up_ties_in_proportion() {
        let items = [
            (0.1, false),
            (0.5, false),
            (0.5, true),
            (0.9, true),
            (0.9, false),
        ];
        assert_eq!(caught(&items, 0.2), 1.0 / 3.0);
        // One of the two values at 0.5, of which one is wrong: half a wrong value.
        assert_eq!(caught(&items, 0.4), 1.5 / 3.0);
        assert_eq!(caught(&items, 1.0), 1.0);
        assert!(caught(&[(0.3, true)], 0.5).is_nan());
    }
}
