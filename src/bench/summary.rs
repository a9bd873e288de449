//! Aggregates of a group of records (one mode, one schema, or all): handed the
//! `RecordResult`s, `summarize` gives the rates, accuracies beside the all-null
//! baseline, slot counts and F1, token and time figures, and the review.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::engine::VerdictKind;

use super::stats::{percentile, ratio};
use super::{review, RecordResult, Review, SlotOutcome};

/// Aggregates of a group of records (one mode, one schema or all).
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub records: usize,
    pub parse_rate: f64,
    pub schema_valid_rate: f64,
    pub semantic_valid_rate: f64,
    pub exact_match: f64,
    pub field_accuracy: f64,
    /// Per-field accuracy of the answer that is empty (null, or false) everywhere,
    /// computed from the gold: the floor a model must beat.
    pub null_baseline_accuracy: f64,
    /// Over the slots: precision = hits / filled predictions, recall = hits / filled
    /// gold values, and their F1.
    pub slot_precision: f64,
    pub slot_recall: f64,
    pub slot_f1: f64,
    /// Filled predictions where the gold is empty, over the empty gold fields.
    pub false_fill_rate: f64,
    /// Empty predictions where the gold is filled, over the filled gold fields.
    pub miss_rate: f64,
    /// Placeholder strings (see [`RecordResult::placeholders`]), and their share of
    /// the filled predictions.
    pub placeholders: usize,
    pub placeholder_rate: f64,
    /// Filled free-text strings, and those not found in their record's text.
    pub free_text_values: usize,
    pub not_in_text: usize,
    pub per_field: BTreeMap<String, f64>,
    /// Per field: how many of each slot outcome.
    pub per_field_slots: BTreeMap<String, SlotCounts>,
    pub needs_review_rate: f64,
    pub attempts_mean: f64,
    pub tokens_prompt_total: usize,
    pub tokens_generated_total: usize,
    pub tokens_forced_total: usize,
    /// With `--think`: the think blocks' tokens (inside the totals above), and the
    /// records whose block the budget closed.
    pub tokens_reasoning_total: usize,
    pub reasoning_cut: usize,
    /// Answers the budget steering shortened to end them valid within their tokens.
    pub cut_short: usize,
    pub tokens_per_record: f64,
    pub forced_share: f64,
    pub forward_passes_total: usize,
    pub forced_spans_total: usize,
    pub forced_spans_noncanonical_total: usize,
    /// Records whose output tokens differ from the tokenizer's encoding of the text.
    pub noncanonical_rate: f64,
    pub lookaheads_total: usize,
    pub lookahead_null_wins_total: usize,
    pub lookahead_forward_passes_total: usize,
    pub grounded_nulls_total: usize,
    pub decode_tokens_per_s: f64,
    pub ms_per_valid_object: Option<f64>,
    pub ms_p50: f64,
    pub mask_us_p50: Option<f64>,
    pub mask_us_p99: Option<f64>,
    pub masks_computed: usize,
    /// What a reviewer catches by checking the least confident values.
    pub review: Review,
}

/// Counts of each [`SlotOutcome`].
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct SlotCounts {
    pub hit: usize,
    pub wrong: usize,
    pub false_fill: usize,
    pub miss: usize,
    pub empty: usize,
}

impl SlotCounts {
    pub fn add(&mut self, o: SlotOutcome) {
        match o {
            SlotOutcome::Hit => self.hit += 1,
            SlotOutcome::Wrong => self.wrong += 1,
            SlotOutcome::FalseFill => self.false_fill += 1,
            SlotOutcome::Miss => self.miss += 1,
            SlotOutcome::Empty => self.empty += 1,
        }
    }
    pub fn predicted(&self) -> usize {
        self.hit + self.wrong + self.false_fill
    }
    pub fn gold_filled(&self) -> usize {
        self.hit + self.wrong + self.miss
    }
    pub fn gold_empty(&self) -> usize {
        self.false_fill + self.empty
    }
    pub fn precision(&self) -> f64 {
        ratio(self.hit, self.predicted())
    }
    pub fn recall(&self) -> f64 {
        ratio(self.hit, self.gold_filled())
    }
    /// F1 of precision and recall; 0 when nothing is right, NaN when there is nothing
    /// to find and nothing was filled.
    pub fn f1(&self) -> f64 {
        let d = self.predicted() + self.gold_filled();
        ratio(2 * self.hit, d)
    }
}

pub fn summarize(rs: &[&RecordResult]) -> Summary {
    let n = rs.len().max(1) as f64;
    let rate = |f: &dyn Fn(&RecordResult) -> bool| rs.iter().filter(|r| f(r)).count() as f64 / n;
    let mut per_field_hits: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for r in rs {
        for (k, h) in &r.field_hits {
            let e = per_field_hits.entry(k.clone()).or_default();
            e.1 += 1;
            if *h {
                e.0 += 1;
            }
        }
    }
    let mut slots = SlotCounts::default();
    let mut per_field_slots: BTreeMap<String, SlotCounts> = BTreeMap::new();
    for r in rs {
        for (k, o) in &r.slots {
            slots.add(*o);
            per_field_slots.entry(k.clone()).or_default().add(*o);
        }
    }
    let placeholders: usize = rs.iter().map(|r| r.placeholders.len()).sum();
    let gold_empty: usize = rs.iter().map(|r| r.gold_empty).sum();
    let fields_total: usize = rs.iter().map(|r| r.fields_total).sum();
    let fields_correct: usize = rs.iter().map(|r| r.fields_correct).sum();
    let generated: usize = rs.iter().map(|r| r.tokens_generated).sum();
    let forced: usize = rs.iter().map(|r| r.tokens_forced).sum();
    let decode_ms: f64 = rs.iter().map(|r| r.decode_ms).sum();
    let total_ms: u64 = rs.iter().map(|r| r.ms).sum();
    let valid = rs
        .iter()
        .filter(|r| r.verdict == VerdictKind::Valid)
        .count();
    let mut masks: Vec<f64> = rs
        .iter()
        .flat_map(|r| r.mask_ns.iter().map(|&n| n as f64 / 1000.0))
        .collect();
    masks.sort_by(f64::total_cmp);
    let mut ms: Vec<f64> = rs.iter().map(|r| r.ms as f64).collect();
    ms.sort_by(f64::total_cmp);
    Summary {
        records: rs.len(),
        parse_rate: rate(&|r| r.parsed),
        schema_valid_rate: rate(&|r| {
            matches!(r.verdict, VerdictKind::Valid | VerdictKind::SemanticInvalid)
        }),
        semantic_valid_rate: rate(&|r| r.verdict == VerdictKind::Valid),
        exact_match: rate(&|r| r.exact_match),
        field_accuracy: if fields_total == 0 {
            f64::NAN
        } else {
            fields_correct as f64 / fields_total as f64
        },
        null_baseline_accuracy: ratio(gold_empty, fields_total),
        slot_precision: slots.precision(),
        slot_recall: slots.recall(),
        slot_f1: slots.f1(),
        false_fill_rate: ratio(slots.false_fill, slots.gold_empty()),
        miss_rate: ratio(slots.miss, slots.gold_filled()),
        placeholders,
        placeholder_rate: ratio(placeholders, slots.predicted()),
        free_text_values: rs.iter().map(|r| r.free_text_values).sum(),
        not_in_text: rs.iter().map(|r| r.not_in_text.len()).sum(),
        per_field_slots,
        per_field: per_field_hits
            .into_iter()
            .map(|(k, (c, t))| (k, c as f64 / t.max(1) as f64))
            .collect(),
        needs_review_rate: rate(&|r| r.needs_review),
        attempts_mean: rs.iter().map(|r| r.attempts as f64).sum::<f64>() / n,
        tokens_prompt_total: rs.iter().map(|r| r.tokens_prompt).sum(),
        tokens_generated_total: generated,
        tokens_forced_total: forced,
        tokens_reasoning_total: rs.iter().map(|r| r.tokens_reasoning).sum(),
        reasoning_cut: rs.iter().filter(|r| r.reasoning_cut).count(),
        cut_short: rs.iter().filter(|r| r.cut_short).count(),
        tokens_per_record: (generated + forced) as f64 / n,
        forced_share: if generated + forced == 0 {
            0.0
        } else {
            forced as f64 / (generated + forced) as f64
        },
        forward_passes_total: rs.iter().map(|r| r.forward_passes).sum(),
        forced_spans_total: rs.iter().map(|r| r.forced_spans).sum(),
        forced_spans_noncanonical_total: rs.iter().map(|r| r.forced_spans_noncanonical).sum(),
        noncanonical_rate: rate(&|r| r.noncanonical),
        lookaheads_total: rs.iter().map(|r| r.lookaheads).sum(),
        lookahead_null_wins_total: rs.iter().map(|r| r.lookahead_null_wins).sum(),
        lookahead_forward_passes_total: rs.iter().map(|r| r.lookahead_forward_passes).sum(),
        grounded_nulls_total: rs.iter().map(|r| r.grounded_nulls).sum(),
        decode_tokens_per_s: if decode_ms > 0.0 {
            (generated + forced) as f64 / (decode_ms / 1000.0)
        } else {
            0.0
        },
        ms_per_valid_object: (valid > 0).then(|| total_ms as f64 / valid as f64),
        ms_p50: percentile(&ms, 0.5),
        mask_us_p50: (!masks.is_empty()).then(|| percentile(&masks, 0.5)),
        mask_us_p99: (!masks.is_empty()).then(|| percentile(&masks, 0.99)),
        masks_computed: masks.len(),
        review: review(rs),
    }
}
