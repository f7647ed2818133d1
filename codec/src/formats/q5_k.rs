//! `Q5_K` (ggml type 13): 256 values per 176-byte super-block: 5-bit codes with 6-bit sub-block scales and minimums.

use super::Codec;
use crate::block::{f16_at, scale_min_k4};
use crate::dtype::DType;

pub const CODEC: Codec = Codec {
    #[cfg(target_arch = "x86_64")]
    x86: super::X86 {
        dot: Some(crate::avx2::dot_q5_k),
        decode: Some(crate::avx2::decode_q5_k),
        rows: ROWS,
    },
    #[cfg(target_arch = "aarch64")]
    neon_dot: Some(crate::neon::dot_q5_k),
    ..Codec::base(DType::Q5_K, "Q5_K", 13, 256, 176, decode_block)
};

#[cfg(target_arch = "x86_64")]
const ROWS: super::Rows = super::Rows::Prepared {
    avx2: super::Prepared {
        prepare: crate::avx2_perm::prepare_x_k,
        dot4: crate::avx2_perm::dot4_q5_k,
        floats_per_block: crate::avx2_perm::PREP_K_FLOATS,
    },
    avx512: None,
};

/// Q5_K, 176 bytes → 256 values: `(d * sc) * q5 - (dmin * mn)` per 32-value sub-block, the
/// fifth bit of element `l` of sub-block pair `c` in bit `2c` (low half) or `2c + 1` (high
/// half) of `qh[l]`.
pub fn decode_block(b: &[u8], y: &mut [f32]) {
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
