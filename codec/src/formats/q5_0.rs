//! `Q5_0` (ggml type 6): 32 values per 22-byte block: an f16 scale, 5-bit codes (high bits packed apart), `d · (q − 16)`.

use super::Codec;
use crate::block::f16_at;
use crate::dtype::DType;

pub const CODEC: Codec = Codec {
    #[cfg(target_arch = "x86_64")]
    x86: super::X86 {
        dot: Some(crate::avx2::dot_q5_0),
        decode: Some(crate::avx2::decode_q5_0),
        rows: ROWS,
    },
    #[cfg(target_arch = "aarch64")]
    neon_dot: Some(crate::neon::dot_q5_0),
    ..Codec::base(DType::Q5_0, "Q5_0", 6, 32, 22, decode_block)
};

#[cfg(target_arch = "x86_64")]
const ROWS: super::Rows = super::Rows::Prepared {
    avx2: super::Prepared {
        prepare: prepare_x_shuffled,
        dot4: crate::avx2_perm::dot4_q5_0,
        floats_per_block: crate::avx2_perm::PREP_FLOATS,
    },
    avx512: Some(super::Prepared {
        prepare: prepare_x_natural,
        dot4: crate::avx512::dot4_q5_0,
        floats_per_block: crate::avx2_perm::PREP_FLOATS,
    }),
};

/// x reordered for the AVX2 kernel's byte-shuffle widening, the offset (−16) folded in.
#[cfg(target_arch = "x86_64")]
unsafe fn prepare_x_shuffled(x: *const f32, nb: usize, out: *mut f32) {
    // SAFETY: the caller's contract (AVX2 present, nb blocks of x, room in out).
    unsafe { crate::avx2_perm::prepare_x(x, nb, -16.0, out) }
}

/// x in natural order, the offset (−16) folded in, for the AVX-512 kernel.
#[cfg(target_arch = "x86_64")]
unsafe fn prepare_x_natural(x: *const f32, nb: usize, out: *mut f32) {
    // SAFETY: as above.
    unsafe { crate::avx2_perm::prepare_x_natural(x, nb, -16.0, out) }
}

/// Q5_0, 22 bytes → 32 values: `d * (q5 - 16)`.
pub fn decode_block(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let h0 = ((qh >> j) & 1) as i32;
        let h1 = ((qh >> (j + 16)) & 1) as i32;
        y[j] = d * (((qs[j] & 0x0F) as i32 | (h0 << 4)) - 16) as f32;
        y[j + 16] = d * (((qs[j] >> 4) as i32 | (h1 << 4)) - 16) as f32;
    }
}
