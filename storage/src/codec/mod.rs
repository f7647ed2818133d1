//! Tensor codecs: decode a row, encode a row, and fused dot products of an encoded row with an f32 vector.
