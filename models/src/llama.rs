//! Llama (SmolLM2 and kin) from a GGUF file on the CPU, in candle's model-file shape: a
//! `Config` read from the `llama.*` metadata, `ModelWeights::from_gguf`,
//! `forward(input, index_pos)` and `clear_kv_cache()`.
//!
//! formwork carries its own file for speed on the CPU; `candle_transformers`'
//! `quantized_llama` stays the path on GPUs and where this one does not apply (see
//! [`crate::runtime::LlamaBackend`]). Two things cost it time on SmolLM2 Q4_1:
//! - candle has no SIMD kernel for Q4_1, so the runtime requantised to Q8_0 and moved
//!   145 MB of weights per token where the file holds 85 MB. Here Q4_1 and Q8_0 tensors
//!   keep their file bytes and run through [`crate::quant`] (AVX2 / AVX-512 VNNI,
//!   detected at run time); other types go through candle's `QMatMul`.
//! - its KV cache grows by `Tensor::cat`, copying the whole cache of every layer at every
//!   token. Here each layer's cache is a `Vec<f32>` that grows in place.
//!
//! One layer, as llama.cpp computes it (`llm_build_llama`):
//!
//! ```text
//! x = embed(ids)
//! per layer:  h = rms(x, attn_norm)
//!             q, k, v = h Wq, h Wk, h Wv          (GQA: n_kv_head <= n_head)
//!             q, k = RoPE (interleaved pairs, base llama.rope.freq_base)
//!             x = x + softmax(q k^T / sqrt(head_dim) + causal mask) v Wo
//!             h = rms(x, ffn_norm);  x = x + (silu(h Wgate) * h Wup) Wdown
//! logits = rms(x_last, output_norm) Wout     (Wout = output.weight, or token_embd.weight when tied)
//! ```
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

use crate::quant::{axpy, dot_f32, Format, Isa, Q8Acts, QMatrix};

/// The hyper-parameters of a llama model, read from the `llama.*` GGUF metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f32,
    pub rope_theta: f32,
    /// `llama.context_length`; positions past it are refused.
    pub context_length: usize,
}

fn bail<T>(msg: String) -> Result<T> {
    Err(candle_core::Error::Msg(msg))
}

impl Config {
    /// Read and check the metadata; a model this file cannot run (experts, partial RoPE)
    /// is an error that names the key.
    pub fn from_gguf(ct: &gguf_file::Content) -> Result<Self> {
        let get = |k: &str| match ct.metadata.get(k) {
            Some(v) => v.to_u64().map(|v| v as usize),
            None => bail(format!("GGUF metadata `{k}` is missing")),
        };
        let getf = |k: &str, default: f32| match ct.metadata.get(k) {
            Some(v) => v.to_f32(),
            None => Ok(default),
        };
        let experts = ct
            .metadata
            .get("llama.expert_count")
            .and_then(|v| v.to_u64().ok())
            .unwrap_or(0);
        if experts > 0 {
            return bail(format!(
                "llama.expert_count is {experts}: mixture-of-experts models run on candle's quantized_llama"
            ));
        }
        let hidden_size = get("llama.embedding_length")?;
        let num_attention_heads = get("llama.attention.head_count")?;
        let num_key_value_heads = get("llama.attention.head_count_kv")?;
        if num_attention_heads == 0
            || num_key_value_heads == 0
            || num_attention_heads % num_key_value_heads != 0
            || hidden_size % num_attention_heads != 0
        {
            return bail(format!(
                "llama.attention.head_count {num_attention_heads} and head_count_kv {num_key_value_heads} do not divide the embedding length {hidden_size}"
            ));
        }
        let head_dim = hidden_size / num_attention_heads;
        if head_dim % 2 != 0 {
            return bail(format!(
                "the head size {head_dim} (llama.embedding_length / head_count) is odd; RoPE needs pairs"
            ));
        }
        let rope_dim = get("llama.rope.dimension_count")?;
        if rope_dim != head_dim {
            return bail(format!(
                "llama.rope.dimension_count {rope_dim} differs from the head size {head_dim}; partial RoPE runs on candle's quantized_llama"
            ));
        }
        let vocab_size = ct
            .tensor_infos
            .get("token_embd.weight")
            .map(|i| i.shape.dims()[0])
            .ok_or_else(|| {
                candle_core::Error::Msg("GGUF tensor `token_embd.weight` is missing".into())
            })?;
        Ok(Self {
            vocab_size,
            hidden_size,
            num_hidden_layers: get("llama.block_count")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: getf("llama.attention.layer_norm_rms_epsilon", 1e-5)?,
            rope_theta: getf("llama.rope.freq_base", 10_000.0)?,
            context_length: get("llama.context_length").unwrap_or(4096),
        })
    }

    fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }
}

/// A weight matrix: the file's Q4_1 / Q8_0 blocks through our kernels, anything else
/// through candle.
#[derive(Debug, Clone)]
enum Linear {
    Own(Arc<QMatrix>),
    Candle { mm: QMatMul, rows: usize },
}

impl Linear {
    fn new(q: QTensor) -> Result<Self> {
        let (rows, cols) = q.shape().dims2()?;
        let format = match q.dtype() {
            GgmlDType::Q4_1 => Some(Format::Q4_1),
            GgmlDType::Q8_0 => Some(Format::Q8_0),
            _ => None,
        };
        match format {
            Some(f) if cols % crate::quant::QK == 0 => {
                let data = q.data()?.into_owned();
                let m = QMatrix::new(f, rows, cols, data).map_err(candle_core::Error::Msg)?;
                Ok(Self::Own(Arc::new(m)))
            }
            _ => Ok(Self::Candle {
                mm: QMatMul::from_qtensor(q)?,
                rows,
            }),
        }
    }

    fn rows(&self) -> usize {
        match self {
            Self::Own(m) => m.rows(),
            Self::Candle { rows, .. } => *rows,
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
    wo: Linear,
    ffn_norm: Vec<f32>,
    gate: Linear,
    up: Linear,
    down: Linear,
}

#[derive(Debug)]
struct Weights {
    cfg: Config,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    output: Linear,
    /// `1 / base^(2i / head_dim)` for each pair of a head.
    inv_freq: Vec<f32>,
}

/// One layer's cache: `len` positions of `kv_dim` values, position-major.
#[derive(Debug, Clone, Default)]
struct LayerCache {
    k: Vec<f32>,
    v: Vec<f32>,
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
            .thread_name(|i| format!("formwork-llama-{i}"))
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
                "formwork's llama model runs on the CPU only, not {device:?}"
            ));
        }
        let cfg = Config::from_gguf(&ct)?;
        let cpu = Device::Cpu;
        let mut tensor = |name: &str| ct.tensor(reader, name, &cpu);
        let vector =
            |q: QTensor| -> Result<Vec<f32>> { q.dequantize(&cpu)?.flatten_all()?.to_vec1() };

        let embd = tensor("token_embd.weight")?;
        let (rows, cols) = embd.shape().dims2()?;
        if cols != cfg.hidden_size {
            return bail(format!(
                "token_embd.weight is {rows} x {cols}, the embedding length is {}",
                cfg.hidden_size
            ));
        }
        let embd_linear = Linear::new(embd)?;
        let embed = match &embd_linear {
            Linear::Own(m) => Embedding::Own(m.clone()),
            Linear::Candle { .. } => {
                let q = tensor("token_embd.weight")?;
                Embedding::F32 {
                    table: Arc::new(vector(q)?),
                    cols,
                }
            }
        };
        let output = match tensor("output.weight") {
            Ok(q) => Linear::new(q)?,
            Err(_) => embd_linear,
        };
        let norm = vector(tensor("output_norm.weight")?)?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("blk.{i}");
            let mut lin =
                |n: &str| -> Result<Linear> { Linear::new(tensor(&format!("{p}.{n}.weight"))?) };
            let wq = lin("attn_q")?;
            let wk = lin("attn_k")?;
            let wv = lin("attn_v")?;
            let wo = lin("attn_output")?;
            let gate = lin("ffn_gate")?;
            let up = lin("ffn_up")?;
            let down = lin("ffn_down")?;
            layers.push(Layer {
                attn_norm: vector(tensor(&format!("{p}.attn_norm.weight"))?)?,
                ffn_norm: vector(tensor(&format!("{p}.ffn_norm.weight"))?)?,
                wq,
                wk,
                wv,
                wo,
                gate,
                up,
                down,
            });
        }
        let kv = cfg.kv_dim();
        for (i, l) in layers.iter().enumerate() {
            let want = [
                ("attn_q", &l.wq, cfg.hidden_size),
                ("attn_k", &l.wk, kv),
                ("attn_v", &l.wv, kv),
                ("attn_output", &l.wo, cfg.hidden_size),
                ("ffn_up", &l.up, l.gate.rows()),
                ("ffn_down", &l.down, cfg.hidden_size),
            ];
            for (name, lin, rows) in want {
                if lin.rows() != rows {
                    return bail(format!(
                        "blk.{i}.{name}.weight has {} rows, expected {rows}",
                        lin.rows()
                    ));
                }
            }
        }
        let hd = cfg.head_dim;
        let inv_freq = (0..hd)
            .step_by(2)
            .map(|i| 1f32 / cfg.rope_theta.powf(i as f32 / hd as f32))
            .collect();
        let n_layers = cfg.num_hidden_layers;
        Ok(Self {
            w: Arc::new(Weights {
                cfg,
                embed,
                layers,
                norm,
                output,
                inv_freq,
            }),
            cache: vec![LayerCache::default(); n_layers],
            len: 0,
            isa,
        })
    }

    pub fn config(&self) -> &Config {
        &self.w.cfg
    }

    /// Positions in the KV cache.
    pub fn cache_len(&self) -> usize {
        self.len
    }

    pub fn clear_kv_cache(&mut self) {
        for c in &mut self.cache {
            c.k.clear();
            c.v.clear();
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
        let w = self.w.clone();
        let cfg = &w.cfg;
        if tokens.is_empty() {
            return bail(format!("forward at position {index_pos}: no tokens"));
        }
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
            return bail(format!(
                "token id {bad} is out of range for a vocabulary of {}",
                cfg.vocab_size
            ));
        }
        if index_pos == 0 {
            self.clear_kv_cache();
        } else if index_pos != self.len {
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
        let isa = self.isa;
        let cache = &mut self.cache;
        let mut run = move || forward_impl(&w, cache, isa, tokens, index_pos);
        let out = match pool() {
            Some(p) => p.install(run),
            None => run(),
        };
        match out {
            Ok(l) => {
                self.len = end;
                Ok(l)
            }
            Err(e) => {
                self.clear_kv_cache();
                Err(e)
            }
        }
    }
}

fn forward_impl(
    w: &Weights,
    cache: &mut [LayerCache],
    isa: Isa,
    tokens: &[u32],
    pos: usize,
) -> Result<Vec<f32>> {
    let cfg = &w.cfg;
    let n = tokens.len();
    let dim = cfg.hidden_size;
    let kvd = cfg.kv_dim();
    let mut x = vec![0f32; n * dim];
    for (t, row) in tokens.iter().zip(x.chunks_exact_mut(dim)) {
        match &w.embed {
            Embedding::Own(m) => m.dequantize_row(*t as usize, row),
            Embedding::F32 { table, cols } => {
                row.copy_from_slice(&table[*t as usize * cols..(*t as usize + 1) * cols])
            }
        }
    }
    // cos/sin for the new positions, as candle computes them (f32 angle = pos * inv_freq).
    let half = cfg.head_dim / 2;
    let mut cos = Vec::with_capacity(n * half);
    let mut sin = Vec::with_capacity(n * half);
    for p in pos..pos + n {
        for f in &w.inv_freq {
            let a = p as f32 * f;
            cos.push(a.cos());
            sin.push(a.sin());
        }
    }
    let mut acts = Q8Acts::default();
    let mut h = vec![0f32; n * dim];
    for (layer, c) in w.layers.iter().zip(cache.iter_mut()) {
        rms_norm(&x, &layer.attn_norm, cfg.rms_norm_eps, &mut h);
        let [mut q, mut k, v] = project(isa, [&layer.wq, &layer.wk, &layer.wv], &h, n, &mut acts)?;
        rope(&mut q, cfg.head_dim, &cos, &sin);
        rope(&mut k, cfg.head_dim, &cos, &sin);
        c.k.extend_from_slice(&k);
        c.v.extend_from_slice(&v);
        let att = attention(isa, cfg, &q, c, pos, n);
        debug_assert_eq!(c.k.len(), (pos + n) * kvd);
        let [o] = project(isa, [&layer.wo], &att, n, &mut acts)?;
        add(&mut x, &o);
        rms_norm(&x, &layer.ffn_norm, cfg.rms_norm_eps, &mut h);
        let [mut g, u] = project(isa, [&layer.gate, &layer.up], &h, n, &mut acts)?;
        for (g, u) in g.iter_mut().zip(&u) {
            *g = *g / (1.0 + (-*g).exp()) * u;
        }
        let [d] = project(isa, [&layer.down], &g, n, &mut acts)?;
        add(&mut x, &d);
    }
    let last = &x[(n - 1) * dim..];
    let mut hn = vec![0f32; dim];
    rms_norm(last, &w.norm, cfg.rms_norm_eps, &mut hn);
    let [logits] = project(isa, [&w.output], &hn, 1, &mut acts)?;
    Ok(logits)
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// Row-wise RMS norm of `x` (rows of `w.len()`), times `w`.
fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let dim = w.len();
    for (xr, or) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let ss: f32 = xr.iter().map(|v| v * v).sum::<f32>() / dim as f32;
        let s = 1.0 / (ss + eps).sqrt();
        for ((o, v), g) in or.iter_mut().zip(xr).zip(w) {
            *o = v * s * g;
        }
    }
}

/// Interleaved RoPE (pairs `2i, 2i + 1` of each head), row `t` at the `t`-th new position.
fn rope(x: &mut [f32], hd: usize, cos: &[f32], sin: &[f32]) {
    let half = hd / 2;
    let rows = cos.len() / half;
    let width = x.len() / rows;
    for (t, row) in x.chunks_exact_mut(width).enumerate() {
        let (c, s) = (
            &cos[t * half..(t + 1) * half],
            &sin[t * half..(t + 1) * half],
        );
        for head in row.chunks_exact_mut(hd) {
            for (i, pair) in head.chunks_exact_mut(2).enumerate() {
                let (a, b) = (pair[0], pair[1]);
                pair[0] = a * c[i] - b * s[i];
                pair[1] = a * s[i] + b * c[i];
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

fn transpose(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0f32; a.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = a[r * cols + c];
        }
    }
    t
}

/// Causal attention of the `n` new queries (positions `pos..pos + n`) over the cache.
fn attention(isa: Isa, cfg: &Config, q: &[f32], c: &LayerCache, pos: usize, n: usize) -> Vec<f32> {
    let hd = cfg.head_dim;
    let heads = cfg.num_attention_heads;
    let group = heads / cfg.num_key_value_heads;
    let kvd = cfg.kv_dim();
    let scale = 1.0 / (hd as f32).sqrt();
    let mut out = vec![0f32; n * heads * hd];
    let one = |idx: usize, o: &mut [f32]| {
        let (t, h) = (idx / heads, idx % heads);
        let g = h / group;
        let qh = &q[t * heads * hd + h * hd..][..hd];
        let len = pos + t + 1;
        let mut s: Vec<f32> = (0..len)
            .map(|j| dot_f32(isa, qh, &c.k[j * kvd + g * hd..][..hd]) * scale)
            .collect();
        let max = s.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        let mut sum = 0f32;
        for v in s.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        let inv = 1.0 / sum;
        for (j, p) in s.iter().enumerate() {
            axpy(isa, p * inv, &c.v[j * kvd + g * hd..][..hd], o);
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
