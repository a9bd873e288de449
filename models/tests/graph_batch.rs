//! Batched decoding on the model graph (`graph/`, candle's path: what GPUs run), here on
//! candle's CPU device: B sequences of different lengths in one pass (their rows stacked
//! into each matmul, attention per sequence with a causal mask) give each sequence the
//! logits it gets alone, within `TOL`, and the same greedy tokens; through
//! `runtime::forward_batch` and through a `BatchGroup` of threads, as the CPU file's
//! `batch_forward.rs`; snapshots and `truncate` inside a batch.
//!
//! The tolerance: candle picks its CPU matmul kernel by the number of rows (on x86 with
//! AVX-512 VNNI a Q6_K matrix runs a compact GEMV for one row and repacked tiles for more,
//! `candle-core` `quantized/repack_x86.rs` `select`), and the two round differently, so a
//! token decoded in a batch of 4 can differ from the same token alone as a chunked
//! prefill differs from a full one (`gemma3_model.rs`, `qwen2_model.rs`): `TOL` of the
//! largest |logit|, the same argmax at every step. SmolLM2 (Q8_0 after requantisation,
//! one kernel for any number of rows) must be equal bit for bit, which checks the
//! batching itself (rows, positions, masks, caches, truncation) exactly; Qwen2.5 and
//! Gemma 3 (Q4_K_M, with Q6_K tensors) measured up to 0.52 and 1.58 (printed, against
//! largest logits of about 20-30). A GPU's batched kernels may add in another order too.
//!
//! Needs the registry models (`formwork models fetch smollm2-135m`, `qwen2.5-coder-0.5b`,
//! `gemma3-270m`); without them each test prints `SKIPPED:` and returns.

mod common;

use std::sync::{Arc, Barrier};

use formwork_models::group::BatchGroup;
use formwork_models::runtime::{forward_batch, Backend, LanguageModel, LoadedModel};

/// The largest |batched - alone| logit difference allowed, as a share of the largest
/// |logit| alone (module doc).
const TOL: f32 = 0.15;

const PROMPTS: [&str; 4] = [
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou extract facts as JSON.<|im_end|>\n<|im_start|>user\n\
The Eiffel Tower, completed in 1889 for the World's Fair in Paris, is 330 metres tall and was \
designed by the engineering firm of Gustave Eiffel. It was the tallest man-made structure in the \
world until the Chrysler Building in New York was finished in 1930. Give its name, city, year and \
height as JSON.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nBook a table for four at Luigi's tomorrow at 7pm.<|im_end|>\n<|im_start|>assistant\n{\"",
    "<|im_start|>user\nName three primes.<|im_end|>\n<|im_start|>assistant\n",
];

const STEPS: usize = 8;

/// The logits after `prompt` and after each of `STEPS` greedy tokens, alone.
fn alone(m: &LoadedModel, prompt: &str) -> (Vec<Vec<f32>>, Vec<u32>) {
    let ids = m.tokenizer.encode(prompt).unwrap();
    let mut model = m.model.snapshot();
    let mut logits = vec![model.forward(&ids, 0).unwrap()];
    let mut toks = Vec::new();
    for pos in ids.len()..ids.len() + STEPS {
        let t = common::argmax(logits.last().unwrap());
        toks.push(t);
        logits.push(model.forward(&[t], pos).unwrap());
    }
    (logits, toks)
}

/// `got` against `want` step by step: within `TOL` of the largest |logit| and the same
/// argmax, or equal bit for bit where `exact`.
fn assert_close(what: &str, got: &[Vec<f32>], want: &[Vec<f32>], exact: bool) {
    assert_eq!(got.len(), want.len(), "{what}: steps");
    let mut worst = 0f32;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (d, s) = (common::max_abs_diff(g, w), common::scale(w));
        worst = worst.max(d);
        assert!(
            !exact || d == 0.0,
            "{what}: step {i}: max |Δlogit| {d}, not exact"
        );
        assert!(
            d <= TOL * s,
            "{what}: step {i}: max |Δlogit| {d} (tolerance {TOL} of {s})"
        );
        assert_eq!(common::argmax(g), common::argmax(w), "{what}: step {i}");
    }
    eprintln!("{what}: batched against alone, largest |Δlogit| {worst}");
}

/// The four prompts prefilled in one pass, then decoded greedily, one pass per step;
/// midway, sequence 1 is truncated back 2 positions and fed those 2 tokens again with
/// the step's (3 rows in the batch), and a snapshot of sequence 2 taken before a step decodes that step again.
fn mixed_lengths(m: &LoadedModel, name: &str, exact: bool) {
    let want: Vec<_> = PROMPTS.iter().map(|p| alone(m, p)).collect();
    let ids: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| m.tokenizer.encode(p).unwrap())
        .collect();
    assert!(
        ids[0].len() * 4 < ids[1].len(),
        "one short prompt, one long"
    );
    let mut models: Vec<Box<dyn LanguageModel>> =
        PROMPTS.iter().map(|_| m.model.snapshot()).collect();
    let feeds: Vec<(&[u32], usize)> = ids.iter().map(|t| (&t[..], 0)).collect();
    let before = m.model.timings().forwards;
    let mut got: Vec<Vec<Vec<f32>>> = forward_batch(&mut models, &feeds)
        .into_iter()
        .map(|r| vec![r.unwrap()])
        .collect();
    // One pass on the device for the four, not four passes one after another.
    assert_eq!(m.model.timings().forwards, before + 1, "{name}: passes");
    let mut toks: Vec<Vec<u32>> = vec![Vec::new(); PROMPTS.len()];
    let mut pos: Vec<usize> = ids.iter().map(|t| t.len()).collect();
    for step in 0..STEPS {
        let next: Vec<Vec<u32>> = got
            .iter()
            .map(|l| vec![common::argmax(l.last().unwrap())])
            .collect();
        let snap = (step == 4).then(|| models[2].snapshot());
        let mut feeds: Vec<(Vec<u32>, usize)> = next
            .iter()
            .zip(&pos)
            .map(|(t, &p)| (t.clone(), p))
            .collect();
        if step == 5 {
            // Back 2 positions: the last 2 tokens fed, and this step's, in one feed.
            assert!(models[1].truncate(pos[1] - 2));
            assert!(!models[1].truncate(pos[1]), "truncate past the cache");
            let mut again = toks[1][toks[1].len() - 2..].to_vec();
            again.push(next[1][0]);
            feeds[1] = (again, pos[1] - 2);
        }
        let refs: Vec<(&[u32], usize)> = feeds.iter().map(|(t, p)| (&t[..], *p)).collect();
        let out = forward_batch(&mut models, &refs);
        for (s, r) in out.into_iter().enumerate() {
            toks[s].push(next[s][0]);
            got[s].push(r.unwrap());
            pos[s] += 1;
        }
        if let Some(mut snap) = snap {
            let l = snap.forward(&next[2], pos[2] - 1).unwrap();
            let want = got[2].last().unwrap();
            let d = common::max_abs_diff(&l, want);
            assert!(
                d <= TOL * common::scale(want),
                "{name}: the snapshot's step {step}: {d}"
            );
        }
    }
    for (s, (g, (wl, wt))) in got.iter().zip(&want).enumerate() {
        assert_close(&format!("{name} sequence {s}"), g, wl, exact);
        assert_eq!(&toks[s], wt, "{name} sequence {s}: greedy tokens");
    }
}

#[test]
fn smollm2_in_a_batch_of_mixed_lengths_equals_alone() {
    let Some(m) = common::load_smollm2(Backend::Candle) else {
        return;
    };
    mixed_lengths(&m, "smollm2", true);
}

#[test]
fn qwen2_in_a_batch_of_mixed_lengths_equals_alone() {
    let Some(m) = common::load_qwen2(Backend::Candle) else {
        return;
    };
    mixed_lengths(&m, "qwen2", false);
}

#[test]
fn gemma3_in_a_batch_of_mixed_lengths_equals_alone() {
    let Some(m) = common::load_gemma3(Backend::Candle) else {
        return;
    };
    mixed_lengths(&m, "gemma3", false);
}

/// Four threads, each its own greedy loop, joined by a `BatchGroup`: one pass for the
/// four prefills, then one per step for all four, and each thread's logits and tokens
/// as alone: the answers do not depend on B.
#[test]
fn threads_in_a_group_decode_together_and_equal_alone() {
    let Some(mut m) = common::load_smollm2(Backend::Candle) else {
        return;
    };
    let want: Vec<_> = PROMPTS.iter().map(|p| alone(&m, p)).collect();
    let group = BatchGroup::new();
    m.join_group(&group);
    let barrier = Arc::new(Barrier::new(PROMPTS.len()));
    let handles: Vec<_> = PROMPTS
        .iter()
        .map(|p| {
            let (m, group, barrier) = (m.share(), group.clone(), barrier.clone());
            std::thread::spawn(move || {
                let _member = group.join();
                barrier.wait();
                alone(&m, p)
            })
        })
        .collect();
    for (s, (h, (wl, wt))) in handles.into_iter().zip(&want).enumerate() {
        let (gl, gt) = h.join().unwrap();
        assert_close(&format!("thread {s}"), &gl, wl, true);
        assert_eq!(&gt, wt, "thread {s}: greedy tokens");
    }
    let st = group.stats();
    assert_eq!(st.max_batch, PROMPTS.len(), "{st:?}");
    assert_eq!(st.passes, 1 + STEPS as u64, "{st:?}");
}

/// A feed its model refuses fails alone, with its reason; the others in the pass run.
#[test]
fn a_refused_feed_fails_alone_and_its_pass_goes_on() {
    let Some(m) = common::load_smollm2(Backend::Candle) else {
        return;
    };
    let vocab = m.model.vocab_size() as u32;
    let ids: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| m.tokenizer.encode(p).unwrap())
        .collect();
    let mut models: Vec<Box<dyn LanguageModel>> = (0..4).map(|_| m.model.snapshot()).collect();
    let bad = [vocab + 5];
    let feeds: Vec<(&[u32], usize)> = vec![(&ids[0], 0), (&bad, 0), (&ids[2], 0), (&ids[1], 7)];
    let out = forward_batch(&mut models, &feeds);
    let e = out[1].as_ref().unwrap_err().to_string();
    assert!(e.contains("out of range"), "{e}");
    let e = out[3].as_ref().unwrap_err().to_string();
    assert!(e.contains("holds 0 positions"), "{e}");
    for s in [0, 2] {
        let want = m.model.snapshot().forward(&ids[s], 0).unwrap();
        let d = common::max_abs_diff(out[s].as_ref().unwrap(), &want);
        assert!(d <= TOL * common::scale(&want), "sequence {s}: {d}");
    }
}
