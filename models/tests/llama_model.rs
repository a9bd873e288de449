//! formwork's llama model file (Q4_1 kernels, in-place KV cache) against candle's
//! `quantized_llama` on the real SmolLM2-135M-Instruct Q4_1 GGUF.
//!
//! Needs the model fetched (`formwork models fetch smollm2-135m`, or `FORMWORK_HOME`);
//! without it each test prints `SKIPPED:` and returns.

mod common;

use std::sync::{Mutex, MutexGuard, OnceLock};

use candle_core::quantized::gguf_file;
use candle_core::Device;
use formwork_models::llama::ModelWeights;
use formwork_models::quant::Isa;
use formwork_models::runtime::{load_with, Backend, DeviceChoice, LoadOptions, LoadedModel};

const TEXT: &str = "<|im_start|>system\nYou extract facts as JSON.<|im_end|>\n<|im_start|>user\n\
The Eiffel Tower, completed in 1889 for the World's Fair in Paris, is 330 metres tall and was \
designed by the engineering firm of Gustave Eiffel. It was the tallest man-made structure in the \
world until the Chrysler Building in New York was finished in 1930. Give its name, city, year and \
height.<|im_end|>\n<|im_start|>assistant\n{\"name\": \"Eiffel Tower\", \"city\": \"Paris\", \"year\": 1889, \
\"height_m\": 330, \"designer\": \"Gustave Eiffel\", \"tallest_until\": 1930}<|im_end|>\n";

fn load(backend: Backend) -> Option<LoadedModel> {
    if !common::smollm2_present() {
        return None;
    }
    let options = LoadOptions {
        device: DeviceChoice::Cpu,
        backend,
        ..LoadOptions::default()
    };
    Some(load_with("smollm2-135m", options).expect("load smollm2"))
}

/// formwork's own model, loaded once; tests take snapshots of it.
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

/// Teacher-forced over the last 64 positions of a real prompt and answer: formwork's
/// Q4_1 kernels and candle's path (Q4_1 requantised to Q8_0) pick the same next token.
#[test]
fn teacher_forced_argmax_agrees_with_candle() {
    let Some(m) = ours() else { return };
    let candle = load(Backend::Candle).unwrap();
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
    eprintln!("argmax agreement {agree}/{steps}, largest logit difference {worst:.3}");
    assert!(agree >= steps - 3, "argmax agreement {agree}/{steps}");
}

/// One prefill, prefills in chunks of 7, and one token at a time give the same logits.
#[test]
fn chunked_prefill_equals_full_prefill() {
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
        assert!(d <= 1e-4, "chunks of {chunk}: largest difference {d}");
        assert_eq!(common::argmax(&full), common::argmax(&last));
    }
}

/// A snapshot keeps its cache while the original decodes on, and the original is unharmed.
#[test]
fn snapshots_are_independent() {
    let Some(m) = ours() else { return };
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
    assert!(common::max_abs_diff(&from_snap, &want) <= 1e-4);
    // And the original's cache was not touched by the snapshot's decoding.
    let next = base.forward(&rest[50..51], pos).unwrap();
    let mut seq: Vec<u32> = prefix.to_vec();
    seq.extend_from_slice(&rest[20..51]);
    let want = fresh.forward(&seq, 0).unwrap();
    assert!(common::max_abs_diff(&next, &want) <= 1e-4);
}

/// The portable scalar kernel and the SIMD ones this CPU runs agree end to end.
#[test]
fn scalar_and_simd_kernels_agree() {
    let Some(m) = ours() else { return };
    let ids = text_ids(&m);
    let ids = &ids[..40];
    let load = |isa| {
        let mut f = std::fs::File::open(&m.path).unwrap();
        let ct = gguf_file::Content::read(&mut f).unwrap();
        ModelWeights::from_gguf_with_isa(ct, &mut f, &Device::Cpu, isa).unwrap()
    };
    let mut scalar = load(Isa::Scalar);
    let want = scalar.forward_tokens(ids, 0).unwrap();
    for isa in Isa::available() {
        let mut model = load(isa);
        let got = model.forward_tokens(ids, 0).unwrap();
        let d = common::max_abs_diff(&want, &got);
        eprintln!("{isa:?}: largest difference from scalar {d}");
        // The integer sums are exact; only the order of the f32 sums differs, and a flipped
        // 8-bit rounding of an activation grows over 30 layers. Logits span about 30.
        assert!(d <= 1.0, "{isa:?}: {d}");
        assert_eq!(common::argmax(&want), common::argmax(&got), "{isa:?}");
    }
}

/// Bad input is an error with its numbers, never a panic, and leaves the model usable.
#[test]
fn bad_input_is_an_error() {
    let Some(m) = ours() else { return };
    let mut model = m.model.snapshot();
    let e = model.forward(&[49_152], 0).unwrap_err().to_string();
    assert!(e.contains("49152"), "{e}");
    assert!(model.forward(&[], 0).is_err());
    model.forward(&[1, 2, 3], 0).unwrap();
    let e = model.forward(&[4], 7).unwrap_err().to_string();
    assert!(e.contains('3'), "{e}");
    model.forward(&[4], 3).unwrap();
    let e = model.forward(&[4], 9_000).unwrap_err().to_string();
    assert!(e.contains("context"), "{e}");
}
