//! `formwork generate`: plain text generation, no constraint.
//!
//! prompt (+ system) -> the model's own chat template when the GGUF has one, else the raw
//! prompt -> token ids (BOS first when the file asks for it) -> one prefill forward -> sample,
//! print, forward one token, until EOS or `--max-tokens`. Output streams through
//! `TokenStream`, so a character split over several tokens prints once, whole.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use formwork_models::chat::{render_chat, ChatMessage};
use formwork_models::registry::DEFAULT_MODEL;
use formwork_models::runtime;

use crate::sampling::{Sampler, Sampling};
use formwork_models::tokenizer::TokenStream;

#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// The user's prompt.
    #[arg(long)]
    pub prompt: String,
    /// A system message (only for models with a chat template).
    #[arg(long)]
    pub system: Option<String>,
    /// A registry name (see `formwork models list`), a path to a .gguf file, or a Hugging
    /// Face repo id (`org/name` or `org/name:FILE.gguf`) already in the local hf-hub cache.
    #[arg(long, env = "FORMWORK_MODEL", default_value = DEFAULT_MODEL)]
    pub model: String,
    /// The most tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 picks the most likely token every time (greedy).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Nucleus sampling: keep the smallest set of tokens whose probability reaches P.
    #[arg(long)]
    pub top_p: Option<f64>,
    /// Seed of the sampler (the output is reproducible for a given seed).
    #[arg(long, default_value_t = 299792458)]
    pub seed: u64,
    #[command(flatten)]
    pub load: super::LoadArgs,
    /// CPU threads (default: CANDLE_NUM_THREADS, else one per physical core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print load time, prefill and decode tokens/s to stderr.
    #[arg(long)]
    pub verbose: bool,
    /// Keep generating past EOS until --max-tokens (for benchmarks: a fixed decode length).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Write the logits of every step to PATH.f32 (little-endian f32, one row of `vocab`
    /// per step: the prompt's last position, then each generated token's) and the token ids
    /// to PATH.json, to compare devices (scripts/gpu-check).
    #[arg(long, value_name = "PATH")]
    pub dump_logits: Option<PathBuf>,
}

/// `--dump-logits`: the rows go to the .f32 file as they come, the ids to the .json at the end.
struct LogitsDump {
    prefix: PathBuf,
    rows: std::io::BufWriter<std::fs::File>,
    steps: usize,
}

impl LogitsDump {
    fn create(prefix: &Path) -> anyhow::Result<Self> {
        let path = with_suffix(prefix, "f32");
        let file = std::fs::File::create(&path)
            .with_context(|| format!("--dump-logits: cannot create {}", path.display()))?;
        Ok(Self {
            prefix: prefix.to_path_buf(),
            rows: std::io::BufWriter::new(file),
            steps: 0,
        })
    }

    fn row(&mut self, logits: &[f32]) -> anyhow::Result<()> {
        for x in logits {
            self.rows.write_all(&x.to_le_bytes())?;
        }
        self.steps += 1;
        Ok(())
    }

    fn finish(mut self, meta: serde_json::Value) -> anyhow::Result<()> {
        self.rows.flush()?;
        let path = with_suffix(&self.prefix, "json");
        std::fs::write(&path, serde_json::to_vec_pretty(&meta)?)
            .with_context(|| format!("--dump-logits: cannot write {}", path.display()))?;
        Ok(())
    }
}

fn with_suffix(prefix: &Path, ext: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// Microseconds per item of `total` over `n` (0 when `n` is 0).
fn per_copy(total: std::time::Duration, n: u64) -> f64 {
    if n == 0 {
        0.0
    } else {
        total.as_secs_f64() * 1e6 / n as f64
    }
}

pub fn run(args: GenerateArgs) -> anyhow::Result<ExitCode> {
    // Before candle starts its thread pool.
    runtime::configure_threads(args.threads);
    let options = args.load.options()?;
    if !(args.temperature >= 0.0) {
        anyhow::bail!("--temperature {}: must be 0 or more", args.temperature);
    }
    if let Some(p) = args.top_p {
        if !(p > 0.0 && p <= 1.0) {
            anyhow::bail!("--top-p {p}: must be in (0, 1]");
        }
    }

    let t_load = Instant::now();
    let mut loaded = runtime::load_with(&args.model, options)?;
    let load_s = t_load.elapsed().as_secs_f64();
    if let Some(note) = &loaded.device_note {
        eprintln!("{note}");
    }
    let tok = &loaded.tokenizer;

    let text = match tok.chat_template() {
        Some(template) => {
            let mut messages = Vec::new();
            if let Some(system) = &args.system {
                messages.push(ChatMessage {
                    role: "system".into(),
                    content: system.clone(),
                });
            }
            messages.push(ChatMessage {
                role: "user".into(),
                content: args.prompt.clone(),
            });
            let bos = tok.bos_id().and_then(|id| tok.token_text(id)).unwrap_or("");
            let eos = tok
                .eos_ids()
                .first()
                .and_then(|&id| tok.token_text(id))
                .unwrap_or("");
            render_chat(template, &messages, true, bos, eos).with_context(|| {
                format!("rendering the chat template of {}", loaded.path.display())
            })?
        }
        None => {
            eprintln!(
                "note: {} has no chat template (a base model): using the raw prompt{}",
                loaded.name,
                if args.system.is_some() {
                    "; --system is ignored"
                } else {
                    ""
                }
            );
            args.prompt.clone()
        }
    };
    let mut ids = Vec::new();
    if tok.add_bos() {
        if let Some(bos) = tok.bos_id() {
            // A template that writes the BOS text itself already produced it.
            if !text.starts_with(tok.token_text(bos).unwrap_or("\u{0}")) {
                ids.push(bos);
            }
        }
    }
    ids.extend(tok.encode(&text)?);
    if ids.is_empty() {
        anyhow::bail!("--prompt: the prompt is empty after tokenisation; give some text");
    }
    if ids.len() >= loaded.context_length {
        anyhow::bail!(
            "--prompt: {} tokens, the context length of {} is {}; shorten the prompt",
            ids.len(),
            loaded.name,
            loaded.context_length
        );
    }
    let max_tokens = args.max_tokens.min(loaded.context_length - ids.len());

    let mut sampler = Sampler::new(
        Sampling::from_args(Some(args.temperature), args.top_p),
        args.seed,
    );
    let mut stream = TokenStream::new(tok);
    let eos = tok.eos_ids().to_vec();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();

    let mut dump = args
        .dump_logits
        .as_deref()
        .map(LogitsDump::create)
        .transpose()?;
    let mut sampled = Vec::new();
    let t_prefill = Instant::now();
    let mut logits = loaded.model.forward(&ids, 0)?;
    let prefill_s = t_prefill.elapsed().as_secs_f64();
    let after_prefill = loaded.model.timings();
    let mut pos = ids.len();

    let t_decode = Instant::now();
    let mut generated = 0usize;
    let mut decode_forwards = 0usize;
    while generated < max_tokens {
        let next = sampler
            .sample(&logits, |_| true)
            .ok_or_else(|| anyhow::anyhow!("the model gave no finite logit to sample from"))?;
        generated += 1;
        sampled.push(next);
        if let Some(d) = dump.as_mut() {
            d.row(&logits)?;
        }
        if eos.contains(&next) && !args.ignore_eos {
            break;
        }
        if !tok.is_special(next) {
            if let Some(s) = stream.push(next) {
                out.write_all(s.as_bytes())?;
                out.flush()?;
            }
        }
        if generated == max_tokens {
            break;
        }
        logits = loaded.model.forward(&[next], pos)?;
        decode_forwards += 1;
        pos += 1;
    }
    if let Some(s) = stream.finish() {
        out.write_all(s.as_bytes())?;
    }
    out.write_all(b"\n")?;
    out.flush()?;
    let decode_s = t_decode.elapsed().as_secs_f64();
    if let Some(d) = dump {
        d.finish(serde_json::json!({
            "model": loaded.name,
            "arch": loaded.arch,
            "device": format!("{:?}", loaded.device),
            "vocab": logits.len(),
            "steps": sampled.len(),
            "prompt_tokens": ids,
            "tokens": sampled,
        }))?;
    }

    if args.verbose {
        let per_s = |n: usize, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
        eprintln!(
            "model {} ({}, {}) loaded in {:.2} s on {:?}, KV cache {:?}",
            loaded.name,
            loaded.arch,
            loaded.path.display(),
            load_s,
            loaded.device,
            loaded.kv
        );
        eprintln!(
            "prefill: {} tokens in {:.3} s = {:.1} tok/s",
            ids.len(),
            prefill_s,
            per_s(ids.len(), prefill_s)
        );
        eprintln!(
            "decode: {} tokens ({} forwards) in {:.3} s = {:.1} tok/s",
            generated,
            decode_forwards,
            decode_s,
            per_s(decode_forwards, decode_s)
        );
        let all = loaded.model.timings();
        if all.forwards > 0 {
            let decode_n = all.forwards - after_prefill.forwards;
            let decode_host = all.to_host - after_prefill.to_host;
            let decode_compute = all.compute - after_prefill.compute;
            eprintln!(
                "logits to host: {} copies of {} KB, {:.1} us each; decode: {:.1} us per copy against {:.1} us of compute per forward",
                all.forwards,
                all.to_host_bytes / all.forwards / 1024,
                all.to_host_us_mean(),
                per_copy(decode_host, decode_n),
                per_copy(decode_compute, decode_n),
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
