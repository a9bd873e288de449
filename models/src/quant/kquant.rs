//! The k-quants Q4_K and Q6_K (llama.cpp's `block_q4_K`, `block_q6_K`) times 8-bit
//! activations in blocks of 32 ([`super::Q8Acts`], the same activations as the 32-weight
//! formats, so one quantisation of a layer's input serves matrices of every format).
//!
//! ```text
//! Q4_K super-block (144 bytes, 256 weights): d: f16, dmin: f16, 12 bytes of 6-bit scales
//!     and mins (sc[j], m[j] for the 8 sub-blocks j of 32), 128 bytes of nibbles
//!     (bytes 32k..32k+32 hold sub-block 2k in their low nibbles, 2k+1 in their high ones)
//!     w = d * sc[j] * q - dmin * m[j]                     (q in 0..16)
//! Q6_K super-block (210 bytes, 256 weights): ql: 128 bytes of low nibbles, qh: 64 bytes
//!     of 2-bit high parts, sc: 16 x i8 (one per 16 weights), d: f16
//!     w = d * sc[i / 16] * (q - 32)                       (q in 0..64)
//! dot, per sub-block j of 32 with activation block [d8, s8 = d8 * sum(a)]:
//!     Q4_K: (d sc[j]) d8 sum(q a) - (dmin m[j]) s8
//!     Q6_K: d d8 sum(sc[i / 16] (q - 32) a)     (the two scales applied to the integer sums)
//! ```
//!
//! llama.cpp pairs the k-quants with Q8_K activations (one scale per 256); blocks of 32
//! cost one more int-to-float conversion per 32 weights and round the activations more
//! finely. As in [`super`], the SIMD kernels unpack a super-block once and add in the
//! same order in every tile, so a token's result does not depend on its batch.

use super::{f16_at, Q8Row, QK};

/// Weights per k-quant super-block.
pub const QK_K: usize = 256;

/// Q4_K: the 6-bit scale and min of sub-block `j` (0..8) from the 12 packed bytes
/// (llama.cpp's `get_scale_min_k4`).
#[inline(always)]
pub(super) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Q4_K: weight `l` (0..32) of sub-block `j`, unsigned.
#[inline(always)]
fn q4_k_quant(qs: &[u8], j: usize, l: usize) -> i32 {
    let b = qs[32 * (j / 2) + l];
    (if j % 2 == 0 { b & 0x0f } else { b >> 4 }) as i32
}

/// Q6_K: weight `i` (0..256) of a super-block, with the offset of 32 taken off.
#[inline(always)]
fn q6_k_quant(b: &[u8], i: usize) -> i32 {
    let (h, g, l) = (i / 128, i % 128 / 32, i % 32);
    let lo = b[64 * h + l + 32 * (g & 1)];
    let lo = if g < 2 { lo & 0x0f } else { lo >> 4 };
    let hi = (b[128 + 32 * h + l] >> (2 * g)) & 3;
    (lo | hi << 4) as i32 - 32
}

pub(super) fn dequantize_q4_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, &b[4..16]);
        let (d1, m1) = (d * sc as f32, dmin * m as f32);
        for l in 0..32 {
            out[32 * j + l] = d1 * q4_k_quant(&b[16..], j, l) as f32 - m1;
        }
    }
}

pub(super) fn dequantize_q6_k(b: &[u8], out: &mut [f32]) {
    let d = f16_at(b, 208);
    for (i, o) in out.iter_mut().enumerate().take(QK_K) {
        *o = d * (b[192 + i / 16] as i8) as f32 * q6_k_quant(b, i) as f32;
    }
}

/// The reference for Q4_K: integer sums per sub-block, then the two scale terms.
pub(super) fn dot_q4_k_scalar(w: &[u8], a: Q8Row<'_>) -> f32 {
    let mut acc = 0f32;
    for (sb, b) in w.chunks_exact(144).enumerate() {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, &b[4..16]);
            let ab = sb * 8 + j;
            let qa = &a.qs[ab * QK..][..QK];
            let isum: i32 = (0..32)
                .map(|l| q4_k_quant(&b[16..], j, l) * qa[l] as i32)
                .sum();
            let ds = a.ds[ab];
            acc += d * sc as f32 * ds[0] * isum as f32 - dmin * m as f32 * ds[1];
        }
    }
    acc
}

/// The reference for Q6_K: per sub-block of 32, the integer sum with its two scales.
pub(super) fn dot_q6_k_scalar(w: &[u8], a: Q8Row<'_>) -> f32 {
    let mut acc = 0f32;
    for (sb, b) in w.chunks_exact(210).enumerate() {
        let d = f16_at(b, 208);
        for j in 0..8 {
            let ab = sb * 8 + j;
            let qa = &a.qs[ab * QK..][..QK];
            let isum: i32 = (0..32)
                .map(|l| {
                    let i = 32 * j + l;
                    (b[192 + i / 16] as i8) as i32 * q6_k_quant(b, i) * qa[l] as i32
                })
                .sum();
            acc += d * a.ds[ab][0] * isum as f32;
        }
    }
    acc
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use super::super::x86::{act_ds, f16_splat, finish, isum_u_avx2, isum_u_vnni};
    use super::super::{Q8Row, QK};
    use super::scale_min_k4;
    use std::arch::x86_64::*;

    /// A Q4_K super-block unpacked: 8 sub-blocks of unsigned weights and their
    /// `[d sc[j], -dmin m[j], 0, 0]`.
    struct Q4K {
        w: [__m256i; 8],
        dm: [__m128; 8],
    }

    #[inline(always)]
    unsafe fn unpack_q4_k(b: &[u8]) -> Q4K {
        // F16C, not `f16_at`: that one is a call, which spilled the unpacked block.
        let d = _mm_cvtss_f32(f16_splat(b.as_ptr()));
        let dmin = _mm_cvtss_f32(f16_splat(b.as_ptr().add(2)));
        let mask = _mm256_set1_epi8(0x0f);
        let mut w = [_mm256_setzero_si256(); 8];
        let mut dm = [_mm_setzero_ps(); 8];
        for k in 0..4 {
            let q = _mm256_loadu_si256(b.as_ptr().add(16 + 32 * k) as *const __m256i);
            w[2 * k] = _mm256_and_si256(q, mask);
            w[2 * k + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
        }
        for (j, dm) in dm.iter_mut().enumerate() {
            let (sc, m) = scale_min_k4(j, &b[4..16]);
            *dm = _mm_setr_ps(d * sc as f32, -dmin * m as f32, 0.0, 0.0);
        }
        Q4K { w, dm }
    }

    /// A Q6_K super-block unpacked: 8 sub-blocks of signed weights (`q - 32`), each with
    /// its two scales as i16 lanes (lanes 0..8 pair weights 0..16, lanes 8..16 the rest),
    /// and `[d, 0, 0, 0]`.
    struct Q6K {
        w: [__m256i; 8],
        sc: [__m256i; 8],
        dm: __m128,
    }

    #[inline(always)]
    unsafe fn unpack_q6_k(b: &[u8]) -> Q6K {
        let p = b.as_ptr();
        let m4 = _mm256_set1_epi8(0x0f);
        let m30 = _mm256_set1_epi8(0x30);
        let off = _mm256_set1_epi8(32);
        let mut w = [_mm256_setzero_si256(); 8];
        for h in 0..2 {
            let l0 = _mm256_loadu_si256(p.add(64 * h) as *const __m256i);
            let l1 = _mm256_loadu_si256(p.add(64 * h + 32) as *const __m256i);
            let hb = _mm256_loadu_si256(p.add(128 + 32 * h) as *const __m256i);
            let q = [
                _mm256_or_si256(
                    _mm256_and_si256(l0, m4),
                    _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(l1, m4),
                    _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                    _mm256_and_si256(hb, m30),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                    _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30),
                ),
            ];
            for (g, q) in q.into_iter().enumerate() {
                w[4 * h + g] = _mm256_sub_epi8(q, off);
            }
        }
        // The 16 scales as i16: 0..8 in the low half, 8..16 in the high one. Sub-block j
        // takes scale 2j in its low lane and 2j + 1 in its high one, from the half of
        // `sc16` that holds them, copied to both lanes.
        let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(192) as *const __m128i));
        let halves = [
            _mm256_permute2x128_si256(sc16, sc16, 0x00),
            _mm256_permute2x128_si256(sc16, sc16, 0x11),
        ];
        let mut sc = [_mm256_setzero_si256(); 8];
        for (j, sc) in sc.iter_mut().enumerate() {
            let k = (4 * (j % 4)) as i8;
            #[rustfmt::skip]
            let idx = _mm256_setr_epi8(
                k, k + 1, k, k + 1, k, k + 1, k, k + 1, k, k + 1, k, k + 1, k, k + 1, k, k + 1,
                k + 2, k + 3, k + 2, k + 3, k + 2, k + 3, k + 2, k + 3,
                k + 2, k + 3, k + 2, k + 3, k + 2, k + 3, k + 2, k + 3,
            );
            *sc = _mm256_shuffle_epi8(halves[j / 4], idx);
        }
        let d = f16_splat(p.add(208));
        Q6K {
            w,
            sc,
            dm: _mm_mul_ps(d, _mm_setr_ps(1.0, 0.0, 0.0, 0.0)),
        }
    }

    /// Sub-block `j` of super-block `sb` into one accumulator pair.
    macro_rules! step {
        ($acc:expr, $macc:expr, $i:expr, $dm:expr, $a:expr, $ab:expr) => {{
            let s = _mm_mul_ps($dm, act_ds($a.ds.as_ptr().add($ab)));
            $acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps($i), _mm256_broadcastss_ps(s), $acc);
            $macc = _mm_add_ps($macc, s);
        }};
    }

    #[inline(always)]
    unsafe fn acts(a: Q8Row<'_>, ab: usize) -> __m256i {
        _mm256_loadu_si256(a.qs.as_ptr().add(ab * QK) as *const __m256i)
    }

    macro_rules! q4_k_token {
        ($u:expr, $a:expr, $sb:expr, $acc:expr, $macc:expr, $isum:ident) => {
            for j in 0..8 {
                let ab = $sb * 8 + j;
                let i = $isum($u.w[j], acts($a, ab));
                step!($acc, $macc, i, $u.dm[j], $a, ab);
            }
        };
    }

    macro_rules! q6_k_token {
        ($u:expr, $a:expr, $sb:expr, $acc:expr, $macc:expr, $isum:ident) => {
            for j in 0..8 {
                let ab = $sb * 8 + j;
                // Pairs of |w| * a fit i16 (2 * 32 * 127), then times the scales into i32.
                let w = $u.w[j];
                let p =
                    _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(acts($a, ab), w));
                let i = _mm256_madd_epi16(p, $u.sc[j]);
                step!($acc, $macc, i, $u.dm, $a, ab);
            }
        };
    }

    macro_rules! kernels {
        ($features:literal, $bb:expr, $unpack:ident, $token:ident, $isum:ident,
         $dot:ident, $tokens:ident) => {
            #[target_feature(enable = $features)]
            pub unsafe fn $dot(w: &[u8], a: Q8Row<'_>) -> f32 {
                let (mut acc, mut macc) = (_mm256_setzero_ps(), _mm_setzero_ps());
                for (sb, b) in w.chunks_exact($bb).enumerate() {
                    let u = $unpack(b);
                    $token!(u, a, sb, acc, macc, $isum);
                }
                finish(acc, macc)
            }

            /// `N` tokens share each unpacked super-block (prefill, batched decode).
            #[target_feature(enable = $features)]
            pub unsafe fn $tokens<const N: usize>(w: &[u8], a: [Q8Row<'_>; N]) -> [f32; N] {
                let mut acc = [_mm256_setzero_ps(); N];
                let mut macc = [_mm_setzero_ps(); N];
                for (sb, b) in w.chunks_exact($bb).enumerate() {
                    let u = $unpack(b);
                    for t in 0..N {
                        $token!(u, a[t], sb, acc[t], macc[t], $isum);
                    }
                }
                std::array::from_fn(|t| finish(acc[t], macc[t]))
            }
        };
    }

    kernels!(
        "avx2,fma,f16c",
        144,
        unpack_q4_k,
        q4_k_token,
        isum_u_avx2,
        dot_q4_k_avx2,
        dot_tokens_q4_k_avx2
    );
    kernels!(
        "avx2,fma,f16c,avx512vnni,avx512vl",
        144,
        unpack_q4_k,
        q4_k_token,
        isum_u_vnni,
        dot_q4_k_vnni,
        dot_tokens_q4_k_vnni
    );
    kernels!(
        "avx2,fma,f16c",
        210,
        unpack_q6_k,
        q6_k_token,
        isum_u_avx2,
        dot_q6_k_avx2,
        dot_tokens_q6_k_avx2
    );
    kernels!(
        "avx2,fma,f16c,avx512vnni,avx512vl",
        210,
        unpack_q6_k,
        q6_k_token,
        isum_u_vnni,
        dot_q6_k_vnni,
        dot_tokens_q6_k_vnni
    );
}
