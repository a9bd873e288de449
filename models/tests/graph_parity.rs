//! The model graph (`formwork_models::graph`, what every candle device runs) on candle's
//! CPU device, against formwork's CPU file (`llama/`) and llama.cpp's recorded logits, for
//! every family's synthesised file of `family_parity.rs` (the same fixtures, the same
//! file written again): Llama 3.2 with `rope_freqs`, Mistral (llama without), Qwen3,
//! Gemma 2, Phi-3.5 with its long and its short LongRoPE factors, in Q8_0 and Q4_K.
//!
//! Each case feeds the fixture's prompt (about 2,000 tokens) and then llama.cpp's 24
//! greedy picks one at a time, to the graph and to the CPU file, and asserts at every step:
//! - the graph's logits within `CPU_TOL` (0.2) of the CPU file's, over the whole
//!   vocabulary. Both round activations to 8 bits before each quantised matmul, candle
//!   with its own block quantiser (Q8_K for K-quant weights) and each in its own order,
//!   and each is about 0.1 from llama.cpp on its own side: measured 0.09 (Gemma 2) to
//!   0.153 (Llama 3.2 Q8_0), printed by each case;
//! - the graph's logits of llama.cpp's 16 largest within the tolerance `family_parity.rs`
//!   states for the type (0.1 on Q8_0, 0.15 on Q4_K; the graph's order is candle's, so
//!   0.15 throughout), and its pick llama.cpp's or a near tie.
//!
//! Gemma 3, Qwen2 and llama without `rope_freqs` on real weights (the registry's Gemma 3
//! 270M, Qwen2.5-Coder 0.5B, SmolLM2 135M) are checked the same way against the CPU file
//! in `gemma3_model.rs`, `qwen2_model.rs` and `runtime_smollm2.rs` (Backend::Candle is
//! the graph), Gemma 3 also against llama.cpp's greedy tokens.
//!
//! The vocabularies come from `scripts/llamacpp-vocab`; without them each test says SKIPPED.

mod common;

use candle_core::quantized::gguf_file;
use candle_core::Device;
use common::family::{fixture, synthesize};
use formwork_models::graph::GraphModel;
use formwork_models::llama::ModelWeights;
use formwork_models::tokenizer::GgufTokenizer;

/// The largest |graph - CPU file| over all logits of any step (module doc).
const CPU_TOL: f32 = 0.2;

/// Runs fixture `name` on the graph and the CPU file; `tol` against llama.cpp.
fn check(name: &str, tol: f32) {
    let Some(vocab_dir) = common::llamacpp_vocab_dir() else {
        return;
    };
    let f = fixture(name);
    let (dir, path) = synthesize(&f, &vocab_dir);
    let open = || {
        let mut file = std::fs::File::open(&path).unwrap();
        let ct = gguf_file::Content::read(&mut file).unwrap();
        (ct, file)
    };
    let (ct, mut file) = open();
    let tokenizer = GgufTokenizer::from_gguf(&ct).unwrap();
    let mut cpu = ModelWeights::from_gguf(ct, &mut file, &Device::Cpu).unwrap();
    let (ct, mut file) = open();
    let mut graph = GraphModel::from_gguf(ct, &mut file, &Device::Cpu).unwrap();
    if let Some(n) = f.n_ctx {
        cpu = cpu.with_context_length(n).unwrap();
        graph = graph.with_context_length(n).unwrap();
    }
    let mut ids = Vec::new();
    if tokenizer.add_bos() {
        ids.extend(tokenizer.bos_id());
    }
    ids.extend(tokenizer.encode_plain(&f.prompt).unwrap());
    assert_eq!(
        ids, f.prompt_ids,
        "{name}: prompt ids differ from llama.cpp's"
    );

    let mut g = graph.forward_tokens(&ids, 0).unwrap();
    let mut c = cpu.forward_tokens(&ids, 0).unwrap();
    let mut pos = ids.len();
    let (mut cpu_diff, mut cpp_diff, mut matched) = (0f32, 0f32, 0);
    let mut prefill_diff = None;
    for (i, step) in f.steps.iter().enumerate() {
        let d = common::max_abs_diff(&g, &c);
        prefill_diff.get_or_insert(d);
        cpu_diff = cpu_diff.max(d);
        for &(id, want) in &step.top {
            cpp_diff = cpp_diff.max((g[id as usize] - want).abs());
        }
        let ours = common::argmax(&g);
        if ours == step.token {
            matched += 1;
        } else {
            let gap = step
                .top
                .iter()
                .find(|(id, _)| *id == ours)
                .map(|(_, v)| step.top[0].1 - v);
            assert!(
                gap.is_some_and(|g| g <= 2.0 * tol),
                "{name}: step {i}: the graph picks {ours}, llama.cpp {}, not a near tie (gap {gap:?})",
                step.token
            );
        }
        if i + 1 < f.steps.len() {
            g = graph.forward_tokens(&[step.token], pos).unwrap();
            c = cpu.forward_tokens(&[step.token], pos).unwrap();
            pos += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "{name}: graph vs CPU file: max |diff| {cpu_diff:.4} (prefill {:.4}; tolerance {CPU_TOL}); vs llama.cpp: max |diff| {cpp_diff:.4} (tolerance {tol}), {matched}/{} picks as llama.cpp's",
        prefill_diff.unwrap_or(0.0),
        f.steps.len()
    );
    assert!(cpu_diff <= CPU_TOL, "{name}: graph vs CPU file {cpu_diff}");
    assert!(cpp_diff <= tol, "{name}: graph vs llama.cpp {cpp_diff}");
}

#[test]
fn llama_3_2_1b_q8_0() {
    check("llama-3.2-1b.q8_0", 0.15);
}

#[test]
fn llama_3_2_1b_q4_k() {
    check("llama-3.2-1b.q4_k", 0.15);
}

#[test]
#[ignore = "slow: Mistral's 4096-wide layers; the Q8_0 case runs with --ignored"]
fn mistral_7b_q8_0() {
    check("mistral-7b.q8_0", 0.15);
}

#[test]
fn mistral_7b_q4_k() {
    check("mistral-7b.q4_k", 0.15);
}

#[test]
fn gemma_2_2b_q8_0() {
    check("gemma-2-2b.q8_0", 0.15);
}

#[test]
fn gemma_2_2b_q4_k() {
    check("gemma-2-2b.q4_k", 0.15);
}

#[test]
fn qwen3_0_6b_q8_0() {
    check("qwen3-0.6b.q8_0", 0.15);
}

#[test]
fn qwen3_0_6b_q4_k() {
    check("qwen3-0.6b.q4_k", 0.15);
}

/// Long LongRoPE factors (llama.cpp's n_ctx 8192).
#[test]
fn phi_3_5_mini_q8_0() {
    check("phi-3.5-mini.q8_0", 0.15);
}

#[test]
#[ignore = "slow: a Phi-3.5 case per set of factors runs by default"]
fn phi_3_5_mini_q4_k() {
    check("phi-3.5-mini.q4_k", 0.15);
}

/// Short LongRoPE factors (n_ctx 4096).
#[test]
fn phi_3_5_mini_q4_k_short_factors() {
    check("phi-3.5-mini.q4_k.ctx4096", 0.15);
}
