//! GGUF tensors -> [`Weights`]: every matrix of the model, read once and shared by all
//! snapshots. Q4_1, Q5_0, Q8_0, Q4_K and Q6_K matrices keep the file's blocks (read
//! straight into one buffer each, for [`crate::quant`]'s kernels); other types go through
//! candle's `QMatMul`; norms and biases are dequantised to f32. Every shape is checked
//! against the [`Config`], so a file whose tensors do not fit fails here, with the tensor
//! named.

use std::sync::Arc;

use candle_core::quantized::{gguf_file, GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Result};

use super::{bail, Config};
use crate::quant::{Format, Isa, QMatrix};

/// A weight matrix: the file's blocks through our kernels when [`crate::quant`] has them
/// (Q4_1, Q5_0, Q8_0, Q4_K, Q6_K), anything else through candle.
#[derive(Debug, Clone)]
pub(super) enum Linear {
    Own(Arc<QMatrix>),
    Candle {
        mm: QMatMul,
        rows: usize,
        cols: usize,
    },
}

impl Linear {
    /// The tensor `name`: ours read straight from the file into one buffer (no candle
    /// tensor on the way, so load does not hold two copies of it), else candle's;
    /// interleaved for `isa` ([`QMatrix::interleave`]).
    fn load<R: std::io::Seek + std::io::Read>(
        ct: &gguf_file::Content,
        reader: &mut R,
        name: &str,
        isa: Isa,
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
                let mut data = crate::quant::pages::zeroed(rows * f.row_bytes(cols));
                let at = ct.tensor_data_offset.saturating_add(info.offset);
                reader
                    .seek(std::io::SeekFrom::Start(at))
                    .and_then(|_| reader.read_exact(&mut data))
                    .map_err(|e| err(&e))?;
                let m = QMatrix::new(f, rows, cols, data).map_err(|e| err(&e))?;
                let m = m.interleave(isa);
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

    pub(super) fn rows(&self) -> usize {
        match self {
            Self::Own(m) => m.rows(),
            Self::Candle { rows, .. } => *rows,
        }
    }

    pub(super) fn cols(&self) -> usize {
        match self {
            Self::Own(m) => m.cols(),
            Self::Candle { cols, .. } => *cols,
        }
    }
}

/// The token embedding: quantised rows dequantised on lookup, or a dequantised f32 table.
#[derive(Debug, Clone)]
pub(super) enum Embedding {
    Own(Arc<QMatrix>),
    F32 { table: Arc<Vec<f32>>, cols: usize },
}

/// The q, k and v projections: three matrices, or Phi-3's one (`attn_qkv.weight`) whose
/// rows are q's, then k's, then v's (llama.cpp's `build_qkv` views it so).
#[derive(Debug)]
pub(super) enum Qkv {
    Split([Linear; 3]),
    Fused(Linear),
}

/// The feed-forward block's gate and up projections: two matrices, or Phi-3's one
/// (`ffn_up.weight`, `2 * feed_forward_length` rows) whose first half of rows is the gate
/// and second half the up projection (llama.cpp's `LLM_FFN_SWIGLU` on an up without a
/// gate: `silu(first half) * second half`, as Hugging Face's `gate_up_proj.chunk(2)`).
#[derive(Debug)]
pub(super) enum GateUp {
    Split { gate: Linear, up: Linear },
    Fused(Linear),
}

impl GateUp {
    /// The feed-forward width.
    pub(super) fn ffn(&self) -> usize {
        match self {
            GateUp::Split { gate, .. } => gate.rows(),
            GateUp::Fused(m) => m.rows() / 2,
        }
    }
}

#[derive(Debug)]
pub(super) struct Layer {
    pub(super) attn_norm: Vec<f32>,
    pub(super) qkv: Qkv,
    /// `attn_q.bias`, `attn_k.bias`, `attn_v.bias` (Qwen2), when the file has them.
    pub(super) bias: Option<[Vec<f32>; 3]>,
    /// `attn_q_norm`, `attn_k_norm` (Qwen3, Gemma 3): RMS norms of each head of q and k.
    pub(super) qk_norm: Option<[Vec<f32>; 2]>,
    pub(super) wo: Linear,
    pub(super) ffn_norm: Vec<f32>,
    pub(super) gate_up: GateUp,
    pub(super) down: Linear,
    /// `post_attention_norm`, `post_ffw_norm` (Gemma 3): RMS norms of the attention's and
    /// the FFN's outputs before they are added to the residual.
    pub(super) post_norm: Option<[Vec<f32>; 2]>,
}

#[derive(Debug)]
pub(super) struct Weights {
    pub(super) cfg: Config,
    pub(super) embed: Embedding,
    pub(super) layers: Vec<Layer>,
    pub(super) norm: Vec<f32>,
    pub(super) output: Linear,
    /// `1 / base^(2i / rope_dim)` for each pair RoPE turns (`/ rope_scaling_factor`, and
    /// `/ factor[i]` where the file has per-pair factors: Llama 3's `rope_freqs`, or
    /// Phi-3's long or short ones, [`Weights::rope_factors`]).
    pub(super) inv_freq: Vec<f32>,
    /// The file's per-pair factors, kept so that [`Weights::set_context_length`] can
    /// pick again.
    pub(super) rope: RopeFactors,
    /// The same for the local layers' base, unscaled (empty without local layers).
    pub(super) inv_freq_local: Vec<f32>,
}

impl Weights {
    /// Read the tensors of the model `cfg` describes from `reader`.
    pub(super) fn load<R: std::io::Seek + std::io::Read>(
        ct: &gguf_file::Content,
        reader: &mut R,
        cfg: Config,
        isa: Isa,
    ) -> Result<Self> {
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

        // An embedding that is not also the output is only looked up: not interleaved.
        let tied = !ct.tensor_infos.contains_key("output.weight");
        let embd_isa = if tied { isa } else { Isa::Scalar };
        let embd_linear = Linear::load(ct, reader, "token_embd.weight", embd_isa)?;
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
            Linear::load(ct, reader, "output.weight", isa)?
        } else {
            embd_linear
        };
        let dim = cfg.hidden_size;
        let kv = cfg.kv_dim();
        let qd = cfg.q_dim();
        let hd = cfg.head_dim;
        let gemma = cfg.arch.gemma();
        let norm = vector(
            tensor(reader, "output_norm.weight")?,
            "output_norm.weight",
            dim,
        )?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("blk.{i}");
            let has = |n: &str| ct.tensor_infos.contains_key(&format!("{p}.{n}"));
            let (fused_qkv, split_ffn) = (has("attn_qkv.weight"), has("ffn_gate.weight"));
            let mut lin = |n: &str| Linear::load(ct, reader, &format!("{p}.{n}"), isa);
            let qkv = if fused_qkv {
                Qkv::Fused(lin("attn_qkv.weight")?)
            } else {
                Qkv::Split([
                    lin("attn_q.weight")?,
                    lin("attn_k.weight")?,
                    lin("attn_v.weight")?,
                ])
            };
            let wo = lin("attn_output.weight")?;
            let gate_up = if split_ffn {
                GateUp::Split {
                    gate: lin("ffn_gate.weight")?,
                    up: lin("ffn_up.weight")?,
                }
            } else {
                GateUp::Fused(lin("ffn_up.weight")?)
            };
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
            let qk_norm = if cfg.arch.qk_norm() {
                Some([
                    vec_of("attn_q_norm.weight", hd)?,
                    vec_of("attn_k_norm.weight", hd)?,
                ])
            } else {
                None
            };
            let post_norm = if gemma {
                Some([
                    vec_of("post_attention_norm.weight", dim)?,
                    vec_of("post_ffw_norm.weight", dim)?,
                ])
            } else {
                None
            };
            layers.push(Layer {
                attn_norm: vec_of("attn_norm.weight", dim)?,
                ffn_norm: vec_of("ffn_norm.weight", dim)?,
                qkv,
                bias,
                qk_norm,
                wo,
                gate_up,
                down,
                post_norm,
            });
        }
        for (i, l) in layers.iter().enumerate() {
            let ffn = l.gate_up.ffn();
            let mut want = Vec::new();
            match &l.qkv {
                Qkv::Split([wq, wk, wv]) => want.extend([
                    ("attn_q", wq, qd, dim),
                    ("attn_k", wk, kv, dim),
                    ("attn_v", wv, kv, dim),
                ]),
                Qkv::Fused(m) => want.push(("attn_qkv", m, qd + 2 * kv, dim)),
            }
            want.push(("attn_output", &l.wo, dim, qd));
            match &l.gate_up {
                GateUp::Split { gate, up } => {
                    want.extend([("ffn_gate", gate, ffn, dim), ("ffn_up", up, ffn, dim)])
                }
                GateUp::Fused(m) => want.push(("ffn_up", m, 2 * ffn, dim)),
            }
            want.push(("ffn_down", &l.down, dim, ffn));
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
        let rope = RopeFactors::load(ct, reader, &cfg)?;
        let inv_freq_local = rope.inv_freq_local(&cfg);
        let mut w = Self {
            cfg,
            embed,
            layers,
            norm,
            output,
            inv_freq: Vec::new(),
            inv_freq_local,
            rope,
        };
        w.inv_freq = w.rope.inv_freq(&w.cfg);
        Ok(w)
    }

    pub(super) fn rope_factors(&self) -> Option<&[f32]> {
        self.rope.factors(&self.cfg)
    }

    /// Runs with a context of `n` positions at most (no more than the file's): positions
    /// past it are refused, and a LongRoPE file picks its factors by it.
    pub(super) fn set_context_length(&mut self, n: usize) {
        self.cfg.context_length = n;
        self.inv_freq = self.rope.inv_freq(&self.cfg);
    }
}

/// The per-pair RoPE factors a file may carry: Llama 3's `rope_freqs.weight`, or Phi-3's
/// LongRoPE pair (`rope_factors_long.weight`, `rope_factors_short.weight`), of which the
/// context length picks one. Read on the host, checked; shared with [`crate::graph`].
#[derive(Debug, Clone, Default)]
pub(crate) struct RopeFactors {
    /// Llama 3's `rope_freqs.weight`.
    rope_freqs: Option<Vec<f32>>,
    /// Phi-3's long and short factors, kept so that the context length can pick again.
    long_short: Option<[Vec<f32>; 2]>,
}

impl RopeFactors {
    /// Read and check the factors of the model `cfg` describes (none where the file has
    /// none).
    pub(crate) fn load<R: std::io::Seek + std::io::Read>(
        ct: &gguf_file::Content,
        reader: &mut R,
        cfg: &Config,
    ) -> Result<Self> {
        let cpu = Device::Cpu;
        let rd = cfg.rope_dim;
        let mut factors = |name: &str| -> Result<Option<Vec<f32>>> {
            if !ct.tensor_infos.contains_key(name) {
                return Ok(None);
            }
            let q = ct
                .tensor(reader, name, &cpu)
                .map_err(|e| candle_core::Error::Msg(format!("GGUF tensor `{name}`: {e}")))?;
            let f: Vec<f32> = q.dequantize(&cpu)?.flatten_all()?.to_vec1()?;
            if f.len() != rd / 2 {
                return bail(format!(
                    "GGUF tensor `{name}` has {} values, expected {}",
                    f.len(),
                    rd / 2
                ));
            }
            if let Some(bad) = f.iter().find(|f| !(**f > 0.0 && f.is_finite())) {
                return bail(format!(
                    "GGUF tensor `{name}` holds {bad}; RoPE factors must be positive"
                ));
            }
            Ok(Some(f))
        };
        // Llama 3.1 / 3.2's RoPE scaling: the converter stores one factor per pair, and
        // llama.cpp divides that pair's angle by it (`rope_freqs.weight`, ggml's
        // `freq_factors`).
        let rope_freqs = factors("rope_freqs.weight")?;
        // Phi-3's LongRoPE: two such sets, of which the context length picks one.
        let long_short = match (
            factors("rope_factors_long.weight")?,
            factors("rope_factors_short.weight")?,
        ) {
            (Some(l), Some(s)) => Some([l, s]),
            (None, None) => None,
            (Some(_), None) => return bail("GGUF tensor `rope_factors_short.weight` is missing (the file has `rope_factors_long.weight`)".into()),
            (None, Some(_)) => return bail("GGUF tensor `rope_factors_long.weight` is missing (the file has `rope_factors_short.weight`)".into()),
        };
        if long_short.is_some() && cfg.rope_original_context.is_none() {
            return bail(format!(
                "GGUF metadata `{}.rope.scaling.original_context_length` is missing; it picks between `rope_factors_long.weight` and `rope_factors_short.weight`",
                cfg.arch.name()
            ));
        }
        Ok(Self {
            rope_freqs,
            long_short,
        })
    }

    /// The per-pair factors the global layers' angles are divided by: Llama 3's
    /// `rope_freqs`; or Phi-3's long ones when `cfg`'s context length is past the
    /// original context, else its short ones (llama.cpp's `get_rope_factors`, which
    /// `rope_freqs` also wins).
    pub(crate) fn factors(&self, cfg: &Config) -> Option<&[f32]> {
        if let Some(f) = &self.rope_freqs {
            return Some(f);
        }
        let [long, short] = self.long_short.as_ref()?;
        let long_ctx = cfg
            .rope_original_context
            .is_some_and(|o| cfg.context_length > o);
        Some(if long_ctx { long } else { short })
    }

    /// The global layers' `1 / base^(2i / rope_dim)` per pair, `/ rope_scaling_factor`
    /// and `/ factor[i]` where the file has factors.
    pub(crate) fn inv_freq(&self, cfg: &Config) -> Vec<f32> {
        let mut f = base_inv_freq(cfg.rope_theta, cfg.rope_dim, cfg.rope_scaling_factor);
        if let Some(d) = self.factors(cfg) {
            for (f, d) in f.iter_mut().zip(d) {
                *f /= d;
            }
        }
        f
    }

    /// The same for the local layers' base, unscaled (empty without local layers).
    pub(crate) fn inv_freq_local(&self, cfg: &Config) -> Vec<f32> {
        match &cfg.sliding {
            Some(s) => base_inv_freq(s.rope_theta, cfg.rope_dim, 1.0),
            None => Vec::new(),
        }
    }
}

/// `1 / base^(2i / rope_dim) / scale` for each pair `i` RoPE turns (ggml's `theta_scale`).
fn base_inv_freq(base: f32, rope_dim: usize, scale: f32) -> Vec<f32> {
    (0..rope_dim)
        .step_by(2)
        .map(|i| 1f32 / base.powf(i as f32 / rope_dim as f32) / scale)
        .collect()
}
