//! GGUF tensors -> [`GraphWeights`] on a candle device: every matrix as a `QMatMul` (the
//! file's type as stored; the runtime requantises Q4_1 / Q5_x to Q8_0 first on the CPU),
//! the embedding kept quantised (rows dequantised per lookup), norms and biases as f32
//! vectors. Shapes are checked against the [`Config`] that formwork's CPU file reads, so
//! a file whose tensors do not fit fails here with the tensor named.

use std::sync::Arc;

use candle_core::quantized::{gguf_file, QMatMul, QTensor};
use candle_core::{Device, Result, Tensor};

use crate::llama::{Config, RopeFactors};

fn bail<T>(msg: String) -> Result<T> {
    Err(candle_core::Error::Msg(msg))
}

/// A weight matrix `(rows, cols)`: `y = x W^T`.
#[derive(Debug, Clone)]
pub(super) struct Linear {
    pub(super) mm: QMatMul,
    pub(super) rows: usize,
    pub(super) cols: usize,
}

/// The q, k and v projections: three matrices, or Phi-3's one (`attn_qkv.weight`) whose
/// rows are q's, then k's, then v's.
#[derive(Debug)]
pub(super) enum Qkv {
    Split([Linear; 3]),
    Fused(Linear),
}

/// Gate and up: two matrices, or Phi-3's one `ffn_up.weight` (gate rows, then up rows).
#[derive(Debug)]
pub(super) enum GateUp {
    Split { gate: Linear, up: Linear },
    Fused(Linear),
}

#[derive(Debug)]
pub(super) struct Layer {
    pub(super) attn_norm: Tensor,
    pub(super) qkv: Qkv,
    /// `attn_q.bias`, `attn_k.bias`, `attn_v.bias` (Qwen2).
    pub(super) bias: Option<[Tensor; 3]>,
    /// `attn_q_norm`, `attn_k_norm` (Qwen3, Gemma 3), per head.
    pub(super) qk_norm: Option<[Tensor; 2]>,
    pub(super) wo: Linear,
    pub(super) ffn_norm: Tensor,
    pub(super) gate_up: GateUp,
    /// The feed-forward width.
    pub(super) ffn: usize,
    pub(super) down: Linear,
    /// `post_attention_norm`, `post_ffw_norm` (Gemma).
    pub(super) post_norm: Option<[Tensor; 2]>,
}

/// Every weight of the model on one device, shared by all snapshots.
#[derive(Debug)]
pub(crate) struct GraphWeights {
    pub(super) cfg: Config,
    pub(super) device: Device,
    /// `token_embd.weight`, quantised.
    pub(super) embed: Arc<QTensor>,
    pub(super) layers: Vec<Layer>,
    pub(super) norm: Tensor,
    pub(super) output: QMatMul,
    pub(super) rope: RopeFactors,
    /// The global layers' inverse frequencies (with the file's factors), on the host.
    pub(super) inv_freq: Vec<f32>,
    /// The local layers' (empty without local layers).
    pub(super) inv_freq_local: Vec<f32>,
}

impl GraphWeights {
    /// Read the tensors of the model `cfg` describes onto `device`.
    pub(super) fn load<R: std::io::Seek + std::io::Read>(
        ct: &gguf_file::Content,
        reader: &mut R,
        cfg: Config,
        device: &Device,
        dequantize: bool,
    ) -> Result<Self> {
        let matmul = |q: QTensor| -> Result<QMatMul> {
            if dequantize {
                Ok(QMatMul::Tensor(q.dequantize(device)?))
            } else {
                QMatMul::from_qtensor(q)
            }
        };
        let qtensor = |reader: &mut R, name: &str| -> Result<QTensor> {
            if !ct.tensor_infos.contains_key(name) {
                return bail(format!("GGUF tensor `{name}` is missing"));
            }
            ct.tensor(reader, name, device)
                .map_err(|e| candle_core::Error::Msg(format!("GGUF tensor `{name}`: {e}")))
        };
        let linear = |reader: &mut R, name: &str, rows: usize, cols: usize| -> Result<Linear> {
            let q = qtensor(reader, name)?;
            let dims = q.shape().dims().to_vec();
            if dims != [rows, cols] {
                return bail(format!(
                    "GGUF tensor `{name}` is {dims:?}, expected [{rows}, {cols}]"
                ));
            }
            Ok(Linear {
                mm: matmul(q)?,
                rows,
                cols,
            })
        };
        let vector = |reader: &mut R, name: &str, len: usize| -> Result<Tensor> {
            let t = qtensor(reader, name)?.dequantize(device)?.flatten_all()?;
            if t.elem_count() != len {
                return bail(format!(
                    "GGUF tensor `{name}` has {} values, expected {len}",
                    t.elem_count()
                ));
            }
            Ok(t)
        };
        let dim = cfg.hidden_size;
        let (qd, kvd, hd) = (cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
        let embed = qtensor(reader, "token_embd.weight")?;
        if embed.shape().dims() != [cfg.vocab_size, dim] {
            return bail(format!(
                "GGUF tensor `token_embd.weight` is {:?}, expected [{}, {dim}]",
                embed.shape().dims(),
                cfg.vocab_size
            ));
        }
        let embed = Arc::new(embed);
        let output = if ct.tensor_infos.contains_key("output.weight") {
            linear(reader, "output.weight", cfg.vocab_size, dim)?.mm
        } else if dequantize {
            QMatMul::Tensor(embed.dequantize(device)?)
        } else {
            QMatMul::from_arc(embed.clone())?
        };
        let norm = vector(reader, "output_norm.weight", dim)?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("blk.{i}");
            let name = |n: &str| format!("{p}.{n}");
            let has = |n: &str| ct.tensor_infos.contains_key(&name(n));
            let qkv = if has("attn_qkv.weight") {
                Qkv::Fused(linear(reader, &name("attn_qkv.weight"), qd + 2 * kvd, dim)?)
            } else {
                Qkv::Split([
                    linear(reader, &name("attn_q.weight"), qd, dim)?,
                    linear(reader, &name("attn_k.weight"), kvd, dim)?,
                    linear(reader, &name("attn_v.weight"), kvd, dim)?,
                ])
            };
            let wo = linear(reader, &name("attn_output.weight"), dim, qd)?;
            // The feed-forward width is the file's: `ffn_down` is dim x ffn.
            let ffn = match ct.tensor_infos.get(&name("ffn_down.weight")) {
                Some(info) => *info.shape.dims().last().unwrap_or(&0),
                None => {
                    return bail(format!(
                        "GGUF tensor `{}` is missing",
                        name("ffn_down.weight")
                    ))
                }
            };
            let gate_up = if has("ffn_gate.weight") {
                GateUp::Split {
                    gate: linear(reader, &name("ffn_gate.weight"), ffn, dim)?,
                    up: linear(reader, &name("ffn_up.weight"), ffn, dim)?,
                }
            } else {
                GateUp::Fused(linear(reader, &name("ffn_up.weight"), 2 * ffn, dim)?)
            };
            let down = linear(reader, &name("ffn_down.weight"), dim, ffn)?;
            let bias = if has("attn_q.bias") {
                Some([
                    vector(reader, &name("attn_q.bias"), qd)?,
                    vector(reader, &name("attn_k.bias"), kvd)?,
                    vector(reader, &name("attn_v.bias"), kvd)?,
                ])
            } else {
                None
            };
            let qk_norm = if cfg.arch.qk_norm() {
                Some([
                    vector(reader, &name("attn_q_norm.weight"), hd)?,
                    vector(reader, &name("attn_k_norm.weight"), hd)?,
                ])
            } else {
                None
            };
            let post_norm = if cfg.arch.gemma() {
                Some([
                    vector(reader, &name("post_attention_norm.weight"), dim)?,
                    vector(reader, &name("post_ffw_norm.weight"), dim)?,
                ])
            } else {
                None
            };
            layers.push(Layer {
                attn_norm: vector(reader, &name("attn_norm.weight"), dim)?,
                ffn_norm: vector(reader, &name("ffn_norm.weight"), dim)?,
                qkv,
                bias,
                qk_norm,
                wo,
                gate_up,
                ffn,
                down,
                post_norm,
            });
        }
        let rope = RopeFactors::load(ct, reader, &cfg)?;
        let inv_freq = rope.inv_freq(&cfg);
        let inv_freq_local = rope.inv_freq_local(&cfg);
        Ok(Self {
            cfg,
            device: device.clone(),
            embed,
            layers,
            norm,
            output,
            rope,
            inv_freq,
            inv_freq_local,
        })
    }

    /// Runs with a context of `n` positions at most; a LongRoPE file picks its factors
    /// by it (as formwork's CPU file does).
    pub(super) fn set_context_length(&mut self, n: usize) {
        self.cfg.context_length = n;
        self.inv_freq = self.rope.inv_freq(&self.cfg);
    }
}
