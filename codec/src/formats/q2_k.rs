//! `Q2_K` (ggml type 10): 256 values per 84-byte super-block: 2-bit codes with 4-bit sub-block scales and minimums.

use super::Codec;
use crate::block::{f16_at, QK_K};
use crate::dtype::DType;

pub const CODEC: Codec = Codec::base(DType::Q2_K, "Q2_K", 10, 256, 84, decode_block);

/// Q2_K, 84 bytes (`scales[16]`, `qs[64]`, `d`, `dmin`) → 256 values: per 16-value
/// sub-block `j`, `(d * (scales[j] & 15)) * q2 - dmin * (scales[j] >> 4)`; element
/// `128h + 32s + l` is bits `2s..2s + 2` of `qs[32h + l]`.
pub fn decode_block(b: &[u8], y: &mut [f32]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let d = f16_at(b, 80);
    let dmin = f16_at(b, 82);
    for (e, v) in y.iter_mut().enumerate().take(QK_K) {
        let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
        let q = (qs[32 * h + l] >> (2 * s)) & 3;
        let sc = scales[e / 16];
        let (dl, ml) = (d * (sc & 0x0F) as f32, dmin * (sc >> 4) as f32);
        *v = dl * q as f32 - ml;
    }
}
