//! The clap command line. Only this module knows clap. Each subcommand lives in a
//! file of its own with its `Args` struct and a `run` that returns the exit code.
//!
//! Exit codes, for every subcommand: 0 success (or "valid"), 1 a result was
//! produced but is invalid / refused, 2 an error (bad input, missing model, ...).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod bench;
pub mod compile;
pub mod extract;
pub mod generate;
pub mod models;
pub mod serve;
pub mod validate;

/// `--source-strings[=substring|words]` (see `docs/source.md`).
/// `--null-bias`: a finite number of nats.
pub fn parse_nats(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(format!("{s:?} is not a finite number of nats")),
    }
}

/// `--review-below`: a probability, from 0 to 1.
pub fn parse_probability(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("{s:?} is not a number from 0 to 1")),
    }
}

/// `--think` / `--think-budget N`, for `extract` and `bench`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ThinkArgs {
    /// A reasoning model (think markers in its chat template or vocabulary: Qwen3, the
    /// DeepSeek-R1 distills) thinks first, up to 1024 thought tokens (serve's
    /// `reasoning_effort: medium`), then answers; the thought is kept apart from the
    /// value. The thought's budget comes on top of --max-tokens. A model without think
    /// markers is refused (exit 2).
    #[arg(long, conflicts_with = "think_budget")]
    pub think: bool,
    /// --think with a budget of exactly N thought tokens; 0: answer without thought
    /// (the template rendered with `enable_thinking: false`).
    #[arg(long, value_name = "N")]
    pub think_budget: Option<usize>,
}

impl ThinkArgs {
    /// The thought budget asked for (`None`: the model is not asked to think), checked
    /// against the loaded model: a budget above 0 on a model without think markers is
    /// refused before any record runs, in one line naming the flag and the model.
    pub fn budget(&self, engine: &crate::engine::Engine) -> anyhow::Result<Option<usize>> {
        let think = self
            .think_budget
            .or(self.think.then_some(crate::engine::think::DEFAULT_BUDGET));
        if let Some(n) = think.filter(|&n| n > 0) {
            if engine.think_markers().is_none() {
                let flag = match self.think_budget {
                    Some(_) => format!("--think-budget {n}"),
                    None => format!("--think (a budget of {n} tokens)"),
                };
                anyhow::bail!(
                    "{flag}: the model {} has no think markers in its chat template or vocabulary",
                    engine.model().name
                );
            }
        }
        Ok(think)
    }
}

/// clap's view of an engine enum, so that only this module knows clap: a `ValueEnum`
/// with the same variants (their doc comments are the `--help` text) and `From` into
/// the engine's type.
macro_rules! cli_enum {
    ($(#[$doc:meta])* $arg:ident => $ty:ty { $($(#[$m:meta])* $v:ident),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
        pub enum $arg {
            $($(#[$m])* $v),+
        }
        impl From<$arg> for $ty {
            fn from(a: $arg) -> $ty {
                match a {
                    $($arg::$v => <$ty>::$v),+
                }
            }
        }
    };
}

cli_enum!(
    /// `--mode`: masked (the default) or free decoding.
    ModeArg => crate::engine::Mode { Masked, Free }
);
cli_enum!(
    /// `--prompt`: how the system message presents the schema.
    PromptArg => crate::engine::prompt::PromptStyle {
        /// One line per field: type, allowed values, nullability, description.
        Outline,
        /// The raw JSON Schema text.
        JsonSchema,
    }
);
cli_enum!(
    /// `--pick`: how K worked examples are chosen.
    PickArg => crate::examples::Pick {
        /// The K examples most similar to the document (BM25 over lowercase words).
        Bm25,
        /// The first K examples of the file, the same for every document.
        First,
    }
);

cli_enum!(
    /// `--kv-cache`: how the KV cache stores keys and values.
    KvArg => formwork_models::llama::KvType {
        /// 4 bytes a value, exactly as computed.
        F32,
        /// 2 bytes a value (llama.cpp's default): half the memory per position, on the
        /// CPU and on a GPU.
        F16,
    }
);

cli_enum!(
    /// `--backend`: which model file runs the model.
    BackendArg => formwork_models::runtime::Backend {
        /// formwork's own CPU model file on a CPU with its SIMD kernels, else candle's
        /// tensor path.
        Auto,
        /// formwork's own CPU model file (CPU only).
        Formwork,
        /// candle's tensor path, the one a GPU runs; with `--device cpu` it runs on candle's
        /// CPU device (how that path is checked without a GPU).
        Candle,
    }
);

/// Where and how a command loads its model: `--device`, `--backend` and `--kv-cache`
/// (flattened into `generate`, `extract`, `bench` and `serve`).
#[derive(clap::Args, Debug)]
pub struct LoadArgs {
    /// Where to run: auto, cpu, cuda or metal (cuda and metal need the build feature).
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Which model file runs the model: auto, formwork (the CPU file) or candle (the
    /// device path; on `--device cpu`, candle's CPU device).
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendArg,
    /// How the KV cache stores keys and values: f32, or f16 (half the memory per
    /// position, on every device).
    #[arg(long, value_enum, default_value = "f32")]
    pub kv_cache: KvArg,
}

impl LoadArgs {
    pub fn options(&self) -> anyhow::Result<formwork_models::runtime::LoadOptions> {
        Ok(formwork_models::runtime::LoadOptions {
            device: self
                .device
                .parse()
                .map_err(|e| anyhow::anyhow!("--device: {e}"))?,
            kv: self.kv_cache.into(),
            backend: self.backend.into(),
            ..Default::default()
        })
    }
}

pub fn parse_source_mode(s: &str) -> Result<formwork_grammar::source::SourceMode, String> {
    formwork_grammar::source::SourceMode::parse(s)
        .ok_or_else(|| format!("{s:?} is not `substring` or `words`"))
}

pub fn parse_ground_mode(s: &str) -> Result<crate::engine::ground::GroundMode, String> {
    crate::engine::ground::GroundMode::parse(s)
        .ok_or_else(|| format!("{s:?} is not `stated` or `distinct`"))
}

/// `extract --grounded=stated|distinct|off`: a grounding mode, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroundArg(pub Option<crate::engine::ground::GroundMode>);

pub fn parse_ground_arg(s: &str) -> Result<GroundArg, String> {
    if s == "off" {
        return Ok(GroundArg(None));
    }
    crate::engine::ground::GroundMode::parse(s)
        .map(|m| GroundArg(Some(m)))
        .ok_or_else(|| format!("{s:?} is not `stated`, `distinct` or `off`"))
}

/// `extract --shots K|all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShotsArg {
    Count(usize),
    All,
}

pub fn parse_shots(s: &str) -> Result<ShotsArg, String> {
    if s == "all" {
        return Ok(ShotsArg::All);
    }
    s.parse()
        .map(ShotsArg::Count)
        .map_err(|_| format!("{s:?} is not a number of examples or `all`"))
}

/// A flag's number of seconds as a [`std::time::Duration`]: finite, 0 or more (NaN, a
/// negative number or one past 10^9 s is the flag's one-line error, exit 2).
pub(crate) fn seconds(flag: &str, s: f64) -> anyhow::Result<std::time::Duration> {
    if !(s.is_finite() && (0.0..1e9).contains(&s)) {
        anyhow::bail!("--{flag} {s}: must be a number of seconds, 0 or more");
    }
    Ok(std::time::Duration::from_secs_f64(s))
}

#[derive(Parser, Debug)]
#[command(
    name = "formwork",
    version,
    about = "Constrained decoding: JSON Schema -> token masks -> valid output"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Generate text with a model (no constraint).
    Generate(generate::GenerateArgs),
    /// List or fetch the models formwork knows.
    Models(models::ModelsArgs),
    /// Validate a JSON text against a schema (and its x-formwork-rules).
    Validate(validate::ValidateArgs),
    /// Compile a schema into a token automaton; report size, time or the unsupported keyword.
    Compile(compile::CompileArgs),
    /// Extract a validated JSON value from a document (or a JSONL batch).
    Extract(extract::ExtractArgs),
    /// Measure masked against free decoding on a labelled dataset.
    Bench(bench::BenchArgs),
    /// Serve the model over an OpenAI-compatible HTTP API (structured output enforced).
    Serve(serve::ServeArgs),
}

/// Parse the command line and run the subcommand.
pub fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Generate(a) => generate::run(a),
        Command::Models(a) => models::run(a),
        Command::Validate(a) => validate::run(a),
        Command::Compile(a) => compile::run(a),
        Command::Extract(a) => extract::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Serve(a) => serve::run(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ground::GroundMode;

    fn extract(args: &[&str]) -> extract::ExtractArgs {
        let mut argv = vec!["formwork", "extract", "--schema", "s.json"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Extract(a) => a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn extract_defaults_are_three_bm25_shots_and_distinct_grounding() {
        let a = extract(&[]);
        assert_eq!(a.shots, None, "DEFAULT_SHOTS applies");
        assert_eq!(extract::DEFAULT_SHOTS, 3);
        assert_eq!(a.pick, PickArg::Bm25);
        assert_eq!(a.grounded, GroundArg(Some(GroundMode::Distinct)));
        assert_eq!(
            extract(&["--grounded"]).grounded,
            GroundArg(Some(GroundMode::Stated))
        );
        assert_eq!(extract(&["--grounded=off"]).grounded, GroundArg(None));
        assert_eq!(extract(&["--shots", "all"]).shots, Some(ShotsArg::All));
        assert_eq!(extract(&["--shots", "5"]).shots, Some(ShotsArg::Count(5)));
        let bad = ["--shots", "most"];
        let mut argv = vec!["formwork", "extract", "--schema", "s.json"];
        argv.extend_from_slice(&bad);
        assert!(Cli::try_parse_from(argv).is_err());
    }

    #[test]
    fn bench_grounds_as_extract_does_by_default() {
        let bench = |args: &[&str]| {
            let mut argv = vec!["formwork", "bench", "--dataset", "d.jsonl"];
            argv.extend_from_slice(args);
            match Cli::try_parse_from(argv).unwrap().command {
                Command::Bench(b) => b.grounded,
                _ => unreachable!(),
            }
        };
        assert_eq!(bench(&[]), extract(&[]).grounded);
        assert_eq!(bench(&["--grounded"]), GroundArg(Some(GroundMode::Stated)));
        assert_eq!(bench(&["--grounded=off"]), GroundArg(None));
    }

    #[test]
    fn fill_above_is_a_probability_weighing_on_by_default() {
        let a = extract(&[]);
        assert_eq!(a.fill_above, crate::engine::DEFAULT_FILL_ABOVE);
        assert!(!a.no_weigh_nulls);
        assert_eq!(extract(&["--fill-above", "1"]).fill_above, 1.0);
        for bad in ["2", "most"] {
            let argv = [
                "formwork",
                "extract",
                "--schema",
                "s.json",
                "--fill-above",
                bad,
            ];
            let e = Cli::try_parse_from(argv).expect_err("refused");
            assert!(e.to_string().contains("--fill-above"), "{e}");
        }
    }
}
