//! formwork's llama model file (Q4_1 kernels, in-place KV cache) against the model graph
//! (candle's path, `graph/`) on the real SmolLM2-135M-Instruct Q4_1 GGUF.
//!
//! Needs the model fetched (`formwork models fetch smollm2-135m`, or `FORMWORK_HOME`);
//! without it each test prints `SKIPPED:` and returns.

mod common;

use std::sync::MutexGuard;

use common::text_ids;
use formwork_models::runtime::{Backend, LoadedModel};

/// formwork's own model, loaded once; tests take snapshots of it.
fn ours() -> Option<MutexGuard<'static, LoadedModel>> {
    static M: common::Shared = common::Shared::new();
    common::once(&M, || common::load_smollm2(Backend::Formwork))
}

/// Teacher-forced over the last 64 positions of a real prompt and answer: formwork's
/// Q4_1 kernels and candle's path (Q4_1 requantised to Q8_0) pick the same next token.
#[test]
fn teacher_forced_argmax_agrees_with_candle() {
    let Some(m) = ours() else { return };
    let candle = common::load_smollm2(Backend::Candle).unwrap();
    let (agree, _, _) = common::teacher_forced(&m, &candle, &text_ids(&m), 64);
    assert!(agree >= 64 - 3, "argmax agreement {agree}/64");
}

/// One prefill, prefills in chunks of 7, and one token at a time give the same logits.
#[test]
fn chunked_prefill_equals_full_prefill() {
    let Some(m) = ours() else { return };
    common::assert_chunked_prefills_agree(&m, 1e-4);
}

/// A snapshot keeps its cache while the original decodes on, and the original is unharmed.
#[test]
fn snapshots_are_independent() {
    let Some(m) = ours() else { return };
    common::assert_snapshots_independent(&m, 1e-4);
}

/// The portable scalar kernel and the SIMD ones this CPU runs agree end to end (logits
/// span about 30; the rounding differences grow over 30 layers).
#[test]
fn scalar_and_simd_kernels_agree() {
    let Some(m) = ours() else { return };
    common::scalar_and_simd_agree(&m.path, &text_ids(&m)[..40], 1.0);
}

/// Bad input is an error with its numbers, never a panic, and leaves the model usable.
#[test]
fn bad_input_is_an_error() {
    let Some(m) = ours() else { return };
    common::bad_input_is_an_error(&m, 49_152, 9_000);
}
