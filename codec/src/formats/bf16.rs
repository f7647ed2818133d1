//! `BF16` (ggml type 30): bfloat16 (the high half of a binary32), little-endian.

use super::Codec;
use crate::block::bf16_to_f32;
use crate::dtype::DType;

pub const CODEC: Codec = Codec {
    encode: Some(encode),
    wgsl_decoder: Some(include_str!("wgsl/bf16.wgsl")),
    #[cfg(target_arch = "x86_64")]
    x86: super::X86 {
        dot: Some(crate::avx2::dot_bf16),
        decode: None,
        rows: super::Rows::None,
    },
    #[cfg(target_arch = "aarch64")]
    neon_dot: Some(crate::neon::dot_bf16),
    ..Codec::base(DType::BF16, "BF16", 30, 1, 2, decode)
};

/// Decodes `out.len()` values from `src` (exactly their bytes).
pub fn decode(src: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(src.chunks_exact(2)) {
        *o = bf16_to_f32(u16::from_le_bytes([c[0], c[1]]));
    }
}

/// F32 → bfloat16, round to nearest even; NaN stays a quiet NaN (gguf-py `BF16`).
pub fn encode(src: &[f32], out: &mut Vec<u8>) {
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
