//! schemathesis (PyPI, pinned in tests/data/serve/requirements.txt) against
//! `formwork serve`'s own OpenAPI document (`GET /openapi.json`), in a bounded run:
//! a few generated requests per operation (valid and invalid), each checked for no 5xx
//! (`not_a_server_error`), a documented status and content type, and a body that
//! matches the document. The server runs smollm2-135m (the tests' `FORMWORK_MODEL`, for speed), with
//! `--request-timeout 3` so generated budgets cannot make the run long.
//! SKIPPED without the venv (see tests/serve_sdk.rs for how Python is found).

mod common;
#[path = "common/server.rs"]
mod server;

use std::path::{Path, PathBuf};
use std::process::Command;

use server::Server;

fn python() -> Option<PathBuf> {
    let py = match std::env::var_os("FORMWORK_TEST_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => {
            let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-test/bin/python");
            if !venv.exists() {
                common::skip::skipped(format_args!("SKIPPED: no Python for schemathesis; run scripts/test, or set FORMWORK_TEST_PYTHON"));
                return None;
            }
            venv
        }
    };
    let ok = Command::new(&py)
        .args(["-c", "import schemathesis"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{} cannot import schemathesis: run scripts/test",
        py.display()
    );
    Some(py)
}

#[test]
fn schemathesis_finds_no_server_error_and_no_undocumented_response() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let Some(py) = python() else { return };
    let s = Server::start(
        "schemathesis",
        &[
            "--request-timeout",
            "3",
            "--parallel",
            "1",
            "--max-queue",
            "64",
        ],
        &[],
    );
    let dir = server::TempDir::new("st-report");
    let out = Command::new(&py)
        .args(["-m", "schemathesis.cli", "run"])
        .arg(format!("http://127.0.0.1:{}/openapi.json", s.port))
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
            "--max-examples",
            "12",
            "--phases",
            "examples,coverage,fuzzing",
            "--seed",
            "14",
            "--request-timeout",
            "60",
            "--suppress-health-check",
            "all",
        ])
        .env("SCHEMATHESIS_HOOKS", "")
        .current_dir(&dir.0)
        .output()
        .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}\n{stderr}");
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{stdout}\n{stderr}"
    );
    // It really tested every operation, with generated requests.
    assert!(stdout.contains("Tested: 6"), "{stdout}");
    assert!(stdout.contains("No issues found"), "{stdout}");
    s.assert_serving();
}
