//! `Q4_1` (ggml type 3): 32 values per 20-byte block: f16 scale `d` and minimum `m`, 4-bit codes, `d · q + m`.

use super::Codec;
use crate::block::{f16_at, QK};
use crate::dtype::DType;
use crate::encode::{f16_bytes, inv, pack_nibbles};

pub const CODEC: Codec = Codec {
    encode: Some(encode),
    wgsl_decoder: Some(include_str!("wgsl/q4_1.wgsl")),
    #[cfg(target_arch = "x86_64")]
    x86: super::X86 {
        dot: Some(crate::avx2::dot_q4_1),
        decode: Some(crate::avx2::decode_q4_1),
        rows: ROWS,
    },
    #[cfg(target_arch = "aarch64")]
    neon_dot: Some(crate::neon::dot_q4_1),
    ..Codec::base(DType::Q4_1, "Q4_1", 3, 32, 20, decode_block)
};

#[cfg(target_arch = "x86_64")]
const ROWS: super::Rows = super::Rows::Summed {
    avx2: crate::avx2_rows::dot4_q4_1,
    avx512: Some(crate::avx512::dot4_q4_1),
};

/// Q4_1, 20 bytes → 32 values: `d * q + m`.
pub fn decode_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        y[j] = d * (qs[j] & 0x0F) as f32 + m;
        y[j + 16] = d * (qs[j] >> 4) as f32 + m;
    }
}

/// Q4_1: `d = (max - min) / 15`, `m = min`, `q = min(15, trunc((x - min) / d + 0.5))`.
pub fn encode(src: &[f32], out: &mut Vec<u8>) {
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
