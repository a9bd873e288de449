//! `formwork generate`, run as the built binary on the fetched default model.

#[path = "support/skip.rs"]
mod skip;
use std::process::Command;

fn formwork() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_formwork"));
    c.env("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0")
        .env("FORMWORK_MODEL", "smollm2-135m");
    c
}

fn home_with(model_file: &str) -> Option<std::path::PathBuf> {
    let home = match std::env::var_os("FORMWORK_HOME") {
        Some(h) if !h.is_empty() => std::path::PathBuf::from(h),
        _ => std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/formwork"),
    };
    let file = home.join("models").join(model_file);
    if file.is_file() {
        Some(home)
    } else {
        skip::skipped(format_args!(
            "SKIPPED: {} is absent; run `formwork models fetch`",
            file.display()
        ));
        None
    }
}

#[test]
fn generate_answers_a_short_prompt() {
    let Some(home) = home_with("smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let out = formwork()
        .args([
            "generate",
            "--prompt",
            "What is 2+2?",
            "--max-tokens",
            "24",
            "--verbose",
        ])
        .env("FORMWORK_HOME", &home)
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).expect("stdout is UTF-8");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stdout.trim().is_empty(), "no text; stderr: {stderr}");
    // Greedy, so the answer is fixed: SmolLM2-135M says "... is 4." (it answers
    // "What is the capital of France?" in French without naming Paris).
    assert!(stdout.contains('4') || stdout.contains("four"), "{stdout}");
    assert!(
        stderr.contains("prefill: ") && stderr.contains("decode: ") && stderr.contains("tok/s"),
        "{stderr}"
    );
}

/// `--kv-cache f16` keeps keys and values in half precision: the greedy answer to a
/// short prompt is the f32 cache's, `--verbose` says which cache ran, and a bad value is
/// a one-line usage error (exit 2).
#[test]
fn generate_with_an_f16_kv_cache_answers_as_f32_does() {
    let Some(home) = home_with("smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let run = |kv: &str| {
        let out = formwork()
            .args(["generate", "--prompt", "What is 2+2?", "--max-tokens", "16"])
            .args(["--device", "cpu", "--verbose", "--kv-cache", kv])
            .env("FORMWORK_HOME", &home)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        (String::from_utf8(out.stdout).unwrap(), stderr)
    };
    let (f32_text, f32_err) = run("f32");
    let (f16_text, f16_err) = run("f16");
    assert!(f32_err.contains("KV cache F32"), "{f32_err}");
    assert!(f16_err.contains("KV cache F16"), "{f16_err}");
    assert_eq!(f16_text, f32_text);
    let bad = formwork()
        .args(["generate", "--prompt", "x", "--kv-cache", "f8"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("f8"));
}

#[test]
fn generate_with_a_system_message_and_sampling_is_reproducible() {
    let Some(home) = home_with("smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let run = || {
        let out = formwork()
            .args([
                "generate",
                "--prompt",
                "Name a colour.",
                "--system",
                "You answer in one word.",
            ])
            .args([
                "--max-tokens",
                "8",
                "--temperature",
                "0.8",
                "--top-p",
                "0.9",
                "--seed",
                "7",
                "--threads",
                "1",
            ])
            .env("FORMWORK_HOME", &home)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let a = run();
    assert!(!a.trim().is_empty());
    assert_eq!(a, run(), "same seed, same text");
}

#[test]
fn gemma_base_model_uses_the_raw_prompt_and_says_so() {
    let Some(home) = home_with("gemma3-270m/gemma-3-270m-q4_k_m.gguf") else {
        return;
    };
    let out = formwork()
        .args([
            "generate",
            "--model",
            "gemma3-270m",
            "--prompt",
            "Question: What is the capital of France?\nAnswer:",
            "--max-tokens",
            "8",
        ])
        .env("FORMWORK_HOME", &home)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("no chat template") && stderr.contains("raw prompt"),
        "{stderr}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("Paris"), "{stdout}");
}

#[test]
fn qwen_coder_answers_with_code_through_its_chat_template() {
    let Some(home) = home_with("qwen2.5-coder-0.5b/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf") else {
        return;
    };
    let out = formwork()
        .args([
            "generate",
            "--model",
            "qwen2.5-coder-0.5b",
            "--prompt",
            "Write a Python function add(a, b) that returns a + b. Only the code.",
            "--max-tokens",
            "48",
        ])
        .env("FORMWORK_HOME", &home)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    // Greedy: the chat template's answer is the function, and <|im_end|> ends it.
    assert!(stdout.contains("def add(a, b)"), "{stdout}");
    assert!(!stdout.contains("<|im_end|>"), "{stdout}");
}

#[test]
fn unknown_model_is_one_line_exit_2() {
    let out = formwork()
        .args(["generate", "--prompt", "hi", "--model", "no-such-model"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("unknown model `no-such-model`"), "{err}");
}

#[test]
fn bad_model_file_is_one_line_exit_2() {
    let dir = std::env::temp_dir().join(format!("formwork-cli-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.gguf");
    std::fs::write(&bad, b"PK\x03\x04 this is a zip, not a model").unwrap();
    let out = formwork()
        .args(["generate", "--prompt", "hi", "--model"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.gguf") && err.contains("not a GGUF file"),
        "{err}"
    );
    let out = formwork()
        .args(["generate", "--prompt", "hi", "--device", "tpu"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `--device auto` says which device it took, on one line; in a build without CUDA (or Metal)
/// that is the CPU, and why.
#[cfg(not(any(feature = "cuda", feature = "metal")))]
#[test]
fn device_auto_says_it_took_the_cpu() {
    let Some(home) = home_with("smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let out = formwork()
        .args(["generate", "--prompt", "hi", "--max-tokens", "2"])
        .env("FORMWORK_HOME", &home)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "device: cpu (--device auto: this build has no CUDA)",
        "{stderr}"
    );
    // An explicit choice prints nothing about it.
    let out = formwork()
        .args([
            "generate",
            "--prompt",
            "hi",
            "--max-tokens",
            "2",
            "--device",
            "cpu",
        ])
        .env("FORMWORK_HOME", &home)
        .output()
        .unwrap();
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--device cuda` on a build without the feature: one line, exit code 2, and the fix.
#[cfg(not(feature = "cuda"))]
#[test]
fn device_cuda_without_the_feature_is_one_line() {
    let Some(home) = home_with("smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let out = formwork()
        .args(["generate", "--prompt", "hi", "--device", "cuda"])
        .env("FORMWORK_HOME", &home)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--device cuda: this build has no CUDA support")
            && stderr.contains("--features cuda")
            && stderr.contains("--device cpu"),
        "{stderr}"
    );
}

/// `--dump-logits`: one row of `vocab` floats per sampled token, the row the greedy token
/// was picked from, and the ids in the .json (what scripts/gpu-check compares across
/// devices). `--verbose` reports the copy of the logits to the host.
#[test]
fn dump_logits_writes_one_row_per_step() {
    let Some(home) = home_with("smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("formwork-dump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("run");
    let out = formwork()
        .args([
            "generate",
            "--prompt",
            "Count to five.",
            "--max-tokens",
            "6",
            "--ignore-eos",
            "--device",
            "cpu",
            "--verbose",
            "--dump-logits",
        ])
        .arg(&prefix)
        .env("FORMWORK_HOME", &home)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("logits to host: 6 copies of 192 KB"),
        "{stderr}"
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("run.json")).unwrap()).unwrap();
    let vocab = meta["vocab"].as_u64().unwrap() as usize;
    assert_eq!(vocab, 49152);
    let tokens: Vec<u32> = meta["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(tokens.len(), 6);
    assert_eq!(meta["steps"], 6);
    let bytes = std::fs::read(dir.join("run.f32")).unwrap();
    assert_eq!(bytes.len(), 6 * vocab * 4);
    for (step, &token) in tokens.iter().enumerate() {
        let row: Vec<f32> = bytes[step * vocab * 4..(step + 1) * vocab * 4]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let best = (0..vocab)
            .max_by(|&a, &b| row[a].total_cmp(&row[b]))
            .unwrap();
        assert_eq!(
            best as u32, token,
            "step {step}: greedy picks the row's argmax"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--backend candle` runs candle's tensor path (the one a GPU runs) on candle's CPU
/// device, and `--backend formwork` formwork's CPU model file: the first step's logits
/// of one prompt differ between them (another path ran), by far less than their range
/// (the same model), and an unknown backend is a one-line error, exit 2.
#[test]
fn backend_picks_the_model_file_on_the_cpu() {
    let Some(home) = home_with("smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("formwork-backend-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let first_row = |backend: &str| -> Vec<f32> {
        let prefix = dir.join(backend);
        let out = formwork()
            .args([
                "generate",
                "--prompt",
                "Count to five.",
                "--max-tokens",
                "1",
            ])
            .args(["--device", "cpu", "--backend", backend, "--dump-logits"])
            .arg(&prefix)
            .env("FORMWORK_HOME", &home)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read(prefix.with_extension("f32"))
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    };
    let (candle, own) = (first_row("candle"), first_row("formwork"));
    assert_eq!(candle.len(), own.len());
    let diff = candle
        .iter()
        .zip(&own)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let range =
        own.iter().fold(f32::MIN, |m, &x| m.max(x)) - own.iter().fold(f32::MAX, |m, &x| m.min(x));
    assert!(diff > 0.0, "--backend made no difference: the same logits");
    assert!(
        diff < 0.05 * range,
        "the two paths disagree: max diff {diff}, range {range}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    let out = formwork()
        .args(["generate", "--prompt", "hi", "--backend", "gpu"])
        .env("FORMWORK_HOME", &home)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("'--backend"), "{stderr}");
}
