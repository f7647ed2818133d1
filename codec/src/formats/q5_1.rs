//! `Q5_1` (ggml type 7): 32 values per 24-byte block: f16 scale and minimum, 5-bit codes, `d · q + m`.

use super::Codec;
use crate::block::f16_at;
use crate::dtype::DType;

pub const CODEC: Codec = Codec {
    #[cfg(target_arch = "x86_64")]
    x86: super::X86 {
        dot: Some(crate::avx2::dot_q5_1),
        decode: Some(crate::avx2::decode_q5_1),
        rows: ROWS,
    },
    #[cfg(target_arch = "aarch64")]
    neon_dot: Some(crate::neon::dot_q5_1),
    ..Codec::base(DType::Q5_1, "Q5_1", 7, 32, 24, decode_block)
};

#[cfg(target_arch = "x86_64")]
const ROWS: super::Rows = super::Rows::Summed {
    avx2: crate::avx2_rows::dot4_q5_1,
    avx512: None,
};

/// Q5_1, 24 bytes → 32 values: `d * q5 + m`.
pub fn decode_block(b: &[u8], y: &mut [f32]) {
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
