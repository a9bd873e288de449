//! The pieces both answer shapes share: finish reason, usage, the `formwork` object,
//! the log line's fields, and relaying a stream's text as it grows.

use axum::response::sse::Event;
use serde_json::{json, Value};
use tokio::sync::{mpsc as tmpsc, oneshot};

use super::admission::Admitted;
use super::pool::JobError;
use super::LogInfo;
use crate::engine::chat::ChatAnswer;
use crate::engine::decode::Stop;
use crate::engine::VerdictKind;

/// `finish_reason` and, for `length`, why.
pub(super) fn finish_reason(
    a: &ChatAnswer,
    context: Option<usize>,
) -> (&'static str, Option<&'static str>) {
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
pub(super) fn call_id(rid: &str, i: usize) -> String {
    format!("call_{rid}_{i}")
}

pub(super) fn p50_us(ns: &[u64]) -> Option<f64> {
    if ns.is_empty() {
        return None;
    }
    let mut v = ns.to_vec();
    v.sort_unstable();
    Some((v[v.len() / 2] as f64 / 100.0).round() / 10.0)
}

pub(super) fn formwork_object(a: &Admitted, ans: &ChatAnswer, incomplete: Option<&str>) -> Value {
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

pub(super) fn usage(ans: &ChatAnswer) -> Value {
    json!({
        "prompt_tokens": ans.tokens_prompt,
        "completion_tokens": ans.tokens_completion,
        "total_tokens": ans.tokens_prompt + ans.tokens_completion,
        "prompt_tokens_details": {"cached_tokens": ans.tokens_cached},
        "completion_tokens_details": {"reasoning_tokens": ans.tokens_reasoning},
    })
}

pub(super) fn log_info(
    a: &Admitted,
    ans: Option<&ChatAnswer>,
    finish: Option<&'static str>,
) -> LogInfo {
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

pub(super) fn record_tokens(ans: &ChatAnswer) {
    metrics::counter!("formwork_prompt_tokens_total").increment(ans.tokens_prompt as u64);
    metrics::counter!("formwork_completion_tokens_total").increment(ans.tokens_completion as u64);
    metrics::counter!("formwork_cached_prompt_tokens_total").increment(ans.tokens_cached as u64);
}

/// The engine's answer as the job's channel gives it.
pub(super) type JobResult = Result<Result<ChatAnswer, JobError>, oneshot::error::RecvError>;

/// Forwards the engine's text to an SSE stream as it grows, each piece through
/// `convert` (text to events), until the answer comes, then the pieces still in the
/// channel. Returns the answer and the text already converted; None when the client
/// went away.
pub(super) async fn relay(
    mut drx: tmpsc::UnboundedReceiver<String>,
    mut rx: oneshot::Receiver<Result<ChatAnswer, JobError>>,
    etx: &tmpsc::Sender<Result<Event, std::convert::Infallible>>,
    mut convert: impl FnMut(&str) -> Vec<Event>,
    mut convert_thought: impl FnMut(&str) -> Vec<Event>,
) -> Option<(JobResult, String)> {
    let mut sent = String::new();
    // Each piece is tagged with the text it extends (the answer or the thought).
    let mut events = |piece: &str, sent: &mut String| {
        let (tag, text) = piece.split_at(piece.chars().next().map_or(0, char::len_utf8));
        if tag.starts_with(super::pool::THOUGHT) {
            convert_thought(text)
        } else {
            sent.push_str(text);
            convert(text)
        }
    };
    let result = loop {
        tokio::select! {
            d = drx.recv() => match d {
                Some(text) => {
                    for e in events(&text, &mut sent) {
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
        for e in events(&text, &mut sent) {
            if etx.send(Ok(e)).await.is_err() {
                return None;
            }
        }
    }
    Some((result, sent))
}
