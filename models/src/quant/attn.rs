//! Attention over a position-major KV cache: the scores `q . k` of one head, and the
//! weighted sum of its values. The cache holds f32, or f16 ([`KvElem`]): llama.cpp's
//! default, half the memory per position, rounded to nearest on the way in and widened
//! back to f32 (F16C `vcvtph2ps`) before any arithmetic, which stays in f32.

use super::Isa;
use half::f16;

/// What a KV cache stores: `f32`, or `half::f16`.
pub trait KvElem: Copy + Default + Send + Sync + std::fmt::Debug + 'static {
    /// Appends `src`, converted (f16: rounded to nearest, ties to even).
    fn extend_from_f32(dst: &mut Vec<Self>, src: &[f32]);
    fn to_f32(self) -> f32;
    /// Eight values at `p` as f32 lanes; for kernels compiled with AVX2, FMA and F16C.
    ///
    /// # Safety
    /// `p..p + 8` must be readable, and the CPU must have AVX and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

impl KvElem for f32 {
    fn extend_from_f32(dst: &mut Vec<Self>, src: &[f32]) {
        dst.extend_from_slice(src);
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        std::arch::x86_64::_mm256_loadu_ps(p)
    }
}

impl KvElem for f16 {
    fn extend_from_f32(dst: &mut Vec<Self>, src: &[f32]) {
        use half::slice::HalfFloatSliceExt;
        let start = dst.len();
        dst.resize(start + src.len(), f16::ZERO);
        dst[start..].convert_from_f32_slice(src);
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }
}

/// Attention scores of one head: `scores[j] = scale * (q . k[j * stride..][..q.len()])`
/// for each position `j` (`k` starts at the head's offset in a position-major cache).
pub fn attn_scores<E: KvElem>(
    isa: Isa,
    q: &[f32],
    k: &[E],
    stride: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let hd = q.len();
    if let Some(last) = scores.len().checked_sub(1) {
        assert!(k.len() >= last * stride + hd, "attention: K too short");
    }
    #[cfg(target_arch = "x86_64")]
    if isa.is_simd() && hd.is_multiple_of(8) {
        // SAFETY: a SIMD `Isa` is only detected on CPUs with AVX2, FMA and F16C; every
        // row read lies inside `k` (asserted above).
        return unsafe { x86::attn_scores(q, k, stride, scale, scores) };
    }
    let _ = isa;
    for (j, s) in scores.iter_mut().enumerate() {
        *s = dot_generic(q, &k[j * stride..][..hd]) * scale;
    }
}

/// Attention's weighted sum of one head: `out += sum_j p[j] * v[j * stride..][..out.len()]`.
pub fn attn_mix<E: KvElem>(isa: Isa, p: &[f32], v: &[E], stride: usize, out: &mut [f32]) {
    let hd = out.len();
    if let Some(last) = p.len().checked_sub(1) {
        assert!(v.len() >= last * stride + hd, "attention: V too short");
    }
    #[cfg(target_arch = "x86_64")]
    if isa.is_simd() && hd.is_multiple_of(8) {
        // SAFETY: as in `attn_scores`.
        return unsafe { x86::attn_mix(p, v, stride, out) };
    }
    let _ = isa;
    for (j, &w) in p.iter().enumerate() {
        for (o, x) in out.iter_mut().zip(&v[j * stride..][..hd]) {
            *o += w * x.to_f32();
        }
    }
}

/// `a . b` in eight lanes, as the SIMD kernel adds them.
#[inline(always)]
fn dot_generic<E: KvElem>(a: &[f32], b: &[E]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y.to_f32())
        .sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
            acc[i] += x[i] * y[i].to_f32();
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::KvElem;
    use std::arch::x86_64::*;

    /// `attn_scores` for a head width that is a multiple of 8: four positions at a
    /// time, each with its own accumulator, reduced together.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn attn_scores<E: KvElem>(
        q: &[f32],
        k: &[E],
        stride: usize,
        scale: f32,
        scores: &mut [f32],
    ) {
        let hd = q.len();
        let n = scores.len();
        let (qp, kp, sp) = (q.as_ptr(), k.as_ptr(), scores.as_mut_ptr());
        let sc = _mm_set1_ps(scale);
        let mut j = 0;
        while j + 4 <= n {
            let r = kp.add(j * stride);
            let (mut a0, mut a1, mut a2, mut a3) = (
                _mm256_setzero_ps(),
                _mm256_setzero_ps(),
                _mm256_setzero_ps(),
                _mm256_setzero_ps(),
            );
            let mut i = 0;
            while i < hd {
                let qv = _mm256_loadu_ps(qp.add(i));
                a0 = _mm256_fmadd_ps(qv, E::load8(r.add(i)), a0);
                a1 = _mm256_fmadd_ps(qv, E::load8(r.add(stride + i)), a1);
                a2 = _mm256_fmadd_ps(qv, E::load8(r.add(2 * stride + i)), a2);
                a3 = _mm256_fmadd_ps(qv, E::load8(r.add(3 * stride + i)), a3);
                i += 8;
            }
            // [a0 a1 a2 a3] summed lane-wise, then the two halves added.
            let h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
            let s4 = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
            _mm_storeu_ps(sp.add(j), _mm_mul_ps(s4, sc));
            j += 4;
        }
        while j < n {
            let r = kp.add(j * stride);
            let mut a = _mm256_setzero_ps();
            let mut i = 0;
            while i < hd {
                a = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i)), E::load8(r.add(i)), a);
                i += 8;
            }
            let s4 = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
            let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
            *sp.add(j) = _mm_cvtss_f32(s1) * scale;
            j += 1;
        }
    }

    /// `attn_mix` for a head width that is a multiple of 8: the output is held in
    /// registers, 32 values (four vectors) at a time, over all positions.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn attn_mix<E: KvElem>(p: &[f32], v: &[E], stride: usize, out: &mut [f32]) {
        let hd = out.len();
        let (vp, op) = (v.as_ptr(), out.as_mut_ptr());
        let mut c = 0;
        while c + 32 <= hd {
            let mut o0 = _mm256_loadu_ps(op.add(c));
            let mut o1 = _mm256_loadu_ps(op.add(c + 8));
            let mut o2 = _mm256_loadu_ps(op.add(c + 16));
            let mut o3 = _mm256_loadu_ps(op.add(c + 24));
            for (j, &w) in p.iter().enumerate() {
                let wv = _mm256_set1_ps(w);
                let r = vp.add(j * stride + c);
                o0 = _mm256_fmadd_ps(wv, E::load8(r), o0);
                o1 = _mm256_fmadd_ps(wv, E::load8(r.add(8)), o1);
                o2 = _mm256_fmadd_ps(wv, E::load8(r.add(16)), o2);
                o3 = _mm256_fmadd_ps(wv, E::load8(r.add(24)), o3);
            }
            _mm256_storeu_ps(op.add(c), o0);
            _mm256_storeu_ps(op.add(c + 8), o1);
            _mm256_storeu_ps(op.add(c + 16), o2);
            _mm256_storeu_ps(op.add(c + 24), o3);
            c += 32;
        }
        while c < hd {
            let mut o = _mm256_loadu_ps(op.add(c));
            for (j, &w) in p.iter().enumerate() {
                o = _mm256_fmadd_ps(_mm256_set1_ps(w), E::load8(vp.add(j * stride + c)), o);
            }
            _mm256_storeu_ps(op.add(c), o);
            c += 8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both kernels against a plain f64-free reference on the cache's own values, for
    /// f32 and f16 caches, on the portable path and on this CPU's SIMD one.
    fn check<E: KvElem>(isa: Isa) {
        let mut state = 11u64;
        let mut f = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        // Head widths the kernels take (multiples of 8, with and without a 32 tail),
        // position counts around the 4-wide step, and a stride wider than the head.
        for hd in [8usize, 40, 64, 128] {
            for n in [1usize, 3, 4, 7, 33] {
                let stride = hd * 3 + 8;
                let q: Vec<f32> = (0..hd).map(|_| f()).collect();
                let raw: Vec<f32> = (0..(n - 1) * stride + hd).map(|_| f()).collect();
                let mut k: Vec<E> = Vec::new();
                E::extend_from_f32(&mut k, &raw);
                let kf: Vec<f32> = k.iter().map(|x| x.to_f32()).collect();
                let p: Vec<f32> = (0..n).map(|_| f().abs()).collect();
                let want: Vec<f32> = (0..n)
                    .map(|j| {
                        let row = &kf[j * stride..][..hd];
                        q.iter().zip(row).map(|(a, b)| a * b).sum::<f32>() * 0.125
                    })
                    .collect();
                let start: Vec<f32> = (0..hd).map(|i| i as f32 * 0.01).collect();
                let mut want_mix = start.clone();
                for (j, &w) in p.iter().enumerate() {
                    for (o, x) in want_mix.iter_mut().zip(&kf[j * stride..][..hd]) {
                        *o += w * x;
                    }
                }
                let mut got = vec![0f32; n];
                attn_scores(isa, &q, &k, stride, 0.125, &mut got);
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                        "{isa:?} hd {hd} n {n}: {g} vs {w}"
                    );
                }
                let mut mix = start.clone();
                attn_mix(isa, &p, &k, stride, &mut mix);
                for (g, w) in mix.iter().zip(&want_mix) {
                    assert!(
                        (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                        "{isa:?} hd {hd} n {n}: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn attention_kernels_match_the_reference() {
        for isa in [Isa::Scalar, Isa::detect()] {
            check::<f32>(isa);
            check::<f16>(isa);
        }
    }

    /// f16 storage rounds to nearest: within half a unit in the last place (2^-11
    /// relative) of the f32 it came from.
    #[test]
    fn f16_storage_rounds_to_nearest() {
        let src: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.0137).collect();
        let mut dst: Vec<f16> = Vec::new();
        f16::extend_from_f32(&mut dst, &src[..10]);
        f16::extend_from_f32(&mut dst, &src[10..]);
        assert_eq!(dst.len(), src.len());
        for (a, b) in src.iter().zip(&dst) {
            let back = b.to_f32();
            assert!((a - back).abs() <= a.abs() / 2048.0 + 1e-7, "{a} -> {back}");
        }
    }
}
