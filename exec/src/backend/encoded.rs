//! The bridge between the executor and the storage codecs: every read of an encoded row
//! (decode, fused dot product) goes through these functions, so the kernels the CPU
//! backend uses live in one place (`lql_storage::codec`).

use lql_storage::codec;
use lql_storage::DType;

/// `Ok` when rows of this encoding can be decoded and dotted.
pub fn check_supported(dtype: DType) -> Result<(), String> {
    // Every encoding the engine knows has a decoder and a fused dot product.
    if DType::ALL.contains(&dtype) {
        Ok(())
    } else {
        Err(format!("not supported yet: encoding {dtype}"))
    }
}

/// Decode one encoded row into `out` (`out.len()` elements).
pub fn decode_row(dtype: DType, src: &[u8], out: &mut [f32]) -> Result<(), String> {
    codec::decode_row(dtype, src, out).map_err(|e| e.to_string())
}

/// Decode consecutive rows of `row_len` elements; `out.len()` is a multiple of `row_len`.
pub fn decode_rows(
    dtype: DType,
    src: &[u8],
    row_len: usize,
    out: &mut [f32],
) -> Result<(), String> {
    codec::decode_rows(dtype, src, row_len, out).map_err(|e| e.to_string())
}

/// `out[i] = row_i · x` for the consecutive encoded rows in `src`.
pub fn dot_rows(
    dtype: DType,
    src: &[u8],
    row_len: usize,
    x: &[f32],
    out: &mut [f32],
) -> Result<(), String> {
    let rb = row_len / dtype.block_elems() * dtype.block_bytes();
    if x.len() != row_len || src.len() != rb * out.len() {
        return Err(format!(
            "dot of {} rows of {row_len} {dtype} elements: {} bytes, input of {}",
            out.len(),
            src.len(),
            x.len()
        ));
    }
    codec::dot_rows(dtype, src, row_len, x, out);
    Ok(())
}
