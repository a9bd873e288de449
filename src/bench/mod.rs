//! `formwork bench --dataset`: masked against free decoding on a labelled set.
//!
//! Each dataset line is `{id, text, schema, expected}` (plus an optional
//! `schema_name`). Every record runs in every requested mode with the same model,
//! greedy by default, and the seed is recorded, so a run is reproducible.
//!
//! Measures, per mode, overall and per schema:
//! - conformity: the share that parses, is schema-valid, is semantically valid;
//! - exact match with `expected`, and per-field accuracy. A record that is not
//!   schema-valid counts all of its expected fields as wrong, so the worst cases
//!   stay in the denominator;
//! - `needs_review` rate, attempts per record (free mode);
//! - tokens in the prompt, generated and forced; forward passes; decode tokens/s;
//!   wall time per valid object; mask time per token (p50, p99); peak RSS.
//!
//! Field comparison: exact for enums, numbers, booleans and null; strings are
//! compared after trimming and Unicode case-folding (lowercasing), unless
//! `exact_strings` is set.

pub mod html;
pub mod masks;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use serde_json::Value;

use crate::engine::confidence::{at_pointer, Rule};
use crate::engine::{Engine, ExtractOptions, Extraction, Mode, Schema, VerdictKind};

/// A benchmark mode: masked, free, or masked without jump-forward (to measure
/// what jump-forward saves).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchMode {
    Masked,
    Free,
    MaskedNoJf,
    /// Jump-forward with the forced text tokenised alone, not together with the
    /// sampled token before it (the split without healing), for comparison.
    MaskedUnhealed,
}

impl std::str::FromStr for BenchMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "masked" => Ok(BenchMode::Masked),
            "free" => Ok(BenchMode::Free),
            "masked-nojf" | "masked_nojf" => Ok(BenchMode::MaskedNoJf),
            "masked-unhealed" | "masked_unhealed" => Ok(BenchMode::MaskedUnhealed),
            other => Err(format!(
                "unknown mode `{other}`: use masked, free, masked-nojf or masked-unhealed"
            )),
        }
    }
}

impl BenchMode {
    pub fn name(self) -> &'static str {
        match self {
            BenchMode::Masked => "masked",
            BenchMode::Free => "free",
            BenchMode::MaskedNoJf => "masked-nojf",
            BenchMode::MaskedUnhealed => "masked-unhealed",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Case {
    pub id: String,
    pub schema_name: String,
    pub text: String,
    pub schema: Value,
    pub expected: Value,
}

/// Read a dataset; a malformed line is an error naming its line number.
pub fn read_dataset(path: &Path, limit: Option<usize>) -> anyhow::Result<Vec<Case>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("dataset {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
        let field = |k: &str| {
            v.get(k)
                .cloned()
                .with_context(|| format!("{}:{}: missing field `{k}`", path.display(), i + 1))
        };
        let id = match field("id")? {
            Value::String(s) => s,
            other => other.to_string(),
        };
        let text = field("text")?
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("{}:{}: `text` must be a string", path.display(), i + 1))?;
        let schema = field("schema")?;
        let schema_name = v
            .get("schema_name")
            .and_then(Value::as_str)
            .or_else(|| schema.get("title").and_then(Value::as_str))
            .unwrap_or("schema")
            .to_string();
        out.push(Case {
            id,
            schema_name,
            text,
            schema,
            expected: field("expected")?,
        });
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
    }
    Ok(out)
}

/// `n` items spread evenly over `items` (every k-th, in order), so a sample of a file
/// grouped by schema keeps every schema in proportion. Keeps all when `n` is 0 or
/// not smaller.
pub fn spread<T>(items: Vec<T>, n: usize) -> Vec<T> {
    if n == 0 || n >= items.len() {
        return items;
    }
    let step = items.len() as f64 / n as f64;
    let picks: Vec<usize> = (0..n).map(|i| (i as f64 * step) as usize).collect();
    items
        .into_iter()
        .enumerate()
        .filter(|(i, _)| picks.binary_search(i).is_ok())
        .map(|(_, c)| c)
        .collect()
}

/// Field-level comparison.
pub fn field_equal(pred: &Value, gold: &Value, exact_strings: bool) -> bool {
    match (pred, gold) {
        (Value::String(a), Value::String(b)) if !exact_strings => {
            a.trim().to_lowercase() == b.trim().to_lowercase()
        }
        (Value::Number(a), Value::Number(b)) => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => a.to_string() == b.to_string(),
        },
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(x, y)| field_equal(x, y, exact_strings))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, x)| b.get(k).is_some_and(|y| field_equal(x, y, exact_strings)))
        }
        _ => pred == gold,
    }
}

/// The leaf fields of `expected` as (JSON Pointer, gold value). Objects are
/// walked; arrays and scalars are leaves.
pub fn leaf_fields(expected: &Value) -> Vec<(String, Value)> {
    fn walk(v: &Value, path: String, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, x) in m {
                    walk(x, format!("{path}/{}", crate::pointer::escape(k)), out);
                }
            }
            _ => out.push((path, v.clone())),
        }
    }
    let mut out = Vec::new();
    walk(expected, String::new(), &mut out);
    out
}

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
    /// Grounded strings (`--grounded`) the text does not state, written `null` instead.
    pub grounded_nulls: usize,
    /// The masked modes' choices between `null` and a value, per field, with the
    /// model's margin for null (`scripts/null_bias_sweep.py` reads them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub null_decisions: Vec<FieldDecision>,
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

/// The JSON Pointer of the value that starts at byte `at` of `text`, a prefix of a
/// JSON document (what the decoding loop had written when it chose). `None` when
/// `at` is not inside the text or is not where a value starts.
pub fn pointer_at(text: &str, at: usize) -> Option<String> {
    enum Frame {
        Object(Option<String>),
        Array(usize),
    }
    let bytes = text.as_bytes().get(..at)?;
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    // A string just read, that becomes the current key when a `:` follows.
    let mut last_string: Option<String> = None;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                let raw = std::str::from_utf8(bytes.get(start..i.min(bytes.len()))?).ok()?;
                last_string = Some(
                    serde_json::from_str::<String>(&format!("\"{raw}\"")).unwrap_or(raw.into()),
                );
            }
            b'{' => stack.push(Frame::Object(None)),
            b'[' => stack.push(Frame::Array(0)),
            b'}' | b']' => {
                stack.pop();
            }
            b':' => {
                if let Some(Frame::Object(k)) = stack.last_mut() {
                    *k = last_string.take();
                }
            }
            b',' => {
                if let Some(Frame::Array(n)) = stack.last_mut() {
                    *n += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    let mut ptr = String::new();
    for f in &stack {
        ptr.push('/');
        match f {
            Frame::Object(Some(k)) => ptr.push_str(&crate::pointer::escape(k)),
            Frame::Object(None) => return None,
            Frame::Array(n) => ptr.push_str(&n.to_string()),
        }
    }
    Some(ptr)
}

/// What a model's value for one leaf field is, against the gold. "Empty" is null (or
/// absent), or `false`: a boolean slot is filled when it is true, as in SNIPS, where
/// `use_current_location` is true exactly when the slot is annotated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotOutcome {
    /// Gold filled, prediction equal to it.
    Hit,
    /// Both filled, not equal.
    Wrong,
    /// Gold empty, prediction filled.
    FalseFill,
    /// Gold filled, prediction empty.
    Miss,
    /// Both empty.
    Empty,
}

/// Null, absent, or `false`.
pub fn is_empty_value(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null) | Some(Value::Bool(false)))
}

pub fn slot_outcome(pred: Option<&Value>, gold: &Value, exact_strings: bool) -> SlotOutcome {
    match (is_empty_value(pred), is_empty_value(Some(gold))) {
        (true, true) => SlotOutcome::Empty,
        (false, true) => SlotOutcome::FalseFill,
        (true, false) => SlotOutcome::Miss,
        (false, false) => {
            if field_equal(pred.expect("filled"), gold, exact_strings) {
                SlotOutcome::Hit
            } else {
                SlotOutcome::Wrong
            }
        }
    }
}

/// Texts that are no answer: what a model writes instead of null, and the schema's own
/// words (every property name, spaced and not, every title and description), all
/// trimmed and lowercased.
pub fn placeholder_texts(schema: &Value) -> std::collections::BTreeSet<String> {
    let mut out: std::collections::BTreeSet<String> = [
        "",
        "n/a",
        "na",
        "none",
        "null",
        "unknown",
        "not specified",
        "not mentioned",
        "not stated",
        "not provided",
        "unspecified",
        "-",
        "?",
        "...",
        "string",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    fn walk(v: &Value, out: &mut std::collections::BTreeSet<String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("title" | "description", Value::String(t)) => {
                            out.insert(t.trim().to_lowercase());
                        }
                        ("properties", Value::Object(props)) => {
                            for name in props.keys() {
                                out.insert(name.to_lowercase());
                                out.insert(name.replace('_', " ").to_lowercase());
                            }
                        }
                        _ => {}
                    }
                    walk(x, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(schema, &mut out);
    out
}

/// Pointers of the string values in `value` (all leaves, inside arrays too) that are
/// placeholders.
pub fn find_placeholders(value: &Value, texts: &std::collections::BTreeSet<String>) -> Vec<String> {
    fn walk(
        v: &Value,
        path: String,
        texts: &std::collections::BTreeSet<String>,
        out: &mut Vec<String>,
    ) {
        match v {
            Value::String(s) if texts.contains(&s.trim().to_lowercase()) => out.push(path),
            Value::Object(m) => {
                for (k, x) in m {
                    walk(
                        x,
                        format!("{path}/{}", crate::pointer::escape(k)),
                        texts,
                        out,
                    );
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(x, format!("{path}/{i}"), texts, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, String::new(), texts, &mut out);
    out
}

/// The filled nullable free-text strings of `value` (those `--source-strings` marks,
/// [`crate::engine::source::mark_free_text`]), and the pointers of those that are not a
/// substring of `text` (the same span rule as the grammar's, exact bytes). Counted with
/// the validator's own `not_in_source` check: against an empty text every non-empty
/// marked string fails, which counts them.
pub fn spans_not_in_text(schema: &Value, value: &Value, text: &str) -> (usize, Vec<String>) {
    let marked = crate::engine::source::mark_free_text(
        schema,
        formwork_grammar::source::SourceMode::Substring,
    );
    let failures = |doc: &str| -> Vec<String> {
        let Ok(v) = crate::validate::Validator::with_source(&marked, doc) else {
            return Vec::new();
        };
        match v.check_value(value) {
            crate::validate::Verdict::SemanticInvalid(errs) => errs
                .into_iter()
                .filter(|e| e.r#type == "not_in_source")
                .map(|e| crate::validate::errors::pointer_from_loc(&e.loc))
                .collect(),
            _ => Vec::new(),
        }
    };
    (failures("").len(), failures(text))
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
        forward_passes: ex.forward_passes,
        forced_spans: ex.forced_spans,
        forced_spans_noncanonical: ex.forced_spans_noncanonical,
        noncanonical: ex.noncanonical,
        lookaheads: ex.lookaheads,
        lookahead_null_wins: ex.lookahead_null_wins,
        lookahead_forward_passes: ex.lookahead_forward_passes,
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
        confidence: rule_confidence[0].clone(),
        rule_confidence,
        ms: ex.ms,
        decode_ms: ex.decode_ms,
        mask_ns: ex.mask_ns.clone(),
        value: ex.value.clone(),
    }
}

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

fn ratio(a: usize, b: usize) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 / b as f64
    }
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
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

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub dataset: String,
    pub model: String,
    pub seed: u64,
    pub sampling: String,
    pub exact_strings: bool,
    pub max_tokens: usize,
    pub retries: usize,
    pub modes: Vec<BenchMode>,
    pub prompt: crate::engine::prompt::PromptStyle,
    pub examples: Option<String>,
    pub shots: usize,
    pub pick: crate::examples::Pick,
    /// `--null-bias` and `--grounded`, as run.
    pub null_bias: f32,
    pub grounded: Option<crate::engine::ground::GroundMode>,
    /// `--kv-cache`: `f32` or `f16`.
    pub kv_cache: &'static str,
    pub overall: BTreeMap<String, Summary>,
    pub per_schema: BTreeMap<String, BTreeMap<String, Summary>>,
    pub peak_rss_mb: Option<f64>,
    pub wall_s: f64,
    /// `--parallel`: records decoded together; with more than 1, how many batched
    /// forward passes ran and how many sequences each held on average.
    pub parallel: usize,
    pub batched_passes: Option<u64>,
    pub mean_batch: Option<f64>,
    pub records: Vec<RecordResult>,
}

/// Peak resident set size of this process (Linux: VmHWM), in MiB.
pub fn peak_rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

pub struct BenchConfig {
    pub modes: Vec<BenchMode>,
    pub opts: ExtractOptions,
    pub exact_strings: bool,
    pub dataset_name: String,
    /// Worked examples (`--examples`): a JSONL file, read per schema.
    pub examples: Option<std::path::PathBuf>,
    /// How many examples each record gets (`--shots`).
    pub shots: usize,
    pub pick: crate::examples::Pick,
    /// Records decoded together (`--parallel`).
    pub parallel: usize,
}

/// Run every case in every mode. `progress` is called after each record.
pub fn run(
    engine: &mut Engine,
    cases: &[Case],
    cfg: &BenchConfig,
    mut progress: impl FnMut(&RecordResult),
) -> anyhow::Result<Report> {
    let started = Instant::now();
    let mut schemas: BTreeMap<String, Schema> = BTreeMap::new();
    let mut pools: BTreeMap<String, Vec<crate::examples::Loaded>> = BTreeMap::new();
    // Group by schema so the shared prompt prefix is reused across records.
    let mut order: Vec<&Case> = cases.iter().collect();
    order.sort_by(|a, b| a.schema_name.cmp(&b.schema_name));
    // Every (mode, case) with its options, in the order a serial run takes them.
    let mut jobs: Vec<(BenchMode, &Case, String, ExtractOptions)> = Vec::new();
    for &mode in &cfg.modes {
        let mut opts = cfg.opts.clone();
        opts.mode = if mode == BenchMode::Free {
            Mode::Free
        } else {
            Mode::Masked
        };
        opts.jump_forward = mode != BenchMode::MaskedNoJf && cfg.opts.jump_forward;
        opts.heal_forced = mode != BenchMode::MaskedUnhealed && cfg.opts.heal_forced;
        for case in &order {
            let key = serde_json::to_string(&case.schema)?;
            if !schemas.contains_key(&key) {
                let s = Schema::new(case.schema.clone())
                    .with_context(|| format!("case {}: schema", case.id))?;
                schemas.insert(key.clone(), s);
            }
            let schema = schemas.get_mut(&key).expect("inserted above");
            if let Some(path) = &cfg.examples {
                if !pools.contains_key(&key) {
                    let pool = crate::examples::load(path, &schema.value, &schema.validator)?;
                    anyhow::ensure!(
                        pool.len() >= cfg.shots,
                        "examples {}: {} example(s) for schema `{}`, fewer than --shots {}",
                        path.display(),
                        pool.len(),
                        case.schema_name,
                        cfg.shots
                    );
                    pools.insert(key.clone(), pool);
                }
                opts.examples = crate::examples::pick(
                    &pools[&key],
                    &case.text,
                    Some(&case.id),
                    cfg.shots,
                    cfg.pick,
                );
            }
            jobs.push((mode, case, key, opts.clone()));
        }
    }
    let one = |engine: &mut Engine,
               schemas: &mut BTreeMap<String, Schema>,
               (mode, case, key, opts): &(BenchMode, &Case, String, ExtractOptions)| {
        let schema = schemas
            .get_mut(key)
            .expect("every job's schema is in the map");
        let ex = engine.extract(schema, &case.text, opts);
        let mut r = score(case, *mode, &ex, cfg.exact_strings);
        r.shots = opts.examples.len();
        r
    };
    let mut records = Vec::with_capacity(jobs.len());
    let mut batching = None;
    if cfg.parallel <= 1 {
        for job in &jobs {
            let r = one(engine, &mut schemas, job);
            progress(&r);
            records.push(r);
        }
    } else {
        // Each grammar compiled once, before the workers clone the schemas.
        if cfg.modes.iter().any(|&m| m != BenchMode::Free) {
            for s in schemas.values_mut() {
                let _ = s.grammar();
            }
        }
        let mut indexed = Vec::with_capacity(jobs.len());
        let work = |engine: &mut Engine, schemas: &mut BTreeMap<String, Schema>, job| {
            one(engine, schemas, job)
        };
        let finished = crate::engine::workers::run(
            engine,
            &schemas,
            jobs.iter().collect(),
            cfg.parallel,
            "formwork-bench",
            &|| true,
            &work,
            |idx, r: RecordResult| {
                progress(&r);
                indexed.push((idx, r));
                std::ops::ControlFlow::Continue(())
            },
        )?;
        anyhow::ensure!(
            finished.panicked == 0,
            "{} bench worker(s) panicked; no report written",
            finished.panicked
        );
        // The serial run's order, whatever order the workers finished in.
        indexed.sort_by_key(|(i, _)| *i);
        records.extend(indexed.into_iter().map(|(_, r)| r));
        batching = Some((finished.stats.passes, finished.stats.mean_batch()));
    }
    let mut overall = BTreeMap::new();
    let mut per_schema: BTreeMap<String, BTreeMap<String, Summary>> = BTreeMap::new();
    for &mode in &cfg.modes {
        let rs: Vec<&RecordResult> = records.iter().filter(|r| r.mode == mode).collect();
        overall.insert(mode.name().to_string(), summarize(&rs));
        let mut names: Vec<&str> = rs.iter().map(|r| r.schema_name.as_str()).collect();
        names.sort();
        names.dedup();
        for name in names {
            let sub: Vec<&RecordResult> = rs
                .iter()
                .copied()
                .filter(|r| r.schema_name == name)
                .collect();
            per_schema
                .entry(name.to_string())
                .or_default()
                .insert(mode.name().to_string(), summarize(&sub));
        }
    }
    Ok(Report {
        dataset: cfg.dataset_name.clone(),
        model: engine.model().name.clone(),
        seed: cfg.opts.seed,
        sampling: format!("{:?}", cfg.opts.sampling),
        exact_strings: cfg.exact_strings,
        max_tokens: cfg.opts.max_tokens,
        retries: cfg.opts.retries,
        modes: cfg.modes.clone(),
        prompt: cfg.opts.prompt,
        examples: cfg.examples.as_ref().map(|p| p.display().to_string()),
        shots: if cfg.examples.is_some() { cfg.shots } else { 0 },
        pick: cfg.pick,
        null_bias: cfg.opts.null_bias,
        grounded: cfg.opts.grounded,
        kv_cache: engine.model().kv.name(),
        overall,
        per_schema,
        peak_rss_mb: peak_rss_mb(),
        wall_s: started.elapsed().as_secs_f64(),
        parallel: cfg.parallel.max(1),
        batched_passes: batching.map(|b| b.0),
        mean_batch: batching.map(|b| b.1),
        records,
    })
}

fn pct(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else {
        format!("{:.1}%", x * 100.0)
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or("–".into(), |v| format!("{v:.digits$}"))
}

fn f3(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else {
        format!("{x:.2}")
    }
}

/// The markdown tables printed on stdout: quality first (with the all-null baseline
/// beside every accuracy), then cost, then per schema and per field.
pub fn markdown(r: &Report) -> String {
    let mut s = format!(
        "## {} on {} ({} records per mode, {}, seed {}, prompt {}, {} example{} per record{}{}{}{}{})\n\n",
        r.model,
        r.dataset,
        r.overall.values().next().map_or(0, |x| x.records),
        r.sampling,
        r.seed,
        match r.prompt {
            crate::engine::prompt::PromptStyle::Outline => "outline",
            crate::engine::prompt::PromptStyle::JsonSchema => "json-schema",
        },
        r.shots,
        if r.shots == 1 { "" } else { "s" },
        if r.shots > 0 {
            format!(
                ", picked by {}",
                match r.pick {
                    crate::examples::Pick::Bm25 => "BM25",
                    crate::examples::Pick::First => "file order",
                }
            )
        } else {
            String::new()
        },
        if r.null_bias != 0.0 {
            format!(", null bias {}", r.null_bias)
        } else {
            String::new()
        },
        match r.grounded {
            None => "",
            Some(crate::engine::ground::GroundMode::Stated) => ", grounded",
            Some(crate::engine::ground::GroundMode::Distinct) => ", grounded (distinct)",
        },
        if r.kv_cache == formwork_models::llama::KvType::F32.name() {
            String::new()
        } else {
            format!(", {} KV cache", r.kv_cache)
        },
        match (r.parallel, r.mean_batch) {
            (p, Some(m)) if p > 1 => format!(
                "; --parallel {p}: {:.1} records/minute, {:.2} sequences per forward pass",
                r.records.len() as f64 * 60.0 / r.wall_s.max(1e-9),
                m
            ),
            _ => format!(
                "; {:.1} records/minute",
                r.records.len() as f64 * 60.0 / r.wall_s.max(1e-9)
            ),
        },
    );
    s.push_str("| mode | schema-valid | field acc. | all-null | slot P | slot R | slot F1 | false fills | misses | placeholders | not in text | exact match |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (mode, x) in &r.overall {
        s.push_str(&format!(
            "| {mode} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} of {} | {} |\n",
            pct(x.schema_valid_rate),
            pct(x.field_accuracy),
            pct(x.null_baseline_accuracy),
            f3(x.slot_precision),
            f3(x.slot_recall),
            f3(x.slot_f1),
            pct(x.false_fill_rate),
            pct(x.miss_rate),
            x.placeholders,
            x.not_in_text,
            x.free_text_values,
            pct(x.exact_match),
        ));
    }
    s.push_str("\n| mode | parses | semantic-valid | needs review | attempts | tok/record | forced | fwd passes | decode tok/s | ms/record p50 | ms/valid obj | mask p50 µs | mask p99 µs |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (mode, x) in &r.overall {
        s.push_str(&format!(
            "| {mode} | {} | {} | {} | {:.2} | {:.1} | {} | {} | {:.1} | {:.0} | {} | {} | {} |\n",
            pct(x.parse_rate),
            pct(x.semantic_valid_rate),
            pct(x.needs_review_rate),
            x.attempts_mean,
            x.tokens_per_record,
            pct(x.forced_share),
            x.forward_passes_total,
            x.decode_tokens_per_s,
            x.ms_p50,
            opt(x.ms_per_valid_object, 0),
            opt(x.mask_us_p50, 1),
            opt(x.mask_us_p99, 1),
        ));
    }
    s.push_str("\nReview by confidence: of the wrong values (wrong, false fill or miss), the share among the least confident 5%, 10% and 20% of all values; the values below 0.5 (the default `--review-below`) and the wrong ones among them.\n\n| mode | values | wrong | least 5% | least 10% | least 20% | below 0.5: values / wrong |\n|---|---|---|---|---|---|---|\n");
    for (mode, x) in &r.overall {
        let v = &x.review;
        let half = v.below.iter().find(|b| b.threshold == 0.5);
        s.push_str(&format!(
            "| {mode} | {} | {} | {} | {} | {} | {} / {} |\n",
            v.values,
            v.wrong,
            pct(v.caught_5),
            pct(v.caught_10),
            pct(v.caught_20),
            pct(half.map_or(f64::NAN, |b| b.share_of_values)),
            pct(half.map_or(f64::NAN, |b| b.share_of_wrong)),
        ));
    }
    s.push_str("\nThe same (least 5% / 10% / 20%) under other confidence rules: the product, the minimum or the start's tokens, and `null` against the best value start (odds) or as its own tokens (path).\n\n| mode |");
    let rule_names: Vec<String> = Rule::all().into_iter().map(Rule::name).collect();
    for n in &rule_names {
        s.push_str(&format!(" {n} |"));
    }
    s.push_str("\n|---|");
    s.push_str(&"---|".repeat(rule_names.len()));
    s.push('\n');
    for (mode, x) in &r.overall {
        s.push_str(&format!("| {mode} |"));
        for n in &rule_names {
            match x.review.rules.get(n) {
                Some(c) => s.push_str(&format!(" {} / {} / {} |", pct(c[0]), pct(c[1]), pct(c[2]))),
                None => s.push_str(" – |"),
            }
        }
        s.push('\n');
    }
    s.push_str("\nTokenisation and lookahead: forced spans fed by jump-forward, those not tokenised as the tokenizer encodes the output text, records whose tokens differ from that encoding anywhere; null lookaheads, won by null, their forward passes; grounded strings the text does not state, written null.\n\n| mode | forced spans | non-canonical spans | non-canonical records | lookaheads | null wins | lookahead passes | grounded -> null |\n|---|---|---|---|---|---|---|---|\n");
    for (mode, x) in &r.overall {
        if mode == "free" {
            continue;
        }
        s.push_str(&format!(
            "| {mode} | {} | {} ({}) | {} | {} | {} | {} | {} |\n",
            x.forced_spans_total,
            x.forced_spans_noncanonical_total,
            pct(ratio(
                x.forced_spans_noncanonical_total,
                x.forced_spans_total
            )),
            pct(x.noncanonical_rate),
            x.lookaheads_total,
            x.lookahead_null_wins_total,
            x.lookahead_forward_passes_total,
            x.grounded_nulls_total,
        ));
    }
    s.push_str("\nPer schema (schema-valid / field accuracy (all-null) / slot F1 / false fills):\n\n| schema | ");
    let modes: Vec<&String> = r.overall.keys().collect();
    s.push_str(
        &modes
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(" | "),
    );
    s.push_str(" |\n|---|");
    s.push_str(&"---|".repeat(modes.len()));
    s.push('\n');
    for (name, by_mode) in &r.per_schema {
        s.push_str(&format!("| {name} |"));
        for m in &modes {
            match by_mode.get(*m) {
                Some(x) => s.push_str(&format!(
                    " {} / {} ({}) / {} / {} |",
                    pct(x.schema_valid_rate),
                    pct(x.field_accuracy),
                    pct(x.null_baseline_accuracy),
                    f3(x.slot_f1),
                    pct(x.false_fill_rate),
                )),
                None => s.push_str(" – |"),
            }
        }
        s.push('\n');
    }
    s.push_str("\nWhere the errors are, per schema and field (hits / wrong value / false fills / misses, of gold filled / gold empty):\n\n| schema | field |");
    for m in &modes {
        s.push_str(&format!(" {m} |"));
    }
    s.push_str("\n|---|---|");
    s.push_str(&"---|".repeat(modes.len()));
    s.push('\n');
    for (name, by_mode) in &r.per_schema {
        let fields: Vec<&String> = by_mode
            .values()
            .next()
            .map(|x| x.per_field_slots.keys().collect())
            .unwrap_or_default();
        for f in fields {
            s.push_str(&format!("| {name} | `{f}` |"));
            for m in &modes {
                match by_mode.get(*m).and_then(|x| x.per_field_slots.get(f)) {
                    Some(c) => s.push_str(&format!(
                        " {} / {} / {} / {} of {} / {} |",
                        c.hit,
                        c.wrong,
                        c.false_fill,
                        c.miss,
                        c.gold_filled(),
                        c.gold_empty()
                    )),
                    None => s.push_str(" – |"),
                }
            }
            s.push('\n');
        }
    }
    if let (Some(m), Some(n)) = (r.overall.get("masked"), r.overall.get("masked-nojf")) {
        s.push_str(&format!(
            "\nJump-forward: {} of masked output tokens were forced; forward passes {} with jump-forward vs {} without ({:.1}% fewer); decode time per record {:.0} ms vs {:.0} ms.\n",
            pct(m.forced_share),
            m.forward_passes_total,
            n.forward_passes_total,
            100.0 * (1.0 - m.forward_passes_total as f64 / n.forward_passes_total.max(1) as f64),
            r.records.iter().filter(|x| x.mode == BenchMode::Masked).map(|x| x.decode_ms).sum::<f64>() / m.records.max(1) as f64,
            r.records.iter().filter(|x| x.mode == BenchMode::MaskedNoJf).map(|x| x.decode_ms).sum::<f64>() / n.records.max(1) as f64,
        ));
    }
    if let Some(rss) = r.peak_rss_mb {
        s.push_str(&format!(
            "\nPeak RSS {rss:.0} MiB; wall time {:.1} s.\n",
            r.wall_s
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    #[test]
    fn strings_fold_case_unless_exact() {
        assert!(field_equal(&json!(" Paris "), &json!("paris"), false));
        assert!(!field_equal(&json!(" Paris "), &json!("paris"), true));
        assert!(field_equal(&json!(6), &json!(6.0), false));
        assert!(!field_equal(&json!(null), &json!("x"), false));
        assert!(!field_equal(&json!(true), &json!("true"), false));
    }

    #[test]
    fn pointer_at_names_the_value_being_started() {
        let at = |t: &str| pointer_at(t, t.len());
        assert_eq!(at(r#"{"a":"#).as_deref(), Some("/a"));
        assert_eq!(
            at(r#"{"a":1,"loc":{"x":"},","state":"#).as_deref(),
            Some("/loc/state")
        );
        assert_eq!(at(r#"{"a":{"b":null},"c":"#).as_deref(), Some("/c"));
        assert_eq!(
            at(r#"{"rows":[{"q":1},{"q":"#).as_deref(),
            Some("/rows/1/q")
        );
        assert_eq!(at(r#"{"rows":["#).as_deref(), Some("/rows/0"));
        // Escapes in keys and the pointer's own escapes.
        assert_eq!(at(r#"{"a\"b/c~":"#).as_deref(), Some("/a\"b~1c~0"));
        // Not where a value starts, or past the text.
        assert_eq!(at("{"), None);
        assert_eq!(pointer_at("{}", 9), None);
        assert_eq!(at("").as_deref(), Some(""));
    }

    #[test]
    fn leaves_walk_objects_only() {
        let f = leaf_fields(&json!({"a": 1, "loc": {"city": "X", "state": null}, "l": [1, 2]}));
        let names: Vec<&str> = f.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(names, ["/a", "/loc/city", "/loc/state", "/l"]);
    }

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
            grounded_nulls: 0,
            ms: 0,
            schema_sha256: String::new(),
            model: String::new(),
            mode: Mode::Masked,
            needs_review: false,
            review_reasons: Vec::new(),
            cut_short: false,
            text: String::new(),
            mask_ns: Vec::new(),
            decode_ms: 0.0,
            tokens: Vec::new(),
            forced_ranges: Vec::new(),
            null_decisions: Vec::new(),
            confidence: BTreeMap::new(),
            probs: Default::default(),
            value_at: 0,
        };
        score(&case, BenchMode::Masked, &ex, false)
    }

    #[test]
    fn values_not_in_the_text_are_counted_whatever_the_mode() {
        let schema = json!({"type": "object", "properties": {
            "city": {"type": ["string", "null"]},
            "state": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "kind": {"type": ["string", "null"], "enum": ["a", "b", null]},
            "note": {"type": "string"}
        }});
        let text = "Book a table in Rome, please";
        // city is a span; state is invented; kind (an enum) and note (not nullable) are
        // not free text and are not looked at; null is not a value.
        let v = json!({"city": "Rome", "state": "Lazio", "kind": "a", "note": "xyz"});
        assert_eq!(
            spans_not_in_text(&schema, &v, text),
            (2, vec!["/state".to_string()])
        );
        let v = json!({"city": "rome", "state": null, "kind": null, "note": "x"});
        // Exact bytes, as the grammar's constraint: a case change is not a span.
        assert_eq!(
            spans_not_in_text(&schema, &v, text),
            (1, vec!["/city".to_string()])
        );
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

    #[test]
    fn placeholders_are_no_answers_and_the_schemas_own_words() {
        let t = placeholder_texts(&json!({"properties": {"sku_grezzo": {"title": "Sku Grezzo",
            "description": "Il codice"}}}));
        for p in [
            "",
            "n/a",
            "unknown",
            "sku grezzo",
            "sku_grezzo",
            "il codice",
        ] {
            assert!(t.contains(p), "{p}");
        }
        let found = find_placeholders(
            &json!({"a": " Sku Grezzo ", "b": "SKU 11", "c": ["N/A", "x"], "d": {"e": ""}}),
            &t,
        );
        assert_eq!(found, ["/a", "/c/0", "/d/e"]);
    }
}
