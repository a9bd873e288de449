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

use crate::engine::{Engine, ExtractOptions, Extraction, Mode, Schema, VerdictKind};

/// A benchmark mode: masked, free, or masked without jump-forward (to measure
/// what jump-forward saves).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchMode {
    Masked,
    Free,
    MaskedNoJf,
}

impl std::str::FromStr for BenchMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "masked" => Ok(BenchMode::Masked),
            "free" => Ok(BenchMode::Free),
            "masked-nojf" | "masked_nojf" => Ok(BenchMode::MaskedNoJf),
            other => Err(format!(
                "unknown mode `{other}`: use masked, free or masked-nojf"
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
                    walk(
                        x,
                        format!("{path}/{}", k.replace('~', "~0").replace('/', "~1")),
                        out,
                    );
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
    pub needs_review: bool,
    pub attempts: usize,
    pub tokens_prompt: usize,
    pub tokens_generated: usize,
    pub tokens_forced: usize,
    pub forward_passes: usize,
    pub ms: u64,
    pub decode_ms: f64,
    #[serde(skip)]
    pub mask_ns: Vec<u64>,
    pub value: Option<Value>,
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
    // A schema-invalid record has no trustworthy value: every field counts as wrong.
    let value = if conforming { ex.value.clone() } else { None };
    for (ptr, gold) in leaf_fields(&case.expected) {
        let hit = value
            .as_ref()
            .and_then(|v| v.pointer(&ptr))
            .is_some_and(|p| field_equal(p, &gold, exact_strings));
        field_hits.insert(ptr, hit);
    }
    let fields_correct = field_hits.values().filter(|h| **h).count();
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
        needs_review: ex.needs_review,
        attempts: ex.attempts,
        tokens_prompt: ex.tokens_prompt,
        tokens_generated: ex.tokens_generated,
        tokens_forced: ex.tokens_forced,
        forward_passes: ex.forward_passes,
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
    pub per_field: BTreeMap<String, f64>,
    pub needs_review_rate: f64,
    pub attempts_mean: f64,
    pub tokens_prompt_total: usize,
    pub tokens_generated_total: usize,
    pub tokens_forced_total: usize,
    pub tokens_per_record: f64,
    pub forced_share: f64,
    pub forward_passes_total: usize,
    pub decode_tokens_per_s: f64,
    pub ms_per_valid_object: Option<f64>,
    pub ms_p50: f64,
    pub mask_us_p50: Option<f64>,
    pub mask_us_p99: Option<f64>,
    pub masks_computed: usize,
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
    pub overall: BTreeMap<String, Summary>,
    pub per_schema: BTreeMap<String, BTreeMap<String, Summary>>,
    pub peak_rss_mb: Option<f64>,
    pub wall_s: f64,
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
    // Group by schema so the shared prompt prefix is reused across records.
    let mut order: Vec<&Case> = cases.iter().collect();
    order.sort_by(|a, b| a.schema_name.cmp(&b.schema_name));
    let mut records = Vec::new();
    for &mode in &cfg.modes {
        let mut opts = cfg.opts.clone();
        opts.mode = if mode == BenchMode::Free {
            Mode::Free
        } else {
            Mode::Masked
        };
        opts.jump_forward = mode != BenchMode::MaskedNoJf && cfg.opts.jump_forward;
        for case in &order {
            let key = serde_json::to_string(&case.schema)?;
            if !schemas.contains_key(&key) {
                let s = Schema::new(case.schema.clone())
                    .with_context(|| format!("case {}: schema", case.id))?;
                schemas.insert(key.clone(), s);
            }
            let schema = schemas.get_mut(&key).expect("inserted above");
            let ex = engine.extract(schema, &case.text, &opts);
            let r = score(case, mode, &ex, cfg.exact_strings);
            progress(&r);
            records.push(r);
        }
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
        overall,
        per_schema,
        peak_rss_mb: peak_rss_mb(),
        wall_s: started.elapsed().as_secs_f64(),
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

/// The markdown table printed on stdout.
pub fn markdown(r: &Report) -> String {
    let mut s = format!(
        "## {} on {} ({} records per mode, {}, seed {})\n\n",
        r.model,
        r.dataset,
        r.overall.values().next().map_or(0, |x| x.records),
        r.sampling,
        r.seed
    );
    s.push_str("| mode | parses | schema-valid | semantic-valid | exact match | field acc. | needs review | attempts | tok/record | forced | fwd passes | decode tok/s | ms/valid obj | mask p50 µs | mask p99 µs |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (mode, x) in &r.overall {
        s.push_str(&format!(
            "| {mode} | {} | {} | {} | {} | {} | {} | {:.2} | {:.1} | {} | {} | {:.1} | {} | {} | {} |\n",
            pct(x.parse_rate),
            pct(x.schema_valid_rate),
            pct(x.semantic_valid_rate),
            pct(x.exact_match),
            pct(x.field_accuracy),
            pct(x.needs_review_rate),
            x.attempts_mean,
            x.tokens_per_record,
            pct(x.forced_share),
            x.forward_passes_total,
            x.decode_tokens_per_s,
            opt(x.ms_per_valid_object, 0),
            opt(x.mask_us_p50, 1),
            opt(x.mask_us_p99, 1),
        ));
    }
    s.push_str("\nPer schema (schema-valid / exact match / field accuracy):\n\n| schema | ");
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
                    " {} / {} / {} |",
                    pct(x.schema_valid_rate),
                    pct(x.exact_match),
                    pct(x.field_accuracy)
                )),
                None => s.push_str(" – |"),
            }
        }
        s.push('\n');
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
    fn strings_fold_case_unless_exact() {
        assert!(field_equal(&json!(" Paris "), &json!("paris"), false));
        assert!(!field_equal(&json!(" Paris "), &json!("paris"), true));
        assert!(field_equal(&json!(6), &json!(6.0), false));
        assert!(!field_equal(&json!(null), &json!("x"), false));
        assert!(!field_equal(&json!(true), &json!("true"), false));
    }

    #[test]
    fn leaves_walk_objects_only() {
        let f = leaf_fields(&json!({"a": 1, "loc": {"city": "X", "state": null}, "l": [1, 2]}));
        let names: Vec<&str> = f.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(names, ["/a", "/loc/city", "/loc/state", "/l"]);
    }
}
