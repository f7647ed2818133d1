//! AVX2 + FMA + F16C four-row dot kernels for Q4_0, Q5_0, Q4_K, Q5_K and Q6_K that read x in a
//! layout prepared once per call ([`prepare_x`], [`prepare_x_natural`], [`prepare_x_k`]),
//! so the offset or minimum terms cost nothing per element and, where it measured faster
//! (Q5_0, Q4_K, Q6_K), a block's codes are widened by in-register byte shuffles.
//!
//! The shuffled layout, per 32-element block `b` (40 floats):
//! - floats 0..32: the block's x reordered so that chunk `k` (8 floats) is
//!   `x[4k..4k + 4] ++ x[16 + 4k..16 + 4k + 4]`: the order in which one in-lane `vpshufb`
//!   turns a 32-byte code vector (elements 0..16 in the low 128-bit lane, 16..32 in the high
//!   one: exactly the low and high nibbles of a split-half block, or 32 consecutive K-quant
//!   codes) into eight i32 lanes;
//! - floats 32..40: `k · (x0 + x1 + x2 + x3)` lane by lane (`k` = −8 for Q4_0, −16 for Q5_0),
//!   whose horizontal sum is `k · Σx_b`: the dot starts from it (the first FMA's addend), so
//!   `d · (Σ q·x + k·Σx)` = `d · Σ (q + k)·x` needs no per-row offset work.
//!
//! The natural layout (Q4_0) keeps x in order with the same offset vector. The K-quant
//! layout ([`PREP_K_FLOATS`]) reorders each 32-element run and appends the 16-element group
//! sums (Q6_K's `−32·d·sc·Σx` terms) and 32-element sub-block sums (Q4_K's minimums).
//!
//! Q5_0's fifth bits are spread to bytes with one broadcast, a shuffle, an AND and a compare
//! instead of a variable shift per element.
//!
//! The Q5_0, Q4_K, Q5_K and Q6_K kernels take their four rows as two passes over a pair: four
//! rows' accumulators, x and the constants do not fit AVX2's sixteen vector registers, and
//! the compiler spilled accumulators to the stack, a store-to-load wait on every
//! loop-carried chain (docs/performance.md: +15 % on each kernel's cache-resident rate).
//!
//! Results differ from "decode, then dot" only by rounding (x stays f32, never quantised).
//! Every function is `unsafe` for two reasons only: it must run on a CPU with AVX2, FMA and
//! F16C (the caller checks [`super::cpu::has_avx2`]), and it reads the whole blocks the caller
//! has sized (each row pointer covers `nb` blocks, `x` covers `nb` blocks of values, the
//! prepared vector `nb` blocks of its layout).

#![allow(clippy::missing_safety_doc)]

use std::arch::x86_64::*;

use super::avx2::{bcast_f16, hsum, prefetch};
use super::PREFETCH_FAR as FAR;

/// Floats of the prepared layout per 32-element block.
pub const PREP_FLOATS: usize = 40;

/// Writes the natural-order prepared layout of `x` (`nb` blocks) to `out`
/// (`nb * PREP_FLOATS` floats): the block's 32 values as they are, then the offset vector
/// scaled by `k` (Q4_0's kernel widens its nibbles from memory in natural order).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn prepare_x_natural(x: *const f32, nb: usize, k: f32, out: *mut f32) {
    let kv = _mm256_set1_ps(k);
    for b in 0..nb {
        let o = out.add(b * PREP_FLOATS);
        let v = load_block(x.add(b * 32));
        for (k, vk) in v.iter().enumerate() {
            _mm256_storeu_ps(o.add(8 * k), *vk);
        }
        store_offset(o, kv, &v);
    }
}

/// Writes the shuffled prepared layout of `x` (`nb` blocks) to `out`
/// (`nb * PREP_FLOATS` floats), the offset term scaled by `k`.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn prepare_x(x: *const f32, nb: usize, k: f32, out: *mut f32) {
    let kv = _mm256_set1_ps(k);
    for b in 0..nb {
        let o = out.add(b * PREP_FLOATS);
        let v = load_block(x.add(b * 32));
        // Chunk k: x[4k..4k+4] (from v[k/2], half k%2) ++ x[16+4k..] (from v[2 + k/2]).
        for k in 0..4 {
            let (lo, hi) = (v[k / 2], v[2 + k / 2]);
            let c = if k % 2 == 0 {
                _mm256_permute2f128_ps::<0x20>(lo, hi)
            } else {
                _mm256_permute2f128_ps::<0x31>(lo, hi)
            };
            _mm256_storeu_ps(o.add(8 * k), c);
        }
        store_offset(o, kv, &v);
    }
}

/// The 32 values of one block of x at `xp`, as four vectors.
#[inline(always)]
unsafe fn load_block(xp: *const f32) -> [__m256; 4] {
    [
        _mm256_loadu_ps(xp),
        _mm256_loadu_ps(xp.add(8)),
        _mm256_loadu_ps(xp.add(16)),
        _mm256_loadu_ps(xp.add(24)),
    ]
}

/// The offset vector of a prepared block: `k · Σ` of the block's values per lane, written
/// after its 32 values.
#[inline(always)]
unsafe fn store_offset(o: *mut f32, kv: __m256, v: &[__m256; 4]) {
    let s = _mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3]));
    _mm256_storeu_ps(o.add(32), _mm256_mul_ps(kv, s));
}

/// The `vpshufb` control that widens bytes `4k..4k + 4` of each 128-bit lane to i32 lanes.
#[inline(always)]
unsafe fn widen_ctl(k: i32) -> __m256i {
    let z = 0x8080_8000u32 as i32;
    let c = |i: i32| z | (4 * k + i);
    _mm256_setr_epi32(c(0), c(1), c(2), c(3), c(0), c(1), c(2), c(3))
}

/// The 16 split-half nibble bytes at `qs` as 32 codes: low nibbles (elements 0..16) in the
/// low lane, high nibbles (16..32) in the high lane.
#[inline(always)]
unsafe fn nibble_bytes(qs: *const u8, shift: __m256i, m4: __m256i) -> __m256i {
    let v = _mm256_broadcastsi128_si256(_mm_loadu_si128(qs as *const __m128i));
    _mm256_and_si256(_mm256_srlv_epi64(v, shift), m4)
}

/// `off + Σ codes·x` for one block in eight lanes (`xb` the block's prepared layout).
#[inline(always)]
unsafe fn codes_dot(codes: __m256i, ctl: &[__m256i; 4], xv: &[__m256; 4], off: __m256) -> __m256 {
    let q = |k: usize| _mm256_cvtepi32_ps(_mm256_shuffle_epi8(codes, ctl[k]));
    // Two short chains instead of one of four: the FMA latency, not the ports, bounds a
    // block.
    let a = _mm256_fmadd_ps(q(0), xv[0], off);
    let c = _mm256_mul_ps(q(1), xv[1]);
    let a = _mm256_fmadd_ps(q(2), xv[2], a);
    let c = _mm256_fmadd_ps(q(3), xv[3], c);
    _mm256_add_ps(a, c)
}

#[inline(always)]
unsafe fn load_prep(xp: *const f32, b: usize) -> ([__m256; 4], __m256) {
    let p = xp.add(b * PREP_FLOATS);
    (
        [
            _mm256_loadu_ps(p),
            _mm256_loadu_ps(p.add(8)),
            _mm256_loadu_ps(p.add(16)),
            _mm256_loadu_ps(p.add(24)),
        ],
        _mm256_loadu_ps(p.add(32)),
    )
}

/// Q4_0, four rows: Σ_b d·(Σ q·x − 8·Σx_b), x prepared by [`prepare_x_natural`] with
/// `k = −8`. Measured faster than shuffle widening here (`vpmovzxbd` from memory costs
/// no shuffle-port work for the byte → lane step).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_q4_0(rows: [*const u8; 4], xp: *const f32, nb: usize) -> [f32; 4] {
    let rb = (rows[1] as usize).wrapping_sub(rows[0] as usize);
    let m4 = _mm256_set1_epi32(0x0F);
    let mut acc = [_mm256_setzero_ps(); 4];
    for b in 0..nb {
        // The group is one run of 4 rows; fetch bytes FAR past the next group at its pace.
        prefetch(rows[3].wrapping_add(rb + FAR + b * 72));
        prefetch(rows[3].wrapping_add(rb + FAR + b * 72 + 64));
        let (xv, off) = load_prep(xp, b);
        for r in 0..4 {
            let blk = rows[r].add(b * 18);
            // Bytes 0..8 widened hold elements 0..8 (low nibbles) and 16..24 (high
            // nibbles), bytes 8..16 elements 8..16 and 24..32: a mask and a shift split them.
            let v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(blk.add(2) as *const __m128i));
            let v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(blk.add(10) as *const __m128i));
            let q = |v: __m256i| _mm256_cvtepi32_ps(v);
            let a = _mm256_fmadd_ps(q(_mm256_and_si256(v0, m4)), xv[0], off);
            let c = _mm256_mul_ps(q(_mm256_and_si256(v1, m4)), xv[1]);
            let a = _mm256_fmadd_ps(q(_mm256_srli_epi32(v0, 4)), xv[2], a);
            let c = _mm256_fmadd_ps(q(_mm256_srli_epi32(v1, 4)), xv[3], c);
            acc[r] = _mm256_fmadd_ps(bcast_f16(blk), _mm256_add_ps(a, c), acc[r]);
        }
    }
    [hsum(acc[0]), hsum(acc[1]), hsum(acc[2]), hsum(acc[3])]
}

/// Q5_0, four rows: Σ_b d·(Σ q5·x − 16·Σx_b), x prepared with `k = −16`.
///
/// Runs as two passes over a pair of rows ([`dot2_q5_0`]): with four rows at once the
/// sixteen AVX2 registers cannot hold the accumulators, x and the constants, and the
/// accumulators went through the stack (a store-to-load wait on every block's chain).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_q5_0(rows: [*const u8; 4], xp: *const f32, nb: usize) -> [f32; 4] {
    let rb = (rows[1] as usize).wrapping_sub(rows[0] as usize);
    // Each pass streams its two rows' counterparts in the next group of four.
    let [a, b] = dot2_q5_0([rows[0], rows[1]], 3 * rb, xp, nb);
    let [c, d] = dot2_q5_0([rows[2], rows[3]], 3 * rb, xp, nb);
    [a, b, c, d]
}

/// The constants of [`q5_codes`].
struct Q5Consts {
    shift: __m256i,
    m4: __m256i,
    spread: __m256i,
    bit: __m256i,
    sixteen: __m256i,
}

impl Q5Consts {
    #[inline(always)]
    unsafe fn new() -> Q5Consts {
        Q5Consts {
            shift: _mm256_setr_epi64x(0, 0, 4, 4),
            m4: _mm256_set1_epi8(0x0F),
            spread: _mm256_setr_epi64x(
                0,
                0x0101_0101_0101_0101,
                0x0202_0202_0202_0202,
                0x0303_0303_0303_0303,
            ),
            bit: _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64),
            sixteen: _mm256_set1_epi8(16),
        }
    }
}

/// The 32 five-bit codes of the Q5_0 block at `blk` (split-half order, as
/// [`nibble_bytes`]). Bit j of qh is found by spreading qh's byte j / 8 to byte j and
/// testing it against `1 << (j % 8)`.
#[inline(always)]
unsafe fn q5_codes(blk: *const u8, k: &Q5Consts) -> __m256i {
    let qh = _mm256_set1_epi32((blk.add(2) as *const i32).read_unaligned());
    let clear = _mm256_cmpeq_epi8(
        _mm256_and_si256(_mm256_shuffle_epi8(qh, k.spread), k.bit),
        _mm256_setzero_si256(),
    );
    _mm256_or_si256(
        nibble_bytes(blk.add(6), k.shift, k.m4),
        _mm256_andnot_si256(clear, k.sixteen),
    )
}

/// Q5_0, two rows (see [`dot4_q5_0`]); streams the bytes from `ahead` + [`FAR`] past the
/// second row at the pace of the pair.
/// Software-pipelined: the codes of block b + 1 are built (integer work, a long dependent
/// chain from the loads) before block b's float work is issued.
#[inline(always)]
unsafe fn dot2_q5_0(rows: [*const u8; 2], ahead: usize, xp: *const f32, nb: usize) -> [f32; 2] {
    if nb == 0 {
        return [0.0; 2];
    }
    let ctl = [widen_ctl(0), widen_ctl(1), widen_ctl(2), widen_ctl(3)];
    let k = Q5Consts::new();
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut codes = [q5_codes(rows[0], &k), q5_codes(rows[1], &k)];
    for b in 0..nb {
        prefetch(rows[1].wrapping_add(ahead + FAR + b * 44));
        let next = (b + 1).min(nb - 1) * 22;
        let following = [
            q5_codes(rows[0].add(next), &k),
            q5_codes(rows[1].add(next), &k),
        ];
        let (xv, off) = load_prep(xp, b);
        for r in 0..2 {
            let s = codes_dot(codes[r], &ctl, &xv, off);
            acc[r] = _mm256_fmadd_ps(bcast_f16(rows[r].add(b * 22)), s, acc[r]);
        }
        codes = following;
    }
    [hsum(acc[0]), hsum(acc[1])]
}

// ---------------------------------------------------------------- K-quants (256 elements)

/// Floats of the prepared layout per 256-element super-block: the 256 values (each
/// 32-element run reordered as in [`prepare_x`]), then the sixteen 16-element group sums
/// times −32 (Q6_K's offset per scale group; exact, a power of two), then the eight
/// 32-element sub-block sums (Q4_K's).
pub const PREP_K_FLOATS: usize = 256 + 16 + 8;

/// Writes the K-quant prepared layout of `x` (`nb` super-blocks of 256) to `out`
/// (`nb * PREP_K_FLOATS` floats).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn prepare_x_k(x: *const f32, nb: usize, out: *mut f32) {
    for b in 0..nb {
        let xb = x.add(b * 256);
        let o = out.add(b * PREP_K_FLOATS);
        for run in 0..8 {
            let xp = xb.add(32 * run);
            let v = [
                _mm256_loadu_ps(xp),
                _mm256_loadu_ps(xp.add(8)),
                _mm256_loadu_ps(xp.add(16)),
                _mm256_loadu_ps(xp.add(24)),
            ];
            let or = o.add(32 * run);
            _mm256_storeu_ps(or, _mm256_permute2f128_ps::<0x20>(v[0], v[2]));
            _mm256_storeu_ps(or.add(8), _mm256_permute2f128_ps::<0x31>(v[0], v[2]));
            _mm256_storeu_ps(or.add(16), _mm256_permute2f128_ps::<0x20>(v[1], v[3]));
            _mm256_storeu_ps(or.add(24), _mm256_permute2f128_ps::<0x31>(v[1], v[3]));
            let g0 = hsum(_mm256_add_ps(v[0], v[1]));
            let g1 = hsum(_mm256_add_ps(v[2], v[3]));
            *o.add(256 + 2 * run) = -32.0 * g0;
            *o.add(256 + 2 * run + 1) = -32.0 * g1;
            *o.add(272 + run) = g0 + g1;
        }
    }
}

/// `Σ codes·x` for one 32-element run in eight lanes (no offset).
#[inline(always)]
unsafe fn run_dot(codes: __m256i, ctl: &[__m256i; 4], xv: &[__m256; 4]) -> __m256 {
    let q = |k: usize| _mm256_cvtepi32_ps(_mm256_shuffle_epi8(codes, ctl[k]));
    let a = _mm256_mul_ps(q(0), xv[0]);
    let c = _mm256_mul_ps(q(1), xv[1]);
    let a = _mm256_fmadd_ps(q(2), xv[2], a);
    let c = _mm256_fmadd_ps(q(3), xv[3], c);
    _mm256_add_ps(a, c)
}

#[inline(always)]
unsafe fn load_run(p: *const f32) -> [__m256; 4] {
    [
        _mm256_loadu_ps(p),
        _mm256_loadu_ps(p.add(8)),
        _mm256_loadu_ps(p.add(16)),
        _mm256_loadu_ps(p.add(24)),
    ]
}

/// Q6_K, four rows: Σ_groups (d·sc)·Σ(q·x) − 32·Σ_groups (d·sc)·Σx_group, with q the
/// unsigned six-bit code; x prepared by [`prepare_x_k`] (its group sums carry the −32).
/// Runs as two passes over a pair of rows ([`dot2_q6_k`]): four rows' accumulators and
/// scales do not fit the sixteen AVX2 registers, and the spilled accumulators put a
/// store-to-load wait on every loop-carried chain.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_q6_k(rows: [*const u8; 4], xp: *const f32, nb: usize) -> [f32; 4] {
    let rb = (rows[1] as usize).wrapping_sub(rows[0] as usize);
    // Each row's block is fetched ahead in the row four on.
    let [a, b] = dot2_q6_k([rows[0], rows[1]], 4 * rb, xp, nb);
    let [c, d] = dot2_q6_k([rows[2], rows[3]], 4 * rb, xp, nb);
    [a, b, c, d]
}

/// Q6_K, two rows (see [`dot4_q6_k`]); prefetches `ahead` + [`FAR`] bytes past each row's
/// block.
///
/// A run of 32 codes spans two scale groups, which land in lanes 0..4 and 4..8 of its
/// eight-lane sum: one permute of the row's sixteen `d·sc` gives the run's scale vector.
/// The offset terms (`d·sc` times the group sums times −32) go into the same accumulator.
// The loop counters are byte offsets as well as indices.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn dot2_q6_k(rows: [*const u8; 2], ahead: usize, xp: *const f32, nb: usize) -> [f32; 2] {
    let ctl = [widen_ctl(0), widen_ctl(1), widen_ctl(2), widen_ctl(3)];
    let m4 = _mm256_set1_epi8(0x0F);
    let m30 = _mm256_set1_epi8(0x30);
    let pick = |k: i32| {
        let (a, b) = (2 * k, 2 * k + 1);
        _mm256_setr_epi32(a, a, a, a, b, b, b, b)
    };
    let idx = [pick(0), pick(1), pick(2), pick(3)];
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut ds = [[_mm256_setzero_ps(); 2]; 2];
    for b in 0..nb {
        let xb = xp.add(b * PREP_K_FLOATS);
        let gs = [_mm256_loadu_ps(xb.add(256)), _mm256_loadu_ps(xb.add(264))];
        for r in 0..2 {
            let blk = rows[r].add(b * 210);
            for line in 0..4 {
                prefetch(blk.wrapping_add(ahead + FAR + 64 * line));
            }
            let d = bcast_f16(blk.add(208));
            let sc = _mm_loadu_si128(blk.add(192) as *const __m128i);
            let s0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc));
            let s1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)));
            ds[r] = [_mm256_mul_ps(d, s0), _mm256_mul_ps(d, s1)];
            acc[r] = _mm256_fmadd_ps(ds[r][0], gs[0], acc[r]);
            acc[r] = _mm256_fmadd_ps(ds[r][1], gs[1], acc[r]);
        }
        for h in 0..2 {
            for k in 0..4 {
                let xv = load_run(xb.add(128 * h + 32 * k));
                for r in 0..2 {
                    let blk = rows[r].add(b * 210);
                    let ql = _mm256_loadu_si256(blk.add(64 * h + 32 * (k & 1)) as *const __m256i);
                    let qh = _mm256_loadu_si256(blk.add(128 + 32 * h) as *const __m256i);
                    let lo = if k < 2 {
                        _mm256_and_si256(ql, m4)
                    } else {
                        _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4)
                    };
                    // Bits 2k, 2k + 1 of qh to bits 4, 5.
                    let hi = match k {
                        0 => _mm256_slli_epi16(qh, 4),
                        1 => _mm256_slli_epi16(qh, 2),
                        2 => qh,
                        _ => _mm256_srli_epi16(qh, 2),
                    };
                    let codes = _mm256_or_si256(lo, _mm256_and_si256(hi, m30));
                    let s = run_dot(codes, &ctl, &xv);
                    let scale = _mm256_permutevar8x32_ps(ds[r][h], idx[k]);
                    acc[r] = _mm256_fmadd_ps(scale, s, acc[r]);
                }
            }
        }
    }
    [hsum(acc[0]), hsum(acc[1])]
}

/// The eight 6-bit scales and eight 6-bit mins of a Q4_K/Q5_K 12-byte scale array, as f32
/// vectors (ggml's word-mask unpacking: the same values as [`super::block::scale_min_k4`]).
#[inline(always)]
unsafe fn k4_scales(q: *const u8) -> (__m256, __m256) {
    const LOW6: u32 = 0x3f3f_3f3f;
    const LOW4: u32 = 0x0f0f_0f0f;
    const LOW2: u32 = 0x0303_0303;
    let w = [
        (q as *const u32).read_unaligned(),
        (q.add(4) as *const u32).read_unaligned(),
        (q.add(8) as *const u32).read_unaligned(),
    ];
    let scales = [w[0] & LOW6, (w[2] & LOW4) | (((w[0] >> 6) & LOW2) << 4)];
    let mins = [
        w[1] & LOW6,
        ((w[2] >> 4) & LOW4) | (((w[1] >> 6) & LOW2) << 4),
    ];
    let widen = |v: [u32; 2]| {
        let b = _mm_set_epi32(0, 0, v[1] as i32, v[0] as i32);
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b))
    };
    (widen(scales), widen(mins))
}

/// Q4_K, four rows: Σ_sub-blocks (d·sc)·Σ(q·x) − (dmin·mn)·Σx; x prepared by
/// [`prepare_x_k`] (its sub-block sums give the minimum terms). Two passes over a pair of
/// rows ([`dot2_k`]), for the reason given at [`dot4_q6_k`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_q4_k(rows: [*const u8; 4], xp: *const f32, nb: usize) -> [f32; 4] {
    dot4_k::<false>(rows, xp, nb)
}

/// Q5_K, four rows: as [`dot4_q4_k`] with each code's fifth bit from the super-block's 32
/// `qh` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot4_q5_k(rows: [*const u8; 4], xp: *const f32, nb: usize) -> [f32; 4] {
    dot4_k::<true>(rows, xp, nb)
}

/// [`dot4_q4_k`] / [`dot4_q5_k`]: two passes over a pair of rows, each row's block fetched
/// ahead in the row four on.
#[inline(always)]
unsafe fn dot4_k<const Q5: bool>(rows: [*const u8; 4], xp: *const f32, nb: usize) -> [f32; 4] {
    let rb = (rows[1] as usize).wrapping_sub(rows[0] as usize);
    let [a, b] = dot2_k::<Q5>([rows[0], rows[1]], 4 * rb, xp, nb);
    let [c, d] = dot2_k::<Q5>([rows[2], rows[3]], 4 * rb, xp, nb);
    [a, b, c, d]
}

/// Q4_K (`Q5` false) or Q5_K (`Q5` true), two rows (see [`dot4_q4_k`]); prefetches
/// `ahead` plus [`FAR`] bytes past each row's block.
///
/// One 32-byte load holds a sub-block pair: low nibbles the first 32 codes, high nibbles
/// the next 32, each already in the shuffle-widening order; Q5_K's fifth bit of element
/// `l` of sub-block `j` is bit `j` of `qh[l]`, in the same byte order. The minimum terms go
/// into the same accumulator (subtracted).
#[inline(always)]
unsafe fn dot2_k<const Q5: bool>(
    rows: [*const u8; 2],
    ahead: usize,
    xp: *const f32,
    nb: usize,
) -> [f32; 2] {
    let (block, qs) = if Q5 { (176, 48) } else { (144, 16) };
    let ctl = [widen_ctl(0), widen_ctl(1), widen_ctl(2), widen_ctl(3)];
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut dsc = [[0.0f32; 8]; 2];
    for b in 0..nb {
        let xb = xp.add(b * PREP_K_FLOATS);
        let sv = _mm256_loadu_ps(xb.add(272));
        for r in 0..2 {
            let blk = rows[r].add(b * block);
            for line in (0..block).step_by(64) {
                prefetch(blk.wrapping_add(ahead + FAR + line));
            }
            let dm = _mm_cvtph_ps(_mm_cvtsi32_si128((blk as *const i32).read_unaligned()));
            let d = _mm256_broadcastss_ps(dm);
            let dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
            let (sc, mn) = k4_scales(blk.add(4));
            acc[r] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, mn), sv, acc[r]);
            _mm256_storeu_ps(dsc[r].as_mut_ptr(), _mm256_mul_ps(d, sc));
        }
        for c in 0..4 {
            for half in 0..2 {
                let xv = load_run(xb.add(64 * c + 32 * half));
                for r in 0..2 {
                    let blk = rows[r].add(b * block);
                    let q = _mm256_loadu_si256(blk.add(qs + 32 * c) as *const __m256i);
                    let mut codes = if half == 0 {
                        _mm256_and_si256(q, m4)
                    } else {
                        _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)
                    };
                    if Q5 {
                        let qh = _mm256_loadu_si256(blk.add(16) as *const __m256i);
                        let bit = _mm256_set1_epi8((1u8 << (2 * c + half)) as i8);
                        let fifth = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
                        codes =
                            _mm256_or_si256(codes, _mm256_and_si256(fifth, _mm256_set1_epi8(16)));
                    }
                    let s = run_dot(codes, &ctl, &xv);
                    let scale = _mm256_set1_ps(dsc[r][2 * c + half]);
                    acc[r] = _mm256_fmadd_ps(scale, s, acc[r]);
                }
            }
        }
    }
    [hsum(acc[0]), hsum(acc[1])]
}
