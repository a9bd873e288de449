//! `formwork bench --dataset FILE.jsonl`: masked against free decoding.
//! `formwork bench masks`: mask time per token with the model's real tokenizer.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::bench::{self, BenchConfig, BenchMode};
use crate::engine::{Engine, ExtractOptions};
use crate::sampling::Sampling;

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub what: Option<BenchWhat>,
    /// JSONL with `{id, text, schema, expected}` per line.
    #[arg(long, required = true)]
    pub dataset: Option<PathBuf>,
    /// Comma-separated: masked, free, masked-nojf (masked without jump-forward).
    #[arg(long, default_value = "masked,free", value_delimiter = ',')]
    pub modes: Vec<BenchMode>,
    #[arg(long, env = "FORMWORK_MODEL", default_value = formwork_models::registry::DEFAULT_MODEL)]
    pub model: String,
    #[command(flatten)]
    pub load: super::LoadArgs,
    /// Use only the first N records.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Use N records spread evenly over the file (every k-th), after --limit.
    #[arg(long)]
    pub sample: Option<usize>,
    #[arg(long, default_value_t = 2)]
    pub retries: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// 0 (the default) is greedy.
    #[arg(long)]
    pub temperature: Option<f64>,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// As `extract --think` / `--think-budget N`: each record's thought is kept in the
    /// report (`reasoning`, `tokens_reasoning`, `reasoning_cut`), apart from the value
    /// that is scored.
    #[command(flatten)]
    pub think: super::ThinkArgs,
    /// Compare strings exactly (default: trimmed and case-folded).
    #[arg(long)]
    pub exact_strings: bool,
    /// Write report.json and index.html (with plots) into this folder.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// How the schema is shown to the model (the mask enforces the JSON Schema either way).
    #[arg(long, value_enum, default_value = "outline")]
    pub prompt: super::PromptArg,
    /// Worked examples, JSONL: `{text, expected}` or dataset lines (a line whose
    /// `schema` differs from a record's schema is not used for it). Each is checked
    /// against the schema when loaded. The record being measured is never picked.
    #[arg(long)]
    pub examples: Option<PathBuf>,
    /// Examples per record (with --examples).
    #[arg(long, default_value_t = 3)]
    pub shots: usize,
    /// How the examples are picked: bm25 (most similar to the record) or first.
    #[arg(long, value_enum, default_value = "bm25")]
    pub pick: super::PickArg,
    /// Decode B records together: B worker threads whose forward passes run as one
    /// batched pass. The answers do not depend on B (a sequence's logits in a batch
    /// equal its logits alone); the report gives records/minute.
    #[arg(long, value_name = "B", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub parallel: u16,
    /// Mark every nullable free-text string of each schema as a span of its record's
    /// text (`x-formwork-source`, docs/source.md): `substring` (the default) or `words`.
    #[arg(long, value_name = "MODE", num_args = 0..=1, require_equals = true,
          default_missing_value = "substring", value_parser = super::parse_source_mode)]
    pub source_strings: Option<formwork_grammar::source::SourceMode>,
    /// Masked modes, greedy: weigh `null` against the best value at nullable fields.
    #[arg(long)]
    pub null_lookahead: bool,
    /// As `extract --no-weigh-nulls`.
    #[arg(long)]
    pub no_weigh_nulls: bool,
    /// As `extract --fill-above`.
    #[arg(long, value_name = "P", default_value_t = crate::engine::DEFAULT_FILL_ABOVE,
          value_parser = super::parse_probability)]
    pub fill_above: f64,
    /// Masked modes: add NATS to the logits of `null` wherever a nullable field's
    /// `null` competes with a value (see `extract --null-bias`).
    #[arg(long, value_name = "NATS", default_value_t = 0.0, allow_negative_numbers = true,
          value_parser = super::parse_nats)]
    pub null_bias: f32,
    /// Grounding of the schema's nullable strings, as `extract --grounded`: `distinct`
    /// (the default, as in `extract`), `stated` (what `--grounded` alone means), or
    /// `off` (only the fields marked `"x-formwork-grounded": true`). A value the
    /// document does not state is taken back and written `null`. README "Extraction".
    #[arg(long, value_name = "MODE", num_args = 0..=1, require_equals = true,
          default_value = "distinct", default_missing_value = "stated",
          value_parser = super::parse_ground_arg)]
    pub grounded: super::GroundArg,
    /// Write the first attempt of every record as an OpenAI chat completions request
    /// (`{id, schema_name, mode, request}` per line: the same messages, examples,
    /// schema as a strict `json_schema` response format, `max_tokens` and
    /// temperature), then exit without loading the model: the same job for another
    /// server (`benches/serve_bench.py --request-file`).
    #[arg(long, value_name = "FILE")]
    pub requests_out: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
pub enum BenchWhat {
    /// Mask time per token: replay a valid instance of each schema, tokenised by the
    /// model's tokenizer, through the matcher (first and second document), and report
    /// compile time, coverage per subset and memory.
    Masks(MasksArgs),
}

#[derive(clap::Args, Debug)]
pub struct MasksArgs {
    /// Whose tokenizer: a registry name, a .gguf path or a Hugging Face repo id (only the
    /// GGUF metadata is read, not the weights).
    #[arg(long, env = "FORMWORK_MODEL", default_value = formwork_models::registry::DEFAULT_MODEL)]
    pub model: String,
    /// A folder of JSON Schemas, searched one level of subfolders deep
    /// (default: ../shared/data/jsonschemabench).
    #[arg(long)]
    pub schemas: Option<PathBuf>,
    /// Use N schemas spread evenly over the sorted list.
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print report JSON instead of markdown.
    #[arg(long)]
    pub json: bool,
    /// Compile leniently (relax, and record, what the grammar cannot enforce).
    #[arg(long)]
    pub lenient: bool,
    /// Print one line per schema.
    #[arg(long)]
    pub verbose: bool,
}

fn run_masks(a: MasksArgs) -> anyhow::Result<ExitCode> {
    let dir = a
        .schemas
        .clone()
        .unwrap_or_else(|| PathBuf::from("../shared/data/jsonschemabench"));
    let files = bench::masks::schema_files(&dir, a.limit)
        .with_context(|| format!("--schemas {}", dir.display()))?;
    anyhow::ensure!(
        !files.is_empty(),
        "--schemas {}: no .json files",
        dir.display()
    );
    crate::ensure_fetched(&a.model)?;
    let resolved = formwork_models::registry::resolve(&a.model)?;
    let tok = formwork_models::tokenizer::GgufTokenizer::from_file(&resolved.path)?;
    let verbose = a.verbose;
    let config = formwork_grammar::compile::Config {
        lenient: a.lenient,
        ..Default::default()
    };
    let report = bench::masks::run(
        &resolved.name,
        &tok,
        &dir,
        &files,
        &config,
        a.seed,
        |f, n| {
            if verbose {
                match n {
                    Some(n) => eprintln!("{}: {n} tokens", f.display()),
                    None => eprintln!("{}: not compiled", f.display()),
                }
            }
        },
    );
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", bench::masks::markdown(&report));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(a: BenchArgs) -> anyhow::Result<ExitCode> {
    if let Some(BenchWhat::Masks(m)) = a.what {
        return run_masks(m);
    }
    let dataset = a.dataset.clone().expect("clap requires --dataset");
    let mut cases = bench::read_dataset(&dataset, a.limit)?;
    if let Some(n) = a.sample {
        cases = bench::spread(cases, n);
    }
    if let Some(m) = a.source_strings {
        for c in &mut cases {
            c.schema = crate::engine::source::mark_free_text(&c.schema, m);
        }
    }
    anyhow::ensure!(
        !cases.is_empty(),
        "dataset {} has no records",
        dataset.display()
    );
    let mut cfg = BenchConfig {
        modes: a.modes.clone(),
        opts: ExtractOptions {
            max_tokens: a.max_tokens,
            retries: a.retries,
            sampling: Sampling::from_args(a.temperature, None),
            seed: a.seed,
            prompt: a.prompt.into(),
            null_lookahead: a.null_lookahead,
            null_bias: a.null_bias,
            weigh_nulls: !a.no_weigh_nulls,
            fill_above: a.fill_above,
            grounded: a.grounded.0,
            ..Default::default()
        },
        exact_strings: a.exact_strings,
        examples: a.examples.clone(),
        shots: a.shots,
        pick: a.pick.into(),
        parallel: a.parallel as usize,
        dataset_name: dataset
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    if let Some(path) = &a.requests_out {
        let lines = bench::requests(&cases, &cfg, &a.model)?;
        let mut text = String::new();
        for line in &lines {
            text.push_str(&serde_json::to_string(line)?);
            text.push('\n');
        }
        std::fs::write(path, text).with_context(|| format!("--requests-out {}", path.display()))?;
        eprintln!("{} request(s) written to {}", lines.len(), path.display());
        return Ok(ExitCode::SUCCESS);
    }
    let loaded = crate::load_model_with(&a.model, a.load.options()?)?;
    let mut engine = Engine::new(loaded);
    cfg.opts.think = a.think.budget(&engine)?;
    let total = cases.len() * cfg.modes.len();
    let mut done = 0usize;
    let report = bench::run(&mut engine, &cases, &cfg, |r| {
        done += 1;
        eprintln!(
            "[{done}/{total}] {} {} {:?} {} ms",
            r.mode.name(),
            r.id,
            r.verdict,
            r.ms
        );
    })?;
    let md = bench::markdown(&report);
    println!("{md}");
    if let Some(dir) = &a.report {
        std::fs::create_dir_all(dir).with_context(|| format!("report folder {}", dir.display()))?;
        std::fs::write(dir.join("report.json"), serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", dir.join("report.json").display()))?;
        std::fs::write(dir.join("index.html"), bench::html::render(&report, &md))
            .with_context(|| format!("writing {}", dir.join("index.html").display()))?;
        eprintln!("report: {}", dir.join("index.html").display());
    }
    Ok(ExitCode::SUCCESS)
}
