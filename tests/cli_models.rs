//! `formwork models list|fetch`, run as the built binary.

#[path = "support/skip.rs"]
mod skip;
use std::process::Command;

fn formwork() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_formwork"));
    c.env("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0");
    c
}

fn real_home() -> std::path::PathBuf {
    match std::env::var_os("FORMWORK_HOME") {
        Some(h) if !h.is_empty() => h.into(),
        _ => std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/formwork"),
    }
}

#[test]
fn list_shows_the_default_model_present() {
    let home = real_home();
    let file = home.join("models/qwen2.5-coder-0.5b/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    if !file.is_file() {
        skip::skipped(format_args!(
            "SKIPPED: {} is absent; run `formwork models fetch`",
            file.display()
        ));
        return;
    }
    let out = formwork()
        .args(["models", "list"])
        .env("FORMWORK_HOME", &home)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("qwen2.5-coder-0.5b"))
        .expect(&text);
    assert!(
        line.contains("present") && line.contains("(default)"),
        "{line}"
    );
    assert_eq!(text.matches("(default)").count(), 1, "{text}");
    assert!(text.contains("gemma3-270m"), "{text}");
    assert!(text.contains("qwen2.5-coder-0.5b"), "{text}");
}

#[test]
fn list_on_an_empty_cache_shows_absent_models() {
    let home = std::env::temp_dir().join(format!("formwork-cli-list-{}", std::process::id()));
    let out = formwork()
        .args(["models", "list"])
        .env("FORMWORK_HOME", &home)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for name in ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"] {
        let line = text.lines().find(|l| l.starts_with(name)).expect(&text);
        assert!(
            line.contains(&format!("absent (run `formwork models fetch {name}`)")),
            "{line}"
        );
    }
    let line = text
        .lines()
        .find(|l| l.starts_with("qwen2.5-coder-1.5b"))
        .expect(&text);
    assert!(
        line.contains("absent") && line.contains("(opt-in"),
        "{line}"
    );
}

#[test]
fn fetch_of_a_present_model_does_nothing() {
    let home = real_home();
    let file = home.join("models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !file.is_file() {
        skip::skipped(format_args!(
            "SKIPPED: {} is absent; run `formwork models fetch`",
            file.display()
        ));
        return;
    }
    let before = std::fs::metadata(&file).unwrap().modified().unwrap();
    let out = formwork()
        .args(["models", "fetch", "smollm2-135m"])
        .env("FORMWORK_HOME", &home)
        // Were pip to run, it could not reach an index: the fetch must not need it.
        .env("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
        .env("PIP_FIND_LINKS", "")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("smollm2-135m: present"), "{err}");
    assert_eq!(
        std::fs::metadata(&file).unwrap().modified().unwrap(),
        before
    );
}

#[test]
fn fetch_of_an_unknown_model_is_one_line_exit_2() {
    let out = formwork()
        .args(["models", "fetch", "gpt-5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("unknown model `gpt-5`") && err.contains("smollm2-135m"),
        "{err}"
    );
}
