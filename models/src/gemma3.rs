//! Gemma 3 (text) from a GGUF file, in candle's model-file shape: a `Config`
//! read from the `gemma3.*` metadata, `ModelWeights::from_gguf`, `forward(input,
//! index_pos)` and `clear_kv_cache()`.
//!
//! formwork carries its own file because `candle_transformers::models::quantized_gemma3`
//! (0.11.1) is not usable as shipped: its MLP uses SiLU where Gemma 3 uses
//! gelu-tanh, it builds 131,072-position RoPE tables on every layer (3.3 GB RSS),
//! a forward of several tokens at `index_pos > 0` fails on a mask dtype mismatch,
//! and its sliding-window layers are unmasked at decode.
//!
//! One layer, as llama.cpp computes it (`llm_build_gemma3`):
//!
//! ```text
//! x = embed(ids) * sqrt(hidden)
//! per layer:  h = rms(x, attn_norm)
//!             q, k, v = h Wq, h Wk, h Wv          (GQA: n_kv_head <= n_head)
//!             q, k = rms(q, q_norm), rms(k, k_norm) per head, then NeoX RoPE
//!               (local layers: base 10,000; every 6th layer is global: base gemma3.rope.freq_base)
//!             a = softmax(q k^T * scale + mask) v  (local layers see the last `sliding_window` positions)
//!             x = x + rms(a Wo, post_attention_norm)
//!             x = x + rms(down(gelu_tanh(gate(h')) * up(h')), post_ffw_norm), h' = rms(x, ffn_norm)
//! logits = rms(x_last, output_norm) E^T      (E = output.weight, or token_embd.weight when tied)
//! ```
//!
//! The norm weights are used as stored: llama.cpp's converter already adds the
//! `1 +` of Gemma's RMSNorm into the GGUF tensors.
//!
//! Cloning a `ModelWeights` is a cheap snapshot: the weights are shared (`Arc`),
//! and the KV cache is a pair of immutable tensors per layer, replaced (never
//! written in place) by each forward, so a clone keeps the cache it was taken with.

use std::sync::Arc;

use candle_core::quantized::{gguf_file, GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, IndexOp, Module, Result, Tensor};

/// Every `sliding_window_pattern`-th layer is global; the others are local.
/// llama.cpp hard-codes 6 for Gemma 3, and the GGUF files carry no key for it.
pub const DEFAULT_SLIDING_WINDOW_PATTERN: usize = 6;
/// RoPE base of the local (sliding-window) layers; Gemma 3 fixes it at 10,000.
pub const DEFAULT_ROPE_LOCAL_BASE: f32 = 10_000.0;
/// Positions the RoPE tables cover at load; they grow on demand up to the context length.
pub const DEFAULT_MAX_SEQ_LEN: usize = 4096;

/// The hyper-parameters of a Gemma 3 text model, read from the `gemma3.*` GGUF metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    /// Positions a local layer sees, itself included (`gemma3.attention.sliding_window`).
    pub sliding_window: usize,
    pub sliding_window_pattern: usize,
    /// RoPE base of the global layers (`gemma3.rope.freq_base`).
    pub rope_theta: f32,
    /// RoPE base of the local layers (`gemma3.rope.freq_base_swa` or
    /// `gemma3.rope.local_freq_base`, else 10,000).
    pub rope_local_base_freq: f32,
    /// Linear RoPE scaling of the global layers (`gemma3.rope.scaling.factor`, else 1).
    pub rope_scaling_factor: f32,
    /// `gemma3.context_length`: forward refuses positions past it.
    pub context_length: usize,
    /// Factor applied to the queries before `q k^T`.
    pub attn_scale: f64,
}

impl Config {
    pub const ARCH: &'static str = "gemma3";

    /// Reads the config from GGUF metadata. Errors name the missing or malformed key.
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Self> {
        let arch = match ct.metadata.get("general.architecture") {
            Some(v) => v.to_string()?.clone(),
            None => candle_core::bail!("GGUF metadata `general.architecture`: missing"),
        };
        if arch != Self::ARCH {
            candle_core::bail!(
                "GGUF metadata `general.architecture`: `{arch}`, this model file reads `gemma3`"
            );
        }
        let get = |key: &str| -> Result<&gguf_file::Value> {
            let key = format!("{}.{key}", Self::ARCH);
            ct.metadata
                .get(&key)
                .ok_or_else(|| candle_core::Error::Msg(format!("GGUF metadata `{key}`: missing")))
        };
        let wrap = |key: &str, e: candle_core::Error| {
            candle_core::Error::Msg(format!("GGUF metadata `{}.{key}`: {e}", Self::ARCH))
        };
        let usize_of = |key: &str| -> Result<usize> {
            get(key)?
                .to_u32()
                .map(|v| v as usize)
                .map_err(|e| wrap(key, e))
        };
        let f32_of = |key: &str| -> Result<f32> { get(key)?.to_f32().map_err(|e| wrap(key, e)) };
        let opt_f32 = |key: &str| -> Result<Option<f32>> {
            match get(key) {
                Ok(v) => v.to_f32().map(Some).map_err(|e| wrap(key, e)),
                Err(_) => Ok(None),
            }
        };

        let hidden_size = usize_of("embedding_length")?;
        let num_hidden_layers = usize_of("block_count")?;
        let num_attention_heads = usize_of("attention.head_count")?;
        let num_key_value_heads = usize_of("attention.head_count_kv")?;
        let head_dim = usize_of("attention.key_length")?;
        let value_length = usize_of("attention.value_length")?;
        if value_length != head_dim {
            candle_core::bail!(
                "GGUF metadata `gemma3.attention.value_length`: {value_length} differs from `gemma3.attention.key_length` {head_dim}"
            );
        }
        if num_key_value_heads == 0 || num_attention_heads % num_key_value_heads != 0 {
            candle_core::bail!(
                "GGUF metadata `gemma3.attention.head_count_kv`: {num_key_value_heads} does not divide `gemma3.attention.head_count` {num_attention_heads}"
            );
        }
        let sliding_window_pattern = match get("attention.sliding_window_pattern") {
            Ok(v) => v
                .to_u32()
                .map_err(|e| wrap("attention.sliding_window_pattern", e))?
                as usize,
            Err(_) => DEFAULT_SLIDING_WINDOW_PATTERN,
        };
        let rope_scaling_factor = match opt_f32("rope.scaling.factor")? {
            Some(f) if f > 0.0 => f,
            _ => 1.0,
        };
        // llama.cpp: 1/sqrt(head_dim), except the 27B model (62 layers), whose
        // query_pre_attn_scalar is hidden_size / num_heads.
        let attn_scale = if num_hidden_layers == 62 {
            1.0 / ((hidden_size / num_attention_heads) as f64).sqrt()
        } else {
            1.0 / (head_dim as f64).sqrt()
        };
        let vocab_size = match ct.tensor_infos.get("token_embd.weight") {
            Some(info) => info.shape.dims()[0],
            None => candle_core::bail!("GGUF tensor `token_embd.weight`: missing"),
        };
        Ok(Self {
            vocab_size,
            hidden_size,
            intermediate_size: usize_of("feed_forward_length")?,
            num_hidden_layers,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: f32_of("attention.layer_norm_rms_epsilon")? as f64,
            sliding_window: usize_of("attention.sliding_window")?,
            sliding_window_pattern,
            rope_theta: f32_of("rope.freq_base")?,
            rope_local_base_freq: match opt_f32("rope.freq_base_swa")? {
                Some(f) => f,
                None => opt_f32("rope.local_freq_base")?.unwrap_or(DEFAULT_ROPE_LOCAL_BASE),
            },
            rope_scaling_factor,
            context_length: usize_of("context_length")?,
            attn_scale,
        })
    }

    /// Whether layer `layer_idx` is local (sliding window) rather than global.
    pub fn is_sliding(&self, layer_idx: usize) -> bool {
        self.sliding_window_pattern == 0 || (layer_idx + 1) % self.sliding_window_pattern != 0
    }
}

/// Load-time choices. `Default` is what `from_gguf` uses.
#[derive(Debug, Clone)]
pub struct Options {
    /// Positions the RoPE tables cover at load (they grow on demand up to the
    /// context length). Clamped to `context_length`.
    pub max_seq_len: usize,
    /// Overrides `gemma3.attention.sliding_window` (tests use a small window).
    pub sliding_window: Option<usize>,
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
            sliding_window: None,
            requantize: true,
            dequantize: false,
        }
    }
}

/// cos/sin tables of NeoX-style RoPE, `[positions, head_dim / 2]` (shared with `qwen2`).
#[derive(Debug, Clone)]
pub(crate) struct Rope {
    inv_freq: Arc<Vec<f32>>,
    cos: Tensor,
    sin: Tensor,
}

impl Rope {
    pub(crate) fn new(
        head_dim: usize,
        base: f32,
        scale: f32,
        len: usize,
        device: &Device,
    ) -> Result<Self> {
        let inv_freq: Vec<f32> = (0..head_dim)
            .step_by(2)
            .map(|i| 1.0 / base.powf(i as f32 / head_dim as f32) / scale)
            .collect();
        let mut rope = Self {
            inv_freq: Arc::new(inv_freq),
            cos: Tensor::zeros((0, head_dim / 2), DType::F32, device)?,
            sin: Tensor::zeros((0, head_dim / 2), DType::F32, device)?,
        };
        rope.build(len, device)?;
        Ok(rope)
    }

    pub(crate) fn len(&self) -> usize {
        self.cos.dim(0).unwrap_or(0)
    }

    pub(crate) fn build(&mut self, len: usize, device: &Device) -> Result<()> {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(len * half);
        let mut sin = Vec::with_capacity(len * half);
        for pos in 0..len {
            for f in self.inv_freq.iter() {
                let theta = pos as f32 * f;
                cos.push(theta.cos());
                sin.push(theta.sin());
            }
        }
        self.cos = Tensor::from_vec(cos, (len, half), device)?;
        self.sin = Tensor::from_vec(sin, (len, half), device)?;
        Ok(())
    }

    /// Applies RoPE to `x` `[batch, seq, heads, head_dim]` at positions `pos..pos+seq`.
    pub(crate) fn apply(&self, x: &Tensor, pos: usize) -> Result<Tensor> {
        let seq = x.dim(1)?;
        let cos = self.cos.narrow(0, pos, seq)?;
        let sin = self.sin.narrow(0, pos, seq)?;
        candle_nn::rotary_emb::rope_thd(&x.contiguous()?, &cos, &sin)
    }
}

#[derive(Debug, Clone)]
struct Layer {
    attn_q: QMatMul,
    attn_k: QMatMul,
    attn_v: QMatMul,
    attn_o: QMatMul,
    q_norm: Tensor,
    k_norm: Tensor,
    attn_norm: Tensor,
    post_attn_norm: Tensor,
    ffn_norm: Tensor,
    post_ffn_norm: Tensor,
    ffn_gate: QMatMul,
    ffn_up: QMatMul,
    ffn_down: QMatMul,
    /// `Some(window)` on local layers.
    sliding_window: Option<usize>,
    /// `[1, n_kv_head, positions, head_dim]` keys and values of positions `0..positions`.
    kv: Option<(Tensor, Tensor)>,
}

/// A Gemma 3 text model with its KV cache. See the module doc.
#[derive(Debug, Clone)]
pub struct ModelWeights {
    cfg: Config,
    /// `token_embd.weight`, kept quantised: rows are dequantised per lookup.
    embed: Arc<QTensor>,
    layers: Vec<Layer>,
    output_norm: Tensor,
    output: QMatMul,
    rope_local: Rope,
    rope_global: Rope,
    /// Positions held in the KV cache.
    cache_len: usize,
    device: Device,
}

/// A tensor as stored, or requantised to Q8_0 on the CPU when `requantize` and candle has no
/// SIMD kernel for its type (shared with `qwen2`).
pub(crate) fn load_qtensor<R: std::io::Seek + std::io::Read>(
    ct: &gguf_file::Content,
    reader: &mut R,
    name: &str,
    device: &Device,
    requantize: bool,
) -> Result<QTensor> {
    let t = ct
        .tensor(reader, name, device)
        .map_err(|e| candle_core::Error::Msg(format!("GGUF tensor `{name}`: {e}")))?;
    let slow_on_cpu = matches!(
        t.dtype(),
        GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1
    );
    if requantize && device.is_cpu() && slow_on_cpu {
        let f = t.dequantize(device)?;
        return QTensor::quantize(&f, GgmlDType::Q8_0);
    }
    Ok(t)
}

/// A weight matrix of shape `(out, in)`; dequantised to f32 when `dequantize` (shared with `qwen2`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn load_matmul<R: std::io::Seek + std::io::Read>(
    ct: &gguf_file::Content,
    reader: &mut R,
    name: &str,
    shape: (usize, usize),
    device: &Device,
    requantize: bool,
    dequantize: bool,
) -> Result<QMatMul> {
    let t = load_qtensor(ct, reader, name, device, requantize)?;
    if t.shape().dims() != [shape.0, shape.1] {
        candle_core::bail!(
            "GGUF tensor `{name}`: shape {:?}, the metadata implies [{}, {}] (out, in)",
            t.shape().dims(),
            shape.0,
            shape.1
        );
    }
    if dequantize {
        return Ok(QMatMul::Tensor(t.dequantize(device)?));
    }
    QMatMul::from_qtensor(t)
}

pub(crate) fn load_norm<R: std::io::Seek + std::io::Read>(
    ct: &gguf_file::Content,
    reader: &mut R,
    name: &str,
    len: usize,
    device: &Device,
) -> Result<Tensor> {
    let t = ct
        .tensor(reader, name, device)
        .map_err(|e| candle_core::Error::Msg(format!("GGUF tensor `{name}`: {e}")))?
        .dequantize(device)?;
    if t.dims() != [len] {
        candle_core::bail!(
            "GGUF tensor `{name}`: shape {:?}, expected [{len}]",
            t.dims()
        );
    }
    Ok(t)
}

/// Additive attention mask `[seq, kv_len]` for queries at `pos..pos+seq` and keys
/// at `kv_start..kv_start+kv_len`: 0 where the key is visible, -inf elsewhere.
pub(crate) fn attention_mask(
    seq: usize,
    pos: usize,
    kv_start: usize,
    kv_len: usize,
    window: Option<usize>,
    device: &Device,
) -> Result<Tensor> {
    let mut m = Vec::with_capacity(seq * kv_len);
    for i in 0..seq {
        let q = pos + i;
        for j in 0..kv_len {
            let k = kv_start + j;
            let visible = k <= q && window.is_none_or(|w| q - k < w);
            m.push(if visible { 0f32 } else { f32::NEG_INFINITY });
        }
    }
    Tensor::from_vec(m, (seq, kv_len), device)
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
        let mut cfg = Config::from_gguf(&ct)?;
        if let Some(w) = opts.sliding_window {
            if w == 0 {
                candle_core::bail!("sliding window override: 0, it must be at least 1");
            }
            cfg.sliding_window = w;
        }
        let hidden = cfg.hidden_size;
        let hd = cfg.head_dim;
        let q_dim = cfg.num_attention_heads * hd;
        let kv_dim = cfg.num_key_value_heads * hd;
        let ffn = cfg.intermediate_size;

        let embed = Arc::new(load_qtensor(
            &ct,
            reader,
            "token_embd.weight",
            device,
            opts.requantize,
        )?);
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
                opts.requantize,
                opts.dequantize,
            )?
        } else if opts.dequantize {
            QMatMul::Tensor(embed.dequantize(device)?)
        } else {
            QMatMul::from_arc(embed.clone())?
        };
        let output_norm = load_norm(&ct, reader, "output_norm.weight", hidden, device)?;

        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("blk.{i}");
            let mm = |r: &mut R, name: &str, shape| {
                load_matmul(
                    &ct,
                    r,
                    &format!("{p}.{name}.weight"),
                    shape,
                    device,
                    opts.requantize,
                    opts.dequantize,
                )
            };
            let attn_q = mm(reader, "attn_q", (q_dim, hidden))?;
            let attn_k = mm(reader, "attn_k", (kv_dim, hidden))?;
            let attn_v = mm(reader, "attn_v", (kv_dim, hidden))?;
            let attn_o = mm(reader, "attn_output", (hidden, q_dim))?;
            let ffn_gate = mm(reader, "ffn_gate", (ffn, hidden))?;
            let ffn_up = mm(reader, "ffn_up", (ffn, hidden))?;
            let ffn_down = mm(reader, "ffn_down", (hidden, ffn))?;
            let norm = |r: &mut R, name: &str, len| {
                load_norm(&ct, r, &format!("{p}.{name}.weight"), len, device)
            };
            layers.push(Layer {
                attn_q,
                attn_k,
                attn_v,
                attn_o,
                q_norm: norm(reader, "attn_q_norm", hd)?,
                k_norm: norm(reader, "attn_k_norm", hd)?,
                attn_norm: norm(reader, "attn_norm", hidden)?,
                post_attn_norm: norm(reader, "post_attention_norm", hidden)?,
                ffn_norm: norm(reader, "ffn_norm", hidden)?,
                post_ffn_norm: norm(reader, "post_ffw_norm", hidden)?,
                ffn_gate,
                ffn_up,
                ffn_down,
                sliding_window: cfg.is_sliding(i).then_some(cfg.sliding_window),
                kv: None,
            });
        }

        let rope_len = opts.max_seq_len.clamp(1, cfg.context_length.max(1));
        let rope_local = Rope::new(hd, cfg.rope_local_base_freq, 1.0, rope_len, device)?;
        let rope_global = Rope::new(
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
            rope_local,
            rope_global,
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
                "position {} is past the context length {} (`gemma3.context_length`)",
                end - 1,
                self.cfg.context_length
            );
        }
        if end > self.rope_local.len() {
            let len = end
                .next_power_of_two()
                .min(self.cfg.context_length)
                .max(end);
            self.rope_local.build(len, &self.device)?;
            self.rope_global.build(len, &self.device)?;
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
                "gemma3 forward: batch size {b}, this model runs one sequence (clone it for more)"
            );
        }
        if seq == 0 {
            candle_core::bail!("gemma3 forward: empty input");
        }
        if index_pos > self.cache_len {
            candle_core::bail!(
                "gemma3 forward: index_pos {index_pos} is past the {} cached positions",
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

        let mut x = self.embed.embedding(input)?;
        x = (x * (cfg.hidden_size as f64).sqrt())?;

        // Masks shared by every layer of a kind; none are needed for one token.
        let window = cfg.sliding_window;
        let local_start = (index_pos + 1).saturating_sub(window);
        let (global_mask, local_mask) = if seq > 1 {
            (
                Some(attention_mask(seq, index_pos, 0, end, None, &self.device)?),
                Some(attention_mask(
                    seq,
                    index_pos,
                    local_start,
                    end - local_start,
                    Some(window),
                    &self.device,
                )?),
            )
        } else {
            (None, None)
        };

        for layer in self.layers.iter_mut() {
            let (rope, mask, kv_start) = match layer.sliding_window {
                Some(_) => (&self.rope_local, local_mask.as_ref(), local_start),
                None => (&self.rope_global, global_mask.as_ref(), 0),
            };

            // Attention block.
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, eps)?;
            let q = layer.attn_q.forward(&h)?.reshape((1, seq, n_head, hd))?;
            let k = layer.attn_k.forward(&h)?.reshape((1, seq, n_kv, hd))?;
            let v = layer.attn_v.forward(&h)?.reshape((1, seq, n_kv, hd))?;
            let q = candle_nn::ops::rms_norm(&q, &layer.q_norm, eps)?;
            let k = candle_nn::ops::rms_norm(&k, &layer.k_norm, eps)?;
            let q = rope.apply(&q, index_pos)?;
            let k = rope.apply(&k, index_pos)?;
            let q = (q.transpose(1, 2)? * cfg.attn_scale)?.contiguous()?;
            let k = k.transpose(1, 2)?.contiguous()?;
            let v = v.transpose(1, 2)?.contiguous()?;
            let (k, v) = match &layer.kv {
                Some((ck, cv)) => (Tensor::cat(&[ck, &k], 2)?, Tensor::cat(&[cv, &v], 2)?),
                None => (k, v),
            };
            layer.kv = Some((k.clone(), v.clone()));
            let kv_len = end - kv_start;
            let (k, v) = if kv_start > 0 {
                (
                    k.narrow(2, kv_start, kv_len)?.contiguous()?,
                    v.narrow(2, kv_start, kv_len)?.contiguous()?,
                )
            } else {
                (k, v)
            };
            // GQA without copying K/V: query heads h = g * rep + r share kv head g,
            // so [1, n_head, seq, hd] is [1, n_kv, rep * seq, hd].
            let q = q.reshape((1, n_kv, rep * seq, hd))?;
            let scores = q.matmul(&k.t()?)?;
            let scores = match mask {
                Some(m) => scores
                    .reshape((1, n_kv, rep, seq, kv_len))?
                    .broadcast_add(m)?
                    .reshape((1, n_kv, rep * seq, kv_len))?,
                None => scores,
            };
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let a = probs
                .matmul(&v)?
                .reshape((1, n_head, seq, hd))?
                .transpose(1, 2)?
                .reshape((1, seq, n_head * hd))?;
            let a = layer.attn_o.forward(&a)?;
            let a = candle_nn::ops::rms_norm(&a, &layer.post_attn_norm, eps)?;
            x = (x + a)?;

            // Feed-forward block.
            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, eps)?;
            let gate = layer.ffn_gate.forward(&h)?.gelu()?;
            let up = layer.ffn_up.forward(&h)?;
            let m = layer.ffn_down.forward(&(gate * up)?)?;
            let m = candle_nn::ops::rms_norm(&m, &layer.post_ffn_norm, eps)?;
            x = (x + m)?;
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
