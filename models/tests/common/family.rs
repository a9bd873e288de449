//! The model-family fixtures of `tests/fixtures/family` (recorded by
//! `scripts/family-fixtures` from llama.cpp): what they hold, and their synthesised GGUF
//! written again (shared by `family_parity.rs` and `graph_parity.rs`).

use std::path::{Path, PathBuf};

use formwork_models::synth::{self, QType};

#[derive(serde::Deserialize)]
pub struct Fixture {
    pub family: String,
    pub qtype: String,
    pub layers: usize,
    pub seed: u64,
    pub vocab: String,
    /// llama.cpp's context size, where the fixture sets one (Phi-3's LongRoPE picks by it).
    #[serde(default)]
    pub n_ctx: Option<usize>,
    pub prompt: String,
    pub prompt_ids: Vec<u32>,
    pub steps: Vec<Step>,
}

#[derive(serde::Deserialize)]
pub struct Step {
    pub token: u32,
    pub top: Vec<(u32, f32)>,
}

pub fn fixture(name: &str) -> Fixture {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/family")
        .join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fixture's GGUF, written again into a fresh temporary folder (one per call: tests
/// that run at once may write the same fixture's file, and each removes its folder).
pub fn synthesize(f: &Fixture, vocab_dir: &Path) -> (PathBuf, PathBuf) {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "formwork-family-{}-{}-{}-{call}",
        f.family,
        f.qtype,
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("model.gguf");
    let family = synth::family(&f.family).unwrap();
    let qtype = QType::from_name(&f.qtype).unwrap();
    synth::write_family(
        family,
        &vocab_dir.join(&f.vocab),
        Some(f.layers),
        qtype,
        &out,
        f.seed,
    )
    .unwrap();
    (dir, out)
}
