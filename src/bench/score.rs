//! One record in one mode: handed the case, the mode and the engine's `Extraction`,
//! `score` compares every leaf field with the gold, counts slots, placeholders and
//! values not in the text, reads each field's confidence under every rule, and keeps
//! the loop's counters and null decisions in a `RecordResult`.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::engine::confidence::{at_pointer, Rule};
use crate::engine::{Extraction, VerdictKind};

use super::{
    field_equal, find_placeholders, is_empty_value, leaf_fields, placeholder_texts, pointer_at,
    slot_outcome, spans_not_in_text, BenchMode, Case, SlotOutcome,
};

/// One record in one mode.
#[derive(Clone, Debug, Serialize)]
pub struct RecordResult {
    pub id: String,
    pub schema_name: String,
    pub mode: BenchMode,
    pub verdict: VerdictKind,
    pub parsed: bool,
    pub exact_match: bool,
    pub fields_correct: usize,
    pub fields_total: usize,
    pub field_hits: BTreeMap<String, bool>,
    /// Each leaf field's slot outcome (see [`SlotOutcome`]).
    pub slots: BTreeMap<String, SlotOutcome>,
    /// Leaf fields whose gold value is empty (null, or false): what the all-null
    /// answer gets right.
    pub gold_empty: usize,
    /// Pointers of predicted strings that are placeholders: empty, "N/A", "unknown",
    /// or a copy of a field's name, title or description.
    pub placeholders: Vec<String>,
    /// Filled free-text strings (the nullable strings `--source-strings` marks), and
    /// the pointers of those that are not a span of the record's text: invented or
    /// altered values, whatever the mode.
    pub free_text_values: usize,
    pub not_in_text: Vec<String>,
    /// The examples put in the prompt (their count).
    pub shots: usize,
    pub needs_review: bool,
    pub attempts: usize,
    pub tokens_prompt: usize,
    pub tokens_generated: usize,
    pub tokens_forced: usize,
    /// With `--think`: the think block's tokens (markers included, counted in
    /// `tokens_generated`/`tokens_forced` too), whether the budget closed it, and the
    /// thought itself; the value scored is the answer alone.
    pub tokens_reasoning: usize,
    pub reasoning_cut: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The budget steering shortened the answer to end it valid within its tokens.
    pub cut_short: bool,
    pub forward_passes: usize,
    /// Jump-forward spans, and those not tokenised as the tokenizer encodes the
    /// output text; whether the output's tokens differ from that encoding anywhere.
    pub forced_spans: usize,
    pub forced_spans_noncanonical: usize,
    pub noncanonical: bool,
    /// Null lookaheads run, won by `null`, and their forward passes.
    pub lookaheads: usize,
    pub lookahead_null_wins: usize,
    pub lookahead_forward_passes: usize,
    /// `null`s weighed against a quotation, values taken instead, and the passes spent.
    pub nulls_weighed: usize,
    pub weighed_values_taken: usize,
    pub weigh_forward_passes: usize,
    /// Grounded strings (`--grounded`) the text does not state, written `null` instead.
    pub grounded_nulls: usize,
    /// The masked modes' choices between `null` and a value, per field, with the
    /// model's margin for null (`scripts/null_bias_sweep.py` reads them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub null_decisions: Vec<FieldDecision>,
    /// The nulls weighed against the document's best quotation, per field
    /// (`benches/fill_bar.py` reads them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub weighed: Vec<FieldWeighed>,
    /// Each gold leaf's confidence ([`crate::engine::confidence`]; a container's is its
    /// least confident leaf). A record that is not schema-valid has 0 everywhere: it
    /// is reviewed whatever its values.
    pub confidence: BTreeMap<String, f64>,
    /// The same under each rule of [`Rule::all`] (the first is `confidence`).
    #[serde(skip)]
    pub rule_confidence: Vec<BTreeMap<String, f64>>,
    pub ms: u64,
    pub decode_ms: f64,
    #[serde(skip)]
    pub mask_ns: Vec<u64>,
    pub value: Option<Value>,
}

/// A `null` weighed against the document's best quotation, at its field.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FieldWeighed {
    /// The field's JSON Pointer.
    pub field: String,
    /// The quotation, its probability given that a value is written, and whether it
    /// was written instead of the `null`.
    pub quotation: String,
    pub p: f64,
    pub taken: bool,
}

/// One choice between `null` and a value, at the field it was made for.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FieldDecision {
    /// The field's JSON Pointer (`/location/state`).
    pub field: String,
    /// The best `null` token's logit minus the best other allowed token's (nats).
    pub gap: f32,
    /// Whether the model wrote `null` there.
    pub null: bool,
}

pub fn score(case: &Case, mode: BenchMode, ex: &Extraction, exact_strings: bool) -> RecordResult {
    let conforming = matches!(
        ex.verdict,
        VerdictKind::Valid | VerdictKind::SemanticInvalid
    );
    let parsed = !matches!(
        ex.verdict,
        VerdictKind::NotJson | VerdictKind::Incomplete | VerdictKind::Error
    );
    let mut field_hits = BTreeMap::new();
    let mut slots = BTreeMap::new();
    let mut gold_empty = 0;
    // A schema-invalid record has no trustworthy value: every field counts as wrong
    // (and, as a slot, as not filled).
    let value = if conforming { ex.value.clone() } else { None };
    for (ptr, gold) in leaf_fields(&case.expected) {
        let pred = value.as_ref().and_then(|v| v.pointer(&ptr));
        let hit = pred.is_some_and(|p| field_equal(p, &gold, exact_strings));
        if is_empty_value(Some(&gold)) {
            gold_empty += 1;
        }
        slots.insert(ptr.clone(), slot_outcome(pred, &gold, exact_strings));
        field_hits.insert(ptr, hit);
    }
    let placeholders = value
        .as_ref()
        .map(|v| find_placeholders(v, &placeholder_texts(&case.schema)))
        .unwrap_or_default();
    let (free_text_values, not_in_text) = value
        .as_ref()
        .map(|v| spans_not_in_text(&case.schema, v, &case.text))
        .unwrap_or_default();
    let fields_correct = field_hits.values().filter(|h| **h).count();
    let rule_confidence: Vec<BTreeMap<String, f64>> = Rule::all()
        .into_iter()
        .map(|rule| {
            let map = if rule == Rule::DEFAULT {
                Some(ex.confidence.clone())
            } else {
                ex.text
                    .as_bytes()
                    .get(ex.value_at..)
                    .and_then(|t| crate::engine::confidence::confidence(t, &ex.probs, rule))
            };
            field_hits
                .keys()
                .map(|ptr| {
                    let c = match (&value, &map) {
                        (None, _) => 0.0,
                        (Some(_), Some(m)) => at_pointer(m, ptr).unwrap_or(1.0),
                        (Some(_), None) => 1.0,
                    };
                    (ptr.clone(), c)
                })
                .collect()
        })
        .collect();
    RecordResult {
        id: case.id.clone(),
        schema_name: case.schema_name.clone(),
        mode,
        verdict: ex.verdict,
        parsed,
        exact_match: value
            .as_ref()
            .is_some_and(|v| field_equal(v, &case.expected, exact_strings)),
        fields_total: field_hits.len(),
        fields_correct,
        field_hits,
        slots,
        gold_empty,
        placeholders,
        free_text_values,
        not_in_text,
        shots: 0,
        needs_review: ex.needs_review,
        attempts: ex.attempts,
        tokens_prompt: ex.tokens_prompt,
        tokens_generated: ex.tokens_generated,
        tokens_forced: ex.tokens_forced,
        tokens_reasoning: ex.tokens_reasoning,
        reasoning_cut: ex.reasoning_cut,
        reasoning: ex.reasoning.clone(),
        cut_short: ex.cut_short,
        forward_passes: ex.forward_passes,
        forced_spans: ex.forced_spans,
        forced_spans_noncanonical: ex.forced_spans_noncanonical,
        noncanonical: ex.noncanonical,
        lookaheads: ex.lookaheads,
        lookahead_null_wins: ex.lookahead_null_wins,
        lookahead_forward_passes: ex.lookahead_forward_passes,
        nulls_weighed: ex.nulls_weighed,
        weighed_values_taken: ex.weighed_values_taken,
        weigh_forward_passes: ex.weigh_forward_passes,
        grounded_nulls: ex.grounded_nulls,
        null_decisions: ex
            .null_decisions
            .iter()
            .filter_map(|d| {
                Some(FieldDecision {
                    field: pointer_at(&ex.text, d.at)?,
                    gap: d.gap,
                    null: d.null,
                })
            })
            .collect(),
        weighed: ex
            .weighed
            .iter()
            .filter_map(|w| {
                Some(FieldWeighed {
                    field: pointer_at(&ex.text, w.at)?,
                    quotation: w.quotation.clone(),
                    p: w.p,
                    taken: w.taken,
                })
            })
            .collect(),
        confidence: rule_confidence[0].clone(),
        rule_confidence,
        ms: ex.ms,
        decode_ms: ex.decode_ms,
        mask_ns: ex.mask_ns.clone(),
        value: ex.value.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::summarize;
    use crate::engine::Mode;
    use serde_json::json;

    fn record(expected: Value, value: Option<Value>, verdict: VerdictKind) -> RecordResult {
        let case = Case {
            id: "r".into(),
            schema_name: "S".into(),
            text: "t".into(),
            schema: json!({"type": "object", "properties": {
                "city": {"type": ["string", "null"], "title": "City", "description": "The city."},
                "here": {"type": "boolean"},
                "n": {"type": ["integer", "null"]},
                "loc": {"type": "object", "properties": {"state": {"type": ["string", "null"]}}}
            }}),
            expected,
        };
        let ex = Extraction {
            value,
            verdict,
            errors: Vec::new(),
            message: None,
            attempts: 1,
            tokens_prompt: 0,
            tokens_generated: 0,
            tokens_forced: 0,
            forward_passes: 0,
            forced_spans: 0,
            forced_spans_noncanonical: 0,
            noncanonical: false,
            lookaheads: 0,
            lookahead_null_wins: 0,
            lookahead_forward_passes: 0,
            nulls_weighed: 0,
            weighed_values_taken: 0,
            weigh_forward_passes: 0,
            grounded_nulls: 0,
            rows_dropped: 0,
            items_cut: 0,
            ms: 0,
            schema_sha256: String::new(),
            model: String::new(),
            mode: Mode::Masked,
            needs_review: false,
            review_reasons: Vec::new(),
            cut_short: false,
            reasoning: None,
            tokens_reasoning: 0,
            reasoning_cut: false,
            text: String::new(),
            mask_ns: Vec::new(),
            decode_ms: 0.0,
            tokens: Vec::new(),
            forced_ranges: Vec::new(),
            null_decisions: Vec::new(),
            weighed: Vec::new(),
            confidence: BTreeMap::new(),
            probs: Default::default(),
            value_at: 0,
        };
        score(&case, BenchMode::Masked, &ex, false)
    }

    #[test]
    fn slot_measures_separate_false_fills_misses_and_placeholders() {
        let gold = json!({"city": "Rome", "here": false, "n": null, "loc": {"state": "NY"}});
        // city right, here false-filled (true where gold false), n false-filled with a
        // number, state missed.
        let r1 = record(
            gold.clone(),
            Some(json!({"city": "rome", "here": true, "n": 3, "loc": {"state": null}})),
            VerdictKind::Valid,
        );
        assert_eq!(r1.gold_empty, 2);
        assert_eq!(r1.slots["/city"], SlotOutcome::Hit);
        assert_eq!(r1.slots["/here"], SlotOutcome::FalseFill);
        assert_eq!(r1.slots["/n"], SlotOutcome::FalseFill);
        assert_eq!(r1.slots["/loc/state"], SlotOutcome::Miss);
        // The all-null answer: every empty gold field right, nothing filled.
        let r2 = record(
            gold.clone(),
            Some(json!({"city": null, "here": false, "n": null, "loc": {"state": null}})),
            VerdictKind::Valid,
        );
        // A placeholder (the field's title) and a wrong value.
        let r3 = record(
            gold.clone(),
            Some(json!({"city": "City", "here": false, "n": null, "loc": {"state": "Ohio"}})),
            VerdictKind::Valid,
        );
        assert_eq!(r3.placeholders, vec!["/city".to_string()]);
        assert_eq!(r3.slots["/city"], SlotOutcome::Wrong);
        // An invalid record fills nothing and is wrong everywhere.
        let r4 = record(
            gold,
            Some(json!({"city": "Rome"})),
            VerdictKind::SchemaInvalid,
        );
        assert_eq!(r4.fields_correct, 0);
        assert_eq!(r4.slots["/city"], SlotOutcome::Miss);

        let s = summarize(&[&r1]);
        assert!((s.field_accuracy - 0.25).abs() < 1e-9);
        assert!((s.null_baseline_accuracy - 0.5).abs() < 1e-9);
        assert!(
            (s.slot_precision - 1.0 / 3.0).abs() < 1e-9,
            "{}",
            s.slot_precision
        );
        assert!((s.slot_recall - 0.5).abs() < 1e-9);
        assert!((s.slot_f1 - 0.4).abs() < 1e-9);
        assert!((s.false_fill_rate - 1.0).abs() < 1e-9);
        assert!((s.miss_rate - 0.5).abs() < 1e-9);
        let s = summarize(&[&r2]);
        assert!((s.field_accuracy - s.null_baseline_accuracy).abs() < 1e-9);
        assert_eq!(s.slot_recall, 0.0);
        assert!(s.slot_precision.is_nan());
        assert_eq!(s.slot_f1, 0.0);
        assert_eq!(s.false_fill_rate, 0.0);
        let s = summarize(&[&r3, &r4]);
        assert_eq!(s.placeholders, 1);
        assert_eq!(s.per_field_slots["/city"].wrong, 1);
        assert_eq!(s.per_field_slots["/city"].miss, 1);
        assert_eq!(s.per_field_slots["/loc/state"].gold_filled(), 2);
    }
}
