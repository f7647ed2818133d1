//! AVX2 + FMA + F16C multi-row dot kernels (x86-64): four encoded rows against one f32
//! vector, the executor's matrix-vector hot path for Q4_1 and Q5_1, and one Q8_0 row at a
//! time (Q4_0, Q5_0, Q4_K and Q6_K rows go through [`super::avx2_perm`]).
//!
//! What makes them faster than one row at a time ([`super::avx2`]):
//! - x is loaded once per block for two rows (four rows run as two passes over a pair:
//!   with four, the accumulators did not fit the sixteen vector registers);
//! - nibbles are widened straight from memory (`vpmovzxbd` of 8 bytes gives elements
//!   `j` and `j + 16` in one register: a mask and a shift split them, no byte shuffles);
//! - the minimum term of a block (`m·Σx`) uses the per-block sums Σx computed once per call
//!   ([`block_sums`]), folded with one 4-lane FMA on the f16 pair `[d, m]` as converted.
//!
//! Results differ from "decode, then dot" only by rounding (x stays f32, never
//! quantised). Every function is `unsafe` for two reasons only: it must run on a CPU with
//! AVX2, FMA and F16C (the caller checks [`super::cpu::has_avx2`]), and it reads the whole
//! blocks the caller has sized (each row pointer covers `nb` blocks, `x` covers `nb * 32`
//! values, `sums` covers `2 * nb` values).

#![allow(clippy::missing_safety_doc)]

use std::arch::x86_64::*;

use super::avx2::{hsum, prefetch};
use super::{PREFETCH_FAR as FAR, PREFETCH_ROW as PREFETCH_AHEAD};

/// Longest row, in 32-element blocks, the kernels with per-block sums take (the sums of
/// one call live on the caller's stack: `2 * MAX_BLOCKS` floats).
pub const MAX_BLOCKS: usize = 512;

/// `sums[2b] = sums[2b + 1] = Σ x[32b .. 32b + 32]` for `b < nb` (a pair, so one 8-byte
/// load lines it up against both halves of a converted `[d, m]` f16 pair).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn block_sums(x: *const f32, nb: usize, sums: *mut f32) {
    for b in 0..nb {
        let xp = x.add(b * 32);
        let s = _mm256_add_ps(
            _mm256_add_ps(_mm256_loadu_ps(xp), _mm256_loadu_ps(xp.add(8))),
            _mm256_add_ps(_mm256_loadu_ps(xp.add(16)), _mm256_loadu_ps(xp.add(24))),
        );
        let v = hsum(s);
        *sums.add(2 * b) = v;
        *sums.add(2 * b + 1) = v;
    }
}

/// The two f16 at `p` (`[d, m]`) as `[d, m, 0, 0]`.
#[inline(always)]
pub(super) unsafe fn f16_pair(p: *const u8) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()))
}

/// The f16 at `p` as `[d, 0, 0, 0]`.
#[inline(always)]
unsafe fn f16_one(p: *const u8) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const u16).read_unaligned() as i32))
}

/// The pair `[Σx_b, Σx_b]` as the low half of a vector.
#[inline(always)]
pub(super) unsafe fn sum_pair(sums: *const f32, b: usize) -> __m128 {
    _mm_castpd_ps(_mm_load_sd(sums.add(2 * b) as *const f64))
}

/// Eight bytes at `p` zero-extended to eight i32 lanes.
#[inline(always)]
unsafe fn widen_u8(p: *const u8) -> __m256i {
    _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i))
}

/// Eight bytes at `p` sign-extended to eight i32 lanes, as f32.
#[inline(always)]
unsafe fn widen_i8_ps(p: *const u8) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i)))
}

/// The 32 unsigned nibble codes of a split-half block (`qs`, 16 bytes) as four vectors
/// of elements 0..8, 8..16, 16..24, 24..32 (still i32).
#[inline(always)]
unsafe fn nibble_codes(qs: *const u8) -> [__m256i; 4] {
    let mask = _mm256_set1_epi32(0x0F);
    let v0 = widen_u8(qs);
    let v1 = widen_u8(qs.add(8));
    [
        _mm256_and_si256(v0, mask),
        _mm256_and_si256(v1, mask),
        _mm256_srli_epi32(v0, 4),
        _mm256_srli_epi32(v1, 4),
    ]
}

/// The 32 five-bit codes of a Q5 block: nibbles as [`nibble_codes`], bit `j` of `qh` as
/// bit 4 of element `j`.
#[inline(always)]
unsafe fn q5_codes(qs: *const u8, qh: u32) -> [__m256i; 4] {
    let n = nibble_codes(qs);
    let sixteen = _mm256_set1_epi32(16);
    let s_lo = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let s_hi = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
    // Bit j of each 16-bit half lands on bit 4 after a right shift by j.
    let h0 = _mm256_set1_epi32(((qh & 0xFFFF) << 4) as i32);
    let h1 = _mm256_set1_epi32(((qh >> 16) << 4) as i32);
    let bit = |h: __m256i, s: __m256i| _mm256_and_si256(_mm256_srlv_epi32(h, s), sixteen);
    [
        _mm256_or_si256(n[0], bit(h0, s_lo)),
        _mm256_or_si256(n[1], bit(h0, s_hi)),
        _mm256_or_si256(n[2], bit(h1, s_lo)),
        _mm256_or_si256(n[3], bit(h1, s_hi)),
    ]
}

/// Σ q·x over one block for codes `q` (i32) and the block's x in four vectors.
#[inline(always)]
unsafe fn codes_dot(q: [__m256i; 4], x: &[__m256; 4]) -> __m256 {
    let s = _mm256_mul_ps(_mm256_cvtepi32_ps(q[0]), x[0]);
    let s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[1]), x[1], s);
    let s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[2]), x[2], s);
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[3]), x[3], s)
}

#[inline(always)]
unsafe fn load_x(x: *const f32, b: usize) -> [__m256; 4] {
    let xp = x.add(b * 32);
    [
        _mm256_loadu_ps(xp),
        _mm256_loadu_ps(xp.add(8)),
        _mm256_loadu_ps(xp.add(16)),
        _mm256_loadu_ps(xp.add(24)),
    ]
}

/// Final sums: `hsum(acc[r]) + k · accm[r][lane]`.
#[inline(always)]
unsafe fn finish<const LANE: i32, const N: usize>(
    acc: [__m256; N],
    accm: [__m128; N],
    k: f32,
) -> [f32; N] {
    let mut out = [0.0f32; N];
    for r in 0..N {
        let m = f32::from_bits(_mm_extract_ps::<LANE>(accm[r]) as u32);
        out[r] = hsum(acc[r]) + k * m;
    }
    out
}

/// A block encoding of the form `d·q + m` (f16 pair `[d, m]` first): its block size and
/// how its 32 unsigned codes unpack.
trait MinEncoding {
    /// Bytes per 32-element block.
    const BLOCK_BYTES: usize;
    /// The block's 32 codes (elements 0..8, 8..16, 16..24, 24..32, as i32).
    unsafe fn codes(blk: *const u8) -> [__m256i; 4];
}

struct Q4_1;
impl MinEncoding for Q4_1 {
    const BLOCK_BYTES: usize = 20;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> [__m256i; 4] {
        nibble_codes(blk.add(4))
    }
}

struct Q5_1;
impl MinEncoding for Q5_1 {
    const BLOCK_BYTES: usize = 24;
    #[inline(always)]
    unsafe fn codes(blk: *const u8) -> [__m256i; 4] {
        q5_codes(blk.add(8), (blk.add(4) as *const u32).read_unaligned())
    }
}

/// Q4_1, four rows: Σ_b d·Σ(q·x) + m·Σx_b, as two passes over a pair of rows
/// ([`dot2_min`]): four rows' accumulators, x and the temporaries do not fit the sixteen
/// AVX2 registers, and a spilled accumulator puts a store-to-load wait on its chain.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_q4_1(
    rows: [*const u8; 4],
    x: *const f32,
    sums: *const f32,
    nb: usize,
) -> [f32; 4] {
    dot4_min::<Q4_1>(rows, x, sums, nb)
}

/// Q5_1, four rows: Σ_b d·Σ(q5·x) + m·Σx_b, as [`dot4_q4_1`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_q5_1(
    rows: [*const u8; 4],
    x: *const f32,
    sums: *const f32,
    nb: usize,
) -> [f32; 4] {
    dot4_min::<Q5_1>(rows, x, sums, nb)
}

/// Four rows of `E` as two passes over a pair ([`dot2_min`]).
#[inline(always)]
unsafe fn dot4_min<E: MinEncoding>(
    rows: [*const u8; 4],
    x: *const f32,
    sums: *const f32,
    nb: usize,
) -> [f32; 4] {
    let rb = (rows[1] as usize).wrapping_sub(rows[0] as usize);
    // Each pass streams its two rows' counterparts in the next group of four.
    let [a, b] = dot2_min::<E>([rows[0], rows[1]], 3 * rb, x, sums, nb);
    let [c, d] = dot2_min::<E>([rows[2], rows[3]], 3 * rb, x, sums, nb);
    [a, b, c, d]
}

/// Two rows of `E`: Σ_b d·Σ(q·x) + m·Σx_b; streams the bytes from `ahead` + [`FAR`] past
/// the second row at the pace of the pair.
#[inline(always)]
unsafe fn dot2_min<E: MinEncoding>(
    rows: [*const u8; 2],
    ahead: usize,
    x: *const f32,
    sums: *const f32,
    nb: usize,
) -> [f32; 2] {
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut accm = [_mm_setzero_ps(); 2];
    for b in 0..nb {
        prefetch(rows[1].wrapping_add(ahead + FAR + b * 2 * E::BLOCK_BYTES));
        let xv = load_x(x, b);
        let sp = sum_pair(sums, b);
        for r in 0..2 {
            let blk = rows[r].add(b * E::BLOCK_BYTES);
            let dm = f16_pair(blk);
            let s = codes_dot(E::codes(blk), &xv);
            acc[r] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dm), s, acc[r]);
            accm[r] = _mm_fmadd_ps(dm, sp, accm[r]);
        }
    }
    finish::<1, 2>(acc, accm, 1.0)
}

/// Q8_0, one row: Σ_b d·Σ(q·x), two blocks per step on independent accumulators.
///
/// One row at a time on purpose: Q8_0 is the embedding/head of most downloads, a matrix
/// that streams from RAM, and a single sequential stream (prefetched a few lines ahead)
/// measured faster than four interleaved ones.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot1_q8_0(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let mut acc = [_mm256_setzero_ps(); 2];
    let block = |b: usize| -> __m256 {
        let xv = load_x(x, b);
        let blk = row.add(b * 34);
        let q = blk.add(2);
        let s = _mm256_mul_ps(widen_i8_ps(q), xv[0]);
        let s = _mm256_fmadd_ps(widen_i8_ps(q.add(8)), xv[1], s);
        let s = _mm256_fmadd_ps(widen_i8_ps(q.add(16)), xv[2], s);
        let s = _mm256_fmadd_ps(widen_i8_ps(q.add(24)), xv[3], s);
        _mm256_mul_ps(_mm256_broadcastss_ps(f16_one(blk)), s)
    };
    let mut b = 0;
    while b + 2 <= nb {
        prefetch(row.wrapping_add(b * 34 + PREFETCH_AHEAD));
        acc[0] = _mm256_add_ps(acc[0], block(b));
        acc[1] = _mm256_add_ps(acc[1], block(b + 1));
        b += 2;
    }
    if b < nb {
        acc[0] = _mm256_add_ps(acc[0], block(b));
    }
    hsum(_mm256_add_ps(acc[0], acc[1]))
}
