//! `Q6_K` (ggml type 14): 256 values per 210-byte super-block: 6-bit codes with 8-bit sub-block scales.

use super::Codec;
use crate::block::f16_at;
use crate::dtype::DType;

pub const CODEC: Codec = Codec {
    wgsl_decoder: Some(include_str!("wgsl/q6_k.wgsl")),
    #[cfg(target_arch = "x86_64")]
    x86: super::X86 {
        dot: Some(crate::avx2::dot_q6_k),
        decode: Some(crate::avx2::decode_q6_k),
        rows: ROWS,
    },
    #[cfg(target_arch = "aarch64")]
    neon_dot: Some(crate::neon::dot_q6_k),
    ..Codec::base(DType::Q6_K, "Q6_K", 14, 256, 210, decode_block)
};

#[cfg(target_arch = "x86_64")]
const ROWS: super::Rows = super::Rows::Prepared {
    avx2: super::Prepared {
        prepare: crate::avx2_perm::prepare_x_k,
        dot4: crate::avx2_perm::dot4_q6_k,
        floats_per_block: crate::avx2_perm::PREP_K_FLOATS,
    },
    avx512: None,
};

/// Q6_K, 210 bytes → 256 values: `(d * scale) * (q6 - 32)` per 16-value sub-block.
pub fn decode_block(b: &[u8], y: &mut [f32]) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let sc = &b[192..208];
    let d = f16_at(b, 208);
    for h in 0..2 {
        let ql = &ql[64 * h..64 * h + 64];
        let qh = &qh[32 * h..32 * h + 32];
        let base = 128 * h;
        for l in 0..32 {
            let q = [
                ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32,
                ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32,
                ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32,
                ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32,
            ];
            for (k, qk) in q.into_iter().enumerate() {
                let p = base + 32 * k + l;
                let s = sc[p / 16] as i8;
                y[p] = (d * s as f32) * qk as f32;
            }
        }
    }
}
