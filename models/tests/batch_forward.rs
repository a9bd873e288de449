//! Batched decoding on the real models: a sequence decoded inside a batch gets the
//! logits it gets alone. formwork's CPU model file computes each token's row with the
//! same arithmetic whatever shares its pass, so the stated tolerance is zero: the
//! logits are equal bit for bit, and so are the greedy tokens.
//!
//! Checked for every registry model, all three on formwork's CPU file (SmolLM2, Qwen2.5
//! and Gemma 3):
//! - a batch of mixed lengths (a short prompt, a long one, a medium one, prefilled in
//!   one pass) then greedy decoding step by step in one pass per step, against each
//!   sequence alone;
//! - the same through a [`BatchGroup`]: one thread per sequence, each running its own
//!   loop, the group joining their forwards;
//! - a feed its model refuses fails alone; the others in its pass are unharmed.
//!
//! Needs the models fetched (`formwork models fetch smollm2-135m`,
//! `qwen2.5-coder-0.5b` and `gemma3-270m`, or `FORMWORK_HOME`); without them each test prints
//! `SKIPPED:` and returns.

mod common;

use std::sync::{Arc, Barrier};

use formwork_models::group::BatchGroup;
use formwork_models::runtime::{forward_batch, Backend, LanguageModel, LoadedModel};

const PROMPTS: [&str; 3] = [
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou extract facts as JSON.<|im_end|>\n<|im_start|>user\n\
The Eiffel Tower, completed in 1889 for the World's Fair in Paris, is 330 metres tall and was \
designed by the engineering firm of Gustave Eiffel. It was the tallest man-made structure in the \
world until the Chrysler Building in New York was finished in 1930. Give its name, city, year and \
height as JSON.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nBook a table for four at Luigi's tomorrow at 7pm.<|im_end|>\n<|im_start|>assistant\n{\"",
];

const STEPS: usize = 12;

/// The logits after the prompt and after each of `STEPS` greedy tokens, alone.
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

fn assert_equal(what: &str, got: &[Vec<f32>], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len(), "{what}: steps");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = common::max_abs_diff(g, w);
        assert!(d == 0.0, "{what}: step {i}: max |Δlogit| {d} (tolerance 0)");
    }
}

fn mixed_lengths(m: &LoadedModel, name: &str) {
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
    let first: Vec<Vec<f32>> = forward_batch(&mut models, &feeds)
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let mut got: Vec<Vec<Vec<f32>>> = first.into_iter().map(|l| vec![l]).collect();
    let mut toks: Vec<Vec<u32>> = vec![Vec::new(); PROMPTS.len()];
    let mut pos: Vec<usize> = ids.iter().map(|t| t.len()).collect();
    for _ in 0..STEPS {
        let next: Vec<[u32; 1]> = got
            .iter()
            .map(|l| [common::argmax(l.last().unwrap())])
            .collect();
        let feeds: Vec<(&[u32], usize)> =
            next.iter().zip(&pos).map(|(t, &p)| (&t[..], p)).collect();
        let out = forward_batch(&mut models, &feeds);
        for (s, r) in out.into_iter().enumerate() {
            toks[s].push(next[s][0]);
            got[s].push(r.unwrap());
            pos[s] += 1;
        }
    }
    for (s, (g, (wl, wt))) in got.iter().zip(&want).enumerate() {
        assert_equal(&format!("{name} sequence {s}"), g, wl);
        assert_eq!(&toks[s], wt, "{name} sequence {s}: greedy tokens");
    }
}

#[test]
fn smollm2_in_a_batch_of_mixed_lengths_equals_alone() {
    let Some(m) = common::load_smollm2(Backend::Formwork) else {
        return;
    };
    mixed_lengths(&m, "smollm2");
}

#[test]
fn qwen2_in_a_batch_of_mixed_lengths_equals_alone() {
    let Some(m) = common::load_qwen2(Backend::Formwork) else {
        return;
    };
    mixed_lengths(&m, "qwen2");
}

#[test]
fn gemma3_in_a_batch_of_mixed_lengths_equals_alone() {
    let Some(m) = common::load_gemma3(Backend::Formwork) else {
        return;
    };
    mixed_lengths(&m, "gemma3");
}

#[test]
fn threads_in_a_group_decode_together_and_equal_alone() {
    let Some(m) = common::load_smollm2(Backend::Formwork) else {
        return;
    };
    let want: Vec<_> = PROMPTS.iter().map(|p| alone(&m, p)).collect();
    let group = BatchGroup::new();
    let mut m = m;
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
        assert_equal(&format!("thread {s}"), &gl, wl);
        assert_eq!(&gt, wt, "thread {s}: greedy tokens");
    }
    let st = group.stats();
    // One pass for the three prefills, then one per step for all three.
    assert_eq!(st.max_batch, PROMPTS.len(), "{st:?}");
    assert_eq!(st.passes, 1 + STEPS as u64, "{st:?}");
}

#[test]
fn a_refused_feed_fails_alone_and_its_pass_goes_on() {
    let Some(m) = common::load_smollm2(Backend::Formwork) else {
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
    // Position 7 of an empty cache.
    let e = out[3].as_ref().unwrap_err().to_string();
    assert!(e.contains("holds 0 positions"), "{e}");
    for s in [0, 2] {
        let want = m.model.snapshot().forward(&ids[s], 0).unwrap();
        assert_eq!(
            common::max_abs_diff(out[s].as_ref().unwrap(), &want),
            0.0,
            "sequence {s}"
        );
    }
}
