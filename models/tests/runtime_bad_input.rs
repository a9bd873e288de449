//! Each bad input gives one line that names the file or field and the fix, never a panic.
//! The bad files are written here, into a temp dir, with candle's GGUF writer.

use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use formwork_models::runtime::{load, load_file, DeviceChoice, LoadOptions};
use formwork_models::ModelError;

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("formwork-bad-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A small GGUF with the given metadata and one 64x32 Q8_0 tensor.
fn write_gguf(path: &Path, metadata: &[(&str, Value)]) {
    let t = Tensor::arange(0f32, 64.0 * 32.0, &Device::Cpu)
        .unwrap()
        .reshape((64, 32))
        .unwrap();
    let q = QTensor::quantize(&t, GgmlDType::Q8_0).unwrap();
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut f, &md, &[("token_embd.weight", &q)]).unwrap();
}

fn load_err(path: &Path) -> String {
    let err = load_file(
        path,
        "test",
        LoadOptions {
            device: DeviceChoice::Cpu,
            requantize: true,
            ..LoadOptions::default()
        },
    )
    .err()
    .expect("loading a bad file must fail");
    let msg = err.to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    msg
}

#[test]
fn missing_file_names_the_path_and_the_fix() {
    let dir = temp_dir("missing");
    let path = dir.join("nope.gguf");
    let msg = load(path.to_str().unwrap(), DeviceChoice::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("nope.gguf") && msg.contains("no such file"),
        "{msg}"
    );
    let msg = load_err(&path);
    assert!(
        msg.contains("nope.gguf") && msg.contains("no such file"),
        "{msg}"
    );
}

#[test]
fn not_a_gguf_names_the_magic() {
    let dir = temp_dir("magic");
    let path = dir.join("model.gguf");
    std::fs::write(&path, b"{\"not\": \"a model\"} and some more bytes").unwrap();
    let msg = load_err(&path);
    assert!(
        msg.contains("model.gguf") && msg.contains("not a GGUF file"),
        "{msg}"
    );
    assert!(
        msg.contains("7b, 22, 6e, 6f"),
        "shows the bytes found: {msg}"
    );

    std::fs::write(&path, b"GG").unwrap();
    let msg = load_err(&path);
    assert!(msg.contains("2 bytes"), "{msg}");
}

#[test]
fn truncated_header_and_truncated_data_are_reported() {
    let dir = temp_dir("trunc");
    let whole = dir.join("whole.gguf");
    write_gguf(
        &whole,
        &[("general.architecture", Value::String("llama".into()))],
    );
    let bytes = std::fs::read(&whole).unwrap();

    // Cut inside the tensor data: the header parses, the last tensor does not fit.
    let cut = dir.join("cut-data.gguf");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();
    let msg = load_err(&cut);
    assert!(
        msg.contains("cut-data.gguf") && msg.contains("truncated"),
        "{msg}"
    );
    assert!(msg.contains("token_embd.weight"), "names the tensor: {msg}");
    assert!(
        msg.contains(&format!("{} bytes", bytes.len() - 100)),
        "{msg}"
    );

    // Cut inside the header.
    let cut = dir.join("cut-header.gguf");
    std::fs::write(&cut, &bytes[..40]).unwrap();
    let msg = load_err(&cut);
    assert!(
        msg.contains("cut-header.gguf") && msg.contains("truncated or corrupt"),
        "{msg}"
    );
}

#[test]
fn unsupported_architecture_is_named() {
    let dir = temp_dir("arch");
    let path = dir.join("mamba.gguf");
    write_gguf(
        &path,
        &[("general.architecture", Value::String("mamba".into()))],
    );
    let err = load_file(
        &path,
        "t",
        LoadOptions {
            device: DeviceChoice::Cpu,
            requantize: true,
            ..LoadOptions::default()
        },
    )
    .err()
    .unwrap();
    assert!(
        matches!(err, ModelError::UnsupportedArch { ref arch, .. } if arch == "mamba"),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("`mamba`") && msg.contains("mamba.gguf"),
        "{msg}"
    );

    let path = dir.join("noarch.gguf");
    write_gguf(&path, &[("general.name", Value::String("x".into()))]);
    let msg = load_err(&path);
    assert!(
        msg.contains("general.architecture") && msg.contains("noarch.gguf"),
        "{msg}"
    );
}

#[test]
fn missing_tokenizer_metadata_names_the_key() {
    let dir = temp_dir("tok");
    let path = dir.join("notok.gguf");
    write_gguf(
        &path,
        &[("general.architecture", Value::String("llama".into()))],
    );
    let msg = load_err(&path);
    assert!(
        msg.contains("notok.gguf") && msg.contains("tokenizer.ggml."),
        "{msg}"
    );
}

#[test]
fn unknown_model_name_lists_the_known_ones() {
    let err = load("no-such-model", DeviceChoice::Cpu).err().unwrap();
    assert!(matches!(err, ModelError::UnknownModel { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("no-such-model") && msg.contains("smollm2-135m"),
        "{msg}"
    );
}

#[test]
fn unknown_device_is_an_error() {
    let err = "tpu".parse::<DeviceChoice>().err().unwrap().to_string();
    assert!(err.contains("tpu") && err.contains("cpu"), "{err}");
    assert_eq!("CPU".parse::<DeviceChoice>().unwrap(), DeviceChoice::Cpu);
    #[cfg(not(feature = "cuda"))]
    {
        let err = DeviceChoice::Cuda.device().err().unwrap().to_string();
        assert!(err.contains("--features cuda"), "{err}");
    }
}

/// SmolLM2's GGUF written again without `drop_tensor` and without the metadata keys in
/// `drop_keys`; None when SmolLM2 is absent.
fn smollm2_without(tag: &str, drop_tensor: Option<&str>, drop_keys: &[&str]) -> Option<PathBuf> {
    let src = formwork_models::registry::model_path(
        formwork_models::registry::lookup("smollm2-135m").unwrap(),
    );
    if !src.is_file() {
        eprintln!(
            "SKIPPED: {} is absent; run `formwork models fetch smollm2-135m`",
            src.display()
        );
        return None;
    }
    let mut f = std::fs::File::open(&src).unwrap();
    let ct = gguf_file::Content::read(&mut f).unwrap();
    let mut names: Vec<&String> = ct.tensor_infos.keys().collect();
    names.sort();
    let tensors: Vec<(String, QTensor)> = names
        .into_iter()
        .filter(|n| Some(n.as_str()) != drop_tensor)
        .map(|n| (n.clone(), ct.tensor(&mut f, n, &Device::Cpu).unwrap()))
        .collect();
    let md: Vec<(&str, &Value)> = ct
        .metadata
        .iter()
        .filter(|(k, _)| !drop_keys.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let t: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, q)| (n.as_str(), q)).collect();
    let path = temp_dir(tag).join("model.gguf");
    let mut out = std::fs::File::create(&path).unwrap();
    gguf_file::write(&mut out, &md, &t).unwrap();
    Some(path)
}

/// On the model graph (candle's path, what GPUs run), a file it cannot run is refused
/// in one line that names the missing tensor or key.
#[test]
fn graph_refusals_name_the_tensor_or_key() {
    let graph = LoadOptions {
        device: DeviceChoice::Cpu,
        backend: formwork_models::runtime::Backend::Candle,
        ..LoadOptions::default()
    };
    let cases = [
        (
            "graph-tensor",
            Some("blk.3.ffn_down.weight"),
            &[][..],
            "blk.3.ffn_down.weight",
        ),
        (
            "graph-key",
            None,
            &["llama.attention.head_count"][..],
            "llama.attention.head_count",
        ),
    ];
    for (tag, tensor, keys, want) in cases {
        let Some(path) = smollm2_without(tag, tensor, keys) else {
            return;
        };
        let msg = load_file(&path, "test", graph)
            .err()
            .expect("the graph must refuse it")
            .to_string();
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
        assert!(!msg.contains('\n'), "one line: {msg}");
        assert!(msg.contains(want), "{tag}: {msg}");
    }
}
