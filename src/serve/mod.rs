//! `formwork serve`: an OpenAI-compatible HTTP server over the engine. Only this
//! module knows HTTP (tokio, axum, tower-http, the `metrics` crates).
//!
//! ```text
//! connection (listen.rs: hyper, --header-timeout) ─▶ frame (routes.rs: request id,
//!   API key, error shape, JSON-lines log, metrics) ─▶ handler (chat.rs, responses.rs):
//!   the body within --request-timeout, else 408 ─▶ parse (request.rs)
//!   ─▶ admission.rs: admission (a semaphore of --parallel + --max-queue permits,
//!      else 503) ─▶ schema: cache hit, or a compile slot (--compile-slots) and a
//!      compile on the blocking pool (schemas.rs) ─▶ budget check ─▶ job queue
//!   ─▶ engine thread (pool.rs, Engine::chat; the deadline and the client checked
//!      every 256 prompt tokens and every step) ─▶ JSON response, or SSE chunks as
//!      the text grows (answer.rs, and each shape's file)
//! ```
//!
//! The socket is bound before the model loads: `/health` answers 503 until the
//! engines are ready. Every failure is an OpenAI error object (error.rs); a layer
//! that answers on its own (axum's 404/405, the body limit's 413, a caught panic's
//! 500) has its body rewritten into that shape by `frame`.

mod admission;
mod answer;
mod chat;
pub mod error;
mod listen;
pub mod pool;
pub mod request;
mod responses;
mod routes;
pub use routes::{OPEN_ROUTES, ROUTES, TEST_ROUTES};
pub mod schemas;

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use formwork_grammar::toktrie::TokTrie;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use crate::engine::chat::ANY_OBJECT_SCHEMA;
use crate::engine::{Engine, VerdictKind};
use pool::Pool;
use schemas::{Compiled, SchemaCache, ToolCache};

/// Output tokens when the request names no budget (the context bounds it too).
pub const DEFAULT_MAX_TOKENS: usize = 1024;

/// The buckets (seconds) of `formwork_http_request_duration_seconds`: from a cached
/// `/health` to a long answer on a small CPU.
const LATENCY_BUCKETS_S: &[f64] = &[
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Everything `formwork serve` is told on its command line.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub model: String,
    /// `--device` and `--kv-cache`.
    pub load: formwork_models::runtime::LoadOptions,
    pub host: String,
    pub port: u16,
    pub parallel: usize,
    pub max_queue: usize,
    pub api_key: Option<String>,
    pub max_body_bytes: usize,
    /// From a request's arrival (its headers read) to its answer, the body's upload,
    /// the queue and the compile included; None: no limit.
    pub request_timeout: Option<Duration>,
    /// From a connection's first byte of a request (or the end of the one before) to
    /// the end of its headers; None: no limit.
    pub header_timeout: Option<Duration>,
    /// Schemas compiled at once (the compile semaphore before the blocking pool).
    pub compile_slots: usize,
    pub log: Option<PathBuf>,
    /// How long running requests may go on after SIGINT/SIGTERM.
    pub grace: Duration,
    /// Seconds between `: ping` comments on a stream.
    pub keep_alive: Duration,
    /// How tool turns lean between a call and an answer, and another call and the end.
    pub call_bias: crate::engine::chat::CallBias,
    /// `--think-budget`: the thought budget of a request that names none (None: the
    /// model is not asked to think unless the request asks).
    pub think_budget: Option<usize>,
}

/// The loaded side: set once the model is ready.
struct Ready {
    pool: Pool,
    trie: Arc<TokTrie>,
    model_id: String,
    context: usize,
    any_object: Arc<Compiled>,
}

struct AppState {
    cfg: ServeConfig,
    ready: OnceLock<Ready>,
    permits: Arc<Semaphore>,
    cache: Arc<SchemaCache>,
    tools: Arc<ToolCache>,
    log: Mutex<Box<dyn Write + Send>>,
    metrics: PrometheusHandle,
    test_hooks: bool,
    created: u64,
}

type Shared = Arc<AppState>;

/// The id of one request, also sent back as `x-request-id`.
#[derive(Clone, Debug)]
struct RequestId(String);

/// What a handler adds to the request's log line (never content).
#[derive(Clone, Debug, Default)]
struct LogInfo {
    prompt_tokens: usize,
    completion_tokens: usize,
    cached_tokens: usize,
    finish_reason: Option<&'static str>,
    schema_sha256: Option<String>,
    cache_hit: Option<bool>,
    verdict: Option<VerdictKind>,
    error_code: Option<&'static str>,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn new_request_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// The largest `--max-queue`: a queue this long already holds more requests than a
/// server answers in hours, and the admission semaphore cannot count much further.
pub const MAX_QUEUE: usize = 1_000_000;

impl ServeConfig {
    /// The configuration's own limits, checked before anything starts.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.max_queue > MAX_QUEUE {
            anyhow::bail!("--max-queue {}: at most {MAX_QUEUE}", self.max_queue);
        }
        if self.compile_slots == 0 {
            anyhow::bail!("--compile-slots 0: at least 1");
        }
        Ok(())
    }
}

/// The lock, also when a thread panicked holding it: every value the server keeps
/// behind a lock (a cache map, the log, the job queue) is whole between statements,
/// so a panic leaves nothing half-written, and one panic must not fail every later
/// request.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Test hook: poisons `m` (a thread panics holding it).
#[cfg(debug_assertions)]
pub(crate) fn poison<T: ?Sized + Send>(m: &Mutex<T>) {
    std::thread::scope(|s| {
        let _ = s
            .spawn(|| {
                let _held = m.lock();
                panic!("test hook: a panic holding a lock");
            })
            .join();
    });
}

/// Run the server until SIGINT/SIGTERM and the grace period after it.
pub fn run(cfg: ServeConfig) -> anyhow::Result<()> {
    cfg.check()?;
    formwork_models::runtime::configure_threads(None);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(listen::serve(cfg))
}

fn load(cfg: &ServeConfig) -> anyhow::Result<Ready> {
    let loaded = crate::load_model_with(&cfg.model, cfg.load)?;
    let model_id = loaded.name.clone();
    let context = loaded.context_length;
    if let Some(n) = cfg.think_budget.filter(|&n| n > 0) {
        let tok = &loaded.tokenizer;
        anyhow::ensure!(
            crate::engine::think::ThinkMarkers::find(tok.chat_template(), tok.token_bytes())
                .is_some(),
            "--think-budget {n}: the model {} has no think markers in its chat template or vocabulary",
            loaded.name
        );
    }
    let engine = Engine::new(loaded);
    let trie = engine.trie().clone();
    let mut any = crate::engine::Schema::new(serde_json::from_str(ANY_OBJECT_SCHEMA)?)?;
    let grammar = any.grammar()?;
    let min_tokens = formwork_grammar::matcher::Matcher::new(grammar.clone(), trie.clone())
        .min_completion_tokens();
    let any_object = Arc::new(Compiled {
        sha256: any.sha256.clone(),
        value: any.value.clone(),
        grammar,
        validator: any.validator,
        min_tokens,
        compile_ms: 0.0,
    });
    let pool = Pool::start(engine, cfg.parallel);
    Ok(Ready {
        pool,
        trie,
        model_id,
        context,
        any_object,
    })
}

fn log_event(state: &AppState, mut v: Value) {
    if let Value::Object(m) = &mut v {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let mut out = serde_json::Map::new();
        out.insert("ts".into(), json!((ts * 1000.0).round() / 1000.0));
        out.extend(std::mem::take(m));
        v = Value::Object(out);
    }
    let mut w = lock(&state.log);
    let mut line = serde_json::to_vec(&v).unwrap_or_default();
    line.push(b'\n');
    let _ = w.write_all(&line);
    let _ = w.flush();
}
