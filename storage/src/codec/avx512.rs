//! AVX-512F/BW kernels (x86-64) for the decode hot path: the Q8_0 embedding/head (and every
//! matrix of a Q8_0 file) one row at a time. The other encodings take the AVX2 kernels on an
//! AVX-512 machine too: a four-row AVX-512 Q4_1 kernel lived here and measured 10–15 %
//! slower than the AVX2 one with its precomputed block sums once both prefetched far ahead
//! (SmolLM2 Q4_1 decode on a 2-core Xeon: 140–152 vs 164–171 tok/s), so it was removed.
//!
//! Every function here is `unsafe` for two reasons only: it must run on a CPU with AVX-512F,
//! AVX-512BW, AVX2, FMA and F16C (the caller checks [`super::cpu::has_avx512`]), and it reads
//! the whole blocks the caller has sized (each row pointer covers `nb` blocks, `x` covers
//! `nb * 32` values). A 32-element block is two 16-lane vectors.
//!
//! Memory access matters as much as arithmetic here (the weights stream from RAM): Q8_0, whose
//! arithmetic is cheap, reads one row after another, a single sequential stream prefetched
//! far ahead, which measured faster than four interleaved ones. Results differ from "decode,
//! then dot" only by rounding; x stays f32.

#![allow(clippy::missing_safety_doc)]

use std::arch::x86_64::*;

/// The f16 at `p`, broadcast to 16 lanes.
#[inline(always)]
unsafe fn bcast_f16(p: *const u8) -> __m512 {
    let h = (p as *const u16).read_unaligned();
    _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
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
