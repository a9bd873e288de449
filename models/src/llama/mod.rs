//! Llama (SmolLM2, Llama 3.x, Mistral 7B and kin), Qwen2, Qwen3, Gemma 2, Gemma 3 and Phi-3
//! from a GGUF file on the CPU, in candle's model-file shape: a `Config` read from the
//! `llama.*`, `qwen2.*`, `qwen3.*`, `gemma2.*`, `gemma3.*` or `phi3.*` metadata,
//! `ModelWeights::from_gguf`, `forward(input, index_pos)` and `clear_kv_cache()`.
//!
//! formwork carries its own file for speed on the CPU; the model graph ([`crate::graph`],
//! candle tensor ops on any device, the same [`Config`]) is the path on GPUs and where
//! this one does not apply (see [`crate::runtime::Backend`]). Two things cost candle's
//! path time on the CPU:
//! - candle has no SIMD kernel for Q4_1 or Q5_0, so the runtime requantises them to Q8_0
//!   (SmolLM2 Q4_1 moved 145 MB of weights per token where the file holds 85 MB; Qwen2.5's
//!   133 Q5_0 tensors and Gemma 3's 81 likewise). Here Q4_1, Q5_0, Q8_0, Q4_K and Q6_K
//!   tensors keep their file bytes and run through [`crate::quant`] (AVX2 / AVX-512 VNNI,
//!   detected at run time); other types go through candle's `QMatMul`.
//! - candle's own model files grow their KV cache by `Tensor::cat`, copying the whole
//!   cache of every layer at every token. Here each layer's cache is a `Vec` that grows
//!   in place (the graph's grows in place on the device).
//!
//! One layer, as llama.cpp computes it (`llm_build_llama`, `llm_build_qwen2`,
//! `llm_build_qwen3`, `llm_build_gemma2_iswa`, `llm_build_gemma3`, `llama_model_phi3`):
//!
//! ```text
//! x = embed(ids) * embed_scale                      (Gemma: sqrt(embedding_length); else 1)
//! per layer:  h = rms(x, attn_norm)
//!             q, k, v = h Wq (+ bq), h Wk (+ bk), h Wv (+ bv)   (biases: Qwen2; GQA: n_kv_head <= n_head)
//!                       Phi-3: one h Wqkv, its row cut into q, k, v
//!             q, k = rms(q, q_norm), rms(k, k_norm) per head   (Qwen3, Gemma 3)
//!             q, k = RoPE, base {arch}.rope.freq_base: interleaved pairs (2i, 2i + 1) for
//!                    llama, NeoX halves (i, i + head_dim / 2) for Qwen2, Qwen3, Gemma;
//!                    pair i's angle divided by rope_freqs[i] where the file has it (Llama 3.1+),
//!                    or by Phi-3's long or short LongRoPE factor, cos and sin times
//!                    rope.scaling.attn_factor; only the first rope.dimension_count
//!                    values of a head turn
//!             s = q k^T * attn_scale;  Gemma 2: s = 50 tanh(s / 50)   (attn_logit_softcapping)
//!             a = softmax(s + causal mask) v Wo
//!             x = x + a                      (Gemma: x + rms(a, post_attention_norm))
//!             h = rms(x, ffn_norm);  f = (act(h Wgate) * h Wup) Wdown   (act: SiLU; Gemma: GELU-tanh)
//!                                    Phi-3: g | u = h Wup (one matrix, halves), f = (silu(g) * u) Wdown
//!             x = x + f                      (Gemma: x + rms(f, post_ffw_norm))
//! logits = rms(x_last, output_norm) Wout     (Wout = output.weight, or token_embd.weight when tied)
//!          Gemma 2: logits = 30 tanh(logits / 30)      (final_logit_softcapping)
//! ```
//!
//! Gemma 3's local layers (five of every six) see only the last `sliding_window`
//! positions and rotate with their own RoPE base (10,000; the global layers use
//! `gemma3.rope.freq_base`). Gemma 2's local layers are the even ones (0, 2, ...; llama.cpp's
//! pattern 2), with the one RoPE base of every layer. The cache keeps every position; a local layer's attention
//! starts `sliding_window` positions back. Gemma's norm weights are used as stored:
//! llama.cpp's converter already adds the `1 +` of its RMSNorm into the GGUF tensors.
//!
//! Activations are f32; each matmul quantises its input to 8 bits per block of 32, as
//! llama.cpp and candle's quantized matmuls do. Every token's arithmetic is the same
//! whether it comes alone or in a batch, so chunked prefill gives the same logits as a
//! full one.
//!
//! Cloning a `ModelWeights` is a snapshot: the weights are shared (`Arc`) and so are
//! the KV cache's blocks of positions (`cache`: copy on write, one partial block per
//! layer at most), so a clone keeps the cache it was taken with while the original
//! decodes on, and costs the memory of what the two do not have in common.
//!
//! The stages, one file each:
//! - `config`: GGUF metadata -> [`Config`] (checked before any tensor is read);
//! - `weights`: GGUF tensors -> the shared weights (our kernels' blocks, or candle's);
//! - `cache`: one layer's KV cache, in f32 or f16 ([`KvType`]);
//! - `forward`: token ids of one or more sequences -> the logits of each one's last token.
//!
//! This file holds [`ModelWeights`], the model a caller sees: shared weights, its own KV
//! cache, and the checks of each feed before the pass.

use std::sync::{Arc, OnceLock};

use candle_core::quantized::gguf_file;
use candle_core::{Device, Result, Tensor};

use crate::quant::Isa;

mod cache;
mod config;
mod forward;
mod weights;
mod workers;

pub use cache::KvType;
pub use config::{Arch, Config, RopeStyle, Sliding};

use cache::LayerCache;
use forward::forward_impl;
pub(crate) use weights::RopeFactors;
use weights::Weights;

fn bail<T>(msg: String) -> Result<T> {
    Err(candle_core::Error::Msg(msg))
}

/// What both model files refuse before a forward: an empty feed, a token out of the
/// vocabulary, a position that is neither 0 nor the `cached` length, a feed past the
/// context length. Shared by [`ModelWeights`] and [`crate::graph::GraphModel`].
pub(crate) fn check_feed(
    cfg: &Config,
    cached: usize,
    tokens: &[u32],
    index_pos: usize,
) -> Result<()> {
    if tokens.is_empty() {
        return bail(format!("forward at position {index_pos}: no tokens"));
    }
    if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= cfg.vocab_size) {
        return bail(format!(
            "token id {bad} is out of range for a vocabulary of {}",
            cfg.vocab_size
        ));
    }
    if index_pos != 0 && index_pos != cached {
        return bail(format!(
            "forward at position {index_pos}: the KV cache holds {cached} positions"
        ));
    }
    let end = index_pos + tokens.len();
    if end > cfg.context_length {
        return bail(format!(
            "positions up to {end} exceed the context length {}",
            cfg.context_length
        ));
    }
    Ok(())
}

/// The model: shared weights and an own KV cache. `Clone` is the snapshot.
#[derive(Debug, Clone)]
pub struct ModelWeights {
    w: Arc<Weights>,
    cache: Vec<LayerCache>,
    len: usize,
    isa: Isa,
}

/// The worker threads for the matmuls and attention: `CANDLE_NUM_THREADS`, else
/// `RAYON_NUM_THREADS`, else candle's default; `None` for one thread (no hand-offs).
fn workers() -> Option<&'static workers::Workers> {
    static POOL: OnceLock<Option<workers::Workers>> = OnceLock::new();
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
        workers::Workers::new(n).ok()
    })
    .as_ref()
}

fn threads() -> usize {
    workers().map_or(1, |p| p.threads())
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
        let n_layers = cfg.num_hidden_layers;
        let kv_dim = cfg.kv_dim();
        let w = Weights::load(&ct, reader, cfg, isa)?;
        Ok(Self {
            w: Arc::new(w),
            cache: vec![LayerCache::new(KvType::F32, kv_dim); n_layers],
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

    /// The same model run with a context of at most `n` positions (no more than the
    /// file's `context_length`): later positions are refused, and a Phi-3 LongRoPE file
    /// takes its short RoPE factors when `n` is within
    /// `phi3.rope.scaling.original_context_length`, its long ones past it (llama.cpp picks
    /// by its `n_ctx` so). The default is the file's context, so a 128k Phi-3 file runs
    /// with its long factors. Only on a model without snapshots; empties the cache.
    pub fn with_context_length(mut self, n: usize) -> Result<Self> {
        let Some(w) = Arc::get_mut(&mut self.w) else {
            return bail("with_context_length: the weights are shared with a snapshot".into());
        };
        if n == 0 || n > w.cfg.context_length {
            return bail(format!(
                "a context of {n} positions: the file allows 1 to {}",
                w.cfg.context_length
            ));
        }
        w.set_context_length(n);
        self.clear_kv_cache();
        Ok(self)
    }

    /// The per-pair factors the global layers' RoPE angles are divided by, where the file
    /// has some (Llama 3's `rope_freqs`, Phi-3's long or short factors).
    pub fn rope_factors(&self) -> Option<&[f32]> {
        self.w.rope_factors()
    }

    /// The same model with its KV cache in `kv` (emptied). Snapshots taken later share it.
    pub fn with_kv_type(mut self, kv: KvType) -> Self {
        self.cache = vec![LayerCache::new(kv, self.w.cfg.kv_dim()); self.w.cfg.num_hidden_layers];
        self.len = 0;
        self
    }

    /// Positions in the KV cache.
    pub fn cache_len(&self) -> usize {
        self.len
    }

    /// Forgets every position from `len` on, as if only the first `len` had been fed.
    /// False (nothing changed) when the cache holds fewer than `len`.
    pub fn truncate_kv_cache(&mut self, len: usize) -> bool {
        if len > self.len {
            return false;
        }
        if len == 0 {
            self.clear_kv_cache();
            return true;
        }
        for c in &mut self.cache {
            c.truncate(len);
        }
        self.len = len;
        true
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
        check_feed(&self.w.cfg, self.len, tokens, index_pos)?;
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
            let out = forward_impl(&w, &mut caches, isa, &segs);
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
