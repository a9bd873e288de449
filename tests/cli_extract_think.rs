//! `formwork extract --think-budget N` end to end: a Qwen3-shaped synthesised file (one
//! layer, random weights, llama.cpp's qwen2 vocabulary, Qwen3's chat template with its
//! think block, as tests/serve_think.rs makes it) gives an envelope whose `reasoning` is
//! the thought and whose value is the answer's, one document and a batch on two
//! workers; a model without think markers (smollm2-135m) is refused before any record
//! runs, in one line, exit 2. The text is noise: the checks are of shape, validity and
//! counts, not content.

#[allow(dead_code)]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const SCHEMA: &str = r#"{"type": "object", "properties": {"qty": {"type": "integer"}},
  "required": ["qty"], "additionalProperties": false}"#;

/// A scratch folder with the schema, a document and a two-record batch.
fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("formwork-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("schema.json"), SCHEMA).unwrap();
    std::fs::write(dir.join("doc.txt"), "Please send 3 boxes.").unwrap();
    std::fs::write(
        dir.join("in.jsonl"),
        "{\"id\": 1, \"text\": \"Send 3 boxes.\"}\n{\"id\": 2, \"text\": \"Two crates, please.\"}\n",
    )
    .unwrap();
    dir
}

/// The think block's markers in tokens: `<think>\n` (open), `</think>`, `\n\n` (after).
fn marker_tokens(model: &Path) -> (usize, usize, usize) {
    let tok = formwork_models::tokenizer::GgufTokenizer::from_file(model).unwrap();
    let n = |s: &str| tok.encode(s).unwrap().len();
    (n("<think>\n"), n("</think>"), n("\n\n"))
}

/// The envelope's thought and its counts: `tokens_reasoning` is the block, markers
/// included; the thought proper is at most `budget` tokens, and exactly `budget` when
/// the engine closed the block.
fn check_thought(env: &Value, budget: usize, markers: (usize, usize, usize)) {
    assert!(env["reasoning"].is_string(), "{env}");
    let n = env["tokens_reasoning"].as_u64().expect("tokens_reasoning") as usize;
    let (open, close, after) = markers;
    if env["reasoning_cut"] == Value::Bool(true) {
        assert_eq!(n, open + budget + close + after, "{env}");
    } else {
        // The model closed the block itself: its close marker is among its tokens.
        assert!(n <= open + budget + after, "{env}");
    }
    assert!(env["verdict"] == "valid", "{env}");
    assert!(env["value"]["qty"].is_i64(), "{env}");
    let text = env["text"].as_str().unwrap();
    let parsed: Value = serde_json::from_str(text).expect("text is the answer alone");
    assert_eq!(parsed, env["value"]);
    assert!(
        env["confidence"].as_object().unwrap().keys().eq(["/qty"]),
        "{env}"
    );
}

/// `formwork extract --schema schema.json --max-tokens 16 ARGS` in `dir`; its exit code
/// must be `code`.
fn extract(dir: &Path, env: &[(&str, &Path)], args: &[&str], code: i32) -> Output {
    let head = ["extract", "--schema", "schema.json", "--max-tokens", "16"];
    formwork(dir, env, &[&head[..], args].concat(), code)
}

/// `formwork ARGS` in `dir` with `env`; its exit code must be `code`.
fn formwork(dir: &Path, env: &[(&str, &Path)], args: &[&str], code: i32) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_formwork"));
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run formwork");
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The envelope of one document (`--input doc.txt --json`) on `model`.
fn envelope(dir: &Path, model: &str, args: &[&str]) -> Value {
    let mut all = vec!["--model", model, "--input", "doc.txt", "--json"];
    all.extend_from_slice(args);
    let out = extract(dir, &[], &all, 0);
    serde_json::from_slice(&out.stdout).expect("one envelope")
}

#[test]
fn extract_think_budget_gives_reasoning_apart_from_the_value() {
    let Some(vocab) = common::qwen2_vocab() else {
        return;
    };
    let dir = scratch("extract-think");
    let model = dir.join("qwen3-think.gguf");
    common::synth_qwen3(&vocab, &model);
    let markers = marker_tokens(&model);
    let m = model.to_str().unwrap();

    let env = envelope(&dir, m, &["--think-budget", "16"]);
    check_thought(&env, 16, markers);

    // A budget of 0: no thought, no reasoning keys.
    let env = envelope(&dir, m, &["--think-budget", "0"]);
    assert!(env.get("reasoning").is_none(), "{env}");
    assert!(env.get("tokens_reasoning").is_none(), "{env}");

    // A batch on two workers: every line has its own thought; the log counts it.
    let batch = [
        "--jsonl",
        "in.jsonl",
        "--out",
        "out.jsonl",
        "--log",
        "log.jsonl",
    ];
    let mut args = vec![
        "--model",
        m,
        "--parallel",
        "2",
        "--think-budget",
        "8",
        "--quiet",
    ];
    args.extend_from_slice(&batch);
    extract(&dir, &[], &args, 0);
    let lines = std::fs::read_to_string(dir.join("out.jsonl")).unwrap();
    let records: Vec<Value> = (lines.lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 2, "{lines}");
    for (r, id) in records.iter().zip([1, 2]) {
        assert_eq!(r["id"], id);
        check_thought(r, 8, markers);
    }
    let log = std::fs::read_to_string(dir.join("log.jsonl")).unwrap();
    for l in log.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        assert!(v["tokens_reasoning"].as_u64().unwrap() > 0, "{v}");
        assert!(v["reasoning_cut"].is_boolean(), "{v}");
        assert!(
            v.get("reasoning").is_none(),
            "no text without --log-content: {v}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_model_without_think_markers_is_refused_in_one_line() {
    let Some(home) = common::home_with_smollm2() else {
        return;
    };
    let dir = scratch("extract-no-think");
    let env = [("FORMWORK_HOME", home.as_path())];
    let smol = [
        "--model",
        "smollm2-135m",
        "--device",
        "cpu",
        "--input",
        "doc.txt",
        "--json",
    ];
    for (think, flag) in [
        (&["--think-budget", "16"][..], "--think-budget 16"),
        (&["--think"][..], "--think (a budget of 1024 tokens)"),
    ] {
        let out = extract(&dir, &env, &[&smol[..], think].concat(), 2);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.stdout.is_empty(), "no envelope");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(flag), "{stderr}");
        assert!(stderr.contains("smollm2-135m"), "{stderr}");
        assert!(stderr.contains("no think markers"), "{stderr}");
    }
    // A budget of 0 asks nothing of it: the run goes on.
    extract(
        &dir,
        &env,
        &[&smol[..], &["--think-budget", "0"]].concat(),
        0,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `formwork bench --think-budget N` on the same file: the report says how it ran,
/// keeps each record's thought apart from the value it scores, and counts the thought
/// tokens and the blocks the budget closed; a model without markers is refused.
#[test]
fn bench_think_budget_keeps_each_records_thought_in_the_report() {
    let Some(vocab) = common::qwen2_vocab() else {
        return;
    };
    let dir = scratch("bench-think");
    let model = dir.join("qwen3-think.gguf");
    common::synth_qwen3(&vocab, &model);
    let markers = marker_tokens(&model);
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let mut data = String::new();
    for (id, text, qty) in [("a", "Send 3 boxes.", 3), ("b", "Two crates, please.", 2)] {
        let line = serde_json::json!({"id": id, "text": text, "schema": schema,
            "schema_name": "Qty", "expected": {"qty": qty}});
        data.push_str(&format!("{line}\n"));
    }
    std::fs::write(dir.join("data.jsonl"), data).unwrap();
    let bench = |args: &[&str], env: &[(&str, &Path)], code: i32| {
        let head = ["bench", "--dataset", "data.jsonl", "--modes", "masked"];
        let tail = ["--max-tokens", "16", "--report", "rep"];
        formwork(&dir, env, &[&head[..], &tail[..], args].concat(), code)
    };
    let m = model.to_str().unwrap();
    let out = bench(&["--model", m, "--think-budget", "8"], &[], 0);
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("thinking up to 8 tokens"), "{md}");
    assert!(md.contains("thought tok/record"), "{md}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(dir.join("rep/report.json")).unwrap()).unwrap();
    assert_eq!(report["think"], 8);
    let records = report["records"].as_array().unwrap();
    assert_eq!(records.len(), 2);
    let mut total = 0;
    let mut cut = 0;
    let mut short = 0;
    for r in records {
        short += usize::from(r["cut_short"] == Value::Bool(true));
        assert_eq!(r["verdict"], "valid", "{r}");
        assert!(r["reasoning"].is_string(), "{r}");
        let n = r["tokens_reasoning"].as_u64().unwrap() as usize;
        let (open, close, after) = markers;
        if r["reasoning_cut"] == Value::Bool(true) {
            assert_eq!(n, open + 8 + close + after, "{r}");
            cut += 1;
        } else {
            assert!(n > 0 && n <= open + 8 + after, "{r}");
        }
        assert!(r["value"]["qty"].is_i64(), "the value is the answer's: {r}");
        total += n;
    }
    let s = &report["overall"]["masked"];
    assert_eq!(s["tokens_reasoning_total"], total);
    assert_eq!(s["reasoning_cut"], cut);
    assert_eq!(s["cut_short"], short);

    // Not asked: no thought in the report.
    bench(&["--model", m], &[], 0);
    let report: Value =
        serde_json::from_slice(&std::fs::read(dir.join("rep/report.json")).unwrap()).unwrap();
    assert!(report["think"].is_null());
    assert_eq!(report["overall"]["masked"]["tokens_reasoning_total"], 0);
    assert!(report["records"][0].get("reasoning").is_none());

    if let Some(home) = common::home_with_smollm2() {
        let env = [("FORMWORK_HOME", home.as_path())];
        let out = bench(
            &["--model", "smollm2-135m", "--device", "cpu", "--think"],
            &env,
            2,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--think (a budget of 1024 tokens)"),
            "{stderr}"
        );
        assert!(stderr.contains("no think markers"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
