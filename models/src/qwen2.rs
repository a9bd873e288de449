//! Qwen2 / Qwen2.5 and Qwen3 from a GGUF file, in candle's model-file shape: a `Config`
//! read from the `qwen2.*` or `qwen3.*` metadata, `ModelWeights::from_gguf`,
//! `forward(input, index_pos)` and `clear_kv_cache()`.
//!
//! candle-transformers 0.11.1 has `quantized_qwen2`, and it computes the same thing,
//! but its `ModelWeights` is not `Clone` and its fields are private, so it cannot give
//! [`crate::runtime::LanguageModel::snapshot`] (the copy of the KV state that prefix
//! reuse takes). This file is that model with `Clone`, checked metadata and shapes, the
//! embedding kept quantised (candle's dequantises 151,936 x 896 to f32 at load, 545 MB),
//! RoPE tables that grow on demand instead of covering all 32,768 positions, and a
//! forward that may roll the cache back to an earlier `index_pos`.
//!
//! One layer, as llama.cpp computes it (`llm_build_qwen2`, `llm_build_qwen3`):
//!
//! ```text
//! x = embed(ids)
//! per layer:  h = rms(x, attn_norm)
//!             q, k, v = h Wq + bq, h Wk + bk, h Wv + bv   (GQA: n_kv_head <= n_head; Qwen3: no biases)
//!             q, k = rms(q, q_norm), rms(k, k_norm) per head   (Qwen3 only)
//!             q, k = NeoX RoPE (base {arch}.rope.freq_base)
//!             a = softmax(q k^T / sqrt(head_dim) + causal mask) v
//!             x = x + a Wo
//!             x = x + down(silu(gate(h')) * up(h')),  h' = rms(x, ffn_norm)
//! logits = rms(x_last, output_norm) E^T      (E = output.weight, or token_embd.weight when tied)
//! ```
//!
//! Cloning a `ModelWeights` is a cheap snapshot: the weights are shared (`QMatMul` and
//! `Tensor` hold `Arc`s), and the KV cache is a pair of immutable tensors per layer,
//! replaced (never written in place) by each forward, so a clone keeps the cache it
//! was taken with.

use std::sync::Arc;

use candle_core::quantized::{gguf_file, QMatMul, QTensor};
use candle_core::{DType, Device, IndexOp, Module, Result, Tensor};

use crate::gemma3::{attention_mask, load_matmul, load_norm, load_qtensor, Rope};

/// Positions the RoPE tables cover at load; they grow on demand up to the context length.
pub const DEFAULT_MAX_SEQ_LEN: usize = 4096;

/// The hyper-parameters of a Qwen2 or Qwen3 model, read from the `{arch}.*` GGUF metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `general.architecture`: `qwen2`, or `qwen3` (per-head q/k norms, no q/k/v biases).
    pub arch: &'static str,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    /// `qwen2.rope.freq_base`, else 10,000 (llama.cpp's default).
    pub rope_theta: f32,
    /// Linear RoPE scaling (`qwen2.rope.scaling.factor` with type `linear`, else 1).
    pub rope_scaling_factor: f32,
    /// `qwen2.context_length`: forward refuses positions past it.
    pub context_length: usize,
}

impl Config {
    /// The architectures this file reads.
    pub const ARCHS: [&'static str; 2] = ["qwen2", "qwen3"];

    /// Whether each head of q and k is RMS-normed before RoPE (Qwen3), with no q/k/v
    /// biases.
    pub fn qk_norm(&self) -> bool {
        self.arch == "qwen3"
    }

    /// Reads the config from GGUF metadata. Errors name the missing or malformed key.
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Self> {
        let name = match ct.metadata.get("general.architecture") {
            Some(v) => v.to_string()?.clone(),
            None => candle_core::bail!("GGUF metadata `general.architecture`: missing"),
        };
        let Some(&arch) = Self::ARCHS.iter().find(|a| **a == name) else {
            candle_core::bail!(
                "GGUF metadata `general.architecture`: `{name}`, this model file reads `qwen2` and `qwen3`"
            );
        };
        let key = |k: &str| format!("{arch}.{k}");
        let get = |k: &str| -> Option<&gguf_file::Value> { ct.metadata.get(&key(k)) };
        let wrap = |k: &str, e: candle_core::Error| {
            candle_core::Error::Msg(format!("GGUF metadata `{}`: {e}", key(k)))
        };
        let usize_of = |k: &str| -> Result<usize> {
            match get(k) {
                Some(v) => v.to_u32().map(|v| v as usize).map_err(|e| wrap(k, e)),
                None => candle_core::bail!("GGUF metadata `{}`: missing", key(k)),
            }
        };
        let opt_f32 = |k: &str| -> Result<Option<f32>> {
            get(k)
                .map(|v| v.to_f32().map_err(|e| wrap(k, e)))
                .transpose()
        };

        let hidden_size = usize_of("embedding_length")?;
        let num_hidden_layers = usize_of("block_count")?;
        let num_attention_heads = usize_of("attention.head_count")?;
        let num_key_value_heads = usize_of("attention.head_count_kv")?;
        if num_attention_heads == 0 || hidden_size % num_attention_heads != 0 {
            candle_core::bail!(
                "GGUF metadata `{arch}.attention.head_count`: {num_attention_heads} does not divide `{arch}.embedding_length` {hidden_size}"
            );
        }
        if num_key_value_heads == 0 || num_attention_heads % num_key_value_heads != 0 {
            candle_core::bail!(
                "GGUF metadata `{arch}.attention.head_count_kv`: {num_key_value_heads} does not divide `{arch}.attention.head_count` {num_attention_heads}"
            );
        }
        let head_dim = match get("attention.key_length") {
            Some(_) => usize_of("attention.key_length")?,
            None => hidden_size / num_attention_heads,
        };
        if head_dim % 2 != 0 {
            candle_core::bail!("GGUF metadata `{arch}.attention.key_length`: {head_dim} is odd; RoPE needs an even head size");
        }
        let rms_norm_eps = match opt_f32("attention.layer_norm_rms_epsilon")? {
            Some(e) => e as f64,
            None => candle_core::bail!(
                "GGUF metadata `{arch}.attention.layer_norm_rms_epsilon`: missing"
            ),
        };
        let scaling = match get("rope.scaling.type") {
            Some(v) => Some(
                v.to_string()
                    .map_err(|e| wrap("rope.scaling.type", e))?
                    .clone(),
            ),
            None => None,
        };
        let rope_scaling_factor = match scaling.as_deref() {
            None | Some("none") => 1.0,
            Some("linear") => match opt_f32("rope.scaling.factor")? {
                Some(f) if f > 0.0 => f,
                _ => 1.0,
            },
            Some(other) => candle_core::bail!(
                "GGUF metadata `{arch}.rope.scaling.type`: `{other}` is not supported (formwork runs `none` and `linear`)"
            ),
        };
        let vocab_size = match ct.tensor_infos.get("token_embd.weight") {
            Some(info) => info.shape.dims()[0],
            None => candle_core::bail!("GGUF tensor `token_embd.weight`: missing"),
        };
        Ok(Self {
            arch,
            vocab_size,
            hidden_size,
            intermediate_size: usize_of("feed_forward_length")?,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps,
            rope_theta: opt_f32("rope.freq_base")?.unwrap_or(10_000.0),
            rope_scaling_factor,
            context_length: usize_of("context_length")?,
        })
    }
}

/// Load-time choices. `Default` is what `from_gguf` uses.
#[derive(Debug, Clone)]
pub struct Options {
    /// Positions the RoPE tables cover at load (they grow on demand up to the
    /// context length). Clamped to `context_length`.
    pub max_seq_len: usize,
    /// Requantise Q4_1, Q5_0 and Q5_1 weights to Q8_0 at load on CPU: candle has
    /// no SIMD kernel for those three, and Q8_0 holds their values almost exactly.
    pub requantize: bool,
    /// Dequantise every weight matrix to f32 at load, so matmuls run in f32 without
    /// quantising activations. Slow and 4-8x larger; for tests that need results
    /// independent of the order of evaluation (chunked against full prefill).
    pub dequantize: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            max_seq_len: DEFAULT_MAX_SEQ_LEN,
            requantize: true,
            dequantize: false,
        }
    }
}

#[derive(Debug, Clone)]
struct Layer {
    attn_q: QMatMul,
    attn_k: QMatMul,
    attn_v: QMatMul,
    attn_o: QMatMul,
    /// `attn_q.bias`, `attn_k.bias`, `attn_v.bias` (Qwen2).
    bias: Option<[Tensor; 3]>,
    /// `attn_q_norm.weight`, `attn_k_norm.weight` (Qwen3).
    qk_norm: Option<[Tensor; 2]>,
    attn_norm: Tensor,
    ffn_norm: Tensor,
    ffn_gate: QMatMul,
    ffn_up: QMatMul,
    ffn_down: QMatMul,
    /// `[1, n_kv_head, positions, head_dim]` keys and values of positions `0..positions`.
    kv: Option<(Tensor, Tensor)>,
}

/// A Qwen2 or Qwen3 model with its KV cache. See the module doc.
#[derive(Debug, Clone)]
pub struct ModelWeights {
    cfg: Config,
    /// `token_embd.weight`, kept quantised: rows are dequantised per lookup.
    embed: Arc<QTensor>,
    layers: Vec<Layer>,
    output_norm: Tensor,
    output: QMatMul,
    rope: Rope,
    /// Positions held in the KV cache.
    cache_len: usize,
    device: Device,
}

impl ModelWeights {
    /// Loads with `Options::default()`.
    pub fn from_gguf<R: std::io::Seek + std::io::Read>(
        ct: gguf_file::Content,
        reader: &mut R,
        device: &Device,
    ) -> Result<Self> {
        Self::from_gguf_with(ct, reader, device, &Options::default())
    }

    pub fn from_gguf_with<R: std::io::Seek + std::io::Read>(
        ct: gguf_file::Content,
        reader: &mut R,
        device: &Device,
        opts: &Options,
    ) -> Result<Self> {
        let cfg = Config::from_gguf(&ct)?;
        let hidden = cfg.hidden_size;
        let hd = cfg.head_dim;
        let q_dim = cfg.num_attention_heads * hd;
        let kv_dim = cfg.num_key_value_heads * hd;
        let ffn = cfg.intermediate_size;
        let (rq, dq) = (opts.requantize, opts.dequantize);

        let embed = Arc::new(load_qtensor(&ct, reader, "token_embd.weight", device, rq)?);
        if embed.shape().dims() != [cfg.vocab_size, hidden] {
            candle_core::bail!(
                "GGUF tensor `token_embd.weight`: shape {:?}, expected [{}, {hidden}]",
                embed.shape().dims(),
                cfg.vocab_size
            );
        }
        let output = if ct.tensor_infos.contains_key("output.weight") {
            load_matmul(
                &ct,
                reader,
                "output.weight",
                (cfg.vocab_size, hidden),
                device,
                rq,
                dq,
            )?
        } else if dq {
            QMatMul::Tensor(embed.dequantize(device)?)
        } else {
            QMatMul::from_arc(embed.clone())?
        };
        let output_norm = load_norm(&ct, reader, "output_norm.weight", hidden, device)?;

        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("blk.{i}");
            let mm = |r: &mut R, name: &str, shape| {
                load_matmul(&ct, r, &format!("{p}.{name}.weight"), shape, device, rq, dq)
            };
            let attn_q = mm(reader, "attn_q", (q_dim, hidden))?;
            let attn_k = mm(reader, "attn_k", (kv_dim, hidden))?;
            let attn_v = mm(reader, "attn_v", (kv_dim, hidden))?;
            let attn_o = mm(reader, "attn_output", (hidden, q_dim))?;
            let ffn_gate = mm(reader, "ffn_gate", (ffn, hidden))?;
            let ffn_up = mm(reader, "ffn_up", (ffn, hidden))?;
            let ffn_down = mm(reader, "ffn_down", (hidden, ffn))?;
            // Norm weights and biases are 1-d f32 vectors: the same loader checks both.
            let vector =
                |r: &mut R, name: &str, len| load_norm(&ct, r, &format!("{p}.{name}"), len, device);
            let (bias, qk_norm) = if cfg.qk_norm() {
                let norms = [
                    vector(reader, "attn_q_norm.weight", hd)?,
                    vector(reader, "attn_k_norm.weight", hd)?,
                ];
                (None, Some(norms))
            } else {
                let biases = [
                    vector(reader, "attn_q.bias", q_dim)?,
                    vector(reader, "attn_k.bias", kv_dim)?,
                    vector(reader, "attn_v.bias", kv_dim)?,
                ];
                (Some(biases), None)
            };
            layers.push(Layer {
                attn_q,
                attn_k,
                attn_v,
                attn_o,
                bias,
                qk_norm,
                attn_norm: vector(reader, "attn_norm.weight", hidden)?,
                ffn_norm: vector(reader, "ffn_norm.weight", hidden)?,
                ffn_gate,
                ffn_up,
                ffn_down,
                kv: None,
            });
        }

        let rope_len = opts.max_seq_len.clamp(1, cfg.context_length.max(1));
        let rope = Rope::new(
            hd,
            cfg.rope_theta,
            cfg.rope_scaling_factor,
            rope_len,
            device,
        )?;
        Ok(Self {
            cfg,
            embed,
            layers,
            output_norm,
            output,
            rope,
            cache_len: 0,
            device: device.clone(),
        })
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Positions held in the KV cache: the next `forward` continues at this index.
    pub fn cache_len(&self) -> usize {
        self.cache_len
    }

    pub fn clear_kv_cache(&mut self) {
        for l in self.layers.iter_mut() {
            l.kv = None;
        }
        self.cache_len = 0;
    }

    /// Forgets the cached positions from `len` on, so the next forward may start at `len`.
    fn truncate_kv_cache(&mut self, len: usize) -> Result<()> {
        if len == 0 {
            self.clear_kv_cache();
            return Ok(());
        }
        for l in self.layers.iter_mut() {
            if let Some((k, v)) = &l.kv {
                l.kv = Some((k.narrow(2, 0, len)?, v.narrow(2, 0, len)?));
            }
        }
        self.cache_len = len;
        Ok(())
    }

    fn ensure_rope(&mut self, end: usize) -> Result<()> {
        if end > self.cfg.context_length {
            candle_core::bail!(
                "position {} is past the context length {} (`{}.context_length`)",
                end - 1,
                self.cfg.context_length,
                self.cfg.arch
            );
        }
        if end > self.rope.len() {
            let len = end
                .next_power_of_two()
                .min(self.cfg.context_length)
                .max(end);
            self.rope.build(len, &self.device)?;
        }
        Ok(())
    }

    /// Logits (f32, `[vocab]`) of the last position of `input` (`[1, seq_len]` u32),
    /// whose tokens sit at positions `index_pos..index_pos + seq_len`.
    ///
    /// `index_pos` must not exceed `cache_len()`; a smaller one rolls the cache back
    /// to it first, and 0 starts afresh.
    pub fn forward(&mut self, input: &Tensor, index_pos: usize) -> Result<Tensor> {
        let (b, seq) = input.dims2()?;
        if b != 1 {
            candle_core::bail!(
                "{} forward: batch size {b}, this model runs one sequence (clone it for more)",
                self.cfg.arch
            );
        }
        if seq == 0 {
            candle_core::bail!("{} forward: empty input", self.cfg.arch);
        }
        if index_pos > self.cache_len {
            candle_core::bail!(
                "{} forward: index_pos {index_pos} is past the {} cached positions",
                self.cfg.arch,
                self.cache_len
            );
        }
        if index_pos < self.cache_len {
            self.truncate_kv_cache(index_pos)?;
        }
        let end = index_pos + seq;
        self.ensure_rope(end)?;

        let cfg = &self.cfg;
        let eps = cfg.rms_norm_eps as f32;
        let (n_head, n_kv, hd) = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let rep = n_head / n_kv;
        let scale = 1.0 / (hd as f64).sqrt();

        let mut x = self.embed.embedding(input)?;
        // One causal mask for every layer; none is needed for one token.
        let mask = if seq > 1 {
            Some(attention_mask(seq, index_pos, 0, end, None, &self.device)?)
        } else {
            None
        };

        for layer in self.layers.iter_mut() {
            // Attention block.
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, eps)?;
            let mut q = layer.attn_q.forward(&h)?;
            let mut k = layer.attn_k.forward(&h)?;
            let mut v = layer.attn_v.forward(&h)?;
            if let Some([bq, bk, bv]) = &layer.bias {
                q = q.broadcast_add(bq)?;
                k = k.broadcast_add(bk)?;
                v = v.broadcast_add(bv)?;
            }
            let mut q = q.reshape((1, seq, n_head, hd))?;
            let mut k = k.reshape((1, seq, n_kv, hd))?;
            let v = v.reshape((1, seq, n_kv, hd))?;
            if let Some([qn, kn]) = &layer.qk_norm {
                q = candle_nn::ops::rms_norm(&q.contiguous()?, qn, eps)?;
                k = candle_nn::ops::rms_norm(&k.contiguous()?, kn, eps)?;
            }
            let q = self.rope.apply(&q, index_pos)?;
            let k = self.rope.apply(&k, index_pos)?;
            let q = (q.transpose(1, 2)? * scale)?.contiguous()?;
            let k = k.transpose(1, 2)?.contiguous()?;
            let v = v.transpose(1, 2)?.contiguous()?;
            let (k, v) = match &layer.kv {
                Some((ck, cv)) => (Tensor::cat(&[ck, &k], 2)?, Tensor::cat(&[cv, &v], 2)?),
                None => (k, v),
            };
            layer.kv = Some((k.clone(), v.clone()));
            // GQA without copying K/V: query heads h = g * rep + r share kv head g,
            // so [1, n_head, seq, hd] is [1, n_kv, rep * seq, hd].
            let q = q.reshape((1, n_kv, rep * seq, hd))?;
            let scores = q.matmul(&k.t()?)?;
            let scores = match &mask {
                Some(m) => scores
                    .reshape((1, n_kv, rep, seq, end))?
                    .broadcast_add(m)?
                    .reshape((1, n_kv, rep * seq, end))?,
                None => scores,
            };
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let a = probs
                .matmul(&v)?
                .reshape((1, n_head, seq, hd))?
                .transpose(1, 2)?
                .reshape((1, seq, n_head * hd))?;
            x = (x + layer.attn_o.forward(&a)?)?;

            // Feed-forward block.
            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, eps)?;
            let gate = candle_nn::ops::silu(&layer.ffn_gate.forward(&h)?)?;
            let up = layer.ffn_up.forward(&h)?;
            x = (x + layer.ffn_down.forward(&(gate * up)?)?)?;
        }
        self.cache_len = end;

        let last = x.i((0, seq - 1))?.unsqueeze(0)?;
        let last = candle_nn::ops::rms_norm(&last, &self.output_norm, eps)?;
        self.output.forward(&last)?.squeeze(0)?.to_dtype(DType::F32)
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<ModelWeights>();
}
