//! `synth`: a GGUF shaped like SmolLM2 with random weights, from SmolLM2's header alone
//! (what scripts/gpu-check writes on a machine the model file cannot reach).

mod common;

use std::fs::File;

use candle_core::quantized::gguf_file;
use formwork_models::registry;
use formwork_models::runtime::{load_file, DeviceChoice, LoadOptions};
use formwork_models::synth::{write_header, write_like};

#[test]
fn synth_from_a_header_has_the_shapes_and_runs() {
    if !common::smollm2_present() {
        return;
    }
    let real = registry::model_path(registry::lookup("smollm2-135m").unwrap());
    let dir = std::env::temp_dir().join(format!("formwork-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let header = dir.join("smollm2.header.gguf");
    let n = write_header(&real, &header).unwrap();
    let real_len = std::fs::metadata(&real).unwrap().len();
    assert_eq!(std::fs::metadata(&header).unwrap().len(), n);
    assert!(
        n > 1_000_000 && n < real_len / 10,
        "header {n} of {real_len} bytes"
    );

    let synth = dir.join("smollm2.synth.gguf");
    let summary = write_like(&header, &synth, 7).unwrap();
    let read = |p: &std::path::Path| gguf_file::Content::read(&mut File::open(p).unwrap()).unwrap();
    let (a, b) = (read(&real), read(&synth));
    assert_eq!(summary.tensors, a.tensor_infos.len());
    assert_eq!(a.tensor_infos.len(), b.tensor_infos.len());
    for (name, info) in &a.tensor_infos {
        let other = &b.tensor_infos[name];
        assert_eq!(info.shape, other.shape, "{name}");
        assert_eq!(info.ggml_dtype, other.ggml_dtype, "{name}");
    }
    for key in a.metadata.keys().filter(|k| *k != "general.alignment") {
        assert!(b.metadata.contains_key(key), "{key}");
    }
    // Within 1% of the real file's size: the same tensors, the same types.
    let synth_len = std::fs::metadata(&synth).unwrap().len();
    assert_eq!(summary.bytes, synth_len);
    assert!(
        synth_len.abs_diff(real_len) < real_len / 100,
        "{synth_len} against {real_len}"
    );

    // It loads with the real tokenizer and gives finite logits that depend on the input.
    let mut loaded = load_file(
        &synth,
        "synth",
        LoadOptions {
            device: DeviceChoice::Cpu,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let ids = loaded
        .tokenizer
        .encode("The order is for 12 pieces.")
        .unwrap();
    let x = loaded.model.forward(&ids, 0).unwrap();
    assert_eq!(x.len(), 49152);
    assert!(x.iter().all(|v| v.is_finite()));
    let y = loaded.model.forward(&ids[..3], 0).unwrap();
    assert!(common::max_abs_diff(&x, &y) > 1e-3);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The 7-8B families written for the decode runs of docs/speed.md load into formwork's
/// CPU file, one layer deep, with Llama 3.1's RoPE factors and Qwen2's q, k and v biases
/// in the file, and the logits are finite and depend on the input. With a 32k
/// vocabulary, so the file stays small.
#[test]
fn llama_3_1_8b_and_qwen2_5_7b_shapes_load_and_run() {
    use formwork_models::synth::{family, write_family, QType};
    let Some(vocab_dir) = common::llamacpp_vocab_dir() else {
        return;
    };
    let vocab = vocab_dir.join("ggml-vocab-llama-spm.gguf");
    let dir = std::env::temp_dir().join(format!("formwork-synth-fam-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, arch, extra) in [
        ("llama-3.1-8b", "llama", "rope_freqs.weight"),
        ("qwen2.5-7b", "qwen2", "blk.0.attn_q.bias"),
    ] {
        let fam = family(name).unwrap_or_else(|| panic!("{name} is not a family"));
        assert_eq!(fam.arch, arch);
        let out = dir.join(format!("{name}.gguf"));
        write_family(fam, &vocab, Some(1), QType::Q8_0, &out, 1).unwrap();
        let ct = gguf_file::Content::read(&mut File::open(&out).unwrap()).unwrap();
        assert!(ct.tensor_infos.contains_key(extra), "{name}: no {extra}");
        let mut m = load_file(
            &out,
            name,
            LoadOptions {
                device: DeviceChoice::Cpu,
                ..LoadOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let a = m.model.forward(&[1, 450, 3001], 0).unwrap();
        m.model.clear_kv_cache();
        let b = m.model.forward(&[1, 450, 3002], 0).unwrap();
        assert!(a.iter().all(|v| v.is_finite()), "{name}");
        assert!(a != b, "{name}: the logits do not depend on the input");
    }
    std::fs::remove_dir_all(&dir).ok();
}
