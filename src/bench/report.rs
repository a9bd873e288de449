//! The report: `Report` is what report.json holds (the run's settings, the summaries
//! per mode and schema, every record), and `markdown` renders it as the tables printed
//! on stdout.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::engine::confidence::Rule;

use super::stats::ratio;
use super::{BenchMode, RecordResult, Summary};

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
    /// `--no-weigh-nulls` (false) and `--fill-above`, as run.
    pub weigh_nulls: bool,
    pub fill_above: f64,
    /// `--think` / `--think-budget`: the thought budget (`None`: not asked to think).
    pub think: Option<usize>,
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

/// The header's null bias and weighing, as run.
fn priors(r: &Report) -> String {
    let bias = if r.null_bias != 0.0 {
        format!(", null bias {}", r.null_bias)
    } else {
        String::new()
    };
    let weigh = match (r.weigh_nulls, r.fill_above < 1.0) {
        (false, _) => String::new(),
        (true, false) => ", nulls weighed".to_string(),
        (true, true) => format!(", nulls weighed, filled above {}", r.fill_above),
    };
    let think = match r.think {
        None => String::new(),
        Some(0) => ", thinking off".to_string(),
        Some(n) => format!(", thinking up to {n} tokens"),
    };
    bias + &weigh + &think
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
        priors(r),
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
    if r.think.is_some_and(|n| n > 0) {
        s.push_str("\nThinking: the think blocks' tokens per record (markers included; inside tok/record above), the records whose block the budget closed, and the answers the budget steering shortened (valid, but cut to fit).\n\n| mode | thought tok/record | closed by the budget | answers cut short |\n|---|---|---|---|\n");
        for (mode, x) in &r.overall {
            s.push_str(&format!(
                "| {mode} | {:.1} | {} of {} | {} |\n",
                x.tokens_reasoning_total as f64 / x.records.max(1) as f64,
                x.reasoning_cut,
                x.records,
                x.cut_short,
            ));
        }
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
