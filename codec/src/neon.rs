//! NEON kernels (aarch64): fused dot products of one encoded row with an f32 vector for
//! the encodings real downloads use — Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (32-element blocks),
//! Q4_K, Q5_K, Q6_K (256-element super-blocks: a Q4_K_M download's matrices) and F32, F16,
//! BF16 — the same arithmetic as the AVX2 kernels in 4-lane vectors; Q2_K, Q3_K and MXFP4
//! take the scalar path on aarch64.
//!
//! NEON is part of every aarch64 CPU, so these need no run-time detection; `LQL_CODEC_SCALAR=1`
//! still forces the portable path ([`super::cpu`]). Every function is `unsafe` only because
//! it reads the whole blocks the caller has sized (`row` covers `nb` blocks, `x` covers
//! `nb` blocks' values). Results differ from "decode, then dot" only by rounding (FMA and
//! accumulation order); decoding itself stays on the scalar reference (bit-exact).

#![allow(clippy::missing_safety_doc)]

use std::arch::aarch64::*;

#[inline(always)]
unsafe fn f16_at(p: *const u8) -> f32 {
    half::f16::from_bits((p as *const u16).read_unaligned()).to_f32()
}

/// Σ over 16 u8 codes (elements `e .. e + 16` of the block) times x at `xp`.
#[inline(always)]
unsafe fn dot16_u8(q: uint8x16_t, xp: *const f32, acc: float32x4_t) -> float32x4_t {
    let a = vmovl_u8(vget_low_u8(q));
    let b = vmovl_high_u8(q);
    let acc = vfmaq_f32(
        acc,
        vcvtq_f32_u32(vmovl_u16(vget_low_u16(a))),
        vld1q_f32(xp),
    );
    let acc = vfmaq_f32(acc, vcvtq_f32_u32(vmovl_high_u16(a)), vld1q_f32(xp.add(4)));
    let acc = vfmaq_f32(
        acc,
        vcvtq_f32_u32(vmovl_u16(vget_low_u16(b))),
        vld1q_f32(xp.add(8)),
    );
    vfmaq_f32(acc, vcvtq_f32_u32(vmovl_high_u16(b)), vld1q_f32(xp.add(12)))
}

/// Σ over 16 i8 codes times x at `xp`.
#[inline(always)]
unsafe fn dot16_i8(q: int8x16_t, xp: *const f32, acc: float32x4_t) -> float32x4_t {
    let a = vmovl_s8(vget_low_s8(q));
    let b = vmovl_high_s8(q);
    let acc = vfmaq_f32(
        acc,
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(a))),
        vld1q_f32(xp),
    );
    let acc = vfmaq_f32(acc, vcvtq_f32_s32(vmovl_high_s16(a)), vld1q_f32(xp.add(4)));
    let acc = vfmaq_f32(
        acc,
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(b))),
        vld1q_f32(xp.add(8)),
    );
    vfmaq_f32(acc, vcvtq_f32_s32(vmovl_high_s16(b)), vld1q_f32(xp.add(12)))
}

/// Σ of the 32 values at `xp`.
#[inline(always)]
unsafe fn sum32(xp: *const f32) -> float32x4_t {
    let mut s = vld1q_f32(xp);
    for k in 1..8 {
        s = vaddq_f32(s, vld1q_f32(xp.add(4 * k)));
    }
    s
}

/// `acc + d·Σ((q − k)·x)` over one 32-element block whose unsigned codes are `codes`
/// (elements 0..16, 16..32), x at `xp`.
#[inline(always)]
unsafe fn offset_block(
    codes: (uint8x16_t, uint8x16_t),
    k: int8x16_t,
    xp: *const f32,
    d: f32,
    acc: float32x4_t,
) -> float32x4_t {
    let lo = vsubq_s8(vreinterpretq_s8_u8(codes.0), k);
    let hi = vsubq_s8(vreinterpretq_s8_u8(codes.1), k);
    let s = dot16_i8(lo, xp, vdupq_n_f32(0.0));
    let s = dot16_i8(hi, xp.add(16), s);
    vfmaq_n_f32(acc, s, d)
}

/// `(acc + d·Σ(q·x), accm + m·Σx)` over one 32-element block of unsigned codes `codes`
/// (elements 0..16, 16..32), its f16 pair `[d, m]` at `dm`, x at `xp`.
#[inline(always)]
unsafe fn min_block(
    codes: (uint8x16_t, uint8x16_t),
    xp: *const f32,
    dm: *const u8,
    (acc, accm): (float32x4_t, float32x4_t),
) -> (float32x4_t, float32x4_t) {
    let s = dot16_u8(codes.0, xp, vdupq_n_f32(0.0));
    let s = dot16_u8(codes.1, xp.add(16), s);
    (
        vfmaq_n_f32(acc, s, f16_at(dm)),
        vfmaq_n_f32(accm, sum32(xp), f16_at(dm.add(2))),
    )
}

/// Q4_1: Σ_blocks d·Σ(q·x) + m·Σx.
pub unsafe fn dot_q4_1(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let mask = vdupq_n_u8(0x0F);
    let mut acc = vdupq_n_f32(0.0);
    let mut accm = vdupq_n_f32(0.0);
    for b in 0..nb {
        let blk = row.add(b * 20);
        let xp = x.add(b * 32);
        let qs = vld1q_u8(blk.add(4));
        let codes = (vandq_u8(qs, mask), vshrq_n_u8::<4>(qs));
        (acc, accm) = min_block(codes, xp, blk, (acc, accm));
    }
    vaddvq_f32(vaddq_f32(acc, accm))
}

/// Q4_0: Σ_blocks d·Σ((q−8)·x).
pub unsafe fn dot_q4_0(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let mask = vdupq_n_u8(0x0F);
    let eight = vdupq_n_s8(8);
    let mut acc = vdupq_n_f32(0.0);
    for b in 0..nb {
        let blk = row.add(b * 18);
        let xp = x.add(b * 32);
        let qs = vld1q_u8(blk.add(2));
        let codes = (vandq_u8(qs, mask), vshrq_n_u8::<4>(qs));
        acc = offset_block(codes, eight, xp, f16_at(blk), acc);
    }
    vaddvq_f32(acc)
}

/// Q8_0: Σ_blocks d·Σ(q·x).
pub unsafe fn dot_q8_0(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let mut acc = vdupq_n_f32(0.0);
    for b in 0..nb {
        let blk = row.add(b * 34);
        let xp = x.add(b * 32);
        let s = dot16_i8(vld1q_s8(blk.add(2) as *const i8), xp, vdupq_n_f32(0.0));
        let s = dot16_i8(vld1q_s8(blk.add(18) as *const i8), xp.add(16), s);
        acc = vfmaq_n_f32(acc, s, f16_at(blk));
    }
    vaddvq_f32(acc)
}

/// The fifth bits of a Q5 block's 16 elements `e .. e + 16` (bits `e .. e + 16` of `qh`,
/// `e` = 0 or 16) as 16 bytes of 0 or 16.
#[inline(always)]
unsafe fn fifth_bits(qh: u32, e: u32) -> uint8x16_t {
    const BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    let bytes = vcombine_u8(vdup_n_u8((qh >> e) as u8), vdup_n_u8((qh >> (e + 8)) as u8));
    vandq_u8(vtstq_u8(bytes, vld1q_u8(BIT.as_ptr())), vdupq_n_u8(16))
}

/// The 32 five-bit codes of a Q5 block (16 bytes of split-half nibbles at `qs`, the fifth
/// bits in `qh`): elements 0..16 and 16..32.
#[inline(always)]
unsafe fn q5_codes(qs: *const u8, qh: u32) -> (uint8x16_t, uint8x16_t) {
    let q = vld1q_u8(qs);
    (
        vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0F)), fifth_bits(qh, 0)),
        vorrq_u8(vshrq_n_u8::<4>(q), fifth_bits(qh, 16)),
    )
}

/// Q5_0: Σ_blocks d·Σ((q5−16)·x).
pub unsafe fn dot_q5_0(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let sixteen = vdupq_n_s8(16);
    let mut acc = vdupq_n_f32(0.0);
    for b in 0..nb {
        let blk = row.add(b * 22);
        let xp = x.add(b * 32);
        let codes = q5_codes(blk.add(6), (blk.add(2) as *const u32).read_unaligned());
        acc = offset_block(codes, sixteen, xp, f16_at(blk), acc);
    }
    vaddvq_f32(acc)
}

/// Q5_1: Σ_blocks d·Σ(q5·x) + m·Σx.
pub unsafe fn dot_q5_1(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let mut acc = vdupq_n_f32(0.0);
    let mut accm = vdupq_n_f32(0.0);
    for b in 0..nb {
        let blk = row.add(b * 24);
        let xp = x.add(b * 32);
        let codes = q5_codes(blk.add(8), (blk.add(4) as *const u32).read_unaligned());
        (acc, accm) = min_block(codes, xp, blk, (acc, accm));
    }
    vaddvq_f32(vaddq_f32(acc, accm))
}

/// One 64-element sub-block pair `c` of a Q4_K or Q5_K super-block: `lo` codes (elements
/// `64c .. 64c + 32`, two halves of 16) and `hi` codes (the next 32), x at `xb`, the
/// super-block's `d`, `dmin` and 12 packed scale bytes; adds `(d·sc)·Σ(q·x)` to `acc` and
/// `(dmin·mn)·Σx` to `accm`.
#[inline(always)]
unsafe fn k_pair(
    (lo, hi): ((uint8x16_t, uint8x16_t), (uint8x16_t, uint8x16_t)),
    xb: *const f32,
    c: usize,
    (d, dmin, scales): (f32, f32, &[u8]),
    (acc, accm): (float32x4_t, float32x4_t),
) -> (float32x4_t, float32x4_t) {
    let x0 = xb.add(64 * c);
    let x1 = x0.add(32);
    let s0 = dot16_u8(lo.0, x0, vdupq_n_f32(0.0));
    let s0 = dot16_u8(lo.1, x0.add(16), s0);
    let s1 = dot16_u8(hi.0, x1, vdupq_n_f32(0.0));
    let s1 = dot16_u8(hi.1, x1.add(16), s1);
    let (sc0, m0) = super::block::scale_min_k4(2 * c, scales);
    let (sc1, m1) = super::block::scale_min_k4(2 * c + 1, scales);
    let acc = vfmaq_n_f32(acc, s0, d * sc0 as f32);
    let acc = vfmaq_n_f32(acc, s1, d * sc1 as f32);
    let accm = vfmaq_n_f32(accm, sum32(x0), dmin * m0 as f32);
    let accm = vfmaq_n_f32(accm, sum32(x1), dmin * m1 as f32);
    (acc, accm)
}

/// Q4_K: Σ_sub-blocks (d·sc)·Σ(q·x) − (dmin·mn)·Σx over 32-element sub-blocks.
pub unsafe fn dot_q4_k(row: *const u8, x: *const f32, nb: usize) -> f32 {
    dot_k::<false>(row, x, nb)
}

/// Q5_K: as Q4_K with a fifth bit per element from the 32 `qh` bytes (bit `2c` for the low
/// sub-block of pair `c`, bit `2c + 1` for the high one).
pub unsafe fn dot_q5_k(row: *const u8, x: *const f32, nb: usize) -> f32 {
    dot_k::<true>(row, x, nb)
}

/// [`dot_q4_k`] (`Q5` false: 144-byte super-blocks, nibbles from byte 16) or [`dot_q5_k`]
/// (`Q5` true: 176 bytes, `qh` at 16, nibbles from byte 48).
#[inline(always)]
unsafe fn dot_k<const Q5: bool>(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let (block, qs) = if Q5 { (176, 48) } else { (144, 16) };
    let mask = vdupq_n_u8(0x0F);
    let sixteen = vdupq_n_u8(16);
    let mut sums = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
    for b in 0..nb {
        let blk = row.add(b * block);
        let head = (
            f16_at(blk),
            f16_at(blk.add(2)),
            std::slice::from_raw_parts(blk.add(4), 12),
        );
        // Q5_K's fifth bits, loaded once per super-block.
        let (qh0, qh1) = if Q5 {
            (vld1q_u8(blk.add(16)), vld1q_u8(blk.add(32)))
        } else {
            (vdupq_n_u8(0), vdupq_n_u8(0))
        };
        for c in 0..4 {
            let q = blk.add(qs + 32 * c);
            let (q0, q1) = (vld1q_u8(q), vld1q_u8(q.add(16)));
            let mut lo = (vandq_u8(q0, mask), vandq_u8(q1, mask));
            let mut hi = (vshrq_n_u8::<4>(q0), vshrq_n_u8::<4>(q1));
            if Q5 {
                let (u0, u1) = (vdupq_n_u8(1 << (2 * c)), vdupq_n_u8(2 << (2 * c)));
                let bit = |h: uint8x16_t, u: uint8x16_t| vandq_u8(vtstq_u8(h, u), sixteen);
                lo = (vorrq_u8(lo.0, bit(qh0, u0)), vorrq_u8(lo.1, bit(qh1, u0)));
                hi = (vorrq_u8(hi.0, bit(qh0, u1)), vorrq_u8(hi.1, bit(qh1, u1)));
            }
            sums = k_pair((lo, hi), x.add(b * 256), c, head, sums);
        }
    }
    vaddvq_f32(sums.0) - vaddvq_f32(sums.1)
}

/// Q6_K: Σ_groups (d·sc)·Σ((q6−32)·x) over 16-element scale groups.
pub unsafe fn dot_q6_k(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let mask = vdupq_n_u8(0x0F);
    let three = vdupq_n_u8(3);
    let thirty_two = vdupq_n_s8(32);
    let mut acc = vdupq_n_f32(0.0);
    for b in 0..nb {
        let blk = row.add(b * 210);
        let xb = x.add(b * 256);
        let d = f16_at(blk.add(208));
        let sc = blk.add(192) as *const i8;
        for h in 0..2 {
            for l0 in [0usize, 16] {
                let ql0 = vld1q_u8(blk.add(64 * h + l0));
                let ql1 = vld1q_u8(blk.add(64 * h + 32 + l0));
                let qh = vld1q_u8(blk.add(128 + 32 * h + l0));
                // Element 128h + 32k + l: a nibble of ql, bits 2k, 2k + 1 of qh on top.
                let codes = [
                    vorrq_u8(vandq_u8(ql0, mask), vshlq_n_u8::<4>(vandq_u8(qh, three))),
                    vorrq_u8(
                        vandq_u8(ql1, mask),
                        vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<2>(qh), three)),
                    ),
                    vorrq_u8(
                        vshrq_n_u8::<4>(ql0),
                        vshlq_n_u8::<4>(vandq_u8(vshrq_n_u8::<4>(qh), three)),
                    ),
                    vorrq_u8(vshrq_n_u8::<4>(ql1), vshlq_n_u8::<4>(vshrq_n_u8::<6>(qh))),
                ];
                for (k, q) in codes.into_iter().enumerate() {
                    let p = 128 * h + 32 * k + l0;
                    let q = vsubq_s8(vreinterpretq_s8_u8(q), thirty_two);
                    let s = dot16_i8(q, xb.add(p), vdupq_n_f32(0.0));
                    acc = vfmaq_n_f32(acc, s, d * *sc.add(p / 16) as f32);
                }
            }
        }
    }
    vaddvq_f32(acc)
}

/// Σ over `n` weights converted four at a time by `load` (at element offset `i`) times x:
/// four independent accumulators over 16 elements, then 4 at a time, then the scalar tail
/// through `one`.
#[inline(always)]
unsafe fn dot_wide(
    x: *const f32,
    n: usize,
    load: impl Fn(usize) -> float32x4_t,
    one: impl Fn(usize) -> f32,
) -> f32 {
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut i = 0;
    while i + 16 <= n {
        for (k, ak) in acc.iter_mut().enumerate() {
            *ak = vfmaq_f32(*ak, load(i + 4 * k), vld1q_f32(x.add(i + 4 * k)));
        }
        i += 16;
    }
    while i + 4 <= n {
        acc[0] = vfmaq_f32(acc[0], load(i), vld1q_f32(x.add(i)));
        i += 4;
    }
    let mut s = vaddvq_f32(vaddq_f32(
        vaddq_f32(acc[0], acc[1]),
        vaddq_f32(acc[2], acc[3]),
    ));
    while i < n {
        s += one(i) * *x.add(i);
        i += 1;
    }
    s
}

/// F32 rows (need not be 4-byte aligned): Σ a·x.
pub unsafe fn dot_f32(a: *const u8, x: *const f32, n: usize) -> f32 {
    let a = a as *const f32;
    dot_wide(x, n, |i| vld1q_f32(a.add(i)), |i| a.add(i).read_unaligned())
}

/// Four f16 values as f32 (`fcvtl`: base Advanced SIMD, exact for every f16 including
/// subnormals, infinities and NaNs).
#[inline(always)]
unsafe fn f16x4(p: *const u8) -> float32x4_t {
    let h = vld1_u16(p as *const u16);
    let out: float32x4_t;
    std::arch::asm!(
        "fcvtl {out:v}.4s, {h:v}.4h",
        out = lateout(vreg) out,
        h = in(vreg) h,
        options(pure, nomem, nostack, preserves_flags)
    );
    out
}

/// F16 rows: Σ a·x.
pub unsafe fn dot_f16(a: *const u8, x: *const f32, n: usize) -> f32 {
    dot_wide(x, n, |i| f16x4(a.add(2 * i)), |i| f16_at(a.add(2 * i)))
}

/// BF16 rows: Σ a·x (a bf16 is the high half of an f32).
pub unsafe fn dot_bf16(a: *const u8, x: *const f32, n: usize) -> f32 {
    let bf16 =
        |i: usize| vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(a.add(2 * i) as *const u16)));
    let one =
        |i: usize| f32::from_bits(((a.add(2 * i) as *const u16).read_unaligned() as u32) << 16);
    dot_wide(x, n, bf16, one)
}
