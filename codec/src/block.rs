//! What the scalar block decoders share (block sizes, half-float and scale helpers). The
//! decoders themselves are the formats' (`crate::formats`): each decodes one block (or, for
//! one-element encodings, a run) with exactly the f32 arithmetic of gguf-py's
//! `gguf.quants.dequantize`, operation by operation (Rust never contracts `a * b + c` into a
//! fused multiply-add), so results are bit-identical to it. The SIMD decoders must agree
//! with them bit for bit; the fused dot kernels agree with "decode, then dot" to rounding.

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
        crate::decode_row(crate::DType::Q4_1, &b, &mut y).unwrap();
        assert_eq!((y[0], y[16], y[1]), (0.5, 6.5, -1.0));
    }
}
