//! The chunked prefill on the real model (smollm2-135m, on the CPU): a prompt of several
//! chunks fed [`PREFILL_CHUNK`] tokens at a time gives the logits of one pass over it,
//! exactly, and leaves the same KV cache (the next token's logits agree too). A `go` that says stop ends the
//! prefill within one chunk.
//!
//! SKIPPED (counted as passed by cargo, but printed) when smollm2-135m is not fetched.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use formwork::engine::prefix::{forward_chunked, PREFILL_CHUNK};
use formwork_models::runtime::{DeviceChoice, LanguageModel};

/// The largest difference between two logit vectors of one length.
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn argmax(v: &[f32]) -> u32 {
    (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap() as u32
}

#[test]
fn chunked_prefill_gives_the_logits_of_one_pass() {
    if common::home_with_smollm2().is_none() {
        return;
    }
    let mut loaded = formwork::load_model("smollm2-135m", DeviceChoice::Cpu).unwrap();
    let text: String = (0..70)
        .map(|i| format!("Entry {i}: the keeper of lighthouse {} logged {} ships. ", i * 7, i * 3))
        .collect();
    let ids = loaded.tokenizer.encode(&text).unwrap();
    assert!(ids.len() > 2 * PREFILL_CHUNK + 1, "{} tokens", ids.len());
    let model: &mut dyn LanguageModel = loaded.model.as_mut();

    let whole = model.forward(&ids, 0).unwrap();
    let next = argmax(&whole);
    let after_whole = model.forward(&[next], ids.len()).unwrap();

    for chunk in [PREFILL_CHUNK, 100] {
        let asked = AtomicUsize::new(0);
        let go = || {
            asked.fetch_add(1, Ordering::SeqCst);
            true
        };
        let chunked = forward_chunked(model, &ids, 0, chunk, &go)
            .unwrap()
            .expect("never stopped");
        assert_eq!(asked.load(Ordering::SeqCst), ids.len().div_ceil(chunk));
        // Equal, not close: on the CPU each row's sums run in the same order whatever
        // the rows around it (measured: a difference of 0 for 256 and 100).
        assert_eq!(max_diff(&whole, &chunked), 0.0, "chunk {chunk}");
        let after = model.forward(&[next], ids.len()).unwrap();
        assert_eq!(max_diff(&after_whole, &after), 0.0, "chunk {chunk}: next token");
    }

    // Stopped after the first chunk: no logits, and one chunk's question more.
    let asked = AtomicUsize::new(0);
    let go = || asked.fetch_add(1, Ordering::SeqCst) == 0;
    let stopped = forward_chunked(model, &ids, 0, PREFILL_CHUNK, &go).unwrap();
    assert!(stopped.is_none());
    assert_eq!(asked.load(Ordering::SeqCst), 2);
    // The cache holds the first chunk: going on from there gives the whole again.
    let rest = forward_chunked(model, &ids, PREFILL_CHUNK, PREFILL_CHUNK, &|| true)
        .unwrap()
        .unwrap();
    assert_eq!(max_diff(&whole, &rest), 0.0, "resumed");
}
