//! The f16 KV cache (`--kv-cache f16`, llama.cpp's default) against the f32 one, on every
//! registry model through formwork's CPU file and through the model graph (candle's path,
//! what GPUs run; its cache lives on the device): what storing keys and values in half
//! precision costs, as the logit difference teacher-forced over a real prompt and answer.
//! The figures print with `--nocapture`; docs/speed.md quotes them.
//!
//! Also: truncating the cache equals a fresh feed, on both files and both cache types.
//!
//! Needs the models fetched (`formwork models fetch NAME`, or `FORMWORK_HOME`); without
//! them each test prints `SKIPPED:` and returns.

mod common;

use common::text_ids;
use formwork_models::llama::KvType;
use formwork_models::runtime::{Backend, LoadOptions};

fn options_on(backend: Backend, kv: KvType) -> LoadOptions {
    LoadOptions {
        kv,
        ..common::cpu_options(backend)
    }
}

/// Teacher-forced over the last 64 positions of `TEXT`: the f16 cache picks the f32
/// cache's next token at least `min_agree` times, and moves no logit by more than
/// `max_diff`.
fn f16_against_f32(name: &str, min_agree: usize, max_diff: f32) {
    f16_against_f32_on(Backend::Formwork, name, min_agree, max_diff)
}

fn f16_against_f32_on(backend: Backend, name: &str, min_agree: usize, max_diff: f32) {
    let Some(f32_model) = common::load_registry(name, options_on(backend, KvType::F32)) else {
        return;
    };
    let f16_model = common::load_registry(name, options_on(backend, KvType::F16)).unwrap();
    let ids = text_ids(&f32_model);
    let (agree, worst, scale) = common::teacher_forced(&f16_model, &f32_model, &ids, 64);
    eprintln!(
        "{name} ({backend:?}): f16 against f32 KV cache over {} positions: argmax {agree}/64, largest logit difference {worst:.4} (max |logit| {scale:.1})",
        ids.len()
    );
    assert!(agree >= min_agree, "{name}: argmax agreement {agree}/64");
    assert!(
        worst <= max_diff,
        "{name}: largest logit difference {worst}"
    );
    // f16 storage does change something: this check would pass vacuously otherwise.
    assert!(
        worst > 0.0,
        "{name}: the f16 cache gave f32's logits exactly"
    );
}

// Measured (argmax, largest logit difference, largest |logit|): SmolLM2 64/64, 1.82,
// 36.0; Qwen2.5 64/64, 0.43, 25.1; Gemma 3 64/64, 1.90, 18.3. The differences are
// largest where a rounded key or value flips the 8-bit rounding of an activation
// downstream, the same effect that separates chunked from full prefill on candle.

#[test]
fn smollm2_f16_cache_is_close_to_f32() {
    f16_against_f32("smollm2-135m", 62, 2.5);
}

#[test]
fn qwen2_f16_cache_is_close_to_f32() {
    f16_against_f32("qwen2.5-coder-0.5b", 62, 1.0);
}

#[test]
fn gemma3_f16_cache_is_close_to_f32() {
    f16_against_f32("gemma3-270m", 62, 2.5);
}

/// The graph's f16 cache on the device (here candle's CPU device), on SmolLM2 and
/// Gemma 3 (local layers). Measured: SmolLM2 63/64, 2.62 (max |logit| 36.7); Gemma 3
/// 63/64, 2.61 (max |logit| 18.2): above the CPU file's 1.9 and 1.5 (candle's K-quant
/// kernels carry a rounding flip further, as in chunked prefill), hence bounds of 3.
#[test]
fn graph_f16_cache_is_close_to_f32() {
    f16_against_f32_on(Backend::Candle, "smollm2-135m", 62, 3.0);
    f16_against_f32_on(Backend::Candle, "gemma3-270m", 62, 3.0);
}

/// Going back by truncating the cache gives what a fresh feed of the kept positions
/// gives: the same logits after feeding a different continuation, on every layer kind
/// (Gemma 3's local layers included), and in an f16 cache too.
fn truncate_is_a_fresh_feed(name: &str, kv: KvType) {
    truncate_is_a_fresh_feed_on(Backend::Formwork, name, kv)
}

fn truncate_is_a_fresh_feed_on(backend: Backend, name: &str, kv: KvType) {
    let Some(model) = common::load_registry(name, options_on(backend, kv)) else {
        return;
    };
    let ids = text_ids(&model);
    let (keep, other) = (ids.len() / 2, &ids[ids.len() - 3..]);
    let mut fresh = model.model.snapshot();
    fresh.forward(&ids[..keep], 0).unwrap();
    let want = fresh.forward(other, keep).unwrap();
    // The kept positions are fed the same way in both (a batch's size may change the
    // order of additions), then the rest on top.
    let mut back = model.model.snapshot();
    back.forward(&ids[..keep], 0).unwrap();
    back.forward(&ids[keep..], keep).unwrap();
    assert!(!back.truncate(ids.len() + 1), "{name}: past the cache");
    assert!(back.truncate(keep), "{name}: truncate refused");
    let got = back.forward(other, keep).unwrap();
    assert_eq!(got, want, "{name} ({}): logits after going back", kv.name());
    // The cache really is shorter: continuing at the old length is refused.
    assert!(back.forward(other, ids.len() + 3).is_err());
}

#[test]
fn truncating_the_cache_equals_a_fresh_feed() {
    for name in ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"] {
        truncate_is_a_fresh_feed(name, KvType::F32);
    }
    truncate_is_a_fresh_feed("qwen2.5-coder-0.5b", KvType::F16);
}

/// The same on the graph, whose cache is written in place on the device: truncating only
/// lowers its length, and the next feed overwrites the positions past it.
#[test]
fn truncating_the_graph_cache_equals_a_fresh_feed() {
    for name in ["smollm2-135m", "gemma3-270m"] {
        truncate_is_a_fresh_feed_on(Backend::Candle, name, KvType::F32);
    }
    truncate_is_a_fresh_feed_on(Backend::Candle, "gemma3-270m", KvType::F16);
}
