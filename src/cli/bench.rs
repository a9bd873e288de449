//! `formwork bench --dataset FILE.jsonl`: masked against free decoding.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::bench::{self, BenchConfig, BenchMode};
use crate::engine::{Engine, ExtractOptions};
use crate::sampling::Sampling;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// JSONL with `{id, text, schema, expected}` per line.
    #[arg(long)]
    pub dataset: PathBuf,
    /// Comma-separated: masked, free, masked-nojf (masked without jump-forward).
    #[arg(long, default_value = "masked,free", value_delimiter = ',')]
    pub modes: Vec<BenchMode>,
    #[arg(long, default_value = "smollm2-135m")]
    pub model: String,
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Use only the first N records.
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(long, default_value_t = 2)]
    pub retries: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// 0 (the default) is greedy.
    #[arg(long)]
    pub temperature: Option<f64>,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Compare strings exactly (default: trimmed and case-folded).
    #[arg(long)]
    pub exact_strings: bool,
    /// Write report.json and index.html (with plots) into this folder.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

pub fn run(a: BenchArgs) -> anyhow::Result<ExitCode> {
    let cases = bench::read_dataset(&a.dataset, a.limit)?;
    anyhow::ensure!(
        !cases.is_empty(),
        "dataset {} has no records",
        a.dataset.display()
    );
    let device = a
        .device
        .parse()
        .map_err(|e| anyhow::anyhow!("--device: {e}"))?;
    let loaded = crate::load_model(&a.model, device)?;
    let mut engine = Engine::new(loaded);
    let cfg = BenchConfig {
        modes: a.modes.clone(),
        opts: ExtractOptions {
            max_tokens: a.max_tokens,
            retries: a.retries,
            sampling: Sampling::from_args(a.temperature, None),
            seed: a.seed,
            ..Default::default()
        },
        exact_strings: a.exact_strings,
        dataset_name: a
            .dataset
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
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
