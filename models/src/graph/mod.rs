//! The device-agnostic model graph: every family formwork's CPU file runs (llama with
//! and without Llama 3's `rope_freqs`, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3, Phi-3),
//! written once in candle tensor ops and `QMatMul`, so that it runs on any candle device
//! (CPU, CUDA, Metal). It reads the same normalised [`Config`] as formwork's CPU file
//! ([`crate::llama`], whose module doc draws the layer), so a family is described once;
//! `tests/graph_parity.rs` checks the two against each other and against llama.cpp.
//!
//! What it computes per family, beside the plain llama layer: Qwen2's q/k/v biases;
//! Qwen3's and Gemma 3's per-head q/k RMS norms; Gemma's embedding scale, post-norms,
//! GELU-tanh and local layers (a window and their own RoPE base); Gemma 2's soft-capped
//! attention scores and logits; Phi-3's fused QKV and gate/up matrices and LongRoPE
//! (factors picked by the context length, cos and sin times `attn_factor`); Llama 3's
//! per-pair RoPE factors; partial RoPE (`rope.dimension_count` below the head size).
//!
//! Several sequences run in one pass ([`GraphModel::forward_batch`]): their rows are
//! stacked, so each weight matrix is read once for the batch (on a GPU, where decode is
//! memory-bound, B sequences cost about what one does); attention runs per sequence over
//! its own cache.
//!
//! Its arithmetic is candle's: a quantised matmul rounds its input to 8 bits per block
//! (Q8_0, or Q8_K for K-quants on the CPU), in candle's order, so its logits differ from
//! the CPU file's by rounding (`tests/graph_parity.rs` states by how much), and a
//! token's logits can differ slightly with what shares its pass.
//!
//! The stages, one file each:
//! - `weights`: GGUF tensors -> the shared weights on the device;
//! - `cache`: one layer's KV cache on the device, f32 or f16, grown in place;
//! - `forward`: the tokens of one or more sequences -> the logits of each one's last.
//!
//! This file holds [`GraphModel`]: shared weights, its own KV cache, and the checks of
//! each feed. `Clone` is a snapshot: weights shared, the cache's held positions copied.

use std::sync::Arc;

use candle_core::quantized::gguf_file;
use candle_core::{Device, Result, Tensor};

use crate::llama::{check_feed, Config, KvType};

mod cache;
mod forward;
mod weights;

use cache::LayerKv;
use weights::GraphWeights;

fn bail<T>(msg: String) -> Result<T> {
    Err(candle_core::Error::Msg(msg))
}

/// Load-time choices; `Default` is what [`GraphModel::from_gguf`] and the runtime use.
#[derive(Debug, Clone, Default)]
pub struct GraphOptions {
    /// Every weight matrix dequantised to f32 at load, so matmuls run in f32 without
    /// rounding activations: results then depend on the arithmetic only, not on the
    /// order of evaluation (tests compare chunked and full prefill so). 4-8x the memory.
    pub dequantize: bool,
}

/// The model on a device: shared weights and an own KV cache. `Clone` is the snapshot.
#[derive(Debug, Clone)]
pub struct GraphModel {
    w: Arc<GraphWeights>,
    cache: Vec<LayerKv>,
    len: usize,
}

impl GraphModel {
    /// Load a GGUF onto `device`. The file must be one formwork's CPU file reads
    /// ([`Config::from_gguf`] names the key otherwise).
    pub fn from_gguf<R: std::io::Seek + std::io::Read>(
        ct: gguf_file::Content,
        reader: &mut R,
        device: &Device,
    ) -> Result<Self> {
        Self::from_gguf_with(ct, reader, device, &GraphOptions::default())
    }

    /// [`Self::from_gguf`] with [`GraphOptions`].
    pub fn from_gguf_with<R: std::io::Seek + std::io::Read>(
        ct: gguf_file::Content,
        reader: &mut R,
        device: &Device,
        opts: &GraphOptions,
    ) -> Result<Self> {
        let cfg = Config::from_gguf(&ct)?;
        let n = cfg.num_hidden_layers;
        let w = GraphWeights::load(&ct, reader, cfg, device, opts.dequantize)?;
        Ok(Self {
            w: Arc::new(w),
            cache: vec![LayerKv::new(KvType::F32); n],
            len: 0,
        })
    }

    pub fn config(&self) -> &Config {
        &self.w.cfg
    }

    pub fn device(&self) -> &Device {
        &self.w.device
    }

    /// The same model with its KV cache in `kv` (emptied).
    pub fn with_kv_type(mut self, kv: KvType) -> Self {
        self.cache = vec![LayerKv::new(kv); self.w.cfg.num_hidden_layers];
        self.len = 0;
        self
    }

    /// As [`crate::llama::ModelWeights::with_context_length`]: later positions are
    /// refused and a LongRoPE file picks its factors by `n`. Only without snapshots.
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

    /// As [`crate::llama::ModelWeights::with_sliding_window`] (tests use a small window).
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

    /// Positions in the KV cache.
    pub fn cache_len(&self) -> usize {
        self.len
    }

    /// Forgets every position from `len` on. False (nothing changed) when the cache
    /// holds fewer than `len`.
    pub fn truncate_kv_cache(&mut self, len: usize) -> bool {
        if len > self.len {
            return false;
        }
        self.cache.iter_mut().for_each(|c| c.truncate(len));
        self.len = len;
        true
    }

    pub fn clear_kv_cache(&mut self) {
        self.cache.iter_mut().for_each(LayerKv::clear);
        self.len = 0;
    }

    /// candle's shape: `input` `(1, seq_len)` token ids; the logits `(1, vocab)` of the
    /// last position, on the device. `index_pos` 0 starts over.
    pub fn forward(&mut self, input: &Tensor, index_pos: usize) -> Result<Tensor> {
        let ids: Vec<u32> = input.flatten_all()?.to_vec1()?;
        let mut out = Self::forward_batch_tensor(&mut [self], &[(&ids, index_pos)])?;
        match out.pop() {
            Some(t) => Ok(t),
            None => bail("forward: no result".into()),
        }
    }

    /// Feed `tokens` at `index_pos..`; the logits of the last one, on the host.
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

    /// Several sequences in one pass: `models[i]` is fed `feeds[i] = (tokens,
    /// index_pos)` and gets the logits of its last token (on the host). Each keeps its
    /// own cache and position; every matmul covers the rows of all of them. The models
    /// must be snapshots of one model. A feed its own model refuses gets its error and
    /// leaves its cache as it was; the others run. An error inside the pass is given to
    /// each sequence in it, and their caches are emptied.
    pub fn forward_batch(
        models: &mut [&mut GraphModel],
        feeds: &[(&[u32], usize)],
    ) -> Vec<Result<Vec<f32>>> {
        let rows = |t: Tensor| -> Result<Vec<Vec<f32>>> { t.to_vec2() };
        match Self::run_batch(models, feeds) {
            (results, None) => results,
            (mut results, Some((run, Ok(logits)))) => match rows(logits) {
                Ok(rows) => {
                    for (i, r) in run.into_iter().zip(rows) {
                        results[i] = Ok(r);
                    }
                    results
                }
                Err(e) => {
                    for i in run {
                        results[i] = bail(e.to_string());
                        models[i].clear_kv_cache();
                    }
                    results
                }
            },
            (results, Some((_, Err(_)))) => results,
        }
    }

    /// [`Self::forward_batch`] with the logits left on the device, `(1, vocab)` each;
    /// the first error is the batch's.
    fn forward_batch_tensor(
        models: &mut [&mut GraphModel],
        feeds: &[(&[u32], usize)],
    ) -> Result<Vec<Tensor>> {
        let (mut results, out) = Self::run_batch(models, feeds);
        if let Some(i) = results.iter().position(|r| r.is_err()) {
            return Err(results.swap_remove(i).unwrap_err());
        }
        match out {
            None => Ok(Vec::new()),
            Some((run, logits)) => {
                let logits = logits?;
                (0..run.len()).map(|r| logits.narrow(0, r, 1)).collect()
            }
        }
    }

    /// The shared part of the batched forwards: per model, its refusal (or a
    /// placeholder `Ok` for those that ran), and the indices that ran with their logits
    /// `(ran, vocab)` (`None` when none ran).
    #[allow(clippy::type_complexity)]
    fn run_batch(
        models: &mut [&mut GraphModel],
        feeds: &[(&[u32], usize)],
    ) -> (Vec<Result<Vec<f32>>>, Option<(Vec<usize>, Result<Tensor>)>) {
        assert_eq!(models.len(), feeds.len(), "one feed per model");
        let mut results: Vec<Result<Vec<f32>>> =
            (0..models.len()).map(|_| Ok(Vec::new())).collect();
        let Some(first) = models.first() else {
            return (results, None);
        };
        let w = first.w.clone();
        let mut run = Vec::new();
        for (i, (m, &(tokens, pos))) in models.iter_mut().zip(feeds).enumerate() {
            if !Arc::ptr_eq(&m.w, &w) {
                results[i] = bail("a batched forward mixes models with different weights".into());
            } else if let Err(e) = m.begin(tokens, pos) {
                results[i] = Err(e);
            } else {
                run.push(i);
            }
        }
        if run.is_empty() {
            return (results, None);
        }
        let segs: Vec<(&[u32], usize)> = run.iter().map(|&i| feeds[i]).collect();
        let mut k = 0;
        let mut caches: Vec<&mut [LayerKv]> = Vec::with_capacity(run.len());
        let mut lens: Vec<&mut usize> = Vec::with_capacity(run.len());
        for (i, m) in models.iter_mut().enumerate() {
            if run.get(k) == Some(&i) {
                caches.push(&mut m.cache[..]);
                lens.push(&mut m.len);
                k += 1;
            }
        }
        let out = forward::forward_impl(&w, &mut caches, &segs);
        drop(caches);
        match &out {
            Ok(_) => {
                for (len, seg) in lens.into_iter().zip(&segs) {
                    *len = seg.1 + seg.0.len();
                }
            }
            Err(e) => {
                let msg = e.to_string();
                drop(lens);
                for &i in &run {
                    results[i] = bail(msg.clone());
                    models[i].clear_kv_cache();
                }
            }
        }
        (results, Some((run, out)))
    }
}
