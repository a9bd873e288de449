//! The runtime on the real default model (SmolLM2-135M-Instruct Q4_1), fetched by
//! `formwork models fetch`. Skipped, with a note, when the model is absent.

mod common;

use std::sync::{Mutex, OnceLock};

use formwork_models::runtime::{
    load_with, Backend, DeviceChoice, LanguageModel, LoadOptions, LoadedModel,
};

/// The model loaded once for this file (requantised, CPU), or None when it is absent.
fn model() -> Option<&'static Mutex<LoadedModel>> {
    static MODEL: OnceLock<Option<Mutex<LoadedModel>>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            if !common::smollm2_present() {
                return None;
            }
            let options = LoadOptions {
                device: DeviceChoice::Cpu,
                ..LoadOptions::default()
            };
            Some(Mutex::new(
                load_with("smollm2-135m", options).expect("load smollm2"),
            ))
        })
        .as_ref()
}

fn prompt_ids(m: &LoadedModel) -> Vec<u32> {
    m.tokenizer
        .encode(
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        )
        .unwrap()
}

#[test]
fn loads_with_its_tokenizer_and_metadata() {
    let Some(m) = model() else { return };
    let m = m.lock().unwrap();
    assert_eq!(m.arch, "llama");
    assert_eq!(m.name, "smollm2-135m");
    assert_eq!(m.model.vocab_size(), 49152);
    assert_eq!(m.tokenizer.vocab_size(), 49152);
    // Both model files run the file's 8192 positions.
    assert_eq!(m.context_length, 8192);
    assert!(m.tokenizer.chat_template().is_some());
}

/// A share (what each batch worker and server thread gets) has its own KV state but the
/// same tokenizer, not a copy of it (a 152k vocabulary's is about 60 MB).
#[test]
fn a_share_uses_the_same_tokenizer() {
    let Some(m) = model() else { return };
    let m = m.lock().unwrap();
    let s = m.share();
    assert!(std::sync::Arc::ptr_eq(&m.tokenizer, &s.tokenizer));
    assert_eq!(s.tokenizer.vocab_size(), 49152);
}

/// Chunked prefill and one-at-a-time decoding must agree: a multi-token forward at
/// index_pos > 0 (prefix reuse, jump-forward) sees the same cache as single steps.
#[test]
fn multi_token_forward_at_nonzero_pos_matches_single_steps() {
    let Some(m) = model() else { return };
    let mut m = m.lock().unwrap();
    let ids = prompt_ids(&m);
    assert!(ids.len() > 12, "{} ids", ids.len());
    let split = 7;

    // Whole prompt in one forward.
    let whole = m.model.forward(&ids, 0).unwrap();
    // A prefix, then the rest as one multi-token forward at pos = split.
    m.model.forward(&ids[..split], 0).unwrap();
    let chunked = m.model.forward(&ids[split..], split).unwrap();
    // A prefix, then the rest one token at a time.
    let mut single = m.model.forward(&ids[..split], 0).unwrap();
    for (i, &t) in ids[split..].iter().enumerate() {
        single = m.model.forward(&[t], split + i).unwrap();
    }
    assert_eq!(whole.len(), 49152);
    assert_eq!(common::argmax(&whole), common::argmax(&chunked));
    assert_eq!(common::argmax(&whole), common::argmax(&single));
    let max_diff = whole
        .iter()
        .zip(&single)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(max_diff < 1e-2, "logits differ by {max_diff}");
    // The greedy answer to the prompt starts with "The" (or "Paris").
    let first = m.tokenizer.decode(&[common::argmax(&whole)]).unwrap();
    assert!(
        first.contains("The") || first.contains("Paris"),
        "first token {first:?}"
    );
}

/// A snapshot carries the KV cache and is independent of the original afterwards.
#[test]
fn snapshot_keeps_the_prefix_cache() {
    let Some(m) = model() else { return };
    let mut m = m.lock().unwrap();
    let ids = prompt_ids(&m);
    let split = ids.len() - 3;
    let reference = m.model.forward(&ids, 0).unwrap();

    m.model.forward(&ids[..split], 0).unwrap();
    let mut snap = m.model.snapshot();
    // Move the original on with other tokens; the snapshot must not see them.
    m.model.forward(&[28, 29, 30], split).unwrap();
    let from_snap = snap.forward(&ids[split..], split).unwrap();
    assert_eq!(common::argmax(&reference), common::argmax(&from_snap));
    // And a second snapshot of the snapshot, used twice, gives the same answer twice.
    let mut again = snap.snapshot();
    let a = again.forward(&[ids[ids.len() - 1]], ids.len()).unwrap();
    let b = snap.forward(&[ids[ids.len() - 1]], ids.len()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn forward_rejects_a_position_that_skips_the_cache() {
    let Some(m) = model() else { return };
    let mut m = m.lock().unwrap();
    m.model.forward(&[1, 2, 3], 0).unwrap();
    let err = m.model.forward(&[4], 5).err().unwrap().to_string();
    assert!(
        err.contains("position 5") && err.contains("holds 3"),
        "{err}"
    );
    let err = m.model.forward(&[], 3).err().unwrap().to_string();
    assert!(err.contains("no tokens"), "{err}");
    let ctx = m.context_length;
    let err = m.model.forward(&[1, 2], ctx - 1).err().unwrap().to_string();
    assert!(err.contains(&format!("context length {ctx}")), "{err}");
    let err = m.model.forward(&[49152], 0).err().unwrap().to_string();
    assert!(err.contains("49152"), "{err}");
    m.model.clear_kv_cache();
    m.model.forward(&[4], 0).unwrap();
}

/// Requantising Q4_1 to Q8_0 is near-lossless: the greedy continuation is unchanged.
#[test]
fn requantised_model_agrees_with_the_original() {
    if model().is_none() {
        return;
    }
    // The model graph (candle's path) both ways: formwork's own llama model never
    // requantises Q4_1.
    let options = LoadOptions {
        device: DeviceChoice::Cpu,
        requantize: false,
        backend: Backend::Candle,
        ..LoadOptions::default()
    };
    let mut orig = load_with("smollm2-135m", options).unwrap();
    let mut m = load_with(
        "smollm2-135m",
        LoadOptions {
            requantize: true,
            ..options
        },
    )
    .unwrap();
    let ids = prompt_ids(&m);
    let greedy = |model: &mut Box<dyn LanguageModel>| {
        let mut out = Vec::new();
        let mut logits = model.forward(&ids, 0).unwrap();
        for i in 0..8 {
            let t = common::argmax(&logits);
            out.push(t);
            logits = model.forward(&[t], ids.len() + i).unwrap();
        }
        out
    };
    let a = greedy(&mut m.model);
    let b = greedy(&mut orig.model);
    assert_eq!(
        a,
        b,
        "{:?} vs {:?}",
        m.tokenizer.decode(&a),
        orig.tokenizer.decode(&b)
    );
}
