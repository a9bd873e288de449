//! Weights interleaved by groups of [`R`] = 8 rows, for the prefill GEMM.
//!
//! The row-at-a-time tiles of [`super`] compute one weight row against a few tokens: each
//! block's integer sum lands in 8 lanes of one register, and the float step that scales it
//! (a broadcast, a conversion, a multiply, an FMA and the offset term) costs more than the
//! `vpdpbusd` itself, per row, block and token. Here a group of 8 rows is stored so that
//! one 32-byte register holds 4 consecutive weights of each of the 8 rows (row `r` in
//! bytes `4r..4r + 4`), and `vpdpbusd` of that register with the token's 4 activations
//! broadcast adds into lane `r` of one accumulator: after the 8 such registers of a
//! block, lane `r` holds row `r`'s integer sum of the block, with no horizontal sum, and
//! the float step runs once per 8 rows. The weights are unpacked once per block for
//! up to four tokens, as in the row tiles.
//!
//! A group's blocks take exactly the bytes its 8 rows take in the GGUF layout (Q4_K: 4
//! more per row and super-block, 2.8%, for its scales and mins unpacked to bytes).
//!
//! ```text
//! Q5_0, per group and block (176 bytes): d[8] f16; 8 masks u32 (mask k, bit 4r + m: the
//!     fifth bit of weight 4k + m of row r); 4 x 32 bytes, register j byte 4r + m = byte
//!     4j + m of row r's nibbles (low nibbles: weights 4j.., high: 16 + 4j..)
//! Q4_1 (160 bytes): d[8] f16; m[8] f16; 4 x 32 bytes of nibbles as Q5_0's
//! Q8_0 (272 bytes): d[8] f16; 8 x 32 bytes, register k byte 4r + m = weight 4k + m of row
//!     r plus 128 (as u8; `vpdpbusd` takes unsigned weights, and 128 sum(a) comes off)
//! Q4_K, per super-block (1184 bytes): d[8], dmin[8] f16; sc[j][r], m[j][r] u8; 4 x 8 x 32
//!     bytes, register (k, c) byte 4r + m = nibble byte 32k + 4c + m of row r
//! Q6_K (1680 bytes): d[8] f16; sc[h][r] i8 (h: 16 scales); per half H of 128 weights
//!     3 x 8 x 32 bytes: ql[64H + 4c..], ql[64H + 32 + 4c..], qh[32H + 4c..] of each row
//! ```
//!
//! Each token adds in the same order whatever the number of tokens in its tile, so a
//! token's result does not depend on its batch. The sums differ from the row kernels' only
//! in the order of the f32 additions (per row: block after block, the offset terms in a
//! second accumulator).

use super::{kquant::QK_K, Format};

/// Rows per interleaved group.
pub const R: usize = 8;

/// Whether `f` has an interleaved layout.
pub(super) fn supports(f: Format) -> bool {
    matches!(
        f,
        Format::Q4_1 | Format::Q5_0 | Format::Q8_0 | Format::Q4_K | Format::Q6_K
    )
}

/// Bytes of one block (super-block for the k-quants) of a group of [`R`] rows.
pub(super) fn group_block_bytes(f: Format) -> usize {
    match f {
        Format::Q4_K => R * 148,
        _ => R * f.block_bytes(),
    }
}

/// The rows of `data` (GGUF layout, `rows` a multiple of [`R`]) interleaved: in place
/// where a group takes the same bytes in both layouts (all but Q4_K), so that loading
/// never holds two copies of a matrix (the largest is a tied embedding of 100-200 MB).
pub(super) fn pack(f: Format, rows: usize, cols: usize, mut data: Vec<u8>) -> Vec<u8> {
    let (bb, nb) = (f.block_bytes(), cols / f.block_elems());
    let gbb = group_block_bytes(f);
    let row_bytes = nb * bb;
    let group = |src: &[u8], dst: &mut [u8]| {
        for b in 0..nb {
            let rows: [&[u8]; R] = std::array::from_fn(|r| &src[r * row_bytes + b * bb..][..bb]);
            pack_block(f, rows, &mut dst[b * gbb..][..gbb]);
        }
    };
    if gbb == R * bb {
        let mut tmp = vec![0u8; R * row_bytes];
        for dst in data.chunks_exact_mut(R * row_bytes) {
            tmp.copy_from_slice(dst);
            group(&tmp, dst);
        }
        return data;
    }
    let mut out = super::pages::zeroed(rows / R * nb * gbb);
    for (src, dst) in data
        .chunks_exact(R * row_bytes)
        .zip(out.chunks_exact_mut(nb * gbb))
    {
        group(src, dst);
    }
    out
}

fn pack_block(f: Format, src: [&[u8]; R], dst: &mut [u8]) {
    for (r, s) in src.iter().enumerate() {
        let d_at = if f == Format::Q6_K { 208 } else { 0 };
        dst[2 * r..2 * r + 2].copy_from_slice(&s[d_at..d_at + 2]);
    }
    match f {
        Format::Q5_0 => {
            for k in 0..8 {
                let mut mask = 0u32;
                for (r, s) in src.iter().enumerate() {
                    let qh = u32::from_le_bytes([s[2], s[3], s[4], s[5]]);
                    mask |= ((qh >> (4 * k)) & 0xf) << (4 * r);
                }
                dst[16 + 4 * k..20 + 4 * k].copy_from_slice(&mask.to_le_bytes());
            }
            for j in 0..4 {
                for (r, s) in src.iter().enumerate() {
                    let at = 48 + 32 * j + 4 * r;
                    dst[at..at + 4].copy_from_slice(&s[6 + 4 * j..10 + 4 * j]);
                }
            }
        }
        Format::Q8_0 => {
            for k in 0..8 {
                for (r, s) in src.iter().enumerate() {
                    for m in 0..4 {
                        dst[16 + 32 * k + 4 * r + m] = s[2 + 4 * k + m] ^ 0x80;
                    }
                }
            }
        }
        Format::Q4_1 => {
            for (r, s) in src.iter().enumerate() {
                dst[16 + 2 * r..18 + 2 * r].copy_from_slice(&s[2..4]);
                for j in 0..4 {
                    let at = 32 + 32 * j + 4 * r;
                    dst[at..at + 4].copy_from_slice(&s[4 + 4 * j..8 + 4 * j]);
                }
            }
        }
        Format::Q4_K => {
            for (r, s) in src.iter().enumerate() {
                dst[16 + 2 * r..18 + 2 * r].copy_from_slice(&s[2..4]);
                for j in 0..8 {
                    let (sc, m) = super::kquant::scale_min_k4(j, &s[4..16]);
                    dst[32 + 8 * j + r] = sc;
                    dst[96 + 8 * j + r] = m;
                }
                for k in 0..4 {
                    for c in 0..8 {
                        let at = 160 + 256 * k + 32 * c + 4 * r;
                        dst[at..at + 4].copy_from_slice(&s[16 + 32 * k + 4 * c..][..4]);
                    }
                }
            }
        }
        Format::Q6_K => {
            for (r, s) in src.iter().enumerate() {
                for h in 0..16 {
                    dst[16 + 8 * h + r] = s[192 + h];
                }
                for half in 0..2 {
                    let base = 144 + 768 * half;
                    for c in 0..8 {
                        let at = base + 32 * c + 4 * r;
                        dst[at..at + 4].copy_from_slice(&s[64 * half + 4 * c..][..4]);
                        dst[at + 256..at + 260].copy_from_slice(&s[64 * half + 32 + 4 * c..][..4]);
                        dst[at + 512..at + 516].copy_from_slice(&s[128 + 32 * half + 4 * c..][..4]);
                    }
                }
            }
        }
    }
}

/// Row `r` (0..R) of one interleaved block `src`, back in the GGUF layout.
pub(super) fn unpack_block(f: Format, src: &[u8], r: usize, dst: &mut [u8]) {
    let d_at = if f == Format::Q6_K { 208 } else { 0 };
    dst[d_at..d_at + 2].copy_from_slice(&src[2 * r..2 * r + 2]);
    match f {
        Format::Q5_0 => {
            let mut qh = 0u32;
            for k in 0..8 {
                let mask = u32::from_le_bytes(src[16 + 4 * k..20 + 4 * k].try_into().unwrap());
                qh |= ((mask >> (4 * r)) & 0xf) << (4 * k);
            }
            dst[2..6].copy_from_slice(&qh.to_le_bytes());
            for j in 0..4 {
                let at = 48 + 32 * j + 4 * r;
                dst[6 + 4 * j..10 + 4 * j].copy_from_slice(&src[at..at + 4]);
            }
        }
        Format::Q8_0 => {
            for k in 0..8 {
                for m in 0..4 {
                    dst[2 + 4 * k + m] = src[16 + 32 * k + 4 * r + m] ^ 0x80;
                }
            }
        }
        Format::Q4_1 => {
            dst[2..4].copy_from_slice(&src[16 + 2 * r..18 + 2 * r]);
            for j in 0..4 {
                let at = 32 + 32 * j + 4 * r;
                dst[4 + 4 * j..8 + 4 * j].copy_from_slice(&src[at..at + 4]);
            }
        }
        Format::Q4_K => {
            dst[2..4].copy_from_slice(&src[16 + 2 * r..18 + 2 * r]);
            let sc: [u8; 8] = std::array::from_fn(|j| src[32 + 8 * j + r]);
            let m: [u8; 8] = std::array::from_fn(|j| src[96 + 8 * j + r]);
            for j in 0..4 {
                dst[4 + j] = sc[j] | (sc[j + 4] >> 4) << 6;
                dst[8 + j] = m[j] | (m[j + 4] >> 4) << 6;
                dst[12 + j] = (sc[j + 4] & 0xf) | (m[j + 4] & 0xf) << 4;
            }
            for k in 0..4 {
                for c in 0..8 {
                    let at = 160 + 256 * k + 32 * c + 4 * r;
                    dst[16 + 32 * k + 4 * c..][..4].copy_from_slice(&src[at..at + 4]);
                }
            }
        }
        Format::Q6_K => {
            for h in 0..16 {
                dst[192 + h] = src[16 + 8 * h + r];
            }
            for half in 0..2 {
                let base = 144 + 768 * half;
                for c in 0..8 {
                    let at = base + 32 * c + 4 * r;
                    dst[64 * half + 4 * c..][..4].copy_from_slice(&src[at..at + 4]);
                    dst[64 * half + 32 + 4 * c..][..4].copy_from_slice(&src[at + 256..at + 260]);
                    dst[128 + 32 * half + 4 * c..][..4].copy_from_slice(&src[at + 512..at + 516]);
                }
            }
        }
    }
}

const _: () = assert!(QK_K == 256);

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use super::super::{Q8Row, QK};
    use std::arch::x86_64::*;

    /// The 4 activations at `q` in every 32-bit lane.
    #[inline(always)]
    unsafe fn quad(q: *const i8) -> __m256i {
        _mm256_set1_epi32((q as *const i32).read_unaligned())
    }

    #[inline(always)]
    unsafe fn lanes(v: __m256) -> [f32; 8] {
        std::mem::transmute(v)
    }

    #[inline(always)]
    unsafe fn f16x8(p: *const u8) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }

    /// `[d8, s8]` of block `b` of token `a`, each in every lane.
    #[inline(always)]
    unsafe fn ds(a: &Q8Row<'_>, b: usize) -> (__m256, __m256) {
        let p = a.ds.as_ptr().add(b) as *const f32;
        (_mm256_broadcast_ss(&*p), _mm256_broadcast_ss(&*p.add(1)))
    }

    /// Lane `r` of the result: row `r`'s integer sum of weights `w` (8 registers of 4
    /// weights per row, as laid out in [`super`]) with the 32 activations at `q`, plus
    /// `init`; two chains of four, so that four tokens keep eight `vpdpbusd` in flight.
    #[inline(always)]
    unsafe fn isum(w: &[__m256i; 8], q: *const i8, init: [__m256i; 2]) -> [__m256i; 2] {
        let [mut i0, mut i1] = init;
        for c in 0..4 {
            i0 = _mm256_dpbusd_epi32(i0, w[c], quad(q.add(4 * c)));
            i1 = _mm256_dpbusd_epi32(i1, w[c + 4], quad(q.add(16 + 4 * c)));
        }
        [i0, i1]
    }

    /// Q5_0 and Q8_0: the weights of group block `p` as unsigned bytes, and the offset
    /// that comes off them (16, 128).
    #[inline(always)]
    unsafe fn weights_q5_0(p: *const u8) -> [__m256i; 8] {
        let m4 = _mm256_set1_epi8(0x0f);
        let sixteen = _mm256_set1_epi8(16);
        let mut w = [_mm256_setzero_si256(); 8];
        for j in 0..4 {
            let v = _mm256_loadu_si256(p.add(48 + 32 * j) as *const __m256i);
            let lo = _mm256_and_si256(v, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            let klo = (p.add(16 + 4 * j) as *const u32).read_unaligned();
            let khi = (p.add(32 + 4 * j) as *const u32).read_unaligned();
            w[j] = _mm256_mask_add_epi8(lo, klo, lo, sixteen);
            w[j + 4] = _mm256_mask_add_epi8(hi, khi, hi, sixteen);
        }
        w
    }

    #[inline(always)]
    unsafe fn weights_q8_0(p: *const u8) -> [__m256i; 8] {
        std::array::from_fn(|k| _mm256_loadu_si256(p.add(16 + 32 * k) as *const __m256i))
    }

    #[inline(always)]
    unsafe fn weights_q4_1(p: *const u8) -> [__m256i; 8] {
        let m4 = _mm256_set1_epi8(0x0f);
        let mut w = [_mm256_setzero_si256(); 8];
        for j in 0..4 {
            let v = _mm256_loadu_si256(p.add(32 + 32 * j) as *const __m256i);
            w[j] = _mm256_and_si256(v, m4);
            w[j + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        w
    }

    /// The term of `s8` per row is `factor * min`: `-16 d` (Q5_0), `-128 d` (Q8_0), `m`
    /// (Q4_1); `min` per block, the factor (exact: a power of two) at the end.
    #[inline(always)]
    unsafe fn min_d(_p: *const u8, d: __m256) -> __m256 {
        d
    }

    #[inline(always)]
    unsafe fn min_q4_1(p: *const u8, _d: __m256) -> __m256 {
        f16x8(p.add(16))
    }

    macro_rules! blocks32 {
        ($name:ident, $gbb:expr, $weights:ident, $min:ident, $factor:expr) => {
            /// One group of 8 rows (`g`: its blocks) against `T` tokens: lane `r` of
            /// result `t` is row `r` times token `t`.
            #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
            pub unsafe fn $name<const T: usize>(g: &[u8], a: [Q8Row<'_>; T]) -> [[f32; 8]; T] {
                let nb = a[0].ds.len();
                assert_eq!(g.len(), nb * $gbb);
                let mut facc = [_mm256_setzero_ps(); T];
                let mut macc = [_mm256_setzero_ps(); T];
                for b in 0..nb {
                    let p = g.as_ptr().add(b * $gbb);
                    let d = f16x8(p);
                    let m = $min(p, d);
                    let w = $weights(p);
                    for t in 0..T {
                        let z = _mm256_setzero_si256();
                        let [i0, i1] = isum(&w, a[t].qs.as_ptr().add(b * QK), [z, z]);
                        let (d8, s8) = ds(&a[t], b);
                        let i = _mm256_cvtepi32_ps(_mm256_add_epi32(i0, i1));
                        facc[t] = _mm256_fmadd_ps(i, _mm256_mul_ps(d, d8), facc[t]);
                        macc[t] = _mm256_fmadd_ps(m, s8, macc[t]);
                    }
                }
                let f = _mm256_set1_ps($factor);
                std::array::from_fn(|t| lanes(_mm256_fmadd_ps(f, macc[t], facc[t])))
            }
        };
    }

    blocks32!(group_q4_1, 160, weights_q4_1, min_q4_1, 1.0);
    blocks32!(group_q5_0, 176, weights_q5_0, min_d, -16.0);
    blocks32!(group_q8_0, 272, weights_q8_0, min_d, -128.0);

    /// Q4_K: `w = d sc[j] q - dmin m[j]`, per sub-block `j` of 32.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub unsafe fn group_q4_k<const T: usize>(g: &[u8], a: [Q8Row<'_>; T]) -> [[f32; 8]; T] {
        const GBB: usize = 1184;
        let nsb = a[0].ds.len() / 8;
        assert_eq!(g.len(), nsb * GBB);
        let m4 = _mm256_set1_epi8(0x0f);
        let mut facc = [_mm256_setzero_ps(); T];
        let mut macc = [_mm256_setzero_ps(); T];
        for sb in 0..nsb {
            let p = g.as_ptr().add(sb * GBB);
            let (d, dmin) = (f16x8(p), f16x8(p.add(16)));
            for j in 0..8 {
                let bytes = |at: usize| {
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                        p.add(at) as *const __m128i
                    )))
                };
                let dj = _mm256_mul_ps(d, bytes(32 + 8 * j));
                let mj = _mm256_mul_ps(dmin, bytes(96 + 8 * j));
                let base = p.add(160 + 256 * (j / 2));
                let w: [__m256i; 8] = std::array::from_fn(|c| {
                    let v = _mm256_loadu_si256(base.add(32 * c) as *const __m256i);
                    if j % 2 == 0 {
                        _mm256_and_si256(v, m4)
                    } else {
                        _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)
                    }
                });
                let b = sb * 8 + j;
                for t in 0..T {
                    let z = _mm256_setzero_si256();
                    let [i0, i1] = isum(&w, a[t].qs.as_ptr().add(b * QK), [z, z]);
                    let (d8, s8) = ds(&a[t], b);
                    let i = _mm256_cvtepi32_ps(_mm256_add_epi32(i0, i1));
                    facc[t] = _mm256_fmadd_ps(i, _mm256_mul_ps(dj, d8), facc[t]);
                    macc[t] = _mm256_fmadd_ps(mj, s8, macc[t]);
                }
            }
        }
        std::array::from_fn(|t| lanes(_mm256_sub_ps(facc[t], macc[t])))
    }

    /// Q6_K: `w = d sc[i / 16] (q - 32)`; the 32 comes off each half sub-block's integer
    /// sum (its start value, `-32 sum(a)` of those 16 activations), before its scale.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
    pub unsafe fn group_q6_k<const T: usize>(g: &[u8], a: [Q8Row<'_>; T]) -> [[f32; 8]; T] {
        const GBB: usize = 1680;
        let nsb = a[0].ds.len() / 8;
        assert_eq!(g.len(), nsb * GBB);
        let m4 = _mm256_set1_epi8(0x0f);
        let m30 = _mm256_set1_epi8(0x30);
        let mut facc = [_mm256_setzero_ps(); T];
        for sb in 0..nsb {
            let p = g.as_ptr().add(sb * GBB);
            let d = f16x8(p);
            for j in 0..8 {
                let scale = |h: usize| {
                    _mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(16 + 8 * h) as *const __m128i))
                };
                let (sc0, sc1) = (scale(2 * j), scale(2 * j + 1));
                let (half, gq) = (j / 4, j % 4);
                let base = p.add(144 + 768 * half);
                let w: [__m256i; 8] = std::array::from_fn(|c| {
                    let l = _mm256_loadu_si256(base.add(256 * (gq & 1) + 32 * c) as *const __m256i);
                    let hb = _mm256_loadu_si256(base.add(512 + 32 * c) as *const __m256i);
                    let lo = if gq < 2 {
                        _mm256_and_si256(l, m4)
                    } else {
                        _mm256_and_si256(_mm256_srli_epi16(l, 4), m4)
                    };
                    let hi = match gq {
                        0 => _mm256_slli_epi16(hb, 4),
                        1 => _mm256_slli_epi16(hb, 2),
                        2 => hb,
                        _ => _mm256_srli_epi16(hb, 2),
                    };
                    _mm256_or_si256(lo, _mm256_and_si256(hi, m30))
                });
                let b = sb * 8 + j;
                for t in 0..T {
                    let hs = *a[t].hs.as_ptr().add(b);
                    let init = [
                        _mm256_set1_epi32(-32 * hs[0]),
                        _mm256_set1_epi32(-32 * hs[1]),
                    ];
                    let [i0, i1] = isum(&w, a[t].qs.as_ptr().add(b * QK), init);
                    let i =
                        _mm256_add_epi32(_mm256_mullo_epi32(i0, sc0), _mm256_mullo_epi32(i1, sc1));
                    let (d8, _) = ds(&a[t], b);
                    facc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(d, d8), facc[t]);
                }
            }
        }
        facc.map(|v| lanes(v))
    }
}
