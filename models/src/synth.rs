//! A GGUF file shaped like another one, with random weights: the same metadata (tokenizer
//! and chat template included), the same tensor names, shapes and quantisation types.
//!
//! For a machine the real model file cannot reach (scripts/gpu-check: the GPU machine
//! takes 64 MiB of files, SmolLM2-135M is 98 MB). The header of the real file is a few MB;
//! from it [`write_like`] writes a model that costs the same per token on any device, so
//! speeds can be measured and GPU logits compared with CPU logits on the same weights.
//! Its text is noise.
//!
//! The weights: uniform in `[-a, a]` with `a = sqrt(3 / cols)` for a matrix of `cols`
//! columns (each output then has about unit variance), `1 ± 0.1` for vectors (norm weights
//! and biases), quantised to the tensor's type. A fixed seed gives the same file.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use candle_core::quantized::{gguf_file, QTensor};
use candle_core::{Device, Tensor};

use crate::{ModelError, Result};

/// What [`write_like`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthSummary {
    pub tensors: usize,
    pub parameters: usize,
    pub bytes: u64,
}

fn file_err(path: &Path, msg: String) -> ModelError {
    ModelError::File {
        path: path.to_path_buf(),
        msg,
    }
}

fn read_header(like: &Path) -> Result<(gguf_file::Content, File)> {
    let file = File::open(like).map_err(|e| file_err(like, format!("cannot open: {e}")))?;
    let mut reader = BufReader::new(file);
    let content = gguf_file::Content::read(&mut reader).map_err(|e| {
        file_err(
            like,
            format!("the GGUF header cannot be read ({e}); pass a .gguf model file or its header"),
        )
    })?;
    Ok((content, reader.into_inner()))
}

/// Copy the header of `like` (metadata and tensor infos, no tensor data) to `out`:
/// what [`write_like`] needs, a few MB where the model is hundreds.
pub fn write_header(like: &Path, out: &Path) -> Result<u64> {
    let (content, mut file) = read_header(like)?;
    let n = content.tensor_data_offset;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| file_err(like, e.to_string()))?;
    let mut head = Vec::with_capacity(n as usize);
    file.take(n)
        .read_to_end(&mut head)
        .map_err(|e| file_err(like, e.to_string()))?;
    std::fs::write(out, &head).map_err(|e| file_err(out, format!("cannot write: {e}")))?;
    Ok(n)
}

/// xorshift64*: a small, seeded, dependency-free source of uniform floats.
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        // 24 random bits in [0, 1), then [-1, 1).
        ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// Write to `out` a GGUF with the metadata and tensor layout of `like` (a model file or
/// its header from [`write_header`]) and random weights (see the module doc).
pub fn write_like(like: &Path, out: &Path, seed: u64) -> Result<SynthSummary> {
    let (content, _) = read_header(like)?;
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors = Vec::with_capacity(names.len());
    let mut parameters = 0usize;
    for name in names {
        let info = &content.tensor_infos[name];
        let dims = info.shape.dims().to_vec();
        let n = info.shape.elem_count();
        parameters += n;
        let values: Vec<f32> = if dims.len() == 1 {
            (0..n).map(|_| 1.0 + 0.1 * rng.next_f32()).collect()
        } else {
            let cols = *dims.last().unwrap_or(&1) as f32;
            let a = (3.0 / cols).sqrt();
            (0..n).map(|_| a * rng.next_f32()).collect()
        };
        let t = Tensor::from_vec(values, dims.as_slice(), &Device::Cpu)?;
        let q = QTensor::quantize(&t, info.ggml_dtype).map_err(|e| {
            file_err(
                like,
                format!(
                    "tensor `{name}`: cannot write random {:?} weights of shape {dims:?}: {e}",
                    info.ggml_dtype
                ),
            )
        })?;
        tensors.push((name.as_str(), q));
    }
    // candle's writer aligns to 32 bytes, the GGUF default; a different alignment key
    // would misplace every tensor for a reader.
    let mut keys: Vec<&String> = content
        .metadata
        .keys()
        .filter(|k| k.as_str() != "general.alignment")
        .collect();
    keys.sort();
    let metadata: Vec<(&str, &gguf_file::Value)> = keys
        .iter()
        .map(|k| (k.as_str(), &content.metadata[*k]))
        .collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, q)| (*n, q)).collect();
    let file = File::create(out).map_err(|e| file_err(out, format!("cannot create: {e}")))?;
    let mut w = BufWriter::new(file);
    gguf_file::write(&mut w, &metadata, &refs)?;
    w.flush().map_err(|e| file_err(out, e.to_string()))?;
    let bytes = w
        .get_ref()
        .metadata()
        .map_err(|e| file_err(out, e.to_string()))?
        .len();
    Ok(SynthSummary {
        tensors: refs.len(),
        parameters,
        bytes,
    })
}
