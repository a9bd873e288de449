//! `formwork validate`: verdicts, exit codes (0 valid, 1 invalid, 2 not JSON or bad schema)
//! and the JSON output that keeps the kinds of failure apart.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn schemas() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/validate/schemas")
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str], stdin: &str) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_formwork"))
        .arg("validate")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The command may exit before reading its input (an unusable schema is
    // refused first): a broken pipe here is not a failure.
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn schema(name: &str) -> String {
    schemas().join(name).to_string_lossy().into_owned()
}

const VALID: &str = r#"{"sku": "SKU-11", "esito": "riordina", "quantita": 250, "motivo": "sotto soglia", "dati_usati": []}"#;

#[test]
fn valid_is_exit_0() {
    let r = run(&["--schema", &schema("decision.schema.json")], VALID);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = run(&["--schema", &schema("decision.schema.json"), "-"], VALID);
    assert_eq!(r.code, 0);
}

#[test]
fn schema_invalid_is_exit_1_with_pydantic_text() {
    let text = VALID.replace("250", "9999");
    let r = run(&["--schema", &schema("decision.schema.json")], &text);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stdout,
        "1 validation error for Decisione\nquantita\n  Input should be less than or equal to 5000 [type=less_than_equal, input_value=9999, input_type=int]\n"
    );
}

#[test]
fn json_output_keeps_the_kinds_apart() {
    let cases = [
        ("decision.schema.json", VALID.to_string(), 0, "valid"),
        ("decision.schema.json", VALID.replace("250", "\"250\""), 1, "schema_invalid"),
        (
            "vacation.rules.schema.json",
            r#"{"status":"complete","start_date":"2027-06-12","end_date":"2027-06-10","clarification_question":null}"#.to_string(),
            1,
            "semantic_invalid",
        ),
        ("decision.schema.json", "{\"sku\": ".to_string(), 2, "not_json"),
    ];
    for (s, text, code, verdict) in cases {
        let r = run(&["--schema", &schema(s), "--json"], &text);
        assert_eq!(r.code, code, "{verdict}: {}", r.stderr);
        let out: Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(out["verdict"], verdict);
        match verdict {
            "schema_invalid" => assert_eq!(out["errors"][0]["type"], "int_type"),
            "semantic_invalid" => {
                assert_eq!(out["errors"][0]["type"], "semantic");
                assert_eq!(out["errors"][0]["fields"][1], "/start_date");
            }
            "not_json" => {
                assert_eq!(out["error"]["line"], 1);
                assert!(r.stderr.contains("is not JSON"), "{}", r.stderr);
            }
            _ => assert_eq!(out["value"]["quantita"], 250),
        }
    }
}

#[test]
fn tolerant_reports_what_it_stripped() {
    let text = format!("Ecco il risultato:\n```json\n{VALID}\n```\n");
    let strict = run(&["--schema", &schema("decision.schema.json")], &text);
    assert_eq!(strict.code, 2);
    let r = run(
        &[
            "--schema",
            &schema("decision.schema.json"),
            "--tolerant",
            "--json",
        ],
        &text,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(out["extracted"]["stripped_fence"], true);
    assert_eq!(out["extracted"]["had_surrounding_text"], true);
    assert!(
        r.stderr.contains("stripped a markdown fence"),
        "{}",
        r.stderr
    );
}

#[test]
fn unusable_schemas_are_exit_2_with_one_line() {
    let dir = std::env::temp_dir().join(format!("formwork-validate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("not-json.json", "{\"type\": ", "is not JSON"),
        ("number.json", "42", "must be a JSON object or a boolean"),
        (
            "remote.json",
            r#"{"$ref": "https://example.com/s.json"}"#,
            "https://example.com/s.json",
        ),
        (
            "bad-rule.json",
            r#"{"x-formwork-rules": [{"field": "/a", "op": "=>", "other": "/b"}]}"#,
            "/x-formwork-rules/0/op",
        ),
    ];
    for (name, body, needle) in cases {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        let r = run(&["--schema", p.to_str().unwrap()], "{}");
        assert_eq!(r.code, 2, "{name}");
        assert!(r.stderr.contains(needle), "{name}: {}", r.stderr);
        assert_eq!(
            r.stderr.trim_end().lines().count(),
            1,
            "{name}: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("panicked"));
    }
    let r = run(
        &["--schema", dir.join("missing.json").to_str().unwrap()],
        "{}",
    );
    assert_eq!(r.code, 2);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn reads_a_file_argument() {
    let dir = std::env::temp_dir().join(format!("formwork-validate-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("answer.json");
    std::fs::write(&p, VALID).unwrap();
    let r = run(
        &[
            "--schema",
            &schema("decision.schema.json"),
            p.to_str().unwrap(),
        ],
        "",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    std::fs::remove_dir_all(&dir).ok();
}
