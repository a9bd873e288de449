//! `formwork extract`: one document (or a JSONL batch) and a schema in, a
//! validated JSON value out.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::batch::{self, BatchOptions};
use crate::engine::{Engine, ExtractOptions, Mode, Schema, VerdictKind};
use crate::sampling::Sampling;

#[derive(clap::Args, Debug)]
pub struct ExtractArgs {
    /// The JSON Schema file (hand-written or Pydantic's `model_json_schema()`).
    #[arg(long)]
    pub schema: PathBuf,
    /// The document: a file, or `-` for standard input.
    #[arg(long, conflicts_with = "jsonl")]
    pub input: Option<String>,
    /// Batch input: one `{"id": ..., "text": ...}` per line.
    #[arg(long, requires = "out")]
    pub jsonl: Option<PathBuf>,
    /// Batch output (appended per record; a rerun skips the ids already there). With
    /// --input: the file gets what would print to standard output (replaced).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Extra instructions added to the system message.
    #[arg(long)]
    pub instructions: Option<String>,
    /// Registry name, path to a .gguf file, or a Hugging Face repo id.
    #[arg(long, env = "FORMWORK_MODEL", default_value = formwork_models::registry::DEFAULT_MODEL)]
    pub model: String,
    #[command(flatten)]
    pub load: super::LoadArgs,
    #[arg(long, value_enum, default_value = "masked")]
    pub mode: super::ModeArg,
    /// Token budget for the answer (masked mode steers to a valid ending within it).
    #[arg(long, default_value_t = 512)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub think: super::ThinkArgs,
    /// Free mode: how many times to retry with the errors quoted.
    #[arg(long, default_value_t = 2)]
    pub retries: usize,
    /// 0 (the default) is greedy.
    #[arg(long)]
    pub temperature: Option<f64>,
    #[arg(long)]
    pub top_p: Option<f64>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Per-record time limit in seconds; past it the verdict is `incomplete`.
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Print the result envelope (value, verdict, errors, counts) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Mark a record for review when this JSON Pointer holds a non-empty value (repeatable).
    #[arg(long = "review-field")]
    pub review_fields: Vec<String>,
    /// Mark a record for review when one of its values has a confidence below P (the
    /// envelope's `confidence`: the model's probability of the value under the mask;
    /// 0 turns it off).
    #[arg(long, value_name = "P", default_value_t = crate::engine::DEFAULT_REVIEW_BELOW,
          value_parser = super::parse_probability)]
    pub review_below: f64,
    /// Append one JSON line per record (ids, verdicts, timings, token counts); with
    /// --input, one line whose `record_id` is the input's path.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Also log the document text and the model output.
    #[arg(long)]
    pub log_content: bool,
    /// Relax (and record) schema parts the grammar cannot enforce; the validator still checks them.
    #[arg(long)]
    pub lenient: bool,
    /// Disable jump-forward (forced tokens are then sampled one by one).
    #[arg(long)]
    pub no_jump_forward: bool,
    /// Greedy masked decoding: at a nullable field, weigh `null` against the best value
    /// before committing (both branches decoded; costs extra forward passes).
    #[arg(long)]
    pub null_lookahead: bool,
    /// Do not weigh a `null` the model picks for a grounded text field against the
    /// best whole value the document offers (a quotation decoded and taken back, which
    /// lowers the confidence of a `null` that likely misses a stated value; with
    /// --null-lookahead the value is written when it weighs more). For measuring.
    #[arg(long)]
    pub no_weigh_nulls: bool,
    /// Greedy: a `null` weighed against the document's best quotation is replaced by
    /// that quotation when the model, writing a value there, would write it with a
    /// probability above P (1 turns it off). docs/extraction.md has how it was set.
    #[arg(long, value_name = "P", default_value_t = crate::engine::DEFAULT_FILL_ABOVE,
          value_parser = super::parse_probability)]
    pub fill_above: f64,
    /// Masked decoding: add NATS to the logits of `null` wherever a nullable field's
    /// `null` competes with a value (a prior for "null unless the document says so";
    /// negative values favour filling). docs/extraction.md has the measured
    /// effect.
    #[arg(long, value_name = "NATS", default_value_t = 0.0, allow_negative_numbers = true,
          value_parser = super::parse_nats)]
    pub null_bias: f32,
    /// Grounding of the schema's nullable strings (free text, and enums of strings): a
    /// value the document does not state (case-insensitive, spaces folded) is taken
    /// back and written `null`. `distinct` (the default, the best measured on SNIPS)
    /// also takes back a value an earlier grounded field already holds (one quotation,
    /// one field); `stated` (what `--grounded` alone means) only the first rule; `off`
    /// grounds only the fields marked `"x-formwork-grounded": true`. A nullable
    /// `format: date` string is judged by its meaning: it must be a day the document
    /// states ("2/6/2020", "march sixth, 2038"), and may not be null when the document
    /// states a day no earlier field holds. README "Extraction", docs/extraction.md.
    #[arg(long, value_name = "MODE", num_args = 0..=1, require_equals = true,
          default_value = "distinct", default_missing_value = "stated",
          value_parser = super::parse_ground_arg)]
    pub grounded: super::GroundArg,
    /// Recompute prompts in full instead of reusing KV state: the prefix shared by every
    /// record of a batch (system message and schema), and a free-mode retry's first
    /// prompt. For measuring the reuse.
    #[arg(long)]
    pub no_prefix_reuse: bool,
    /// Do not show batch progress.
    #[arg(long)]
    pub quiet: bool,
    /// How the schema is shown to the model (the mask enforces the JSON Schema either way).
    #[arg(long, value_enum, default_value = "outline")]
    pub prompt: super::PromptArg,
    /// Worked examples, JSONL: `{text, expected}` per line (or dataset lines; a line
    /// whose `schema` differs from --schema is skipped). Each `expected` is checked
    /// against the schema; a bad one is an error naming its line. They are shown as
    /// earlier turns of the conversation.
    #[arg(long)]
    pub examples: Option<PathBuf>,
    /// Use K of the examples per document, picked with --pick (default 3, the best
    /// measured on SNIPS), or `all` of them.
    #[arg(long, value_name = "K|all", value_parser = super::parse_shots)]
    pub shots: Option<super::ShotsArg>,
    /// bm25: the K most similar to the document, the most similar last; first: the
    /// first K of the file, the same for every document (with `--shots all`, the file's
    /// order: the whole examples block is then a prefix every record shares, its KV
    /// state computed once).
    #[arg(long, value_enum, default_value = "bm25")]
    pub pick: super::PickArg,
    /// Mark every nullable free-text string of the schema as a span of the document
    /// (`x-formwork-source`, docs/source.md): `substring` (the default) or `words`.
    #[arg(long, value_name = "MODE", num_args = 0..=1, require_equals = true,
          default_missing_value = "substring", value_parser = super::parse_source_mode)]
    pub source_strings: Option<formwork_grammar::source::SourceMode>,
    /// With --jsonl: decode B records together, B worker threads whose forward passes
    /// run as one batched pass (the weights are read once per pass for all B). Results
    /// stay in input order and do not depend on B. The default, 4, was the fastest
    /// with the least memory on SNIPS (docs/serving.md, batching); 1 runs records one
    /// after another.
    #[arg(long, value_name = "B", default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub parallel: u16,
}

/// Examples per document with `--examples` and no `--shots`: 3 picked by BM25 was
/// the best measured on SNIPS (docs/extraction.md).
pub const DEFAULT_SHOTS: usize = 3;

pub fn read_schema(path: &Path) -> anyhow::Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("schema {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("schema {} is not JSON", path.display()))
}

fn read_input(input: &str) -> anyhow::Result<String> {
    if input == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading the document from standard input")?;
        Ok(s)
    } else {
        std::fs::read_to_string(input).with_context(|| format!("document {input}"))
    }
}

/// The flags no parser checks alone, checked before the model loads: what would
/// otherwise panic (a NaN timeout) or be dropped without a word (a review pointer that
/// can never fire).
fn check_flags(a: &ExtractArgs, schema: &serde_json::Value) -> anyhow::Result<Option<Duration>> {
    let timeout = a
        .timeout
        .map(|s| super::seconds("timeout", s))
        .transpose()?;
    for f in &a.review_fields {
        crate::engine::pointer::check(schema, f).map_err(|e| {
            anyhow::anyhow!("--review-field {f}: {e} in schema {}", a.schema.display())
        })?;
    }
    if a.log_content && a.log.is_none() {
        anyhow::bail!("--log-content needs --log FILE");
    }
    Ok(timeout)
}

pub fn run(a: ExtractArgs) -> anyhow::Result<ExitCode> {
    let mut schema_value = read_schema(&a.schema)?;
    let timeout = check_flags(&a, &schema_value)?;
    if let Some(m) = a.source_strings {
        schema_value = crate::engine::source::mark_free_text(&schema_value, m);
    }
    let config = formwork_grammar::compile::Config {
        lenient: a.lenient,
        ..Default::default()
    };
    let mut schema = Schema::new(schema_value)
        .with_context(|| format!("schema {}", a.schema.display()))?
        .with_config(config);
    if Mode::from(a.mode) == Mode::Masked {
        // Fail before loading the model when the grammar cannot enforce the schema.
        schema
            .grammar()
            .map_err(|e| anyhow::anyhow!("schema {}: {e}", a.schema.display()))?;
    }
    let pool = match &a.examples {
        Some(p) => {
            let pool = crate::examples::load(p, &schema.value, &schema.validator)?;
            anyhow::ensure!(
                !pool.is_empty(),
                "examples {}: no example for this schema",
                p.display()
            );
            pool
        }
        None => Vec::new(),
    };
    let shots = match a.shots {
        Some(super::ShotsArg::All) => pool.len(),
        Some(super::ShotsArg::Count(k)) => k,
        None => DEFAULT_SHOTS,
    };
    let document = match (&a.input, &a.jsonl) {
        (Some(i), _) => Some(read_input(i)?),
        (None, None) => anyhow::bail!("give a document with --input FILE (or - for stdin), or a batch with --jsonl IN --out OUT"),
        (None, Some(_)) => None,
    };
    let loaded = crate::load_model_with(&a.model, a.load.options()?)?;
    let mut engine = Engine::new(loaded);
    // Refused before any record runs: every one would be an error.
    let think = a.think.budget(&engine)?;
    if !engine.has_chat_template() {
        eprintln!(
            "note: model `{}` has no chat template; using a raw completion prompt",
            a.model
        );
    }
    let opts = ExtractOptions {
        mode: a.mode.into(),
        max_tokens: a.max_tokens,
        retries: a.retries,
        sampling: Sampling::from_args(a.temperature, a.top_p),
        seed: a.seed,
        instructions: a.instructions.clone(),
        timeout,
        jump_forward: !a.no_jump_forward,
        heal_forced: true,
        null_lookahead: a.null_lookahead,
        null_bias: a.null_bias,
        weigh_nulls: !a.no_weigh_nulls,
        fill_above: a.fill_above,
        grounded: a.grounded.0,
        review_fields: a.review_fields.clone(),
        review_below: a.review_below,
        prompt: a.prompt.into(),
        examples: Vec::new(),
        think,
    };

    if let Some(doc) = document {
        let opts = ExtractOptions {
            examples: crate::examples::pick(&pool, &doc, None, shots, a.pick.into()),
            ..opts
        };
        let ex = engine.extract(&mut schema, &doc, &opts);
        if let Some(p) = &a.log {
            let id = serde_json::json!(a.input.as_deref().unwrap_or("-"));
            let entry = batch::log_entry(&batch::run_id(), &id, &ex, &doc, a.log_content);
            batch::append_to(p, &entry)?;
        }
        // What the command prints: to --out FILE when given (replaced), else stdout.
        let mut printed = String::new();
        if a.json {
            printed = serde_json::to_string(&ex)? + "\n";
        } else {
            match ex.verdict {
                VerdictKind::Valid => {
                    printed =
                        serde_json::to_string_pretty(ex.value.as_ref().expect("valid has a value"))?
                            + "\n"
                }
                VerdictKind::SchemaInvalid | VerdictKind::SemanticInvalid => {
                    eprintln!(
                        "{}",
                        crate::validate::render_pydantic(schema.validator.title(), &ex.errors)
                    );
                }
                _ => eprintln!("{:?}: {}", ex.verdict, ex.message.as_deref().unwrap_or("")),
            }
            if ex.needs_review {
                eprintln!("needs review: {}", ex.review_reasons.join("; "));
            }
        }
        match &a.out {
            Some(p) => std::fs::write(p, &printed)
                .with_context(|| format!("writing --out {}", p.display()))?,
            None => print!("{printed}"),
        }
        if ex.verdict == VerdictKind::Error {
            anyhow::bail!("{}", ex.message.unwrap_or_default());
        }
        return Ok(ExitCode::from(ex.verdict.exit_code()));
    }

    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let flag = interrupted.clone();
        // First Ctrl-C: finish cleanly between records. Second: leave at once
        // (the output is whole lines either way).
        let _ = ctrlc::set_handler(move || {
            if flag.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
            eprintln!(
                "interrupted: stopping after the current record; rerun the same command to resume"
            );
        });
    }
    let bopts = BatchOptions {
        input: a.jsonl.clone().expect("checked above"),
        output: a.out.clone().expect("clap requires --out with --jsonl"),
        log: a.log.clone(),
        log_content: a.log_content,
        progress: !a.quiet,
        examples: pool,
        shots,
        pick: a.pick.into(),
        parallel: a.parallel as usize,
    };
    engine.reuse_prefix = !a.no_prefix_reuse;
    let summary = batch::run(&mut engine, &mut schema, &opts, &bopts, interrupted)?;
    eprintln!(
        "batch: {} processed, {} already done, {} valid, {} invalid, {} errors ({} duplicate ids), \
         {:.1} s, {} prompt tokens reused from cached KV state (shared prefix, retries), \
         {} prefixes computed ({} prefills waited for one){}{}",
        summary.processed,
        summary.skipped_done,
        summary.valid,
        summary.invalid,
        summary.errors,
        summary.duplicates,
        summary.secs,
        summary.prefix_tokens_reused,
        summary.prefixes_computed,
        summary.prefix_waits,
        if summary.parallel > 1 {
            format!(
                ", --parallel {}: {} batched passes, {:.2} sequences per pass",
                summary.parallel, summary.batched_passes, summary.mean_batch
            )
        } else {
            String::new()
        },
        if summary.interrupted {
            " (interrupted; rerun to resume)"
        } else {
            ""
        }
    );
    if a.json {
        println!("{}", serde_json::to_string(&summary)?);
    }
    Ok(ExitCode::from(
        if summary.interrupted || summary.errors > 0 {
            2
        } else if summary.invalid > 0 {
            1
        } else {
            0
        },
    ))
}
