//! Batch extraction over JSONL: one `{id, text}` per input line, one result per
//! output line, appended and flushed as each record finishes.
//!
//! Nothing the user gave is lost:
//! - a rerun reads the ids already in the output and skips them (resume);
//! - a malformed input line (not UTF-8, not JSON, no `id` or `text`) becomes an error
//!   record and the batch goes on;
//! - a second line with an id already seen in the same run becomes an error record
//!   (`duplicate id`): only ids finished in an earlier run are skipped;
//! - each result is written with a single `write` of a whole line; a line cut
//!   short by a kill is detected at the next start (no trailing newline) and
//!   removed, so that record runs again;
//! - Ctrl-C finishes nothing half-way: the record in flight is dropped, the file
//!   stays a sequence of whole lines, and the run can be resumed.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, IsTerminal, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};

use crate::engine::{Engine, ExtractOptions, Extraction, Schema, VerdictKind};

mod lines;

use lines::id_key;
pub use lines::{parse_line, plan, read_lines, Item};

pub struct BatchOptions {
    pub input: PathBuf,
    pub output: PathBuf,
    pub log: Option<PathBuf>,
    pub log_content: bool,
    /// Show a progress bar (a plain line per record when stderr is not a terminal).
    pub progress: bool,
    /// Worked examples, and how many of them each record gets, picked how.
    pub examples: Vec<crate::examples::Loaded>,
    pub shots: usize,
    pub pick: crate::examples::Pick,
}

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct BatchSummary {
    pub total_lines: usize,
    pub skipped_done: usize,
    pub processed: usize,
    pub valid: usize,
    pub invalid: usize,
    pub errors: usize,
    /// Lines whose id an earlier line of the same run already had (also in `errors`).
    pub duplicates: usize,
    pub interrupted: bool,
    /// Wall time of the records processed in this run.
    pub secs: f64,
    /// Prompt tokens whose KV state came from the cached shared prefix.
    pub prefix_tokens_reused: usize,
}

/// The ids already present in `out`, after removing a trailing partial line.
pub fn done_ids(out: &Path) -> anyhow::Result<HashSet<String>> {
    let mut ids = HashSet::new();
    let Ok(mut f) = OpenOptions::new().read(true).write(true).open(out) else {
        return Ok(ids);
    };
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)
        .with_context(|| format!("reading {}", out.display()))?;
    if !buf.is_empty() && *buf.last().unwrap() != b'\n' {
        let keep = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        f.set_len(keep as u64)
            .with_context(|| format!("truncating the partial last line of {}", out.display()))?;
        f.seek(SeekFrom::Start(keep as u64))?;
        buf.truncate(keep);
    }
    for line in buf.split(|&b| b == b'\n') {
        if let Ok(v) = serde_json::from_slice::<Value>(line) {
            if let Some(id) = v.get("id") {
                ids.insert(id_key(id));
            }
        }
    }
    Ok(ids)
}

fn append_line(f: &mut File, v: &Value) -> anyhow::Result<()> {
    let mut line = serde_json::to_vec(v)?;
    line.push(b'\n');
    f.write_all(&line)?;
    f.flush()?;
    Ok(())
}

fn record_json(id: &Value, ex: &Extraction) -> Value {
    let mut v = serde_json::to_value(ex).unwrap_or_else(|_| json!({}));
    if let Value::Object(m) = &mut v {
        let mut out = serde_json::Map::new();
        out.insert("id".into(), id.clone());
        out.extend(std::mem::take(m));
        return Value::Object(out);
    }
    v
}

/// Run a batch. `interrupted` is polled between records (Ctrl-C sets it).
pub fn run(
    engine: &mut Engine,
    schema: &mut Schema,
    opts: &ExtractOptions,
    bopts: &BatchOptions,
    interrupted: Arc<AtomicBool>,
) -> anyhow::Result<BatchSummary> {
    let input = File::open(&bopts.input)
        .with_context(|| format!("opening input {}", bopts.input.display()))?;
    let lines = read_lines(BufReader::new(input))
        .with_context(|| format!("reading {}", bopts.input.display()))?;
    let done = done_ids(&bopts.output)?;
    let mut out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&bopts.output)
        .with_context(|| format!("opening output {}", bopts.output.display()))?;
    let mut log = match &bopts.log {
        Some(p) => Some(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("opening log {}", p.display()))?,
        ),
        None => None,
    };
    let run_id = format!(
        "{:x}-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0),
        std::process::id()
    );

    let items = plan(&lines, &done);
    let mut summary = BatchSummary {
        total_lines: items.len(),
        skipped_done: items.iter().filter(|i| matches!(i, Item::Done)).count(),
        ..Default::default()
    };
    let remaining = items.len() - summary.skipped_done;
    let bar = progress_bar(bopts.progress, remaining as u64);
    let started = Instant::now();
    let reused_before = engine.prefix_tokens_reused;

    for item in items {
        if interrupted.load(Ordering::SeqCst) {
            summary.interrupted = true;
            break;
        }
        let (id, parsed) = match item {
            Item::Done => continue,
            Item::Record { id, text } => (id, Ok(text)),
            Item::Error { id, msg, duplicate } => {
                summary.duplicates += usize::from(duplicate);
                (id, Err(msg))
            }
        };
        let record = match parsed {
            Ok(text) => {
                let picked;
                let opts = if bopts.examples.is_empty() {
                    opts
                } else {
                    let examples = crate::examples::pick(
                        &bopts.examples,
                        &text,
                        None,
                        bopts.shots,
                        bopts.pick,
                    );
                    picked = ExtractOptions {
                        examples,
                        ..opts.clone()
                    };
                    &picked
                };
                let ex = engine.extract(schema, &text, opts);
                if interrupted.load(Ordering::SeqCst) && ex.verdict == VerdictKind::Error {
                    summary.interrupted = true;
                    break;
                }
                match ex.verdict {
                    VerdictKind::Valid => summary.valid += 1,
                    VerdictKind::Error => summary.errors += 1,
                    _ => summary.invalid += 1,
                }
                if let Some(l) = log.as_mut() {
                    let mut entry = json!({
                        "run_id": run_id, "record_id": id, "verdict": ex.verdict, "ms": ex.ms,
                        "attempts": ex.attempts, "tokens_prompt": ex.tokens_prompt,
                        "tokens_generated": ex.tokens_generated, "tokens_forced": ex.tokens_forced,
                        "needs_review": ex.needs_review, "mode": ex.mode, "model": ex.model,
                        "schema_sha256": ex.schema_sha256,
                    });
                    if bopts.log_content {
                        entry["document"] = json!(text);
                        entry["output"] = json!(ex.text);
                    }
                    append_line(l, &entry)?;
                }
                record_json(&id, &ex)
            }
            Err(msg) => {
                summary.errors += 1;
                json!({"id": id, "verdict": "error", "message": msg, "value": null, "errors": []})
            }
        };
        append_line(&mut out, &record)?;
        summary.processed += 1;
        bar.tick(summary.processed as u64, started);
    }
    bar.finish();
    summary.secs = started.elapsed().as_secs_f64();
    summary.prefix_tokens_reused = engine.prefix_tokens_reused - reused_before;
    Ok(summary)
}

/// A progress display: indicatif on a terminal, a plain line per record otherwise.
enum Progress {
    Bar(indicatif::ProgressBar),
    Lines(u64),
    Off,
}

fn progress_bar(enabled: bool, total: u64) -> Progress {
    if !enabled {
        return Progress::Off;
    }
    if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(total);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{bar:30} {pos}/{len} records  {per_sec}  ETA {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Progress::Bar(bar)
    } else {
        Progress::Lines(total)
    }
}

impl Progress {
    fn tick(&self, done: u64, started: Instant) {
        match self {
            Progress::Bar(b) => b.set_position(done),
            Progress::Lines(total) => {
                let secs = started.elapsed().as_secs_f64().max(1e-9);
                let rate = done as f64 / secs;
                let eta = if rate > 0.0 {
                    (total.saturating_sub(done)) as f64 / rate
                } else {
                    0.0
                };
                eprintln!("progress: {done}/{total} records, {rate:.2} records/s, ETA {eta:.0}s");
            }
            Progress::Off => {}
        }
    }
    fn finish(&self) {
        if let Progress::Bar(b) = self {
            b.finish_and_clear();
        }
    }
}
