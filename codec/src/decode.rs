//! Checked row decoding: encoded bytes → f32, bit-exact with gguf-py's `dequantize`.

use super::check_lengths;
use crate::dtype::DType;
use crate::error::CodecError;

/// Decodes `out.len()` elements of `dtype` from `src`.
///
/// `out.len()` must be a whole number of blocks and `src` exactly their encoded size;
/// otherwise an error (never a panic). Values are bit-identical to gguf-py's
/// `gguf.quants.dequantize`.
pub fn decode_row(dtype: DType, src: &[u8], out: &mut [f32]) -> Result<(), CodecError> {
    check_lengths(dtype, src.len(), out.len(), "decode_row")?;
    decode_unchecked(dtype, src, out);
    Ok(())
}

/// Decodes consecutive rows of `row_len` elements into the contiguous buffer `out`
/// (`out.len()` = rows × `row_len`; `src` exactly their encoded size).
pub fn decode_rows(
    dtype: DType,
    src: &[u8],
    row_len: usize,
    out: &mut [f32],
) -> Result<(), CodecError> {
    if row_len == 0 || !out.len().is_multiple_of(row_len) {
        return Err(CodecError::Invalid(format!(
            "decode_rows: output of {} values is not a whole number of {row_len}-element rows",
            out.len()
        )));
    }
    if !row_len.is_multiple_of(dtype.block_elems()) {
        return Err(CodecError::Invalid(format!(
            "decode_rows: rows of {row_len} {dtype} elements are not whole {}-element blocks",
            dtype.block_elems()
        )));
    }
    check_lengths(dtype, src.len(), out.len(), "decode_rows")?;
    // Rows are whole blocks, so the concatenation decodes as one long row.
    decode_unchecked(dtype, src, out);
    Ok(())
}

/// Decodes with lengths already checked (`src.len()` = encoded size of `out.len()`).
pub(crate) fn decode_unchecked(dtype: DType, src: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if let (true, Some(kernel)) = (super::cpu::has_avx2(), dtype.codec().x86.decode) {
        let nb = out.len() / dtype.block_elems();
        // SAFETY: AVX2/FMA/F16C present; lengths checked by the caller (nb whole blocks).
        return unsafe { kernel(src.as_ptr(), out.as_mut_ptr(), nb) };
    }
    decode_scalar(dtype, src, out);
}

/// The portable reference decoder.
pub fn decode_scalar(dtype: DType, src: &[u8], out: &mut [f32]) {
    dtype.codec().decode(src, out);
}
