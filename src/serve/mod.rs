//! `formwork serve`: an OpenAI-compatible HTTP server over the engine. Only this
//! module knows HTTP (tokio, axum, tower-http, the `metrics` crates).
//!
//! ```text
//! request ─▶ frame (request id, API key, error shape, JSON-lines log, metrics)
//!   ─▶ handler: parse (request.rs) ─▶ schema: cache hit, or compile on the blocking
//!      pool (schemas.rs) ─▶ budget check ─▶ admission (a semaphore of
//!      --parallel + --max-queue permits, else 503) ─▶ job queue ─▶ engine thread
//!      (pool.rs, Engine::chat) ─▶ JSON response, or SSE chunks as the text grows
//! ```
//!
//! The socket is bound before the model loads: `/health` answers 503 until the
//! engines are ready. Every failure is an OpenAI error object (error.rs); a layer
//! that answers on its own (axum's 404/405, the body limit's 413, a caught panic's
//! 500) has its body rewritten into that shape by `frame`.

pub mod error;
pub mod pool;
pub mod request;
pub mod schemas;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use formwork_grammar::toktrie::TokTrie;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{json, Value};
use tokio::sync::{mpsc as tmpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use crate::engine::chat::{ChatAnswer, ChatError, ChatOptions, ANY_OBJECT_SCHEMA};
use crate::engine::decode::Stop;
use crate::engine::tools::{TurnEvent, TurnStream};
use crate::engine::{Engine, VerdictKind};
use crate::sampling::Sampling;
use error::{ApiError, Shaped};
use pool::{Job, JobError, Pool};
use request::{ChatRequest, Format};
use schemas::{Compiled, CompiledTools, SchemaCache, ToolCache};

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
    pub request_timeout: Option<Duration>,
    pub log: Option<PathBuf>,
    /// How long running requests may go on after SIGINT/SIGTERM.
    pub grace: Duration,
    /// Seconds between `: ping` comments on a stream.
    pub keep_alive: Duration,
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

/// Run the server until SIGINT/SIGTERM and the grace period after it.
pub fn run(cfg: ServeConfig) -> anyhow::Result<()> {
    formwork_models::runtime::configure_threads(None);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(serve(cfg))
}

async fn serve(cfg: ServeConfig) -> anyhow::Result<()> {
    let addr: SocketAddr = format!("{}:{}", cfg.host, cfg.port)
        .parse()
        .or_else(|_| {
            std::net::ToSocketAddrs::to_socket_addrs(&(cfg.host.as_str(), cfg.port))
                .ok()
                .and_then(|mut a| a.next())
                .ok_or(())
        })
        .map_err(|_| anyhow::anyhow!("--host {}: not an address or a host name", cfg.host))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    let log: Box<dyn Write + Send> = match &cfg.log {
        Some(p) => Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| anyhow::anyhow!("--log {}: {e}", p.display()))?,
        ),
        None => Box::new(std::io::stderr()),
    };
    // Buckets, so the request durations are Prometheus histograms (`_bucket{le=…}`,
    // `_sum`, `_count`) that a scraper can aggregate, not client-side summaries.
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(LATENCY_BUCKETS_S)
        .map_err(|e| anyhow::anyhow!("metrics buckets: {e}"))?
        .install_recorder()
        .map_err(|e| anyhow::anyhow!("metrics recorder: {e}"))?;
    let state: Shared = Arc::new(AppState {
        permits: Arc::new(Semaphore::new(cfg.parallel.max(1) + cfg.max_queue)),
        cache: Arc::new(SchemaCache::new(256)),
        tools: Arc::new(ToolCache::new(256)),
        ready: OnceLock::new(),
        log: Mutex::new(log),
        metrics,
        test_hooks: std::env::var("FORMWORK_SERVE_TEST_HOOKS").as_deref() == Ok("1"),
        created: unix_now(),
        cfg: cfg.clone(),
    });
    log_event(
        &state,
        json!({"event": "listening", "addr": local.to_string(), "model": cfg.model}),
    );

    // Load the model off the runtime; /health says 503 until it is done.
    {
        let state = state.clone();
        std::thread::spawn(move || match load(&state.cfg) {
            Ok(ready) => {
                let id = ready.model_id.clone();
                let _ = state.ready.set(ready);
                log_event(&state, json!({"event": "ready", "model": id}));
            }
            Err(e) => {
                log_event(
                    &state,
                    json!({"event": "load_failed", "error": format!("{e:#}")}),
                );
                eprintln!("error: loading model {}: {e:#}", state.cfg.model);
                std::process::exit(2);
            }
        });
    }

    let app = router(state.clone());
    let shutting_down = Arc::new(AtomicBool::new(false));
    let (tx_signal, rx_signal) = oneshot::channel::<()>();
    {
        let flag = shutting_down.clone();
        let state = state.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            flag.store(true, Ordering::SeqCst);
            log_event(
                &state,
                json!({"event": "shutdown", "grace_s": state.cfg.grace.as_secs_f64()}),
            );
            let _ = tx_signal.send(());
        });
    }
    let (tx_grace, rx_grace) = oneshot::channel::<()>();
    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        let _ = rx_signal.await;
        let _ = tx_grace.send(());
    });
    let server = std::future::IntoFuture::into_future(server);
    let grace = cfg.grace;
    tokio::select! {
        r = server => r.map_err(|e| anyhow::anyhow!("server: {e}"))?,
        _ = async {
            let _ = rx_grace.await;
            tokio::time::sleep(grace).await;
        } => {
            log_event(&state, json!({"event": "grace_expired"}));
        }
    }
    log_event(&state, json!({"event": "stopped"}));
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

fn load(cfg: &ServeConfig) -> anyhow::Result<Ready> {
    let loaded = crate::load_model_with(&cfg.model, cfg.load)?;
    let model_id = loaded.name.clone();
    let context = loaded.context_length;
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

fn router(state: Shared) -> Router {
    let mut r = Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics_text))
        .route("/openapi.json", get(openapi))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model_by_id))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses));
    if state.test_hooks {
        r = r.route("/__test/panic", post(test_panic));
    }
    r.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(state.cfg.max_body_bytes))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                metrics::counter!("formwork_panics_total").increment(1);
                ApiError::internal("internal error: a handler panicked; the server keeps serving")
                    .into_response()
            },
        ))
        .layer(middleware::from_fn_with_state(state.clone(), frame))
        .with_state(state)
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
    if let Ok(mut w) = state.log.lock() {
        let mut line = serde_json::to_vec(&v).unwrap_or_default();
        line.push(b'\n');
        let _ = w.write_all(&line);
        let _ = w.flush();
    }
}

/// Every request passes here: a request id, the API key, errors in the OpenAI
/// shape, one JSON log line, metrics.
async fn frame(State(state): State<Shared>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = new_request_id();
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    req.extensions_mut().insert(RequestId(id.clone()));
    let mut resp = match authorize(&state, &req) {
        Err(e) => e.into_response(),
        Ok(()) => next.run(req).await,
    };
    let status = resp.status();
    if status.as_u16() >= 400 && resp.extensions().get::<Shaped>().is_none() {
        // A layer answered on its own: give the body the OpenAI shape.
        let e = ApiError::for_status(status, &method, &path, state.cfg.max_body_bytes);
        let info = resp.extensions().get::<LogInfo>().cloned();
        resp = e.into_response();
        if let Some(i) = info {
            resp.extensions_mut().insert(i);
        }
    }
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    let info = resp
        .extensions()
        .get::<LogInfo>()
        .cloned()
        .unwrap_or_default();
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let route = match path.as_str() {
        "/health"
        | "/metrics"
        | "/openapi.json"
        | "/v1/models"
        | "/v1/chat/completions"
        | "/v1/responses" => path.clone(),
        p if p.starts_with("/v1/models/") => "/v1/models/{id}".into(),
        _ => "other".into(),
    };
    metrics::counter!("formwork_http_requests_total", "route" => route.clone(), "status" => status.as_u16().to_string())
        .increment(1);
    metrics::histogram!("formwork_http_request_duration_seconds", "route" => route)
        .record(ms / 1000.0);
    if path != "/health" && path != "/metrics" {
        log_event(
            &state,
            json!({
                "event": "request",
                "request_id": id,
                "method": method,
                "path": path,
                "status": status.as_u16(),
                "ms": (ms * 10.0).round() / 10.0,
                "prompt_tokens": info.prompt_tokens,
                "completion_tokens": info.completion_tokens,
                "cached_tokens": info.cached_tokens,
                "finish_reason": info.finish_reason,
                "schema_sha256": info.schema_sha256,
                "cache_hit": info.cache_hit,
                "verdict": info.verdict,
                "error_code": info.error_code.or_else(|| if status.as_u16() >= 400 { Some("error") } else { None }),
            }),
        );
    }
    resp
}

fn authorize(state: &AppState, req: &Request) -> Result<(), ApiError> {
    let Some(key) = &state.cfg.api_key else {
        return Ok(());
    };
    if req.uri().path() == "/health" {
        return Ok(());
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    match given {
        Some(g) if constant_time_eq(g.as_bytes(), key.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "invalid_api_key",
            "Incorrect API key provided.",
        )),
        None => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "invalid_api_key",
            "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'.",
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn not_found(req: Request) -> ApiError {
    ApiError::for_status(
        StatusCode::NOT_FOUND,
        req.method().as_str(),
        req.uri().path(),
        0,
    )
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::for_status(
        StatusCode::METHOD_NOT_ALLOWED,
        req.method().as_str(),
        req.uri().path(),
        0,
    )
}

async fn test_panic() -> Response {
    panic!("test hook: a panic inside a handler");
}

fn loading() -> ApiError {
    ApiError::unavailable(
        "model_loading",
        "The model is still loading; retry shortly.",
        2,
    )
}

async fn health(State(state): State<Shared>) -> Response {
    match state.ready.get() {
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "2")],
            axum::Json(json!({"status": "loading", "model": state.cfg.model})),
        )
            .into_response(),
        Some(r) => {
            let total = state.cfg.parallel.max(1) + state.cfg.max_queue;
            let in_use = total - state.permits.available_permits();
            let running = r.pool.running.load(Ordering::SeqCst);
            axum::Json(json!({
                "status": "ok",
                "model": r.model_id,
                "running": running,
                "waiting": in_use.saturating_sub(running),
            }))
            .into_response()
        }
    }
}

async fn metrics_text(State(state): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// The hand-written OpenAPI document (src/serve/openapi.json), with the served
/// model's id as the one value of `model`.
async fn openapi(State(state): State<Shared>) -> Response {
    let id = state
        .ready
        .get()
        .map_or(state.cfg.model.clone(), |r| r.model_id.clone());
    let id = serde_json::to_string(&id).unwrap_or_default();
    let doc = include_str!("openapi.json").replace("\"{{MODEL}}\"", &id);
    ([(header::CONTENT_TYPE, "application/json")], doc).into_response()
}

fn model_object(state: &AppState, id: &str) -> Value {
    json!({"id": id, "object": "model", "created": state.created, "owned_by": "formwork"})
}

async fn models(State(state): State<Shared>) -> Result<Response, ApiError> {
    let r = state.ready.get().ok_or_else(loading)?;
    Ok(
        axum::Json(json!({"object": "list", "data": [model_object(&state, &r.model_id)]}))
            .into_response(),
    )
}

fn model_not_found(id: &str) -> ApiError {
    let mut e = ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "model_not_found",
        format!(
            "The model '{}' does not exist; this server serves one model (GET /v1/models).",
            error::quote(id)
        ),
    );
    e.param = Some("model".into());
    e
}

async fn model_by_id(
    State(state): State<Shared>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let r = state.ready.get().ok_or_else(loading)?;
    if id != r.model_id {
        return Err(model_not_found(&id));
    }
    Ok(axum::Json(model_object(&state, &r.model_id)).into_response())
}

fn body_error(e: BytesRejection) -> ApiError {
    let status = e.status();
    let mut err = ApiError::for_status(status, "POST", "", 0);
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        err.message = format!("The request body is larger than the limit: {e}");
    } else {
        err.message = format!("Could not read the request body: {e}");
    }
    err
}

/// A request that has passed every check and holds its admission permit.
struct Admitted {
    req: ChatRequest,
    schema: Option<Arc<Compiled>>,
    /// The request's tools, compiled (None without tools).
    tools: Option<Arc<CompiledTools>>,
    cache_hit: Option<bool>,
    compile_ms: f64,
    model_id: String,
    context: usize,
    permit: OwnedSemaphorePermit,
    received: Instant,
}

/// Everything before the engine: model, format, schema, budget, admission.
async fn admit(state: &Shared, req: ChatRequest, received: Instant) -> Result<Admitted, ApiError> {
    let ready = state.ready.get().ok_or_else(loading)?;
    if req.model != ready.model_id {
        return Err(model_not_found(&req.model));
    }
    let (schema, cache_hit, compile_ms) = match &req.format {
        Format::Text => (None, None, 0.0),
        Format::JsonObject => (Some(ready.any_object.clone()), Some(true), 0.0),
        Format::Schema { name, schema } => {
            let (c, hit) = state
                .cache
                .get_or_compile(name, schema.clone(), ready.trie.clone())
                .await?;
            let ms = if hit { 0.0 } else { c.compile_ms };
            (Some(c), Some(hit), ms)
        }
    };
    let tools = if req.tools.is_empty() {
        None
    } else {
        let answer = schema
            .as_ref()
            .map(|c| (c.value.clone(), c.validator.clone()));
        let (t, _hit) = state
            .tools
            .get_or_compile(
                &req.tools,
                &req.tool_choice,
                req.parallel_tool_calls,
                answer,
                ready.trie.clone(),
            )
            .await?;
        Some(t)
    };
    if let (Some(t), Some((n, param))) = (&tools, req.max_tokens) {
        if n < t.min_tokens {
            return Err(ApiError::bad(
                "max_tokens_too_small",
                param,
                format!(
                    "'{param}' is {n}, but the shortest turn valid under tools and tool_choice takes {} tokens; give at least {}.",
                    t.min_tokens, t.min_tokens
                ),
            ));
        }
    }
    if let (Some(c), Some((n, param)), None) = (&schema, req.max_tokens, &tools) {
        if n < c.min_tokens {
            return Err(ApiError::bad(
                "max_tokens_too_small",
                param,
                format!(
                    "'{param}' is {n}, but the shortest answer valid under response_format takes {} tokens; give at least {}.",
                    c.min_tokens, c.min_tokens
                ),
            ));
        }
    }
    let permit = state.permits.clone().try_acquire_owned().map_err(|_| {
        metrics::counter!("formwork_rejected_queue_full_total").increment(1);
        ApiError::unavailable(
            "queue_full",
            format!(
                "The server is busy: {} running and {} waiting, the most it takes (--parallel {}, --max-queue {}); retry later.",
                state.cfg.parallel.max(1),
                state.cfg.max_queue,
                state.cfg.parallel.max(1),
                state.cfg.max_queue
            ),
            1,
        )
    })?;
    Ok(Admitted {
        model_id: ready.model_id.clone(),
        context: ready.context,
        req,
        schema,
        tools,
        cache_hit,
        compile_ms,
        permit,
        received,
    })
}

/// Sets the job's cancel flag when dropped (the handler's future was dropped: the
/// client went away), unless disarmed.
struct CancelOnDrop(Arc<AtomicBool>, bool);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.1 {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

fn submit(
    state: &Shared,
    a: &Admitted,
    deltas: Option<tmpsc::UnboundedSender<String>>,
) -> Result<
    (
        oneshot::Receiver<Result<ChatAnswer, JobError>>,
        Arc<AtomicBool>,
    ),
    ApiError,
> {
    let ready = state.ready.get().ok_or_else(loading)?;
    let (tx, rx) = oneshot::channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let panic = state.test_hooks
        && a.req
            .messages
            .iter()
            .any(|m| m.content == "__formwork_test_panic__");
    let job = Job {
        messages: a.req.messages.clone(),
        schema: a.schema.clone(),
        tools: a.tools.clone(),
        opts: ChatOptions {
            max_tokens: a.req.max_tokens.map_or(DEFAULT_MAX_TOKENS, |(n, _)| n),
            sampling: Sampling::from_args(a.req.temperature, a.req.top_p),
            seed: a.req.seed.unwrap_or(0),
            timeout: None,
            watch: None,
            schema_hint: a
                .schema
                .as_ref()
                .filter(|_| matches!(a.req.format, Format::Schema { .. }))
                .map(|c| c.value.clone()),
        },
        deadline: state.cfg.request_timeout.map(|t| a.received + t),
        cancel: cancel.clone(),
        deltas,
        reply: tx,
        panic,
    };
    ready
        .pool
        .submit(job)
        .map_err(|_| ApiError::internal("the engine threads are gone"))?;
    Ok((rx, cancel))
}

/// The engine's answer, or the error for the client.
fn answer_or_error(
    r: Result<Result<ChatAnswer, JobError>, oneshot::error::RecvError>,
) -> Result<ChatAnswer, ApiError> {
    match r {
        Err(_) => Err(ApiError::internal("the engine thread dropped the request")),
        Ok(Err(JobError::Panic(m))) => {
            metrics::counter!("formwork_panics_total").increment(1);
            Err(ApiError::internal(format!(
                "internal error in the engine ({m}); the server keeps serving"
            )))
        }
        Ok(Err(JobError::Dropped)) => Err(ApiError::unavailable(
            "request_timeout",
            "The request waited in the queue past --request-timeout; retry later.",
            1,
        )),
        Ok(Err(JobError::Chat(e))) => Err(match e {
            ChatError::ContextLength { .. } => {
                ApiError::bad("context_length_exceeded", "messages", e.to_string())
            }
            other => ApiError::bad("invalid_value", "messages", other.to_string()),
        }),
        Ok(Ok(a)) if a.verdict == VerdictKind::Error => Err(ApiError::internal(format!(
            "the model failed: {}",
            a.message.unwrap_or_default()
        ))),
        Ok(Ok(a)) => Ok(a),
    }
}

/// `finish_reason` and, for `length`, why.
fn finish_reason(a: &ChatAnswer, context: Option<usize>) -> (&'static str, Option<&'static str>) {
    let calls = a.tools.as_ref().is_some_and(|t| !t.calls.is_empty());
    match a.stop {
        Stop::Eos | Stop::Finished if calls => ("tool_calls", None),
        Stop::Eos | Stop::Finished => ("stop", None),
        Stop::Timeout => ("length", Some("timeout")),
        Stop::Cancelled => ("length", Some("cancelled")),
        Stop::Budget if a.verdict == VerdictKind::Incomplete => {
            let ctx = context.is_some_and(|c| a.tokens_prompt + a.tokens_completion >= c);
            (
                "length",
                Some(if ctx { "context_length" } else { "max_tokens" }),
            )
        }
        Stop::Budget if calls => ("tool_calls", None),
        Stop::Budget => ("stop", None),
    }
}

/// The id of call `i` of request `rid`: unique across requests.
fn call_id(rid: &str, i: usize) -> String {
    format!("call_{rid}_{i}")
}

/// The answer's `message` (chat completions): content, or `tool_calls` with null
/// content when the turn made calls.
fn chat_message(ans: &ChatAnswer, rid: &str) -> Value {
    match &ans.tools {
        Some(t) if !t.calls.is_empty() => {
            let calls: Vec<Value> = t
                .calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"id": call_id(rid, i), "type": "function",
                           "function": {"name": name, "arguments": args}})
                })
                .collect();
            json!({"role": "assistant", "content": t.content, "tool_calls": calls, "refusal": null})
        }
        Some(t) => {
            json!({"role": "assistant", "content": t.content.clone().unwrap_or_default(), "refusal": null})
        }
        None => json!({"role": "assistant", "content": ans.text, "refusal": null}),
    }
}

fn p50_us(ns: &[u64]) -> Option<f64> {
    if ns.is_empty() {
        return None;
    }
    let mut v = ns.to_vec();
    v.sort_unstable();
    Some((v[v.len() / 2] as f64 / 100.0).round() / 10.0)
}

fn formwork_object(a: &Admitted, ans: &ChatAnswer, incomplete: Option<&str>) -> Value {
    let errors: Vec<Value> = ans
        .errors
        .iter()
        .map(|e| json!({"loc": e.loc, "msg": e.msg, "type": e.r#type}))
        .collect();
    json!({
        "schema_sha256": a.schema.as_ref().map(|c| c.sha256.clone()),
        "compile_ms": (a.compile_ms * 1000.0).round() / 1000.0,
        "cache_hit": a.cache_hit,
        "tokens_forced": ans.tokens_forced,
        "mask_us_p50": p50_us(&ans.mask_ns),
        "verdict": if a.schema.is_some() || a.tools.is_some() { json!(ans.verdict) } else { Value::Null },
        "tools_sha256": a.tools.as_ref().map(|t| t.sha256.clone()),
        "errors": errors,
        "incomplete_reason": incomplete,
    })
}

fn usage(ans: &ChatAnswer) -> Value {
    json!({
        "prompt_tokens": ans.tokens_prompt,
        "completion_tokens": ans.tokens_completion,
        "total_tokens": ans.tokens_prompt + ans.tokens_completion,
        "prompt_tokens_details": {"cached_tokens": ans.tokens_cached},
        "completion_tokens_details": {"reasoning_tokens": 0},
    })
}

fn log_info(a: &Admitted, ans: Option<&ChatAnswer>, finish: Option<&'static str>) -> LogInfo {
    LogInfo {
        prompt_tokens: ans.map_or(0, |x| x.tokens_prompt),
        completion_tokens: ans.map_or(0, |x| x.tokens_completion),
        cached_tokens: ans.map_or(0, |x| x.tokens_cached),
        finish_reason: finish,
        schema_sha256: a.schema.as_ref().map(|c| c.sha256.clone()),
        cache_hit: a.cache_hit,
        verdict: ans.map(|x| x.verdict),
        error_code: None,
    }
}

fn record_tokens(ans: &ChatAnswer) {
    metrics::counter!("formwork_prompt_tokens_total").increment(ans.tokens_prompt as u64);
    metrics::counter!("formwork_completion_tokens_total").increment(ans.tokens_completion as u64);
    metrics::counter!("formwork_cached_prompt_tokens_total").increment(ans.tokens_cached as u64);
}

async fn chat_completions(
    State(state): State<Shared>,
    Extension(RequestId(rid)): Extension<RequestId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let body = body.map_err(body_error)?;
    let req = request::chat(&body)?;
    let a = admit(&state, req, received).await?;
    if a.req.stream {
        return stream(state, a, rid).await;
    }
    let (rx, cancel) = submit(&state, &a, None)?;
    let mut guard = CancelOnDrop(cancel, true);
    let ans = answer_or_error(rx.await)?;
    guard.1 = false;
    let (finish, incomplete) = finish_reason(&ans, Some(a.context));
    record_tokens(&ans);
    let body = json!({
        "id": format!("chatcmpl-{rid}"),
        "object": "chat.completion",
        "created": unix_now(),
        "model": a.model_id,
        "choices": [{
            "index": 0,
            "message": chat_message(&ans, &rid),
            "logprobs": null,
            "finish_reason": finish,
        }],
        "usage": usage(&ans),
        "system_fingerprint": concat!("formwork-", env!("CARGO_PKG_VERSION")),
        "formwork": formwork_object(&a, &ans, incomplete),
    });
    let mut r = axum::Json(body).into_response();
    r.extensions_mut()
        .insert(log_info(&a, Some(&ans), Some(finish)));
    Ok(r)
}

/// Chat-completion deltas from the growing text: content as it comes, or with tools,
/// each call's first delta (index, id, type, name) and then its argument pieces, as the
/// grammar's fixed wrapper shows where they are ([`TurnStream`]). With tools the role
/// rides on the first delta, so a turn that calls sends no content at all.
struct ChatDeltas {
    turn: TurnStream,
    rid: String,
    role_sent: bool,
}

impl ChatDeltas {
    fn new(tools: bool, rid: &str) -> ChatDeltas {
        ChatDeltas {
            turn: if tools {
                TurnStream::default()
            } else {
                TurnStream::content_only()
            },
            rid: rid.to_string(),
            role_sent: !tools,
        }
    }

    fn deltas(&mut self, text: &str) -> Vec<Value> {
        let events = self.turn.feed(text);
        self.convert(events)
    }

    /// The end of the output: text held back.
    fn finish(&mut self) -> Vec<Value> {
        let events = self.turn.finish();
        self.convert(events)
    }

    fn convert(&mut self, events: Vec<TurnEvent>) -> Vec<Value> {
        let mut out: Vec<Value> = events
            .into_iter()
            .filter_map(|ev| match ev {
                TurnEvent::Content(c) => Some(json!({ "content": c })),
                TurnEvent::CallStart { index, name } => Some(json!({"tool_calls": [{
                    "index": index, "id": call_id(&self.rid, index), "type": "function",
                    "function": {"name": name, "arguments": ""}}]})),
                TurnEvent::Arguments { index, piece } => Some(json!({"tool_calls": [{
                    "index": index, "function": {"arguments": piece}}]})),
                TurnEvent::CallEnd { .. } => None,
            })
            .collect();
        if !self.role_sent {
            if let Some(Value::Object(first)) = out.first_mut() {
                first.insert("role".into(), json!("assistant"));
                if !first.contains_key("content") {
                    first.insert("content".into(), Value::Null);
                }
                self.role_sent = true;
            }
        }
        out
    }

    /// The role delta, when no delta carried it (an empty answer).
    fn role_if_unsent(&mut self) -> Option<Value> {
        (!std::mem::replace(&mut self.role_sent, true))
            .then(|| json!({"role": "assistant", "content": ""}))
    }
}

/// The engine's answer as the job's channel gives it.
type JobResult = Result<Result<ChatAnswer, JobError>, oneshot::error::RecvError>;

/// Forwards the engine's text to an SSE stream as it grows, each piece through
/// `convert` (text to events), until the answer comes, then the pieces still in the
/// channel. Returns the answer and the text already converted; None when the client
/// went away.
async fn relay(
    mut drx: tmpsc::UnboundedReceiver<String>,
    mut rx: oneshot::Receiver<Result<ChatAnswer, JobError>>,
    etx: &tmpsc::Sender<Result<Event, std::convert::Infallible>>,
    mut convert: impl FnMut(&str) -> Vec<Event>,
) -> Option<(JobResult, String)> {
    let mut sent = String::new();
    let result = loop {
        tokio::select! {
            d = drx.recv() => match d {
                Some(text) => {
                    sent.push_str(&text);
                    for e in convert(&text) {
                        if etx.send(Ok(e)).await.is_err() {
                            return None;
                        }
                    }
                }
                None => break (&mut rx).await,
            },
            r = &mut rx => break r,
            _ = etx.closed() => return None,
        }
    };
    // Pieces still in the channel when the answer came.
    while let Ok(text) = drx.try_recv() {
        sent.push_str(&text);
        for e in convert(&text) {
            if etx.send(Ok(e)).await.is_err() {
                return None;
            }
        }
    }
    Some((result, sent))
}

/// The streamed answer: a role chunk, content chunks of whole UTF-8 text (or tool-call
/// deltas), a final chunk with `finish_reason` (and `usage`, asked for or not: clients
/// such as openai-agents only ask OpenAI for it), an optional usage chunk, then `[DONE]`.
async fn stream(state: Shared, a: Admitted, rid: String) -> Result<Response, ApiError> {
    let (dtx, drx) = tmpsc::unbounded_channel::<String>();
    let (rx, cancel) = submit(&state, &a, Some(dtx))?;
    let (etx, erx) = tmpsc::channel::<Result<Event, std::convert::Infallible>>(64);
    let id = format!("chatcmpl-{rid}");
    let created = unix_now();
    let model = a.model_id.clone();
    let chunk = move |delta: Value, finish: Value, usage: Option<Value>| {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": concat!("formwork-", env!("CARGO_PKG_VERSION")),
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        if let Some(u) = usage {
            c["usage"] = u;
        }
        c
    };
    let include_usage = a.req.include_usage;
    let info = log_info(&a, None, None);
    let mut deltas = ChatDeltas::new(a.tools.is_some(), &rid);
    tokio::spawn(async move {
        let guard = CancelOnDrop(cancel, true);
        let send = |v: Value| Ok(Event::default().data(v.to_string()));
        let usage_null = if include_usage {
            Some(Value::Null)
        } else {
            None
        };
        if !deltas.role_sent {
            // With tools the role waits for the first delta.
        } else if etx
            .send(send(chunk(
                json!({"role": "assistant", "content": ""}),
                Value::Null,
                usage_null.clone(),
            )))
            .await
            .is_err()
        {
            return;
        }
        let relayed = relay(drx, rx, &etx, |text| {
            deltas
                .deltas(text)
                .into_iter()
                .map(|d| {
                    Event::default().data(chunk(d, Value::Null, usage_null.clone()).to_string())
                })
                .collect()
        })
        .await;
        let Some((result, sent)) = relayed else {
            return;
        };
        match answer_or_error(result) {
            Err(e) => {
                let _ = etx.send(send(e.body())).await;
            }
            Ok(ans) => {
                record_tokens(&ans);
                let mut tail = Vec::new();
                if let Some(rest) = ans.text.strip_prefix(sent.as_str()) {
                    if !rest.is_empty() {
                        tail = deltas.deltas(rest);
                    }
                }
                tail.extend(deltas.finish());
                tail.extend(deltas.role_if_unsent());
                for delta in tail {
                    let _ = etx
                        .send(send(chunk(delta, Value::Null, usage_null.clone())))
                        .await;
                }
                let (finish, incomplete) = finish_reason(&ans, Some(a.context));
                let mut last = chunk(json!({}), json!(finish), usage_null.clone());
                last["formwork"] = formwork_object(&a, &ans, incomplete);
                if !include_usage {
                    last["usage"] = usage(&ans);
                }
                let _ = etx.send(send(last)).await;
                if include_usage {
                    let mut u = chunk(json!({}), Value::Null, Some(usage(&ans)));
                    u["choices"] = json!([]);
                    let _ = etx.send(send(u)).await;
                }
                let _ = etx.send(Ok(Event::default().data("[DONE]"))).await;
            }
        }
        let mut guard = guard;
        guard.1 = false;
        drop(a.permit);
    });
    let sse = Sse::new(tokio_stream::wrappers::ReceiverStream::new(erx))
        .keep_alive(KeepAlive::new().interval(state.cfg.keep_alive).text("ping"));
    let mut r = sse.into_response();
    r.extensions_mut().insert(info);
    Ok(r)
}

/// `POST /v1/responses`: the same path as chat completions, answered as a Response
/// object: `output` is a message with one `output_text`, or one `function_call` item
/// per call. Streamed, it is the Responses API's typed events.
async fn responses(
    State(state): State<Shared>,
    Extension(RequestId(rid)): Extension<RequestId>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let body = body.map_err(body_error)?;
    let req = request::responses(&body)?;
    let echo = ResponseEcho::of(&req);
    let a = admit(&state, req, received).await?;
    if a.req.stream {
        return responses_stream(state, a, rid, echo).await;
    }
    let (rx, cancel) = submit(&state, &a, None)?;
    let mut guard = CancelOnDrop(cancel, true);
    let ans = answer_or_error(rx.await)?;
    guard.1 = false;
    let (finish, _) = finish_reason(&ans, Some(a.context));
    record_tokens(&ans);
    let body = response_object(&a, Some(&ans), &rid, &echo);
    let mut r = axum::Json(body).into_response();
    r.extensions_mut()
        .insert(log_info(&a, Some(&ans), Some(finish)));
    Ok(r)
}

/// What a Response object echoes of its request.
#[derive(Clone)]
struct ResponseEcho {
    format: Value,
    tools: Value,
    tool_choice: Value,
    parallel_tool_calls: bool,
    created: u64,
}

impl ResponseEcho {
    fn of(req: &ChatRequest) -> ResponseEcho {
        use crate::engine::tools::ToolChoice;
        let format = match &req.format {
            Format::Text => json!({"type": "text"}),
            Format::JsonObject => json!({"type": "json_object"}),
            Format::Schema { name, schema } => {
                json!({"type": "json_schema", "name": name, "schema": schema, "strict": true})
            }
        };
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.parameters, "strict": t.strict.unwrap_or(false)})
            })
            .collect();
        let tool_choice = match &req.tool_choice {
            ToolChoice::None => json!("none"),
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Only { names, required } if names.len() == 1 && *required => {
                json!({"type": "function", "name": names[0]})
            }
            ToolChoice::Only { names, required } => json!({
                "type": "allowed_tools",
                "mode": if *required { "required" } else { "auto" },
                "tools": names.iter().map(|n| json!({"type": "function", "name": n})).collect::<Vec<_>>(),
            }),
        };
        ResponseEcho {
            format,
            tools: Value::Array(tools),
            tool_choice,
            parallel_tool_calls: req.parallel_tool_calls,
            created: unix_now(),
        }
    }
}

/// The `output` items of an answer.
fn response_output(ans: &ChatAnswer, rid: &str, complete: bool) -> Vec<Value> {
    match &ans.tools {
        Some(t) if !t.calls.is_empty() => {
            t.content
                .iter()
                .map(|c| message_item(rid, c, true))
                .chain(
                    t.calls.iter().enumerate().map(|(i, (name, args))| {
                        function_call_item(rid, i, name, args, "completed")
                    }),
                )
                .collect()
        }
        other => {
            let text = match other {
                Some(t) => t.content.clone().unwrap_or_default(),
                None => ans.text.clone(),
            };
            vec![message_item(rid, &text, complete)]
        }
    }
}

fn function_call_item(rid: &str, i: usize, name: &str, args: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{rid}_{i}"), "call_id": call_id(rid, i),
           "name": name, "arguments": args, "status": status})
}

fn message_item(rid: &str, text: &str, complete: bool) -> Value {
    json!({
        "type": "message",
        "id": format!("msg_{rid}"),
        "status": if complete { "completed" } else { "incomplete" },
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

/// The Response object: `in_progress` with no output before the answer (`ans` None),
/// then `completed` or `incomplete`.
fn response_object(
    a: &Admitted,
    ans: Option<&ChatAnswer>,
    rid: &str,
    echo: &ResponseEcho,
) -> Value {
    let (status, incomplete_details, output, usage, formwork) = match ans {
        None => (
            "in_progress",
            Value::Null,
            Vec::new(),
            Value::Null,
            Value::Null,
        ),
        Some(ans) => {
            let (finish, incomplete) = finish_reason(ans, Some(a.context));
            let complete = finish != "length";
            (
                if complete { "completed" } else { "incomplete" },
                if complete {
                    Value::Null
                } else {
                    json!({"reason": "max_output_tokens"})
                },
                response_output(ans, rid, complete),
                json!({
                    "input_tokens": ans.tokens_prompt,
                    "input_tokens_details": {"cached_tokens": ans.tokens_cached},
                    "output_tokens": ans.tokens_completion,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": ans.tokens_prompt + ans.tokens_completion,
                }),
                formwork_object(a, ans, incomplete),
            )
        }
    };
    json!({
        "id": format!("resp_{rid}"),
        "object": "response",
        "created_at": echo.created,
        "status": status,
        "error": null,
        "incomplete_details": incomplete_details,
        "instructions": null,
        "max_output_tokens": a.req.max_tokens.map(|(n, _)| n),
        "model": a.model_id,
        "output": output,
        "parallel_tool_calls": echo.parallel_tool_calls,
        "temperature": a.req.temperature,
        "tool_choice": echo.tool_choice,
        "tools": echo.tools,
        "top_p": a.req.top_p,
        "text": {"format": echo.format},
        "usage": usage,
        "formwork": formwork,
    })
}

/// The Responses API's stream events from the growing text: `response.output_item.added`
/// for the message or each call, then `response.output_text.delta` or
/// `response.function_call_arguments.delta`, and the `.done` events as each item ends.
struct ResponseEvents {
    turn: TurnStream,
    rid: String,
    seq: u64,
    /// The item open now: its output index, and the call's index and name (None for
    /// the message).
    open: Option<(usize, Option<(usize, String)>)>,
    /// Its text or arguments so far.
    acc: String,
    next_index: usize,
}

impl ResponseEvents {
    fn new(rid: &str, tools: bool) -> ResponseEvents {
        ResponseEvents {
            turn: if tools {
                TurnStream::default()
            } else {
                TurnStream::content_only()
            },
            rid: rid.to_string(),
            seq: 0,
            open: None,
            acc: String::new(),
            next_index: 0,
        }
    }

    fn event(&mut self, ty: &str, mut body: Value) -> Value {
        body["type"] = json!(ty);
        body["sequence_number"] = json!(self.seq);
        self.seq += 1;
        body
    }

    fn open_message(&mut self, out: &mut Vec<Value>) {
        let i = self.next_index;
        self.next_index += 1;
        self.open = Some((i, None));
        let item = json!({"type": "message", "id": format!("msg_{}", self.rid), "status": "in_progress",
                          "role": "assistant", "content": []});
        let e = self.event(
            "response.output_item.added",
            json!({"output_index": i, "item": item}),
        );
        out.push(e);
        let e = self.event(
            "response.content_part.added",
            json!({"item_id": format!("msg_{}", self.rid), "output_index": i, "content_index": 0,
                   "part": {"type": "output_text", "text": "", "annotations": []}}),
        );
        out.push(e);
    }

    /// Closes the open item (the message, or a call).
    fn close(&mut self, out: &mut Vec<Value>, complete: bool) {
        let Some((i, name)) = self.open.take() else {
            return;
        };
        let acc = std::mem::take(&mut self.acc);
        match name {
            None => {
                let id = format!("msg_{}", self.rid);
                let part = json!({"type": "output_text", "text": acc, "annotations": []});
                let e = self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "text": acc, "logprobs": []}),
                );
                out.push(e);
                let e = self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": i, "content_index": 0, "part": part}),
                );
                out.push(e);
                let item = message_item(&self.rid, &acc, complete);
                let e = self.event(
                    "response.output_item.done",
                    json!({"output_index": i, "item": item}),
                );
                out.push(e);
            }
            Some((call, name)) => {
                let item_id = format!("fc_{}_{call}", self.rid);
                let e = self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": item_id, "output_index": i, "name": name, "arguments": acc}),
                );
                out.push(e);
                let item = function_call_item(&self.rid, call, &name, &acc, "completed");
                let e = self.event(
                    "response.output_item.done",
                    json!({"output_index": i, "item": item}),
                );
                out.push(e);
            }
        }
    }

    fn feed(&mut self, text: &str) -> Vec<Value> {
        let events = self.turn.feed(text);
        self.apply(events)
    }

    /// The end of the output: any text held back.
    fn finish(&mut self) -> Vec<Value> {
        let events = self.turn.finish();
        self.apply(events)
    }

    fn apply(&mut self, events: Vec<TurnEvent>) -> Vec<Value> {
        let mut out = Vec::new();
        for ev in events {
            match ev {
                TurnEvent::Content(c) => {
                    if self.open.is_none() {
                        self.open_message(&mut out);
                    }
                    self.acc.push_str(&c);
                    let (i, _) = self.open.clone().unwrap_or((0, None));
                    let e = self.event(
                        "response.output_text.delta",
                        json!({"item_id": format!("msg_{}", self.rid), "output_index": i,
                               "content_index": 0, "delta": c, "logprobs": []}),
                    );
                    out.push(e);
                }
                TurnEvent::CallStart { index, name } => {
                    // Text before the calls is a message item of its own.
                    self.close(&mut out, true);
                    let i = self.next_index;
                    self.next_index += 1;
                    self.open = Some((i, Some((index, name.clone()))));
                    let item = function_call_item(&self.rid, index, &name, "", "in_progress");
                    let e = self.event(
                        "response.output_item.added",
                        json!({"output_index": i, "item": item}),
                    );
                    out.push(e);
                }
                TurnEvent::Arguments { index, piece } => {
                    self.acc.push_str(&piece);
                    let i = self.open.as_ref().map_or(index, |o| o.0);
                    let e = self.event(
                        "response.function_call_arguments.delta",
                        json!({"item_id": format!("fc_{}_{index}", self.rid), "output_index": i, "delta": piece}),
                    );
                    out.push(e);
                }
                TurnEvent::CallEnd { .. } => self.close(&mut out, true),
            }
        }
        out
    }
}

/// A Responses API event as SSE: its `type` is the event name.
fn event_of(v: Value) -> Event {
    let ty = v["type"].as_str().unwrap_or("").to_string();
    Event::default().event(ty).data(v.to_string())
}

/// `/v1/responses` streamed: `response.created`, `response.in_progress`, the items'
/// events as the text grows, then `response.completed` (or `response.incomplete`)
/// with the whole Response, usage included.
async fn responses_stream(
    state: Shared,
    a: Admitted,
    rid: String,
    echo: ResponseEcho,
) -> Result<Response, ApiError> {
    let (dtx, drx) = tmpsc::unbounded_channel::<String>();
    let (rx, cancel) = submit(&state, &a, Some(dtx))?;
    let (etx, erx) = tmpsc::channel::<Result<Event, std::convert::Infallible>>(64);
    let info = log_info(&a, None, None);
    tokio::spawn(async move {
        let guard = CancelOnDrop(cancel, true);
        let send = |v: Value| Ok(event_of(v));
        let mut ev = ResponseEvents::new(&rid, a.tools.is_some());
        let pending = response_object(&a, None, &rid, &echo);
        for ty in ["response.created", "response.in_progress"] {
            let e = ev.event(ty, json!({"response": pending}));
            if etx.send(send(e)).await.is_err() {
                return;
            }
        }
        let relayed = relay(drx, rx, &etx, |text| {
            ev.feed(text).into_iter().map(event_of).collect()
        })
        .await;
        let Some((result, sent)) = relayed else {
            return;
        };
        match answer_or_error(result) {
            Err(e) => {
                let body = e.body();
                let err = ev.event(
                    "error",
                    json!({"code": body["error"]["code"], "message": body["error"]["message"],
                           "param": body["error"]["param"]}),
                );
                let _ = etx.send(send(err)).await;
            }
            Ok(ans) => {
                record_tokens(&ans);
                let mut tail = Vec::new();
                if let Some(rest) = ans.text.strip_prefix(sent.as_str()) {
                    if !rest.is_empty() {
                        tail = ev.feed(rest);
                    }
                }
                let (finish, _) = finish_reason(&ans, Some(a.context));
                let complete = finish != "length";
                tail.extend(ev.finish());
                let is_calls = ans.tools.as_ref().is_some_and(|t| !t.calls.is_empty());
                if ev.open.is_none() && ev.next_index == 0 && !is_calls {
                    // An empty answer still has its message item.
                    ev.open_message(&mut tail);
                }
                ev.close(&mut tail, complete);
                for e in tail {
                    let _ = etx.send(send(e)).await;
                }
                let done = response_object(&a, Some(&ans), &rid, &echo);
                let ty = if complete {
                    "response.completed"
                } else {
                    "response.incomplete"
                };
                let e = ev.event(ty, json!({ "response": done }));
                let _ = etx.send(send(e)).await;
            }
        }
        let mut guard = guard;
        guard.1 = false;
        drop(a.permit);
    });
    let sse = Sse::new(tokio_stream::wrappers::ReceiverStream::new(erx))
        .keep_alive(KeepAlive::new().interval(state.cfg.keep_alive).text("ping"));
    let mut r = sse.into_response();
    r.extensions_mut().insert(info);
    Ok(r)
}
