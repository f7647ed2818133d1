//! `Q3_K` (ggml type 11): 256 values per 110-byte super-block: 3-bit codes with 6-bit sub-block scales.

use super::Codec;
use crate::block::{f16_at, QK_K};
use crate::dtype::DType;

pub const CODEC: Codec = Codec::base(DType::Q3_K, "Q3_K", 11, 256, 110, decode_block);

/// Q3_K, 110 bytes (`hmask[32]`, `qs[64]`, `scales[12]`, `d`) → 256 values: per 16-value
/// sub-block `j`, `(d * (sc_j - 32)) * (q2 - 4·!hbit)`, the six-bit `sc_j` from a low nibble
/// of `scales[j % 8]` and two high bits of `scales[8 + j % 4]`; element `128h + 32s + l` is
/// bits `2s..2s + 2` of `qs[32h + l]` and its high bit is bit `e / 32` of `hmask[e % 32]`.
pub fn decode_block(b: &[u8], y: &mut [f32]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let sc = &b[96..108];
    let d = f16_at(b, 108);
    let mut dl = [0.0f32; 16];
    for (j, v) in dl.iter_mut().enumerate() {
        let lo = (sc[j % 8] >> (4 * (j / 8))) & 0x0F;
        let hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 0x03;
        *v = d * ((lo | (hi << 4)) as i8 - 32) as f32;
    }
    for (e, v) in y.iter_mut().enumerate().take(QK_K) {
        let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
        let q = ((qs[32 * h + l] >> (2 * s)) & 3) as i8;
        let high = (hmask[e % 32] >> (e / 32)) & 1;
        *v = dl[e / 16] * (q - if high == 0 { 4 } else { 0 }) as f32;
    }
}
