//! Encoders: f32 values → encoded blocks, with gguf-py's `gguf.quants.quantize` rounding.
//!
//! Every step is the same f32 operation in the same order as gguf-py (which itself mirrors
//! ggml's reference quantisers), so the bytes are identical to what `gguf.quants.quantize`
//! writes for finite input.

use super::block::QK;

/// F32 → little-endian bytes.
pub fn encode_f32(src: &[f32], out: &mut Vec<u8>) {
    out.reserve(src.len() * 4);
    for v in src {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// F32 → IEEE binary16, round to nearest even (numpy `astype(float16)`).
pub fn encode_f16(src: &[f32], out: &mut Vec<u8>) {
    out.reserve(src.len() * 2);
    for v in src {
        out.extend_from_slice(&half::f16::from_f32(*v).to_bits().to_le_bytes());
    }
}

/// F32 → bfloat16, round to nearest even; NaN stays a quiet NaN (gguf-py `BF16`).
pub fn encode_bf16(src: &[f32], out: &mut Vec<u8>) {
    out.reserve(src.len() * 2);
    for v in src {
        let mut n = v.to_bits() as u64;
        if (n & 0x7fff_ffff) > 0x7f80_0000 {
            n = (n & 0xffff_0000) | (64 << 16);
        }
        let r = ((n + (0x7fff + ((n >> 16) & 1))) >> 16) as u16;
        out.extend_from_slice(&r.to_le_bytes());
    }
}

#[inline]
fn inv(d: f32) -> f32 {
    if d == 0.0 {
        0.0
    } else {
        1.0 / d
    }
}

#[inline]
fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

/// Packs 32 4-bit codes split-half: code j in the low nibble, code j+16 in the high nibble.
#[inline]
fn pack_nibbles(q: &[u8; QK], out: &mut Vec<u8>) {
    for j in 0..16 {
        out.push(q[j] | (q[j + 16] << 4));
    }
}

/// Q8_0: `d = amax / 127`, `q = round_half_away(x / d)`.
pub fn encode_q8_0(src: &[f32], out: &mut Vec<u8>) {
    out.reserve(src.len() / QK * 34);
    for blk in src.chunks_exact(QK) {
        let amax = blk.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = inv(d);
        out.extend_from_slice(&f16_bytes(d));
        for v in blk {
            out.push(((v * id).round() as i8) as u8);
        }
    }
}

/// Q4_0: `d = max / -8` where max is the value of largest magnitude (first one on ties),
/// `q = min(15, trunc(x / d + 8.5))`.
pub fn encode_q4_0(src: &[f32], out: &mut Vec<u8>) {
    out.reserve(src.len() / QK * 18);
    for blk in src.chunks_exact(QK) {
        let mut max = 0.0f32;
        let mut amax = -1.0f32;
        for &v in blk {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = inv(d);
        out.extend_from_slice(&f16_bytes(d));
        let mut q = [0u8; QK];
        for (qj, v) in q.iter_mut().zip(blk) {
            *qj = ((v * id + 8.5).trunc() as u8).min(15);
        }
        pack_nibbles(&q, out);
    }
}

/// Q4_1: `d = (max - min) / 15`, `m = min`, `q = min(15, trunc((x - min) / d + 0.5))`.
pub fn encode_q4_1(src: &[f32], out: &mut Vec<u8>) {
    out.reserve(src.len() / QK * 20);
    for blk in src.chunks_exact(QK) {
        let max = blk.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let min = blk.iter().copied().fold(f32::INFINITY, f32::min);
        let d = (max - min) / 15.0;
        let id = inv(d);
        out.extend_from_slice(&f16_bytes(d));
        out.extend_from_slice(&f16_bytes(min));
        let mut q = [0u8; QK];
        for (qj, v) in q.iter_mut().zip(blk) {
            *qj = (((v - min) * id + 0.5).trunc() as u8).min(15);
        }
        pack_nibbles(&q, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_rounds_half_away_from_zero() {
        // amax 127 → d = 1: halves round away from zero, like C roundf.
        let mut v = [0.0f32; 32];
        v[0] = 127.0;
        v[1] = 2.5;
        v[2] = -2.5;
        v[3] = 0.49999997;
        let mut out = Vec::new();
        encode_q8_0(&v, &mut out);
        assert_eq!(out.len(), 34);
        assert_eq!(&out[2..6], &[127, 3, (-3i8) as u8, 0]);
    }

    #[test]
    fn zero_block_encodes_to_zero_scale() {
        let mut out = Vec::new();
        encode_q4_1(&[0.0; 32], &mut out);
        assert!(out.iter().all(|&b| b == 0));
        out.clear();
        encode_q4_0(&[0.0; 32], &mut out);
        // d = 0 / -8 = -0.0, as in gguf-py.
        assert_eq!(&out[..2], &[0x00, 0x80]);
        assert!(out[2..].iter().all(|&b| b == 0x88));
    }

    #[test]
    fn bf16_rounds_to_nearest_even_and_keeps_nan() {
        let mut out = Vec::new();
        encode_bf16(
            &[
                f32::from_bits(0x3F80_8000),
                f32::from_bits(0x3F81_8000),
                f32::NAN,
            ],
            &mut out,
        );
        let h: Vec<u16> = out
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(h[0], 0x3F80);
        assert_eq!(h[1], 0x3F82);
        assert!(f32::from_bits((h[2] as u32) << 16).is_nan());
    }
}
