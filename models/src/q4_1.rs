//! Q4_1 weights times 8-bit activations: the matmul of [`crate::llama`] on the CPU.
//!
//! candle 0.11.1 runs Q4_1 matmuls with a scalar loop, so the runtime used to requantise
//! those tensors to Q8_0 at load (8 bits per weight where the file has 4.5). This module
//! computes with the file's own 4-bit blocks, the way llama.cpp does
//! (`ggml_vec_dot_q4_1_q8_1`):
//!
//! ```text
//! weight block (20 bytes, as in the GGUF file): d: f16, m: f16, 16 bytes of nibbles
//!     w[i] = d * q[i] + m        (q[i] in 0..16; low nibbles are i < 16, high ones i >= 16)
//! activation block (Q8Acts):  d8: f32, s8 = d8 * sum(a[i]), a: 32 x i8   (x[i] ~ d8 * a[i])
//! dot = d * d8 * sum(q[i] * a[i]) + m * s8
//! ```
//!
//! The integer sum runs on AVX2 (`vpmaddubsw` + `vpmaddwd`), or on AVX-512 VNNI
//! (`vpdpbusd`), chosen at run time by [`Isa::detect`]; [`Isa::Scalar`] is the portable
//! reference the SIMD paths are tested against. All paths give the same integer sums, and
//! differ only in the order of the f32 accumulation.

use std::sync::OnceLock;

/// Weights per block.
pub const QK: usize = 32;
/// Bytes per Q4_1 block: two f16 scales and 16 bytes of nibbles.
pub const BLOCK_BYTES: usize = 20;

/// The instruction set a kernel uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX2 plus AVX-512 VNNI on 256-bit registers (`vpdpbusd`).
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
                if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl") {
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

/// A row-major Q4_1 matrix of `rows` x `cols`, in the GGUF block layout.
#[derive(Debug, Clone)]
pub struct Q4_1Matrix {
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl Q4_1Matrix {
    /// `data` holds `rows * cols / 32` blocks of 20 bytes; `cols` must be a multiple of 32.
    pub fn new(rows: usize, cols: usize, data: Vec<u8>) -> Result<Self, String> {
        if cols == 0 || cols % QK != 0 {
            return Err(format!(
                "a Q4_1 matrix needs a multiple of {QK} columns, got {cols}"
            ));
        }
        let want = rows * (cols / QK) * BLOCK_BYTES;
        if data.len() != want {
            return Err(format!(
                "a {rows} x {cols} Q4_1 matrix has {want} bytes, got {}",
                data.len()
            ));
        }
        Ok(Self { rows, cols, data })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    fn row_bytes(&self) -> usize {
        self.cols / QK * BLOCK_BYTES
    }

    fn row(&self, r: usize) -> &[u8] {
        let n = self.row_bytes();
        &self.data[r * n..(r + 1) * n]
    }

    /// Row `r` as f32 (an embedding lookup).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert_eq!(out.len(), self.cols);
        for (block, out) in self
            .row(r)
            .chunks_exact(BLOCK_BYTES)
            .zip(out.chunks_exact_mut(QK))
        {
            let d = f16_at(block, 0);
            let m = f16_at(block, 2);
            for (i, &b) in block[4..].iter().enumerate() {
                out[i] = d * (b & 0x0f) as f32 + m;
                out[i + 16] = d * (b >> 4) as f32 + m;
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
        if n == 1 {
            // Decode: four rows share each load of the activations.
            let mut i = 0;
            while i + 4 <= rows {
                let w = std::array::from_fn(|j| self.row(r0 + i + j));
                out[i..i + 4].copy_from_slice(&dot_4rows(isa, w, acts.token(0)));
                i += 4;
            }
            for (j, o) in out[i..].iter_mut().enumerate() {
                *o = dot(isa, self.row(r0 + i + j), acts.token(0));
            }
            return;
        }
        // Prefill: each row's nibbles are unpacked once for four tokens.
        for (i, out_row) in out.chunks_exact_mut(n).enumerate() {
            let w = self.row(r0 + i);
            let mut t = 0;
            while t + 4 <= n {
                let a = std::array::from_fn(|j| acts.token(t + j));
                out_row[t..t + 4].copy_from_slice(&dot_4tokens(isa, w, a));
                t += 4;
            }
            for (j, o) in out_row[t..].iter_mut().enumerate() {
                *o = dot(isa, w, acts.token(t + j));
            }
        }
    }
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
}

/// One token's quantised activations.
#[derive(Clone, Copy)]
pub struct Q8Row<'a> {
    qs: &'a [i8],
    ds: &'a [[f32; 2]],
}

impl Q8Acts {
    /// Quantise `x` (`n` rows of `cols`, `cols` a multiple of 32), reusing this buffer.
    pub fn quantize(&mut self, x: &[f32], n: usize, cols: usize) {
        assert!(cols % QK == 0 && x.len() == n * cols);
        self.n = n;
        self.cols = cols;
        self.qs.resize(n * cols, 0);
        self.ds.resize(n * cols / QK, [0.0; 2]);
        for ((xb, qb), ds) in x
            .chunks_exact(QK)
            .zip(self.qs.chunks_exact_mut(QK))
            .zip(self.ds.iter_mut())
        {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if d > 0.0 { 1.0 / d } else { 0.0 };
            let mut sum = 0i32;
            for (q, &v) in qb.iter_mut().zip(xb) {
                // Round to nearest, ties to even, without a libm call: exact for |v| <= 127.
                const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
                let r = ((v * id + MAGIC) - MAGIC) as i32;
                *q = r as i8;
                sum += r;
            }
            *ds = [d, d * sum as f32];
        }
    }

    pub fn n(&self) -> usize {
        self.n
    }

    fn token(&self, t: usize) -> Q8Row<'_> {
        let nb = self.cols / QK;
        Q8Row {
            qs: &self.qs[t * self.cols..(t + 1) * self.cols],
            ds: &self.ds[t * nb..(t + 1) * nb],
        }
    }
}

/// One weight row (`w`, GGUF Q4_1 blocks) times one token's activations.
pub fn dot(isa: Isa, w: &[u8], a: Q8Row<'_>) -> f32 {
    debug_assert_eq!(w.len() / BLOCK_BYTES, a.ds.len());
    debug_assert_eq!(a.qs.len(), a.ds.len() * QK);
    match isa {
        Isa::Scalar => dot_scalar(w, a),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only produced by `available()` when the CPU has these.
        Isa::Avx2 => unsafe { x86::dot_avx2(w, a) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, for AVX-512 VNNI/VL.
        Isa::Avx512Vnni => unsafe { x86::dot_vnni(w, a) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => dot_scalar(w, a),
    }
}

/// Four weight rows times one token's activations.
pub fn dot_4rows(isa: Isa, w: [&[u8]; 4], a: Q8Row<'_>) -> [f32; 4] {
    for r in &w {
        assert_eq!(r.len() / BLOCK_BYTES, a.ds.len());
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only produced by `available()` when the CPU has these.
        Isa::Avx2 => unsafe { x86::dot_4rows_avx2(w, a) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, for AVX-512 VNNI/VL.
        Isa::Avx512Vnni => unsafe { x86::dot_4rows_vnni(w, a) },
        _ => w.map(|w| dot_scalar(w, a)),
    }
}

/// One weight row times four tokens' activations.
pub fn dot_4tokens(isa: Isa, w: &[u8], a: [Q8Row<'_>; 4]) -> [f32; 4] {
    for t in &a {
        assert_eq!(w.len() / BLOCK_BYTES, t.ds.len());
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is only produced by `available()` when the CPU has these.
        Isa::Avx2 => unsafe { x86::dot_4tokens_avx2(w, a) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, for AVX-512 VNNI/VL.
        Isa::Avx512Vnni => unsafe { x86::dot_4tokens_vnni(w, a) },
        _ => a.map(|a| dot_scalar(w, a)),
    }
}

/// The reference: integer sums per block, then the two scale terms.
pub fn dot_scalar(w: &[u8], a: Q8Row<'_>) -> f32 {
    let mut acc = 0f32;
    for ((block, qa), ds) in w
        .chunks_exact(BLOCK_BYTES)
        .zip(a.qs.chunks_exact(QK))
        .zip(a.ds)
    {
        let d = f16_at(block, 0);
        let m = f16_at(block, 2);
        let mut isum = 0i32;
        for (i, &b) in block[4..].iter().enumerate() {
            isum += (b & 0x0f) as i32 * qa[i] as i32 + (b >> 4) as i32 * qa[i + 16] as i32;
        }
        acc += d * ds[0] * isum as f32 + m * ds[1];
    }
    acc
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Q8Row, BLOCK_BYTES, QK};
    use std::arch::x86_64::*;

    /// The 32 weights of a block as unsigned bytes 0..16, in element order.
    #[inline(always)]
    unsafe fn nibbles(p: *const u8) -> __m256i {
        let q = _mm_loadu_si128(p as *const __m128i);
        let mask = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(q, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
        _mm256_set_m128i(hi, lo)
    }

    /// `[d * d8, m * s8, 0, 0]` for one block.
    #[inline(always)]
    unsafe fn scales(p: *const u8, ds: *const [f32; 2]) -> __m128 {
        let dm = _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
        let a = _mm_castpd_ps(_mm_load_sd(ds as *const f64));
        _mm_mul_ps(dm, a)
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// One row times one token, accumulated in the same order as the tiles below, so a
    /// token gets the same result alone as in a batch.
    macro_rules! dot_body {
        ($w:ident, $a:ident, $isum:expr) => {{
            let nb = $a.ds.len();
            let mut acc = _mm256_setzero_ps();
            let mut macc = _mm_setzero_ps();
            let wp = $w.as_ptr();
            for b in 0..nb {
                let wr = wp.add(b * BLOCK_BYTES);
                let s = scales(wr, $a.ds.as_ptr().add(b));
                let av = _mm256_loadu_si256($a.qs.as_ptr().add(b * QK) as *const __m256i);
                let i = $isum(nibbles(wr.add(4)), av);
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_broadcastss_ps(s), acc);
                macc = _mm_add_ps(macc, s);
            }
            // Lane 1 of `macc` holds the sum of the `m * s8` terms.
            hsum(acc) + _mm_cvtss_f32(_mm_shuffle_ps(macc, macc, 1))
        }};
    }

    /// `$rows` weight rows against `$toks` tokens, one of the two being 1: `[f32; 4]`.
    macro_rules! tile_body {
        (rows: $w:ident, $a:ident, $isum:expr) => {{
            let nb = $a.ds.len();
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut macc = [_mm_setzero_ps(); 4];
            let wp = $w.map(|r| r.as_ptr());
            for b in 0..nb {
                let av = _mm256_loadu_si256($a.qs.as_ptr().add(b * QK) as *const __m256i);
                let dp = $a.ds.as_ptr().add(b);
                for r in 0..4 {
                    let wr = wp[r].add(b * BLOCK_BYTES);
                    let s = scales(wr, dp);
                    let i = $isum(nibbles(wr.add(4)), av);
                    acc[r] =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_broadcastss_ps(s), acc[r]);
                    macc[r] = _mm_add_ps(macc[r], s);
                }
            }
            std::array::from_fn(|r| {
                hsum(acc[r]) + _mm_cvtss_f32(_mm_shuffle_ps(macc[r], macc[r], 1))
            })
        }};
        (tokens: $w:ident, $a:ident, $isum:expr) => {{
            let nb = $a[0].ds.len();
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut macc = [_mm_setzero_ps(); 4];
            let wp = $w.as_ptr();
            for b in 0..nb {
                let wr = wp.add(b * BLOCK_BYTES);
                let wv = nibbles(wr.add(4));
                let dm = _mm_cvtph_ps(_mm_cvtsi32_si128((wr as *const i32).read_unaligned()));
                for t in 0..4 {
                    let av = _mm256_loadu_si256($a[t].qs.as_ptr().add(b * QK) as *const __m256i);
                    let ds = _mm_castpd_ps(_mm_load_sd($a[t].ds.as_ptr().add(b) as *const f64));
                    let s = _mm_mul_ps(dm, ds);
                    let i = $isum(wv, av);
                    acc[t] =
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_broadcastss_ps(s), acc[t]);
                    macc[t] = _mm_add_ps(macc[t], s);
                }
            }
            std::array::from_fn(|t| {
                hsum(acc[t]) + _mm_cvtss_f32(_mm_shuffle_ps(macc[t], macc[t], 1))
            })
        }};
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_4rows_avx2(w: [&[u8]; 4], a: Q8Row<'_>) -> [f32; 4] {
        tile_body!(rows: w, a, isum_avx2)
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    pub unsafe fn dot_4rows_vnni(w: [&[u8]; 4], a: Q8Row<'_>) -> [f32; 4] {
        tile_body!(rows: w, a, isum_vnni)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_4tokens_avx2(w: &[u8], a: [Q8Row<'_>; 4]) -> [f32; 4] {
        tile_body!(tokens: w, a, isum_avx2)
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    pub unsafe fn dot_4tokens_vnni(w: &[u8], a: [Q8Row<'_>; 4]) -> [f32; 4] {
        tile_body!(tokens: w, a, isum_vnni)
    }

    #[inline(always)]
    unsafe fn isum_avx2(w: __m256i, a: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_avx2(w: &[u8], a: Q8Row<'_>) -> f32 {
        dot_body!(w, a, isum_avx2)
    }

    #[inline(always)]
    unsafe fn isum_vnni(w: __m256i, a: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a)
    }

    #[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
    pub unsafe fn dot_vnni(w: &[u8], a: Q8Row<'_>) -> f32 {
        dot_body!(w, a, isum_vnni)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn random_matrix(rng: &mut Rng, rows: usize, cols: usize) -> Q4_1Matrix {
        let mut data = Vec::new();
        for _ in 0..rows * cols / QK {
            let d = half::f16::from_f32(rng.f32() * 0.1).to_bits().to_le_bytes();
            let m = half::f16::from_f32(rng.f32() * 0.5).to_bits().to_le_bytes();
            data.extend_from_slice(&d);
            data.extend_from_slice(&m);
            for _ in 0..16 {
                data.push(rng.next() as u8);
            }
        }
        Q4_1Matrix::new(rows, cols, data).unwrap()
    }

    /// f64 reference from the dequantised weights and the quantised activations.
    fn reference(w: &Q4_1Matrix, acts: &Q8Acts, r: usize, t: usize) -> f64 {
        let mut row = vec![0f32; w.cols()];
        w.dequantize_row(r, &mut row);
        let a = acts.token(t);
        let mut s = 0f64;
        for (i, x) in row.iter().enumerate() {
            s += *x as f64 * a.ds[i / QK][0] as f64 * a.qs[i] as f64;
        }
        s
    }

    #[test]
    fn every_kernel_matches_the_reference() {
        let mut rng = Rng(0x9e3779b97f4a7c15);
        // Odd row counts, widths that are and are not multiples of 256, one and several tokens.
        for &(rows, cols, n) in &[
            (1, 32, 1),
            (7, 96, 1),
            (13, 576, 3),
            (5, 1536, 2),
            (3, 2080, 5),
            (9, 64, 1),
            (6, 160, 9),
        ] {
            let w = random_matrix(&mut rng, rows, cols);
            let x: Vec<f32> = (0..n * cols).map(|_| rng.f32() * 3.0).collect();
            let mut acts = Q8Acts::default();
            acts.quantize(&x, n, cols);
            for isa in Isa::available() {
                let mut out = vec![0f32; rows * n];
                w.dot_rows(isa, 0, &acts, &mut out);
                for r in 0..rows {
                    for t in 0..n {
                        let want = reference(&w, &acts, r, t);
                        let got = out[r * n + t] as f64;
                        let tol = 1e-4 * (1.0 + want.abs()) * (cols as f64 / 32.0).sqrt();
                        assert!(
                            (got - want).abs() <= tol,
                            "{isa:?} rows={rows} cols={cols} r={r} t={t}: {got} vs {want}"
                        );
                        // Tiles and single dots add in the same order: batch-invariant.
                        let alone = dot(isa, w.row(r), acts.token(t));
                        assert_eq!(out[r * n + t].to_bits(), alone.to_bits(), "{isa:?}");
                    }
                }
            }
        }
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
        assert!(Q4_1Matrix::new(2, 33, vec![0; 40]).is_err());
        assert!(Q4_1Matrix::new(2, 32, vec![0; 39]).is_err());
        assert!(Q4_1Matrix::new(2, 32, vec![0; 40]).is_ok());
    }
}
