//! Model families against llama.cpp: Llama 3.2 1B's shape (`llama` with Llama 3's RoPE
//! factors, `llama-bpe` tokenizer), Qwen3 0.6B's (`qwen3`: per-head q/k norms, head size
//! 128 beside a 1024 embedding), Mistral 7B's (`llama` 4096 wide, 8 KV heads, an untied
//! output, the SentencePiece `llama-spm` tokenizer) and Gemma 2 2B's (`gemma2`: soft-capped
//! attention scores and logits, post-norms, every even layer local; its window cut to 512
//! so that the prompt crosses it; `llama-spm` stands in for Gemma's vocabulary, which
//! llama.cpp's vocab-only files lack) and Phi-3.5-mini's (`phi3`: fused QKV and gate/up
//! matrices, LongRoPE factors with `attn_factor`, the `phi-3` SentencePiece vocabulary), in
//! Q8_0 and Q4_K.
//!
//! llama.cpp picks Phi-3's long or short RoPE factors by its context size, not by
//! position: the fixtures name theirs (`n_ctx`), and formwork runs with the same context
//! (`ModelWeights::with_context_length`): 8192, past the original 4096, for the long
//! factors (`phi-3.5-mini.QTYPE.json`), 4096 for the short ones (`*.ctx4096.json`).
//!
//! No such weights can be fetched here, so `synth::write_family` writes a GGUF with the
//! family's real dimensions (2 of its layers), random weights (seed 1) and the tokenizer of
//! llama.cpp's vocab-only GGUF. `scripts/family-fixtures` ran llama.cpp on the same file and
//! recorded, in `fixtures/family/FAMILY.QTYPE.json`, the prompt's ids (about 2,000 tokens)
//! and 24 greedy steps: the token picked and the 16 largest logits. This test writes the file again, checks that
//! formwork's tokenizer gives the same prompt ids, feeds the same tokens (llama.cpp's picks)
//! and compares at every step:
//! - the logits of llama.cpp's 16 largest, within a tolerance per type (activations are
//!   rounded to 8 bits before each matmul in both, in different orders; llama.cpp keeps its
//!   KV cache in f16, formwork in f32);
//! - the token picked: formwork's argmax is llama.cpp's, except at a near tie (llama.cpp's
//!   top two within twice the tolerance), where either may win.
//!
//! The prompt is long so that the RoPE factors matter: with Llama 3's `rope_freqs.weight`
//! left out, formwork's first pick already differs from llama.cpp's by 0.20 on Q8_0 (and
//! 0.82 at step 3 on Q4_K), and the test fails.
//!
//! The vocabularies come from `scripts/llamacpp-vocab`; without them each test says SKIPPED.

mod common;

use common::family::{fixture, synthesize};

use candle_core::quantized::gguf_file;
use candle_core::Device;
use formwork_models::llama::ModelWeights;
use formwork_models::runtime::{load_file, Backend};
use formwork_models::synth;
use formwork_models::tokenizer::GgufTokenizer;

/// Feeds tokens at a position; the logits of the last.
type Forward = Box<dyn FnMut(&[u32], usize) -> Vec<f32>>;

/// What one run measured.
struct Parity {
    /// Steps where formwork's argmax is llama.cpp's token.
    matched: usize,
    /// Steps before the first where they differ: the greedy tokens both would write.
    greedy_prefix: usize,
    /// The largest |formwork - llama.cpp| over the recorded logits of every step.
    max_diff: f32,
}

/// Runs the fixture on `backend` and asserts the module doc's rules with `tol`.
fn check(name: &str, backend: Backend, tol: f32) -> Option<Parity> {
    let vocab_dir = common::llamacpp_vocab_dir()?;
    let f = fixture(name);
    let (dir, path) = synthesize(&f, &vocab_dir);
    // With a context size: formwork's CPU file, run with that context.
    let (tokenizer, mut forward): (GgufTokenizer, Forward) = match f.n_ctx {
        None => {
            let mut m = load_file(&path, name, common::cpu_options(backend)).unwrap();
            let t = (*m.tokenizer).clone();
            (
                t,
                Box::new(move |ids, pos| m.model.forward(ids, pos).unwrap()),
            )
        }
        Some(n_ctx) => {
            assert_eq!(
                backend,
                Backend::Formwork,
                "{name}: n_ctx needs formwork's file"
            );
            let mut file = std::fs::File::open(&path).unwrap();
            let ct = gguf_file::Content::read(&mut file).unwrap();
            let t = GgufTokenizer::from_gguf(&ct).unwrap();
            let mut w = ModelWeights::from_gguf(ct, &mut file, &Device::Cpu)
                .unwrap()
                .with_context_length(n_ctx)
                .unwrap();
            (
                t,
                Box::new(move |ids, pos| w.forward_tokens(ids, pos).unwrap()),
            )
        }
    };

    let mut ids = Vec::new();
    if tokenizer.add_bos() {
        ids.extend(tokenizer.bos_id());
    }
    ids.extend(tokenizer.encode_plain(&f.prompt).unwrap());
    assert_eq!(
        ids, f.prompt_ids,
        "{name}: prompt ids differ from llama.cpp's"
    );

    let mut logits = forward(&ids, 0);
    let mut pos = ids.len();
    let (mut matched, mut greedy_prefix, mut max_diff) = (0, None, 0f32);
    let mut report = Vec::new();
    for (i, step) in f.steps.iter().enumerate() {
        let mut diff = 0f32;
        for &(id, want) in &step.top {
            diff = diff.max((logits[id as usize] - want).abs());
        }
        max_diff = max_diff.max(diff);
        let ours = common::argmax(&logits);
        if ours == step.token {
            matched += 1;
        } else {
            greedy_prefix.get_or_insert(i);
            let theirs_of_ours = step.top.iter().find(|(id, _)| *id == ours);
            let gap = theirs_of_ours.map(|(_, v)| step.top[0].1 - v);
            report.push(format!(
                "step {i}: formwork picks {ours}, llama.cpp {} (llama.cpp's gap {gap:?})",
                step.token
            ));
            assert!(
                gap.is_some_and(|g| g <= 2.0 * tol),
                "{name}: step {i}: formwork picks {ours}, llama.cpp {}, not a near tie (gap {gap:?}, tolerance {tol})",
                step.token
            );
        }
        if i + 1 < f.steps.len() {
            logits = forward(&[step.token], pos);
            pos += 1;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let p = Parity {
        matched,
        greedy_prefix: greedy_prefix.unwrap_or(f.steps.len()),
        max_diff,
    };
    eprintln!(
        "{name} ({backend:?}): {}/{} tokens as llama.cpp's, the first {} in a row; max |logit diff| {:.4} (tolerance {tol}){}",
        p.matched,
        f.steps.len(),
        p.greedy_prefix,
        p.max_diff,
        report
            .iter()
            .map(|r| format!("\n  {r}"))
            .collect::<String>()
    );
    assert!(
        p.max_diff <= tol,
        "{name}: max |logit diff| {} above the tolerance {tol}",
        p.max_diff
    );
    Some(p)
}

#[test]
fn llama_3_2_1b_q8_0_matches_llamacpp() {
    check("llama-3.2-1b.q8_0", Backend::Formwork, 0.1);
}

#[test]
fn llama_3_2_1b_q4_k_matches_llamacpp() {
    check("llama-3.2-1b.q4_k", Backend::Formwork, 0.15);
}

/// Mistral's 4096-wide layers make a case take over a minute on a busy 2-core machine,
/// so the default run keeps the Q4_K case; this one runs with `--ignored`.
#[test]
#[ignore = "slow: about 80 s; the Q4_K case runs by default"]
fn mistral_7b_q8_0_matches_llamacpp() {
    check("mistral-7b.q8_0", Backend::Formwork, 0.1);
}

#[test]
fn mistral_7b_q4_k_matches_llamacpp() {
    check("mistral-7b.q4_k", Backend::Formwork, 0.15);
}

#[test]
fn gemma_2_2b_q8_0_matches_llamacpp() {
    check("gemma-2-2b.q8_0", Backend::Formwork, 0.1);
}

#[test]
fn gemma_2_2b_q4_k_matches_llamacpp() {
    check("gemma-2-2b.q4_k", Backend::Formwork, 0.15);
}

#[test]
fn qwen3_0_6b_q8_0_matches_llamacpp() {
    check("qwen3-0.6b.q8_0", Backend::Formwork, 0.1);
}

#[test]
fn qwen3_0_6b_q4_k_matches_llamacpp() {
    check("qwen3-0.6b.q4_k", Backend::Formwork, 0.15);
}

/// The model graph (candle's path, what GPUs run) through the runtime, here on candle's
/// CPU device; `graph_parity.rs` checks every family so. Its evaluation order is
/// candle's, further from llama.cpp's than formwork's CPU file, so its tolerance is 0.15.
#[test]
fn qwen3_0_6b_q8_0_on_candle_matches_llamacpp() {
    check("qwen3-0.6b.q8_0", Backend::Candle, 0.15);
}

/// Phi-3.5-mini's shape with its long RoPE factors (llama.cpp's n_ctx 8192, past the
/// original 4096).
#[test]
fn phi_3_5_mini_q8_0_matches_llamacpp() {
    check("phi-3.5-mini.q8_0", Backend::Formwork, 0.1);
}

/// A case takes over a minute here; the default run keeps one case per set of factors
/// (Q8_0 long, Q4_K short), and this one runs with `--ignored`.
#[test]
#[ignore = "slow: about 80 s; the Q8_0 (long factors) and Q4_K short-factor cases run by default"]
fn phi_3_5_mini_q4_k_matches_llamacpp() {
    check("phi-3.5-mini.q4_k", Backend::Formwork, 0.15);
}

/// The same with the short factors: llama.cpp's n_ctx 4096, not past the original.
#[test]
fn phi_3_5_mini_q4_k_short_factors_match_llamacpp() {
    check("phi-3.5-mini.q4_k.ctx4096", Backend::Formwork, 0.15);
}

/// The context picks the factors: the file's 131072 and 8192 take the long ones, 4096 (the
/// original context) and less the short ones; `attn_factor` is the converter's.
#[test]
fn phi_3_5_mini_picks_rope_factors_by_context() {
    let Some(vocab_dir) = common::llamacpp_vocab_dir() else {
        return;
    };
    let f = fixture("phi-3.5-mini.q4_k");
    let (dir, path) = synthesize(&f, &vocab_dir);
    let load = || {
        let mut file = std::fs::File::open(&path).unwrap();
        let ct = gguf_file::Content::read(&mut file).unwrap();
        ModelWeights::from_gguf(ct, &mut file, &Device::Cpu).unwrap()
    };
    let family = synth::family("phi-3.5-mini").unwrap();
    let [long, short] = synth::Phi3::factors(family.head_dim);
    let m = load();
    assert_eq!(m.config().context_length, 131_072);
    assert_eq!(m.config().rope_original_context, Some(4096));
    assert!((m.config().rope_attn_factor - 1.190_238_8).abs() < 1e-5);
    assert_eq!(m.rope_factors(), Some(&long[..]));
    for (n, want) in [(8192, &long), (4097, &long), (4096, &short), (100, &short)] {
        let m = load().with_context_length(n).unwrap();
        assert_eq!(m.rope_factors(), Some(&want[..]), "context {n}");
    }
    assert!(load().with_context_length(131_073).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
