//! `F32` (ggml type 0): IEEE binary32, little-endian: the values as they are.

use super::Codec;
use crate::dtype::DType;

pub const CODEC: Codec = Codec {
    encode: Some(encode),
    wgsl_decoder: Some(include_str!("wgsl/f32.wgsl")),
    dot_portable: Some(dot_portable),
    #[cfg(target_arch = "x86_64")]
    x86: super::X86 {
        dot: Some(dot_avx2),
        decode: None,
        rows: super::Rows::None,
    },
    #[cfg(target_arch = "aarch64")]
    neon_dot: Some(crate::neon::dot_f32),
    ..Codec::base(DType::F32, "F32", 0, 1, 4, decode)
};

/// Decodes `out.len()` values from `src` (exactly their bytes).
pub fn decode(src: &[u8], out: &mut [f32]) {
    for (o, c) in out.iter_mut().zip(src.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
}

/// F32 → little-endian bytes.
pub fn encode(src: &[f32], out: &mut Vec<u8>) {
    out.reserve(src.len() * 4);
    for v in src {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// The portable dot product: eight running sums over the row as stored.
fn dot_portable(row: &[u8], x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut chunks = row.chunks_exact(32).zip(x.chunks_exact(8));
    for (c, xs) in &mut chunks {
        for k in 0..8 {
            let w = f32::from_le_bytes([c[4 * k], c[4 * k + 1], c[4 * k + 2], c[4 * k + 3]]);
            acc[k] += w * xs[k];
        }
    }
    let done = x.len() / 8 * 8;
    let mut s: f32 = acc.iter().sum();
    for (c, xv) in row[done * 4..].chunks_exact(4).zip(&x[done..]) {
        s += f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * xv;
    }
    s
}

/// The AVX2 kernel over the row's bytes.
#[cfg(target_arch = "x86_64")]
unsafe fn dot_avx2(row: *const u8, x: *const f32, n: usize) -> f32 {
    // SAFETY: the caller's contract (AVX2 present, n values at each pointer); the kernel
    // reads the row unaligned.
    unsafe { crate::avx2::dot_f32(row as *const f32, x, n) }
}
