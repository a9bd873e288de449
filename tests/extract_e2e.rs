//! End to end with real models: masked extraction is valid, free mode reports its
//! attempts, and a batch resumes without losing or repeating a record, with the small
//! SmolLM2-135M for speed; README command 1 with the default Qwen2.5-Coder-0.5B.
//! Skipped (with a message) when a model is not fetched: run `formwork models fetch
//! smollm2-135m` / `qwen2.5-coder-0.5b` (scripts/test does).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

mod common;

fn home() -> Option<PathBuf> {
    common::home_with_smollm2()
}

fn formwork(home: &PathBuf) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_formwork"));
    // The tests keep the small model for speed, whatever the default is.
    c.env("FORMWORK_HOME", home)
        .env("FORMWORK_MODEL", "smollm2-135m")
        .env("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0");
    c
}

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// `formwork extract --json ARGS --schema examples/SCHEMA --input examples/INPUT`: the
/// process output and its JSON envelope (a panic naming stderr when it is not JSON).
fn extract_example(home: &PathBuf, schema: &str, input: &str, args: &[&str]) -> (Output, Value) {
    let out = formwork(home)
        .args(["extract", "--json"])
        .args(args)
        .arg("--schema")
        .arg(examples().join(schema))
        .arg("--input")
        .arg(examples().join(input))
        .output()
        .unwrap();
    let env = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out, env)
}

#[test]
fn masked_order_email_is_valid() {
    let Some(home) = home() else { return };
    let (out, env) = extract_example(
        &home,
        "order_email.schema.json",
        "order_email.txt",
        &["--max-tokens", "160"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(env["verdict"], "valid", "{env}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(env["value"]["righe"].is_array(), "{env}");
    assert!(
        env["tokens_forced"].as_u64().unwrap() > 0,
        "no jump-forward: {env}"
    );
    assert_eq!(env["schema_sha256"].as_str().unwrap().len(), 64);

    // One hash for extract and serve: the schema with the keywords of its top object in
    // reverse order is the same schema, and serve computes its hash with the same
    // function (tests/serve_http.rs checks the server's side).
    let text = std::fs::read_to_string(examples().join("order_email.schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    let reversed: serde_json::Map<String, Value> = schema
        .as_object()
        .unwrap()
        .iter()
        .rev()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_ne!(
        serde_json::to_string(&reversed).unwrap(),
        serde_json::to_string(&schema).unwrap()
    );
    let dir = std::env::temp_dir().join(format!("formwork-hash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("reversed.schema.json");
    std::fs::write(&path, serde_json::to_string(&reversed).unwrap()).unwrap();
    let out = formwork(&home)
        .args(["extract", "--json", "--max-tokens", "8", "--schema"])
        .arg(&path)
        .arg("--input")
        .arg(examples().join("order_email.txt"))
        .output()
        .unwrap();
    let env2: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(env2["schema_sha256"], env["schema_sha256"], "{env2}");
    assert_eq!(
        env["schema_sha256"].as_str().unwrap(),
        formwork::engine::schema_sha256(&schema)
    );
}

#[test]
fn free_mode_counts_its_attempts() {
    let Some(home) = home() else { return };
    let (out, env) = extract_example(
        &home,
        "order_email.schema.json",
        "order_email.txt",
        &["--mode", "free", "--retries", "1", "--max-tokens", "96"],
    );
    let attempts = env["attempts"].as_u64().unwrap();
    // A failed first attempt must be retried once with the errors quoted.
    if env["verdict"] == "valid" {
        assert!((1..=2).contains(&attempts), "{env}");
        assert_eq!(out.status.code(), Some(0));
    } else {
        assert_eq!(attempts, 2, "{env}");
        assert_eq!(out.status.code(), Some(1), "{env}");
        assert!(
            env["value"].is_null(),
            "an invalid result must not carry a value: {env}"
        );
    }
}

#[test]
fn masked_vacation_request_is_valid() {
    let Some(home) = home() else { return };
    let (_, env) = extract_example(
        &home,
        "vacation.schema.json",
        "vacation_request.txt",
        &["--max-tokens", "96"],
    );
    assert_eq!(env["verdict"], "valid", "{env}");
    let v = &env["value"];
    assert!(
        ["complete", "needs_clarification", "not_a_request"]
            .contains(&v["status"].as_str().unwrap()),
        "{env}"
    );
    for k in ["start_date", "end_date"] {
        // A date the calendar has, or null: the grammar enforces `format: date`.
        if let Some(d) = v[k].as_str() {
            assert!(d.len() == 10 && d.as_bytes()[4] == b'-', "{env}");
        } else {
            assert!(v[k].is_null(), "{env}");
        }
    }
}

// `--out` and `--log` with `--input`: the file gets what stdout would (and stdout
// nothing), the log one line for the document, appended.
#[test]
fn out_and_log_are_honoured_for_one_document() {
    let Some(home) = home() else { return };
    let dir = std::env::temp_dir().join(format!("formwork-one-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (out_file, log_file) = (dir.join("out.json"), dir.join("log.jsonl"));
    std::fs::write(&out_file, "stale").unwrap();
    let input = examples().join("vacation_request.txt");
    for _ in 0..2 {
        let run = formwork(&home)
            .args(["extract", "--json", "--max-tokens", "96", "--schema"])
            .arg(examples().join("vacation.schema.json"))
            .arg("--input")
            .arg(&input)
            .arg("--out")
            .arg(&out_file)
            .arg("--log")
            .arg(&log_file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(0), "{stderr}");
        assert!(
            run.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&run.stdout)
        );
    }
    let env: Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    assert_eq!(env["verdict"], "valid", "{env}");
    let log = std::fs::read_to_string(&log_file).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert_eq!(lines[0]["record_id"], input.display().to_string());
    assert_eq!(lines[0]["verdict"], "valid");
    assert_eq!(lines[0]["schema_sha256"], env["schema_sha256"]);
    assert!(
        lines[0].get("document").is_none(),
        "no --log-content: {log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The JSON Pointers of the scalars (and empty containers) of `v`.
fn leaf_pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                leaf_pointers(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, x) in a.iter().enumerate() {
                leaf_pointers(x, format!("{at}/{i}"), out);
            }
        }
        _ => out.push(at),
    }
}

#[test]
fn every_value_has_a_confidence_and_review_reads_the_threshold() {
    let Some(home) = home() else { return };
    let run = |below: &str| {
        extract_example(
            &home,
            "vacation.schema.json",
            "vacation_request.txt",
            &["--max-tokens", "96", "--review-below", below],
        )
        .1
    };
    let env = run("0.5");
    assert_eq!(env["verdict"], "valid", "{env}");
    let conf = env["confidence"].as_object().expect("a confidence object");
    let mut leaves = Vec::new();
    leaf_pointers(&env["value"], String::new(), &mut leaves);
    let mut keys: Vec<String> = conf.keys().cloned().collect();
    leaves.sort();
    keys.sort();
    assert_eq!(
        keys, leaves,
        "one confidence per leaf value, nulls included: {env}"
    );
    let low: Vec<&String> = conf
        .iter()
        .filter(|(_, c)| {
            let c = c.as_f64().unwrap();
            assert!((0.0..=1.0).contains(&c), "{env}");
            c < 0.5
        })
        .map(|(k, _)| k)
        .collect();
    assert_eq!(env["needs_review"], !low.is_empty(), "{env}");
    let reasons = env["review_reasons"].as_array().map_or(0, Vec::len);
    assert_eq!(reasons, low.len(), "{env}");
    // 0 reviews nothing; the answer is the same (greedy).
    let none = run("0");
    assert_eq!(none["needs_review"], false, "{none}");
    assert_eq!(none["value"], env["value"]);
    assert_eq!(none["confidence"], env["confidence"]);
    // Not a probability: a usage error before any model is loaded.
    let out = formwork(&home)
        .args([
            "extract",
            "--review-below",
            "2",
            "--schema",
            "x.json",
            "--input",
            "-",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a number from 0 to 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn free_mode_vacation_runs_its_retry_path() {
    let Some(home) = home() else { return };
    // One token is too few for any JSON object: every attempt fails as not JSON
    // (or incomplete), so both attempts must be made and counted, and no value
    // may be passed off as a result.
    let (out, env) = extract_example(
        &home,
        "vacation.schema.json",
        "vacation_request.txt",
        &["--mode", "free", "--retries", "1", "--max-tokens", "1"],
    );
    assert_eq!(env["attempts"], 2, "{env}");
    assert_ne!(env["verdict"], "valid", "{env}");
    assert!(env["value"].is_null(), "{env}");
    assert_eq!(out.status.code(), Some(1), "{env}");
}

/// A free-mode retry feeds only the answer and the error message on top of the KV
/// state kept from the first attempt's prompt. It must decode exactly what a full
/// prefill of the retry prompt decodes (`--no-prefix-reuse`).
#[test]
fn free_mode_retry_reuses_the_first_prompt_without_changing_the_answer() {
    let Some(home) = home() else { return };
    let run = |extra: &[&str]| -> Value {
        let mut args = vec!["--mode", "free", "--retries", "1", "--max-tokens", "3"];
        args.extend_from_slice(extra);
        extract_example(&home, "vacation.schema.json", "vacation_request.txt", &args).1
    };
    let reused = run(&[]);
    let full = run(&["--no-prefix-reuse"]);
    // Three tokens are too few for the object: both runs must retry.
    assert_eq!(reused["attempts"], 2, "{reused}");
    assert_eq!(full["attempts"], 2, "{full}");
    assert_eq!(reused["text"], full["text"], "{reused}\n{full}");
    assert_eq!(reused["tokens_prompt"], full["tokens_prompt"]);
}

#[test]
fn ctrl_c_leaves_a_consistent_batch_that_resumes() {
    let Some(home) = home() else { return };
    let dir = std::env::temp_dir().join(format!("formwork-sigint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("s.json");
    std::fs::write(&schema, r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}"#).unwrap();
    let input = dir.join("in.jsonl");
    let lines: String = (0..20)
        .map(|i| format!("{{\"id\":\"r{i}\",\"text\":\"There are {i} boxes.\"}}\n"))
        .collect();
    std::fs::write(&input, lines).unwrap();
    let out = dir.join("out.jsonl");
    let mut child = formwork(&home)
        .args(["extract", "--quiet", "--max-tokens", "8", "--schema"])
        .arg(&schema)
        .arg("--jsonl")
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once two records are on disk. The deadline is a guard against a hung
    // child, not a speed check: two 8-token records take seconds on the slowest machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1800);
    loop {
        let n = std::fs::read_to_string(&out)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if n >= 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "hung: no record after 30 min"
        );
        assert!(child.try_wait().unwrap().is_none(), "the batch ended early");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let first = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert_eq!(first.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.ends_with('\n'), "a cut line after Ctrl-C: {text:?}");
    let n_first = text.lines().count();
    assert!(
        n_first < 20,
        "the signal came too late to test anything: {text}"
    );
    for l in text.lines() {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"));
    }
    // Resume: the rest is done once, nothing is repeated or lost.
    let again = formwork(&home)
        .args(["extract", "--quiet", "--max-tokens", "8", "--schema"])
        .arg(&schema)
        .arg("--jsonl")
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains(&format!(
            "{} processed, {n_first} already done",
            20 - n_first
        )),
        "{stderr}"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let mut ids: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    ids.sort_by_key(|s| s[1..].parse::<u32>().unwrap());
    let want: Vec<String> = (0..20).map(|i| format!("r{i}")).collect();
    assert_eq!(ids, want);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn batch_resumes_without_duplicates_or_loss() {
    let Some(home) = home() else { return };
    let dir = std::env::temp_dir().join(format!("formwork-batch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("s.json");
    std::fs::write(&schema, r#"{"type":"object","properties":{"city":{"type":["string","null"],"maxLength":20}},"required":["city"],"additionalProperties":false}"#).unwrap();
    let input = dir.join("in.jsonl");
    let mut lines = String::new();
    for (i, c) in ["Rome", "Paris", "Lecce", "Oslo", "Lima"]
        .iter()
        .enumerate()
    {
        lines.push_str(&format!(
            "{{\"id\":\"r{i}\",\"text\":\"I live in {c}.\"}}\n"
        ));
    }
    lines.push_str("this is not json\n");
    std::fs::write(&input, lines).unwrap();
    let out = dir.join("out.jsonl");
    // A previous run finished r0 and r1, then was killed in the middle of a line.
    std::fs::write(&out, "{\"id\":\"r0\",\"verdict\":\"valid\"}\n{\"id\":\"r1\",\"verdict\":\"valid\"}\n{\"id\":\"r2\",\"verd").unwrap();
    let run = formwork(&home)
        .args(["extract", "--max-tokens", "24", "--schema"])
        .arg(&schema)
        .arg("--jsonl")
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    // The malformed line is an error record: exit 2, and the batch went on.
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("progress: "), "no progress: {stderr}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.ends_with('\n'));
    let ids: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"))["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids, ["r0", "r1", "r2", "r3", "r4", "line:6"], "{text}");
    // A rerun has nothing left to do and appends nothing.
    let again = formwork(&home)
        .args(["extract", "--schema"])
        .arg(&schema)
        .arg("--jsonl")
        .arg(&input)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("0 processed, 6 already done"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--parallel 3`: three records decode together, and the output is what a serial run
/// writes, line for line (a sequence's logits in a batch equal its logits alone), in
/// input order, with error lines in place; the run says how full its passes were.
#[test]
fn parallel_batch_writes_what_a_serial_run_writes_in_input_order() {
    let Some(home) = home() else { return };
    let dir = std::env::temp_dir().join(format!("formwork-parallel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("s.json");
    std::fs::write(&schema, r#"{"type":"object","properties":{"city":{"type":["string","null"],"maxLength":20},"people":{"type":["integer","null"],"minimum":1}},"required":["city","people"],"additionalProperties":false}"#).unwrap();
    let input = dir.join("in.jsonl");
    let texts = [
        "I live in Rome.",
        "A table for four in Paris, please, around eight tonight if you still have room by the window.",
        "Lecce",
        "We are two travellers going to Oslo next week.",
        "Nothing here.",
    ];
    let mut lines = String::new();
    for (i, t) in texts.iter().enumerate() {
        lines.push_str(&format!(
            "{{\"id\":\"r{i}\",\"text\":{}}}\n",
            serde_json::json!(t)
        ));
        if i == 2 {
            lines.push_str("{\"id\":\"bad\"}\n");
        }
    }
    std::fs::write(&input, lines).unwrap();
    let run = |out: &str, extra: &[&str]| {
        let out = dir.join(out);
        let r = formwork(&home)
            .args([
                "extract",
                "--quiet",
                "--json",
                "--max-tokens",
                "40",
                "--schema",
            ])
            .arg(&schema)
            .arg("--jsonl")
            .arg(&input)
            .arg("--out")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&r.stderr).into_owned();
        assert_eq!(
            r.status.code(),
            Some(2),
            "the bad line is an error record: {stderr}"
        );
        let summary: Value =
            serde_json::from_slice(&r.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
        let lines: Vec<Value> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (lines, summary, stderr)
    };
    let (serial, _, _) = run("serial.jsonl", &[]);
    let (parallel, summary, stderr) = run("parallel.jsonl", &["--parallel", "3"]);
    let ids: Vec<&str> = parallel.iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["r0", "r1", "r2", "bad", "r3", "r4"], "{parallel:?}");
    assert_eq!(parallel.len(), serial.len());
    for (p, s) in parallel.iter().zip(&serial) {
        for key in [
            "id",
            "verdict",
            "value",
            "text",
            "tokens_generated",
            "tokens_forced",
        ] {
            assert_eq!(p[key], s[key], "{key}: parallel {p} serial {s}");
        }
    }
    assert_eq!(summary["parallel"], 3, "{summary}");
    let mean = summary["mean_batch"].as_f64().unwrap();
    assert!(mean > 1.5, "passes hardly batched: {summary}");
    assert!(stderr.contains("--parallel 3:"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A worked example that does not fit the schema is an error naming its file and line,
/// before any model is loaded (so this runs without one).
#[test]
fn a_bad_worked_example_is_an_error_naming_its_line() {
    let dir = std::env::temp_dir().join(format!("formwork-bad-examples-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ex.jsonl");
    let good = std::fs::read_to_string(examples().join("vacation.examples.jsonl")).unwrap();
    let first = good.lines().next().unwrap();
    std::fs::write(
        &file,
        format!(
            "{first}\n\n{}\n",
            r#"{"text": "x", "expected": {"status": "maybe", "start_date": null, "end_date": null, "clarification_question": null}}"#
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_formwork"))
        .env("FORMWORK_HOME", &dir)
        .args(["extract", "--schema"])
        .arg(examples().join("vacation.schema.json"))
        .arg("--input")
        .arg(examples().join("vacation_request.txt"))
        .arg("--examples")
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.contains("ex.jsonl:3")
            && stderr.contains("does not fit the schema")
            && stderr.contains("status"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// With worked examples (shown as earlier turns), masked extraction stays valid and
/// the prompt grows by the examples.
#[test]
fn worked_examples_are_prior_turns_of_the_prompt() {
    let Some(home) = home() else { return };
    let run = |with: bool| {
        let mut c = formwork(&home);
        c.args(["extract", "--json", "--max-tokens", "96", "--schema"])
            .arg(examples().join("vacation.schema.json"))
            .arg("--input")
            .arg(examples().join("vacation_request.txt"));
        if with {
            c.arg("--examples")
                .arg(examples().join("vacation.examples.jsonl"));
        }
        let out = c.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let env: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
        env
    };
    let plain = run(false);
    let shots = run(true);
    assert_eq!(shots["verdict"], "valid", "{shots}");
    let (a, b) = (
        plain["tokens_prompt"].as_u64().unwrap(),
        shots["tokens_prompt"].as_u64().unwrap(),
    );
    assert!(b > a + 100, "three examples add their tokens: {a} -> {b}");
}

/// With worked examples picked per record (BM25), every record still starts from the
/// cached system message: the second and third records reuse at least its tokens, and
/// the answers are the ones a prefill from scratch gives.
#[test]
fn per_record_examples_still_reuse_the_system_prefix() {
    let Some(home) = home() else { return };
    let dir = std::env::temp_dir().join(format!("formwork-prefix-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("s.json");
    std::fs::write(&schema, r#"{"type":"object","properties":{"city":{"type":["string","null"],"maxLength":20}},"required":["city"],"additionalProperties":false}"#).unwrap();
    let pool = dir.join("ex.jsonl");
    std::fs::write(
        &pool,
        "{\"text\":\"We moved to Rome last spring.\",\"expected\":{\"city\":\"Rome\"}}\n\
         {\"text\":\"The parcel left Oslo on Monday.\",\"expected\":{\"city\":\"Oslo\"}}\n\
         {\"text\":\"No place is named here.\",\"expected\":{\"city\":null}}\n",
    )
    .unwrap();
    let input = dir.join("in.jsonl");
    std::fs::write(
        &input,
        "{\"id\":\"a\",\"text\":\"I moved to Lima last spring.\"}\n\
         {\"id\":\"b\",\"text\":\"The parcel left Paris on Monday.\"}\n\
         {\"id\":\"c\",\"text\":\"Nothing here names a place.\"}\n",
    )
    .unwrap();
    let run = |name: &str, extra: &[&str]| -> (Value, Vec<Value>) {
        let out = dir.join(name);
        let _ = std::fs::remove_file(&out);
        let r = formwork(&home)
            .args([
                "extract",
                "--json",
                "--quiet",
                "--max-tokens",
                "24",
                "--shots",
                "1",
                // One record after another: the second and third find the first's prefix.
                "--parallel",
                "1",
            ])
            .arg("--schema")
            .arg(&schema)
            .arg("--examples")
            .arg(&pool)
            .arg("--jsonl")
            .arg(&input)
            .arg("--out")
            .arg(&out)
            .args(extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(0), "{stderr}");
        let summary: Value = serde_json::from_slice(&r.stdout).unwrap();
        let records = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (summary, records)
    };
    let (reused, with) = run("reuse.jsonl", &[]);
    let (none, without) = run("full.jsonl", &["--no-prefix-reuse"]);
    assert_eq!(none["prefix_tokens_reused"], 0, "{none}");
    // The system message alone is far over 100 tokens; records 2 and 3 reuse it.
    let n = reused["prefix_tokens_reused"].as_u64().unwrap();
    assert!(n > 200, "system prefix not reused: {reused}");
    for (a, b) in with.iter().zip(&without) {
        assert_eq!(a["id"], b["id"]);
        assert_eq!(a["value"], b["value"], "{a}\n{b}");
    }
    assert_eq!(with.len(), 3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// README command 1, with the default model (not the small test model): the answer a
/// person would accept for the order e-mail. Two rows, SKU 11 with 12 pieces, SKU 42
/// with quantity null and "una decina" (the uncertain one), the address and the
/// billing name. All five examples (`--shots all`): with the default 3 the model
/// writes "42 pz" for "una decina" (grounding then takes it back) and names row 0
/// as the uncertain one. Grounding is on (the default, distinct).
#[test]
fn readme_command_1_extracts_the_order_email_right() {
    let Some(home) = common::home_with_qwen() else {
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_formwork"))
        .env("FORMWORK_HOME", &home)
        .env_remove("FORMWORK_MODEL")
        .env("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0")
        .args(["extract", "--json", "--schema"])
        .arg(examples().join("order_email.schema.json"))
        .arg("--input")
        .arg(examples().join("order_email.txt"))
        .arg("--examples")
        .arg(examples().join("order_email.examples.jsonl"))
        .args(["--shots", "all"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let ex: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ex["model"], "qwen2.5-coder-0.5b", "{ex}");
    let v = &ex["value"];
    let rows = v["righe"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(rows.len(), 2, "{v}");
    assert_eq!(
        (&rows[0]["sku_grezzo"], &rows[0]["quantita"]),
        (&"11".into(), &12.into()),
        "{v}"
    );
    assert_eq!(rows[1]["sku_grezzo"], "42", "{v}");
    assert_eq!(rows[1]["quantita"], Value::Null, "{v}");
    assert_eq!(rows[1]["quantita_testuale"], "una decina", "{v}");
    assert_eq!(v["indirizzo_spedizione"], "Via Roma 3, Lecce", "{v}");
    assert_eq!(v["cliente_fatturazione"], "Brambilla", "{v}");
    assert_eq!(
        v["campi_incerti"],
        serde_json::json!(["righe.1.quantita"]),
        "{v}"
    );
}

/// README command 1 on e-mails it has never seen (benches/order_emails):
/// e05 signs with a name and gives no billing client, e14 and e27 are one-item orders
/// the model pads with a second row, e21 closes with "Un abbraccio, Nicola". Each must
/// come back wholly right: the rows (code, quantity, urgency), address and billing.
#[test]
fn readme_command_1_is_right_on_new_order_emails() {
    let Some(home) = common::home_with_qwen() else {
        return;
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let all = std::fs::read_to_string(root.join("benches/order_emails/emails.jsonl")).unwrap();
    let picked: Vec<Value> = all
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| ["e05", "e14", "e21", "e27"].contains(&e["id"].as_str().unwrap()))
        .collect();
    assert_eq!(picked.len(), 4);
    let dir = std::env::temp_dir().join(format!("formwork-emails-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.jsonl");
    let lines: Vec<String> = picked
        .iter()
        .map(|e| serde_json::json!({"id": e["id"], "text": e["text"]}).to_string())
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let output = dir.join("out.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_formwork"))
        .env("FORMWORK_HOME", &home)
        .env_remove("FORMWORK_MODEL")
        .env("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0")
        .args([
            "extract",
            "--quiet",
            "--parallel",
            "2",
            "--shots",
            "all",
            "--schema",
        ])
        .arg(examples().join("order_email.schema.json"))
        .arg("--examples")
        .arg(examples().join("order_email.examples.jsonl"))
        .arg("--jsonl")
        .arg(&input)
        .arg("--out")
        .arg(&output)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<Value> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Every record came back, once and in input order (zip alone would stop short).
    assert_eq!(
        got.iter().map(|r| r["id"].clone()).collect::<Vec<_>>(),
        picked.iter().map(|e| e["id"].clone()).collect::<Vec<_>>(),
        "records missing or repeated"
    );
    let fold = |v: &Value| -> Value {
        match v.as_str() {
            Some(s) => s
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase()
                .into(),
            None => v.clone(),
        }
    };
    for (gold, rec) in picked.iter().zip(&got) {
        assert_eq!(gold["id"], rec["id"]);
        let (want, v) = (&gold["expected"], &rec["value"]);
        let key = |r: &Value| {
            (
                fold(&r["sku_grezzo"]),
                r["quantita"].clone(),
                r["urgenza"].clone(),
            )
        };
        let rows = |x: &Value| {
            x["righe"]
                .as_array()
                .map(|a| a.iter().map(key).collect::<Vec<_>>())
        };
        assert_eq!(rows(v), rows(want), "{}: rows of {v}", gold["id"]);
        for f in ["indirizzo_spedizione", "cliente_fatturazione"] {
            assert_eq!(fold(&v[f]), fold(&want[f]), "{}: {f} of {v}", gold["id"]);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The grounded strings of `schema` in `value` that `doc` does not state.
fn not_stated(schema: &Value, value: &Value, doc: &str) -> Vec<String> {
    let g = formwork::engine::ground::Grounding::new(
        schema,
        Some(formwork::engine::ground::GroundMode::Stated),
        doc,
    )
    .unwrap();
    let mut v = value.clone();
    g.apply(&mut v)
}

#[test]
fn grounded_extraction_writes_null_for_what_the_document_does_not_state() {
    let Some(home) = home() else { return };
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/grounded");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("restaurant.schema.json")).unwrap())
            .unwrap();
    let doc = std::fs::read_to_string(dir.join("restaurant.txt")).unwrap();
    let run = |extra: &[&str]| -> Value {
        let out = formwork(&home)
            .args(["extract", "--json", "--max-tokens", "200", "--schema"])
            .arg(dir.join("restaurant.schema.json"))
            .arg("--input")
            .arg(dir.join("restaurant.txt"))
            .args(extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
    };
    // Without grounding the small model invents a city and a state for a museum cafe.
    let plain = run(&["--grounded=off"]);
    assert_eq!(plain["verdict"], "valid", "{plain}");
    assert_eq!(plain["grounded_nulls"], 0);
    let invented = not_stated(&schema, &plain["value"], &doc);
    assert!(
        !invented.is_empty(),
        "the case no longer shows invention: {plain}"
    );
    // Grounded: valid, the invented values taken back while decoding, and every
    // grounded string left is in the document. The text is what was decoded.
    let g = run(&["--grounded"]);
    assert_eq!(g["verdict"], "valid", "{g}");
    assert!(g["grounded_nulls"].as_u64().unwrap() >= 1, "{g}");
    assert_eq!(
        not_stated(&schema, &g["value"], &doc),
        Vec::<String>::new(),
        "{g}"
    );
    let decoded: Value = serde_json::from_str(g["text"].as_str().unwrap()).unwrap();
    assert_eq!(decoded, g["value"]);
    // The default grounds too (distinct, which also takes back repeats).
    let d = run(&[]);
    assert_eq!(d["verdict"], "valid", "{d}");
    assert!(d["grounded_nulls"].as_u64().unwrap() >= 1, "{d}");
    assert_eq!(
        not_stated(&schema, &d["value"], &doc),
        Vec::<String>::new(),
        "{d}"
    );
}

/// A confident null where the document states the value (SNIPS public
/// `BookRestaurant-validate-0038`, default model, the default three BM25 shots from the
/// train examples): "Book a spot for me and kathrine at Smithville". The model writes
/// `"city": null` at 0.9999; weighed against the document's best quotation ("Smithville",
/// 0.83 given a value) the null drops below 0.99, and above `--fill-above` the city is
/// written. Reads `../shared` (or `FORMWORK_SHARED`) for the examples; skipped without.
#[test]
fn a_confident_null_is_weighed_against_the_documents_best_quotation() {
    let Some(home) = common::home_with_qwen() else {
        return;
    };
    let shared = std::env::var_os("FORMWORK_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    let train = shared.join("data/extraction/snips_train_examples.jsonl");
    if !train.is_file() {
        common::skip::skipped(format_args!(
            "SKIPPED: {} not found; set FORMWORK_SHARED to a copy of shared/",
            train.display()
        ));
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/weigh");
    let run = |extra: &[&str]| -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_formwork"))
            .env("FORMWORK_HOME", &home)
            .env_remove("FORMWORK_MODEL")
            .env("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0")
            .args(["extract", "--json", "--schema"])
            .arg(dir.join("book_restaurant.schema.json"))
            .arg("--input")
            .arg(dir.join("smithville.txt"))
            .arg("--examples")
            .arg(&train)
            .args(extra)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let ex: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
        assert_eq!(ex["verdict"], "valid", "{ex}");
        ex
    };
    let city = |ex: &Value| {
        (
            ex["value"]["location"]["city"].clone(),
            ex["confidence"]["/location/city"].as_f64().unwrap(),
        )
    };
    // Not weighed: the null, near certain.
    let off = run(&["--no-weigh-nulls"]);
    let (v, c) = city(&off);
    assert_eq!(v, Value::Null, "{off}");
    assert!(c >= 0.99, "{off}");
    assert_eq!(off["nulls_weighed"], 0, "{off}");
    // Weighed, nothing filled: the same null, its confidence now below 0.99.
    let weighed = run(&["--fill-above", "1"]);
    let (v, c) = city(&weighed);
    assert_eq!(v, Value::Null, "{weighed}");
    assert!(c < 0.99, "{weighed}");
    assert!(weighed["nulls_weighed"].as_u64().unwrap() >= 1, "{weighed}");
    assert_eq!(weighed["weighed_values_taken"], 0, "{weighed}");
    // The defaults: the quotation is written, and the other answers stay.
    let d = run(&[]);
    assert_eq!(d["value"]["location"]["city"], "Smithville", "{d}");
    assert!(d["weighed_values_taken"].as_u64().unwrap() >= 1, "{d}");
    let mut rest = d["value"].clone();
    rest["location"]["city"] = Value::Null;
    assert_eq!(rest, weighed["value"], "{d}");
}
