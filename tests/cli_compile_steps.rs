//! `formwork compile --step-limit N`: the report gives the steps a schema took, a limit of
//! exactly that many compiles, one fewer is the step limit error (one line, exit 2), and a
//! limit that is not a number is refused by the flag parser (exit 2).

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

fn compile(args: &[&str], schema: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_formwork"))
        .args(["compile", "--schema", "-"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Err(e) = child.stdin.take().unwrap().write_all(schema.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const SCHEMA: &str = r#"{"type": "object", "properties": {
    "a": {"type": "string", "pattern": "^[a-z]{1,6}(?:1|-1)+$", "maxLength": 40},
    "b": {"type": "string", "format": "email"}
}, "required": ["a"]}"#;

#[test]
fn the_step_limit_flag_sets_the_budget() {
    let (code, out, err) = compile(&["--json"], SCHEMA);
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    let steps = report["compile_steps"].as_u64().unwrap();
    assert!(steps > 0, "{report}");

    let (code, out, err) = compile(&["--json", "--step-limit", &steps.to_string()], SCHEMA);
    assert_eq!(code, 0, "{out}{err}");
    let again: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(again["compile_steps"].as_u64(), Some(steps));

    let fewer = (steps - 1).to_string();
    let (code, out, _) = compile(&["--step-limit", &fewer], SCHEMA);
    assert_eq!(code, 2, "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.starts_with(&format!(
            "error: compile step limit of {fewer} reached after "
        )),
        "{out}"
    );

    // Not a count: refused by the flag parser before anything compiles ("-1" reads as
    // an unknown flag).
    for bad in ["-1", "nan", "1e9", ""] {
        let (code, out, err) = compile(&["--step-limit", bad], SCHEMA);
        assert_eq!(code, 2, "--step-limit {bad:?}: {out}{err}");
        assert!(out.is_empty(), "{out}");
        assert!(err.starts_with("error: "), "{err}");
    }
}
