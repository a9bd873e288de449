//! Everything between the parsed request and the engine thread: model, schema
//! compile, budget, the admission permit, the job, and the engine's answer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use tokio::sync::{mpsc as tmpsc, oneshot, OwnedSemaphorePermit};

use super::error::ApiError;
use super::pool::{Job, JobError};
use super::request::{ChatRequest, Format};
use super::routes::{loading, model_not_found};
use super::schemas::{Compiled, CompiledTools};
use super::{Shared, DEFAULT_MAX_TOKENS};
use crate::engine::chat::{ChatAnswer, ChatError, ChatOptions};
use crate::engine::VerdictKind;
use crate::sampling::Sampling;

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

/// The request's body, read within what `--request-timeout` leaves of the request's
/// time (counted from `received`, when its headers were in): a client that sends half a
/// body and stalls gets a 408 instead of holding its connection open.
pub(super) async fn read_body(
    state: &Shared,
    http: Request,
    received: Instant,
) -> Result<Bytes, ApiError> {
    let read = Bytes::from_request(http, &());
    let body = match state.cfg.request_timeout {
        None => read.await,
        Some(t) => match tokio::time::timeout_at((received + t).into(), read).await {
            Ok(b) => b,
            Err(_) => {
                metrics::counter!("formwork_rejected_body_timeout_total").increment(1);
                return Err(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "invalid_request_error",
                    "request_timeout",
                    format!(
                        "The request body did not arrive within --request-timeout ({} s).",
                        t.as_secs_f64()
                    ),
                ));
            }
        },
    };
    body.map_err(body_error)
}

/// A request that has passed every check and holds its admission permit.
pub(super) struct Admitted {
    pub(super) req: ChatRequest,
    pub(super) schema: Option<Arc<Compiled>>,
    /// The request's tools, compiled (None without tools).
    pub(super) tools: Option<Arc<CompiledTools>>,
    pub(super) cache_hit: Option<bool>,
    pub(super) compile_ms: f64,
    pub(super) model_id: String,
    pub(super) context: usize,
    pub(super) permit: OwnedSemaphorePermit,
    pub(super) received: Instant,
}

/// Everything before the engine: model, admission, schema, budget. The admission
/// permit comes first, so that a full queue refuses a request before its schema is
/// compiled; a schema then waits for a compile slot (schemas.rs) holding the permit.
/// `budget_param` names the budget's parameter when the request sets none (the
/// default, [`DEFAULT_MAX_TOKENS`], applies).
pub(super) async fn admit(
    state: &Shared,
    req: ChatRequest,
    received: Instant,
    budget_param: &'static str,
) -> Result<Admitted, ApiError> {
    let ready = state.ready.get().ok_or_else(loading)?;
    if req.model != ready.model_id {
        return Err(model_not_found(&req.model));
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
    // The budget the run will have: the request's, or the default.
    let (n, param) = req.max_tokens.unwrap_or((DEFAULT_MAX_TOKENS, budget_param));
    let given = if req.max_tokens.is_some() {
        format!("'{param}' is {n}")
    } else {
        format!("'{param}' is not set, so the default of {n} applies")
    };
    let shortest = match (&tools, &schema) {
        (Some(t), _) => Some((t.min_tokens, "turn valid under tools and tool_choice")),
        (None, Some(c)) => Some((c.min_tokens, "answer valid under response_format")),
        (None, None) => None,
    };
    if let Some((min, what)) = shortest.filter(|&(min, _)| n < min) {
        return Err(ApiError::bad(
            "max_tokens_too_small",
            param,
            format!("{given}, but the shortest {what} takes {min} tokens; give at least {min}."),
        ));
    }
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
pub(super) struct CancelOnDrop(pub(super) Arc<AtomicBool>, pub(super) bool);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.1 {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

pub(super) fn submit(
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
    let pause = (state.test_hooks)
        .then(|| {
            a.req.messages.iter().find_map(|m| {
                let ms = m.content.strip_prefix("__formwork_test_pause_ms__ ")?;
                ms.trim().parse().ok().map(std::time::Duration::from_millis)
            })
        })
        .flatten();
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
            call_bias: state.cfg.call_bias,
            think: a.req.think.or(state.cfg.think_budget),
            think_watch: None,
            grounded: a.req.grounded,
            answer_schema: a
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
        pause,
    };
    ready
        .pool
        .submit(job)
        .map_err(|_| ApiError::internal("the engine threads are gone"))?;
    Ok((rx, cancel))
}

/// The engine's answer, or the error for the client.
pub(super) fn answer_or_error(
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
            ChatError::Think(_) => {
                ApiError::bad("invalid_value", "reasoning_effort", e.to_string())
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
