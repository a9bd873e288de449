//! A bounded load test on loopback, for correctness, not speed: 16 concurrent clients
//! x 4 requests over three schemas against `formwork serve --parallel 2` with
//! smollm2-135m (the tests' `FORMWORK_MODEL`, for speed). Every answer must be a 200 whose content is valid
//! under the schema it asked for (checked by formwork's validator, not the server's
//! verdict), with a distinct id and the usage adding up: nothing lost or garbled.

mod common;
#[path = "common/server.rs"]
mod server;

use std::collections::HashSet;
use std::sync::Arc;

use formwork::validate::{Validator, Verdict};
use serde_json::{json, Value};
use server::{Server, TEST_MODEL};

fn schemas() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        (
            "Person",
            json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                   "required": ["name", "age"], "additionalProperties": false}),
            "Grace Hopper was 85.",
        ),
        (
            "Order",
            json!({"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}, "qty": {"type": "integer", "minimum": 1, "maximum": 99},
                   "express": {"type": "boolean"}}, "required": ["sku", "qty", "express"], "additionalProperties": false}),
            "Send 3 of ABC-123 by express.",
        ),
        (
            "Mood",
            json!({"type": "object", "properties": {"mood": {"enum": ["happy", "sad", "neutral"]}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2}},
                   "required": ["mood", "tags"], "additionalProperties": false}),
            "What a lovely sunny day!",
        ),
    ]
}

#[test]
fn sixteen_clients_four_requests_three_schemas_all_valid() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Arc::new(Server::start(
        "load",
        &["--parallel", "2", "--max-queue", "16"],
        &[],
    ));
    let schemas = Arc::new(schemas());
    let handles: Vec<_> = (0..16)
        .map(|client| {
            let s = s.clone();
            let schemas = schemas.clone();
            std::thread::spawn(move || {
                let mut out = Vec::new();
                for k in 0..4 {
                    let which = (client + k) % 3;
                    let (name, schema, text) = &schemas[which];
                    let body = json!({"model": TEST_MODEL, "max_completion_tokens": 40,
                        "messages": [{"role": "user", "content": format!("{text} (client {client}, request {k})")}],
                        "response_format": {"type": "json_schema", "json_schema": {"name": name, "strict": true, "schema": schema}}});
                    let r = s.post("/v1/chat/completions", &body);
                    out.push((which, r.status, r.text()));
                }
                out
            })
        })
        .collect();
    let validators: Vec<Validator> = schemas
        .iter()
        .map(|(_, sc, _)| Validator::new(sc).unwrap())
        .collect();
    let mut ids = HashSet::new();
    let mut n = 0;
    for h in handles {
        for (which, status, text) in h.join().unwrap() {
            n += 1;
            assert_eq!(status, 200, "{text}");
            let v: Value =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("garbled ({e}): {text}"));
            assert!(
                ids.insert(v["id"].as_str().unwrap().to_string()),
                "duplicate id {}",
                v["id"]
            );
            let content = v["choices"][0]["message"]["content"].as_str().unwrap();
            match validators[which].check(content) {
                Verdict::Valid(_) => {}
                other => panic!("schema {which}: invalid answer {content:?}: {other:?}"),
            }
            assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
            assert_eq!(v["formwork"]["verdict"], "valid");
            let u = &v["usage"];
            assert_eq!(
                u["total_tokens"].as_u64(),
                Some(
                    u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
                )
            );
        }
    }
    assert_eq!(n, 64, "requests lost");
    assert_eq!(ids.len(), 64);
    // The two engine threads decoded together: most passes held both requests.
    let metrics = s.get("/metrics").text();
    let counter = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics:\n{metrics}"))
    };
    let passes = counter("formwork_batched_forward_passes_total");
    let rows = counter("formwork_batched_forward_sequences_total");
    assert!(
        passes > 0.0 && rows / passes > 1.3,
        "{rows} sequences in {passes} passes"
    );
    // The server is idle again and still answers.
    let h = s.get("/health").json();
    assert_eq!(
        (h["running"].as_u64(), h["waiting"].as_u64()),
        (Some(0), Some(0)),
        "{h}"
    );
    s.assert_serving();
}

/// The value of the unlabelled counter `name` in Prometheus text; 0 before it is exported.
fn counter(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// A full queue refuses a request with a new schema before compiling it: the admission
/// permit comes before the compile slot. Counted, not timed: the compile counter does
/// not move while the queue is full, and the same schema later is a cache miss
/// compiled once. See: issue 48, "schemas compile before admission".
#[test]
fn a_full_queue_refuses_new_schemas_without_compiling_them() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let s = Server::start("full", &["--parallel", "1", "--max-queue", "0"], &[]);
    // One long request holds the only permit.
    let mut long = s.connect();
    let body = json!({"model": TEST_MODEL, "max_completion_tokens": 2000,
        "messages": [{"role": "user", "content": "Write a very long story about a lighthouse."}]});
    server::send(
        &mut long,
        "POST",
        "/v1/chat/completions",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    let mut polls = 0;
    while s.get("/health").json()["running"] != 1 {
        polls += 1;
        assert!(polls < 3000, "the long request never ran");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let compiles = || counter(&s.get("/metrics").text(), "formwork_schema_compiles_total");
    let before = compiles();
    let schema = |i: usize| {
        json!({"type": "object", "properties": {format!("field_{i}"): {"type": "integer", "minimum": i}},
               "required": [format!("field_{i}")], "additionalProperties": false})
    };
    let ask = |i: usize| {
        s.post(
            "/v1/chat/completions",
            &json!({"model": TEST_MODEL, "max_completion_tokens": 20,
                "messages": [{"role": "user", "content": "A number, please."}],
                "response_format": {"type": "json_schema", "json_schema": {"name": format!("S{i}"), "schema": schema(i)}}}),
        )
    };
    for i in 0..8 {
        let r = ask(i);
        assert_eq!(r.status, 503, "{}", r.text());
        assert_eq!(r.json()["error"]["code"], "queue_full", "{}", r.text());
    }
    assert_eq!(compiles(), before, "a refused request compiled its schema");
    assert_eq!(
        s.get("/health").json()["running"],
        1,
        "the long request ended early"
    );
    // The client goes away: its slot frees, and the same schema now compiles, once.
    drop(long);
    let mut polls = 0;
    loop {
        let h = s.get("/health").json();
        if h["running"] == 0 && h["waiting"] == 0 {
            break;
        }
        polls += 1;
        assert!(polls < 1000, "the slot was never freed: {h}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let r = ask(3);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["formwork"]["cache_hit"], false, "{}", r.text());
    assert_eq!(compiles(), before + 1.0);
    let r = ask(3);
    assert_eq!(r.json()["formwork"]["cache_hit"], true, "{}", r.text());
    assert_eq!(compiles(), before + 1.0);
}
