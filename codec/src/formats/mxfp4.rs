//! `MXFP4` (ggml type 39): 32 values per 17-byte block: an E8M0 shared exponent and E2M1 (4-bit float) codes.

use super::Codec;
use crate::block::{e8m0_half, MXFP4_KVALUES};
use crate::dtype::DType;

pub const CODEC: Codec = Codec {
    #[cfg(target_arch = "x86_64")]
    x86: super::X86 {
        dot: Some(crate::avx2::dot_mxfp4),
        decode: Some(crate::avx2::decode_mxfp4),
        rows: super::Rows::None,
    },
    ..Codec::base(DType::MXFP4, "MXFP4", 39, 32, 17, decode_block)
};

/// MXFP4, 17 bytes → 32 values: `s * KV[nibble]`.
pub fn decode_block(b: &[u8], y: &mut [f32]) {
    let d = e8m0_half(b[0]);
    let qs = &b[1..17];
    for j in 0..16 {
        y[j] = d * MXFP4_KVALUES[(qs[j] & 0x0F) as usize] as f32;
        y[j + 16] = d * MXFP4_KVALUES[(qs[j] >> 4) as usize] as f32;
    }
}
