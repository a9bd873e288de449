//! A thinking model through `formwork serve` and the OpenAI SDK
//! (tests/data/serve/think_client.py): a Qwen3-shaped synthesised file (one layer,
//! random weights, llama.cpp's qwen2 vocabulary, Qwen3's chat template with its think
//! block) answers `chat.completions.parse` with `reasoning_content` and a valid
//! `message.parsed`, streamed and not; `reasoning_effort: none` spends no thought
//! token and a bad effort is a 400 naming the field. The text is noise: the client
//! checks validity and shape, not content.

#[allow(dead_code)]
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
                common::skip::skipped(format_args!(
                    "SKIPPED: no Python for the SDK tests; run scripts/test, or set FORMWORK_TEST_PYTHON"
                ));
                return None;
            }
            venv
        }
    };
    Some(py)
}

#[test]
fn a_thinking_model_gives_reasoning_content_and_a_parsed_answer() {
    let Some(vocab) = common::qwen2_vocab() else {
        return;
    };
    let Some(py) = python() else { return };
    let dir = std::env::temp_dir().join(format!("formwork-think-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("qwen3-think.gguf");
    common::synth_qwen3(&vocab, &model);
    let s = Server::start("think", &[], &[("FORMWORK_MODEL", model.to_str().unwrap())]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/serve/think_client.py");
    let out = Command::new(&py)
        .arg(&script)
        .arg(format!("http://127.0.0.1:{}/v1", s.port))
        .arg("qwen3-think")
        .output()
        .expect("run the SDK client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    s.terminate();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "SDK client failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
}
