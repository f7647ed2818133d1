//! `Q8_0` (ggml type 8): 32 values per 34-byte block: an f16 scale and 8-bit codes, `d · q`.

use super::Codec;
use crate::block::{f16_at, QK};
use crate::dtype::DType;
use crate::encode::{f16_bytes, inv};

pub const CODEC: Codec = Codec {
    encode: Some(encode),
    wgsl_decoder: Some(include_str!("wgsl/q8_0.wgsl")),
    #[cfg(target_arch = "x86_64")]
    x86: super::X86 {
        dot: Some(crate::avx2::dot_q8_0),
        decode: Some(crate::avx2::decode_q8_0),
        rows: ROWS,
    },
    #[cfg(target_arch = "aarch64")]
    neon_dot: Some(crate::neon::dot_q8_0),
    ..Codec::base(DType::Q8_0, "Q8_0", 8, 32, 34, decode_block)
};

#[cfg(target_arch = "x86_64")]
const ROWS: super::Rows = super::Rows::Single {
    avx2: crate::avx2_rows::dot1_q8_0,
    avx512: Some(crate::avx512::dot1_q8_0),
};

/// Q8_0, 34 bytes → 32 values: `q * d`.
pub fn decode_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for j in 0..32 {
        y[j] = (b[2 + j] as i8) as f32 * d;
    }
}

/// Q8_0: `d = amax / 127`, `q = round_half_away(x / d)`.
pub fn encode(src: &[f32], out: &mut Vec<u8>) {
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
