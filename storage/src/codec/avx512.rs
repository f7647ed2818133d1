//! AVX-512F/BW kernels (x86-64) for the decode hot path: Q4_1 matrices four rows at a time
//! against one activation vector, and the Q8_0 embedding/head one row at a time.
//!
//! Every function here is `unsafe` for two reasons only: it must run on a CPU with AVX-512F,
//! AVX-512BW, AVX2, FMA and F16C (the caller checks [`super::cpu::has_avx512`]), and it reads
//! the whole blocks the caller has sized (each row pointer covers `nb` blocks, `x` covers
//! `nb * 32` values). A 32-element block is two 16-lane vectors.
//!
//! Memory access matters as much as arithmetic here (the weights stream from RAM): the Q4_1
//! kernel loads x once per block for four interleaved rows and prefetches the next group of
//! four rows linearly (prefetches never fault); Q8_0, whose arithmetic is cheap, reads one row
//! after another, a single sequential stream, which measured faster than four interleaved
//! ones. Results differ from "decode, then dot" only by rounding; x stays f32.

#![allow(clippy::missing_safety_doc)]

use std::arch::x86_64::*;

/// `d` and `m`: the two consecutive f16 at `p`, each broadcast to 16 lanes.
#[inline(always)]
unsafe fn bcast_f16_pair(p: *const u8) -> (__m512, __m512) {
    let dm = _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
    (
        _mm512_broadcastss_ps(dm),
        _mm512_broadcastss_ps(_mm_movehdup_ps(dm)),
    )
}

/// The f16 at `p`, broadcast to 16 lanes.
#[inline(always)]
unsafe fn bcast_f16(p: *const u8) -> __m512 {
    let h = (p as *const u16).read_unaligned();
    _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// Prefetches the two cache lines from `p` (never faults).
#[inline(always)]
unsafe fn prefetch_lines(p: *const u8) {
    _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64) as *const i8);
}

/// Where the four-row kernels prefetch from: [`super::PREFETCH_FAR`] bytes past the start of
/// the four-row group after `rows` (equally spaced, consecutive), read at the group's pace.
#[inline(always)]
fn next_group(rows: [*const u8; 4]) -> *const u8 {
    let rb = (rows[1] as usize).wrapping_sub(rows[0] as usize);
    rows[3].wrapping_add(rb + super::PREFETCH_FAR)
}

/// Q4_1, four rows against one x: Σ_blocks d·Σ(q·x) + m·Σx per row.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot4_q4_1(rows: [*const u8; 4], x: *const f32, nb: usize) -> [f32; 4] {
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut accm = [_mm512_setzero_ps(); 4];
    let mask = _mm_set1_epi8(0x0F);
    let next = next_group(rows);
    for b in 0..nb {
        prefetch_lines(next.wrapping_add(b * 80));
        let xp = x.add(b * 32);
        let xl = _mm512_loadu_ps(xp);
        let xh = _mm512_loadu_ps(xp.add(16));
        let xs = _mm512_add_ps(xl, xh);
        for r in 0..4 {
            let blk = rows[r].add(b * 20);
            let (d, m) = bcast_f16_pair(blk);
            let qs = _mm_loadu_si128(blk.add(4) as *const __m128i);
            let lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(qs, mask)));
            let hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(
                _mm_srli_epi16(qs, 4),
                mask,
            )));
            let s = _mm512_fmadd_ps(hi, xh, _mm512_mul_ps(lo, xl));
            acc[r] = _mm512_fmadd_ps(d, s, acc[r]);
            accm[r] = _mm512_fmadd_ps(m, xs, accm[r]);
        }
    }
    [
        _mm512_reduce_add_ps(_mm512_add_ps(acc[0], accm[0])),
        _mm512_reduce_add_ps(_mm512_add_ps(acc[1], accm[1])),
        _mm512_reduce_add_ps(_mm512_add_ps(acc[2], accm[2])),
        _mm512_reduce_add_ps(_mm512_add_ps(acc[3], accm[3])),
    ]
}

/// Q8_0, one row: Σ_blocks d·Σ(q·x), two blocks per step on independent accumulators, the
/// row prefetched [`super::PREFETCH_ROW`] bytes ahead (one sequential stream per thread: decode
/// of a Q8_0 model is bound by how many lines each core keeps in flight).
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot1_q8_0(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let block = |b: usize, acc: __m512| -> __m512 {
        let xp = x.add(b * 32);
        let xl = _mm512_loadu_ps(xp);
        let xh = _mm512_loadu_ps(xp.add(16));
        let blk = row.add(b * 34);
        let d = bcast_f16(blk);
        let lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
            blk.add(2) as *const __m128i
        )));
        let hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
            blk.add(18) as *const __m128i
        )));
        let s = _mm512_fmadd_ps(hi, xh, _mm512_mul_ps(lo, xl));
        _mm512_fmadd_ps(d, s, acc)
    };
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut b = 0;
    while b + 2 <= nb {
        _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(b * 34 + super::PREFETCH_ROW) as *const i8);
        acc[0] = block(b, acc[0]);
        acc[1] = block(b + 1, acc[1]);
        b += 2;
    }
    if b < nb {
        acc[0] = block(b, acc[0]);
    }
    _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
}
