//! formwork's CPU model file (`llama/`) on the real Gemma 3 270M Q4_K_M GGUF: the file's
//! Q5_0 / Q4_K / Q6_K / Q8_0 blocks through `quant/`, the KV cache grown in place, the
//! local layers' window, and Gemma's extra norms, embedding scale and GELU.
//!
//! Checked against the model graph (`graph/`, the GPU path, itself checked exact in f32
//! by `gemma3_model.rs`) and against llama.cpp's greedy tokens.
//!
//! Needs the model fetched (`formwork models fetch gemma3-270m`, or `FORMWORK_HOME`, or
//! `FORMWORK_GEMMA3_GGUF`); without it each test prints `SKIPPED:` and returns.

mod common;

use std::sync::MutexGuard;

use candle_core::quantized::gguf_file;
use candle_core::Device;
use common::{argmax, max_abs_diff, text_ids};
use formwork_models::llama::{Arch, Config, ModelWeights};
use formwork_models::runtime::{Backend, LoadedModel};

/// The candle-tensor path through the runtime (what GPUs run), loaded once.
fn candle() -> Option<MutexGuard<'static, LoadedModel>> {
    static M: common::Shared = common::Shared::new();
    common::once(&M, || common::load_gemma3(Backend::Candle))
}

/// formwork's CPU model file through the runtime, loaded once.
fn ours() -> Option<MutexGuard<'static, LoadedModel>> {
    static M: common::Shared = common::Shared::new();
    common::once(&M, || common::load_gemma3(Backend::Formwork))
}

/// The CPU file read directly (for a window override).
fn raw() -> Option<ModelWeights> {
    let path = common::gemma3_path()?;
    let mut f = std::fs::File::open(path).unwrap();
    let ct = gguf_file::Content::read(&mut f).unwrap();
    Some(ModelWeights::from_gguf(ct, &mut f, &Device::Cpu).unwrap())
}

#[test]
fn config_is_read_from_gguf_metadata() {
    let Some(path) = common::gemma3_path() else {
        return;
    };
    let mut f = std::fs::File::open(path).unwrap();
    let c = Config::from_gguf(&gguf_file::Content::read(&mut f).unwrap()).unwrap();
    assert_eq!(c.arch, Arch::Gemma3);
    assert_eq!((c.vocab_size, c.hidden_size), (262_144, 640));
    assert_eq!(
        (
            c.num_hidden_layers,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim
        ),
        (18, 4, 1, 256)
    );
    assert_eq!((c.rope_theta, c.context_length), (1_000_000.0, 32_768));
    assert_eq!(c.embed_scale, 640f32.sqrt());
    assert_eq!(c.attn_scale, 1.0 / 16.0);
    let s = c.sliding.as_ref().unwrap();
    assert_eq!((s.window, s.pattern, s.rope_theta), (512, 6, 10_000.0));
    // Layers 5, 11 and 17 are global; the rest see 512 positions.
    let global: Vec<usize> = (0..18).filter(|&l| c.window(l).is_none()).collect();
    assert_eq!(global, [5, 11, 17]);
    assert_eq!(c.window(0), Some(512));
}

/// Teacher-forced over the last 64 positions of a real prompt and answer: the CPU file
/// (Q5_0 as stored) and the candle path (Q5_0 requantised to Q8_0, activations rounded
/// at other points) pick the same next token at all but a few near ties.
#[test]
fn teacher_forced_argmax_agrees_with_candle() {
    let Some(m) = ours() else { return };
    let c = candle().unwrap();
    let (agree, worst, scale) = common::teacher_forced(&m, &c, &text_ids(&m), 64);
    assert!(agree >= 64 - 3, "argmax agreement {agree}/64");
    assert!(worst <= 0.15 * scale, "largest logit difference {worst}");
}

/// Each token's arithmetic is the same whatever shares its pass: one prefill, chunks of
/// 7 and one token at a time agree to float rounding.
#[test]
fn chunked_prefill_equals_full_prefill() {
    let Some(m) = ours() else { return };
    common::assert_chunked_prefills_agree(&m, 1e-4);
}

#[test]
fn snapshots_are_independent() {
    let Some(m) = ours() else { return };
    common::assert_snapshots_independent(&m, 1e-4);
}

/// The portable scalar kernels and the SIMD ones this CPU runs agree end to end. The
/// integer sums are exact and only the order of f32 sums differs, but Gemma's residual
/// outliers carry one flipped 8-bit rounding far: measured 1.59 on logits up to about 18.
#[test]
fn scalar_and_simd_kernels_agree() {
    let Some(m) = ours() else { return };
    common::scalar_and_simd_agree(&m.path, &text_ids(&m)[..24], 2.5);
}

#[test]
fn bad_input_is_an_error() {
    let Some(m) = ours() else { return };
    common::bad_input_is_an_error(&m, 262_144, 40_000);
    assert_eq!(m.context_length, 32_768);
}

/// With a window of 8, the local layers see less of a longer sequence, so its logits
/// move; prefill in one pass, in chunks and token by token all apply the same window;
/// and the CPU file and the model graph (candle's path) with the same window pick the same token.
#[test]
fn sliding_window_is_honoured_at_prefill_and_decode() {
    let Some(m) = ours() else { return };
    let ids = &text_ids(&m)[..40];
    const W: usize = 8;
    let mut small = raw().unwrap().with_sliding_window(W).unwrap();
    let full = small.forward_tokens(ids, 0).unwrap();
    let unwindowed = m.model.snapshot().forward(ids, 0).unwrap();
    let d = max_abs_diff(&full, &unwindowed);
    eprintln!(
        "window {W} against 512: largest difference {d} (max |logit| {})",
        common::scale(&full)
    );
    assert!(
        d > 0.5,
        "a window of {W} moved the logits of 40 tokens by only {d}"
    );
    // No longer than the window: the window changes nothing.
    let short = small.forward_tokens(&ids[..W], 0).unwrap();
    let want = m.model.snapshot().forward(&ids[..W], 0).unwrap();
    assert!(max_abs_diff(&short, &want) <= 1e-4);
    for chunk in [1, 3, 7] {
        let mut last = Vec::new();
        for (i, c) in ids.chunks(chunk).enumerate() {
            last = small.forward_tokens(c, i * chunk).unwrap();
        }
        let d = max_abs_diff(&full, &last);
        assert!(d <= 1e-4, "chunks of {chunk}: largest difference {d}");
    }
    // The model graph with the same window (weights as stored).
    let path = common::gemma3_path().unwrap();
    let mut f = std::fs::File::open(path).unwrap();
    let ct = gguf_file::Content::read(&mut f).unwrap();
    let mut c = formwork_models::graph::GraphModel::from_gguf(ct, &mut f, &Device::Cpu)
        .unwrap()
        .with_sliding_window(W)
        .unwrap();
    let input = candle_core::Tensor::new(ids, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let theirs: Vec<f32> = c
        .forward(&input, 0)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let d = max_abs_diff(&full, &theirs);
    eprintln!(
        "window {W}: largest difference from the model graph {d} (max |logit| {})",
        common::scale(&theirs)
    );
    assert_eq!(argmax(&full), argmax(&theirs));
    // Measured 3.39 of 20.4 (both round activations to 8 bits, at different points, and
    // Gemma's outliers carry a flip far); the window itself moves them by 11.3.
    assert!(d <= 0.2 * common::scale(&theirs), "{d}");
}

/// llama.cpp's greedy tokens on the same GGUF (`testdata/gemma3-greedy.json`), teacher
/// forced as in `gemma3_model.rs` ([`common::assert_agrees_with_gemma_reference`]).
#[test]
fn greedy_tokens_agree_with_llama_cpp() {
    let Some(m) = ours() else { return };
    let mut model = m.model.snapshot();
    common::assert_agrees_with_gemma_reference(
        "CPU file",
        |t, pos| model.forward(t, pos).unwrap(),
        |t| m.tokenizer.decode(t).unwrap_or_default(),
    );
}
