//! Scalar block decoders: the reference semantics of every encoding.
//!
//! Each function decodes one block (or, for scalar types, a run of elements) with exactly the
//! f32 arithmetic of gguf-py's `gguf.quants.dequantize`, operation by operation (Rust never
//! contracts `a * b + c` into a fused multiply-add), so results are bit-identical to it. The
//! SIMD decoders must agree with these bit for bit; the fused dot kernels agree with
//! "decode, then dot" to rounding.

/// Elements in a K-quant super-block.
pub const QK_K: usize = 256;
/// Elements in a 32-element block.
pub const QK: usize = 32;

/// MXFP4 code points (E2M1 values doubled), indexed by nibble.
pub const MXFP4_KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

#[inline(always)]
pub fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

#[inline(always)]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// ggml's `e8m0_to_fp32_half`: the halved MXFP4 block scale.
#[inline(always)]
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

pub fn decode_f32(src: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(src.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

pub fn decode_f16(src: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
        *o = half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
    }
}

pub fn decode_bf16(src: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
        *o = bf16_to_f32(u16::from_le_bytes([c[0], c[1]]));
    }
}

/// Q4_0, 18 bytes → 32 values: `d * (q - 8)`.
pub fn decode_q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        y[j] = d * ((qs[j] & 0x0F) as i32 - 8) as f32;
        y[j + 16] = d * ((qs[j] >> 4) as i32 - 8) as f32;
    }
}

/// Q4_1, 20 bytes → 32 values: `d * q + m`.
pub fn decode_q4_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        y[j] = d * (qs[j] & 0x0F) as f32 + m;
        y[j + 16] = d * (qs[j] >> 4) as f32 + m;
    }
}

/// Q5_0, 22 bytes → 32 values: `d * (q5 - 16)`.
pub fn decode_q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) as i32;
        let h1 = ((qh >> (j + 16)) & 1) as i32;
        y[j] = d * (((qs[j] & 0x0F) as i32 | (h0 << 4)) - 16) as f32;
        y[j + 16] = d * (((qs[j] >> 4) as i32 | (h1 << 4)) - 16) as f32;
    }
}

/// Q5_1, 24 bytes → 32 values: `d * q5 + m`.
pub fn decode_q5_1(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let h0 = (qh >> j) & 1;
        let h1 = (qh >> (j + 16)) & 1;
        y[j] = d * ((qs[j] & 0x0F) as u32 | (h0 << 4)) as f32 + m;
        y[j + 16] = d * ((qs[j] >> 4) as u32 | (h1 << 4)) as f32 + m;
    }
}

/// Q8_0, 34 bytes → 32 values: `q * d`.
pub fn decode_q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for j in 0..32 {
        y[j] = (b[2 + j] as i8) as f32 * d;
    }
}

/// MXFP4, 17 bytes → 32 values: `s * KV[nibble]`.
pub fn decode_mxfp4(b: &[u8], y: &mut [f32]) {
    let d = e8m0_half(b[0]);
    let qs = &b[1..17];
    for j in 0..16 {
        y[j] = d * MXFP4_KVALUES[(qs[j] & 0x0F) as usize] as f32;
        y[j + 16] = d * MXFP4_KVALUES[(qs[j] >> 4) as usize] as f32;
    }
}

/// The (scale, min) pair `j` (0..8) of a Q4_K/Q5_K 12-byte scale array.
#[inline(always)]
pub fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Q2_K, 84 bytes (`scales[16]`, `qs[64]`, `d`, `dmin`) → 256 values: per 16-value
/// sub-block `j`, `(d * (scales[j] & 15)) * q2 - dmin * (scales[j] >> 4)`; element
/// `128h + 32s + l` is bits `2s..2s + 2` of `qs[32h + l]`.
pub fn decode_q2_k(b: &[u8], y: &mut [f32]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let d = f16_at(b, 80);
    let dmin = f16_at(b, 82);
    for (e, v) in y.iter_mut().enumerate().take(QK_K) {
        let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
        let q = (qs[32 * h + l] >> (2 * s)) & 3;
        let sc = scales[e / 16];
        let (dl, ml) = (d * (sc & 0x0F) as f32, dmin * (sc >> 4) as f32);
        *v = dl * q as f32 - ml;
    }
}

/// Q3_K, 110 bytes (`hmask[32]`, `qs[64]`, `scales[12]`, `d`) → 256 values: per 16-value
/// sub-block `j`, `(d * (sc_j - 32)) * (q2 - 4·!hbit)`, the six-bit `sc_j` from a low nibble
/// of `scales[j % 8]` and two high bits of `scales[8 + j % 4]`; element `128h + 32s + l` is
/// bits `2s..2s + 2` of `qs[32h + l]` and its high bit is bit `e / 32` of `hmask[e % 32]`.
pub fn decode_q3_k(b: &[u8], y: &mut [f32]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let sc = &b[96..108];
    let d = f16_at(b, 108);
    let mut dl = [0.0f32; 16];
    for (j, v) in dl.iter_mut().enumerate() {
        let lo = (sc[j % 8] >> (4 * (j / 8))) & 0x0F;
        let hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 0x03;
        *v = d * ((lo | (hi << 4)) as i8 - 32) as f32;
    }
    for (e, v) in y.iter_mut().enumerate().take(QK_K) {
        let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
        let q = ((qs[32 * h + l] >> (2 * s)) & 3) as i8;
        let high = (hmask[e % 32] >> (e / 32)) & 1;
        *v = dl[e / 16] * (q - if high == 0 { 4 } else { 0 }) as f32;
    }
}

/// Q4_K, 144 bytes → 256 values: `(d * sc) * q - (dmin * mn)` per 32-value sub-block.
pub fn decode_q4_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qs = &b[16..144];
    for c in 0..4 {
        let q = &qs[32 * c..32 * c + 32];
        let (sc0, m0) = scale_min_k4(2 * c, scales);
        let (sc1, m1) = scale_min_k4(2 * c + 1, scales);
        let (d0, dm0) = (d * sc0 as f32, dmin * m0 as f32);
        let (d1, dm1) = (d * sc1 as f32, dmin * m1 as f32);
        for l in 0..32 {
            y[64 * c + l] = d0 * (q[l] & 0x0F) as f32 - dm0;
            y[64 * c + 32 + l] = d1 * (q[l] >> 4) as f32 - dm1;
        }
    }
}

/// Q5_K, 176 bytes → 256 values: `(d * sc) * q5 - (dmin * mn)` per 32-value sub-block, the
/// fifth bit of element `l` of sub-block pair `c` in bit `2c` (low half) or `2c + 1` (high
/// half) of `qh[l]`.
pub fn decode_q5_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let dmin = f16_at(b, 2);
    let scales = &b[4..16];
    let qh = &b[16..48];
    let qs = &b[48..176];
    for c in 0..4 {
        let q = &qs[32 * c..32 * c + 32];
        let (sc0, m0) = scale_min_k4(2 * c, scales);
        let (sc1, m1) = scale_min_k4(2 * c + 1, scales);
        let (d0, dm0) = (d * sc0 as f32, dmin * m0 as f32);
        let (d1, dm1) = (d * sc1 as f32, dmin * m1 as f32);
        let (u0, u1) = (1u8 << (2 * c), 2u8 << (2 * c));
        for l in 0..32 {
            let h0 = if qh[l] & u0 != 0 { 16 } else { 0 };
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            y[64 * c + l] = d0 * ((q[l] & 0x0F) + h0) as f32 - dm0;
            y[64 * c + 32 + l] = d1 * ((q[l] >> 4) + h1) as f32 - dm1;
        }
    }
}

/// Q6_K, 210 bytes → 256 values: `(d * scale) * (q6 - 32)` per 16-value sub-block.
pub fn decode_q6_k(b: &[u8], y: &mut [f32]) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let sc = &b[192..208];
    let d = f16_at(b, 208);
    for h in 0..2 {
        let ql = &ql[64 * h..64 * h + 64];
        let qh = &qh[32 * h..32 * h + 32];
        let base = 128 * h;
        for l in 0..32 {
            let q = [
                ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32,
                ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32,
                ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32,
                ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32,
            ];
            for (k, qk) in q.into_iter().enumerate() {
                let p = base + 32 * k + l;
                let s = sc[p / 16] as i8;
                y[p] = (d * s as f32) * qk as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e8m0_half_scale() {
        assert_eq!(e8m0_half(128), 1.0);
        assert_eq!(e8m0_half(127), 0.5);
        assert_eq!(e8m0_half(2), 2f32.powi(-126));
        assert_eq!(e8m0_half(1), 2f32.powi(-127)); // subnormal
        assert_eq!(e8m0_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_half(255), 2f32.powi(127)); // not special-cased, as in ggml
    }

    #[test]
    fn scale_min_uses_q_j_for_high_mins() {
        // Top bits of q[4..8] feed the mins of pairs 4..8 (ggml's `q[j] >> 6`).
        let mut q = [0u8; 12];
        q[4] = 0b1100_0000;
        q[8] = 0x21;
        assert_eq!(scale_min_k4(4, &q), (0x01, 0x02 | (3 << 4)));
        q[0] = 0b1000_0011;
        assert_eq!(scale_min_k4(0, &q), (3, 0));
        assert_eq!(scale_min_k4(4, &q).0, 0x01 | (2 << 4));
    }

    #[test]
    fn q4_1_is_d_times_q_plus_m() {
        let mut b = [0u8; 20];
        b[0..2].copy_from_slice(&half::f16::from_f32(0.5).to_bits().to_le_bytes());
        b[2..4].copy_from_slice(&half::f16::from_f32(-1.0).to_bits().to_le_bytes());
        b[4] = 0xF3;
        let mut y = [0.0f32; 32];
        decode_q4_1(&b, &mut y);
        assert_eq!((y[0], y[16], y[1]), (0.5, 6.5, -1.0));
    }
}
