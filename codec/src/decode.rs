//! Checked row decoding: encoded bytes → f32, bit-exact with gguf-py's `dequantize`.

use super::block;
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
    if super::cpu::has_avx2() {
        let nb = out.len() / dtype.block_elems();
        // SAFETY: AVX2/FMA/F16C present; lengths checked by the caller.
        unsafe {
            match dtype {
                DType::F16 => return super::avx2::decode_f16(src.as_ptr(), out.as_mut_ptr(), nb),
                DType::Q4_1 => return super::avx2::decode_q4_1(src.as_ptr(), out.as_mut_ptr(), nb),
                DType::Q8_0 => return super::avx2::decode_q8_0(src.as_ptr(), out.as_mut_ptr(), nb),
                DType::Q4_0 => return super::avx2::decode_q4_0(src.as_ptr(), out.as_mut_ptr(), nb),
                DType::Q5_0 => return super::avx2::decode_q5_0(src.as_ptr(), out.as_mut_ptr(), nb),
                DType::Q5_1 => return super::avx2::decode_q5_1(src.as_ptr(), out.as_mut_ptr(), nb),
                DType::MXFP4 => {
                    return super::avx2::decode_mxfp4(src.as_ptr(), out.as_mut_ptr(), nb)
                }
                DType::Q4_K => return super::avx2::decode_q4_k(src.as_ptr(), out.as_mut_ptr(), nb),
                DType::Q5_K => return super::avx2::decode_q5_k(src.as_ptr(), out.as_mut_ptr(), nb),
                DType::Q6_K => return super::avx2::decode_q6_k(src.as_ptr(), out.as_mut_ptr(), nb),
                _ => {}
            }
        }
    }
    decode_scalar(dtype, src, out);
}

/// The portable reference decoder.
pub fn decode_scalar(dtype: DType, src: &[u8], out: &mut [f32]) {
    let f: fn(&[u8], &mut [f32]) = match dtype {
        DType::F32 => return block::decode_f32(src, out),
        DType::F16 => return block::decode_f16(src, out),
        DType::BF16 => return block::decode_bf16(src, out),
        DType::Q4_0 => block::decode_q4_0,
        DType::Q4_1 => block::decode_q4_1,
        DType::Q5_0 => block::decode_q5_0,
        DType::Q5_1 => block::decode_q5_1,
        DType::Q8_0 => block::decode_q8_0,
        DType::MXFP4 => block::decode_mxfp4,
        DType::Q2_K => block::decode_q2_k,
        DType::Q3_K => block::decode_q3_k,
        DType::Q4_K => block::decode_q4_k,
        DType::Q5_K => block::decode_q5_k,
        DType::Q6_K => block::decode_q6_k,
    };
    let (be, bb) = (dtype.block_elems(), dtype.block_bytes());
    for (b, y) in src.chunks_exact(bb).zip(out.chunks_exact_mut(be)) {
        f(b, y);
    }
}
