//! AVX2 + FMA + F16C kernels (x86-64): fused dot products and exact block decoders.
//!
//! Every function here is `unsafe` for two reasons only: it must run on a CPU with
//! AVX2, FMA and F16C (the caller checks [`super::cpu::has_avx2`]), and it reads the whole
//! blocks the caller has sized (`row.len() >= nb * block_bytes`, `x.len() >= nb * block_elems`,
//! checked by the safe wrappers in `dot`/`decode`).
//!
//! Dot kernels accumulate `d * Σ q·x` per block in 8 f32 lanes with FMA; they differ from
//! "decode, then dot" only by rounding. Decoders use separate multiply and add (never FMA) so
//! they stay bit-identical to the scalar reference.

#![allow(clippy::missing_safety_doc)]

use std::arch::x86_64::*;

use super::block::MXFP4_KVALUES;

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let sh = _mm_movehdup_ps(s);
    let s = _mm_add_ps(s, sh);
    let sh = _mm_movehl_ps(sh, s);
    _mm_cvtss_f32(_mm_add_ss(s, sh))
}

/// Broadcasts the f16 at `p`.
#[inline(always)]
unsafe fn bcast_f16(p: *const u8) -> __m256 {
    let h = (p as *const u16).read_unaligned();
    _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// Broadcasts the two consecutive f16 at `p` (d, then m).
#[inline(always)]
unsafe fn bcast_f16_pair(p: *const u8) -> (__m256, __m256) {
    let dm = _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
    (
        _mm256_broadcastss_ps(dm),
        _mm256_broadcastss_ps(_mm_movehdup_ps(dm)),
    )
}

/// 16 bytes of split-half nibbles → four vectors of 8 u8→i32 codes (elements 0..32).
#[inline(always)]
unsafe fn nibbles_u(qs: __m128i) -> [__m256i; 4] {
    let mask = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(qs, mask);
    let hi = _mm_and_si128(_mm_srli_epi16(qs, 4), mask);
    [
        _mm256_cvtepu8_epi32(lo),
        _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)),
        _mm256_cvtepu8_epi32(hi),
        _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)),
    ]
}

/// 16 bytes of i8 → two vectors of 8 i8→i32.
#[inline(always)]
unsafe fn widen_i8(v: __m128i) -> [__m256i; 2] {
    [
        _mm256_cvtepi8_epi32(v),
        _mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)),
    ]
}

#[inline(always)]
unsafe fn dot4(q: [__m256; 4], x: *const f32) -> __m256 {
    let s = _mm256_mul_ps(q[0], _mm256_loadu_ps(x));
    let s = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(x.add(8)), s);
    let s = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(x.add(16)), s);
    _mm256_fmadd_ps(q[3], _mm256_loadu_ps(x.add(24)), s)
}

#[inline(always)]
unsafe fn cvt4(q: [__m256i; 4]) -> [__m256; 4] {
    [
        _mm256_cvtepi32_ps(q[0]),
        _mm256_cvtepi32_ps(q[1]),
        _mm256_cvtepi32_ps(q[2]),
        _mm256_cvtepi32_ps(q[3]),
    ]
}

// ---------------------------------------------------------------- scalar element types

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f32(a: *const f32, x: *const f32, n: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, ak) in acc.iter_mut().enumerate() {
            *ak = _mm256_fmadd_ps(
                _mm256_loadu_ps(a.add(i + 8 * k)),
                _mm256_loadu_ps(x.add(i + 8 * k)),
                *ak,
            );
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a.add(i)), _mm256_loadu_ps(x.add(i)), acc[0]);
        i += 8;
    }
    let mut s = hsum(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    while i < n {
        s += *a.add(i) * *x.add(i);
        i += 1;
    }
    s
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_f16(a: *const u8, x: *const f32, n: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, ak) in acc.iter_mut().enumerate() {
            let w = _mm256_cvtph_ps(_mm_loadu_si128(a.add(2 * (i + 8 * k)) as *const __m128i));
            *ak = _mm256_fmadd_ps(w, _mm256_loadu_ps(x.add(i + 8 * k)), *ak);
        }
        i += 32;
    }
    while i + 8 <= n {
        let w = _mm256_cvtph_ps(_mm_loadu_si128(a.add(2 * i) as *const __m128i));
        acc[0] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x.add(i)), acc[0]);
        i += 8;
    }
    let mut s = hsum(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    while i < n {
        let h = (a.add(2 * i) as *const u16).read_unaligned();
        s += half::f16::from_bits(h).to_f32() * *x.add(i);
        i += 1;
    }
    s
}

#[inline(always)]
unsafe fn load_bf16x8(p: *const u8) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i)),
        16,
    ))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_bf16(a: *const u8, x: *const f32, n: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (k, ak) in acc.iter_mut().enumerate() {
            let w = load_bf16x8(a.add(2 * (i + 8 * k)));
            *ak = _mm256_fmadd_ps(w, _mm256_loadu_ps(x.add(i + 8 * k)), *ak);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(load_bf16x8(a.add(2 * i)), _mm256_loadu_ps(x.add(i)), acc[0]);
        i += 8;
    }
    let mut s = hsum(_mm256_add_ps(
        _mm256_add_ps(acc[0], acc[1]),
        _mm256_add_ps(acc[2], acc[3]),
    ));
    while i < n {
        let h = (a.add(2 * i) as *const u16).read_unaligned();
        s += f32::from_bits((h as u32) << 16) * *x.add(i);
        i += 1;
    }
    s
}

// ---------------------------------------------------------------- 32-element blocks

/// Q4_1: Σ_blocks d·Σ(q·x) + m·Σx.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_1(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut accm = _mm256_setzero_ps();
    for b in 0..nb {
        let blk = row.add(b * 20);
        let xp = x.add(b * 32);
        let (d, m) = bcast_f16_pair(blk);
        let q = cvt4(nibbles_u(_mm_loadu_si128(blk.add(4) as *const __m128i)));
        acc = _mm256_fmadd_ps(d, dot4(q, xp), acc);
        let xs = _mm256_add_ps(
            _mm256_add_ps(_mm256_loadu_ps(xp), _mm256_loadu_ps(xp.add(8))),
            _mm256_add_ps(_mm256_loadu_ps(xp.add(16)), _mm256_loadu_ps(xp.add(24))),
        );
        accm = _mm256_fmadd_ps(m, xs, accm);
    }
    hsum(_mm256_add_ps(acc, accm))
}

/// Q4_1, four rows against one x: x is loaded and summed once per block for all four.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_q4_1(rows: [*const u8; 4], x: *const f32, nb: usize) -> [f32; 4] {
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut accm = [_mm256_setzero_ps(); 4];
    let mask = _mm_set1_epi8(0x0F);
    for b in 0..nb {
        let xp = x.add(b * 32);
        let x0 = _mm256_loadu_ps(xp);
        let x1 = _mm256_loadu_ps(xp.add(8));
        let x2 = _mm256_loadu_ps(xp.add(16));
        let x3 = _mm256_loadu_ps(xp.add(24));
        let xs = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
        for r in 0..4 {
            let blk = rows[r].add(b * 20);
            let (d, m) = bcast_f16_pair(blk);
            let qs = _mm_loadu_si128(blk.add(4) as *const __m128i);
            let lo = _mm_and_si128(qs, mask);
            let hi = _mm_and_si128(_mm_srli_epi16(qs, 4), mask);
            let q0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
            let q1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
            let q2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
            let q3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
            let s = _mm256_mul_ps(q0, x0);
            let s = _mm256_fmadd_ps(q1, x1, s);
            let s = _mm256_fmadd_ps(q2, x2, s);
            let s = _mm256_fmadd_ps(q3, x3, s);
            acc[r] = _mm256_fmadd_ps(d, s, acc[r]);
            accm[r] = _mm256_fmadd_ps(m, xs, accm[r]);
        }
    }
    [
        hsum(_mm256_add_ps(acc[0], accm[0])),
        hsum(_mm256_add_ps(acc[1], accm[1])),
        hsum(_mm256_add_ps(acc[2], accm[2])),
        hsum(_mm256_add_ps(acc[3], accm[3])),
    ]
}

/// Q4_0: Σ_blocks d·Σ((q−8)·x).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_0(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let eight = _mm_set1_epi8(8);
    let mask = _mm_set1_epi8(0x0F);
    for b in 0..nb {
        let blk = row.add(b * 18);
        let d = bcast_f16(blk);
        let qs = _mm_loadu_si128(blk.add(2) as *const __m128i);
        let lo = _mm_sub_epi8(_mm_and_si128(qs, mask), eight);
        let hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), mask), eight);
        let [a0, a1] = widen_i8(lo);
        let [a2, a3] = widen_i8(hi);
        let q = cvt4([a0, a1, a2, a3]);
        acc = _mm256_fmadd_ps(d, dot4(q, x.add(b * 32)), acc);
    }
    hsum(acc)
}

/// Q8_0: Σ_blocks d·Σ(q·x).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q8_0(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut b = 0;
    while b + 2 <= nb {
        let blk = row.add(b * 34);
        let d = bcast_f16(blk);
        let [a0, a1] = widen_i8(_mm_loadu_si128(blk.add(2) as *const __m128i));
        let [a2, a3] = widen_i8(_mm_loadu_si128(blk.add(18) as *const __m128i));
        acc0 = _mm256_fmadd_ps(d, dot4(cvt4([a0, a1, a2, a3]), x.add(b * 32)), acc0);
        let blk = row.add(b * 34 + 34);
        let d = bcast_f16(blk);
        let [a0, a1] = widen_i8(_mm_loadu_si128(blk.add(2) as *const __m128i));
        let [a2, a3] = widen_i8(_mm_loadu_si128(blk.add(18) as *const __m128i));
        acc1 = _mm256_fmadd_ps(d, dot4(cvt4([a0, a1, a2, a3]), x.add(b * 32 + 32)), acc1);
        b += 2;
    }
    if b < nb {
        let blk = row.add(b * 34);
        let d = bcast_f16(blk);
        let [a0, a1] = widen_i8(_mm_loadu_si128(blk.add(2) as *const __m128i));
        let [a2, a3] = widen_i8(_mm_loadu_si128(blk.add(18) as *const __m128i));
        acc0 = _mm256_fmadd_ps(d, dot4(cvt4([a0, a1, a2, a3]), x.add(b * 32)), acc0);
    }
    hsum(_mm256_add_ps(acc0, acc1))
}

/// MXFP4: Σ_blocks s·Σ(KV[q]·x), KV looked up with a byte shuffle.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_mxfp4(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let table = _mm_loadu_si128(MXFP4_KVALUES.as_ptr() as *const __m128i);
    let mask = _mm_set1_epi8(0x0F);
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let blk = row.add(b * 17);
        let s = _mm256_set1_ps(super::block::e8m0_half(*blk));
        let qs = _mm_loadu_si128(blk.add(1) as *const __m128i);
        let lo = _mm_shuffle_epi8(table, _mm_and_si128(qs, mask));
        let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(qs, 4), mask));
        let [a0, a1] = widen_i8(lo);
        let [a2, a3] = widen_i8(hi);
        acc = _mm256_fmadd_ps(s, dot4(cvt4([a0, a1, a2, a3]), x.add(b * 32)), acc);
    }
    hsum(acc)
}

// ---------------------------------------------------------------- exact decoders

#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_f16(src: *const u8, out: *mut f32, n: usize) {
    let mut i = 0;
    while i + 8 <= n {
        let w = _mm256_cvtph_ps(_mm_loadu_si128(src.add(2 * i) as *const __m128i));
        _mm256_storeu_ps(out.add(i), w);
        i += 8;
    }
    while i < n {
        let h = (src.add(2 * i) as *const u16).read_unaligned();
        *out.add(i) = half::f16::from_bits(h).to_f32();
        i += 1;
    }
}

/// Q4_1 → `d * q + m` (multiply, then add: bit-identical to the scalar reference).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_q4_1(src: *const u8, out: *mut f32, nb: usize) {
    for b in 0..nb {
        let blk = src.add(b * 20);
        let (d, m) = bcast_f16_pair(blk);
        let q = cvt4(nibbles_u(_mm_loadu_si128(blk.add(4) as *const __m128i)));
        let o = out.add(b * 32);
        for (k, qk) in q.into_iter().enumerate() {
            _mm256_storeu_ps(o.add(8 * k), _mm256_add_ps(_mm256_mul_ps(d, qk), m));
        }
    }
}

/// Q8_0 → `q * d`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_q8_0(src: *const u8, out: *mut f32, nb: usize) {
    for b in 0..nb {
        let blk = src.add(b * 34);
        let d = bcast_f16(blk);
        let [a0, a1] = widen_i8(_mm_loadu_si128(blk.add(2) as *const __m128i));
        let [a2, a3] = widen_i8(_mm_loadu_si128(blk.add(18) as *const __m128i));
        let q = cvt4([a0, a1, a2, a3]);
        let o = out.add(b * 32);
        for (k, qk) in q.into_iter().enumerate() {
            _mm256_storeu_ps(o.add(8 * k), _mm256_mul_ps(qk, d));
        }
    }
}

/// Q4_0 → `d * (q - 8)`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_q4_0(src: *const u8, out: *mut f32, nb: usize) {
    let eight = _mm_set1_epi8(8);
    let mask = _mm_set1_epi8(0x0F);
    for b in 0..nb {
        let blk = src.add(b * 18);
        let d = bcast_f16(blk);
        let qs = _mm_loadu_si128(blk.add(2) as *const __m128i);
        let lo = _mm_sub_epi8(_mm_and_si128(qs, mask), eight);
        let hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), mask), eight);
        let [a0, a1] = widen_i8(lo);
        let [a2, a3] = widen_i8(hi);
        let q = cvt4([a0, a1, a2, a3]);
        let o = out.add(b * 32);
        for (k, qk) in q.into_iter().enumerate() {
            _mm256_storeu_ps(o.add(8 * k), _mm256_mul_ps(d, qk));
        }
    }
}
