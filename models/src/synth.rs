//! A GGUF file shaped like another one, with random weights: the same metadata (tokenizer
//! and chat template included), the same tensor names, shapes and quantisation types
//! ([`write_like`]); or shaped like a released model's config that no file here holds
//! ([`write_family`]: Llama 3.2 1B, Qwen3 0.6B, Mistral 7B, Gemma 2 2B, Phi-3.5-mini), with the tokenizer of a vocab-only GGUF,
//! for the parity tests against llama.cpp (models/tests/family_parity.rs).
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

use candle_core::quantized::ggml_file::qtensor_from_ggml;
use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use crate::{ModelError, Result};

/// Qwen/Qwen3-0.6B's chat template without its tools part: the think block, and an
/// empty one after the generation prompt when `enable_thinking` is false.
pub const QWEN3_TEMPLATE: &str = include_str!("qwen3_template.jinja");

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

/// Llama 3.1+ RoPE scaling (`rope_scaling` with `rope_type` `llama3` in the model's
/// config): each pair's angle is divided by a factor between 1 (short wavelengths) and
/// `factor` (wavelengths past `original_context / low_freq_factor`), which the GGUF
/// converter stores as `rope_freqs.weight`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Llama3Rope {
    pub factor: f32,
    pub low_freq_factor: f32,
    pub high_freq_factor: f32,
    pub original_context: usize,
}

impl Llama3Rope {
    /// One factor per pair of a head of `head_dim` values, as the converter computes them.
    pub fn factors(&self, base: f32, head_dim: usize) -> Vec<f32> {
        let low_wavelen = self.original_context as f64 / self.low_freq_factor as f64;
        let high_wavelen = self.original_context as f64 / self.high_freq_factor as f64;
        (0..head_dim)
            .step_by(2)
            .map(|i| {
                let freq = 1.0 / (base as f64).powf(i as f64 / head_dim as f64);
                let wavelen = 2.0 * std::f64::consts::PI / freq;
                let f = if wavelen < high_wavelen {
                    1.0
                } else if wavelen > low_wavelen {
                    self.factor as f64
                } else {
                    let smooth = (self.original_context as f64 / wavelen
                        - self.low_freq_factor as f64)
                        / (self.high_freq_factor - self.low_freq_factor) as f64;
                    1.0 / ((1.0 - smooth) / self.factor as f64 + smooth)
                };
                f as f32
            })
            .collect()
    }
}

/// The dimensions of a released model, for [`write_family`].
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// What `--family` calls it.
    pub name: &'static str,
    /// `general.architecture`.
    pub arch: &'static str,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub rope_theta: f32,
    pub rms_eps: f32,
    pub context: usize,
    pub llama3_rope: Option<Llama3Rope>,
    /// Per-head RMS norms of q and k (`attn_q_norm`, `attn_k_norm`).
    pub qk_norm: bool,
    /// Biases of q, k and v (`attn_q.bias`, ...: Qwen2).
    pub qkv_bias: bool,
    /// The output matrix is the embedding (no `output.weight`).
    pub tied: bool,
    /// Gemma 2: norms after attention and the feed-forward block (`post_attention_norm`,
    /// `post_ffw_norm`), and these keys: the sliding window of its local (even) layers,
    /// and the soft-caps of the attention scores and the logits.
    pub gemma2: Option<Gemma2>,
    /// Phi-3: fused `attn_qkv` and `ffn_up` (gate and up) matrices, LongRoPE factors.
    pub phi3: Option<Phi3>,
}

/// What [`write_family`] writes for Phi-3: one `attn_qkv.weight` (q, k, v rows) and one
/// `ffn_up.weight` (gate rows, then up rows) per layer; `rope_factors_long.weight` and
/// `rope_factors_short.weight`; `phi3.rope.scaling.original_context_length`,
/// `phi3.rope.scaling.attn_factor` (`sqrt(1 + ln(context / original) / ln(original))`,
/// as llama.cpp's converter computes it for `longrope`) and
/// `phi3.attention.sliding_window`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phi3 {
    pub original_context: usize,
    pub sliding_window: usize,
}

impl Phi3 {
    /// The long and short factors, one per pair of a head of `rope_dim` values: smooth
    /// ramps shaped like Phi-3.5-mini's (short from 1.0 to 2.5, long from 1.08 to 64), not
    /// its values, which no file here holds.
    pub fn factors(rope_dim: usize) -> [Vec<f32>; 2] {
        let n = rope_dim / 2;
        let t = |i: usize| i as f64 / (n.max(2) - 1) as f64;
        let long = (0..n)
            .map(|i| (1.08f64 * (64.0f64 / 1.08).powf(t(i).powf(1.5))) as f32)
            .collect();
        let short = (0..n).map(|i| (1.0 + 1.5 * t(i) * t(i)) as f32).collect();
        [long, short]
    }

    /// `phi3.rope.scaling.attn_factor` for a model of `context` positions.
    pub fn attn_factor(&self, context: usize) -> f32 {
        let scale = context as f64 / self.original_context as f64;
        if scale > 1.0 {
            (1.0 + scale.ln() / (self.original_context as f64).ln()).sqrt() as f32
        } else {
            1.0
        }
    }
}

/// The Gemma 2 keys [`write_family`] writes (`gemma2.attention.sliding_window`,
/// `gemma2.attn_logit_softcapping`, `gemma2.final_logit_softcapping`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemma2 {
    /// The released models have 4096; the synthesized file has 512, so that the
    /// parity test's 2,000-token prompt crosses it.
    pub sliding_window: usize,
    pub attn_softcap: f32,
    pub final_softcap: f32,
}

/// The families [`write_family`] writes: the configs of meta-llama/Llama-3.2-1B,
/// Qwen/Qwen3-0.6B, mistralai/Mistral-7B-v0.3 (v0.2's RoPE base; v0.1 had 10000),
/// meta-llama/Llama-3.1-8B, Qwen/Qwen2.5-7B (biases of q, k and v; its 152k vocabulary
/// comes with `--vocab`),
/// google/gemma-2-2b (its sliding window cut to 512), and microsoft/Phi-3.5-mini-instruct
/// (its RoPE factors shaped like the released ones, [`Phi3::factors`]).
pub const FAMILIES: &[Family] = &[
    Family {
        name: "llama-3.2-1b",
        arch: "llama",
        hidden: 2048,
        layers: 16,
        heads: 32,
        kv_heads: 8,
        head_dim: 64,
        ffn: 8192,
        rope_theta: 500_000.0,
        rms_eps: 1e-5,
        context: 131_072,
        llama3_rope: Some(Llama3Rope {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_context: 8192,
        }),
        qk_norm: false,
        qkv_bias: false,
        tied: true,
        gemma2: None,
        phi3: None,
    },
    Family {
        name: "qwen3-0.6b",
        arch: "qwen3",
        hidden: 1024,
        layers: 28,
        heads: 16,
        kv_heads: 8,
        head_dim: 128,
        ffn: 3072,
        rope_theta: 1_000_000.0,
        rms_eps: 1e-6,
        context: 40_960,
        llama3_rope: None,
        qk_norm: true,
        qkv_bias: false,
        tied: true,
        gemma2: None,
        phi3: None,
    },
    Family {
        name: "mistral-7b",
        arch: "llama",
        hidden: 4096,
        layers: 32,
        heads: 32,
        kv_heads: 8,
        head_dim: 128,
        ffn: 14336,
        rope_theta: 1_000_000.0,
        rms_eps: 1e-5,
        context: 32_768,
        llama3_rope: None,
        qk_norm: false,
        qkv_bias: false,
        tied: false,
        gemma2: None,
        phi3: None,
    },
    Family {
        name: "llama-3.1-8b",
        arch: "llama",
        hidden: 4096,
        layers: 32,
        heads: 32,
        kv_heads: 8,
        head_dim: 128,
        ffn: 14336,
        rope_theta: 500_000.0,
        rms_eps: 1e-5,
        context: 131_072,
        llama3_rope: Some(Llama3Rope {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_context: 8192,
        }),
        qk_norm: false,
        qkv_bias: false,
        tied: false,
        gemma2: None,
        phi3: None,
    },
    Family {
        name: "qwen2.5-7b",
        arch: "qwen2",
        hidden: 3584,
        layers: 28,
        heads: 28,
        kv_heads: 4,
        head_dim: 128,
        ffn: 18944,
        rope_theta: 1_000_000.0,
        rms_eps: 1e-6,
        context: 32_768,
        llama3_rope: None,
        qk_norm: false,
        qkv_bias: true,
        tied: false,
        gemma2: None,
        phi3: None,
    },
    Family {
        name: "gemma-2-2b",
        arch: "gemma2",
        hidden: 2304,
        layers: 26,
        heads: 8,
        kv_heads: 4,
        head_dim: 256,
        ffn: 9216,
        rope_theta: 10_000.0,
        rms_eps: 1e-6,
        context: 8192,
        llama3_rope: None,
        qk_norm: false,
        qkv_bias: false,
        tied: true,
        gemma2: Some(Gemma2 {
            sliding_window: 512,
            attn_softcap: 50.0,
            final_softcap: 30.0,
        }),
        phi3: None,
    },
    Family {
        name: "phi-3.5-mini",
        arch: "phi3",
        hidden: 3072,
        layers: 32,
        heads: 32,
        kv_heads: 32,
        head_dim: 96,
        ffn: 8192,
        rope_theta: 10_000.0,
        rms_eps: 1e-5,
        context: 131_072,
        llama3_rope: None,
        qk_norm: false,
        qkv_bias: false,
        tied: false,
        gemma2: None,
        phi3: Some(Phi3 {
            original_context: 4096,
            sliding_window: 262_144,
        }),
    },
];

/// The type of every matrix [`write_family`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QType {
    Q8_0,
    Q4K,
}

impl QType {
    /// `q8_0` or `q4_k`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "q8_0" => Some(Self::Q8_0),
            "q4_k" => Some(Self::Q4K),
            _ => None,
        }
    }

    fn dtype(self) -> GgmlDType {
        match self {
            Self::Q8_0 => GgmlDType::Q8_0,
            Self::Q4K => GgmlDType::Q4K,
        }
    }

    /// `general.file_type` (llama.cpp's `LLAMA_FTYPE_MOSTLY_Q8_0`, `_Q4_K_M`).
    fn file_type(self) -> u32 {
        match self {
            Self::Q8_0 => 7,
            Self::Q4K => 15,
        }
    }
}

/// The family `--family NAME` names.
pub fn family(name: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.name == name)
}

/// A random matrix of `rows x cols` in `dtype`, quantised a band of rows at a time (the
/// whole f32 matrix of a 128k-token embedding would be 1 GB).
fn random_matrix(
    rng: &mut Rng,
    rows: usize,
    cols: usize,
    dtype: GgmlDType,
) -> candle_core::Result<QTensor> {
    let a = (3.0 / cols as f32).sqrt();
    let band = (1 << 20) / cols.max(1) + 1;
    let mut bytes = Vec::with_capacity(rows * cols / dtype.block_size() * dtype.type_size());
    let mut r0 = 0;
    while r0 < rows {
        let n = band.min(rows - r0);
        let values: Vec<f32> = (0..n * cols).map(|_| a * rng.next_f32()).collect();
        let t = Tensor::from_vec(values, (n, cols), &Device::Cpu)?;
        bytes.extend_from_slice(&QTensor::quantize(&t, dtype)?.data()?);
        r0 += n;
    }
    qtensor_from_ggml(dtype, &bytes, vec![rows, cols], &Device::Cpu)
}

fn f32_vector(values: Vec<f32>) -> candle_core::Result<QTensor> {
    let n = values.len();
    QTensor::quantize(&Tensor::from_vec(values, n, &Device::Cpu)?, GgmlDType::F32)
}

/// Write to `out` a GGUF with the dimensions of `family` (its first `layers` layers, or all),
/// the tokenizer of `vocab` (every `tokenizer.*` key of a GGUF, such as llama.cpp's
/// vocab-only files; the embedding has one row per token), and random weights (the module
/// doc's distributions): matrices in `qtype`, norms and RoPE factors in f32.
pub fn write_family(
    family: &Family,
    vocab: &Path,
    layers: Option<usize>,
    qtype: QType,
    out: &Path,
    seed: u64,
) -> Result<SynthSummary> {
    let (file_type, qtype) = (qtype.file_type(), qtype.dtype());
    let (content, _) = read_header(vocab)?;
    let n_vocab = match content.metadata.get("tokenizer.ggml.tokens") {
        Some(gguf_file::Value::Array(a)) if !a.is_empty() => a.len(),
        _ => {
            return Err(file_err(
                vocab,
                "GGUF metadata `tokenizer.ggml.tokens` is missing or empty; pass a GGUF that carries a tokenizer".into(),
            ))
        }
    };
    let layers = layers.unwrap_or(family.layers);
    if layers == 0 || layers > family.layers {
        return Err(ModelError::Candle(candle_core::Error::Msg(format!(
            "--layers {layers}: {} has 1 to {} layers",
            family.name, family.layers
        ))));
    }
    let block = qtype.block_size();
    for cols in [family.hidden, family.heads * family.head_dim, family.ffn] {
        if cols % block != 0 {
            return Err(ModelError::Candle(candle_core::Error::Msg(format!(
                "{qtype:?} needs rows of a multiple of {block} values, and {} has rows of {cols}",
                family.name
            ))));
        }
    }
    let (h, q, kv, ffn) = (
        family.hidden,
        family.heads * family.head_dim,
        family.kv_heads * family.head_dim,
        family.ffn,
    );
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let norm =
        |rng: &mut Rng, n: usize| f32_vector((0..n).map(|_| 1.0 + 0.1 * rng.next_f32()).collect());
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    tensors.push((
        "token_embd.weight".into(),
        random_matrix(&mut rng, n_vocab, h, qtype)?,
    ));
    if !family.tied {
        tensors.push((
            "output.weight".into(),
            random_matrix(&mut rng, n_vocab, h, qtype)?,
        ));
    }
    tensors.push(("output_norm.weight".into(), norm(&mut rng, h)?));
    if let Some(r) = &family.llama3_rope {
        tensors.push((
            "rope_freqs.weight".into(),
            f32_vector(r.factors(family.rope_theta, family.head_dim))?,
        ));
    }
    if family.phi3.is_some() {
        let [long, short] = Phi3::factors(family.head_dim);
        tensors.push(("rope_factors_long.weight".into(), f32_vector(long)?));
        tensors.push(("rope_factors_short.weight".into(), f32_vector(short)?));
    }
    for l in 0..layers {
        let p = |n: &str| format!("blk.{l}.{n}");
        tensors.push((p("attn_norm.weight"), norm(&mut rng, h)?));
        if family.phi3.is_some() {
            tensors.push((
                p("attn_qkv.weight"),
                random_matrix(&mut rng, q + 2 * kv, h, qtype)?,
            ));
        } else {
            tensors.push((p("attn_q.weight"), random_matrix(&mut rng, q, h, qtype)?));
            tensors.push((p("attn_k.weight"), random_matrix(&mut rng, kv, h, qtype)?));
            tensors.push((p("attn_v.weight"), random_matrix(&mut rng, kv, h, qtype)?));
        }
        if family.qkv_bias {
            let bias = |rng: &mut Rng, n: usize| {
                f32_vector((0..n).map(|_| 0.1 * rng.next_f32()).collect())
            };
            tensors.push((p("attn_q.bias"), bias(&mut rng, q)?));
            tensors.push((p("attn_k.bias"), bias(&mut rng, kv)?));
            tensors.push((p("attn_v.bias"), bias(&mut rng, kv)?));
        }
        if family.qk_norm {
            tensors.push((p("attn_q_norm.weight"), norm(&mut rng, family.head_dim)?));
            tensors.push((p("attn_k_norm.weight"), norm(&mut rng, family.head_dim)?));
        }
        tensors.push((
            p("attn_output.weight"),
            random_matrix(&mut rng, h, q, qtype)?,
        ));
        if family.gemma2.is_some() {
            tensors.push((p("post_attention_norm.weight"), norm(&mut rng, h)?));
        }
        tensors.push((p("ffn_norm.weight"), norm(&mut rng, h)?));
        if family.phi3.is_some() {
            tensors.push((
                p("ffn_up.weight"),
                random_matrix(&mut rng, 2 * ffn, h, qtype)?,
            ));
        } else {
            tensors.push((
                p("ffn_gate.weight"),
                random_matrix(&mut rng, ffn, h, qtype)?,
            ));
            tensors.push((p("ffn_up.weight"), random_matrix(&mut rng, ffn, h, qtype)?));
        }
        tensors.push((
            p("ffn_down.weight"),
            random_matrix(&mut rng, h, ffn, qtype)?,
        ));
        if family.gemma2.is_some() {
            tensors.push((p("post_ffw_norm.weight"), norm(&mut rng, h)?));
        }
    }

    use gguf_file::Value as V;
    let a = family.arch;
    let mut metadata: Vec<(String, V)> = vec![
        ("general.architecture".into(), V::String(a.into())),
        (
            "general.name".into(),
            V::String(format!("{} (random weights, {layers} layers)", family.name)),
        ),
        ("general.file_type".into(), V::U32(file_type)),
        (format!("{a}.block_count"), V::U32(layers as u32)),
        (format!("{a}.context_length"), V::U32(family.context as u32)),
        (format!("{a}.embedding_length"), V::U32(h as u32)),
        (format!("{a}.feed_forward_length"), V::U32(ffn as u32)),
        (
            format!("{a}.attention.head_count"),
            V::U32(family.heads as u32),
        ),
        (
            format!("{a}.attention.head_count_kv"),
            V::U32(family.kv_heads as u32),
        ),
        (
            format!("{a}.attention.key_length"),
            V::U32(family.head_dim as u32),
        ),
        (
            format!("{a}.attention.value_length"),
            V::U32(family.head_dim as u32),
        ),
        (
            format!("{a}.attention.layer_norm_rms_epsilon"),
            V::F32(family.rms_eps),
        ),
        (format!("{a}.rope.freq_base"), V::F32(family.rope_theta)),
        (
            format!("{a}.rope.dimension_count"),
            V::U32(family.head_dim as u32),
        ),
        (format!("{a}.vocab_size"), V::U32(n_vocab as u32)),
    ];
    if let Some(g) = &family.gemma2 {
        metadata.extend([
            (
                format!("{a}.attention.sliding_window"),
                V::U32(g.sliding_window as u32),
            ),
            (
                format!("{a}.attn_logit_softcapping"),
                V::F32(g.attn_softcap),
            ),
            (
                format!("{a}.final_logit_softcapping"),
                V::F32(g.final_softcap),
            ),
        ]);
    }
    if let Some(p) = &family.phi3 {
        metadata.extend([
            (
                format!("{a}.rope.scaling.original_context_length"),
                V::U32(p.original_context as u32),
            ),
            (
                format!("{a}.rope.scaling.attn_factor"),
                V::F32(p.attn_factor(family.context)),
            ),
            (
                format!("{a}.attention.sliding_window"),
                V::U32(p.sliding_window as u32),
            ),
        ]);
    }
    let mut keys: Vec<&String> = content
        .metadata
        .keys()
        .filter(|k| k.starts_with("tokenizer."))
        .collect();
    keys.sort();
    for k in keys {
        metadata.push((k.clone(), content.metadata[k].clone()));
    }
    // Qwen3 thinks: a vocabulary whose template has no think block (llama.cpp's
    // vocab-only qwen2 file) gets Qwen3's own chat template, trimmed of its tools part
    // (formwork writes tool prompts itself), with `<think>` and `enable_thinking`.
    if family.arch == "qwen3" {
        const KEY: &str = "tokenizer.chat_template";
        let has_think = metadata
            .iter()
            .any(|(k, v)| k == KEY && v.to_string().is_ok_and(|t| t.contains("</think>")));
        if !has_think {
            metadata.retain(|(k, _)| k != KEY);
            metadata.push((KEY.to_string(), V::String(QWEN3_TEMPLATE.to_string())));
        }
    }
    let meta_refs: Vec<(&str, &V)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, q)| (n.as_str(), q)).collect();
    let parameters = tensors.iter().map(|(_, q)| q.shape().elem_count()).sum();
    let file = File::create(out).map_err(|e| file_err(out, format!("cannot create: {e}")))?;
    let mut w = BufWriter::new(file);
    gguf_file::write(&mut w, &meta_refs, &refs)?;
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

/// A vocab-only GGUF (no tensors) of a byte-level vocabulary small enough to write ids
/// by hand: the 256 bytes (id `b` is byte `b`, spelled as GPT-2's byte-level BPE spells
/// it, with no merges, so every byte stays its own token), then `words` (id `256 + i`),
/// each a control token (`true`) or a user-defined one (`false`), matched whole;
/// `eos` names the word that ends a turn. `GgufTokenizer::from_file` reads it like any
/// other vocabulary, chat template included: tests script a model's logits over it
/// (`tests/extract_think.rs`).
pub fn write_byte_vocab(
    out: &Path,
    words: &[(&str, bool)],
    eos: &str,
    chat_template: Option<&str>,
) -> Result<()> {
    use gguf_file::Value as V;
    let mut tokens: Vec<V> = (0..=255u8)
        .map(|b| V::String(crate::tokenizer::byte_level_char(b).to_string()))
        .collect();
    // llama.cpp's token types: 1 normal, 3 control, 4 user-defined.
    let mut types: Vec<V> = vec![V::I32(1); 256];
    for (w, control) in words {
        tokens.push(V::String(w.to_string()));
        types.push(V::I32(if *control { 3 } else { 4 }));
    }
    let eos_id = words.iter().position(|(w, _)| *w == eos).ok_or_else(|| {
        file_err(
            out,
            format!("the end-of-turn word {eos:?} is not one of the words"),
        )
    })?;
    let mut metadata: Vec<(&str, V)> = vec![
        ("general.architecture", V::String("llama".into())),
        ("tokenizer.ggml.model", V::String("gpt2".into())),
        ("tokenizer.ggml.pre", V::String("gpt-2".into())),
        ("tokenizer.ggml.tokens", V::Array(tokens)),
        ("tokenizer.ggml.token_type", V::Array(types)),
        ("tokenizer.ggml.merges", V::Array(Vec::new())),
        ("tokenizer.ggml.eos_token_id", V::U32(256 + eos_id as u32)),
        ("tokenizer.ggml.add_bos_token", V::Bool(false)),
    ];
    if let Some(t) = chat_template {
        metadata.push(("tokenizer.chat_template", V::String(t.to_string())));
    }
    let meta_refs: Vec<(&str, &V)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let file = File::create(out).map_err(|e| file_err(out, format!("cannot create: {e}")))?;
    let mut w = BufWriter::new(file);
    gguf_file::write(&mut w, &meta_refs, &[])?;
    w.flush().map_err(|e| file_err(out, e.to_string()))
}
