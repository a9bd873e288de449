//! Helpers shared by the model tests (each test file uses the ones it needs).
#![allow(dead_code)]

use std::path::PathBuf;

use formwork_models::registry;

/// The index of the largest logit (the first one on ties).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Whether SmolLM2 is in the model cache; prints the `SKIPPED:` note when it is not.
/// Also sets `CANDLE_BARRIER_POOL_SPIN_LIMIT=0` for the runs that follow.
pub fn smollm2_present() -> bool {
    std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0");
    let path = registry::model_path(registry::lookup("smollm2-135m").unwrap());
    if !path.is_file() {
        eprintln!(
            "SKIPPED: {} is absent; run `formwork models fetch smollm2-135m` (or set FORMWORK_HOME)",
            path.display()
        );
    }
    path.is_file()
}

/// The Gemma 3 GGUF: `FORMWORK_GEMMA3_GGUF`, else the model cache; None when absent.
pub fn gemma3_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FORMWORK_GEMMA3_GGUF") {
        return Some(PathBuf::from(p));
    }
    let home = match std::env::var_os("FORMWORK_HOME") {
        Some(h) => PathBuf::from(h),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/formwork"),
    };
    let p = home.join("models/gemma3-270m/gemma-3-270m-q4_k_m.gguf");
    p.exists().then_some(p)
}

/// The Qwen2.5-Coder GGUF: `FORMWORK_QWEN2_GGUF`, else the model cache; None (after
/// printing the `SKIPPED:` note) when absent. Also sets `CANDLE_BARRIER_POOL_SPIN_LIMIT=0`.
pub fn qwen2_path() -> Option<PathBuf> {
    std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0");
    let path = match std::env::var_os("FORMWORK_QWEN2_GGUF") {
        Some(p) => PathBuf::from(p),
        None => registry::model_path(registry::lookup("qwen2.5-coder-0.5b").unwrap()),
    };
    if !path.is_file() {
        eprintln!(
            "SKIPPED: {} is absent; run `formwork models fetch qwen2.5-coder-0.5b` (or set FORMWORK_HOME)",
            path.display()
        );
        return None;
    }
    Some(path)
}
