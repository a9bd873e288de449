//! `POST /v1/responses`: the answer as a Response object, or the Responses API's
//! typed stream events.

use std::time::Instant;

use axum::extract::{Request, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::{json, Value};
use tokio::sync::mpsc as tmpsc;

use super::admission::{admit, answer_or_error, read_body, submit, Admitted, CancelOnDrop};
use super::answer::{call_id, finish_reason, formwork_object, log_info, record_tokens, relay};
use super::error::ApiError;
use super::request::{self, ChatRequest, Format};
use super::{unix_now, RequestId, Shared};
use crate::engine::chat::ChatAnswer;
use crate::engine::tools::{TurnEvent, TurnStream};

/// `POST /v1/responses`: the same path as chat completions, answered as a Response
/// object: `output` is a message with one `output_text`, or one `function_call` item
/// per call. Streamed, it is the Responses API's typed events.
pub(super) async fn responses(
    State(state): State<Shared>,
    Extension(RequestId(rid)): Extension<RequestId>,
    http: Request,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let body = read_body(&state, http, received).await?;
    let req = request::responses(&body)?;
    let echo = ResponseEcho::of(&req);
    let a = admit(&state, req, received, "max_output_tokens").await?;
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
pub(super) struct ResponseEcho {
    pub(super) format: Value,
    pub(super) tools: Value,
    pub(super) tool_choice: Value,
    pub(super) parallel_tool_calls: bool,
    pub(super) created: u64,
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
pub(super) fn response_output(ans: &ChatAnswer, rid: &str, complete: bool) -> Vec<Value> {
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

pub(super) fn function_call_item(
    rid: &str,
    i: usize,
    name: &str,
    args: &str,
    status: &str,
) -> Value {
    json!({"type": "function_call", "id": format!("fc_{rid}_{i}"), "call_id": call_id(rid, i),
           "name": name, "arguments": args, "status": status})
}

pub(super) fn message_item(rid: &str, text: &str, complete: bool) -> Value {
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
pub(super) fn response_object(
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
                {
                    let mut out = response_output(ans, rid, complete);
                    if let Some(r) = &ans.reasoning {
                        // A reasoning item first, its text as a summary part.
                        let item = json!({"type": "reasoning", "id": format!("rs_{rid}"),
                            "summary": [{"type": "summary_text", "text": r}]});
                        out.insert(0, item);
                    }
                    out
                },
                json!({
                    "input_tokens": ans.tokens_prompt,
                    "input_tokens_details": {"cached_tokens": ans.tokens_cached},
                    "output_tokens": ans.tokens_completion,
                    "output_tokens_details": {"reasoning_tokens": ans.tokens_reasoning},
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
pub(super) struct ResponseEvents {
    pub(super) turn: TurnStream,
    pub(super) rid: String,
    pub(super) seq: u64,
    /// The item open now: its output index, and the call's index and name (None for
    /// the message).
    pub(super) open: Option<(usize, Option<(usize, String)>)>,
    /// Its text or arguments so far.
    pub(super) acc: String,
    pub(super) next_index: usize,
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
pub(super) fn event_of(v: Value) -> Event {
    let ty = v["type"].as_str().unwrap_or("").to_string();
    Event::default().event(ty).data(v.to_string())
}

/// `/v1/responses` streamed: `response.created`, `response.in_progress`, the items'
/// events as the text grows, then `response.completed` (or `response.incomplete`)
/// with the whole Response, usage included.
pub(super) async fn responses_stream(
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
        // The thought is not streamed here: it comes as the reasoning item of the
        // completed response.
        let relayed = relay(
            drx,
            rx,
            &etx,
            |text| ev.feed(text).into_iter().map(event_of).collect(),
            |_| Vec::new(),
        )
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
