//! The real OpenAI Python SDK and openai-agents against `formwork serve`, unchanged
//! clients pointed at a loopback `base_url` (tests/data/serve/sdk_client.py):
//! `chat.completions.parse(response_format=Person)` not streamed and streamed, a bad
//! schema raised as `BadRequestError`, and an openai-agents `Agent(output_type=Person)`
//! run through its default model class (the Responses API, `POST /v1/responses`).
//! The parsed objects must be instances of the Pydantic model.
//!
//! The model is the registry's default, qwen2.5-coder-0.5b (the SDK checks run on
//! the real default model; about 15 s here), and on it the client also checks
//! the values (Ada Lovelace, 36, mathematician; Alan Turing for the agent).
//! `FORMWORK_SERVE_TEST_MODEL=smollm2-135m` runs the same checks, values aside, on the
//! small model. Python is `FORMWORK_TEST_PYTHON`
//! (`scripts/test` makes `.venv-test` with tests/data/serve/requirements.txt and sets
//! it; a set variable whose python lacks the packages is a failure), else
//! `.venv-test/bin/python`; without either the test says SKIPPED.

mod common;
#[path = "common/server.rs"]
mod server;

use std::path::{Path, PathBuf};
use std::process::Command;

use server::Server;

/// The registry's default model, which the SDK checks run on unless told otherwise.
const DEFAULT_MODEL: &str = "qwen2.5-coder-0.5b";

pub fn python() -> Option<PathBuf> {
    let py = match std::env::var_os("FORMWORK_TEST_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => {
            let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-test/bin/python");
            if !venv.exists() {
                common::skip::skipped(format_args!("SKIPPED: no Python for the SDK tests; run scripts/test, or set FORMWORK_TEST_PYTHON to a python with tests/data/serve/requirements.txt installed"));
                return None;
            }
            venv
        }
    };
    let ok = Command::new(&py)
        .args(["-c", "import openai, agents, pydantic"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "{} cannot import openai, agents and pydantic: run scripts/test (it installs tests/data/serve/requirements.txt)", py.display());
    Some(py)
}

#[test]
fn openai_sdk_and_agents_get_pydantic_instances() {
    let model = std::env::var("FORMWORK_SERVE_TEST_MODEL").unwrap_or_else(|_| DEFAULT_MODEL.into());
    let fetched = if model == DEFAULT_MODEL {
        common::home_with_qwen()
    } else {
        common::home_with_smollm2()
    };
    if fetched.is_none() {
        return;
    }
    let Some(py) = python() else { return };
    let s = Server::start("sdk", &["--parallel", "2"], &[("FORMWORK_MODEL", &model)]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/serve/sdk_client.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg(format!("http://127.0.0.1:{}/v1", s.port))
        .arg(&model)
        .output()
        .expect("run the SDK client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "SDK client failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
}
