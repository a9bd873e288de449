//! `POST /v1/chat/completions`: the answer as a chat completion, or streamed as chunks.

use std::time::Instant;

use axum::extract::{Request, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::{json, Value};
use tokio::sync::mpsc as tmpsc;

use super::admission::{admit, answer_or_error, read_body, submit, Admitted, CancelOnDrop};
use super::answer::{
    call_id, finish_reason, formwork_object, log_info, record_tokens, relay, usage,
};
use super::error::ApiError;
use super::request;
use super::{unix_now, RequestId, Shared};
use crate::engine::chat::ChatAnswer;
use crate::engine::tools::{TurnEvent, TurnStream};

/// The answer's `message` (chat completions): content, or `tool_calls` with null
/// content when the turn made calls.
pub(super) fn chat_message(ans: &ChatAnswer, rid: &str) -> Value {
    let mut m = content_message(ans, rid);
    if let Some(r) = &ans.reasoning {
        // The field vLLM, SGLang and DeepSeek's API use for the thought.
        m["reasoning_content"] = json!(r);
    }
    m
}

fn content_message(ans: &ChatAnswer, rid: &str) -> Value {
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

pub(super) async fn chat_completions(
    State(state): State<Shared>,
    Extension(RequestId(rid)): Extension<RequestId>,
    http: Request,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let body = read_body(&state, http, received).await?;
    let req = request::chat(&body)?;
    let a = admit(&state, req, received, "max_completion_tokens").await?;
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
pub(super) struct ChatDeltas {
    pub(super) turn: TurnStream,
    pub(super) rid: String,
    pub(super) role_sent: bool,
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

/// The streamed answer: a role chunk, content chunks of whole UTF-8 text (or tool-call
/// deltas), a final chunk with `finish_reason` (and `usage`, asked for or not: clients
/// such as openai-agents only ask OpenAI for it), an optional usage chunk, then `[DONE]`.
pub(super) async fn stream(state: Shared, a: Admitted, rid: String) -> Result<Response, ApiError> {
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
        let relayed = relay(
            drx,
            rx,
            &etx,
            |text| {
                deltas
                    .deltas(text)
                    .into_iter()
                    .map(|d| {
                        Event::default().data(chunk(d, Value::Null, usage_null.clone()).to_string())
                    })
                    .collect()
            },
            |thought| {
                let d = json!({"reasoning_content": thought});
                vec![Event::default().data(chunk(d, Value::Null, usage_null.clone()).to_string())]
            },
        )
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
