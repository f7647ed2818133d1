//! NEON kernels (aarch64): fused dot products of one encoded row with an f32 vector for
//! the encodings of the common downloads' big matrices — Q4_0, Q4_1, Q8_0 (32-element
//! blocks) — the same arithmetic as the AVX2 kernels in 4-lane vectors; the other
//! encodings take the scalar path on aarch64 for now.
//!
//! NEON is part of every aarch64 CPU, so these need no run-time detection; `LQL_CODEC_SCALAR=1`
//! still forces the portable path ([`super::cpu`]). Every function is `unsafe` only because
//! it reads the whole blocks the caller has sized (`row` covers `nb` blocks, `x` covers
//! `nb * 32` values). Results differ from "decode, then dot" only by rounding (FMA and
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

/// Q4_1: Σ_blocks d·Σ(q·x) + m·Σx.
pub unsafe fn dot_q4_1(row: *const u8, x: *const f32, nb: usize) -> f32 {
    let mask = vdupq_n_u8(0x0F);
    let mut acc = vdupq_n_f32(0.0);
    let mut accm = vdupq_n_f32(0.0);
    for b in 0..nb {
        let blk = row.add(b * 20);
        let xp = x.add(b * 32);
        let qs = vld1q_u8(blk.add(4));
        let s = dot16_u8(vandq_u8(qs, mask), xp, vdupq_n_f32(0.0));
        let s = dot16_u8(vshrq_n_u8::<4>(qs), xp.add(16), s);
        acc = vfmaq_n_f32(acc, s, f16_at(blk));
        accm = vfmaq_n_f32(accm, sum32(xp), f16_at(blk.add(2)));
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
        let lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(qs, mask)), eight);
        let hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(qs)), eight);
        let s = dot16_i8(lo, xp, vdupq_n_f32(0.0));
        let s = dot16_i8(hi, xp.add(16), s);
        acc = vfmaq_n_f32(acc, s, f16_at(blk));
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
