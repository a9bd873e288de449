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
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};

use crate::engine::{workers, Engine, ExtractOptions, Extraction, Schema, VerdictKind};

mod lines;

pub use lines::{line_id, parse_line, plan, read_lines, Item, Key};

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
    /// Records decoded together (`--parallel B`): B worker threads, one engine each on
    /// the same weights, whose forward passes run as one batched pass
    /// ([`formwork_models::group`]). 1 runs the records one after another.
    pub parallel: usize,
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
    /// Prompt prefixes computed (each one prefill) and prefills that waited for a
    /// prefix another worker was computing, in this run.
    pub prefixes_computed: u64,
    pub prefix_waits: u64,
    /// Worker threads (`--parallel`).
    pub parallel: usize,
    /// With `--parallel` > 1: batched forward passes, and sequences per pass on average.
    pub batched_passes: u64,
    pub mean_batch: f64,
}

/// The keys of the records already in `out` (their ids; the line numbers of error
/// records whose line had no id, `"id_from_line": true`), after removing a trailing
/// partial line.
pub fn done_ids(out: &Path) -> anyhow::Result<HashSet<Key>> {
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
        if let Some(key) = serde_json::from_slice::<Value>(line)
            .ok()
            .and_then(|v| Key::of_record(&v))
        {
            ids.insert(key);
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

/// The id of this run in the log: the start time in milliseconds and the process id,
/// in hex.
pub fn run_id() -> String {
    format!(
        "{:x}-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0),
        std::process::id()
    )
}

/// The `--log` line of one record (with `content`, its document and the model output).
pub fn log_entry(run_id: &str, id: &Value, ex: &Extraction, text: &str, content: bool) -> Value {
    let mut entry = json!({
        "run_id": run_id, "record_id": id, "verdict": ex.verdict, "ms": ex.ms,
        "attempts": ex.attempts, "tokens_prompt": ex.tokens_prompt,
        "tokens_generated": ex.tokens_generated, "tokens_forced": ex.tokens_forced,
        "needs_review": ex.needs_review, "mode": ex.mode, "model": ex.model,
        "schema_sha256": ex.schema_sha256,
    });
    // A thinking run's (`--think`): its thought's tokens, whether the budget closed
    // it, and with `content` its text.
    if ex.reasoning.is_some() {
        entry["tokens_reasoning"] = json!(ex.tokens_reasoning);
        entry["reasoning_cut"] = json!(ex.reasoning_cut);
    }
    if content {
        entry["document"] = json!(text);
        entry["output"] = json!(ex.text);
        if let Some(r) = &ex.reasoning {
            entry["reasoning"] = json!(r);
        }
    }
    entry
}

/// Append `v` as one line to the file at `path` (made when missing).
pub fn append_to(path: &Path, v: &Value) -> anyhow::Result<()> {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening log {}", path.display()))?;
    append_line(&mut f, v).with_context(|| format!("writing log {}", path.display()))
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
    let run_id = run_id();

    let items = plan(&lines, &done);
    let mut summary = BatchSummary {
        total_lines: items.len(),
        skipped_done: items.iter().filter(|i| matches!(i, Item::Done)).count(),
        parallel: bopts.parallel.max(1),
        ..Default::default()
    };
    let remaining = items.len() - summary.skipped_done;
    let bar = progress_bar(bopts.progress, remaining as u64);
    let started = Instant::now();
    let todo: Vec<Item> = items
        .into_iter()
        .filter(|i| !matches!(i, Item::Done))
        .collect();
    let mut sink = Sink {
        out: &mut out,
        log: log.as_mut(),
        summary: &mut summary,
        bar: &bar,
        started,
    };
    if bopts.parallel <= 1 {
        let reused_before = engine.prefix_tokens_reused;
        let prefix_before = engine.prefix_stats();
        for item in todo {
            if interrupted.load(Ordering::SeqCst) {
                sink.summary.interrupted = true;
                break;
            }
            let done = process(engine, schema, opts, bopts, &run_id, item);
            if interrupted.load(Ordering::SeqCst) && done.verdict == Some(VerdictKind::Error) {
                sink.summary.interrupted = true;
                break;
            }
            sink.write(done)?;
        }
        sink.summary.prefix_tokens_reused = engine.prefix_tokens_reused - reused_before;
        let after = engine.prefix_stats();
        sink.summary.prefixes_computed = after.computed - prefix_before.computed;
        sink.summary.prefix_waits = after.waited - prefix_before.waited;
    } else {
        run_parallel(
            engine,
            schema,
            opts,
            bopts,
            &run_id,
            todo,
            &interrupted,
            &mut sink,
        )?;
    }
    bar.finish();
    summary.secs = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// One record's result, ready to write.
struct Done {
    record: Value,
    log: Option<Value>,
    /// `None` for an input line that never reached the engine.
    verdict: Option<VerdictKind>,
    duplicate: bool,
}

/// Where finished records go, in input order.
struct Sink<'a> {
    out: &'a mut File,
    log: Option<&'a mut File>,
    summary: &'a mut BatchSummary,
    bar: &'a Progress,
    started: Instant,
}

impl Sink<'_> {
    fn write(&mut self, d: Done) -> anyhow::Result<()> {
        let s = &mut *self.summary;
        s.duplicates += usize::from(d.duplicate);
        match d.verdict {
            Some(VerdictKind::Valid) => s.valid += 1,
            Some(VerdictKind::Error) | None => s.errors += 1,
            Some(_) => s.invalid += 1,
        }
        if let (Some(l), Some(entry)) = (self.log.as_deref_mut(), &d.log) {
            append_line(l, entry)?;
        }
        append_line(self.out, &d.record)?;
        s.processed += 1;
        self.bar.tick(s.processed as u64, self.started);
        Ok(())
    }
}

/// Extract one record (or turn a bad input line into its error record).
fn process(
    engine: &mut Engine,
    schema: &mut Schema,
    opts: &ExtractOptions,
    bopts: &BatchOptions,
    run_id: &str,
    item: Item,
) -> Done {
    let (id, text) = match item {
        Item::Done => unreachable!("done items are filtered out"),
        Item::Record { id, text } => (id, text),
        Item::Error {
            id,
            msg,
            duplicate,
            from_line,
        } => {
            let mut record =
                json!({"id": id, "verdict": "error", "message": msg, "value": null, "errors": []});
            if from_line {
                record["id_from_line"] = json!(true);
            }
            return Done {
                record,
                log: None,
                verdict: None,
                duplicate,
            };
        }
    };
    let picked;
    let opts = if bopts.examples.is_empty() {
        opts
    } else {
        let examples = crate::examples::pick(&bopts.examples, &text, None, bopts.shots, bopts.pick);
        picked = ExtractOptions {
            examples,
            ..opts.clone()
        };
        &picked
    };
    let ex = engine.extract(schema, &text, opts);
    let log = (bopts.log.as_ref()).map(|_| log_entry(run_id, &id, &ex, &text, bopts.log_content));
    Done {
        record: record_json(&id, &ex),
        log,
        verdict: Some(ex.verdict),
        duplicate: false,
    }
}

/// `--parallel B`: B workers take records from one queue; their forward passes run
/// together. Results are written in input order: a record that finishes early waits
/// in memory for the ones before it. On Ctrl-C the workers finish the records they
/// hold and take no more; what is written is a prefix of the input's order, so a
/// rerun resumes where it stopped.
#[allow(clippy::too_many_arguments)]
fn run_parallel(
    engine: &Engine,
    schema: &mut Schema,
    opts: &ExtractOptions,
    bopts: &BatchOptions,
    run_id: &str,
    todo: Vec<Item>,
    interrupted: &Arc<AtomicBool>,
    sink: &mut Sink<'_>,
) -> anyhow::Result<()> {
    // Compiled once before the workers clone the schema, so that they share one grammar
    // and its mask caches. A schema that does not compile fails each record, as in a
    // serial run.
    if opts.mode == crate::engine::Mode::Masked {
        let _ = schema.grammar();
    }
    let total = todo.len();
    let mut waiting = std::collections::BTreeMap::new();
    let mut next = 0usize;
    let mut failed: Option<anyhow::Error> = None;
    let go_on = || !interrupted.load(Ordering::SeqCst);
    let work = |engine: &mut Engine, schema: &mut Schema, item: Item| {
        process(engine, schema, opts, bopts, run_id, item)
    };
    let take = |idx: usize, done: Done| {
        if failed.is_some() {
            return ControlFlow::Break(());
        }
        if interrupted.load(Ordering::SeqCst) && done.verdict == Some(VerdictKind::Error) {
            // Cut short by the interrupt: this record and all after it run again.
            sink.summary.interrupted = true;
            waiting.insert(idx, None);
            return ControlFlow::Break(());
        }
        waiting.insert(idx, Some(done));
        while let Some(entry) = waiting.remove(&next) {
            let Some(done) = entry else {
                // A hole: nothing after it is written.
                next = usize::MAX;
                break;
            };
            if let Err(e) = sink.write(done) {
                failed = Some(e);
                return ControlFlow::Break(());
            }
            next += 1;
        }
        ControlFlow::Continue(())
    };
    let run = workers::run(
        engine,
        schema,
        todo,
        bopts.parallel,
        "formwork-batch",
        &go_on,
        &work,
        take,
    );
    let finished = match run {
        Ok(f) => f,
        Err(e) => return Err(failed.unwrap_or(e)),
    };
    if interrupted.load(Ordering::SeqCst) && sink.summary.processed < total {
        sink.summary.interrupted = true;
    }
    if failed.is_none() && !sink.summary.interrupted && sink.summary.processed < total {
        // A worker died with a record in hand: the records after it in input order
        // were not written. Say so; a rerun resumes from the first missing one.
        failed = Some(anyhow::anyhow!(
            "{} batch worker(s) stopped early: {} of {total} records written, in input order; rerun the same command to resume",
            finished.panicked,
            sink.summary.processed
        ));
    }
    sink.summary.prefix_tokens_reused = finished.prefix_tokens_reused;
    sink.summary.prefixes_computed = finished.prefix.computed;
    sink.summary.prefix_waits = finished.prefix.waited;
    sink.summary.batched_passes = finished.stats.passes;
    sink.summary.mean_batch = finished.stats.mean_batch();
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
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
