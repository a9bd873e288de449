//! Quantised weights times 8-bit activations: the matmuls of [`crate::llama`] on the CPU.
//!
//! candle 0.11.1 runs Q4_1 matmuls with a scalar loop, so the runtime used to requantise
//! those tensors to Q8_0 at load (8 bits per weight where the file has 4.5). This module
//! computes with the file's own blocks, Q4_1 and Q8_0, the way llama.cpp does
//! (`ggml_vec_dot_q4_1_q8_1`, `ggml_vec_dot_q8_0_q8_0`):
//!
//! ```text
//! Q4_1 block (20 bytes, as in the GGUF file): d: f16, m: f16, 16 bytes of nibbles
//!     w[i] = d * q[i] + m        (q[i] in 0..16; low nibbles are i < 16, high ones i >= 16)
//! Q8_0 block (34 bytes): d: f16, 32 x i8       w[i] = d * q[i]
//! activation block (Q8Acts):  d8: f32, s8 = d8 * sum(a[i]), a: 32 x i8   (x[i] ~ d8 * a[i])
//! dot = d * d8 * sum(q[i] * a[i]) + m * s8     (m = 0 for Q8_0)
//! ```
//!
//! The integer sum runs on AVX2 (`vpmaddubsw` + `vpmaddwd`), or on AVX-512 VNNI
//! (`vpdpbusd`), chosen at run time by [`Isa::detect`]; [`Isa::Scalar`] is the portable
//! reference the SIMD paths are tested against. All paths give the same integer sums, and
//! differ only in the order of the f32 accumulation. Decoding takes one row at a time:
//! tiles of four rows, which shared each load of the activations, read four interleaved
//! streams of weights that the hardware prefetchers follow badly (`examples/kernel_speed`:
//! Q8_0 at 5 GB/s against 17 GB/s one row at a time). Prefill and batched decode tile up to four
//! tokens, which add in the same order as a single dot, so a token gets bit-identical
//! results alone or in a batch.

use std::sync::OnceLock;

pub mod attn;
pub mod kquant;
pub mod packed;
pub(crate) mod pages;

pub use attn::{attn_mix, attn_scores, KvElem};

/// Weights per block.
pub const QK: usize = 32;

/// The instruction set a kernel uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX2 plus AVX-512 VNNI on 256-bit registers (`vpdpbusd`), with AVX-512 BW's
    /// byte masks (Q5_0's fifth bits).
    Avx512Vnni,
}

impl Isa {
    /// The best kernel this CPU runs, detected once.
    pub fn detect() -> Isa {
        static ISA: OnceLock<Isa> = OnceLock::new();
        *ISA.get_or_init(|| {
            let all = Self::available();
            *all.last().unwrap_or(&Isa::Scalar)
        })
    }

    /// Every kernel this CPU can run, slowest first (always starts with `Scalar`).
    pub fn available() -> Vec<Isa> {
        #[allow(unused_mut)]
        let mut v = vec![Isa::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                v.push(Isa::Avx2);
                if is_x86_feature_detected!("avx512vnni")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512bw")
                {
                    v.push(Isa::Avx512Vnni);
                }
            }
        }
        v
    }

    /// Whether this kernel beats candle's own path (which requantises to Q8_0 and has SIMD).
    pub fn is_simd(self) -> bool {
        self != Isa::Scalar
    }
}

/// A block format this module computes with, spelled as GGUF spells it.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Q4_1,
    Q5_0,
    Q8_0,
    /// 256-weight super-blocks ([`kquant`]).
    Q4_K,
    Q6_K,
}

impl Format {
    /// Bytes per block of [`Self::block_elems`] weights.
    pub fn block_bytes(self) -> usize {
        match self {
            Format::Q4_1 => 20,
            Format::Q5_0 => 22,
            Format::Q8_0 => 34,
            Format::Q4_K => 144,
            Format::Q6_K => 210,
        }
    }

    /// Weights per block: 32, or 256 for the k-quants.
    pub fn block_elems(self) -> usize {
        match self {
            Format::Q4_K | Format::Q6_K => kquant::QK_K,
            _ => QK,
        }
    }

    /// Bytes of a row of `cols` weights (`cols` a multiple of [`Self::block_elems`]).
    pub fn row_bytes(self, cols: usize) -> usize {
        cols / self.block_elems() * self.block_bytes()
    }
}

/// A row-major quantised matrix of `rows` x `cols`, in the GGUF block layout.
#[derive(Debug, Clone)]
pub struct QMatrix {
    format: Format,
    rows: usize,
    cols: usize,
    data: Vec<u8>,
    /// Rows interleaved by groups of [`packed::R`] ([`Self::interleave`]).
    packed: bool,
}

impl QMatrix {
    /// `data` holds `rows * cols / format.block_elems()` blocks; `cols` must be a multiple
    /// of the block size (32, or 256 for the k-quants).
    pub fn new(format: Format, rows: usize, cols: usize, data: Vec<u8>) -> Result<Self, String> {
        let be = format.block_elems();
        if cols == 0 || !cols.is_multiple_of(be) {
            return Err(format!(
                "a {format:?} matrix needs a multiple of {be} columns, got {cols}"
            ));
        }
        let want = rows * format.row_bytes(cols);
        if data.len() != want {
            return Err(format!(
                "a {rows} x {cols} {format:?} matrix has {want} bytes, got {}",
                data.len()
            ));
        }
        Ok(Self {
            format,
            rows,
            cols,
            data,
            packed: false,
        })
    }

    /// This matrix with its rows interleaved by groups of eight ([`packed`]) where `isa`
    /// has kernels for that layout (AVX-512 VNNI) and the format and row count allow it;
    /// else unchanged. Decode and prefill both run on the interleaved layout; a row is
    /// taken back to the GGUF layout for an embedding lookup or another `Isa`.
    pub fn interleave(self, isa: Isa) -> Self {
        if self.packed
            || isa != Isa::Avx512Vnni
            || !packed::supports(self.format)
            || !self.rows.is_multiple_of(packed::R)
        {
            return self;
        }
        Self {
            data: packed::pack(self.format, self.rows, self.cols, self.data),
            packed: true,
            ..self
        }
    }

    /// Whether the rows are interleaved ([`Self::interleave`]).
    pub fn is_interleaved(&self) -> bool {
        self.packed
    }

    /// Callers of [`Self::dot_rows`] split the rows at multiples of this.
    pub fn row_align(&self) -> usize {
        if self.packed {
            packed::R
        } else {
            1
        }
    }

    /// Bytes the weights take in memory.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    pub fn format(&self) -> Format {
        self.format
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    fn row_bytes(&self) -> usize {
        self.format.row_bytes(self.cols)
    }

    /// Row `r` in the GGUF layout: borrowed, or gathered from its interleaved group.
    fn row(&self, r: usize) -> std::borrow::Cow<'_, [u8]> {
        let n = self.row_bytes();
        if !self.packed {
            return std::borrow::Cow::Borrowed(&self.data[r * n..(r + 1) * n]);
        }
        let (f, bb) = (self.format, self.format.block_bytes());
        let (nb, gbb) = (n / bb, packed::group_block_bytes(f));
        let g = r / packed::R;
        let mut row = vec![0u8; n];
        for (b, dst) in row.chunks_exact_mut(bb).enumerate() {
            packed::unpack_block(
                f,
                &self.data[(g * nb + b) * gbb..][..gbb],
                r % packed::R,
                dst,
            );
        }
        std::borrow::Cow::Owned(row)
    }

    /// Row `r` as f32 (an embedding lookup).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert_eq!(out.len(), self.cols);
        let (bb, be) = (self.format.block_bytes(), self.format.block_elems());
        for (block, out) in self.row(r).chunks_exact(bb).zip(out.chunks_exact_mut(be)) {
            let d = f16_at(block, 0);
            match self.format {
                Format::Q5_0 => {
                    let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
                    for (i, &b) in block[6..].iter().enumerate() {
                        let (lo, hi) = q5_0_pair(b, qh, i);
                        out[i] = d * (lo - 16) as f32;
                        out[i + 16] = d * (hi - 16) as f32;
                    }
                }
                Format::Q4_K => kquant::dequantize_q4_k(block, out),
                Format::Q6_K => kquant::dequantize_q6_k(block, out),
                Format::Q4_1 => {
                    let m = f16_at(block, 2);
                    for (i, &b) in block[4..].iter().enumerate() {
                        out[i] = d * (b & 0x0f) as f32 + m;
                        out[i + 16] = d * (b >> 4) as f32 + m;
                    }
                }
                Format::Q8_0 => {
                    for (o, &q) in out.iter_mut().zip(&block[2..]) {
                        *o = d * q as i8 as f32;
                    }
                }
            }
        }
    }

    /// `out[(r - r0) * n + t] = dot(row r, token t)` for the rows `r0..r0 + out.len() / n`
    /// (row-major by weight row: a caller splits the rows between threads).
    pub fn dot_rows(&self, isa: Isa, r0: usize, acts: &Q8Acts, out: &mut [f32]) {
        assert_eq!(acts.cols, self.cols, "activation width");
        let n = acts.n;
        assert_eq!(out.len() % n.max(1), 0);
        let rows = out.len() / n.max(1);
        assert!(r0 + rows <= self.rows);
        if self.packed {
            return self.dot_rows_packed(isa, r0, rows, acts, &mut Sink::Rows { out, n });
        }
        // Each row's blocks are unpacked once for up to four tokens. Rows go in groups of
        // about 16 KB of weights, each group against every four tokens (then the one to
        // three left), so that the tokens' activations stay in L1 across the group. Every
        // (row, token) adds as `dot` does. One token (decode) is `dot` row after row, a
        // single stream of weights.
        let group = (16384 / self.row_bytes()).max(1);
        for (g, out_rows) in out.chunks_mut(group * n).enumerate() {
            let row0 = r0 + g * group;
            let mut t = 0;
            while t < n {
                match n - t {
                    1 => self.tile::<1>(isa, row0, acts, t, out_rows),
                    2 => self.tile::<2>(isa, row0, acts, t, out_rows),
                    3 => self.tile::<3>(isa, row0, acts, t, out_rows),
                    _ => self.tile::<4>(isa, row0, acts, t, out_rows),
                }
                t += (n - t).min(4);
            }
        }
    }

    /// `out[t * self.rows() + r] = dot(row r, token t)` for the rows `r0..r0 + rows`:
    /// token-major, as the model wants its outputs, so that no transpose follows. The
    /// interleaved kernels write there directly; the row kernels write row-major, then
    /// this copies.
    ///
    /// # Safety
    /// `out` points to `acts.n() * self.rows()` writable f32, and while this runs no
    /// one else reads or writes the places of the rows `r0..r0 + rows` in it (threads
    /// take disjoint row ranges of one output).
    pub unsafe fn dot_rows_token_major(
        &self,
        isa: Isa,
        r0: usize,
        rows: usize,
        acts: &Q8Acts,
        out: *mut f32,
    ) {
        assert_eq!(acts.cols, self.cols, "activation width");
        assert!(r0 + rows <= self.rows);
        let (n, ld) = (acts.n, self.rows);
        if self.packed {
            let mut sink = Sink::Tokens { ptr: out, ld, r0 };
            return self.dot_rows_packed(isa, r0, rows, acts, &mut sink);
        }
        let mut tmp = vec![0f32; rows * n];
        self.dot_rows(isa, r0, acts, &mut tmp);
        // In tiles of 16 x 16, so that both sides go a cache line at a time (a plain
        // double loop strides a whole row per write: 7.6% of Gemma 3's prefill).
        const TILE: usize = 16;
        for i0 in (0..rows).step_by(TILE) {
            for t0 in (0..n).step_by(TILE) {
                for i in i0..(i0 + TILE).min(rows) {
                    for t in t0..(t0 + TILE).min(n) {
                        // SAFETY: within the rows this call owns, by the contract above.
                        unsafe { *out.add(t * ld + r0 + i) = tmp[i * n + t] };
                    }
                }
            }
        }
    }

    /// [`Self::dot_rows`] on interleaved rows (`r0` and `rows` multiples of 8).
    fn dot_rows_packed(&self, isa: Isa, r0: usize, rows: usize, acts: &Q8Acts, sink: &mut Sink) {
        let n = acts.n;
        #[cfg(target_arch = "x86_64")]
        if isa == Isa::Avx512Vnni {
            let r = packed::R;
            assert!(
                r0.is_multiple_of(r) && rows.is_multiple_of(r),
                "interleaved rows go by {r}"
            );
            let gb = self.cols / self.format.block_elems() * packed::group_block_bytes(self.format);
            // Groups of rows of about 128 KB of weights (in L2) against four tokens at a
            // time (their activations in L1).
            let sg = (131072 / gb).max(1);
            let (g0, groups) = (r0 / r, rows / r);
            for s in (0..groups).step_by(sg) {
                let mut t = 0;
                while t < n {
                    let k = (n - t).min(4);
                    for g in s..(s + sg).min(groups) {
                        let w = &self.data[(g0 + g) * gb..][..gb];
                        match k {
                            1 => self.group::<1>(w, acts, t, g, sink),
                            2 => self.group::<2>(w, acts, t, g, sink),
                            3 => self.group::<3>(w, acts, t, g, sink),
                            _ => self.group::<4>(w, acts, t, g, sink),
                        }
                    }
                    t += k;
                }
            }
            return;
        }
        // Other kernels: each row back in the GGUF layout.
        for i in 0..rows {
            let w = self.row(r0 + i);
            for t in 0..n {
                sink.put(i, t, &[dot(isa, self.format, &w, acts.token(t))]);
            }
        }
    }

    /// One interleaved group `w` (group `g` of the call) against tokens `t..t + N`.
    #[cfg(target_arch = "x86_64")]
    fn group<const N: usize>(&self, w: &[u8], acts: &Q8Acts, t: usize, g: usize, sink: &mut Sink) {
        let a: [Q8Row<'_>; N] = std::array::from_fn(|j| acts.token(t + j));
        // SAFETY: only called for `Isa::Avx512Vnni`, which `available()` yields only where
        // the CPU has AVX-512 VNNI, VL, BW and AVX2, FMA, F16C; the kernels check `w`'s
        // length against the activations'.
        let v = unsafe {
            match self.format {
                Format::Q5_0 => packed::x86::group_q5_0::<N>(w, a),
                Format::Q8_0 => packed::x86::group_q8_0::<N>(w, a),
                Format::Q4_K => packed::x86::group_q4_k::<N>(w, a),
                Format::Q6_K => packed::x86::group_q6_k::<N>(w, a),
                Format::Q4_1 => packed::x86::group_q4_1::<N>(w, a),
            }
        };
        for (j, v) in v.iter().enumerate() {
            sink.put(g * packed::R, t + j, v);
        }
    }

    /// Tokens `t..t + N` against the rows from `row0` that `out_rows` holds (`n` each).
    fn tile<const N: usize>(
        &self,
        isa: Isa,
        row0: usize,
        acts: &Q8Acts,
        t: usize,
        out_rows: &mut [f32],
    ) {
        let a: [Q8Row<'_>; N] = std::array::from_fn(|j| acts.token(t + j));
        for (i, out_row) in out_rows.chunks_exact_mut(acts.n).enumerate() {
            let w = self.row(row0 + i);
            if N == 1 {
                out_row[t] = dot(isa, self.format, &w, a[0]);
            } else {
                out_row[t..t + N].copy_from_slice(&dot_tokens(isa, self.format, &w, a));
            }
        }
    }
}

/// Where [`QMatrix::dot_rows_packed`] writes: row-major, a call's own rows; or
/// token-major, into the whole output of `ld` rows per token at the rows from `r0`.
enum Sink<'a> {
    Rows { out: &'a mut [f32], n: usize },
    Tokens { ptr: *mut f32, ld: usize, r0: usize },
}

impl Sink<'_> {
    /// The results of rows `i..i + v.len()` (from the call's first row) for token `t`.
    #[inline]
    fn put(&mut self, i: usize, t: usize, v: &[f32]) {
        match self {
            Sink::Rows { out, n } => {
                for (k, x) in v.iter().enumerate() {
                    out[(i + k) * *n + t] = *x;
                }
            }
            // SAFETY: `dot_rows_token_major`'s contract: the rows are the call's own.
            Sink::Tokens { ptr, ld, r0 } => unsafe {
                std::ptr::copy_nonoverlapping(v.as_ptr(), ptr.add(t * *ld + *r0 + i), v.len())
            },
        }
    }
}

/// Q5_0: the weights `i` and `i + 16` (0..32, before the offset of 16) from nibble byte
/// `i` and the 32 high bits `qh` (bit `j` is the fifth bit of weight `j`).
fn q5_0_pair(b: u8, qh: u32, i: usize) -> (i32, i32) {
    let lo = (b & 0x0f) as u32 | ((qh >> i) << 4 & 0x10);
    let hi = (b >> 4) as u32 | ((qh >> (i + 12)) & 0x10);
    (lo as i32, hi as i32)
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[at], b[at + 1]])).to_f32()
}

/// Activations quantised to 8 bits per block of 32, `n` tokens of `cols` values.
#[derive(Debug, Clone, Default)]
pub struct Q8Acts {
    n: usize,
    cols: usize,
    qs: Vec<i8>,
    /// Per block: `[d8, d8 * sum(a)]`.
    ds: Vec<[f32; 2]>,
    /// Per block: the sums of `a` over its two halves of 16.
    hs: Vec<[i32; 2]>,
}

/// One token's quantised activations.
#[derive(Clone, Copy)]
pub struct Q8Row<'a> {
    qs: &'a [i8],
    ds: &'a [[f32; 2]],
    hs: &'a [[i32; 2]],
}

impl Q8Acts {
    /// Quantise `x` (`n` rows of `cols`, `cols` a multiple of 32), reusing this buffer.
    pub fn quantize(&mut self, x: &[f32], n: usize, cols: usize) {
        assert!(cols.is_multiple_of(QK) && x.len() == n * cols);
        self.n = n;
        self.cols = cols;
        self.qs.resize(n * cols, 0);
        self.ds.resize(n * cols / QK, [0.0; 2]);
        self.hs.resize(n * cols / QK, [0; 2]);
        #[cfg(target_arch = "x86_64")]
        if Isa::detect() != Isa::Scalar {
            // SAFETY: `detect` finds AVX2 (with FMA, F16C) before it names a SIMD kernel.
            unsafe { x86::quantize_avx2(x, &mut self.qs, &mut self.ds, &mut self.hs) };
            return;
        }
        quantize_scalar(x, &mut self.qs, &mut self.ds, &mut self.hs);
    }

    pub fn n(&self) -> usize {
        self.n
    }

    fn token(&self, t: usize) -> Q8Row<'_> {
        let nb = self.cols / QK;
        Q8Row {
            qs: &self.qs[t * self.cols..(t + 1) * self.cols],
            ds: &self.ds[t * nb..(t + 1) * nb],
            hs: &self.hs[t * nb..(t + 1) * nb],
        }
    }
}

/// [`Q8Acts::quantize`]'s blocks, one at a time: the reference of `x86::quantize_avx2`,
/// which gives the same bits.
fn quantize_scalar(x: &[f32], qs: &mut [i8], ds: &mut [[f32; 2]], hs: &mut [[i32; 2]]) {
    for (((xb, qb), ds), hs) in x
        .chunks_exact(QK)
        .zip(qs.chunks_exact_mut(QK))
        .zip(ds.iter_mut())
        .zip(hs.iter_mut())
    {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut half = [0i32; 2];
        for (i, (q, &v)) in qb.iter_mut().zip(xb).enumerate() {
            // Round to nearest, ties to even, without a libm call: exact for |v| <= 127.
            let r = ((v * id + MAGIC) - MAGIC) as i32;
            *q = r as i8;
            half[i / 16] += r;
        }
        let sum = half[0] + half[1];
        *ds = [d, d * sum as f32];
        *hs = half;
    }
}

/// 1.5 * 2^23: `(v + MAGIC) - MAGIC` rounds `v` to the nearest integer, ties to even.
const MAGIC: f32 = 12_582_912.0;

/// Checks that `w` (one row) and `a` (one token) have the same width.
fn check_row(f: Format, w: &[u8], a: Q8Row<'_>) {
    assert_eq!(a.qs.len(), a.ds.len() * QK);
    assert_eq!(w.len(), f.row_bytes(a.qs.len()), "{f:?} row width");
}

// SAFETY (all SIMD arms below): `available()` yields `Avx2` only where the CPU has AVX2,
// FMA and F16C, and `Avx512Vnni` only where it also has AVX-512 VNNI, VL and BW; the
// lengths were checked by `check_row`.
macro_rules! dispatch {
    ($isa:expr, $f:expr, $args:tt, $fallback:expr,
     $($fmt:ident => $avx2:path, $vnni:path;)*) => {
        match ($isa, $f) {
            $(
                #[cfg(target_arch = "x86_64")]
                (Isa::Avx2, Format::$fmt) => unsafe { $avx2 $args },
                #[cfg(target_arch = "x86_64")]
                (Isa::Avx512Vnni, Format::$fmt) => unsafe { $vnni $args },
            )*
            _ => $fallback,
        }
    };
}

/// One weight row (`w`, GGUF blocks of `f`) times one token's activations.
pub fn dot(isa: Isa, f: Format, w: &[u8], a: Q8Row<'_>) -> f32 {
    check_row(f, w, a);
    dispatch!(isa, f, (w, a), dot_scalar(f, w, a),
        Q4_1 => x86::dot_q4_1_avx2, x86::dot_q4_1_vnni;
        Q5_0 => x86::dot_q5_0_avx2, x86::dot_q5_0_vnni;
        Q8_0 => x86::dot_q8_0_avx2, x86::dot_q8_0_vnni;
        Q4_K => kquant::x86::dot_q4_k_avx2, kquant::x86::dot_q4_k_vnni;
        Q6_K => kquant::x86::dot_q6_k_avx2, kquant::x86::dot_q6_k_vnni;
    )
}

/// One weight row times `N` tokens' activations (`N` >= 1), each adding in the order of
/// [`dot`]: the row's blocks are unpacked once for all of them.
pub fn dot_tokens<const N: usize>(isa: Isa, f: Format, w: &[u8], a: [Q8Row<'_>; N]) -> [f32; N] {
    for t in &a {
        check_row(f, w, *t);
    }
    dispatch!(isa, f, (w, a), a.map(|a| dot_scalar(f, w, a)),
        Q4_1 => x86::dot_tokens_q4_1_avx2::<N>, x86::dot_tokens_q4_1_vnni::<N>;
        Q5_0 => x86::dot_tokens_q5_0_avx2::<N>, x86::dot_tokens_q5_0_vnni::<N>;
        Q8_0 => x86::dot_tokens_q8_0_avx2::<N>, x86::dot_tokens_q8_0_vnni::<N>;
        Q4_K => kquant::x86::dot_tokens_q4_k_avx2::<N>, kquant::x86::dot_tokens_q4_k_vnni::<N>;
        Q6_K => kquant::x86::dot_tokens_q6_k_avx2::<N>, kquant::x86::dot_tokens_q6_k_vnni::<N>;
    )
}

/// The reference: integer sums per block of 32, then the scale terms.
pub fn dot_scalar(f: Format, w: &[u8], a: Q8Row<'_>) -> f32 {
    match f {
        Format::Q4_K => return kquant::dot_q4_k_scalar(w, a),
        Format::Q6_K => return kquant::dot_q6_k_scalar(w, a),
        _ => {}
    }
    let mut acc = 0f32;
    for ((block, qa), ds) in w
        .chunks_exact(f.block_bytes())
        .zip(a.qs.chunks_exact(QK))
        .zip(a.ds)
    {
        let d = f16_at(block, 0);
        match f {
            Format::Q4_1 => {
                let m = f16_at(block, 2);
                let mut isum = 0i32;
                for (i, &b) in block[4..].iter().enumerate() {
                    isum += (b & 0x0f) as i32 * qa[i] as i32 + (b >> 4) as i32 * qa[i + 16] as i32;
                }
                acc += d * ds[0] * isum as f32 + m * ds[1];
            }
            Format::Q5_0 => {
                let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
                let mut isum = 0i32;
                for (i, &b) in block[6..].iter().enumerate() {
                    let (lo, hi) = q5_0_pair(b, qh, i);
                    isum += (lo - 16) * qa[i] as i32 + (hi - 16) * qa[i + 16] as i32;
                }
                acc += d * ds[0] * isum as f32;
            }
            Format::Q8_0 => {
                let isum: i32 = block[2..]
                    .iter()
                    .zip(qa)
                    .map(|(&w, &a)| w as i8 as i32 * a as i32)
                    .sum();
                acc += d * ds[0] * isum as f32;
            }
            Format::Q4_K | Format::Q6_K => unreachable!("handled above"),
        }
    }
    acc
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Q8Row, QK};
    use std::arch::x86_64::*;

    /// 16 bytes of nibbles at `p` as 32 unsigned bytes 0..16: low nibbles first.
    #[inline(always)]
    unsafe fn nibbles(p: *const u8) -> __m256i {
        let q = _mm_loadu_si128(p as *const __m128i);
        let mask = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(q, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
        _mm256_set_m128i(hi, lo)
    }

    /// Q4_1: the 32 weights of a block as unsigned bytes 0..16, in element order.
    #[inline(always)]
    unsafe fn q4_1_weights(p: *const u8) -> __m256i {
        nibbles(p.add(4))
    }

    /// Q5_0: the 32 weights of a block as unsigned bytes 0..32 (before the offset of 16):
    /// the nibbles, and bit `i` of `qh` as 16 in byte `i` (llama.cpp's `bytes_from_bits_32`).
    #[inline(always)]
    unsafe fn q5_0_weights(p: *const u8) -> __m256i {
        let qh = (p.add(2) as *const i32).read_unaligned();
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(qh),
            _mm256_set_epi64x(
                0x0303030303030303,
                0x0202020202020202,
                0x0101010101010101,
                0,
            ),
        );
        let bits = _mm256_cmpeq_epi8(
            _mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
            _mm256_set1_epi64x(-1),
        );
        _mm256_or_si256(
            nibbles(p.add(6)),
            _mm256_and_si256(bits, _mm256_set1_epi8(0x10)),
        )
    }

    /// `q5_0_weights` with AVX-512 BW: `qh` as a mask that adds 16 to its bytes.
    #[inline(always)]
    unsafe fn q5_0_weights_bw(p: *const u8) -> __m256i {
        let qh = (p.add(2) as *const u32).read_unaligned();
        let nib = nibbles(p.add(6));
        _mm256_mask_add_epi8(nib, qh, nib, _mm256_set1_epi8(0x10))
    }

    /// Q5_0: `[d, -16 d, 0, 0]`: `sum((q - 16) a) = sum(q a) - 16 sum(a)`.
    #[inline(always)]
    unsafe fn q5_0_dm(p: *const u8) -> __m128 {
        // Exact: the scaling by -16 commutes with the rounding of the products and sums.
        _mm_mul_ps(f16_splat(p), _mm_setr_ps(1.0, -16.0, 0.0, 0.0))
    }

    /// The f16 at `p` in every lane. A broadcast, not an insert into lane 0: LLVM inserts
    /// into whatever register is at hand, the accumulator included, which chained every
    /// block to the one before (16 cycles a block for Q5_0).
    #[inline(always)]
    pub(super) unsafe fn f16_splat(p: *const u8) -> __m128 {
        _mm_cvtph_ps(_mm_set1_epi16((p as *const i16).read_unaligned()))
    }

    /// Q4_1: `[d, m, 0, 0]`.
    #[inline(always)]
    unsafe fn q4_1_dm(p: *const u8) -> __m128 {
        _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()))
    }

    /// Q8_0: the 32 signed weights of a block.
    #[inline(always)]
    unsafe fn q8_0_weights(p: *const u8) -> __m256i {
        _mm256_loadu_si256(p.add(2) as *const __m256i)
    }

    /// Q8_0: `[d, 0, 0, 0]`.
    #[inline(always)]
    unsafe fn q8_0_dm(p: *const u8) -> __m128 {
        _mm_mul_ps(f16_splat(p), _mm_setr_ps(1.0, 0.0, 0.0, 0.0))
    }

    /// `[d8, s8, 0, 0]` of an activation block.
    #[inline(always)]
    pub(super) unsafe fn act_ds(ds: *const [f32; 2]) -> __m128 {
        _mm_castpd_ps(_mm_load_sd(ds as *const f64))
    }

    #[inline(always)]
    pub(super) unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// The dot from its accumulators: lane 1 of `macc` holds the sum of the `m * s8` terms.
    #[inline(always)]
    pub(super) unsafe fn finish(acc: __m256, macc: __m128) -> f32 {
        hsum(acc) + _mm_cvtss_f32(_mm_shuffle_ps(macc, macc, 1))
    }

    // Integer sums of one block. Unsigned weights (Q4_1) go straight in; signed ones
    // (Q8_0) move their sign onto the activations, as llama.cpp does.
    #[inline(always)]
    pub(super) unsafe fn isum_u_avx2(w: __m256i, a: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1))
    }
    #[inline(always)]
    pub(super) unsafe fn isum_s_avx2(w: __m256i, a: __m256i) -> __m256i {
        isum_u_avx2(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w))
    }
    #[inline(always)]
    pub(super) unsafe fn isum_u_vnni(w: __m256i, a: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a)
    }
    #[inline(always)]
    pub(super) unsafe fn isum_s_vnni(w: __m256i, a: __m256i) -> __m256i {
        isum_u_vnni(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w))
    }

    /// [`super::quantize_scalar`] eight lanes at a time, with the same operations in the
    /// same order per value (max, divisions, multiply, the rounding trick): the same bits.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn quantize_avx2(
        x: &[f32],
        qs: &mut [i8],
        ds: &mut [[f32; 2]],
        hs: &mut [[i32; 2]],
    ) {
        assert!(qs.len() == x.len() && ds.len() * QK == x.len() && hs.len() == ds.len());
        let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let magic = _mm256_set1_ps(super::MAGIC);
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let hsum = |v: __m256i| {
            let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
            _mm_cvtsi128_si32(s)
        };
        for b in 0..ds.len() {
            let p = x.as_ptr().add(b * QK);
            let v: [__m256; 4] = std::array::from_fn(|k| _mm256_loadu_ps(p.add(8 * k)));
            // max(|v|, m) keeps m where |v| is NaN, as f32::max does.
            let mut m = _mm256_setzero_ps();
            for v in v {
                m = _mm256_max_ps(_mm256_and_ps(v, abs), m);
            }
            let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            let m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
            let amax = _mm_cvtss_f32(m4);
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            let idv = _mm256_set1_ps(id);
            let q: [__m256i; 4] = std::array::from_fn(|k| {
                let r = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(v[k], idv), magic), magic);
                _mm256_cvttps_epi32(r)
            });
            let half = [
                hsum(_mm256_add_epi32(q[0], q[1])),
                hsum(_mm256_add_epi32(q[2], q[3])),
            ];
            let bytes = _mm256_packs_epi16(
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            let bytes = _mm256_permutevar8x32_epi32(bytes, order);
            _mm256_storeu_si256(qs.as_mut_ptr().add(b * QK) as *mut __m256i, bytes);
            let sum = half[0] + half[1];
            ds[b] = [d, d * sum as f32];
            hs[b] = half;
        }
    }

    /// One block into one accumulator pair; the same steps in every kernel below.
    macro_rules! step {
        ($acc:expr, $macc:expr, $wv:expr, $dm:expr, $a:expr, $b:expr, $isum:ident) => {{
            let s = _mm_mul_ps($dm, act_ds($a.ds.as_ptr().add($b)));
            let av = _mm256_loadu_si256($a.qs.as_ptr().add($b * QK) as *const __m256i);
            let i = $isum($wv, av);
            $acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_broadcastss_ps(s), $acc);
            $macc = _mm_add_ps($macc, s);
        }};
    }

    macro_rules! kernels {
        ($features:literal, $bb:expr, $weights:ident, $dm:ident, $isum:ident,
         $dot:ident, $tokens:ident) => {
            #[target_feature(enable = $features)]
            pub unsafe fn $dot(w: &[u8], a: Q8Row<'_>) -> f32 {
                let (mut acc, mut macc) = (_mm256_setzero_ps(), _mm_setzero_ps());
                for b in 0..a.ds.len() {
                    let p = w.as_ptr().add(b * $bb);
                    step!(acc, macc, $weights(p), $dm(p), a, b, $isum);
                }
                finish(acc, macc)
            }

            /// `N` tokens share each unpacked weight block (prefill, batched decode).
            #[target_feature(enable = $features)]
            pub unsafe fn $tokens<const N: usize>(w: &[u8], a: [Q8Row<'_>; N]) -> [f32; N] {
                let mut acc = [_mm256_setzero_ps(); N];
                let mut macc = [_mm_setzero_ps(); N];
                for b in 0..a[0].ds.len() {
                    let p = w.as_ptr().add(b * $bb);
                    let (wv, dm) = ($weights(p), $dm(p));
                    for t in 0..N {
                        step!(acc[t], macc[t], wv, dm, a[t], b, $isum);
                    }
                }
                std::array::from_fn(|t| finish(acc[t], macc[t]))
            }
        };
    }

    kernels!(
        "avx2,fma,f16c",
        20,
        q4_1_weights,
        q4_1_dm,
        isum_u_avx2,
        dot_q4_1_avx2,
        dot_tokens_q4_1_avx2
    );
    kernels!(
        "avx2,fma,f16c,avx512vnni,avx512vl",
        20,
        q4_1_weights,
        q4_1_dm,
        isum_u_vnni,
        dot_q4_1_vnni,
        dot_tokens_q4_1_vnni
    );
    kernels!(
        "avx2,fma,f16c",
        22,
        q5_0_weights,
        q5_0_dm,
        isum_u_avx2,
        dot_q5_0_avx2,
        dot_tokens_q5_0_avx2
    );
    kernels!(
        "avx2,fma,f16c,avx512vnni,avx512vl,avx512bw",
        22,
        q5_0_weights_bw,
        q5_0_dm,
        isum_u_vnni,
        dot_q5_0_vnni,
        dot_tokens_q5_0_vnni
    );
    kernels!(
        "avx2,fma,f16c",
        34,
        q8_0_weights,
        q8_0_dm,
        isum_s_avx2,
        dot_q8_0_avx2,
        dot_tokens_q8_0_avx2
    );
    kernels!(
        "avx2,fma,f16c,avx512vnni,avx512vl",
        34,
        q8_0_weights,
        q8_0_dm,
        isum_s_vnni,
        dot_q8_0_vnni,
        dot_tokens_q8_0_vnni
    );
}

// How a test says it skipped, shared with the test crates (tests/support/skip.rs).
#[cfg(test)]
#[path = "../../../tests/support/skip.rs"]
mod test_skip;

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_skip as skip;

    /// The kernels a test loops over (`Isa::available()`), saying SKIPPED for the one
    /// this CPU cannot run, so its absence is seen rather than passed.
    fn kernels_here(test: &str) -> Vec<Isa> {
        let isas = Isa::available();
        if !isas.contains(&Isa::Avx512Vnni) {
            skip::skipped(format_args!(
                "SKIPPED (VNNI part of {test}): this CPU lacks AVX-512 VNNI, VL or BW; the \
                 Avx512Vnni kernels were not run (checked: {isas:?})"
            ));
        }
        isas
    }

    /// A small deterministic generator (xorshift), so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn f32(&mut self) -> f32 {
            (self.next() % 20_001) as f32 / 10_000.0 - 1.0
        }
    }

    fn f16_bytes(v: f32) -> [u8; 2] {
        half::f16::from_f32(v).to_bits().to_le_bytes()
    }

    /// Random blocks of `f`: random bytes for the quants (and the k-quants' scales), sane
    /// f16 scales, and in the first block the extreme weights.
    fn random_matrix(rng: &mut Rng, f: Format, rows: usize, cols: usize) -> QMatrix {
        let nb = rows * cols / f.block_elems();
        let mut data: Vec<u8> = (0..nb * f.block_bytes())
            .map(|_| rng.next() as u8)
            .collect();
        for block in data.chunks_exact_mut(f.block_bytes()) {
            match f {
                Format::Q4_1 => {
                    block[0..2].copy_from_slice(&f16_bytes(rng.f32() * 0.1));
                    block[2..4].copy_from_slice(&f16_bytes(rng.f32() * 0.5));
                }
                Format::Q5_0 | Format::Q8_0 => {
                    block[0..2].copy_from_slice(&f16_bytes(rng.f32() * 0.1))
                }
                Format::Q4_K => {
                    block[0..2].copy_from_slice(&f16_bytes(rng.f32() * 0.01));
                    block[2..4].copy_from_slice(&f16_bytes(rng.f32() * 0.01));
                }
                Format::Q6_K => block[208..210].copy_from_slice(&f16_bytes(rng.f32() * 0.002)),
            }
        }
        // Extremes: the first block's first weights at -128 (Q8_0), 15 (Q4_1, Q4_K),
        // 31 (Q5_0), 31 and -32 (Q6_K).
        match f {
            Format::Q8_0 => data[2..18].fill(0x80),
            Format::Q4_1 => data[4..20].fill(0xff),
            Format::Q5_0 => data[2..22].fill(0xff),
            Format::Q4_K => data[16..48].fill(0xff),
            Format::Q6_K => {
                data[0..16].fill(0xff);
                data[128..136].fill(0xff);
                data[16..32].fill(0);
                data[136..144].fill(0);
            }
        }
        QMatrix::new(f, rows, cols, data).unwrap()
    }

    /// f64 reference from the dequantised weights and the quantised activations, and the
    /// sum of the terms' magnitudes (what the f32 rounding of the kernels scales with).
    fn reference(w: &QMatrix, acts: &Q8Acts, r: usize, t: usize) -> (f64, f64) {
        let mut row = vec![0f32; w.cols()];
        w.dequantize_row(r, &mut row);
        let a = acts.token(t);
        let (mut s, mut mag) = (0f64, 0f64);
        for (i, x) in row.iter().enumerate() {
            let term = *x as f64 * a.ds[i / QK][0] as f64 * a.qs[i] as f64;
            s += term;
            mag += term.abs();
        }
        (s, mag)
    }

    const FORMATS: [Format; 5] = [
        Format::Q4_1,
        Format::Q5_0,
        Format::Q8_0,
        Format::Q4_K,
        Format::Q6_K,
    ];

    #[test]
    fn every_kernel_matches_the_reference() {
        let isas = kernels_here("every_kernel_matches_the_reference");
        let mut rng = Rng(0x9e3779b97f4a7c15);
        // Odd row counts, several widths, one and several tokens (tiles of four rows or
        // four tokens, and their remainders). Widths are in blocks of the format: 32, or
        // 256 for the k-quants (19 blocks is Qwen2.5-0.5B's ffn_down).
        for f in FORMATS {
            for &(rows, blocks, n) in &[
                (1, 1, 1),
                (7, 3, 1),
                (13, 18, 3),
                (5, 48, 2),
                (3, 19, 5),
                (9, 2, 1),
                (6, 5, 9),
            ] {
                let cols = blocks * f.block_elems();
                let w = random_matrix(&mut rng, f, rows, cols);
                let x: Vec<f32> = (0..n * cols).map(|_| rng.f32() * 3.0).collect();
                let mut acts = Q8Acts::default();
                acts.quantize(&x, n, cols);
                for &isa in &isas {
                    let mut out = vec![0f32; rows * n];
                    w.dot_rows(isa, 0, &acts, &mut out);
                    // A split at row 1, as threads split the rows, gives the same numbers.
                    let mut split = vec![0f32; (rows - 1) * n];
                    w.dot_rows(isa, 1, &acts, &mut split);
                    assert_eq!(out[n..], split[..], "{f:?} {isa:?}");
                    for r in 0..rows {
                        for t in 0..n {
                            let (want, mag) = reference(&w, &acts, r, t);
                            let got = out[r * n + t] as f64;
                            // f32 sums: a few ulps of the terms' magnitude per block.
                            let tol = 1e-6 * mag * (cols as f64 / 32.0).sqrt() + 1e-6;
                            assert!(
                                (got - want).abs() <= tol,
                                "{f:?} {isa:?} rows={rows} cols={cols} r={r} t={t}: {got} vs {want} (tol {tol})"
                            );
                            // The scalar reference, on the same integer sums.
                            let scalar = dot_scalar(f, &w.row(r), acts.token(t)) as f64;
                            assert!(
                                (scalar - want).abs() <= tol,
                                "{f:?} scalar: {scalar} vs {want}"
                            );
                            // Tiles and single dots add in the same order: batch-invariant.
                            let alone = dot(isa, f, &w.row(r), acts.token(t));
                            assert_eq!(got as f32, alone, "{f:?} {isa:?}");
                        }
                    }
                }
            }
        }
    }

    /// The interleaved layout: it gives back the GGUF rows, and its kernels match the
    /// reference within the same tolerance, alone or in a batch (bit for bit), split at
    /// any group of eight rows.
    #[test]
    fn interleaved_kernels_match_the_reference() {
        let isas = kernels_here("interleaved_kernels_match_the_reference");
        let mut rng = Rng(0x2545f4914f6cdd1d);
        for f in FORMATS.into_iter().filter(|&f| packed::supports(f)) {
            for &(rows, blocks, n) in &[(8, 1, 1), (16, 3, 5), (24, 19, 9), (8, 28, 4), (16, 2, 2)]
            {
                let cols = blocks * f.block_elems();
                let plain = random_matrix(&mut rng, f, rows, cols);
                let w = plain.clone().interleave(Isa::Avx512Vnni);
                assert!(w.is_interleaved());
                let mut a = vec![0f32; cols];
                let mut b = vec![0f32; cols];
                for r in 0..rows {
                    assert_eq!(plain.row(r), w.row(r), "{f:?} row {r}");
                    plain.dequantize_row(r, &mut a);
                    w.dequantize_row(r, &mut b);
                    assert_eq!(a, b);
                }
                let x: Vec<f32> = (0..n * cols).map(|_| rng.f32() * 3.0).collect();
                let mut acts = Q8Acts::default();
                acts.quantize(&x, n, cols);
                for &isa in &isas {
                    let mut out = vec![0f32; rows * n];
                    w.dot_rows(isa, 0, &acts, &mut out);
                    let mut split = vec![0f32; (rows - 8) * n];
                    w.dot_rows(isa, 8, &acts, &mut split);
                    assert_eq!(out[8 * n..], split[..], "{f:?} {isa:?}");
                    for t in 0..n {
                        // Token t alone gives the same bits as in the batch.
                        let mut one = Q8Acts::default();
                        one.quantize(&x[t * cols..(t + 1) * cols], 1, cols);
                        let mut alone = vec![0f32; rows];
                        w.dot_rows(isa, 0, &one, &mut alone);
                        for r in 0..rows {
                            let (want, mag) = reference(&plain, &acts, r, t);
                            let got = out[r * n + t];
                            let tol = 1e-6 * mag * (cols as f64 / 32.0).sqrt() + 1e-6;
                            assert!(
                                (got as f64 - want).abs() <= tol,
                                "{f:?} {isa:?} rows={rows} cols={cols} r={r} t={t}: {got} vs {want} (tol {tol})"
                            );
                            assert_eq!(got, alone[r], "{f:?} {isa:?} r={r} t={t}");
                        }
                    }
                }
            }
        }
    }

    /// Token-major output, in two row ranges as two threads would write it, is the
    /// transpose of `dot_rows`, for the row kernels (tiles of 16, and their edges) and
    /// the interleaved ones.
    #[test]
    fn token_major_output_is_the_transpose() {
        let mut rng = Rng(11);
        for (f, rows, n) in [
            (Format::Q4_1, 37, 5),
            (Format::Q4_1, 50, 70),
            (Format::Q4_1, 1, 33),
            (Format::Q5_0, 24, 17),
            (Format::Q6_K, 16, 3),
        ] {
            let cols = f.block_elems() * 2;
            let mut w = random_matrix(&mut rng, f, rows, cols);
            if rows % 8 == 0 {
                w = w.interleave(Isa::detect());
            }
            let x: Vec<f32> = (0..n * cols).map(|_| rng.f32()).collect();
            let mut acts = Q8Acts::default();
            acts.quantize(&x, n, cols);
            let isa = Isa::detect();
            let mut want = vec![0f32; rows * n];
            w.dot_rows(isa, 0, &acts, &mut want);
            let mut got = vec![f32::NAN; rows * n];
            let split = (rows / 2).next_multiple_of(w.row_align()).min(rows);
            // SAFETY: `got` holds n * rows; the two calls take disjoint rows, one by one.
            unsafe {
                w.dot_rows_token_major(isa, 0, split, &acts, got.as_mut_ptr());
                w.dot_rows_token_major(isa, split, rows - split, &acts, got.as_mut_ptr());
            }
            for r in 0..rows {
                for t in 0..n {
                    assert_eq!(
                        got[t * rows + r],
                        want[r * n + t],
                        "{f:?} {rows} x {n}: ({r}, {t})"
                    );
                }
            }
        }
    }

    /// Dequantisation against the block layouts written out by hand.
    #[test]
    fn dequantisation_follows_the_gguf_layouts() {
        // Q5_0: d = 0.5, weight 0 has its fifth bit, weight 17 the nibble 3 and no fifth bit.
        let mut b = vec![0u8; 22];
        b[0..2].copy_from_slice(&f16_bytes(0.5));
        b[2] = 1; // qh bit 0
        b[6 + 1] = 0x30; // byte 1: low nibble 0 (weight 1), high nibble 3 (weight 17)
        let m = QMatrix::new(Format::Q5_0, 1, 32, b).unwrap();
        let mut out = vec![0f32; 32];
        m.dequantize_row(0, &mut out);
        assert_eq!((out[0], out[1], out[17]), (0.0, -8.0, -6.5));
        // Q4_K: d = 1, dmin = 0.5, sub-block 1 scale 2 and min 4; its weights are the high
        // nibbles of bytes 0..32 of the quants.
        let mut b = vec![0u8; 144];
        b[0..2].copy_from_slice(&f16_bytes(1.0));
        b[2..4].copy_from_slice(&f16_bytes(0.5));
        b[4 + 1] = 2;
        b[4 + 5] = 4;
        b[16] = 0x70;
        let m = QMatrix::new(Format::Q4_K, 1, 256, b).unwrap();
        let mut out = vec![0f32; 256];
        m.dequantize_row(0, &mut out);
        assert_eq!((out[0], out[32], out[33]), (0.0, 2.0 * 7.0 - 2.0, -2.0));
        // Q6_K: d = 0.25, scale of weights 64..80 is 3; weight 64 is the high nibble of
        // ql[0] and bits 4..6 of qh[0]: 0x5 | 2 << 4 = 37, minus 32 = 5.
        let mut b = vec![0u8; 210];
        b[208..210].copy_from_slice(&f16_bytes(0.25));
        b[192 + 4] = 3;
        b[0] = 0x50;
        b[128] = 0x20;
        let m = QMatrix::new(Format::Q6_K, 1, 256, b).unwrap();
        let mut out = vec![0f32; 256];
        m.dequantize_row(0, &mut out);
        assert_eq!(out[64], 0.25 * 3.0 * 5.0);
        assert_eq!(out[0], 0.0); // scale 0
    }

    /// The SIMD quantisation gives the scalar one's bits (a zero block, extremes, ties).
    #[test]
    fn quantisation_matches_the_scalar_one() {
        let mut rng = Rng(99);
        let mut x: Vec<f32> = (0..32 * 40).map(|_| rng.f32() * 7.0).collect();
        x[32..64].fill(0.0);
        x[64] = -1e-30;
        x[96..128]
            .iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = i as f32 - 16.5);
        let mut acts = Q8Acts::default();
        acts.quantize(&x, 40, 32);
        let (mut qs, mut ds, mut hs) = (vec![0i8; x.len()], vec![[0f32; 2]; 40], vec![[0; 2]; 40]);
        quantize_scalar(&x, &mut qs, &mut ds, &mut hs);
        assert_eq!((acts.qs, acts.hs), (qs, hs));
        assert_eq!(
            acts.ds
                .iter()
                .flatten()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>(),
            ds.iter().flatten().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn quantised_activations_round_trip_within_half_a_step() {
        let mut rng = Rng(7);
        let x: Vec<f32> = (0..64).map(|_| rng.f32()).collect();
        let mut acts = Q8Acts::default();
        acts.quantize(&x, 1, 64);
        for (i, v) in x.iter().enumerate() {
            let d = acts.ds[i / QK][0];
            assert!((acts.qs[i] as f32 * d - v).abs() <= d * 0.5 + 1e-6);
        }
        let zeros = vec![0f32; 32];
        acts.quantize(&zeros, 1, 32);
        assert_eq!(acts.ds[0], [0.0, 0.0]);
    }

    #[test]
    fn bad_shapes_are_errors() {
        assert!(QMatrix::new(Format::Q4_1, 2, 33, vec![0; 40]).is_err());
        assert!(QMatrix::new(Format::Q4_1, 2, 32, vec![0; 39]).is_err());
        assert!(QMatrix::new(Format::Q4_1, 2, 32, vec![0; 40]).is_ok());
        assert!(QMatrix::new(Format::Q8_0, 2, 32, vec![0; 40]).is_err());
        assert!(QMatrix::new(Format::Q8_0, 2, 32, vec![0; 68]).is_ok());
        assert!(QMatrix::new(Format::Q4_K, 1, 96, vec![0; 144]).is_err());
        assert!(QMatrix::new(Format::Q4_K, 1, 256, vec![0; 144]).is_ok());
        assert!(QMatrix::new(Format::Q6_K, 2, 256, vec![0; 419]).is_err());
        assert!(QMatrix::new(Format::Q5_0, 2, 64, vec![0; 88]).is_ok());
    }
}
