//! formwork's two Qwen2 model files on the real Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF.
//!
//! The model graph (`graph/`, candle's path: what GPUs run): the config from the
//! metadata, logits against candle-transformers' `quantized_qwen2` (the same computation),
//! chunked prefill and decode against one prefill, independent snapshots, a greedy chat
//! answer, and bad input.
//!
//! The CPU file (`llama/`, the file's Q4_K / Q5_0 / Q6_K / Q8_0 blocks through
//! `quant/`, KV cache grown in place): teacher-forced agreement with the candle path,
//! full, chunked and token-by-token prefill equal, snapshots, scalar against SIMD
//! kernels, the greedy chat answer and bad input.
//!
//! Needs the model fetched (`formwork models fetch qwen2.5-coder-0.5b`, or
//! `FORMWORK_HOME`, or `FORMWORK_QWEN2_GGUF`); without it each test prints `SKIPPED:`
//! and returns.

mod common;

use std::sync::MutexGuard;

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use common::{scale, text_ids, TEXT};
use formwork_models::chat::{render_chat, ChatMessage};
use formwork_models::graph::GraphModel;
use formwork_models::llama::Config;
use formwork_models::runtime::{Backend, LoadedModel};

/// The candle-tensor path through the runtime (what GPUs run), loaded once; tests take
/// snapshots.
fn shared() -> Option<MutexGuard<'static, LoadedModel>> {
    static M: common::Shared = common::Shared::new();
    common::once(&M, || common::load_qwen2(Backend::Candle))
}

/// formwork's CPU model file through the runtime (what `formwork` runs on an AVX2 CPU),
/// loaded once.
fn ours() -> Option<MutexGuard<'static, LoadedModel>> {
    static M: common::Shared = common::Shared::new();
    common::once(&M, || common::load_qwen2(Backend::Formwork))
}

fn content(path: &std::path::Path) -> (gguf_file::Content, std::fs::File) {
    let mut f = std::fs::File::open(path).unwrap();
    let ct = gguf_file::Content::read(&mut f).unwrap();
    (ct, f)
}

#[test]
fn config_is_read_from_gguf_metadata() {
    let Some(path) = common::qwen2_path() else {
        return;
    };
    let (ct, _) = content(&path);
    let c = Config::from_gguf(&ct).unwrap();
    assert_eq!(c.arch, formwork_models::llama::Arch::Qwen2);
    assert_eq!((c.vocab_size, c.hidden_size), (151_936, 896));
    assert_eq!(
        (
            c.num_hidden_layers,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim
        ),
        (24, 14, 2, 64)
    );
    assert_eq!(c.rope_theta, 1_000_000.0);
    assert_eq!(c.rope_scaling_factor, 1.0);
    assert_eq!(c.context_length, 32_768);
    assert!((c.rms_norm_eps - 1e-6).abs() < 1e-9, "{}", c.rms_norm_eps);
    assert_eq!(c.sliding, None);
}

/// The same prompt through candle-transformers' `quantized_qwen2` and through the graph
/// (both on the weights as stored): the same next token, logits equal up to summation order.
#[test]
fn logits_agree_with_candle_quantized_qwen2() {
    let Some(path) = common::qwen2_path() else {
        return;
    };
    let (ct, mut f) = content(&path);
    let tok = formwork_models::tokenizer::GgufTokenizer::from_gguf(&ct).unwrap();
    let ids = tok.encode(TEXT).unwrap();
    let ids = &ids[..80];
    let input = Tensor::new(ids, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let want: Vec<f32> = {
        let mut candle = candle_transformers::models::quantized_qwen2::ModelWeights::from_gguf(
            ct,
            &mut f,
            &Device::Cpu,
        )
        .unwrap();
        candle
            .forward(&input, 0)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let (ct, mut f) = content(&path);
    let mut ours = GraphModel::from_gguf(ct, &mut f, &Device::Cpu).unwrap();
    let got: Vec<f32> = ours
        .forward(&input, 0)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let d = common::max_abs_diff(&want, &got);
    eprintln!("largest logit difference from candle's quantized_qwen2: {d}");
    assert_eq!(common::argmax(&want), common::argmax(&got));
    assert!(d <= 1e-2, "largest logit difference {d}");
}

/// candle (like llama.cpp) rounds activations to 8 bits before each quantised matmul, so
/// a prefill split differently can round a few activations differently: measured here,
/// up to 0.3 on logits of magnitude about 20. As in `gemma3_model.rs`, the argmax must
/// match exactly and the logits within this share of their largest magnitude.
const TOL: f32 = 0.15;

/// One prefill, prefills in chunks of 7, and one token at a time give the same logits
/// (up to activation rounding: see `TOL`).
#[test]
fn chunked_prefill_equals_full_prefill() {
    let Some(m) = shared() else { return };
    let (full, chunked) = common::chunked_prefills(&m, &text_ids(&m)[..90]);
    for (chunk, last) in chunked {
        let d = common::max_abs_diff(&full, &last);
        let s = scale(&full);
        eprintln!("chunks of {chunk}: largest difference {d} (max |logit| {s})");
        assert_eq!(
            common::argmax(&full),
            common::argmax(&last),
            "chunks of {chunk}"
        );
        assert!(d <= TOL * s, "chunks of {chunk}: largest difference {d}");
    }
}

/// A snapshot keeps its cache while the original decodes on, and the original is unharmed.
#[test]
fn snapshots_are_independent() {
    let Some(m) = shared() else { return };
    let [(from_snap, want), (next, want_next)] = common::snapshot_runs(&m, &text_ids(&m));
    let d = common::max_abs_diff(&from_snap, &want);
    assert!(d <= 1e-3, "snapshot: largest difference {d}");
    // Token by token against one prefill: equal up to activation rounding (`TOL`); a
    // cache the snapshot had written into would give another argmax and logits far off.
    let d = common::max_abs_diff(&next, &want_next);
    assert_eq!(
        common::argmax(&next),
        common::argmax(&want_next),
        "original"
    );
    assert!(
        d <= TOL * scale(&want_next),
        "original: largest difference {d}"
    );
}

/// The GGUF's chat template, the tokenizer and the model together: greedy decoding answers
/// a coding question with code and stops on an end-of-turn token.
#[test]
fn greedy_chat_answer_is_code_and_ends() {
    let Some(m) = shared() else { return };
    greedy_chat(&m);
}

#[test]
fn cpu_greedy_chat_answer_is_code_and_ends() {
    let Some(m) = ours() else { return };
    greedy_chat(&m);
}

fn greedy_chat(m: &LoadedModel) {
    let tok = &m.tokenizer;
    let prompt = render_chat(
        tok.chat_template()
            .expect("the Qwen GGUF has a chat template"),
        &[ChatMessage::new(
            "user",
            "Write a Python function add(a, b) that returns a + b. Only the code.",
        )],
        true,
        "<|endoftext|>",
        "<|im_end|>",
    )
    .unwrap();
    let ids = tok.encode(&prompt).unwrap();
    let mut model = m.model.snapshot();
    let mut logits = model.forward(&ids, 0).unwrap();
    let mut out = Vec::new();
    let mut ended = false;
    for i in 0..48 {
        let t = common::argmax(&logits);
        if tok.eos_ids().contains(&t) {
            ended = true;
            break;
        }
        out.push(t);
        logits = model.forward(&[t], ids.len() + i).unwrap();
    }
    let text = tok.decode(&out).unwrap();
    eprintln!("greedy answer: {text:?}");
    assert!(text.contains("def add(a, b)"), "{text:?}");
    assert!(text.contains("return a + b"), "{text:?}");
    assert!(ended, "no end-of-turn token within 48 tokens: {text:?}");
}

/// Bad input is an error with its numbers, never a panic, and leaves the model usable.
#[test]
fn bad_input_is_an_error() {
    let Some(m) = shared() else { return };
    bad_input(&m);
}

#[test]
fn cpu_bad_input_is_an_error() {
    let Some(m) = ours() else { return };
    bad_input(&m);
}

fn bad_input(m: &LoadedModel) {
    common::bad_input_is_an_error(m, 151_936, 40_000);
    assert_eq!(m.context_length, 32_768);
}

/// Teacher-forced over the last 64 positions of a real prompt and answer: formwork's CPU
/// file (the file's Q5_0 / Q4_K / Q6_K / Q8_0 blocks) and the candle path (Q5_0
/// requantised to Q8_0) pick the same next token at all but at most 2 positions, and
/// their logits differ by at most 1.5 (both round activations to 8 bits, at different
/// points: measured 0.65 against logits spanning about 33).
#[test]
fn cpu_teacher_forced_argmax_agrees_with_candle() {
    let Some(m) = ours() else { return };
    let candle = shared().unwrap();
    let (agree, worst, _) = common::teacher_forced(&m, &candle, &text_ids(&m), 64);
    assert!(agree >= 64 - 2, "argmax agreement {agree}/64");
    assert!(worst <= 1.5, "largest logit difference {worst}");
}

/// The CPU file computes each token alone, whatever the batch: one prefill, prefills in
/// chunks of 7, and one token at a time give the same logits to float rounding.
#[test]
fn cpu_chunked_prefill_equals_full_prefill() {
    let Some(m) = ours() else { return };
    common::assert_chunked_prefills_agree(&m, 1e-4);
}

/// A snapshot of the CPU file keeps its cache while the original decodes on, and the
/// original is unharmed.
#[test]
fn cpu_snapshots_are_independent() {
    let Some(m) = ours() else { return };
    common::assert_snapshots_independent(&m, 1e-4);
}

/// The portable scalar kernels and the SIMD ones this CPU runs agree end to end.
#[test]
fn cpu_scalar_and_simd_kernels_agree() {
    let Some(m) = ours() else { return };
    // Over 24 layers.
    common::scalar_and_simd_agree(&m.path, &text_ids(&m)[..24], 1.0);
}
