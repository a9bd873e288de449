//! Helpers shared by the root crate's integration tests.

#[path = "../support/skip.rs"]
pub mod skip;
use std::path::PathBuf;

pub const SMOLLM2_FILE: &str = "models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf";

/// `$FORMWORK_HOME`, or `~/.cache/formwork`.
pub fn formwork_home() -> PathBuf {
    std::env::var_os("FORMWORK_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/formwork")
        })
}

/// The cache root when the default model is fetched; otherwise prints SKIPPED (with
/// the command that fetches it) and returns None.
pub fn home_with_smollm2() -> Option<PathBuf> {
    let home = formwork_home();
    if home.join(SMOLLM2_FILE).is_file() {
        Some(home)
    } else {
        skip::skipped(format_args!(
            "SKIPPED: smollm2-135m not fetched; run `formwork models fetch smollm2-135m`"
        ));
        None
    }
}

pub const QWEN_FILE: &str = "models/qwen2.5-coder-0.5b/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// The cache root when the default extraction model (Qwen2.5-Coder-0.5B) is fetched;
/// otherwise prints SKIPPED and returns None.
#[allow(dead_code)]
pub fn home_with_qwen() -> Option<PathBuf> {
    let home = formwork_home();
    if home.join(QWEN_FILE).is_file() {
        Some(home)
    } else {
        skip::skipped(format_args!(
            "SKIPPED: qwen2.5-coder-0.5b not fetched; run `formwork models fetch qwen2.5-coder-0.5b`"
        ));
        None
    }
}

/// llama.cpp's vocab-only qwen2 GGUF (`$FORMWORK_LLAMACPP_VOCAB`, else where
/// scripts/llamacpp-vocab puts it); otherwise prints SKIPPED and returns None.
#[allow(dead_code)]
pub fn qwen2_vocab() -> Option<PathBuf> {
    let dir = match std::env::var_os("FORMWORK_LLAMACPP_VOCAB") {
        Some(d) => PathBuf::from(d),
        None => formwork_models::registry::formwork_home()
            .join("llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp/models"),
    };
    let f = dir.join("ggml-vocab-qwen2.gguf");
    if f.is_file() {
        Some(f)
    } else {
        skip::skipped(format_args!(
            "SKIPPED: llama.cpp's qwen2 vocabulary is absent ({}); run scripts/llamacpp-vocab",
            f.display()
        ));
        None
    }
}

/// Writes a Qwen3-shaped thinking model to `out`: one layer of random weights, `vocab`'s
/// tokenizer and Qwen3's chat template with its think block (`formwork models synth`).
#[allow(dead_code)]
pub fn synth_qwen3(vocab: &std::path::Path, out: &std::path::Path) {
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_formwork"))
        .args(["models", "synth", "--family", "qwen3-0.6b", "--layers", "1"])
        .arg("--vocab")
        .arg(vocab)
        .arg("--out")
        .arg(out)
        .status()
        .expect("run formwork models synth");
    assert!(st.success());
}
