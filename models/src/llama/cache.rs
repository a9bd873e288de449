//! One layer's KV cache: the keys and values of each new row come in, in f32; they are
//! kept position-major, as f32 or rounded to f16 ([`KvType`]), and the attention kernels
//! read them back (widening f16 to f32 as they go).
//!
//! The positions live in blocks of [`BLOCK`] positions, each behind an `Arc`, so a
//! snapshot (a `Clone`) shares every block with the cache it was taken from instead of
//! copying them: the prompt-prefix snapshots of a batch, each sequence's own cache, and
//! the grounding's take-back points all hold the positions they have in common once.
//! A block is written only while one cache holds it; the first write to a shared one
//! copies it (copy on write: at most one block per layer per snapshot taken). Blocks
//! are allocated whole, so the cache never holds the spare half a growing `Vec` does.
//!
//! The attention kernels see a block at a time ([`Kv::spans`]); [`scores`] and
//! [`mix`] split a range of positions between blocks so that every kernel call gets the
//! positions it would get over one contiguous cache, in groups of four from the range's
//! start: the same bits as a contiguous cache, for any block size.

use std::sync::Arc;

use half::f16;

use crate::quant::{attn_mix, attn_scores, Isa, KvElem};

/// Positions per block: 64 positions of a 0.5B model's layer (2 KV heads of 64) are
/// 32 KB of keys and 32 KB of values in f32.
pub(super) const BLOCK: usize = 64;

/// How the KV cache stores keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    /// 4 bytes a value: the values exactly as computed.
    #[default]
    F32,
    /// 2 bytes a value (llama.cpp's default): half the memory per position, each value
    /// rounded to nearest f16 when stored; attention still computes in f32.
    F16,
}

impl KvType {
    /// The `--kv-cache` value: `f32` or `f16`.
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
        }
    }
}

/// One block: up to [`BLOCK`] positions of `width` keys and `width` values.
#[derive(Debug, Clone)]
struct Block<E> {
    k: Vec<E>,
    v: Vec<E>,
}

/// The blocks of one layer in one element type.
#[derive(Debug, Clone)]
pub(super) struct Kv<E> {
    /// Values per position (the layer's KV width).
    width: usize,
    blocks: Vec<Arc<Block<E>>>,
    /// Positions held.
    len: usize,
}

impl<E: KvElem> Kv<E> {
    pub(super) fn new(width: usize) -> Self {
        Kv {
            width,
            blocks: Vec::new(),
            len: 0,
        }
    }

    pub(super) fn push(&mut self, k: &[f32], v: &[f32]) {
        let w = self.width;
        debug_assert_eq!(k.len(), v.len());
        debug_assert_eq!(k.len() % w, 0);
        let (mut k, mut v) = (k, v);
        while !k.is_empty() {
            if self.len == self.blocks.len() * BLOCK {
                self.blocks.push(Arc::new(Block {
                    k: Vec::with_capacity(BLOCK * w),
                    v: Vec::with_capacity(BLOCK * w),
                }));
            }
            let at = self.len % BLOCK;
            let n = (BLOCK - at).min(k.len() / w);
            let last = self.blocks.last_mut().expect("a block to write");
            // A block shared with a snapshot is copied before the first write to it
            // (whole: it is the snapshot's too, up to the length the snapshot has).
            let b = Arc::make_mut(last);
            // A truncated block may hold positions past `len`: they go first.
            b.k.truncate(at * w);
            b.v.truncate(at * w);
            b.k.reserve_exact(BLOCK * w - b.k.len());
            b.v.reserve_exact(BLOCK * w - b.v.len());
            E::extend_from_f32(&mut b.k, &k[..n * w]);
            E::extend_from_f32(&mut b.v, &v[..n * w]);
            self.len += n;
            k = &k[n * w..];
            v = &v[n * w..];
        }
    }

    fn truncate(&mut self, len: usize) {
        if len >= self.len {
            return;
        }
        self.blocks.truncate(len.div_ceil(BLOCK));
        self.len = len;
    }

    fn clear(&mut self) {
        self.blocks.clear();
        self.len = 0;
    }

    /// The keys and values of positions `start..end` of the value offset `off` on, a
    /// block at a time: `(first position, positions, keys, values)`, each slice starting
    /// at its first position's value `off`.
    pub(super) fn spans(
        &self,
        start: usize,
        end: usize,
        off: usize,
    ) -> impl Iterator<Item = (usize, usize, &[E], &[E])> + '_ {
        debug_assert!(end <= self.len);
        let w = self.width;
        let first = start / BLOCK;
        let last = end.div_ceil(BLOCK);
        self.blocks[first..last]
            .iter()
            .enumerate()
            .map(move |(i, b)| {
                let b0 = (first + i) * BLOCK;
                let s = start.max(b0);
                let e = end.min(b0 + BLOCK);
                let at = (s - b0) * w + off;
                (s, e - s, &b.k[at..], &b.v[at..])
            })
    }

    /// The bytes of the blocks this cache holds alone (not shared with a snapshot).
    #[cfg(test)]
    fn own_bytes(&self) -> usize {
        let per = std::mem::size_of::<E>() * 2 * BLOCK * self.width;
        self.blocks
            .iter()
            .filter(|b| Arc::strong_count(b) == 1)
            .count()
            * per
    }
}

/// One layer's cache: positions of `kv_dim` values, position-major, in f32 or f16.
#[derive(Debug, Clone)]
pub(super) enum LayerCache {
    F32(Kv<f32>),
    F16(Kv<f16>),
}

impl LayerCache {
    /// An empty cache of `width` values per position.
    pub(super) fn new(kv: KvType, width: usize) -> Self {
        match kv {
            KvType::F32 => Self::F32(Kv::new(width)),
            KvType::F16 => Self::F16(Kv::new(width)),
        }
    }

    /// Appends the rows of `k` and `v` (whole positions).
    pub(super) fn push(&mut self, k: &[f32], v: &[f32]) {
        match self {
            Self::F32(c) => c.push(k, v),
            Self::F16(c) => c.push(k, v),
        }
    }

    /// Positions held.
    pub(super) fn positions(&self) -> usize {
        match self {
            Self::F32(c) => c.len,
            Self::F16(c) => c.len,
        }
    }

    /// Keeps the first `positions` positions.
    pub(super) fn truncate(&mut self, positions: usize) {
        match self {
            Self::F32(c) => c.truncate(positions),
            Self::F16(c) => c.truncate(positions),
        }
    }

    pub(super) fn clear(&mut self) {
        match self {
            Self::F32(c) => c.clear(),
            Self::F16(c) => c.clear(),
        }
    }

    /// The bytes of the blocks no snapshot shares.
    #[cfg(test)]
    pub(super) fn own_bytes(&self) -> usize {
        match self {
            Self::F32(c) => c.own_bytes(),
            Self::F16(c) => c.own_bytes(),
        }
    }
}

/// Attention scores of one head over positions `start..end` of `kv`: `scores[j]` for
/// position `start + j` (see [`attn_scores`]; `off` is the head's first value in a
/// position). The positions go to the kernel in groups of four from `start`, as over a
/// contiguous cache; a group that a block boundary cuts is gathered first.
#[allow(clippy::too_many_arguments)]
pub(super) fn scores<E: KvElem>(
    isa: Isa,
    q: &[f32],
    kv: &Kv<E>,
    start: usize,
    end: usize,
    off: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let (w, hd) = (kv.width, q.len());
    debug_assert_eq!(scores.len(), end - start);
    let mut gather: Vec<E> = Vec::new();
    let mut j = start;
    for (s, n, k, _) in kv.spans(start, end, off) {
        // Positions of this block that a gathered group already scored.
        let skip = j - s;
        if skip >= n {
            // A gathered group took every position of this (last) block.
            continue;
        }
        let (s, n, k) = (j, n - skip, &k[skip * w..]);
        let left = end - s;
        // Whole groups of four (or the range's last positions, if they end here).
        let take = if left == n { n } else { n / 4 * 4 };
        if take > 0 {
            attn_scores(isa, q, k, w, scale, &mut scores[s - start..][..take]);
        }
        j = s + take;
        if j < end && j < s + n {
            // A group of four cut by the block's end: gather its positions.
            let g = (end - j).min(4);
            gather.clear();
            for p in j..j + g {
                let b = &kv.blocks[p / BLOCK];
                gather.extend_from_slice(&b.k[(p % BLOCK) * w + off..][..hd]);
            }
            attn_scores(isa, q, &gather, hd, scale, &mut scores[j - start..][..g]);
            j += g;
        }
    }
    debug_assert_eq!(j, end);
}

/// `out += sum_j p[j] * v[start + j]` over positions `start..end` of `kv`, one block at
/// a time, in position order (the same additions as over a contiguous cache).
pub(super) fn mix<E: KvElem>(
    isa: Isa,
    p: &[f32],
    kv: &Kv<E>,
    start: usize,
    end: usize,
    off: usize,
    out: &mut [f32],
) {
    for (s, n, _, v) in kv.spans(start, end, off) {
        attn_mix(isa, &p[s - start..][..n], v, kv.width, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize, w: usize, seed: f32) -> Vec<f32> {
        (0..n * w)
            .map(|i| (i as f32 * 0.37 + seed).sin() * 3.0)
            .collect()
    }

    fn contiguous<E: KvElem>(kv: &Kv<E>) -> (Vec<E>, Vec<E>) {
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for (_, n, kb, vb) in kv.spans(0, kv.len, 0) {
            k.extend_from_slice(&kb[..n * kv.width]);
            v.extend_from_slice(&vb[..n * kv.width]);
        }
        (k, v)
    }

    #[test]
    fn a_snapshot_shares_the_blocks_and_a_write_after_it_copies_one() {
        let w = 16;
        let mut a = LayerCache::new(KvType::F32, w);
        let x = rows(200, w, 0.0);
        a.push(&x, &x);
        let LayerCache::F32(ka) = &a else { panic!() };
        let block_bytes = 4 * 2 * BLOCK * w;
        assert_eq!(a.own_bytes(), 4 * block_bytes);
        let snap = a.clone();
        assert_eq!(a.own_bytes(), 0, "the snapshot shares every block");
        let before = contiguous(ka);
        // The original decodes on: only its last (partial) block is copied.
        let y = rows(3, w, 1.0);
        a.push(&y, &y);
        assert_eq!(a.own_bytes(), block_bytes);
        let (LayerCache::F32(ka), LayerCache::F32(ks)) = (&a, &snap) else {
            panic!()
        };
        assert_eq!(
            contiguous(ks),
            before,
            "the snapshot keeps what it was taken with"
        );
        let (k, _) = contiguous(ka);
        assert_eq!(k.len(), 203 * w);
        assert_eq!(&k[200 * w..], &y[..]);
        assert_eq!(&k[..200 * w], &before.0[..]);
    }

    #[test]
    fn truncate_then_push_writes_over_the_dropped_positions_only() {
        let w = 8;
        let mut a = LayerCache::new(KvType::F16, w);
        let x = rows(130, w, 0.5);
        a.push(&x, &x);
        let snap = a.clone();
        a.truncate(70);
        assert_eq!(a.positions(), 70);
        let y = rows(10, w, 2.0);
        a.push(&y, &y);
        assert_eq!(a.positions(), 80);
        let (LayerCache::F16(ka), LayerCache::F16(ks)) = (&a, &snap) else {
            panic!()
        };
        let (k, _) = contiguous(ka);
        let (ksnap, _) = contiguous(ks);
        assert_eq!(ksnap.len(), 130 * w, "the snapshot is untouched");
        assert_eq!(&k[..70 * w], &ksnap[..70 * w]);
        let want: Vec<f16> = y.iter().map(|&v| f16::from_f32(v)).collect();
        assert_eq!(&k[70 * w..], &want[..]);
        a.truncate(0);
        assert_eq!(a.positions(), 0);
    }

    /// Every range of positions, block boundaries cutting groups of four anywhere:
    /// the same bits as the kernels over one contiguous cache.
    #[test]
    fn scores_and_mix_over_blocks_are_the_contiguous_bits() {
        let (w, hd) = (32, 16);
        // Lengths whose last block holds 11, 1, 2 and 3 positions: a group of four
        // gathered across the last boundary can take the whole last block.
        for n in [3 * BLOCK + 11, 2 * BLOCK + 1, 2 * BLOCK + 2, 2 * BLOCK + 3] {
            let x = rows(n, w, 0.25);
            let vv = rows(n, w, 4.0);
            let mut c = Kv::<f32>::new(w);
            // Fed in uneven pieces, as a prefill in chunks and decode steps would.
            let mut at = 0;
            for piece in [5, 70, 1, 1, n - 77] {
                c.push(&x[at * w..(at + piece) * w], &vv[at * w..(at + piece) * w]);
                at += piece;
            }
            let q = rows(1, hd, 9.0);
            let ranges = [
                (0, n),
                (1, n),
                (3, 67),
                (61, 130),
                (62, 66),
                (63, 64),
                (5, 9),
                (0, 1),
                (126, 129),
                (127, 130),
                (125, 129),
                (n - 1, n),
                (n - 2, n),
                (n - 3, n),
                (n - 5, n),
                (n - 6, n),
                (190, n),
            ];
            for isa in Isa::available() {
                for (start, end) in ranges.into_iter().filter(|&(s, e)| s < e && e <= n) {
                    for off in [0, hd] {
                        let mut want = vec![0f32; end - start];
                        attn_scores(isa, &q, &x[start * w + off..], w, 0.125, &mut want);
                        let mut got = vec![0f32; end - start];
                        scores(isa, &q, &c, start, end, off, 0.125, &mut got);
                        assert_eq!(got, want, "{isa:?} n={n} scores {start}..{end} at {off}");
                        let mut want_o = vec![0.5f32; hd];
                        attn_mix(isa, &want, &vv[start * w + off..], w, &mut want_o);
                        let mut got_o = vec![0.5f32; hd];
                        mix(isa, &want, &c, start, end, off, &mut got_o);
                        assert_eq!(got_o, want_o, "{isa:?} n={n} mix {start}..{end} at {off}");
                    }
                }
            }
        }
    }
}
