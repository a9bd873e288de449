//! `formwork extract`'s flags that no parser checks alone are checked before the model
//! loads: one line naming the flag, exit 2, and no panic. No model is needed: the model
//! named is a file that does not exist, so a check that came after loading would fail
//! on the model instead and name no flag.

use std::path::PathBuf;
use std::process::Command;

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// stderr and exit code of `formwork extract --schema examples/order_email.schema.json
/// --input examples/order_email.txt ARGS` with no model at hand.
fn extract(args: &[&str]) -> (String, Option<i32>) {
    let home = std::env::temp_dir().join(format!("formwork-flags-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_formwork"))
        .env("FORMWORK_HOME", &home)
        .env("FORMWORK_MODEL", home.join("absent.gguf"))
        .args(["extract", "--schema"])
        .arg(examples().join("order_email.schema.json"))
        .arg("--input")
        .arg(examples().join("order_email.txt"))
        .args(args)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
    )
}

fn assert_one_line_error(args: &[&str], names: &[&str]) {
    let (stderr, code) = extract(args);
    assert_eq!(code, Some(2), "{args:?}: {stderr}");
    assert_eq!(
        stderr.trim().lines().count(),
        1,
        "{args:?}: one line: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    for n in names {
        assert!(stderr.contains(n), "{args:?}: no {n:?} in {stderr}");
    }
}

#[test]
fn a_timeout_that_is_not_a_number_of_seconds_is_refused() {
    for t in ["nan", "inf", "1e300"] {
        assert_one_line_error(&["--timeout", t], &["--timeout", "seconds"]);
    }
    assert_one_line_error(&["--timeout=-0.5"], &["--timeout -0.5"]);
}

#[test]
fn a_review_field_that_could_never_fire_is_refused() {
    // No leading slash: the pointer's right spelling is in the message.
    assert_one_line_error(
        &["--review-field", "campi_incerti"],
        &[
            "--review-field campi_incerti",
            "/campi_incerti",
            "order_email.schema.json",
        ],
    );
    // A field the schema does not have.
    assert_one_line_error(
        &["--review-field", "/campi_incert"],
        &[
            "--review-field /campi_incert",
            "no value at this JSON Pointer",
        ],
    );
    // A good pointer gets past the check, on to the missing model.
    let (stderr, code) = extract(&["--review-field", "/campi_incerti"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("absent.gguf"), "{stderr}");
    assert!(!stderr.contains("--review-field"), "{stderr}");
}

#[test]
fn log_content_without_a_log_is_refused() {
    assert_one_line_error(&["--log-content"], &["--log-content", "--log"]);
}

#[test]
fn think_and_an_exact_think_budget_are_refused_together() {
    // clap's usage error: exit 2, naming both flags, before anything loads.
    let (stderr, code) = extract(&["--think", "--think-budget", "3"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--think"), "{stderr}");
    assert!(stderr.contains("--think-budget"), "{stderr}");
    assert!(!stderr.contains("absent.gguf"), "{stderr}");
}
