//! The routes, and the frame every request passes: request id, API key, errors in
//! the OpenAI shape, the log line, metrics. The small GET handlers live here too.

use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use serde_json::{json, Value};

use super::chat::chat_completions;
use super::error::{self, ApiError, Shaped};
use super::responses::responses;
use super::{log_event, new_request_id, AppState, LogInfo, RequestId, Shared};

/// Every route the server answers, `(method, path)`: the router is built from this
/// list, and the tests walk it. With `--api-key`, each needs the key but those in
/// [`OPEN_ROUTES`].
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{id}"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/responses"),
];

/// The routes open without the API key: `/health`, so that a supervisor's probe needs
/// no secret (it tells only "loading" or "ok" and the request counts).
pub const OPEN_ROUTES: &[&str] = &["/health"];

/// The test hooks' routes (debug builds with `FORMWORK_SERVE_TEST_HOOKS=1` only,
/// [`test_hooks_enabled`]): a panic in a handler, and a panic while holding each of the
/// server's locks.
pub const TEST_ROUTES: &[(&str, &str)] = &[("POST", "/__test/panic"), ("POST", "/__test/poison")];

/// Whether the test hooks are on: in debug builds (the tests'), when the variable
/// `FORMWORK_SERVE_TEST_HOOKS` is `1`; never in a release build. Besides
/// [`TEST_ROUTES`], two message contents: `__formwork_test_panic__` (a panic in the
/// engine thread) and `__formwork_test_pause_ms__ N` (the engine waits N ms before its
/// first pass).
pub(super) fn test_hooks_enabled(var: Option<&str>) -> bool {
    cfg!(debug_assertions) && var == Some("1")
}

/// The handler of a route of [`ROUTES`] or [`TEST_ROUTES`].
fn handler(method: &str, path: &str) -> MethodRouter<Shared> {
    match (method, path) {
        ("GET", "/health") => get(health),
        ("GET", "/metrics") => get(metrics_text),
        ("GET", "/openapi.json") => get(openapi),
        ("GET", "/v1/models") => get(models),
        ("GET", "/v1/models/{id}") => get(model_by_id),
        ("POST", "/v1/chat/completions") => post(chat_completions),
        ("POST", "/v1/responses") => post(responses),
        #[cfg(debug_assertions)]
        ("POST", "/__test/panic") => post(test_panic),
        #[cfg(debug_assertions)]
        ("POST", "/__test/poison") => post(test_poison),
        _ => unreachable!("{method} {path} is listed without a handler"),
    }
}

/// The route pattern `path` falls under, for the metrics' `route` label: one of
/// [`ROUTES`], or `other`.
fn route_label(path: &str) -> &'static str {
    let fits = |pattern: &str| {
        let (mut p, mut q) = (pattern.split('/'), path.split('/'));
        loop {
            match (p.next(), q.next()) {
                (None, None) => return true,
                (Some(a), Some(b)) if a == b || (a.starts_with('{') && !b.is_empty()) => {}
                _ => return false,
            }
        }
    };
    ROUTES
        .iter()
        .map(|&(_, p)| p)
        .find(|p| fits(p))
        .unwrap_or("other")
}

pub(super) fn router(state: Shared) -> Router {
    let mut r = ROUTES
        .iter()
        .fold(Router::new(), |r, &(m, p)| r.route(p, handler(m, p)));
    if state.test_hooks {
        // Never in a release build: test_hooks_enabled is false there.
        r = TEST_ROUTES
            .iter()
            .fold(r, |r, &(m, p)| r.route(p, handler(m, p)));
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

/// Every request passes here: a request id, the API key, errors in the OpenAI
/// shape, one JSON log line, metrics.
pub(super) async fn frame(State(state): State<Shared>, mut req: Request, next: Next) -> Response {
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
    let route = route_label(&path);
    metrics::counter!("formwork_http_requests_total", "route" => route, "status" => status.as_u16().to_string())
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

pub(super) fn authorize(state: &AppState, req: &Request) -> Result<(), ApiError> {
    let Some(key) = &state.cfg.api_key else {
        return Ok(());
    };
    if OPEN_ROUTES.contains(&req.uri().path()) {
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

pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(super) async fn not_found(req: Request) -> ApiError {
    ApiError::for_status(
        StatusCode::NOT_FOUND,
        req.method().as_str(),
        req.uri().path(),
        0,
    )
}

pub(super) async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::for_status(
        StatusCode::METHOD_NOT_ALLOWED,
        req.method().as_str(),
        req.uri().path(),
        0,
    )
}

#[cfg(debug_assertions)]
async fn test_panic() -> Response {
    panic!("test hook: a panic inside a handler");
}

/// Test hook: a panic on another thread while it holds each of the server's locks
/// (the schema and tool caches, the log, the job queue), so that every one of them
/// is poisoned; the server must serve on as before.
#[cfg(debug_assertions)]
async fn test_poison(State(state): State<Shared>) -> Response {
    use super::poison;
    poison(&state.log);
    state.cache.poison();
    state.tools.poison();
    if let Some(r) = state.ready.get() {
        r.pool.poison();
    }
    axum::Json(json!({"poisoned": ["log", "schemas", "tools", "queue"]})).into_response()
}

pub(super) fn loading() -> ApiError {
    ApiError::unavailable(
        "model_loading",
        "The model is still loading; retry shortly.",
        2,
    )
}

pub(super) async fn health(State(state): State<Shared>) -> Response {
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

pub(super) async fn metrics_text(State(state): State<Shared>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// The hand-written OpenAPI document (src/serve/openapi.json), with the served
/// model's id as the one value of `model`.
pub(super) async fn openapi(State(state): State<Shared>) -> Response {
    let id = state
        .ready
        .get()
        .map_or(state.cfg.model.clone(), |r| r.model_id.clone());
    let id = serde_json::to_string(&id).unwrap_or_default();
    let doc = include_str!("openapi.json").replace("\"{{MODEL}}\"", &id);
    ([(header::CONTENT_TYPE, "application/json")], doc).into_response()
}

pub(super) fn model_object(state: &AppState, id: &str) -> Value {
    json!({"id": id, "object": "model", "created": state.created, "owned_by": "formwork"})
}

pub(super) async fn models(State(state): State<Shared>) -> Result<Response, ApiError> {
    let r = state.ready.get().ok_or_else(loading)?;
    Ok(
        axum::Json(json!({"object": "list", "data": [model_object(&state, &r.model_id)]}))
            .into_response(),
    )
}

pub(super) fn model_not_found(id: &str) -> ApiError {
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

pub(super) async fn model_by_id(
    State(state): State<Shared>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let r = state.ready.get().ok_or_else(loading)?;
    if id != r.model_id {
        return Err(model_not_found(&id));
    }
    Ok(axum::Json(model_object(&state, &r.model_id)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_route_has_a_handler() {
        for &(m, p) in ROUTES {
            let _ = handler(m, p);
        }
        #[cfg(debug_assertions)]
        for &(m, p) in TEST_ROUTES {
            let _ = handler(m, p);
        }
    }

    /// Run with `cargo test --release` too: there the hooks must be off whatever the
    /// variable says.
    #[test]
    fn test_hooks_exist_only_in_debug_builds() {
        assert_eq!(test_hooks_enabled(Some("1")), cfg!(debug_assertions));
        assert!(!test_hooks_enabled(None));
        assert!(!test_hooks_enabled(Some("0")));
        assert!(!test_hooks_enabled(Some("true")));
    }

    #[test]
    fn metrics_labels_are_route_patterns() {
        assert_eq!(route_label("/v1/models/smollm2-135m"), "/v1/models/{id}");
        assert_eq!(route_label("/v1/models"), "/v1/models");
        assert_eq!(route_label("/v1/models/a/b"), "other");
        assert_eq!(route_label("/v1/models/"), "other");
        assert_eq!(route_label("/health"), "/health");
        assert_eq!(route_label("/nothing"), "other");
    }
}
