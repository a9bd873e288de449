//! One forward pass: the token ids of several sequences (each at its own position, over
//! its own KV cache) and the shared [`Weights`] come in; each layer's keys and values are
//! appended to the caches, and the logits of each sequence's last token come out. The
//! layer is the one the module doc of [`super`] draws; every matrix product quantises
//! its input once and runs over the rows of all sequences together.

use candle_core::{Device, Module, Result, Tensor};

use super::cache::{self, Kv, LayerCache};
use super::weights::{Embedding, GateUp, Linear, Qkv, Weights};
use super::workers::for_each_chunk_mut;
use super::{bail, threads, workers, Config, RopeStyle};
use crate::quant::{Isa, KvElem, Q8Acts, QMatrix};

/// The forward pass of `segs.len()` sequences: segment `s` feeds `segs[s].0` at positions
/// `segs[s].1..` over `caches[s]`; the logits of each segment's last token.
pub(super) fn forward_impl(
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
    let global = RopeRows::new(&w.inv_freq, &positions, cfg.rope_attn_factor);
    let local = RopeRows::new(&w.inv_freq_local, &positions, 1.0);
    let style = cfg.arch.rope();
    let mut acts = Q8Acts::default();
    let mut h = vec![0f32; n * dim];
    for (l, layer) in w.layers.iter().enumerate() {
        rms_norm(&x, &layer.attn_norm, eps, &mut h);
        let [mut q, mut k, mut v] = match &layer.qkv {
            Qkv::Split([wq, wk, wv]) => project(isa, [wq, wk, wv], &h, n, &mut acts)?,
            Qkv::Fused(wqkv) => {
                let [qkv] = project(isa, [wqkv], &h, n, &mut acts)?;
                split_rows(&qkv, [cfg.q_dim(), kvd, kvd])
            }
        };
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
            debug_assert_eq!(c.positions(), pos + toks.len());
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
        let [mut g, u] = match &layer.gate_up {
            GateUp::Split { gate, up } => project(isa, [gate, up], &h, n, &mut acts)?,
            GateUp::Fused(gate_up) => {
                let [gu] = project(isa, [gate_up], &h, n, &mut acts)?;
                let ffn = gate_up.rows() / 2;
                split_rows(&gu, [ffn, ffn])
            }
        };
        // Per value, so the same bits however the rows are split; libm's `tanh` is the
        // largest serial part of Gemma 3's prefill otherwise.
        let gelu = cfg.arch.gemma();
        if let Some(pool) = workers().filter(|_| n > 1) {
            let w = g.len() / n;
            for_each_chunk_mut(pool, &mut g, w, |i, g| gate(g, &u[i * w..][..w], gelu));
        } else {
            gate(&mut g, &u, gelu);
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
    let [mut logits] = project(isa, [&w.output], &hn, b, &mut acts)?;
    if let Some(cap) = cfg.final_softcap {
        soft_cap(&mut logits, cap);
    }
    let vocab = logits.len() / b;
    Ok(logits.chunks_exact(vocab).map(|c| c.to_vec()).collect())
}

/// `cap * tanh(v / cap)` in place (Gemma 2's soft-capping).
fn soft_cap(x: &mut [f32], cap: f32) {
    let inv = 1.0 / cap;
    x.iter_mut().for_each(|v| *v = cap * (*v * inv).tanh());
}

/// `g = act(g) * u`: GELU (tanh approximation) where `gelu`, else SiLU, with libm's
/// `tanh` and `exp`. (A polynomial `exp` on AVX2, within 4e-7 of libm, made Gemma 3's
/// logits part from the scalar kernels' by 2.6 and from candle's by 3.0, past the
/// tests' tolerances: Gemma's outliers carry a small change far.)
fn gate(g: &mut [f32], u: &[f32], gelu: bool) {
    for (g, u) in g.iter_mut().zip(u) {
        *g = if gelu {
            gelu_tanh(*g)
        } else {
            *g / (1.0 + (-*g).exp())
        } * u;
    }
}

/// GELU, tanh approximation (Gemma's `gelu_pytorch_tanh`, candle's `gelu`).
fn gelu_tanh(v: f32) -> f32 {
    const SQRT_TWO_OVER_PI: f32 = 0.797_884_6;
    0.5 * v * (1.0 + (SQRT_TWO_OVER_PI * v * (1.0 + 0.044_715 * v * v)).tanh())
}

/// cos and sin of each row's angles `position * inv_freq[i]` (an f32 angle, as candle
/// computes it), times `mscale` (llama.cpp's `attn_factor`; 1 but for LongRoPE files),
/// `inv_freq.len()` per row.
struct RopeRows {
    cos: Vec<f32>,
    sin: Vec<f32>,
    /// Angles per row: `rope_dim / 2`.
    half: usize,
}

impl RopeRows {
    fn new(inv_freq: &[f32], positions: &[usize], mscale: f32) -> Self {
        let mut cos = Vec::with_capacity(positions.len() * inv_freq.len());
        let mut sin = Vec::with_capacity(cos.capacity());
        for &p in positions {
            for f in inv_freq {
                let a = p as f32 * f;
                cos.push(a.cos() * mscale);
                sin.push(a.sin() * mscale);
            }
        }
        Self {
            cos,
            sin,
            half: inv_freq.len(),
        }
    }
}

/// Each row of `x` (rows of `N` parts, `widths` wide) cut into its parts: one matrix of
/// `n x widths[i]` per part (a fused projection's q, k, v, or gate and up).
fn split_rows<const N: usize>(x: &[f32], widths: [usize; N]) -> [Vec<f32>; N] {
    let width: usize = widths.iter().sum();
    let rows = x.len() / width;
    let mut outs: [Vec<f32>; N] = std::array::from_fn(|i| Vec::with_capacity(rows * widths[i]));
    for row in x.chunks_exact(width) {
        let mut at = 0;
        for (out, &w) in outs.iter_mut().zip(&widths) {
            out.extend_from_slice(&row[at..at + w]);
            at += w;
        }
    }
    outs
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

/// RoPE of `style` on each head of each row; row `t` is at the `t`-th new position. It
/// turns the first `rope_dim` values of each head (two per angle of a row) and leaves the
/// rest as they are (ggml's partial rotation; all of them but for Phi-4-mini).
fn rope(style: RopeStyle, x: &mut [f32], hd: usize, angles: &RopeRows) {
    let (cos, sin, half) = (&angles.cos, &angles.sin, angles.half);
    if half == 0 || cos.is_empty() {
        return;
    }
    let rows = cos.len() / half;
    let width = x.len() / rows;
    for (t, row) in x.chunks_exact_mut(width).enumerate() {
        let (c, s) = (
            &cos[t * half..(t + 1) * half],
            &sin[t * half..(t + 1) * half],
        );
        for head in row.chunks_exact_mut(hd) {
            let turned = &mut head[..2 * half];
            match style {
                RopeStyle::Interleaved => {
                    for (i, pair) in turned.chunks_exact_mut(2).enumerate() {
                        let (a, b) = (pair[0], pair[1]);
                        pair[0] = a * c[i] - b * s[i];
                        pair[1] = a * s[i] + b * c[i];
                    }
                }
                RopeStyle::Neox => {
                    let (lo, hi) = turned.split_at_mut(half);
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
        // Each task writes its rows of one output, token-major: disjoint places.
        let mut tasks: Vec<(&QMatrix, usize, usize, OutPtr)> = Vec::new();
        for (lin, out) in lins.iter().zip(outs.iter_mut()) {
            if let Linear::Own(m) = lin {
                if m.cols() != k {
                    return bail(format!(
                        "a {} x {} matrix times activations of width {k}",
                        m.rows(),
                        m.cols()
                    ));
                }
                let align = m.row_align();
                let chunk = m
                    .rows()
                    .div_ceil(threads * 4)
                    .max(4)
                    .next_multiple_of(align);
                for r0 in (0..m.rows()).step_by(chunk) {
                    let rows = chunk.min(m.rows() - r0);
                    tasks.push((m, r0, rows, OutPtr(out.as_mut_ptr())));
                }
            }
        }
        // SAFETY: each output holds `n * rows` f32 and outlives the tasks; the tasks of
        // one output take disjoint row ranges.
        let run = |(m, r0, rows, out): (&QMatrix, usize, usize, OutPtr)| unsafe {
            m.dot_rows_token_major(isa, r0, rows, acts, out.0)
        };
        match workers() {
            Some(pool) => pool.for_each(tasks.len(), &|i| run(tasks[i])),
            None => tasks.into_iter().for_each(run),
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

/// An output that several tasks write at disjoint places.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: the tasks that share one write disjoint rows of it (`project`).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

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
    let scale = cfg.attn_scale;
    let cap = cfg.attn_softcap;
    let mut out = vec![0f32; positions.len() * heads * hd];
    let one = |idx: usize, o: &mut [f32]| {
        let (r, h) = (idx / heads, idx % heads);
        let c = caches[segment[r]];
        let g = h / group;
        let qh = &q[r * heads * hd + h * hd..][..hd];
        let end = positions[r] + 1;
        let start = window.map_or(0, |w| end.saturating_sub(w));
        let mut sc = vec![0f32; end - start];
        match c {
            LayerCache::F32(kv) => attend(isa, qh, kv, start, end, g * hd, scale, cap, &mut sc, o),
            LayerCache::F16(kv) => attend(isa, qh, kv, start, end, g * hd, scale, cap, &mut sc, o),
        }
    };
    if let Some(pool) = workers() {
        for_each_chunk_mut(pool, &mut out, hd, one);
    } else {
        for (i, o) in out.chunks_mut(hd).enumerate() {
            one(i, o);
        }
    }
    out
}

/// One head of one row: scores over positions `start..end` of `kv` (the head's values
/// at `off` in each position; soft-capped when `cap` is set), their softmax, and the
/// weighted sum of the values into `o` (`sc` holds one score per position).
#[allow(clippy::too_many_arguments)]
fn attend<E: KvElem>(
    isa: Isa,
    q: &[f32],
    kv: &Kv<E>,
    start: usize,
    end: usize,
    off: usize,
    scale: f32,
    cap: Option<f32>,
    sc: &mut [f32],
    o: &mut [f32],
) {
    cache::scores(isa, q, kv, start, end, off, scale, sc);
    if let Some(cap) = cap {
        soft_cap(sc, cap);
    }
    softmax(sc);
    cache::mix(isa, sc, kv, start, end, off, o);
}

/// Softmax in place.
fn softmax(sc: &mut [f32]) {
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
}

#[cfg(test)]
mod tests {
    use super::{attend, rope, split_rows, Kv, RopeRows};
    use crate::llama::RopeStyle;
    use crate::quant::Isa;

    /// Partial RoPE (Phi-4-mini turns 96 of 128 values a head): with 2 angles on heads of
    /// 6, each head's first 4 values turn as NeoX pairs (0, 2), (1, 3), scaled by `mscale`
    /// (LongRoPE's `attn_factor`), and its last 2 stay as they were.
    #[test]
    fn rope_turns_the_first_rope_dim_values_only() {
        let (hd, inv_freq, mscale) = (6, [0.5f32, 0.25], 1.25f32);
        let positions = [3usize];
        let angles = RopeRows::new(&inv_freq, &positions, mscale);
        let x0: Vec<f32> = (0..2 * hd).map(|i| 1.0 + i as f32).collect();
        for style in [RopeStyle::Neox, RopeStyle::Interleaved] {
            let mut x = x0.clone();
            rope(style, &mut x, hd, &angles);
            for head in 0..2 {
                let (h0, h) = (&x0[head * hd..][..hd], &x[head * hd..][..hd]);
                assert_eq!(&h[4..], &h0[4..], "{style:?}: the unturned values");
                for (i, f) in inv_freq.iter().enumerate() {
                    let a = 3.0 * f;
                    let (c, s) = (a.cos() * mscale, a.sin() * mscale);
                    let (p, q) = match style {
                        RopeStyle::Neox => (i, i + 2),
                        RopeStyle::Interleaved => (2 * i, 2 * i + 1),
                    };
                    assert!((h[p] - (h0[p] * c - h0[q] * s)).abs() < 1e-5, "{style:?}");
                    assert!((h[q] - (h0[p] * s + h0[q] * c)).abs() < 1e-5, "{style:?}");
                }
            }
        }
    }

    /// A fused projection's rows cut into their parts (Phi-3's q | k | v, gate | up).
    #[test]
    fn split_rows_cuts_each_row() {
        let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
        let [a, b, c] = split_rows(&x, [3, 2, 1]);
        assert_eq!(a, [0., 1., 2., 6., 7., 8.]);
        assert_eq!(b, [3., 4., 9., 10.]);
        assert_eq!(c, [5., 11.]);
    }

    /// Gemma 2's soft-cap in the attention: `attend` with a cap is the softmax of
    /// `cap * tanh(scale * q.k / cap)`, written out; without it, of the plain scores. The
    /// scores here (up to 17.7) are near enough the cap (20) that it moves the weights.
    #[test]
    fn attend_soft_caps_the_scores() {
        let (hd, n, scale, cap) = (8, 5, 0.5f32, 20f32);
        let q: Vec<f32> = (0..hd).map(|i| 1.0 + i as f32 * 0.5).collect();
        let k: Vec<f32> = (0..n * hd)
            .map(|i| ((i * 7 % 11) as f32 - 3.0) * 0.6)
            .collect();
        let v: Vec<f32> = (0..n * hd).map(|i| (i % 13) as f32 * 0.25).collect();
        let want = |cap: Option<f32>| -> Vec<f32> {
            let s: Vec<f32> = (0..n)
                .map(|j| {
                    let d: f32 = (0..hd).map(|i| q[i] * k[j * hd + i]).sum::<f32>() * scale;
                    cap.map_or(d, |c| c * (d / c).tanh())
                })
                .collect();
            let m = s.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let e: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
            let sum: f32 = e.iter().sum();
            (0..hd)
                .map(|i| (0..n).map(|j| e[j] / sum * v[j * hd + i]).sum())
                .collect()
        };
        let (capped, plain) = (want(Some(cap)), want(None));
        assert!(
            capped.iter().zip(&plain).any(|(a, b)| (a - b).abs() > 0.1),
            "the cap must matter here"
        );
        for (c, expect) in [(Some(cap), &capped), (None, &plain)] {
            let (mut sc, mut o) = (vec![0f32; n], vec![0f32; hd]);
            let mut kv = Kv::<f32>::new(hd);
            kv.push(&k, &v);
            attend(Isa::detect(), &q, &kv, 0, n, 0, scale, c, &mut sc, &mut o);
            for (got, want) in o.iter().zip(expect.iter()) {
                assert!((got - want).abs() < 1e-3, "cap {c:?}: {o:?} vs {expect:?}");
            }
        }
    }
}
