//! Tool calling through `formwork serve`, on the wire and with the real clients.
//!
//! The wire tests run the real binary with smollm2-135m (fast; what its calls say is
//! not the point, that they are valid is): every `tool_choice`, parallel calls on and
//! off, `response_format` beside tools, streamed deltas reassembled equal to the
//! non-streamed answer (Chat Completions and the Responses API's events), history
//! replay, and every 400 of docs/serving.md "Tools". Each call's arguments are checked with
//! formwork's validator against the tool's `parameters`, and names against the tools.
//!
//! `agents_and_clients_call_tools` runs tests/data/serve/tools_client.py on the default
//! model (openai-agents' reorder agent and three-expert orchestrator, streamed and not;
//! instructor's TOOLS mode; LangChain's `bind_tools` and `with_structured_output`), then
//! reads `/metrics`: the sub-agents' concurrent requests must have shared forward passes.
//! Python is `FORMWORK_TEST_PYTHON` or `.venv-test` (scripts/test makes it), else
//! SKIPPED. SKIPPED (printed) too when a model is not fetched.

mod common;
#[path = "common/server.rs"]
mod server;

use std::path::Path;
use std::process::Command;

use formwork::validate::{Validator, Verdict};
use serde_json::{json, Value};
use server::{assert_error, Server, TEST_MODEL};

const CC: &str = "/v1/chat/completions";

fn weather_params() -> Value {
    json!({"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 30},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": false})
}

fn time_params() -> Value {
    json!({"type": "object", "properties": {"tz": {"enum": ["UTC", "CET", "JST"]}},
           "required": ["tz"]})
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
          "parameters": weather_params()}},
        {"type": "function", "function": {"name": "get_time", "description": "The time in a time zone.",
          "parameters": time_params(), "strict": false}},
    ])
}

fn ask(extra: Value) -> Value {
    let mut b = json!({"model": TEST_MODEL, "max_completion_tokens": 80, "tools": tools(),
        "messages": [{"role": "user", "content": "What is the weather in Paris, and the time in Tokyo?"}]});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

/// Every call named after a tool, with arguments valid for that tool; returns the names.
fn check_calls(calls: &[Value]) -> Vec<String> {
    let mut ids = std::collections::HashSet::new();
    calls
        .iter()
        .map(|c| {
            assert_eq!(c["type"], "function", "{c}");
            let id = c["id"].as_str().unwrap();
            assert!(id.starts_with("call_") && ids.insert(id.to_string()), "{c}");
            let name = c["function"]["name"].as_str().unwrap();
            let params = match name {
                "get_weather" => weather_params(),
                "get_time" => time_params(),
                other => panic!("a call to {other}, which is not a tool"),
            };
            let args = c["function"]["arguments"]
                .as_str()
                .expect("arguments a string");
            let v = Validator::new(&params).unwrap();
            assert!(
                matches!(v.check(args), Verdict::Valid(_)),
                "{name}: {args} is not valid for {params}"
            );
            assert!(!args.contains(' ') || args.contains('"'), "compact: {args}");
            name.to_string()
        })
        .collect()
}

#[test]
fn every_tool_choice_is_enforced_on_the_wire() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start("tools-choice", &["--parallel", "1"], &[]);
    // required: at least one call, no content, finish_reason tool_calls, usage.
    for parallel in [true, false] {
        let r = s.post(
            CC,
            &ask(json!({"tool_choice": "required", "parallel_tool_calls": parallel})),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        let msg = &v["choices"][0]["message"];
        assert!(msg["content"].is_null(), "{msg}");
        let calls = msg["tool_calls"].as_array().expect("tool_calls");
        assert!(!calls.is_empty());
        if !parallel {
            assert_eq!(calls.len(), 1, "parallel_tool_calls false: {msg}");
        }
        check_calls(calls);
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
        assert!(v["usage"]["completion_tokens"].as_u64().unwrap() > 0);
        assert_eq!(v["formwork"]["verdict"], "valid");
    }
    // A named function: only that tool. The system message with the tools is the
    // prefix every request of these tools shares: its KV state is reused.
    let named = json!({"type": "function", "function": {"name": "get_time"}});
    let r = s.post(CC, &ask(json!({"tool_choice": named})));
    let cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached > 100,
        "the tools' prefix was not reused: {cached} cached tokens"
    );
    let calls = r.json()["choices"][0]["message"]["tool_calls"].clone();
    let names = check_calls(calls.as_array().unwrap());
    assert!(
        !names.is_empty() && names.iter().all(|n| n == "get_time"),
        "{names:?}"
    );
    // allowed_tools, required: only those.
    let allowed = json!({"type": "allowed_tools", "allowed_tools": {"mode": "required",
        "tools": [{"type": "function", "function": {"name": "get_weather"}}]}});
    let r = s.post(CC, &ask(json!({"tool_choice": allowed})));
    let calls = r.json()["choices"][0]["message"]["tool_calls"].clone();
    let names = check_calls(calls.as_array().unwrap());
    assert!(
        !names.is_empty() && names.iter().all(|n| n == "get_weather"),
        "{names:?}"
    );
    // none: text, never a call, and text that does not begin like one.
    let r = s.post(CC, &ask(json!({"tool_choice": "none"})));
    let v = r.json();
    let msg = &v["choices"][0]["message"];
    assert!(msg.get("tool_calls").is_none_or(|c| c.is_null()), "{msg}");
    let text = msg["content"].as_str().unwrap();
    assert!(
        !text.starts_with(['<', '{', '[', '`', ' ', '\n']),
        "{text:?}"
    );
    assert_ne!(v["choices"][0]["finish_reason"], "tool_calls");
    // auto (the default with tools): calls that are valid, or text.
    let r = s.post(CC, &ask(json!({})));
    let v = r.json();
    let msg = &v["choices"][0]["message"];
    match msg["tool_calls"].as_array() {
        Some(calls) => {
            check_calls(calls);
            assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        }
        None => assert!(msg["content"].is_string()),
    }
    // auto with response_format: calls, or the answer valid for the schema.
    let schema = json!({"type": "object", "properties": {"answer": {"type": "string", "maxLength": 40}},
                        "required": ["answer"], "additionalProperties": false});
    for choice in ["auto", "none"] {
        let r = s.post(
            CC,
            &ask(
                json!({"tool_choice": choice, "response_format": {"type": "json_schema",
            "json_schema": {"name": "A", "schema": schema}}}),
            ),
        );
        let v = r.json();
        let msg = &v["choices"][0]["message"];
        match msg["tool_calls"].as_array() {
            Some(calls) => {
                assert_eq!(choice, "auto");
                check_calls(calls);
            }
            None => {
                let text = msg["content"].as_str().unwrap();
                let verdict = Validator::new(&schema).unwrap().check(text);
                assert!(matches!(verdict, Verdict::Valid(_)), "{choice}: {text}");
            }
        }
        assert_eq!(v["formwork"]["verdict"], "valid", "{v}");
    }
    s.assert_serving();
}

/// A streamed chat completion reassembled: (content, calls as (id, name, arguments),
/// finish_reason, usage seen on a chunk).
fn reassemble(chunks: &[Value]) -> (Option<String>, Vec<(String, String, String)>, String, bool) {
    let mut content: Option<String> = None;
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut finish = String::new();
    let mut usage = false;
    for c in chunks {
        usage |= c["usage"].is_object();
        let Some(ch) = c["choices"].get(0) else {
            continue;
        };
        if let Some(f) = ch["finish_reason"].as_str() {
            finish = f.to_string();
        }
        let d = &ch["delta"];
        if let Some(t) = d["content"].as_str() {
            content.get_or_insert_with(String::new).push_str(t);
        }
        for tc in d["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                // The first delta of a call: id, type and name, arguments "".
                assert_eq!(tc["type"], "function", "{tc}");
                assert_eq!(tc["function"]["arguments"], "", "{tc}");
                calls.push((
                    tc["id"].as_str().unwrap().to_string(),
                    tc["function"]["name"].as_str().unwrap().to_string(),
                    String::new(),
                ));
            } else {
                assert_eq!(i, calls.len() - 1, "deltas of an earlier call: {tc}");
                assert!(
                    tc.get("id").is_none() && tc["function"].get("name").is_none(),
                    "{tc}"
                );
                calls[i]
                    .2
                    .push_str(tc["function"]["arguments"].as_str().unwrap());
            }
        }
    }
    (content, calls, finish, usage)
}

fn sse_json(r: &server::Resp) -> Vec<Value> {
    let (data, _) = r.sse();
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[test]
fn streamed_calls_reassemble_to_the_non_streamed_answer() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start("tools-stream", &["--parallel", "1"], &[]);
    for choice in [json!("required"), json!("auto"), json!("none")] {
        let body = ask(json!({"tool_choice": choice, "temperature": 0}));
        let whole = s.post(CC, &body).json();
        let msg = &whole["choices"][0]["message"];
        let mut streamed_body = body.clone();
        streamed_body["stream"] = json!(true);
        let chunks = sse_json(&s.post(CC, &streamed_body));
        let (content, calls, finish, usage) = reassemble(&chunks);
        assert_eq!(finish, whole["choices"][0]["finish_reason"], "{choice}");
        assert!(usage, "usage on the last chunk, asked for or not");
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        match msg["tool_calls"].as_array() {
            Some(want) => {
                assert_eq!(content.as_deref(), msg["content"].as_str(), "{choice}");
                let want: Vec<(String, String)> = want
                    .iter()
                    .map(|c| {
                        (
                            c["function"]["name"].as_str().unwrap().to_string(),
                            c["function"]["arguments"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect();
                let got: Vec<(String, String)> =
                    calls.iter().map(|c| (c.1.clone(), c.2.clone())).collect();
                assert_eq!(got, want, "{choice}");
                assert!(calls.iter().all(|c| c.0.starts_with("call_")));
            }
            None => {
                assert!(calls.is_empty());
                assert_eq!(content.as_deref(), msg["content"].as_str(), "{choice}");
            }
        }
    }
}

#[test]
fn responses_api_calls_streamed_and_not_and_replays_history() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start("tools-responses", &["--parallel", "1"], &[]);
    let flat: Vec<Value> = tools()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let mut f = t["function"].clone();
            f["type"] = json!("function");
            f
        })
        .collect();
    let body = json!({"model": TEST_MODEL, "input": "Weather in Paris in celsius?", "tools": flat,
                      "tool_choice": "required", "max_output_tokens": 80, "temperature": 0});
    let v = s.post("/v1/responses", &body).json();
    assert_eq!(v["status"], "completed", "{v}");
    let out = v["output"].as_array().unwrap();
    assert!(!out.is_empty());
    let as_chat: Vec<Value> = out
        .iter()
        .map(|o| {
            assert_eq!(o["type"], "function_call", "{o}");
            json!({"id": o["call_id"], "type": "function",
                   "function": {"name": o["name"], "arguments": o["arguments"]}})
        })
        .collect();
    check_calls(&as_chat);
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);

    // Streamed: the typed events, and the same calls as the non-streamed answer.
    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let r = s.post("/v1/responses", &sb);
    let (data, _) = r.sse();
    let events: Vec<Value> = data
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        &types[..2],
        ["response.created", "response.in_progress"],
        "{types:?}"
    );
    assert_eq!(types.last(), Some(&"response.completed"), "{types:?}");
    let seq: Vec<u64> = events
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(seq.windows(2).all(|w| w[1] == w[0] + 1), "{seq:?}");
    let mut args: Vec<String> = Vec::new();
    for e in &events {
        match e["type"].as_str().unwrap() {
            "response.output_item.added" => {
                assert_eq!(e["item"]["type"], "function_call");
                assert_eq!(e["item"]["arguments"], "");
                args.push(String::new());
            }
            "response.function_call_arguments.delta" => args
                .last_mut()
                .unwrap()
                .push_str(e["delta"].as_str().unwrap()),
            "response.function_call_arguments.done" => {
                assert_eq!(e["arguments"].as_str().unwrap(), args.last().unwrap())
            }
            "response.output_text.delta" => panic!("text beside calls: {e}"),
            _ => {}
        }
    }
    let done = &events.last().unwrap()["response"];
    let got: Vec<(&Value, &Value)> = done["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (&o["name"], &o["arguments"]))
        .collect();
    let want: Vec<(&Value, &Value)> = out.iter().map(|o| (&o["name"], &o["arguments"])).collect();
    assert_eq!(got, want);
    assert_eq!(
        args,
        want.iter()
            .map(|w| w.1.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    );

    // History: the calls and their outputs replayed as input items; tools none.
    let mut input = vec![json!({"role": "user", "content": "Weather in Paris in celsius?"})];
    for o in out {
        input.push(o.clone());
        input.push(json!({"type": "function_call_output", "call_id": o["call_id"], "output": "18 C, sunny"}));
    }
    let b2 = json!({"model": TEST_MODEL, "input": input, "tools": flat, "tool_choice": "none",
                    "max_output_tokens": 30});
    let v2 = s.post("/v1/responses", &b2).json();
    assert_eq!(v2["output"][0]["type"], "message", "{v2}");
    // A malformed replayed argument is a 400 naming it.
    let mut bad = input.clone();
    bad[1]["arguments"] = json!("{\"city\": ");
    let r = s.post(
        "/v1/responses",
        &json!({"model": TEST_MODEL, "input": bad, "tools": flat}),
    );
    assert_eq!(
        assert_error(&r, 400, "invalid_value")["param"],
        "input[1].arguments"
    );
    // Text streamed on the Responses API (no tools): the message events.
    let r = s.post(
        "/v1/responses",
        &json!({"model": TEST_MODEL, "input": "Say hi.", "stream": true, "max_output_tokens": 8}),
    );
    let (data, _) = r.sse();
    let events: Vec<Value> = data
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    let last = events.last().unwrap();
    assert!(
        last["type"] == "response.completed" || last["type"] == "response.incomplete",
        "{last}"
    );
    assert_eq!(
        last["response"]["output"][0]["content"][0]["text"],
        json!(text)
    );
}

#[test]
fn chat_history_with_calls_and_results_is_replayed() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start("tools-history", &["--parallel", "1"], &[]);
    let history = json!([
        {"role": "system", "content": "You answer about the weather."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}},
            {"id": "call_b", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "12 C"}]},
    ]);
    let r = s.post(
        CC,
        &ask(json!({"messages": history, "tool_choice": "none"})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert!(v["choices"][0]["message"]["content"].is_string());
    // The replayed turn is part of the prompt the next request shares.
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() > 100);
    let mut bad = history.clone();
    bad[2]["tool_calls"][0]["function"]["arguments"] = json!("{city: Paris}");
    let r = s.post(CC, &ask(json!({"messages": bad})));
    assert_eq!(
        assert_error(&r, 400, "invalid_value")["param"],
        "messages[2].tool_calls[0].function.arguments"
    );
    bad[2]["tool_calls"][0]["function"]["arguments"] = json!("[1]");
    let r = s.post(CC, &ask(json!({"messages": bad})));
    assert_error(&r, 400, "invalid_value");
}

#[test]
fn every_tools_error_is_a_400_naming_its_parameter() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start("tools-errors", &["--parallel", "1"], &[]);
    let cases: Vec<(Value, &str, &str)> = vec![
        // An unknown named tool.
        (
            json!({"tool_choice": {"type": "function", "function": {"name": "get_wether"}}}),
            "unknown_tool",
            "tool_choice.function.name",
        ),
        (
            json!({"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto",
                "tools": [{"type": "function", "function": {"name": "nope"}}]}}}),
            "unknown_tool",
            "tool_choice.allowed_tools.tools[0].function.name",
        ),
        (
            json!({"tool_choice": "sometimes"}),
            "invalid_value",
            "tool_choice",
        ),
        (
            json!({"tools": [], "tool_choice": "required"}),
            "invalid_value",
            "tool_choice",
        ),
        // A parameters schema the grammar cannot enforce: the tool and the JSON Pointer.
        (
            json!({"tools": [{"type": "function", "function": {"name": "f", "parameters":
                {"type": "object", "properties": {"x": {"type": "string", "pattern": "(?<=a)b"}}}}}]}),
            "unsupported_schema_keyword",
            "tools[0].function.parameters",
        ),
        // Over a compile limit: 17 x 17 object alternatives, over the limit of 256.
        (
            json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"allOf": (["a", "b"].map(|p|
                json!({"anyOf": (0..17).map(|i| json!({"type": "object", "required": [format!("{p}{i}")]})).collect::<Vec<_>>()})))}}}]}),
            "schema_too_complex",
            "tools[0].function.parameters",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]}),
            "invalid_function_parameters",
            "tools[0].function.parameters",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "bad name"}}]}),
            "invalid_value",
            "tools[0].function.name",
        ),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]}),
            "invalid_value",
            "tools[1].function.name",
        ),
        (
            json!({"tools": [{"type": "code_interpreter"}]}),
            "unsupported_parameter",
            "tools[0].type",
        ),
        (json!({"tools": {"a": 1}}), "invalid_type", "tools"),
        (
            json!({"messages": [{"role": "tool", "content": "x"}]}),
            "missing_required_parameter",
            "messages[0].tool_call_id",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}),
            "invalid_value",
            "messages[0].tool_calls",
        ),
    ];
    for (extra, code, param) in cases {
        let r = s.post(CC, &ask(extra.clone()));
        let e = assert_error(&r, 400, code);
        assert_eq!(e["param"], param, "{extra}: {e}");
        let m = e["message"].as_str().unwrap();
        assert!(!m.contains('\n'), "{m}");
        if code == "unsupported_schema_keyword" {
            assert!(
                m.contains("'f'") && m.contains("/properties/x/pattern"),
                "{m}"
            );
        }
    }
    // A budget below the shortest call under `required`.
    let r = s.post(
        CC,
        &ask(json!({"tool_choice": "required", "max_completion_tokens": 2})),
    );
    assert_error(&r, 400, "max_tokens_too_small");
    s.assert_serving();
}

#[test]
fn agents_and_clients_call_tools() {
    let model =
        std::env::var("FORMWORK_SERVE_TEST_MODEL").unwrap_or_else(|_| "qwen2.5-coder-0.5b".into());
    let fetched = if model == TEST_MODEL {
        common::home_with_smollm2()
    } else {
        common::home_with_qwen()
    };
    if fetched.is_none() {
        return;
    }
    let Some(py) = python() else { return };
    let s = Server::start(
        "tools-agents",
        &["--parallel", "3"],
        &[("FORMWORK_MODEL", &model)],
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/serve/tools_client.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg(format!("http://127.0.0.1:{}/v1", s.port))
        .arg(&model)
        .output()
        .expect("run the tools client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "tools client failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
    // The three sub-agents' requests ran at once: some forward passes carried more
    // than one sequence.
    let m = s.get("/metrics").text();
    let read = |name: &str| -> f64 {
        m.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|x| x.parse().ok())
            .unwrap_or(0.0)
    };
    let passes = read("formwork_batched_forward_passes_total");
    let rows = read("formwork_batched_forward_sequences_total");
    eprintln!("batched passes {passes}, sequences {rows}");
    assert!(
        passes > 0.0 && rows > passes,
        "no shared pass: {passes} passes, {rows} sequences"
    );
}

/// The server's counter of answers by route and status, from /metrics.
fn answers(s: &Server, status: u16) -> u64 {
    let want = format!(
        "formwork_http_requests_total{{route=\"/v1/chat/completions\",status=\"{status}\"}}"
    );
    s.get("/metrics")
        .text()
        .lines()
        .find_map(|l| l.strip_prefix(want.as_str())?.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

/// The server's peak resident memory so far (VmHWM), in kB.
fn peak_kb(s: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Agent fan-out past the server's capacity (issue 45): 16 openai-agents orchestrators at
/// once, three `as_tool` sub-agents each, against `--parallel 4 --max-queue 4`. Every
/// request the clients sent is answered (200) or refused with `queue_full` (503), as
/// many of each as the server counted (none lost, none answered twice), every run ends
/// with an answer or a refusal, and the server's peak memory stays bounded: after three
/// loads of 16 runs it is within twice its peak under 4 runs.
#[test]
fn agent_fan_out_is_answered_or_refused_and_memory_stays_bounded() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let Some(py) = python() else { return };
    let s = Server::start(
        "tools-overload",
        &["--parallel", "4", "--max-queue", "4"],
        &[],
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/serve/tools_client.py");
    let run = |part: &str| -> Value {
        let out = Command::new(&py)
            .arg(&script)
            .arg(format!("http://127.0.0.1:{}/v1", s.port))
            .arg(TEST_MODEL)
            .arg(part)
            .output()
            .expect("run the tools client");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("{part}: {stdout}");
        assert!(out.status.success(), "{part} failed:\n{stdout}\n{stderr}");
        let line = stdout
            .lines()
            .find(|l| l.starts_with('{'))
            .expect("the counts line");
        serde_json::from_str(line).unwrap()
    };
    let count = |v: &Value, status: &str| v["status"][status].as_u64().unwrap_or(0);

    let small = run("overload:4");
    let (ok_small, refused_small) = (answers(&s, 200), answers(&s, 503));
    assert_eq!(ok_small, count(&small, "200"), "{small}");
    assert_eq!(refused_small, count(&small, "503"), "{small}");
    let peak_small = peak_kb(&s);

    // Three loads of 16 runs: each is answered or refused as counted, and the peak
    // memory levels off (the slots and the caches' bounds hold it, not the offered load).
    let mut peaks = vec![peak_small];
    let (mut ok, mut refused) = (ok_small, refused_small);
    for _ in 0..3 {
        let big = run("overload:16");
        let runs = &big["runs"];
        let ended: u64 = ["answered", "empty", "refused"]
            .iter()
            .map(|k| runs[k].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(ended, 16, "{big}");
        assert!(
            count(&big, "503") > 0,
            "16 runs never filled a queue of 4: {big}"
        );
        assert!(
            big["sub_agent_calls"].as_u64() > Some(0),
            "no fan-out: {big}"
        );
        assert!(count(&big, "200") > 0, "nothing answered: {big}");
        assert_eq!(answers(&s, 200) - ok, count(&big, "200"), "{big}");
        assert_eq!(answers(&s, 503) - refused, count(&big, "503"), "{big}");
        (ok, refused) = (answers(&s, 200), answers(&s, 503));
        peaks.push(peak_kb(&s));
    }
    eprintln!("peak RSS, kB: 4 runs, then three loads of 16: {peaks:?}");
    // Measured on 2026-12-06: 557 MB, then 715, 858, 923 MB; nine loads in a row level
    // off at about 860 MB. A leak of a fifth of the 4-run peak per load fails this.
    assert!(
        peaks[3] <= peaks[0] * 2,
        "memory grows with each load: peaks {peaks:?} kB"
    );
    s.assert_serving();
}

fn python() -> Option<std::path::PathBuf> {
    let py = match std::env::var_os("FORMWORK_TEST_PYTHON") {
        Some(p) => std::path::PathBuf::from(p),
        None => {
            let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-test/bin/python");
            if !venv.exists() {
                common::skip::skipped(format_args!("SKIPPED: no Python for the tools clients; run scripts/test, or set FORMWORK_TEST_PYTHON to a python with tests/data/serve/requirements.txt installed"));
                return None;
            }
            venv
        }
    };
    let ok = Command::new(&py)
        .args([
            "-c",
            "import openai, agents, instructor, langchain_openai, pydantic_ai",
        ])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import openai, agents, instructor, langchain_openai and pydantic_ai: run scripts/test",
        py.display()
    );
    Some(py)
}

#[test]
fn grounded_arguments_are_quoted_from_the_conversation_streamed_and_not() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start("tools-grounded", &["--parallel", "1"], &[]);
    let said = "what is the weather in paris, and the time in tokyo?";
    let cities = |calls: &[(String, String)]| -> Vec<String> {
        calls
            .iter()
            .filter(|(n, _)| n == "get_weather")
            .map(|(_, a)| {
                let v: Value = serde_json::from_str(a).unwrap();
                v["city"].as_str().unwrap().to_string()
            })
            .collect()
    };
    let whole_calls = |v: &Value| -> Vec<(String, String)> {
        v["choices"][0]["message"]["tool_calls"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| {
                        (
                            c["function"]["name"].as_str().unwrap().to_string(),
                            c["function"]["arguments"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let named = json!({"type": "function", "function": {"name": "get_weather"}});
    let plain = s
        .post(CC, &ask(json!({"tool_choice": named, "temperature": 0})))
        .json();
    let body = ask(json!({"tool_choice": named, "temperature": 0, "formwork_grounded": true}));
    let whole = s.post(CC, &body).json();
    let calls = whole_calls(&whole);
    assert!(!calls.is_empty(), "{whole}");
    check_calls(
        &whole["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .clone(),
    );
    for c in cities(&calls) {
        assert!(
            !c.is_empty() && said.contains(&c.to_lowercase()),
            "{c:?} is not in the question"
        );
    }
    eprintln!(
        "grounded: {:?}; not grounded: {:?}",
        cities(&calls),
        cities(&whole_calls(&plain))
    );
    // Streamed: the same calls, a grounded string shown once it stands.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (_, got, _, _) = reassemble(&sse_json(&s.post(CC, &streamed)));
    let got: Vec<(String, String)> = got.into_iter().map(|c| (c.1, c.2)).collect();
    assert_eq!(got, calls);
    // Not a boolean: a 400 naming the field.
    let r = s.post(CC, &ask(json!({"formwork_grounded": "yes"})));
    let e = assert_error(&r, 400, "invalid_type");
    assert_eq!(e["param"], "formwork_grounded");
}
