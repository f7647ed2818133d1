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

/// The sum of the eight lanes of `v`.
#[inline(always)]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let sh = _mm_movehdup_ps(s);
    let s = _mm_add_ps(s, sh);
    let sh = _mm_movehl_ps(sh, s);
    _mm_cvtss_f32(_mm_add_ss(s, sh))
}

/// Broadcasts the f16 at `p`.
#[inline(always)]
pub(super) unsafe fn bcast_f16(p: *const u8) -> __m256 {
    let h = (p as *const u16).read_unaligned();
    _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// Prefetches the cache line at `p` (a hint: never faults, whatever the address).
#[inline(always)]
pub(super) unsafe fn prefetch(p: *const u8) {
    _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
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

/// `y += a · x` for `n` values: a product, then a sum (never fused), as scalar code does.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn axpy_f32(a: f32, x: *const f32, y: *mut f32, n: usize) {
    let va = _mm256_set1_ps(a);
    let mut i = 0;
    while i + 32 <= n {
        for k in 0..4 {
            let at = i + 8 * k;
            let prod = _mm256_mul_ps(va, _mm256_loadu_ps(x.add(at)));
            _mm256_storeu_ps(y.add(at), _mm256_add_ps(_mm256_loadu_ps(y.add(at)), prod));
        }
        i += 32;
    }
    while i + 8 <= n {
        let prod = _mm256_mul_ps(va, _mm256_loadu_ps(x.add(i)));
        _mm256_storeu_ps(y.add(i), _mm256_add_ps(_mm256_loadu_ps(y.add(i)), prod));
        i += 8;
    }
    while i < n {
        *y.add(i) += a * *x.add(i);
        i += 1;
    }
}

/// `a` may be unaligned (it points into encoded bytes); only unaligned loads are used.
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
        // Encoded f32 rows need not be 4-byte aligned.
        s += a.add(i).read_unaligned() * *x.add(i);
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

// ---------------------------------------------------------------- 5-bit and K-quant blocks

/// Codes 0..32 of a Q5 block as i32 lanes: nibble | (bit j of qh) << 4.
#[inline(always)]
unsafe fn q5_codes(qs: *const u8, qh: u32) -> [__m256i; 4] {
    let nib = nibbles_u(_mm_loadu_si128(qs as *const __m128i));
    let h = _mm256_set1_epi32(qh as i32);
    let one = _mm256_set1_epi32(1);
    let mut out = nib;
    for (k, o) in out.iter_mut().enumerate() {
        let base = 8 * k as i32;
        let sh = _mm256_setr_epi32(
            base,
            base + 1,
            base + 2,
            base + 3,
            base + 4,
            base + 5,
            base + 6,
            base + 7,
        );
        let bit = _mm256_and_si256(_mm256_srlv_epi32(h, sh), one);
        *o = _mm256_or_si256(nib[k], _mm256_slli_epi32(bit, 4));
    }
    out
}

/// Q5_0: Σ_blocks d·Σ((q5−16)·x).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_0(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let sixteen = _mm256_set1_epi32(16);
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let blk = row.add(b * 22);
        let d = bcast_f16(blk);
        let qh = (blk.add(2) as *const u32).read_unaligned();
        let c = q5_codes(blk.add(6), qh);
        let q = cvt4([
            _mm256_sub_epi32(c[0], sixteen),
            _mm256_sub_epi32(c[1], sixteen),
            _mm256_sub_epi32(c[2], sixteen),
            _mm256_sub_epi32(c[3], sixteen),
        ]);
        acc = _mm256_fmadd_ps(d, dot4(q, x.add(b * 32)), acc);
    }
    hsum(acc)
}

/// Q5_1: Σ_blocks d·Σ(q5·x) + m·Σx.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_1(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut accm = _mm256_setzero_ps();
    for b in 0..nb {
        let blk = row.add(b * 24);
        let xp = x.add(b * 32);
        let (d, m) = bcast_f16_pair(blk);
        let qh = (blk.add(4) as *const u32).read_unaligned();
        let q = cvt4(q5_codes(blk.add(8), qh));
        acc = _mm256_fmadd_ps(d, dot4(q, xp), acc);
        accm = _mm256_fmadd_ps(m, sum4(xp), accm);
    }
    hsum(_mm256_add_ps(acc, accm))
}

#[inline(always)]
unsafe fn sum4(xp: *const f32) -> __m256 {
    _mm256_add_ps(
        _mm256_add_ps(_mm256_loadu_ps(xp), _mm256_loadu_ps(xp.add(8))),
        _mm256_add_ps(_mm256_loadu_ps(xp.add(16)), _mm256_loadu_ps(xp.add(24))),
    )
}

/// Q4_K: Σ_sub-blocks (d·sc)·Σ(q·x) − (dmin·mn)·Σx.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_k(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let mask = _mm_set1_epi8(0x0F);
    let mut acc = _mm256_setzero_ps();
    let mut accm = _mm256_setzero_ps();
    for b in 0..nb {
        let blk = row.add(b * 144);
        let d = super::block::f16_at(std::slice::from_raw_parts(blk, 4), 0);
        let dmin = super::block::f16_at(std::slice::from_raw_parts(blk, 4), 2);
        let scales = std::slice::from_raw_parts(blk.add(4), 12);
        let qs = blk.add(16);
        let xb = x.add(b * 256);
        for c in 0..4 {
            let (sc0, m0) = super::block::scale_min_k4(2 * c, scales);
            let (sc1, m1) = super::block::scale_min_k4(2 * c + 1, scales);
            let a = _mm_loadu_si128(qs.add(32 * c) as *const __m128i);
            let bb = _mm_loadu_si128(qs.add(32 * c + 16) as *const __m128i);
            let (alo, blo) = (_mm_and_si128(a, mask), _mm_and_si128(bb, mask));
            let ahi = _mm_and_si128(_mm_srli_epi16(a, 4), mask);
            let bhi = _mm_and_si128(_mm_srli_epi16(bb, 4), mask);
            let lo = cvt4([
                _mm256_cvtepu8_epi32(alo),
                _mm256_cvtepu8_epi32(_mm_srli_si128(alo, 8)),
                _mm256_cvtepu8_epi32(blo),
                _mm256_cvtepu8_epi32(_mm_srli_si128(blo, 8)),
            ]);
            let hi = cvt4([
                _mm256_cvtepu8_epi32(ahi),
                _mm256_cvtepu8_epi32(_mm_srli_si128(ahi, 8)),
                _mm256_cvtepu8_epi32(bhi),
                _mm256_cvtepu8_epi32(_mm_srli_si128(bhi, 8)),
            ]);
            let x0 = xb.add(64 * c);
            let x1 = x0.add(32);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * sc0 as f32), dot4(lo, x0), acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * sc1 as f32), dot4(hi, x1), acc);
            accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin * m0 as f32), sum4(x0), accm);
            accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin * m1 as f32), sum4(x1), accm);
        }
    }
    hsum(_mm256_sub_ps(acc, accm))
}

/// The 32 five-bit codes of Q5_K sub-block pair `c` as two halves of 16 bytes each for the
/// low (`lo`) and high (`hi`) sub-block: nibbles of `qs[32c..32c + 32]`, the fifth bit from
/// bit `2c` (low) or `2c + 1` (high) of `qh[l]`.
#[inline(always)]
unsafe fn q5_k_codes(qs: *const u8, qh: *const u8, c: usize) -> ([__m128i; 2], [__m128i; 2]) {
    let mask = _mm_set1_epi8(0x0F);
    let sixteen = _mm_set1_epi8(16);
    let u0 = _mm_set1_epi8((1u8 << (2 * c)) as i8);
    let u1 = _mm_set1_epi8((2u8 << (2 * c)) as i8);
    let a = _mm_loadu_si128(qs.add(32 * c) as *const __m128i);
    let bb = _mm_loadu_si128(qs.add(32 * c + 16) as *const __m128i);
    let ha = _mm_loadu_si128(qh as *const __m128i);
    let hb = _mm_loadu_si128(qh.add(16) as *const __m128i);
    let bit =
        |h: __m128i, u: __m128i| _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h, u), u), sixteen);
    let lo = [
        _mm_or_si128(_mm_and_si128(a, mask), bit(ha, u0)),
        _mm_or_si128(_mm_and_si128(bb, mask), bit(hb, u0)),
    ];
    let hi = [
        _mm_or_si128(_mm_and_si128(_mm_srli_epi16(a, 4), mask), bit(ha, u1)),
        _mm_or_si128(_mm_and_si128(_mm_srli_epi16(bb, 4), mask), bit(hb, u1)),
    ];
    (lo, hi)
}

/// 32 unsigned byte codes (two halves of 16) as four f32 vectors.
#[inline(always)]
unsafe fn u8x32_ps(h: [__m128i; 2]) -> [__m256; 4] {
    cvt4([
        _mm256_cvtepu8_epi32(h[0]),
        _mm256_cvtepu8_epi32(_mm_srli_si128(h[0], 8)),
        _mm256_cvtepu8_epi32(h[1]),
        _mm256_cvtepu8_epi32(_mm_srli_si128(h[1], 8)),
    ])
}

/// Q5_K: Σ_sub-blocks (d·sc)·Σ(q5·x) − (dmin·mn)·Σx.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_k(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut accm = _mm256_setzero_ps();
    for b in 0..nb {
        let blk = row.add(b * 176);
        let head = std::slice::from_raw_parts(blk, 16);
        let d = super::block::f16_at(head, 0);
        let dmin = super::block::f16_at(head, 2);
        let scales = &head[4..16];
        let (qh, qs) = (blk.add(16), blk.add(48));
        let xb = x.add(b * 256);
        for c in 0..4 {
            let (sc0, m0) = super::block::scale_min_k4(2 * c, scales);
            let (sc1, m1) = super::block::scale_min_k4(2 * c + 1, scales);
            let (lo, hi) = q5_k_codes(qs, qh, c);
            let x0 = xb.add(64 * c);
            let x1 = x0.add(32);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * sc0 as f32), dot4(u8x32_ps(lo), x0), acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * sc1 as f32), dot4(u8x32_ps(hi), x1), acc);
            accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin * m0 as f32), sum4(x0), accm);
            accm = _mm256_fmadd_ps(_mm256_set1_ps(dmin * m1 as f32), sum4(x1), accm);
        }
    }
    hsum(_mm256_sub_ps(acc, accm))
}

/// Q6_K: Σ_16-value groups (d·scale)·Σ((q6−32)·x).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q6_k(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let m4 = _mm256_set1_epi8(0x0F);
    let m3 = _mm256_set1_epi8(3);
    let off = _mm256_set1_epi8(32);
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let blk = row.add(b * 210);
        let d = super::block::f16_at(std::slice::from_raw_parts(blk.add(208), 2), 0);
        let sc = blk.add(192) as *const i8;
        for h in 0..2 {
            let ql0 = _mm256_loadu_si256(blk.add(64 * h) as *const __m256i);
            let ql1 = _mm256_loadu_si256(blk.add(64 * h + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(blk.add(128 + 32 * h) as *const __m256i);
            let hb = |s: i32| -> __m256i {
                let v = match s {
                    0 => qh,
                    2 => _mm256_srli_epi16(qh, 2),
                    4 => _mm256_srli_epi16(qh, 4),
                    _ => _mm256_srli_epi16(qh, 6),
                };
                _mm256_slli_epi16(_mm256_and_si256(v, m3), 4)
            };
            let q = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), hb(0)),
                _mm256_or_si256(_mm256_and_si256(ql1, m4), hb(2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), hb(4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), hb(6)),
            ];
            for (k, qk) in q.into_iter().enumerate() {
                // 32 signed codes → elements 128h + 32k .. +32, two scale groups of 16.
                let v = _mm256_sub_epi8(qk, off);
                let lo = _mm256_castsi256_si128(v);
                let hi = _mm256_extracti128_si256(v, 1);
                let [c0, c1] = widen_i8(lo);
                let [c2, c3] = widen_i8(hi);
                let qf = cvt4([c0, c1, c2, c3]);
                let p = 128 * h + 32 * k;
                let xp = x.add(b * 256 + p);
                let s0 = _mm256_fmadd_ps(
                    qf[1],
                    _mm256_loadu_ps(xp.add(8)),
                    _mm256_mul_ps(qf[0], _mm256_loadu_ps(xp)),
                );
                let s1 = _mm256_fmadd_ps(
                    qf[3],
                    _mm256_loadu_ps(xp.add(24)),
                    _mm256_mul_ps(qf[2], _mm256_loadu_ps(xp.add(16))),
                );
                let d0 = d * *sc.add(p / 16) as f32;
                let d1 = d * *sc.add(p / 16 + 1) as f32;
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d0), s0, acc);
                acc = _mm256_fmadd_ps(_mm256_set1_ps(d1), s1, acc);
            }
        }
    }
    hsum(acc)
}

// ---------------------------------------------------------------- more exact decoders

/// Q5_0 → `d * (q5 - 16)`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_q5_0(src: *const u8, out: *mut f32, nb: usize) {
    let sixteen = _mm256_set1_epi32(16);
    for b in 0..nb {
        let blk = src.add(b * 22);
        let d = bcast_f16(blk);
        let qh = (blk.add(2) as *const u32).read_unaligned();
        let c = q5_codes(blk.add(6), qh);
        let o = out.add(b * 32);
        for (k, ck) in c.into_iter().enumerate() {
            let q = _mm256_cvtepi32_ps(_mm256_sub_epi32(ck, sixteen));
            _mm256_storeu_ps(o.add(8 * k), _mm256_mul_ps(d, q));
        }
    }
}

/// Q5_1 → `d * q5 + m`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_q5_1(src: *const u8, out: *mut f32, nb: usize) {
    for b in 0..nb {
        let blk = src.add(b * 24);
        let (d, m) = bcast_f16_pair(blk);
        let qh = (blk.add(4) as *const u32).read_unaligned();
        let q = cvt4(q5_codes(blk.add(8), qh));
        let o = out.add(b * 32);
        for (k, qk) in q.into_iter().enumerate() {
            _mm256_storeu_ps(o.add(8 * k), _mm256_add_ps(_mm256_mul_ps(d, qk), m));
        }
    }
}

/// MXFP4 → `s * KV[nibble]`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_mxfp4(src: *const u8, out: *mut f32, nb: usize) {
    let table = _mm_loadu_si128(MXFP4_KVALUES.as_ptr() as *const __m128i);
    let mask = _mm_set1_epi8(0x0F);
    for b in 0..nb {
        let blk = src.add(b * 17);
        let s = _mm256_set1_ps(super::block::e8m0_half(*blk));
        let qs = _mm_loadu_si128(blk.add(1) as *const __m128i);
        let lo = _mm_shuffle_epi8(table, _mm_and_si128(qs, mask));
        let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(qs, 4), mask));
        let [a0, a1] = widen_i8(lo);
        let [a2, a3] = widen_i8(hi);
        let o = out.add(b * 32);
        for (k, qk) in cvt4([a0, a1, a2, a3]).into_iter().enumerate() {
            _mm256_storeu_ps(o.add(8 * k), _mm256_mul_ps(s, qk));
        }
    }
}

/// Q4_K → `(d * sc) * q - (dmin * mn)`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_q4_k(src: *const u8, out: *mut f32, nb: usize) {
    let mask = _mm_set1_epi8(0x0F);
    for b in 0..nb {
        let blk = src.add(b * 144);
        let head = std::slice::from_raw_parts(blk, 16);
        let d = super::block::f16_at(head, 0);
        let dmin = super::block::f16_at(head, 2);
        let scales = &head[4..16];
        let qs = blk.add(16);
        let o = out.add(b * 256);
        for c in 0..4 {
            let a = _mm_loadu_si128(qs.add(32 * c) as *const __m128i);
            let bb = _mm_loadu_si128(qs.add(32 * c + 16) as *const __m128i);
            for (h, (va, vb)) in [
                (_mm_and_si128(a, mask), _mm_and_si128(bb, mask)),
                (
                    _mm_and_si128(_mm_srli_epi16(a, 4), mask),
                    _mm_and_si128(_mm_srli_epi16(bb, 4), mask),
                ),
            ]
            .into_iter()
            .enumerate()
            {
                let (sc, mn) = super::block::scale_min_k4(2 * c + h, scales);
                let ds = _mm256_set1_ps(d * sc as f32);
                let dm = _mm256_set1_ps(dmin * mn as f32);
                let q = cvt4([
                    _mm256_cvtepu8_epi32(va),
                    _mm256_cvtepu8_epi32(_mm_srli_si128(va, 8)),
                    _mm256_cvtepu8_epi32(vb),
                    _mm256_cvtepu8_epi32(_mm_srli_si128(vb, 8)),
                ]);
                let oo = o.add(64 * c + 32 * h);
                for (k, qk) in q.into_iter().enumerate() {
                    _mm256_storeu_ps(oo.add(8 * k), _mm256_sub_ps(_mm256_mul_ps(ds, qk), dm));
                }
            }
        }
    }
}

/// Q5_K → `(d * sc) * q5 - (dmin * mn)` (the scalar decoder's arithmetic: bit-exact).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_q5_k(src: *const u8, out: *mut f32, nb: usize) {
    for b in 0..nb {
        let blk = src.add(b * 176);
        let head = std::slice::from_raw_parts(blk, 16);
        let d = super::block::f16_at(head, 0);
        let dmin = super::block::f16_at(head, 2);
        let scales = &head[4..16];
        let o = out.add(b * 256);
        for c in 0..4 {
            let (lo, hi) = q5_k_codes(blk.add(48), blk.add(16), c);
            for (h, codes) in [lo, hi].into_iter().enumerate() {
                let (sc, mn) = super::block::scale_min_k4(2 * c + h, scales);
                let ds = _mm256_set1_ps(d * sc as f32);
                let dm = _mm256_set1_ps(dmin * mn as f32);
                let oo = o.add(64 * c + 32 * h);
                for (k, qk) in u8x32_ps(codes).into_iter().enumerate() {
                    _mm256_storeu_ps(oo.add(8 * k), _mm256_sub_ps(_mm256_mul_ps(ds, qk), dm));
                }
            }
        }
    }
}

/// Q6_K → `(d * scale) * (q6 - 32)`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_q6_k(src: *const u8, out: *mut f32, nb: usize) {
    let m4 = _mm256_set1_epi8(0x0F);
    let m3 = _mm256_set1_epi8(3);
    let off = _mm256_set1_epi8(32);
    for b in 0..nb {
        let blk = src.add(b * 210);
        let d = super::block::f16_at(std::slice::from_raw_parts(blk.add(208), 2), 0);
        let sc = blk.add(192) as *const i8;
        for h in 0..2 {
            let ql0 = _mm256_loadu_si256(blk.add(64 * h) as *const __m256i);
            let ql1 = _mm256_loadu_si256(blk.add(64 * h + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(blk.add(128 + 32 * h) as *const __m256i);
            let hb = |v: __m256i| _mm256_slli_epi16(_mm256_and_si256(v, m3), 4);
            let q = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), hb(qh)),
                _mm256_or_si256(_mm256_and_si256(ql1, m4), hb(_mm256_srli_epi16(qh, 2))),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                    hb(_mm256_srli_epi16(qh, 4)),
                ),
                _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                    hb(_mm256_srli_epi16(qh, 6)),
                ),
            ];
            for (k, qk) in q.into_iter().enumerate() {
                let v = _mm256_sub_epi8(qk, off);
                let [c0, c1] = widen_i8(_mm256_castsi256_si128(v));
                let [c2, c3] = widen_i8(_mm256_extracti128_si256(v, 1));
                let qf = cvt4([c0, c1, c2, c3]);
                let p = 128 * h + 32 * k;
                let d0 = _mm256_set1_ps(d * *sc.add(p / 16) as f32);
                let d1 = _mm256_set1_ps(d * *sc.add(p / 16 + 1) as f32);
                let o = out.add(b * 256 + p);
                _mm256_storeu_ps(o, _mm256_mul_ps(d0, qf[0]));
                _mm256_storeu_ps(o.add(8), _mm256_mul_ps(d0, qf[1]));
                _mm256_storeu_ps(o.add(16), _mm256_mul_ps(d1, qf[2]));
                _mm256_storeu_ps(o.add(24), _mm256_mul_ps(d1, qf[3]));
            }
        }
    }
}
