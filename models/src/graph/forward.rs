//! One pass of the graph over several sequences: their tokens are stacked into one
//! `(rows, embedding)` matrix, so every projection is one `QMatMul` over the rows of all
//! of them; RoPE takes each row's own position; attention runs per sequence over its own
//! KV cache (a causal mask where a sequence feeds more than one row, or a local layer's
//! window cuts in). The layer is the one [`crate::llama`]'s module doc draws.

use candle_core::{DType, Device, Module, Result, Tensor, D};

use super::cache::LayerKv;
use super::weights::{GateUp, GraphWeights, Linear, Qkv};
use crate::llama::{Config, RopeStyle};

/// The forward pass of `segs.len()` sequences: segment `s` feeds `segs[s].0` at
/// positions `segs[s].1..` over `caches[s]` (whose layers hold `segs[s].1` positions);
/// the logits `(segments, vocab)` of each segment's last token, on the device.
pub(super) fn forward_impl(
    w: &GraphWeights,
    caches: &mut [&mut [LayerKv]],
    segs: &[(&[u32], usize)],
) -> Result<Tensor> {
    let cfg = &w.cfg;
    let dev = &w.device;
    let eps = cfg.rms_norm_eps;
    let ids: Vec<u32> = segs.iter().flat_map(|s| s.0.iter().copied()).collect();
    let n = ids.len();
    let positions: Vec<usize> = segs.iter().flat_map(|&(t, p)| p..p + t.len()).collect();
    let mut x = w.embed.embedding(&Tensor::from_vec(ids, n, dev)?)?;
    if cfg.embed_scale != 1.0 {
        x = (x * cfg.embed_scale as f64)?;
    }
    let global = RopeRows::new(&w.inv_freq, &positions, cfg.rope_attn_factor, dev)?;
    let local = if w.inv_freq_local.is_empty() {
        None
    } else {
        Some(RopeRows::new(&w.inv_freq_local, &positions, 1.0, dev)?)
    };
    // Each segment's causal masks, one per window kind (global, local), built once for
    // all layers.
    let mut masks: Vec<[Option<Mask>; 2]> = segs.iter().map(|_| [None, None]).collect();
    let (heads, kv_heads, hd) = (
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.head_dim,
    );
    let (qd, kvd) = (cfg.q_dim(), cfg.kv_dim());
    for (l, layer) in w.layers.iter().enumerate() {
        let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, eps)?;
        let (mut q, mut k, mut v) = match &layer.qkv {
            Qkv::Split([wq, wk, wv]) => (mm(wq, &h)?, mm(wk, &h)?, mm(wv, &h)?),
            Qkv::Fused(wqkv) => {
                let qkv = mm(wqkv, &h)?;
                (
                    qkv.narrow(1, 0, qd)?,
                    qkv.narrow(1, qd, kvd)?,
                    qkv.narrow(1, qd + kvd, kvd)?,
                )
            }
        };
        if let Some([bq, bk, bv]) = &layer.bias {
            q = q.broadcast_add(bq)?;
            k = k.broadcast_add(bk)?;
            v = v.broadcast_add(bv)?;
        }
        let mut q = q.contiguous()?.reshape((n, heads, hd))?;
        let mut k = k.contiguous()?.reshape((n, kv_heads, hd))?;
        let v = v.contiguous()?.reshape((n, kv_heads, hd))?;
        if let Some([qn, kn]) = &layer.qk_norm {
            q = candle_nn::ops::rms_norm(&q, qn, eps)?;
            k = candle_nn::ops::rms_norm(&k, kn, eps)?;
        }
        // `(1, heads, rows, head_dim)`: candle's RoPE layout, and attention's.
        let q = q.transpose(0, 1)?.unsqueeze(0)?.contiguous()?;
        let k = k.transpose(0, 1)?.unsqueeze(0)?.contiguous()?;
        let v = v.transpose(0, 1)?.contiguous()?;
        let window = cfg.window(l);
        let rows = match (&local, window) {
            (Some(local), Some(_)) => local,
            _ => &global,
        };
        let q = rope(cfg, &q, rows)?.squeeze(0)?;
        let k = rope(cfg, &k, rows)?.squeeze(0)?;
        let mut outs = Vec::with_capacity(segs.len());
        let mut r0 = 0;
        for ((c, &(toks, pos)), m) in caches.iter_mut().zip(segs).zip(&mut masks) {
            let c = &mut c[l];
            let rows = toks.len();
            c.push(&k.narrow(1, r0, rows)?, &v.narrow(1, r0, rows)?)?;
            let m = &mut m[usize::from(window.is_some())];
            if m.is_none() {
                *m = Some(Mask::new(rows, pos, window, dev)?);
            }
            let m = m.as_ref().expect("built above");
            outs.push(attention(cfg, &q.narrow(1, r0, rows)?, c, m)?);
            r0 += rows;
        }
        let att = Tensor::cat(&outs, 0)?;
        let mut o = mm(&layer.wo, &att)?;
        if let Some([post_attn, _]) = &layer.post_norm {
            o = candle_nn::ops::rms_norm(&o, post_attn, eps)?;
        }
        x = (x + o)?;
        let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, eps)?;
        let (g, u) = match &layer.gate_up {
            GateUp::Split { gate, up } => (mm(gate, &h)?, mm(up, &h)?),
            GateUp::Fused(gu) => {
                let gu = mm(gu, &h)?;
                (
                    gu.narrow(1, 0, layer.ffn)?,
                    gu.narrow(1, layer.ffn, layer.ffn)?,
                )
            }
        };
        let g = if cfg.arch.gemma() {
            g.gelu()?
        } else {
            candle_nn::ops::silu(&g)?
        };
        let mut d = mm(&layer.down, &(g * u)?)?;
        if let Some([_, post_ffn]) = &layer.post_norm {
            d = candle_nn::ops::rms_norm(&d, post_ffn, eps)?;
        }
        x = (x + d)?;
    }
    // The last row of each segment.
    let mut last = Vec::with_capacity(segs.len());
    let mut end = 0u32;
    for (t, _) in segs {
        end += t.len() as u32;
        last.push(end - 1);
    }
    let b = last.len();
    let x = x.index_select(&Tensor::from_vec(last, b, dev)?, 0)?;
    let x = candle_nn::ops::rms_norm(&x, &w.norm, eps)?;
    let mut logits = w.output.forward(&x)?.to_dtype(DType::F32)?;
    if let Some(cap) = cfg.final_softcap {
        logits = soft_cap(&logits, cap)?;
    }
    Ok(logits)
}

/// `x` `(rows, cols)` times the matrix: `(rows, matrix rows)`.
fn mm(lin: &Linear, x: &Tensor) -> Result<Tensor> {
    let cols = x.dim(D::Minus1)?;
    if cols != lin.cols {
        candle_core::bail!(
            "a {} x {} matrix times activations of width {cols}",
            lin.rows,
            lin.cols
        );
    }
    lin.mm.forward(&x.contiguous()?)
}

/// `cap * tanh(x / cap)` (Gemma 2's soft-capping).
fn soft_cap(x: &Tensor, cap: f32) -> Result<Tensor> {
    (x / cap as f64)?.tanh()? * cap as f64
}

/// cos and sin of each row's angles `position * inv_freq[i]` (an f32 angle, as
/// formwork's CPU file computes it), times `mscale` (LongRoPE's `attn_factor`):
/// `(rows, rope_dim / 2)` on the device.
pub(super) struct RopeRows {
    cos: Tensor,
    sin: Tensor,
}

impl RopeRows {
    fn new(inv_freq: &[f32], positions: &[usize], mscale: f32, dev: &Device) -> Result<Self> {
        let half = inv_freq.len();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(cos.capacity());
        for &p in positions {
            for f in inv_freq {
                let a = p as f32 * f;
                cos.push(a.cos() * mscale);
                sin.push(a.sin() * mscale);
            }
        }
        let shape = (positions.len(), half);
        Ok(Self {
            cos: Tensor::from_vec(cos, shape, dev)?,
            sin: Tensor::from_vec(sin, shape, dev)?,
        })
    }
}

/// RoPE on `x` `(1, heads, rows, head_dim)`, row `t` at its own position (`rows`' row
/// `t`): the first `rope_dim` values of each head turn, interleaved pairs for llama, NeoX
/// halves for the others; the rest stay.
fn rope(cfg: &Config, x: &Tensor, rows: &RopeRows) -> Result<Tensor> {
    let hd = cfg.head_dim;
    let rd = cfg.rope_dim;
    let turn = |t: &Tensor| match cfg.arch.rope() {
        RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(t, &rows.cos, &rows.sin),
        RopeStyle::Neox => candle_nn::rotary_emb::rope(t, &rows.cos, &rows.sin),
    };
    if rd == hd {
        return turn(x);
    }
    let turned = turn(&x.narrow(3, 0, rd)?.contiguous()?)?;
    Tensor::cat(&[&turned, &x.narrow(3, rd, hd - rd)?], 3)?.contiguous()
}

/// What one sequence's rows see on a layer kind: the cache from `start` on, and, where
/// it feeds more than one row, the additive causal mask `(rows, seen)` (0 where visible,
/// -inf elsewhere; a local layer's window cuts each row's view at `window` positions).
struct Mask {
    start: usize,
    mask: Option<Tensor>,
}

impl Mask {
    fn new(rows: usize, pos: usize, window: Option<usize>, dev: &Device) -> Result<Self> {
        // The first row sees from here; later rows' windows start later (the mask).
        let start = window.map_or(0, |w| (pos + 1).saturating_sub(w));
        let seen = pos + rows - start;
        if rows == 1 {
            return Ok(Self { start, mask: None });
        }
        let mut m = Vec::with_capacity(rows * seen);
        for i in 0..rows {
            let qp = pos + i;
            for j in 0..seen {
                let kp = start + j;
                let visible = kp <= qp && window.is_none_or(|w| qp - kp < w);
                m.push(if visible { 0f32 } else { f32::NEG_INFINITY });
            }
        }
        Ok(Self {
            start,
            mask: Some(Tensor::from_vec(m, (rows, seen), dev)?),
        })
    }
}

/// Causal attention of one sequence's new rows `q` `(heads, rows, head_dim)` over its
/// cache `c` (which holds them already), as `m` says what each row sees: `(rows, heads *
/// head_dim)`.
fn attention(cfg: &Config, q: &Tensor, c: &LayerKv, m: &Mask) -> Result<Tensor> {
    let (heads, rows, hd) = q.dims3()?;
    let kv_heads = cfg.num_key_value_heads;
    let rep = heads / kv_heads;
    let (k, v) = c.view(m.start)?;
    let seen = k.dim(1)?;
    // GQA without copying K/V: query heads h = g * rep + r share kv head g, so
    // `(heads, rows, hd)` is `(kv_heads, rep * rows, hd)`.
    let q = q.contiguous()?.reshape((kv_heads, rep * rows, hd))?;
    let mut s = (q.matmul(&k.t()?)? * cfg.attn_scale as f64)?;
    if let Some(cap) = cfg.attn_softcap {
        s = soft_cap(&s, cap)?;
    }
    if let Some(mask) = &m.mask {
        s = s
            .reshape((kv_heads, rep, rows, seen))?
            .broadcast_add(mask)?
            .reshape((kv_heads, rep * rows, seen))?;
    }
    let p = candle_nn::ops::softmax_last_dim(&s)?;
    p.matmul(&v.contiguous()?)?
        .reshape((heads, rows, hd))?
        .transpose(0, 1)?
        .contiguous()?
        .reshape((rows, heads * hd))
}
