//! `Q4_0` (ggml type 2): 32 values per 18-byte block: an f16 scale `d` and 4-bit codes, `d · (q − 8)`.

use super::Codec;
use crate::block::{f16_at, QK};
use crate::dtype::DType;
use crate::encode::{f16_bytes, inv, pack_nibbles};

pub const CODEC: Codec = Codec {
    encode: Some(encode),
    wgsl_decoder: Some(include_str!("wgsl/q4_0.wgsl")),
    #[cfg(target_arch = "x86_64")]
    x86: super::X86 {
        dot: Some(crate::avx2::dot_q4_0),
        decode: Some(crate::avx2::decode_q4_0),
        rows: ROWS,
    },
    #[cfg(target_arch = "aarch64")]
    neon_dot: Some(crate::neon::dot_q4_0),
    ..Codec::base(DType::Q4_0, "Q4_0", 2, 32, 18, decode_block)
};

#[cfg(target_arch = "x86_64")]
const ROWS: super::Rows = super::Rows::Prepared {
    avx2: super::Prepared {
        prepare: prepare_x,
        dot4: crate::avx2_perm::dot4_q4_0,
        floats_per_block: crate::avx2_perm::PREP_FLOATS,
    },
    avx512: Some(super::Prepared {
        prepare: prepare_x,
        dot4: crate::avx512::dot4_q4_0,
        floats_per_block: crate::avx2_perm::PREP_FLOATS,
    }),
};

/// x in natural order with the code offset (−8) folded in, for both four-row kernels.
#[cfg(target_arch = "x86_64")]
unsafe fn prepare_x(x: *const f32, nb: usize, out: *mut f32) {
    // SAFETY: the caller's contract (AVX2 present, nb blocks of x, room in out).
    unsafe { crate::avx2_perm::prepare_x_natural(x, nb, -8.0, out) }
}

/// Q4_0, 18 bytes → 32 values: `d * (q - 8)`.
pub fn decode_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        y[j] = d * ((qs[j] & 0x0F) as i32 - 8) as f32;
        y[j + 16] = d * ((qs[j] >> 4) as i32 - 8) as f32;
    }
}

/// Q4_0: `d = max / -8` where max is the value of largest magnitude (first one on ties),
/// `q = min(15, trunc(x / d + 8.5))`.
pub fn encode(src: &[f32], out: &mut Vec<u8>) {
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
