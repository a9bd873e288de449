//! Llama (SmolLM2 and kin), Qwen2 and Gemma 3 from a GGUF file on the CPU, in candle's
//! model-file shape: a `Config` read from the `llama.*`, `qwen2.*` or `gemma3.*`
//! metadata, `ModelWeights::from_gguf`, `forward(input, index_pos)` and
//! `clear_kv_cache()`.
//!
//! formwork carries its own file for speed on the CPU; `candle_transformers`'
//! `quantized_llama` and formwork's candle-tensor `qwen2.rs` and `gemma3.rs` stay the
//! paths on GPUs and where this one does not apply (see [`crate::runtime::Backend`]). Two
//! things cost those paths time on the CPU:
//! - candle has no SIMD kernel for Q4_1 or Q5_0, so the runtime requantises them to Q8_0
//!   (SmolLM2 Q4_1 moved 145 MB of weights per token where the file holds 85 MB; Qwen2.5's
//!   133 Q5_0 tensors and Gemma 3's 81 likewise). Here Q4_1, Q5_0, Q8_0, Q4_K and Q6_K
//!   tensors keep their file bytes and run through [`crate::quant`] (AVX2 / AVX-512 VNNI,
//!   detected at run time); other types go through candle's `QMatMul`.
//! - their KV cache grows by `Tensor::cat`, copying the whole cache of every layer at
//!   every token. Here each layer's cache is a `Vec<f32>` that grows in place.
//!
//! One layer, as llama.cpp computes it (`llm_build_llama`, `llm_build_qwen2`,
//! `llm_build_gemma3`):
//!
//! ```text
//! x = embed(ids) * embed_scale                      (Gemma 3: sqrt(embedding_length); else 1)
//! per layer:  h = rms(x, attn_norm)
//!             q, k, v = h Wq (+ bq), h Wk (+ bk), h Wv (+ bv)   (biases: Qwen2; GQA: n_kv_head <= n_head)
//!             q, k = rms(q, q_norm), rms(k, k_norm) per head   (Gemma 3 only)
//!             q, k = RoPE, base {arch}.rope.freq_base: interleaved pairs (2i, 2i + 1) for
//!                    llama, NeoX halves (i, i + head_dim / 2) for Qwen2 and Gemma 3
//!             a = softmax(q k^T * attn_scale + causal mask) v Wo
//!             x = x + a                      (Gemma 3: x + rms(a, post_attention_norm))
//!             h = rms(x, ffn_norm);  f = (act(h Wgate) * h Wup) Wdown   (act: SiLU; Gemma 3: GELU-tanh)
//!             x = x + f                      (Gemma 3: x + rms(f, post_ffw_norm))
//! logits = rms(x_last, output_norm) Wout     (Wout = output.weight, or token_embd.weight when tied)
//! ```
//!
//! Gemma 3's local layers (five of every six) see only the last `sliding_window`
//! positions and rotate with their own RoPE base (10,000; the global layers use
//! `gemma3.rope.freq_base`). The cache keeps every position; a local layer's attention
//! starts `sliding_window` positions back. Gemma's norm weights are used as stored:
//! llama.cpp's converter already adds the `1 +` of its RMSNorm into the GGUF tensors.
//!
//! Activations are f32; each matmul quantises its input to 8 bits per block of 32, as
//! llama.cpp and candle's quantized matmuls do. Every token's arithmetic is the same
//! whether it comes alone or in a batch, so chunked prefill gives the same logits as a
//! full one.
//!
//! Cloning a `ModelWeights` is a snapshot: the weights are shared (`Arc`) and the KV
//! cache is copied (its used length only), so a clone keeps the cache it was taken with
//! while the original decodes on.

use std::sync::{Arc, OnceLock};

use candle_core::quantized::{gguf_file, GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Result, Tensor};
use rayon::prelude::*;

use crate::quant::{attn_mix, attn_scores, Format, Isa, KvElem, Q8Acts, QMatrix};
use half::f16;

/// The model families this file runs: they differ in the layer's details (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Gemma3,
}

impl Arch {
    /// The `general.architecture` value, and the prefix of its metadata keys.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Gemma3 => "gemma3",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        [Arch::Llama, Arch::Qwen2, Arch::Gemma3]
            .into_iter()
            .find(|a| a.name() == name)
    }

    /// How RoPE pairs a head's values: the GGUF converter permutes llama's Wq and Wk for
    /// interleaved pairs, and leaves Qwen2's and Gemma 3's in the NeoX order (llama.cpp's
    /// `rope_type`).
    pub fn rope(self) -> RopeStyle {
        match self {
            Arch::Llama => RopeStyle::Interleaved,
            Arch::Qwen2 | Arch::Gemma3 => RopeStyle::Neox,
        }
    }
}

/// Gemma 3's local layers: they attend to the last `window` positions (themselves
/// included) and rotate with their own RoPE base; every `pattern`-th layer is global.
#[derive(Debug, Clone, PartialEq)]
pub struct Sliding {
    /// `gemma3.attention.sliding_window`.
    pub window: usize,
    /// `gemma3.attention.sliding_window_pattern`, else 6 (llama.cpp fixes it for Gemma 3;
    /// the files carry no key). 0 makes every layer local.
    pub pattern: usize,
    /// `gemma3.rope.freq_base_swa` or `gemma3.rope.local_freq_base`, else 10,000.
    pub rope_theta: f32,
}

/// Which values of a head RoPE rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs `(2i, 2i + 1)`.
    Interleaved,
    /// Pairs `(i, i + head_dim / 2)`.
    Neox,
}

/// The hyper-parameters of a model, read from the `{arch}.*` GGUF metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    /// `{arch}.attention.key_length`, else `embedding_length / head_count`. The queries
    /// are `head_count * head_dim` wide, which need not be the embedding length (Gemma 3).
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    /// RoPE base (of the global layers, where some are local).
    pub rope_theta: f32,
    /// Linear RoPE scaling (`{arch}.rope.scaling.factor` with type `linear`, else 1); not
    /// applied to local layers.
    pub rope_scaling_factor: f32,
    /// `{arch}.context_length`; positions past it are refused.
    pub context_length: usize,
    /// The embedding is multiplied by this: `sqrt(embedding_length)` for Gemma 3, else 1.
    pub embed_scale: f32,
    /// The factor on `q k^T`: `1 / sqrt(head_dim)`, except Gemma 3 27B (62 layers), whose
    /// `query_pre_attn_scalar` is `embedding_length / head_count` (as llama.cpp).
    pub attn_scale: f32,
    /// Local layers (Gemma 3); `None`: every layer sees every earlier position.
    pub sliding: Option<Sliding>,
}

fn bail<T>(msg: String) -> Result<T> {
    Err(candle_core::Error::Msg(msg))
}

impl Config {
    /// Read and check the metadata; a model this file cannot run (another architecture,
    /// experts, partial RoPE) is an error that names the key.
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Self> {
        let arch_name = match ct.metadata.get("general.architecture") {
            Some(v) => v.to_string()?.clone(),
            None => return bail("GGUF metadata `general.architecture` is missing".into()),
        };
        let Some(arch) = Arch::from_name(&arch_name) else {
            return bail(format!(
                "GGUF metadata `general.architecture` is `{arch_name}`; formwork's CPU model file runs llama, qwen2 and gemma3"
            ));
        };
        let a = arch.name();
        let value = |k: &str| ct.metadata.get(&format!("{a}.{k}"));
        let wrap = |k: &str, e: candle_core::Error| {
            candle_core::Error::Msg(format!("GGUF metadata `{a}.{k}`: {e}"))
        };
        let get = |k: &str| match value(k) {
            Some(v) => v.to_u64().map(|v| v as usize).map_err(|e| wrap(k, e)),
            None => bail(format!("GGUF metadata `{a}.{k}` is missing")),
        };
        let opt_f32 = |k: &str| -> Result<Option<f32>> {
            value(k)
                .map(|v| v.to_f32().map_err(|e| wrap(k, e)))
                .transpose()
        };
        let experts = value("expert_count")
            .and_then(|v| v.to_u64().ok())
            .unwrap_or(0);
        if experts > 0 {
            return bail(format!(
                "{a}.expert_count is {experts}: formwork's CPU model file runs no mixture-of-experts models"
            ));
        }
        let hidden_size = get("embedding_length")?;
        let num_attention_heads = get("attention.head_count")?;
        let num_key_value_heads = get("attention.head_count_kv")?;
        if num_attention_heads == 0
            || num_key_value_heads == 0
            || num_attention_heads % num_key_value_heads != 0
            || hidden_size % num_attention_heads != 0
        {
            return bail(format!(
                "{a}.attention.head_count {num_attention_heads} and head_count_kv {num_key_value_heads} do not divide the embedding length {hidden_size}"
            ));
        }
        let head_dim = match value("attention.key_length") {
            Some(_) => get("attention.key_length")?,
            None => hidden_size / num_attention_heads,
        };
        if value("attention.value_length").is_some() {
            let v = get("attention.value_length")?;
            if v != head_dim {
                return bail(format!(
                    "{a}.attention.value_length {v} differs from the key length {head_dim}; formwork's CPU model file needs them equal"
                ));
            }
        }
        if head_dim == 0 {
            return bail(format!("{a}.attention.key_length is 0"));
        }
        if head_dim % 2 != 0 {
            return bail(format!(
                "the head size {head_dim} ({a}.embedding_length / head_count) is odd; RoPE needs pairs"
            ));
        }
        if value("rope.dimension_count").is_some() {
            let rope_dim = get("rope.dimension_count")?;
            if rope_dim != head_dim {
                return bail(format!(
                    "{a}.rope.dimension_count {rope_dim} differs from the head size {head_dim}; formwork's CPU model file runs no partial RoPE"
                ));
            }
        }
        let rope_scaling_factor = match value("rope.scaling.type") {
            None => 1.0,
            Some(v) => match v.to_string().map_err(|e| wrap("rope.scaling.type", e))?.as_str() {
                "none" => 1.0,
                "linear" => match opt_f32("rope.scaling.factor")? {
                    Some(f) if f > 0.0 => f,
                    _ => 1.0,
                },
                other => {
                    return bail(format!(
                        "GGUF metadata `{a}.rope.scaling.type`: `{other}` is not supported (formwork runs `none` and `linear`)"
                    ))
                }
            },
        };
        // llama.cpp's defaults where a llama file leaves a key out; Qwen2 and Gemma 3
        // files carry them.
        let (rms_norm_eps, context_length) = match arch {
            Arch::Llama => (
                opt_f32("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5),
                get("context_length").unwrap_or(4096),
            ),
            Arch::Qwen2 | Arch::Gemma3 => (
                match opt_f32("attention.layer_norm_rms_epsilon")? {
                    Some(e) => e,
                    None => {
                        return bail(format!(
                            "GGUF metadata `{a}.attention.layer_norm_rms_epsilon` is missing"
                        ))
                    }
                },
                get("context_length")?,
            ),
        };
        let vocab_size = ct
            .tensor_infos
            .get("token_embd.weight")
            .map(|i| i.shape.dims()[0])
            .ok_or_else(|| {
                candle_core::Error::Msg("GGUF tensor `token_embd.weight` is missing".into())
            })?;
        let num_hidden_layers = get("block_count")?;
        let (embed_scale, attn_scale, sliding) = match arch {
            Arch::Llama | Arch::Qwen2 => (1.0, 1.0 / (head_dim as f32).sqrt(), None),
            Arch::Gemma3 => {
                let window = get("attention.sliding_window")?;
                if window == 0 {
                    return bail(format!("{a}.attention.sliding_window is 0"));
                }
                let pattern = match value("attention.sliding_window_pattern") {
                    Some(_) => get("attention.sliding_window_pattern")?,
                    None => 6,
                };
                let rope_theta = match opt_f32("rope.freq_base_swa")? {
                    Some(f) => f,
                    None => opt_f32("rope.local_freq_base")?.unwrap_or(10_000.0),
                };
                let scalar = if num_hidden_layers == 62 {
                    hidden_size / num_attention_heads
                } else {
                    head_dim
                };
                (
                    (hidden_size as f32).sqrt(),
                    1.0 / (scalar as f32).sqrt(),
                    Some(Sliding {
                        window,
                        pattern,
                        rope_theta,
                    }),
                )
            }
        };
        Ok(Self {
            arch,
            vocab_size,
            hidden_size,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps,
            rope_theta: opt_f32("rope.freq_base")?.unwrap_or(10_000.0),
            rope_scaling_factor,
            context_length,
            embed_scale,
            attn_scale,
            sliding,
        })
    }

    fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }

    fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// The window of layer `l` when it is local.
    pub fn window(&self, l: usize) -> Option<usize> {
        let s = self.sliding.as_ref()?;
        (s.pattern == 0 || (l + 1) % s.pattern != 0).then_some(s.window)
    }
}

/// A weight matrix: the file's blocks through our kernels when [`crate::quant`] has them
/// (Q4_1, Q5_0, Q8_0, Q4_K, Q6_K), anything else through candle.
#[derive(Debug, Clone)]
enum Linear {
    Own(Arc<QMatrix>),
    Candle {
        mm: QMatMul,
        rows: usize,
        cols: usize,
    },
}

impl Linear {
    /// The tensor `name`: ours read straight from the file into one buffer (no candle
    /// tensor on the way, so load does not hold two copies of it), else candle's.
    fn load<R: std::io::Seek + std::io::Read>(
        ct: &gguf_file::Content,
        reader: &mut R,
        name: &str,
    ) -> Result<Self> {
        let err = |e: &dyn std::fmt::Display| {
            candle_core::Error::Msg(format!("GGUF tensor `{name}`: {e}"))
        };
        let Some(info) = ct.tensor_infos.get(name) else {
            return bail(format!("GGUF tensor `{name}` is missing"));
        };
        let (rows, cols) = info.shape.dims2().map_err(|e| err(&e))?;
        let format = match info.ggml_dtype {
            GgmlDType::Q4_1 => Some(Format::Q4_1),
            GgmlDType::Q5_0 => Some(Format::Q5_0),
            GgmlDType::Q8_0 => Some(Format::Q8_0),
            GgmlDType::Q4K => Some(Format::Q4_K),
            GgmlDType::Q6K => Some(Format::Q6_K),
            _ => None,
        };
        match format {
            Some(f) if cols % f.block_elems() == 0 => {
                let mut data = vec![0u8; rows * f.row_bytes(cols)];
                let at = ct.tensor_data_offset.saturating_add(info.offset);
                reader
                    .seek(std::io::SeekFrom::Start(at))
                    .and_then(|_| reader.read_exact(&mut data))
                    .map_err(|e| err(&e))?;
                let m = QMatrix::new(f, rows, cols, data).map_err(|e| err(&e))?;
                Ok(Self::Own(Arc::new(m)))
            }
            _ => Ok(Self::Candle {
                mm: QMatMul::from_qtensor(
                    ct.tensor(reader, name, &Device::Cpu).map_err(|e| err(&e))?,
                )?,
                rows,
                cols,
            }),
        }
    }

    fn rows(&self) -> usize {
        match self {
            Self::Own(m) => m.rows(),
            Self::Candle { rows, .. } => *rows,
        }
    }

    fn cols(&self) -> usize {
        match self {
            Self::Own(m) => m.cols(),
            Self::Candle { cols, .. } => *cols,
        }
    }
}

/// The token embedding: quantised rows dequantised on lookup, or a dequantised f32 table.
#[derive(Debug, Clone)]
enum Embedding {
    Own(Arc<QMatrix>),
    F32 { table: Arc<Vec<f32>>, cols: usize },
}

#[derive(Debug)]
struct Layer {
    attn_norm: Vec<f32>,
    wq: Linear,
    wk: Linear,
    wv: Linear,
    /// `attn_q.bias`, `attn_k.bias`, `attn_v.bias` (Qwen2), when the file has them.
    bias: Option<[Vec<f32>; 3]>,
    /// `attn_q_norm`, `attn_k_norm` (Gemma 3): RMS norms of each head of q and k.
    qk_norm: Option<[Vec<f32>; 2]>,
    wo: Linear,
    ffn_norm: Vec<f32>,
    gate: Linear,
    up: Linear,
    down: Linear,
    /// `post_attention_norm`, `post_ffw_norm` (Gemma 3): RMS norms of the attention's and
    /// the FFN's outputs before they are added to the residual.
    post_norm: Option<[Vec<f32>; 2]>,
}

#[derive(Debug)]
struct Weights {
    cfg: Config,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    output: Linear,
    /// `1 / base^(2i / head_dim)` for each pair of a head (`/ rope_scaling_factor`).
    inv_freq: Vec<f32>,
    /// The same for the local layers' base, unscaled (empty without local layers).
    inv_freq_local: Vec<f32>,
}

/// How the KV cache stores keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    /// 4 bytes a value: the values exactly as computed.
    #[default]
    F32,
    /// 2 bytes a value (llama.cpp's default): half the memory per position, each value
    /// rounded to nearest f16 when stored; attention still computes in f32.
    F16,
}

impl KvType {
    /// The `--kv-cache` value: `f32` or `f16`.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
        }
    }
}

/// One layer's cache: positions of `kv_dim` values, position-major, in f32 or f16.
#[derive(Debug, Clone)]
enum LayerCache {
    F32 { k: Vec<f32>, v: Vec<f32> },
    F16 { k: Vec<f16>, v: Vec<f16> },
}

impl LayerCache {
    fn new(kv: KvType) -> Self {
        match kv {
            KvType::F32 => Self::F32 {
                k: Vec::new(),
                v: Vec::new(),
            },
            KvType::F16 => Self::F16 {
                k: Vec::new(),
                v: Vec::new(),
            },
        }
    }

    /// Appends the rows of `k` and `v`.
    fn push(&mut self, k: &[f32], v: &[f32]) {
        match self {
            Self::F32 { k: ck, v: cv } => {
                ck.extend_from_slice(k);
                cv.extend_from_slice(v);
            }
            Self::F16 { k: ck, v: cv } => {
                f16::extend_from_f32(ck, k);
                f16::extend_from_f32(cv, v);
            }
        }
    }

    /// Values held (positions times `kv_dim`).
    fn values(&self) -> usize {
        match self {
            Self::F32 { k, .. } => k.len(),
            Self::F16 { k, .. } => k.len(),
        }
    }

    fn clear(&mut self) {
        match self {
            Self::F32 { k, v } => {
                k.clear();
                v.clear();
            }
            Self::F16 { k, v } => {
                k.clear();
                v.clear();
            }
        }
    }
}

/// The model: shared weights and an own KV cache. `Clone` is the snapshot.
#[derive(Debug, Clone)]
pub struct ModelWeights {
    w: Arc<Weights>,
    cache: Vec<LayerCache>,
    len: usize,
    isa: Isa,
}

/// The worker pool for the matmuls and attention: `CANDLE_NUM_THREADS`, else
/// `RAYON_NUM_THREADS`, else candle's default; `None` for one thread (no hand-offs).
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let n = ["CANDLE_NUM_THREADS", "RAYON_NUM_THREADS"]
            .iter()
            .find_map(|k| {
                std::env::var(k)
                    .ok()?
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
            })
            .unwrap_or_else(candle_core::utils::get_num_threads);
        if n <= 1 {
            return None;
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("formwork-cpu-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

fn threads() -> usize {
    pool().map_or(1, |p| p.current_num_threads())
}

impl ModelWeights {
    /// Load from a GGUF file on the CPU with the best kernel this CPU runs.
    pub fn from_gguf<R: std::io::Seek + std::io::Read>(
        ct: gguf_file::Content,
        reader: &mut R,
        device: &Device,
    ) -> Result<Self> {
        Self::from_gguf_with_isa(ct, reader, device, Isa::detect())
    }

    /// [`Self::from_gguf`] with a chosen kernel (tests compare them).
    pub fn from_gguf_with_isa<R: std::io::Seek + std::io::Read>(
        ct: gguf_file::Content,
        reader: &mut R,
        device: &Device,
        isa: Isa,
    ) -> Result<Self> {
        if !device.is_cpu() {
            return bail(format!(
                "formwork's CPU model file runs on the CPU only, not {device:?}"
            ));
        }
        let cfg = Config::from_gguf(&ct)?;
        let cpu = Device::Cpu;
        let tensor = |reader: &mut R, name: &str| {
            ct.tensor(reader, name, &cpu)
                .map_err(|e| candle_core::Error::Msg(format!("GGUF tensor `{name}`: {e}")))
        };
        let vector = |q: QTensor, name: &str, len: usize| -> Result<Vec<f32>> {
            let v: Vec<f32> = q.dequantize(&cpu)?.flatten_all()?.to_vec1()?;
            if v.len() != len {
                return bail(format!(
                    "GGUF tensor `{name}` has {} values, expected {len}",
                    v.len()
                ));
            }
            Ok(v)
        };

        let embd_linear = Linear::load(&ct, reader, "token_embd.weight")?;
        let (rows, cols) = (embd_linear.rows(), embd_linear.cols());
        if cols != cfg.hidden_size {
            return bail(format!(
                "token_embd.weight is {rows} x {cols}, the embedding length is {}",
                cfg.hidden_size
            ));
        }
        let embed = match &embd_linear {
            Linear::Own(m) => Embedding::Own(m.clone()),
            Linear::Candle { .. } => {
                let q = tensor(reader, "token_embd.weight")?;
                Embedding::F32 {
                    table: Arc::new(vector(q, "token_embd.weight", rows * cols)?),
                    cols,
                }
            }
        };
        let output = if ct.tensor_infos.contains_key("output.weight") {
            Linear::load(&ct, reader, "output.weight")?
        } else {
            embd_linear
        };
        let dim = cfg.hidden_size;
        let kv = cfg.kv_dim();
        let qd = cfg.q_dim();
        let hd = cfg.head_dim;
        let gemma = cfg.arch == Arch::Gemma3;
        let norm = vector(
            tensor(reader, "output_norm.weight")?,
            "output_norm.weight",
            dim,
        )?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("blk.{i}");
            let mut lin = |n: &str| Linear::load(&ct, reader, &format!("{p}.{n}"));
            let wq = lin("attn_q.weight")?;
            let wk = lin("attn_k.weight")?;
            let wv = lin("attn_v.weight")?;
            let wo = lin("attn_output.weight")?;
            let gate = lin("ffn_gate.weight")?;
            let up = lin("ffn_up.weight")?;
            let down = lin("ffn_down.weight")?;
            let mut vec_of = |n: &str, len: usize| -> Result<Vec<f32>> {
                let name = format!("{p}.{n}");
                vector(tensor(reader, &name)?, &name, len)
            };
            let bias = if ct.tensor_infos.contains_key(&format!("{p}.attn_q.bias")) {
                Some([
                    vec_of("attn_q.bias", qd)?,
                    vec_of("attn_k.bias", kv)?,
                    vec_of("attn_v.bias", kv)?,
                ])
            } else {
                None
            };
            let (qk_norm, post_norm) = if gemma {
                (
                    Some([
                        vec_of("attn_q_norm.weight", hd)?,
                        vec_of("attn_k_norm.weight", hd)?,
                    ]),
                    Some([
                        vec_of("post_attention_norm.weight", dim)?,
                        vec_of("post_ffw_norm.weight", dim)?,
                    ]),
                )
            } else {
                (None, None)
            };
            layers.push(Layer {
                attn_norm: vec_of("attn_norm.weight", dim)?,
                ffn_norm: vec_of("ffn_norm.weight", dim)?,
                wq,
                wk,
                wv,
                bias,
                qk_norm,
                wo,
                gate,
                up,
                down,
                post_norm,
            });
        }
        for (i, l) in layers.iter().enumerate() {
            let ffn = l.gate.rows();
            let want = [
                ("attn_q", &l.wq, qd, dim),
                ("attn_k", &l.wk, kv, dim),
                ("attn_v", &l.wv, kv, dim),
                ("attn_output", &l.wo, dim, qd),
                ("ffn_gate", &l.gate, ffn, dim),
                ("ffn_up", &l.up, ffn, dim),
                ("ffn_down", &l.down, dim, ffn),
            ];
            for (name, lin, rows, cols) in want {
                if (lin.rows(), lin.cols()) != (rows, cols) {
                    return bail(format!(
                        "blk.{i}.{name}.weight is {} x {}, expected {rows} x {cols}",
                        lin.rows(),
                        lin.cols()
                    ));
                }
            }
        }
        if (output.rows(), output.cols()) != (cfg.vocab_size, dim) {
            return bail(format!(
                "output.weight is {} x {}, expected {} x {dim}",
                output.rows(),
                output.cols(),
                cfg.vocab_size
            ));
        }
        let inv_freq = |base: f32, scale: f32| -> Vec<f32> {
            (0..hd)
                .step_by(2)
                .map(|i| 1f32 / base.powf(i as f32 / hd as f32) / scale)
                .collect()
        };
        let inv_freq_local = match &cfg.sliding {
            Some(s) => inv_freq(s.rope_theta, 1.0),
            None => Vec::new(),
        };
        let inv_freq = inv_freq(cfg.rope_theta, cfg.rope_scaling_factor);
        let n_layers = cfg.num_hidden_layers;
        Ok(Self {
            w: Arc::new(Weights {
                cfg,
                embed,
                layers,
                norm,
                output,
                inv_freq,
                inv_freq_local,
            }),
            cache: vec![LayerCache::new(KvType::F32); n_layers],
            len: 0,
            isa,
        })
    }

    pub fn config(&self) -> &Config {
        &self.w.cfg
    }

    /// The same model with local layers that see the last `window` positions (tests use a
    /// small window to make it matter). Only on a model without snapshots, and only for
    /// one that has local layers.
    pub fn with_sliding_window(mut self, window: usize) -> Result<Self> {
        let Some(w) = Arc::get_mut(&mut self.w) else {
            return bail("with_sliding_window: the weights are shared with a snapshot".into());
        };
        match &mut w.cfg.sliding {
            Some(s) if window > 0 => s.window = window,
            Some(_) => return bail("a sliding window of 0 sees nothing".into()),
            None => {
                return bail(format!(
                    "{} has no sliding-window layers",
                    w.cfg.arch.name()
                ))
            }
        }
        Ok(self)
    }

    /// The same model with its KV cache in `kv` (emptied). Snapshots taken later share it.
    pub fn with_kv_type(mut self, kv: KvType) -> Self {
        self.cache = vec![LayerCache::new(kv); self.w.cfg.num_hidden_layers];
        self.len = 0;
        self
    }

    /// Positions in the KV cache.
    pub fn cache_len(&self) -> usize {
        self.len
    }

    pub fn clear_kv_cache(&mut self) {
        for c in &mut self.cache {
            c.clear();
        }
        self.len = 0;
    }

    /// candle's shape: `input` is `(1, seq_len)` token ids; returns the logits `(1, vocab)`
    /// of the last position. `index_pos` 0 starts over.
    pub fn forward(&mut self, input: &Tensor, index_pos: usize) -> Result<Tensor> {
        let ids: Vec<u32> = input.flatten_all()?.to_vec1()?;
        let logits = self.forward_tokens(&ids, index_pos)?;
        let n = logits.len();
        Tensor::from_vec(logits, (1, n), &Device::Cpu)
    }

    /// Feed `tokens` at `index_pos..`; the logits of the last one.
    pub fn forward_tokens(&mut self, tokens: &[u32], index_pos: usize) -> Result<Vec<f32>> {
        let mut out = Self::forward_batch(&mut [self], &[(tokens, index_pos)]);
        out.pop()
            .unwrap_or_else(|| bail("forward: no result".into()))
    }

    /// Check one sequence's feed against its cache; start over at position 0.
    fn begin(&mut self, tokens: &[u32], index_pos: usize) -> Result<()> {
        let cfg = &self.w.cfg;
        if tokens.is_empty() {
            return bail(format!("forward at position {index_pos}: no tokens"));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            return bail(format!(
                "token id {bad} is out of range for a vocabulary of {}",
                cfg.vocab_size
            ));
        }
        if index_pos != 0 && index_pos != self.len {
            return bail(format!(
                "forward at position {index_pos}: the KV cache holds {} positions",
                self.len
            ));
        }
        let end = index_pos + tokens.len();
        if end > cfg.context_length {
            return bail(format!(
                "positions up to {end} exceed the context length {}",
                cfg.context_length
            ));
        }
        if index_pos == 0 {
            self.clear_kv_cache();
        }
        Ok(())
    }

    /// Several sequences in one pass: `models[i]` is fed `feeds[i] = (tokens, index_pos)`
    /// and gets the logits of its last token. Each sequence keeps its own KV cache and
    /// position; every matmul covers the rows of all of them at once, so the weights
    /// are read once per pass instead of once per sequence. A token's arithmetic does
    /// not depend on what shares its pass, so each result equals the sequence's
    /// forward alone, bit for bit (`tests/batch_forward.rs`).
    ///
    /// The models must be snapshots of one model (the same weights). A feed that its
    /// own model refuses (an empty feed, a token out of range, a position that is not
    /// its cache's length or 0, the context length) gets its error and leaves its cache
    /// as it was; the others run.
    pub fn forward_batch(
        models: &mut [&mut ModelWeights],
        feeds: &[(&[u32], usize)],
    ) -> Vec<Result<Vec<f32>>> {
        assert_eq!(models.len(), feeds.len(), "one feed per model");
        let mut results: Vec<Option<Result<Vec<f32>>>> = (0..models.len()).map(|_| None).collect();
        let Some(first) = models.first() else {
            return Vec::new();
        };
        let w = first.w.clone();
        let isa = first.isa;
        let mut run: Vec<usize> = Vec::new();
        for (i, (m, &(tokens, pos))) in models.iter_mut().zip(feeds).enumerate() {
            if !Arc::ptr_eq(&m.w, &w) {
                results[i] = Some(bail(
                    "a batched forward mixes models with different weights".into(),
                ));
            } else if let Err(e) = m.begin(tokens, pos) {
                results[i] = Some(Err(e));
            } else {
                run.push(i);
            }
        }
        if !run.is_empty() {
            let segs: Vec<(&[u32], usize)> = run.iter().map(|&i| feeds[i]).collect();
            let mut caches: Vec<&mut [LayerCache]> = Vec::with_capacity(run.len());
            let mut lens: Vec<&mut usize> = Vec::with_capacity(run.len());
            let mut k = 0;
            for (i, m) in models.iter_mut().enumerate() {
                if run.get(k) == Some(&i) {
                    caches.push(&mut m.cache[..]);
                    lens.push(&mut m.len);
                    k += 1;
                }
            }
            let mut go = || forward_impl(&w, &mut caches, isa, &segs);
            let out = match pool() {
                Some(p) => p.install(go),
                None => go(),
            };
            match out {
                Ok(logits) => {
                    for ((len, seg), (&i, l)) in
                        lens.into_iter().zip(&segs).zip(run.iter().zip(logits))
                    {
                        *len = seg.1 + seg.0.len();
                        results[i] = Some(Ok(l));
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    for &i in &run {
                        results[i] = Some(bail(msg.clone()));
                        models[i].clear_kv_cache();
                    }
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| bail("forward: no result".into())))
            .collect()
    }
}

/// The forward pass of `segs.len()` sequences: segment `s` feeds `segs[s].0` at positions
/// `segs[s].1..` over `caches[s]`; the logits of each segment's last token.
fn forward_impl(
    w: &Weights,
    caches: &mut [&mut [LayerCache]],
    isa: Isa,
    segs: &[(&[u32], usize)],
) -> Result<Vec<Vec<f32>>> {
    let cfg = &w.cfg;
    let eps = cfg.rms_norm_eps;
    let n: usize = segs.iter().map(|s| s.0.len()).sum();
    let dim = cfg.hidden_size;
    let kvd = cfg.kv_dim();
    let mut x = vec![0f32; n * dim];
    let tokens = segs.iter().flat_map(|s| s.0.iter());
    for (t, row) in tokens.zip(x.chunks_exact_mut(dim)) {
        match &w.embed {
            Embedding::Own(m) => m.dequantize_row(*t as usize, row),
            Embedding::F32 { table, cols } => {
                row.copy_from_slice(&table[*t as usize * cols..(*t as usize + 1) * cols])
            }
        }
        if cfg.embed_scale != 1.0 {
            row.iter_mut().for_each(|v| *v *= cfg.embed_scale);
        }
    }
    // Each row's segment and position.
    let mut segment: Vec<usize> = Vec::with_capacity(n);
    let mut positions: Vec<usize> = Vec::with_capacity(n);
    for (s, &(toks, pos)) in segs.iter().enumerate() {
        segment.extend(std::iter::repeat_n(s, toks.len()));
        positions.extend(pos..pos + toks.len());
    }
    let global = RopeRows::new(&w.inv_freq, &positions);
    let local = RopeRows::new(&w.inv_freq_local, &positions);
    let style = cfg.arch.rope();
    let mut acts = Q8Acts::default();
    let mut h = vec![0f32; n * dim];
    for (l, layer) in w.layers.iter().enumerate() {
        rms_norm(&x, &layer.attn_norm, eps, &mut h);
        let [mut q, mut k, mut v] =
            project(isa, [&layer.wq, &layer.wk, &layer.wv], &h, n, &mut acts)?;
        if let Some([bq, bk, bv]) = &layer.bias {
            add_rows(&mut q, bq);
            add_rows(&mut k, bk);
            add_rows(&mut v, bv);
        }
        if let Some([qn, kn]) = &layer.qk_norm {
            rms_norm_in_place(&mut q, qn, eps);
            rms_norm_in_place(&mut k, kn, eps);
        }
        let window = cfg.window(l);
        let rope_rows = if window.is_some() { &local } else { &global };
        rope(style, &mut q, cfg.head_dim, rope_rows);
        rope(style, &mut k, cfg.head_dim, rope_rows);
        let mut r0 = 0;
        for (c, &(toks, pos)) in caches.iter_mut().zip(segs) {
            let c = &mut c[l];
            let r1 = r0 + toks.len();
            c.push(&k[r0 * kvd..r1 * kvd], &v[r0 * kvd..r1 * kvd]);
            debug_assert_eq!(c.values(), (pos + toks.len()) * kvd);
            r0 = r1;
        }
        let layer_caches: Vec<&LayerCache> = caches.iter().map(|c| &c[l]).collect();
        let att = attention(isa, cfg, &q, &layer_caches, &segment, &positions, window);
        let [mut o] = project(isa, [&layer.wo], &att, n, &mut acts)?;
        if let Some([post_attn, _]) = &layer.post_norm {
            rms_norm_in_place(&mut o, post_attn, eps);
        }
        add(&mut x, &o);
        rms_norm(&x, &layer.ffn_norm, eps, &mut h);
        let [mut g, u] = project(isa, [&layer.gate, &layer.up], &h, n, &mut acts)?;
        match cfg.arch {
            Arch::Gemma3 => {
                for (g, u) in g.iter_mut().zip(&u) {
                    *g = gelu_tanh(*g) * u;
                }
            }
            Arch::Llama | Arch::Qwen2 => {
                for (g, u) in g.iter_mut().zip(&u) {
                    *g = *g / (1.0 + (-*g).exp()) * u;
                }
            }
        }
        let [mut d] = project(isa, [&layer.down], &g, n, &mut acts)?;
        if let Some([_, post_ffn]) = &layer.post_norm {
            rms_norm_in_place(&mut d, post_ffn, eps);
        }
        add(&mut x, &d);
    }
    // The last row of each segment.
    let b = segs.len();
    let mut hn = vec![0f32; b * dim];
    let mut end = 0;
    for (&(toks, _), out) in segs.iter().zip(hn.chunks_exact_mut(dim)) {
        end += toks.len();
        rms_norm(&x[(end - 1) * dim..end * dim], &w.norm, eps, out);
    }
    let [logits] = project(isa, [&w.output], &hn, b, &mut acts)?;
    let vocab = logits.len() / b;
    Ok(logits.chunks_exact(vocab).map(|c| c.to_vec()).collect())
}

/// GELU, tanh approximation (Gemma's `gelu_pytorch_tanh`, candle's `gelu`).
fn gelu_tanh(v: f32) -> f32 {
    const SQRT_TWO_OVER_PI: f32 = 0.797_884_6;
    0.5 * v * (1.0 + (SQRT_TWO_OVER_PI * v * (1.0 + 0.044_715 * v * v)).tanh())
}

/// cos and sin of each row's angles `position * inv_freq[i]` (an f32 angle, as candle
/// computes it), `inv_freq.len()` per row.
struct RopeRows {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeRows {
    fn new(inv_freq: &[f32], positions: &[usize]) -> Self {
        let mut cos = Vec::with_capacity(positions.len() * inv_freq.len());
        let mut sin = Vec::with_capacity(cos.capacity());
        for &p in positions {
            for f in inv_freq {
                let a = p as f32 * f;
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        Self { cos, sin }
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// `b` added to each row of `x`.
fn add_rows(x: &mut [f32], b: &[f32]) {
    for row in x.chunks_exact_mut(b.len()) {
        add(row, b);
    }
}

/// Row-wise RMS norm of `x` (rows of `w.len()`), times `w`.
fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    out.copy_from_slice(x);
    rms_norm_in_place(out, w, eps);
}

/// Row-wise RMS norm of `x` in place, rows of `w.len()` (Gemma's per-head norms, its
/// post-norms).
fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    let dim = w.len();
    for xr in x.chunks_exact_mut(dim) {
        let ss: f32 = xr.iter().map(|v| v * v).sum::<f32>() / dim as f32;
        let s = 1.0 / (ss + eps).sqrt();
        for (v, g) in xr.iter_mut().zip(w) {
            *v = *v * s * g;
        }
    }
}

/// RoPE of `style` on each head of each row; row `t` is at the `t`-th new position.
fn rope(style: RopeStyle, x: &mut [f32], hd: usize, angles: &RopeRows) {
    let (cos, sin) = (&angles.cos, &angles.sin);
    let half = hd / 2;
    let rows = cos.len() / half;
    let width = x.len() / rows;
    for (t, row) in x.chunks_exact_mut(width).enumerate() {
        let (c, s) = (
            &cos[t * half..(t + 1) * half],
            &sin[t * half..(t + 1) * half],
        );
        for head in row.chunks_exact_mut(hd) {
            match style {
                RopeStyle::Interleaved => {
                    for (i, pair) in head.chunks_exact_mut(2).enumerate() {
                        let (a, b) = (pair[0], pair[1]);
                        pair[0] = a * c[i] - b * s[i];
                        pair[1] = a * s[i] + b * c[i];
                    }
                }
                RopeStyle::Neox => {
                    let (lo, hi) = head.split_at_mut(half);
                    for i in 0..half {
                        let (a, b) = (lo[i], hi[i]);
                        lo[i] = a * c[i] - b * s[i];
                        hi[i] = a * s[i] + b * c[i];
                    }
                }
            }
        }
    }
}

/// `x` (`n` rows) times each matrix; one output of `n x rows` per matrix. Our own
/// matrices share one quantisation of `x` and one parallel pass over their rows.
fn project<const N: usize>(
    isa: Isa,
    lins: [&Linear; N],
    x: &[f32],
    n: usize,
    acts: &mut Q8Acts,
) -> Result<[Vec<f32>; N]> {
    let k = x.len() / n;
    let mut outs: [Vec<f32>; N] = std::array::from_fn(|i| vec![0f32; n * lins[i].rows()]);
    if lins.iter().any(|l| matches!(l, Linear::Own(_))) {
        acts.quantize(x, n, k);
        let acts = &*acts;
        let threads = threads();
        let mut tasks: Vec<(&QMatrix, usize, &mut [f32])> = Vec::new();
        for (lin, out) in lins.iter().zip(outs.iter_mut()) {
            if let Linear::Own(m) = lin {
                if m.cols() != k {
                    return bail(format!(
                        "a {} x {} matrix times activations of width {k}",
                        m.rows(),
                        m.cols()
                    ));
                }
                let chunk = m.rows().div_ceil(threads * 4).max(4);
                for (i, c) in out.chunks_mut(chunk * n).enumerate() {
                    tasks.push((m, i * chunk, c));
                }
            }
        }
        if threads > 1 {
            tasks
                .into_par_iter()
                .for_each(|(m, r0, out)| m.dot_rows(isa, r0, acts, out));
        } else {
            for (m, r0, out) in tasks {
                m.dot_rows(isa, r0, acts, out);
            }
        }
        // The kernel writes row-major by weight row; the model wants token-major.
        if n > 1 {
            for (lin, out) in lins.iter().zip(outs.iter_mut()) {
                if matches!(lin, Linear::Own(_)) {
                    *out = transpose(out, lin.rows(), n);
                }
            }
        }
    }
    for (lin, out) in lins.iter().zip(outs.iter_mut()) {
        if let Linear::Candle { mm, .. } = lin {
            let t = Tensor::from_slice(x, (n, k), &Device::Cpu)?;
            *out = mm.forward(&t)?.flatten_all()?.to_vec1()?;
        }
    }
    Ok(outs)
}

/// `a` (`rows x cols`, row-major) transposed, in tiles of 16 x 16 so that both sides are
/// read and written a cache line at a time (a plain double loop strides a whole row per
/// write: 7.6% of Gemma 3's prefill).
fn transpose(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    const TILE: usize = 16;
    let mut t = vec![0f32; a.len()];
    for r0 in (0..rows).step_by(TILE) {
        for c0 in (0..cols).step_by(TILE) {
            for r in r0..(r0 + TILE).min(rows) {
                for c in c0..(c0 + TILE).min(cols) {
                    t[c * rows + r] = a[r * cols + c];
                }
            }
        }
    }
    t
}

/// Causal attention of each new row over its own sequence's cache: row `r` belongs to
/// segment `segment[r]`, at position `positions[r]`, and sees the positions up to its own
/// in its segment's cache, or the last `window` of them on a local layer.
fn attention(
    isa: Isa,
    cfg: &Config,
    q: &[f32],
    caches: &[&LayerCache],
    segment: &[usize],
    positions: &[usize],
    window: Option<usize>,
) -> Vec<f32> {
    let hd = cfg.head_dim;
    let heads = cfg.num_attention_heads;
    let group = heads / cfg.num_key_value_heads;
    let kvd = cfg.kv_dim();
    let scale = cfg.attn_scale;
    let mut out = vec![0f32; positions.len() * heads * hd];
    let one = |idx: usize, o: &mut [f32]| {
        let (r, h) = (idx / heads, idx % heads);
        let c = caches[segment[r]];
        let g = h / group;
        let qh = &q[r * heads * hd + h * hd..][..hd];
        let end = positions[r] + 1;
        let start = window.map_or(0, |w| end.saturating_sub(w));
        let mut sc = vec![0f32; end - start];
        let from = start * kvd + g * hd;
        match c {
            LayerCache::F32 { k, v } => {
                attend(isa, qh, &k[from..], &v[from..], kvd, scale, &mut sc, o)
            }
            LayerCache::F16 { k, v } => {
                attend(isa, qh, &k[from..], &v[from..], kvd, scale, &mut sc, o)
            }
        }
    };
    if threads() > 1 {
        out.par_chunks_mut(hd)
            .enumerate()
            .for_each(|(i, o)| one(i, o));
    } else {
        for (i, o) in out.chunks_mut(hd).enumerate() {
            one(i, o);
        }
    }
    out
}

/// One head of one row: scores over the positions in `k`, their softmax, and the
/// weighted sum of `v` into `o` (`sc` holds one score per position).
#[allow(clippy::too_many_arguments)]
fn attend<E: KvElem>(
    isa: Isa,
    q: &[f32],
    k: &[E],
    v: &[E],
    stride: usize,
    scale: f32,
    sc: &mut [f32],
    o: &mut [f32],
) {
    attn_scores(isa, q, k, stride, scale, sc);
    let max = sc.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0f32;
    for v in sc.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    for v in sc.iter_mut() {
        *v *= inv;
    }
    attn_mix(isa, sc, v, stride, o);
}

#[cfg(test)]
mod tests {
    use super::transpose;

    /// The tiled transpose against the definition, on shapes around and across the tile.
    #[test]
    fn transpose_moves_every_value() {
        for (rows, cols) in [(1, 1), (1, 33), (17, 1), (16, 16), (37, 5), (50, 70)] {
            let a: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
            let t = transpose(&a, rows, cols);
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(
                        t[c * rows + r],
                        a[r * cols + c],
                        "{rows} x {cols} at ({r}, {c})"
                    );
                }
            }
        }
    }
}
