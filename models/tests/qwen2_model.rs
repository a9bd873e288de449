//! formwork's two Qwen2 model files on the real Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF.
//!
//! The candle-tensor file (`qwen2.rs`, the GPU path): the config from the metadata,
//! logits against candle's `quantized_qwen2` (the same computation, but not `Clone`),
//! chunked prefill and decode against one prefill, independent snapshots, a greedy chat
//! answer, and bad input.
//!
//! The CPU file (`llama.rs`, the file's Q4_K / Q5_0 / Q6_K / Q8_0 blocks through
//! `quant/`, KV cache grown in place): teacher-forced agreement with the candle path,
//! full, chunked and token-by-token prefill equal, snapshots, scalar against SIMD
//! kernels, the greedy chat answer and bad input.
//!
//! Needs the model fetched (`formwork models fetch qwen2.5-coder-0.5b`, or
//! `FORMWORK_HOME`, or `FORMWORK_QWEN2_GGUF`); without it each test prints `SKIPPED:`
//! and returns.

mod common;

use std::sync::{Mutex, MutexGuard, OnceLock};

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use formwork_models::chat::{render_chat, ChatMessage};
use formwork_models::quant::Isa;
use formwork_models::qwen2::{Config, ModelWeights};
use formwork_models::runtime::{load_file, Backend, DeviceChoice, LoadOptions, LoadedModel};

/// A chat prompt and answer, so the positions cover control tokens, prose and JSON.
const TEXT: &str = "<|im_start|>system\nYou extract facts as JSON.<|im_end|>\n<|im_start|>user\n\
The Eiffel Tower, completed in 1889 for the World's Fair in Paris, is 330 metres tall and was \
designed by the engineering firm of Gustave Eiffel. It was the tallest man-made structure in the \
world until the Chrysler Building in New York was finished in 1930. Give its name, city, year and \
height.<|im_end|>\n<|im_start|>assistant\n{\"name\": \"Eiffel Tower\", \"city\": \"Paris\", \"year\": 1889, \
\"height_m\": 330, \"designer\": \"Gustave Eiffel\", \"tallest_until\": 1930}<|im_end|>\n";

fn load(backend: Backend) -> Option<LoadedModel> {
    let path = common::qwen2_path()?;
    let options = LoadOptions {
        device: DeviceChoice::Cpu,
        backend,
        ..LoadOptions::default()
    };
    Some(load_file(&path, "qwen2.5-coder-0.5b", options).expect("load qwen2"))
}

/// The candle-tensor path through the runtime (what GPUs run), loaded once; tests take
/// snapshots.
fn shared() -> Option<MutexGuard<'static, LoadedModel>> {
    static M: OnceLock<Option<Mutex<LoadedModel>>> = OnceLock::new();
    let m = M.get_or_init(|| load(Backend::Candle).map(Mutex::new));
    Some(m.as_ref()?.lock().unwrap_or_else(|e| e.into_inner()))
}

/// formwork's CPU model file through the runtime (what `formwork` runs on an AVX2 CPU),
/// loaded once.
fn ours() -> Option<MutexGuard<'static, LoadedModel>> {
    static M: OnceLock<Option<Mutex<LoadedModel>>> = OnceLock::new();
    let m = M.get_or_init(|| load(Backend::Formwork).map(Mutex::new));
    Some(m.as_ref()?.lock().unwrap_or_else(|e| e.into_inner()))
}

fn text_ids(m: &LoadedModel) -> Vec<u32> {
    let ids = m.tokenizer.encode(TEXT).unwrap();
    assert!(ids.len() > 100, "{} tokens", ids.len());
    ids
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
    assert_eq!(
        (c.vocab_size, c.hidden_size, c.intermediate_size),
        (151_936, 896, 4864)
    );
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
}

/// The same prompt through candle-transformers' `quantized_qwen2` and through ours (both on
/// the weights as stored): the same next token, logits equal up to summation order.
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
    let opts = formwork_models::qwen2::Options {
        requantize: false,
        ..Default::default()
    };
    let mut ours = ModelWeights::from_gguf_with(ct, &mut f, &Device::Cpu, &opts).unwrap();
    let got: Vec<f32> = ours.forward(&input, 0).unwrap().to_vec1().unwrap();
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

fn scale(logits: &[f32]) -> f32 {
    logits.iter().fold(0.0f32, |m, x| m.max(x.abs()))
}

/// One prefill, prefills in chunks of 7, and one token at a time give the same logits
/// (up to activation rounding: see `TOL`).
#[test]
fn chunked_prefill_equals_full_prefill() {
    let Some(m) = shared() else { return };
    let ids = text_ids(&m);
    let ids = &ids[..90];
    let mut model = m.model.snapshot();
    let full = model.forward(ids, 0).unwrap();
    for chunk in [7, 1] {
        let mut last = Vec::new();
        for (i, c) in ids.chunks(chunk).enumerate() {
            last = model.forward(c, i * chunk).unwrap();
        }
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
    let ids = text_ids(&m);
    let (prefix, rest) = ids.split_at(60);
    let mut base = m.model.snapshot();
    base.forward(prefix, 0).unwrap();
    let mut snap = base.snapshot();
    // The original goes on with other tokens, well past the snapshot's length.
    let mut pos = prefix.len();
    for &t in &rest[20..50] {
        base.forward(&[t], pos).unwrap();
        pos += 1;
    }
    let from_snap = snap.forward(&rest[..10], prefix.len()).unwrap();
    let mut fresh = m.model.snapshot();
    let want = fresh.forward(&ids[..70], 0).unwrap();
    let d = common::max_abs_diff(&from_snap, &want);
    assert!(d <= 1e-3, "snapshot: largest difference {d}");
    // And the original's cache was not touched by the snapshot's decoding.
    let next = base.forward(&rest[50..51], pos).unwrap();
    let mut seq: Vec<u32> = prefix.to_vec();
    seq.extend_from_slice(&rest[20..51]);
    let want = fresh.forward(&seq, 0).unwrap();
    // Token by token against one prefill: equal up to activation rounding (`TOL`); a
    // cache the snapshot had written into would give another argmax and logits far off.
    let d = common::max_abs_diff(&next, &want);
    assert_eq!(common::argmax(&next), common::argmax(&want), "original");
    assert!(d <= TOL * scale(&want), "original: largest difference {d}");
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
    let mut model = m.model.snapshot();
    assert_eq!(model.vocab_size(), 151_936);
    let e = model.forward(&[151_936], 0).unwrap_err().to_string();
    assert!(e.contains("151936"), "{e}");
    assert!(model.forward(&[], 0).is_err());
    model.forward(&[1, 2, 3], 0).unwrap();
    let e = model.forward(&[4], 7).unwrap_err().to_string();
    assert!(e.contains('3'), "{e}");
    model.forward(&[4], 3).unwrap();
    let e = model.forward(&[4], 40_000).unwrap_err().to_string();
    assert!(e.contains("context"), "{e}");
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
    let ids = text_ids(&m);
    let steps = 64;
    let start = ids.len() - steps;
    let mut a = m.model.snapshot();
    let mut b = candle.model.snapshot();
    let mut la = a.forward(&ids[..start], 0).unwrap();
    let mut lb = b.forward(&ids[..start], 0).unwrap();
    let (mut agree, mut worst) = (0, 0f32);
    for i in start..ids.len() {
        agree += (common::argmax(&la) == common::argmax(&lb)) as usize;
        worst = worst.max(common::max_abs_diff(&la, &lb));
        la = a.forward(&ids[i..i + 1], i).unwrap();
        lb = b.forward(&ids[i..i + 1], i).unwrap();
    }
    eprintln!(
        "argmax agreement {agree}/{steps}, largest logit difference {worst:.3} (max |logit| {:.1})",
        scale(&lb)
    );
    assert!(agree >= steps - 2, "argmax agreement {agree}/{steps}");
    assert!(worst <= 1.5, "largest logit difference {worst}");
}

/// The CPU file computes each token alone, whatever the batch: one prefill, prefills in
/// chunks of 7, and one token at a time give the same logits to float rounding.
#[test]
fn cpu_chunked_prefill_equals_full_prefill() {
    let Some(m) = ours() else { return };
    let ids = text_ids(&m);
    let ids = &ids[..90];
    let mut model = m.model.snapshot();
    let full = model.forward(ids, 0).unwrap();
    for chunk in [7, 1] {
        let mut last = Vec::new();
        for (i, c) in ids.chunks(chunk).enumerate() {
            last = model.forward(c, i * chunk).unwrap();
        }
        let d = common::max_abs_diff(&full, &last);
        eprintln!("chunks of {chunk}: largest difference {d}");
        assert!(d <= 1e-4, "chunks of {chunk}: largest difference {d}");
        assert_eq!(common::argmax(&full), common::argmax(&last));
    }
}

/// A snapshot of the CPU file keeps its cache while the original decodes on, and the
/// original is unharmed.
#[test]
fn cpu_snapshots_are_independent() {
    let Some(m) = ours() else { return };
    let ids = text_ids(&m);
    let (prefix, rest) = ids.split_at(60);
    let mut base = m.model.snapshot();
    base.forward(prefix, 0).unwrap();
    let mut snap = base.snapshot();
    let mut pos = prefix.len();
    for &t in &rest[20..50] {
        base.forward(&[t], pos).unwrap();
        pos += 1;
    }
    let from_snap = snap.forward(&rest[..10], prefix.len()).unwrap();
    let mut fresh = m.model.snapshot();
    let want = fresh.forward(&ids[..70], 0).unwrap();
    let d = common::max_abs_diff(&from_snap, &want);
    assert!(d <= 1e-4, "snapshot: largest difference {d}");
    let next = base.forward(&rest[50..51], pos).unwrap();
    let mut seq: Vec<u32> = prefix.to_vec();
    seq.extend_from_slice(&rest[20..51]);
    let want = fresh.forward(&seq, 0).unwrap();
    let d = common::max_abs_diff(&next, &want);
    assert!(d <= 1e-4, "original: largest difference {d}");
}

/// The portable scalar kernels and the SIMD ones this CPU runs agree end to end.
#[test]
fn cpu_scalar_and_simd_kernels_agree() {
    let Some(m) = ours() else { return };
    let ids = text_ids(&m);
    let ids = &ids[..24];
    let load = |isa| {
        let (ct, mut f) = content(&m.path);
        formwork_models::llama::ModelWeights::from_gguf_with_isa(ct, &mut f, &Device::Cpu, isa)
            .unwrap()
    };
    let want = load(Isa::Scalar).forward_tokens(ids, 0).unwrap();
    for isa in Isa::available() {
        let got = load(isa).forward_tokens(ids, 0).unwrap();
        let d = common::max_abs_diff(&want, &got);
        eprintln!("{isa:?}: largest difference from scalar {d}");
        // Equal integer sums; the order of the f32 sums differs, and a flipped 8-bit
        // rounding of an activation grows over 24 layers.
        assert!(d <= 1.0, "{isa:?}: {d}");
        assert_eq!(common::argmax(&want), common::argmax(&got), "{isa:?}");
    }
}
