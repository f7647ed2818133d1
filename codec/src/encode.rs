//! What the formats' encoders share (`crate::formats`: f32 values → encoded blocks, with
//! gguf-py's `gguf.quants.quantize` rounding).
//!
//! Every step is the same f32 operation in the same order as gguf-py (which itself mirrors
//! ggml's reference quantisers), so the bytes are identical to what `gguf.quants.quantize`
//! writes for finite input.

use super::block::QK;

#[inline]
pub(crate) fn inv(d: f32) -> f32 {
    if d == 0.0 {
        0.0
    } else {
        1.0 / d
    }
}

#[inline]
pub(crate) fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

/// Packs 32 4-bit codes split-half: code j in the low nibble, code j+16 in the high nibble.
#[inline]
pub(crate) fn pack_nibbles(q: &[u8; QK], out: &mut Vec<u8>) {
    for j in 0..16 {
        out.push(q[j] | (q[j + 16] << 4));
    }
}

#[cfg(test)]
mod tests {
    use crate::dtype::DType;

    #[test]
    fn q8_0_rounds_half_away_from_zero() {
        // amax 127 → d = 1: halves round away from zero, like C roundf.
        let mut v = [0.0f32; 32];
        v[0] = 127.0;
        v[1] = 2.5;
        v[2] = -2.5;
        v[3] = 0.49999997;
        let mut out = Vec::new();
        crate::encode_row(DType::Q8_0, &v, &mut out).unwrap();
        assert_eq!(out.len(), 34);
        assert_eq!(&out[2..6], &[127, 3, (-3i8) as u8, 0]);
    }

    #[test]
    fn zero_block_encodes_to_zero_scale() {
        let mut out = Vec::new();
        crate::encode_row(DType::Q4_1, &[0.0; 32], &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 0));
        out.clear();
        crate::encode_row(DType::Q4_0, &[0.0; 32], &mut out).unwrap();
        // d = 0 / -8 = -0.0, as in gguf-py.
        assert_eq!(&out[..2], &[0x00, 0x80]);
        assert!(out[2..].iter().all(|&b| b == 0x88));
    }

    #[test]
    fn bf16_rounds_to_nearest_even_and_keeps_nan() {
        let mut out = Vec::new();
        crate::encode_row(
            DType::BF16,
            &[
                f32::from_bits(0x3F80_8000),
                f32::from_bits(0x3F81_8000),
                f32::NAN,
            ],
            &mut out,
        )
        .unwrap();
        let h: Vec<u16> = out
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(h[0], 0x3F80);
        assert_eq!(h[1], 0x3F82);
        assert!(f32::from_bits((h[2] as u32) << 16).is_nan());
    }
}
