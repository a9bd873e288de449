//! `formwork serve`: the OpenAI-compatible server (see `crate::serve` and README,
//! "Serving"). This file only turns flags into a `ServeConfig`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use formwork_models::registry::DEFAULT_MODEL;

use super::seconds;
use crate::serve::{self, ServeConfig};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// A registry name, a path to a .gguf file, or a Hugging Face repo id in the local cache.
    #[arg(long, env = "FORMWORK_MODEL", default_value = DEFAULT_MODEL)]
    pub model: String,
    /// The address to listen on: loopback unless told otherwise.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port (0 picks a free one; the `listening` log line names it).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Requests decoded at once, each on an engine thread of its own (weights shared).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub parallel: u16,
    /// Requests that may wait for an engine thread (at most 1000000); one more is
    /// answered 503.
    #[arg(long, default_value_t = 16)]
    pub max_queue: usize,
    /// Schemas compiled at once; the default is the number of cores.
    #[arg(long)]
    pub compile_slots: Option<usize>,
    /// Require `Authorization: Bearer KEY` on every route but /health.
    #[arg(long, env = "FORMWORK_API_KEY")]
    pub api_key: Option<String>,
    /// The largest request body in bytes (413 above it).
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// Seconds a request may take from arrival (its headers read), the body's upload,
    /// queue and compile included, 0 for no limit. A body not in by then is a 408; an
    /// answer cut by it has `finish_reason: "length"` and `incomplete_reason: "timeout"`.
    #[arg(long, default_value_t = 600.0)]
    pub request_timeout: f64,
    /// Seconds a client may take to send a request's headers (and an idle
    /// connection may wait for the next request), 0 for no limit; then the
    /// connection is closed.
    #[arg(long, default_value_t = 30.0)]
    pub header_timeout: f64,
    /// Append the JSON-lines log here instead of stderr (no prompt or output content).
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Seconds running requests may go on after SIGINT/SIGTERM.
    #[arg(long, default_value_t = 30.0)]
    pub grace: f64,
    /// Seconds between `: ping` comments on a stream.
    #[arg(long, default_value_t = 10.0, hide = true)]
    pub keep_alive: f64,
    /// Nats added to a tool call where it competes with answering, at a turn's start:
    /// negative answers more often where no tool fits (docs/serving.md, "Tools").
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub call_bias: f32,
    /// Nats added to one more call where it competes with ending the turn after a call.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub more_calls_bias: f32,
    /// Thought tokens at most for a request that asks for no `reasoning_effort`, on a
    /// model with think markers (Qwen3, DeepSeek-R1 distills); 0: answer without thought.
    /// Default: not asked (the template as it is). Above 0 on a model without markers the
    /// server refuses to start.
    #[arg(long)]
    pub think_budget: Option<usize>,
    #[command(flatten)]
    pub load: super::LoadArgs,
}

/// A bias in nats: any finite number.
fn finite(flag: &str, x: f32) -> anyhow::Result<f32> {
    anyhow::ensure!(x.is_finite(), "--{flag}: {x} is not a finite number");
    Ok(x)
}

/// A time limit: `s` seconds, or none for 0.
fn limit(flag: &str, s: f64) -> anyhow::Result<Option<Duration>> {
    let d = seconds(flag, s)?;
    Ok((!d.is_zero()).then_some(d))
}

pub fn run(a: ServeArgs) -> anyhow::Result<ExitCode> {
    let cfg = ServeConfig {
        model: a.model,
        load: a.load.options()?,
        host: a.host,
        port: a.port,
        parallel: a.parallel as usize,
        max_queue: a.max_queue,
        api_key: a.api_key.filter(|k| !k.is_empty()),
        max_body_bytes: a.max_body_bytes,
        request_timeout: limit("request-timeout", a.request_timeout)?,
        header_timeout: limit("header-timeout", a.header_timeout)?,
        compile_slots: a.compile_slots.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        }),
        log: a.log,
        grace: seconds("grace", a.grace)?,
        keep_alive: seconds("keep-alive", a.keep_alive)?.max(Duration::from_millis(100)),
        call_bias: crate::engine::chat::CallBias {
            open: finite("call-bias", a.call_bias)?,
            more: finite("more-calls-bias", a.more_calls_bias)?,
        },
        think_budget: a.think_budget,
    };
    serve::run(cfg)?;
    Ok(ExitCode::SUCCESS)
}
