//! `F16` (ggml type 1): IEEE binary16, little-endian.

use super::Codec;
use crate::dtype::DType;

pub const CODEC: Codec = Codec {
    encode: Some(encode),
    wgsl_decoder: Some(include_str!("wgsl/f16.wgsl")),
    #[cfg(target_arch = "x86_64")]
    x86: super::X86 {
        dot: Some(crate::avx2::dot_f16),
        decode: Some(crate::avx2::decode_f16),
        rows: super::Rows::None,
    },
    #[cfg(target_arch = "aarch64")]
    neon_dot: Some(crate::neon::dot_f16),
    ..Codec::base(DType::F16, "F16", 1, 1, 2, decode)
};

/// Decodes `out.len()` values from `src` (exactly their bytes).
pub fn decode(src: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
        *o = half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32();
    }
}

/// F32 → IEEE binary16, round to nearest even (numpy `astype(float16)`).
pub fn encode(src: &[f32], out: &mut Vec<u8>) {
    out.reserve(src.len() * 2);
    for v in src {
        out.extend_from_slice(&half::f16::from_f32(*v).to_bits().to_le_bytes());
    }
}
