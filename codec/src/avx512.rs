//! AVX-512F/BW kernels (x86-64) for the decode hot path: the Q8_0 embedding/head (and every
//! matrix of a Q8_0 file) one row at a time, and four-row Q4_0, Q4_1 and Q5_0 kernels whose
//! codes become floats through a table permute (`vpermps` on 16 lanes reads the low four
//! bits of each index lane; Q5_0's 5-bit codes index a 32-entry two-register table)
//! instead of a mask and an int → float conversion, so the conversion leaves the FMA
//! ports. A four-row AVX-512 Q4_1 kernel with the conversion measured 10–15 % slower than
//! the AVX2 one and was removed; with the permute, decode on one thread is 7–11 % (Q4_0,
//! Q4_1) and 9–14 % (Q5_0, SmolLM2 Q4_K_M) faster than the AVX2 kernels
//! (docs/performance.md). The other encodings take the AVX2 kernels on an AVX-512 machine
//! too.
//!
//! Every function here is `unsafe` for two reasons only: it must run on a CPU with AVX-512F,
//! AVX-512BW, AVX2, FMA and F16C (the caller checks [`super::cpu::has_avx512`]), and it reads
//! the whole blocks the caller has sized (each row pointer covers `nb` blocks, `x` covers
//! `nb * 32` values). A 32-element block is two 16-lane vectors.
//!
//! Memory access matters as much as arithmetic here: Q8_0, whose arithmetic is cheap, reads
//! one row after another, a single sequential stream prefetched far ahead, which measured
//! faster than four interleaved ones. Results differ from "decode, then dot" only by
//! rounding; x stays f32.

#![allow(clippy::missing_safety_doc)]

use std::arch::x86_64::*;

use super::avx2::prefetch;
use super::avx2_rows::{f16_pair, sum_pair};

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

/// The 32 nibble codes of a 16-byte split-half block at `qs` as floats through `table`
/// (entry `q` for code `q`): elements 0..16 (low nibbles; `vpermps` reads only the low four
/// bits of each index lane, so they need no mask) and 16..32 (high nibbles).
#[inline(always)]
unsafe fn nibble_floats(qs: *const u8, table: __m512) -> (__m512, __m512) {
    let v = _mm512_cvtepu8_epi32(_mm_loadu_si128(qs as *const __m128i));
    (
        _mm512_permutexvar_ps(v, table),
        _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(v), table),
    )
}

/// Q4_0, four rows: Σ_b d·Σ(q − 8)·x, x in natural order ([`super::avx2_perm::prepare_x_natural`]
/// layout; its offset vector is not read). Each nibble becomes `q − 8` as a float through
/// [`nibble_floats`], keeping the conversion off the FMA ports.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot4_q4_0(rows: [*const u8; 4], xp: *const f32, nb: usize) -> [f32; 4] {
    use super::avx2_perm::PREP_FLOATS;
    use super::PREFETCH_FAR as FAR;
    let rb = (rows[1] as usize).wrapping_sub(rows[0] as usize);
    let table = _mm512_setr_ps(
        -8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0,
    );
    let mut acc = [_mm512_setzero_ps(); 4];
    for b in 0..nb {
        prefetch(rows[3].wrapping_add(rb + FAR + b * 72));
        prefetch(rows[3].wrapping_add(rb + FAR + b * 72 + 64));
        let p = xp.add(b * PREP_FLOATS);
        let (xl, xh) = (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)));
        for r in 0..4 {
            let blk = rows[r].add(b * 18);
            let (lo, hi) = nibble_floats(blk.add(2), table);
            let s = _mm512_fmadd_ps(hi, xh, _mm512_mul_ps(lo, xl));
            acc[r] = _mm512_fmadd_ps(bcast_f16(blk), s, acc[r]);
        }
    }
    acc.map(|a| _mm512_reduce_add_ps(a))
}

/// Q5_0, four rows: Σ_b d·Σ(q − 16)·x, x in natural order (the
/// [`super::avx2_perm::prepare_x_natural`] layout, as for Q4_0). A 5-bit code is a nibble
/// and one bit of the block's `qh` word: the bit is ORed into bit 4 of the nibble's lane
/// under `qh` as a lane mask (no bit spreading), and the code becomes `q − 16` through a
/// 32-entry two-register table permute (`vpermt2ps`). Two single-table permutes per half
/// instead (the second under the mask) measured 5 % slower on one thread.
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot4_q5_0(rows: [*const u8; 4], xp: *const f32, nb: usize) -> [f32; 4] {
    use super::avx2_perm::PREP_FLOATS;
    use super::PREFETCH_FAR as FAR;
    let rb = (rows[1] as usize).wrapping_sub(rows[0] as usize);
    let low = _mm512_setr_ps(
        -16.0, -15.0, -14.0, -13.0, -12.0, -11.0, -10.0, -9.0, -8.0, -7.0, -6.0, -5.0, -4.0, -3.0,
        -2.0, -1.0,
    );
    let high = _mm512_setr_ps(
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
    );
    let m15 = _mm512_set1_epi32(15);
    let sixteen = _mm512_set1_epi32(16);
    let mut acc = [_mm512_setzero_ps(); 4];
    for b in 0..nb {
        prefetch(rows[3].wrapping_add(rb + FAR + b * 88));
        prefetch(rows[3].wrapping_add(rb + FAR + b * 88 + 64));
        let p = xp.add(b * PREP_FLOATS);
        let (xl, xh) = (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)));
        for r in 0..4 {
            let blk = rows[r].add(b * 22);
            let qh = (blk.add(2) as *const u32).read_unaligned();
            let v = _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(6) as *const __m128i));
            let vl = _mm512_and_si512(v, m15);
            let vh = _mm512_srli_epi32::<4>(v);
            let il = _mm512_mask_or_epi32(vl, qh as __mmask16, vl, sixteen);
            let ih = _mm512_mask_or_epi32(vh, (qh >> 16) as __mmask16, vh, sixteen);
            let lo = _mm512_permutex2var_ps(low, il, high);
            let hi = _mm512_permutex2var_ps(low, ih, high);
            let s = _mm512_fmadd_ps(hi, xh, _mm512_mul_ps(lo, xl));
            acc[r] = _mm512_fmadd_ps(bcast_f16(blk), s, acc[r]);
        }
    }
    acc.map(|a| _mm512_reduce_add_ps(a))
}

/// Q4_1, four rows: Σ_b d·Σ(q·x) + m·Σx_b, x in natural order and `sums` the per-block
/// pairs of [`super::avx2_rows::block_sums`]. Codes become floats through
/// [`nibble_floats`].
#[target_feature(enable = "avx512f,avx512bw,avx2,fma,f16c")]
pub unsafe fn dot4_q4_1(
    rows: [*const u8; 4],
    x: *const f32,
    sums: *const f32,
    nb: usize,
) -> [f32; 4] {
    use super::PREFETCH_FAR as FAR;
    let rb = (rows[1] as usize).wrapping_sub(rows[0] as usize);
    let table = _mm512_setr_ps(
        0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0,
    );
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut accm = [_mm_setzero_ps(); 4];
    for b in 0..nb {
        prefetch(rows[3].wrapping_add(rb + FAR + b * 80));
        prefetch(rows[3].wrapping_add(rb + FAR + b * 80 + 64));
        let xp = x.add(b * 32);
        let (xl, xh) = (_mm512_loadu_ps(xp), _mm512_loadu_ps(xp.add(16)));
        let sp = sum_pair(sums, b);
        for r in 0..4 {
            let blk = rows[r].add(b * 20);
            let dm = f16_pair(blk);
            let (lo, hi) = nibble_floats(blk.add(4), table);
            let s = _mm512_fmadd_ps(hi, xh, _mm512_mul_ps(lo, xl));
            acc[r] = _mm512_fmadd_ps(_mm512_broadcastss_ps(dm), s, acc[r]);
            accm[r] = _mm_fmadd_ps(dm, sp, accm[r]);
        }
    }
    let mut out = [0.0f32; 4];
    for r in 0..4 {
        let m = f32::from_bits(_mm_extract_ps::<1>(accm[r]) as u32);
        out[r] = _mm512_reduce_add_ps(acc[r]) + m;
    }
    out
}
