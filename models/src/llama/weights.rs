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
                let mut data = vec![0u8; rows * f.row_bytes(cols)];
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

#[derive(Debug)]
pub(super) struct Layer {
    pub(super) attn_norm: Vec<f32>,
    pub(super) wq: Linear,
    pub(super) wk: Linear,
    pub(super) wv: Linear,
    /// `attn_q.bias`, `attn_k.bias`, `attn_v.bias` (Qwen2), when the file has them.
    pub(super) bias: Option<[Vec<f32>; 3]>,
    /// `attn_q_norm`, `attn_k_norm` (Qwen3, Gemma 3): RMS norms of each head of q and k.
    pub(super) qk_norm: Option<[Vec<f32>; 2]>,
    pub(super) wo: Linear,
    pub(super) ffn_norm: Vec<f32>,
    pub(super) gate: Linear,
    pub(super) up: Linear,
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
    /// `1 / base^(2i / head_dim)` for each pair of a head (`/ rope_scaling_factor`, and
    /// `/ rope_freqs[i]` where the file has Llama 3's per-pair factors).
    pub(super) inv_freq: Vec<f32>,
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
            let mut lin = |n: &str| Linear::load(ct, reader, &format!("{p}.{n}"), isa);
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
        let mut inv_freq = inv_freq(cfg.rope_theta, cfg.rope_scaling_factor);
        // Llama 3.1 / 3.2's RoPE scaling: the converter stores one factor per pair, and
        // llama.cpp divides that pair's angle by it (`rope_freqs.weight`, ggml's
        // `freq_factors`).
        const ROPE_FREQS: &str = "rope_freqs.weight";
        if ct.tensor_infos.contains_key(ROPE_FREQS) {
            let factors = vector(tensor(reader, ROPE_FREQS)?, ROPE_FREQS, hd / 2)?;
            if let Some(bad) = factors.iter().find(|f| !(**f > 0.0 && f.is_finite())) {
                return bail(format!(
                    "GGUF tensor `{ROPE_FREQS}` holds {bad}; RoPE factors must be positive"
                ));
            }
            for (f, d) in inv_freq.iter_mut().zip(&factors) {
                *f /= d;
            }
        }
        Ok(Self {
            cfg,
            embed,
            layers,
            norm,
            output,
            inv_freq,
            inv_freq_local,
        })
    }
}
