//! `formwork serve` over real HTTP: the real binary on a free loopback port with
//! smollm2-135m (the tests' `FORMWORK_MODEL`, and the fastest model). Every row of docs/serving.md's
//! error table is asserted here: its status, the OpenAI error object, and a server that
//! still answers a real completion afterwards. Then the success shapes, streaming,
//! a client disconnect and a shutdown during a running request.
//!
//! SKIPPED (counted as passed by cargo, but printed) when smollm2-135m is not fetched.

mod common;
#[path = "common/server.rs"]
mod server;

use std::io::{BufRead, BufReader, Read, Write};
use std::time::{Duration, Instant};

use formwork::serve::{OPEN_ROUTES, ROUTES, TEST_ROUTES};
use serde_json::{json, Value};
use server::{assert_error, Server, TEST_MODEL};

fn chat(body: Value) -> Value {
    let mut b = json!({"model": TEST_MODEL, "messages": [{"role": "user", "content": "Give me a person."}]});
    for (k, v) in body.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn person() -> Value {
    json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
           "required": ["name", "age"], "additionalProperties": false})
}

#[test]
fn every_error_row_is_an_openai_error_and_the_server_keeps_serving() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start(
        "errors",
        &[
            "--parallel",
            "1",
            "--max-queue",
            "0",
            "--max-body-bytes",
            "65536",
        ],
        &[("FORMWORK_SERVE_TEST_HOOKS", "1")],
    );
    let cc = "/v1/chat/completions";
    let json_ct = [("Content-Type", "application/json")];

    // 400: a body that is not JSON.
    let r = s.request("POST", cc, &json_ct, b"{\"model\": ");
    let e = assert_error(&r, 400, "invalid_json");
    assert_eq!(e["type"], "invalid_request_error");
    s.assert_serving();

    // 400: wrong types, each naming its parameter.
    let r = s.post(cc, &json!({"model": TEST_MODEL, "messages": "hi"}));
    assert_eq!(assert_error(&r, 400, "invalid_type")["param"], "messages");
    let r = s.post(cc, &chat(json!({"temperature": "hot"})));
    assert_eq!(
        assert_error(&r, 400, "invalid_type")["param"],
        "temperature"
    );
    let r = s.post(cc, &json!({"messages": [{"role": "user", "content": "x"}]}));
    assert_eq!(
        assert_error(&r, 400, "missing_required_parameter")["param"],
        "model"
    );
    let r = s.post(cc, &chat(json!({"response_format": {"type": "yaml"}})));
    assert_eq!(
        assert_error(&r, 400, "invalid_value")["param"],
        "response_format.type"
    );
    s.assert_serving();

    // 404: an unknown route, and an unknown model.
    let r = s.get("/v1/nothing");
    assert_error(&r, 404, "unknown_url");
    let r = s.get("/v1/models/gpt-4o");
    assert_error(&r, 404, "model_not_found");
    let r = s.post(cc, &chat(json!({"model": "gpt-4o"})));
    assert_eq!(assert_error(&r, 404, "model_not_found")["param"], "model");
    // 405: a known route, the wrong method.
    let r = s.get(cc);
    assert_error(&r, 405, "method_not_allowed");
    let r = s.request("DELETE", "/v1/models", &[], b"");
    assert_error(&r, 405, "method_not_allowed");
    s.assert_serving();

    // 413: a body over --max-body-bytes.
    let big = chat(json!({"messages": [{"role": "user", "content": "x".repeat(70_000)}]}));
    let r = s.post(cc, &big);
    assert_error(&r, 413, "request_too_large");
    s.assert_serving();

    // 400 unsupported_schema_keyword, whatever `strict` says, with LangChain's prefix,
    // the keyword and its JSON Pointer.
    for strict in [true, false] {
        let schema = json!({"type": "object", "properties": {"tags": {"type": "array", "contains": {"const": "x"}}}});
        let r = s.post(
            cc,
            &chat(json!({"response_format": {"type": "json_schema", "json_schema": {"name": "Tagged", "strict": strict, "schema": schema}}})),
        );
        let e = assert_error(&r, 400, "unsupported_schema_keyword");
        assert_eq!(e["param"], "response_format");
        let m = e["message"].as_str().unwrap();
        assert!(
            m.starts_with("Invalid schema for response_format 'Tagged':"),
            "{m}"
        );
        assert!(
            m.contains("'contains'") && m.contains("/properties/tags/contains"),
            "{m}"
        );
    }
    // The flat form gets the same answer.
    let r = s.post(
        cc,
        &chat(json!({"response_format": {"type": "json_schema", "name": "Flat", "schema": {"type": "array", "contains": {"type": "null"}}}})),
    );
    let e = assert_error(&r, 400, "unsupported_schema_keyword");
    assert!(e["message"]
        .as_str()
        .unwrap()
        .starts_with("Invalid schema for response_format 'Flat':"));
    s.assert_serving();

    // 400 schema_too_complex, quoting the limit and the value: 17 x 17 object
    // alternatives after distributing anyOf over allOf, over the limit of 256.
    let branch = |p: &str| json!({"anyOf": (0..17).map(|i| json!({"type": "object", "required": [format!("{p}{i}")]})).collect::<Vec<_>>()});
    let complex = json!({"allOf": [branch("a"), branch("b")]});
    let r = s.post(
        cc,
        &chat(json!({"response_format": {"type": "json_schema", "json_schema": {"name": "Big", "schema": complex}}})),
    );
    let e = assert_error(&r, 400, "schema_too_complex");
    let m = e["message"].as_str().unwrap();
    assert!(
        m.starts_with("Invalid schema for response_format 'Big':")
            && m.contains("alternatives")
            && m.contains("over the limit of 256"),
        "{m}"
    );
    let given: usize = m
        .split("allOf ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no value in {m}"));
    assert!(given > 256, "{m}");
    s.assert_serving();

    // 400 max_tokens_too_small, quoting the minimum; max_completion_tokens wins.
    let rf = json!({"type": "json_schema", "json_schema": {"name": "Person", "schema": person()}});
    let r = s.post(
        cc,
        &chat(json!({"response_format": rf, "max_completion_tokens": 2, "max_tokens": 500})),
    );
    let e = assert_error(&r, 400, "max_tokens_too_small");
    assert_eq!(e["param"], "max_completion_tokens");
    let m = e["message"].as_str().unwrap().to_string();
    let min: usize = m
        .split("takes ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no minimum in {m}"));
    assert!(min > 2, "{m}");
    // At exactly the minimum the answer is valid and finishes with "stop".
    let r = s.post(cc, &chat(json!({"response_format": rf, "max_tokens": min})));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    assert_eq!(v["formwork"]["verdict"], "valid", "{v}");
    let content: Value =
        serde_json::from_str(v["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert!(
        content["name"].is_string() && content["age"].is_i64(),
        "{content}"
    );

    // 400 unsupported_parameter: tools that are not functions, images, n > 1.
    let tools = json!([{"type": "web_search"}]);
    let r = s.post(cc, &chat(json!({"tools": tools})));
    assert_eq!(
        assert_error(&r, 400, "unsupported_parameter")["param"],
        "tools[0].type"
    );
    let img = json!([{"role": "user", "content": [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]);
    let r = s.post(cc, &chat(json!({"messages": img})));
    assert_eq!(
        assert_error(&r, 400, "unsupported_parameter")["param"],
        "messages[0].content[1]"
    );
    let r = s.post(cc, &chat(json!({"n": 2})));
    assert_error(&r, 400, "unsupported_parameter");
    s.assert_serving();

    // 500: a panic in a handler, and one in an engine thread; the server goes on.
    let r = s.request("POST", "/__test/panic", &[], b"");
    assert_error(&r, 500, "internal_error");
    s.assert_serving();
    let r = s.post(
        cc,
        &chat(json!({"messages": [{"role": "user", "content": "__formwork_test_panic__"}]})),
    );
    assert_error(&r, 500, "internal_error");
    s.assert_serving();

    // 400 max_tokens_too_small also when the request sets no budget: the default
    // (1024) is the budget, and 3000 booleans take more tokens than that.
    let many = json!({"type": "json_schema", "json_schema": {"name": "Many", "schema":
        {"type": "array", "items": {"type": "boolean"}, "minItems": 3000}}});
    let minimum = |m: &str| -> usize {
        m.split("takes ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no minimum in {m}"))
    };
    let r = s.post(cc, &chat(json!({"response_format": many})));
    let e = assert_error(&r, 400, "max_tokens_too_small");
    assert_eq!(e["param"], "max_completion_tokens");
    let m = e["message"].as_str().unwrap();
    assert!(
        m.contains("is not set, so the default of 1024 applies"),
        "{m}"
    );
    assert!(minimum(m) > 1024, "{m}");
    let r = s.post(
        "/v1/responses",
        &json!({"model": TEST_MODEL, "input": "Many booleans.",
                "text": {"format": {"type": "json_schema", "name": "Many", "schema": many["json_schema"]["schema"]}}}),
    );
    assert_eq!(
        assert_error(&r, 400, "max_tokens_too_small")["param"],
        "max_output_tokens"
    );
    s.assert_serving();

    // Locks poisoned by a panic (the schema and tool caches, the log, the job queue)
    // recover: the cache still stores and finds, the log still grows, jobs still run.
    let r = s.request("POST", "/__test/poison", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let logged = s.log_lines().len();
    let pet = json!({"type": "json_schema", "json_schema": {"name": "Pet", "schema":
        {"type": "object", "properties": {"pet": {"enum": ["cat", "dog"]}}, "required": ["pet"], "additionalProperties": false}}});
    for hit in [false, true] {
        let r = s.post(
            cc,
            &chat(json!({"response_format": pet, "max_completion_tokens": 20})),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["formwork"]["cache_hit"], hit, "{}", r.text());
    }
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters":
        {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}]);
    for _ in 0..2 {
        let r = s.post(
            cc,
            &chat(json!({"tools": tools, "max_completion_tokens": 40})),
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert!(
        s.log_lines().len() >= logged + 4,
        "the log stopped after the poisoning"
    );
    s.assert_serving();

    // 503 with Retry-After: --parallel 1 --max-queue 0 and one request running.
    let port = s.port;
    let long = std::thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let body = chat(
            json!({"max_completion_tokens": 60, "messages": [{"role": "user", "content": "Write a long story about a cat."}]}),
        );
        server::send(
            &mut c,
            "POST",
            "/v1/chat/completions",
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        );
        server::read_response(&mut c).status
    });
    let t = Instant::now();
    let mut saw_busy = false;
    while t.elapsed() < Duration::from_secs(60) && !long.is_finished() {
        if s.get("/health").json()["running"] == 1 {
            saw_busy = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(saw_busy, "the long request never ran");
    let r = s.post(cc, &chat(json!({"max_completion_tokens": 3})));
    let e = assert_error(&r, 503, "queue_full");
    assert_eq!(e["type"], "server_error");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(long.join().unwrap(), 200);
    s.assert_serving();

    // Every response carried a request id, and the log has no content.
    let log = std::fs::read_to_string(&s.log).unwrap();
    assert!(
        !log.contains("Give me a person") && !log.contains("Write a long story"),
        "content in the log"
    );
    assert!(s
        .log_lines()
        .iter()
        .filter(|l| l["event"] == "request")
        .all(|l| l["request_id"].as_str().is_some_and(|id| id.len() == 16)));
}

/// Every route of the server's one list (and the test hooks', and a path that is no
/// route) refuses a request without the key, or with a wrong one; only the open
/// routes (`/health`) answer without it.
#[test]
fn api_key_guards_every_route_but_health() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start(
        "key",
        &["--api-key", "sekret"],
        &[("FORMWORK_SERVE_TEST_HOOKS", "1")],
    );
    let chat_body = chat(json!({"max_completion_tokens": 3})).to_string();
    let responses_body =
        json!({"model": TEST_MODEL, "input": "Say hi.", "max_output_tokens": 3}).to_string();
    let body_of = |method: &str, path: &str| -> Vec<u8> {
        match (method, path) {
            ("POST", "/v1/responses") => responses_body.clone().into_bytes(),
            ("POST", _) => chat_body.clone().into_bytes(),
            _ => Vec::new(),
        }
    };
    let json_ct = ("Content-Type", "application/json");
    let mut checked = 0;
    for &(method, pattern) in ROUTES
        .iter()
        .chain(TEST_ROUTES)
        .chain(&[("GET", "/v1/nothing")])
    {
        let path = pattern.replace("{id}", TEST_MODEL);
        let body = &body_of(method, &path)[..];
        let r = s.request(method, &path, &[json_ct], body);
        if OPEN_ROUTES.contains(&pattern) {
            assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
            continue;
        }
        let e = assert_error(&r, 401, "invalid_api_key");
        assert!(
            e["message"].as_str().unwrap().contains("didn't provide"),
            "{method} {path}: {e}"
        );
        let r = s.request(
            method,
            &path,
            &[json_ct, ("Authorization", "Bearer wrong")],
            body,
        );
        assert_error(&r, 401, "invalid_api_key");
        checked += 1;
    }
    assert_eq!(
        checked,
        ROUTES.len() - OPEN_ROUTES.len() + TEST_ROUTES.len() + 1
    );
    // With the key, the routes answer.
    let key = ("Authorization", "Bearer sekret");
    for &(method, pattern) in ROUTES {
        let path = pattern.replace("{id}", TEST_MODEL);
        let body = &body_of(method, &path)[..];
        let r = s.request(method, &path, &[json_ct, key], body);
        assert_eq!(r.status, 200, "{method} {path}: {}", r.text());
    }
    let r = s.request("GET", "/v1/models", &[key], b"");
    assert_eq!(r.json()["data"][0]["id"], TEST_MODEL);
}

/// A client that sends half its headers is dropped after --header-timeout; one that
/// sends its headers and half its body gets a 408 after --request-timeout. The server
/// serves on.
#[test]
fn slow_clients_are_cut_off_by_the_header_and_request_timeouts() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start(
        "slow",
        &["--header-timeout", "1", "--request-timeout", "5"],
        &[],
    );
    // Half a header: the server closes the connection (hyper may first write a 408
    // head). Without the timeout the read would wait out its own 600 s limit.
    let mut c = s.connect();
    c.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
        .unwrap();
    let mut got = Vec::new();
    c.read_to_end(&mut got)
        .expect("the server did not close the connection");
    let got = String::from_utf8_lossy(&got);
    assert!(got.is_empty() || got.starts_with("HTTP/1.1 408"), "{got}");

    // Half a body.
    let mut c = s.connect();
    let body = chat(json!({"max_completion_tokens": 3})).to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(&body.as_bytes()[..body.len() / 2]).unwrap();
    let r = server::read_response(&mut c);
    let e = assert_error(&r, 408, "request_timeout");
    assert!(
        e["message"].as_str().unwrap().contains("--request-timeout"),
        "{e}"
    );
    s.assert_serving();
    assert!(s
        .log_lines()
        .iter()
        .any(|l| l["event"] == "request" && l["status"] == 408));
}

#[test]
fn answers_have_the_openai_shape_and_the_formwork_object() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start("shapes", &[], &[]);
    let cc = "/v1/chat/completions";
    let r = s.get("/v1/models");
    assert_eq!(r.status, 200);
    let m = r.json();
    assert_eq!(m["object"], "list");
    assert_eq!(m["data"][0]["object"], "model");
    let r = s.get(&format!("/v1/models/{TEST_MODEL}"));
    assert_eq!(r.json()["id"], TEST_MODEL);

    let system = "You are a helpful assistant that writes JSON about people.";
    let ask = |rf: Value, content: &str| {
        s.post(
            cc,
            &json!({"model": TEST_MODEL, "max_completion_tokens": 40, "response_format": rf,
                    "messages": [{"role": "system", "content": system}, {"role": "user", "content": content}]}),
        )
    };
    let canonical = json!({"type": "json_schema", "json_schema": {"name": "Person", "strict": true, "schema": person()}});
    let r = ask(canonical.clone(), "Ada Lovelace was 36.");
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["model"], TEST_MODEL);
    let c = &v["choices"][0];
    assert_eq!(c["index"], 0);
    assert_eq!(c["message"]["role"], "assistant");
    assert_eq!(c["finish_reason"], "stop");
    let content: Value = serde_json::from_str(c["message"]["content"].as_str().unwrap()).unwrap();
    assert!(
        content["name"].is_string() && content["age"].is_u64(),
        "{content}"
    );
    let u = &v["usage"];
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
    assert!(u["prompt_tokens_details"]["cached_tokens"].is_u64());
    let f = &v["formwork"];
    assert_eq!(f["verdict"], "valid");
    assert_eq!(f["cache_hit"], false);
    assert_eq!(f["schema_sha256"].as_str().unwrap().len(), 64);
    assert!(f["compile_ms"].as_f64().unwrap() > 0.0);
    assert!(f["tokens_forced"].as_u64().unwrap() > 0, "{f}");
    assert!(f["errors"].as_array().unwrap().is_empty());
    assert!(f["incomplete_reason"].is_null());

    // The same schema with its keys in another order and the flat form: a cache hit,
    // and the shared system prompt comes from the KV cache.
    let mut reordered = serde_json::Map::new();
    for k in ["additionalProperties", "required", "properties", "type"] {
        reordered.insert(k.into(), person()[k].clone());
    }
    let flat = json!({"type": "json_schema", "name": "Person", "schema": Value::Object(reordered)});
    let r = ask(flat, "Alan Turing was 41.");
    assert_eq!(r.status, 200, "{}", r.text());
    let w = r.json();
    assert_eq!(w["formwork"]["cache_hit"], true);
    assert_eq!(w["formwork"]["schema_sha256"], f["schema_sha256"]);
    assert_eq!(w["formwork"]["compile_ms"], 0.0);
    assert!(
        w["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 10,
        "{}",
        w["usage"]
    );

    // json_object: any object, compact.
    let r = ask(json!({"type": "json_object"}), "Describe Ada as JSON.");
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    let obj: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(obj.is_object());
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");

    // text: unconstrained; a budget that runs out is "length" with the reason.
    let r = ask(
        json!({"type": "text"}),
        "Tell me a long story about the sea.",
    );
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert_eq!(v["formwork"]["incomplete_reason"], "max_tokens");
    assert_eq!(v["usage"]["completion_tokens"], 40);
    assert!(v["formwork"]["verdict"].is_null());
}

/// Reads one SSE response as it arrives; returns the `data:` payloads and the pings.
fn read_sse(s: &Server, body: &Value) -> (u16, Vec<(String, String)>, Vec<String>, usize) {
    let mut c = s.connect();
    server::send(
        &mut c,
        "POST",
        "/v1/chat/completions",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    let r = server::read_response(&mut c);
    let (data, pings) = r.sse();
    (r.status, r.headers, data, pings)
}

#[test]
fn streaming_sends_role_deltas_finish_usage_and_done() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    // The test hook pauses the engine for 1 s before its first pass: the stream is idle
    // for that long after its role chunk, so a keep-alive comment is certain (tokens alone
    // come faster than any interval, and a stream only pings when idle).
    let s = Server::start(
        "stream",
        &["--keep-alive", "0.05"],
        &[("FORMWORK_SERVE_TEST_HOOKS", "1")],
    );
    let body = chat(
        json!({"stream": true, "stream_options": {"include_usage": true}, "max_completion_tokens": 60,
        "messages": [{"role": "system", "content": "__formwork_test_pause_ms__ 1000"},
                     {"role": "user", "content": "Give me a person."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "Person", "schema": person()}}}),
    );
    let (status, headers, data, pings) = read_sse(&s, &body);
    assert_eq!(status, 200);
    assert!(
        headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("content-type")
                && v.starts_with("text/event-stream"))
    );
    // `--keep-alive 0.05` is raised to the server's floor of 100 ms (the default, 10 s,
    // would send none in the 1 s pause).
    assert!(pings > 0, "no `: ping` keep-alive at a 100 ms interval");
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    let fin = &chunks[chunks.len() - 2];
    assert_eq!(fin["choices"][0]["finish_reason"], "stop");
    assert_eq!(fin["formwork"]["verdict"], "valid");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    let deltas = chunks
        .iter()
        .filter(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .count();
    assert!(deltas > 2, "the text came in {deltas} deltas");
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(v["name"].is_string() && v["age"].is_u64());
    assert!(chunks[..chunks.len() - 2]
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null()));

    // An error after the stream began would be `data: {"error":…}`; an error found
    // before it is a plain OpenAI error with its status.
    let bad =
        chat(json!({"stream": true, "tools": [{"type": "function", "function": {"name": "f f"}}]}));
    let (status, _, _, _) = read_sse(&s, &bad);
    assert_eq!(status, 400);
}

#[test]
fn a_client_that_disconnects_cancels_its_request_and_frees_its_slot() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start("disconnect", &["--parallel", "1", "--max-queue", "0"], &[]);
    for stream in [true, false] {
        let body = chat(json!({"stream": stream, "max_completion_tokens": 2000,
            "messages": [{"role": "user", "content": "Write a very long story about a lighthouse."}]}));
        let mut c = s.connect();
        server::send(
            &mut c,
            "POST",
            "/v1/chat/completions",
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        );
        if stream {
            // Wait for the first content bytes, so the request surely runs.
            let mut r = BufReader::new(&mut c);
            let (status, _) = server::read_head(&mut r);
            assert_eq!(status, 200);
            let mut line = String::new();
            while r.read_line(&mut line).unwrap() > 0 && !line.contains("\"content\":\"") {}
        } else {
            let t = Instant::now();
            while s.get("/health").json()["running"] != 1 {
                assert!(
                    t.elapsed() < Duration::from_secs(60),
                    "the request never ran"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        drop(c);
        // 2000 tokens would take minutes; the slot must be free within seconds.
        let t = Instant::now();
        loop {
            let h = s.get("/health").json();
            if h["running"] == 0 && h["waiting"] == 0 {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "stream={stream}: slot still held: {h}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        s.assert_serving();
    }
}

#[test]
fn shutdown_during_a_running_request_lets_it_finish() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start("shutdown", &["--grace", "120"], &[]);
    let port = s.port;
    let running = std::thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let body = chat(
            json!({"max_completion_tokens": 50, "response_format": {"type": "json_schema", "json_schema": {"name": "Person", "schema": person()}}}),
        );
        server::send(
            &mut c,
            "POST",
            "/v1/chat/completions",
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        );
        server::read_response(&mut c)
    });
    let t = Instant::now();
    while s.get("/health").json()["running"] != 1 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the request never ran"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    s.terminate();
    let r = running.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["formwork"]["verdict"], "valid");
    // New connections are refused once it stopped; the process exits 0.
    let mut s = s;
    let t = Instant::now();
    let status = loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "did not exit after the request finished"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    assert!(s.log_lines().iter().any(|l| l["event"] == "shutdown"));
}

/// The value of the sample `name{labels}` in Prometheus text, whose labels include
/// every pair of `labels`; None when no such sample is exported (yet).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let (n, rest) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.strip_suffix('}')?),
            None => (series, ""),
        };
        if n != name {
            return None;
        }
        let have: Vec<(&str, &str)> = rest
            .split("\",")
            .filter(|kv| !kv.is_empty())
            .filter_map(|kv| {
                let (k, v) = kv.split_once("=\"")?;
                Some((k, v.trim_end_matches('"')))
            })
            .collect();
        labels
            .iter()
            .all(|want| have.contains(want))
            .then(|| value.parse().ok())
            .flatten()
    })
}

#[test]
fn metrics_counters_and_latency_histograms_move_after_a_request() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start("metrics", &[], &[]);
    let scrape = || {
        let r = s.get("/metrics");
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(
            r.header("content-type")
                .is_some_and(|c| c.starts_with("text/plain")),
            "{:?}",
            r.header("content-type")
        );
        r.text()
    };
    let cc = [("route", "/v1/chat/completions")];
    let ok = [("route", "/v1/chat/completions"), ("status", "200")];
    let before = scrape();
    let n = |t: &str, name: &str, l: &[(&str, &str)]| sample(t, name, l).unwrap_or(0.0);
    let req0 = n(&before, "formwork_http_requests_total", &ok);
    let count0 = n(&before, "formwork_http_request_duration_seconds_count", &cc);
    let sum0 = n(&before, "formwork_http_request_duration_seconds_sum", &cc);
    let completion0 = n(&before, "formwork_completion_tokens_total", &[]);
    let prompt0 = n(&before, "formwork_prompt_tokens_total", &[]);
    let misses0 = n(&before, "formwork_schema_cache_misses_total", &[]);
    let hits0 = n(&before, "formwork_schema_cache_hits_total", &[]);

    let body = chat(json!({"max_completion_tokens": 40, "response_format":
        {"type": "json_schema", "json_schema": {"name": "Person", "schema": person()}}}));
    let r = s.post("/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let usage = r.json()["usage"].clone();
    let bad = s.post(
        "/v1/chat/completions",
        &json!({"model": TEST_MODEL, "messages": "hi"}),
    );
    assert_error(&bad, 400, "invalid_type");

    let after = scrape();
    assert!(
        after.contains("# TYPE formwork_http_request_duration_seconds histogram"),
        "{after}"
    );
    assert_eq!(
        n(&after, "formwork_http_requests_total", &ok),
        req0 + 1.0,
        "{after}"
    );
    assert_eq!(
        n(
            &after,
            "formwork_http_requests_total",
            &[("route", "/v1/chat/completions"), ("status", "400")]
        ),
        n(
            &before,
            "formwork_http_requests_total",
            &[("route", "/v1/chat/completions"), ("status", "400")]
        ) + 1.0,
        "{after}"
    );
    // Both requests are in the route's histogram, and the 200 took measurable time.
    let count = n(&after, "formwork_http_request_duration_seconds_count", &cc);
    assert_eq!(count, count0 + 2.0, "{after}");
    assert!(
        n(&after, "formwork_http_request_duration_seconds_sum", &cc) > sum0,
        "{after}"
    );
    let inf = [("route", "/v1/chat/completions"), ("le", "+Inf")];
    assert_eq!(
        n(
            &after,
            "formwork_http_request_duration_seconds_bucket",
            &inf
        ),
        count,
        "{after}"
    );
    let fast = [("route", "/v1/chat/completions"), ("le", "0.005")];
    assert!(
        n(
            &after,
            "formwork_http_request_duration_seconds_bucket",
            &fast
        ) < count,
        "a model answer cannot take under 5 ms: {after}"
    );
    // The token counters moved by what the answer's usage says.
    assert_eq!(
        n(&after, "formwork_completion_tokens_total", &[]) - completion0,
        usage["completion_tokens"].as_f64().unwrap(),
        "{after}"
    );
    assert_eq!(
        n(&after, "formwork_prompt_tokens_total", &[]) - prompt0,
        usage["prompt_tokens"].as_f64().unwrap(),
        "{after}"
    );
    assert_eq!(
        n(&after, "formwork_schema_cache_misses_total", &[]),
        misses0 + 1.0
    );

    // The same schema again: a cache hit, counted.
    let r = s.post("/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let third = scrape();
    assert_eq!(
        n(&third, "formwork_schema_cache_hits_total", &[]),
        hits0 + 1.0,
        "{third}"
    );
    assert_eq!(
        n(&third, "formwork_http_requests_total", &ok),
        req0 + 2.0,
        "{third}"
    );
}
