//! `Q4_K` (ggml type 12): 256 values per 144-byte super-block: 4-bit codes with 6-bit sub-block scales and minimums.

use super::Codec;
use crate::block::{f16_at, scale_min_k4};
use crate::dtype::DType;

pub const CODEC: Codec = Codec {
    wgsl_decoder: Some(include_str!("wgsl/q4_k.wgsl")),
    #[cfg(target_arch = "x86_64")]
    x86: super::X86 {
        dot: Some(crate::avx2::dot_q4_k),
        decode: Some(crate::avx2::decode_q4_k),
        rows: ROWS,
    },
    #[cfg(target_arch = "aarch64")]
    neon_dot: Some(crate::neon::dot_q4_k),
    ..Codec::base(DType::Q4_K, "Q4_K", 12, 256, 144, decode_block)
};

#[cfg(target_arch = "x86_64")]
const ROWS: super::Rows = super::Rows::Prepared {
    avx2: super::Prepared {
        prepare: crate::avx2_perm::prepare_x_k,
        dot4: crate::avx2_perm::dot4_q4_k,
        floats_per_block: crate::avx2_perm::PREP_K_FLOATS,
    },
    avx512: None,
};

/// Q4_K, 144 bytes → 256 values: `(d * sc) * q - (dmin * mn)` per 32-value sub-block.
pub fn decode_block(b: &[u8], y: &mut [f32]) {
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
