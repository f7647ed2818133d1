//! # lql-codec
//!
//! Tensor codecs: decode a row, encode a row, and fused dot products of an encoded row with an
//! f32 vector. Storage (reading and writing files), the executor (its hot path) and the
//! GPU backend (uploads) all use these; this crate knows nothing of files.
//!
//! ```text
//!  encoded row ──decode_row──▶ f32 values        (bit-exact with gguf-py `dequantize`)
//!  f32 values  ──encode_row──▶ encoded row       (byte-exact with gguf-py `quantize`)
//!  encoded row · x ──dot_row──▶ f32              (fused: no decoded row is materialised)
//! ```
//!
//! - [`formats`]: the codec registry, one file per encoding: its ggml id, block geometry,
//!   exact scalar decoder, encoder (F32, F16, BF16, Q8_0, Q4_0, Q4_1) and the kernels that
//!   compute with it. Nothing else matches on an encoding.
//! - [`dtype`]: tensor encodings; their geometry is the registry's.
//! - [`block`] and [`encode`]: the helpers the formats' decoders and encoders share.
//! - [`decode`]: [`decode_row`] / [`decode_rows`], checked, with SIMD where the format has it.
//! - [`dot`]: [`dot_row`] / [`dot_rows`], the executor's decode hot path.
//! - `avx2`: AVX2 + FMA + F16C kernels, chosen at run time ([`cpu`]), scalar fallback
//!   everywhere else; `avx512`: AVX-512 dot kernels for Q4_0 and Q4_1 (four rows at a time,
//!   nibbles through a table permute) and Q8_0 on top ([`dot_rows_using`] picks a family for tests and benchmarks); `avx2_rows`: the
//!   AVX2 four-row kernels of Q4_1 and Q5_1 (per-block Σx folded once per call);
//!   `avx2_perm`: the AVX2 four-row kernels of Q4_0, Q5_0, Q4_K, Q5_K and Q6_K on x prepared
//!   once per call (reordered for byte-shuffle widening, offsets and group sums folded);
//!   `neon`: the aarch64 dot kernels of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K,
//!   F32, F16 and BF16.
//!
//! Rows are whole blocks: a row of `n` elements is `n / block_elems` blocks of
//! `block_bytes` each ([`DType::bytes_for`]).

/// How far past the bytes in use the multi-row matrix-vector kernels prefetch (x86): a whole
/// group of rows further than the next one. Decode streams every weight once per token, and
/// with the hardware prefetcher alone each core keeps too few lines in flight: on a 2-core
/// Xeon (AVX-512) far software prefetch took SmolLM2 Q4_1 decode from 123 to 140 tok/s
/// (distances 0/2048/4096/8192/16384 measured: 123/131/134/139/141). docs/performance.md.
#[cfg(target_arch = "x86_64")]
pub(crate) const PREFETCH_FAR: usize = 8192;

/// How far ahead the one-row Q8_0 kernels (the embedding/head of most files, every matrix of
/// a Q8_0 file) prefetch their single stream: measured 512/1024/2048/4096/8192 → 85/97/114/
/// 118/111 tok/s decoding SmolLM2 Q8_0 on the same machine.
#[cfg(target_arch = "x86_64")]
pub(crate) const PREFETCH_ROW: usize = 4096;

pub mod block;
pub mod cpu;
pub mod decode;
pub mod dot;
pub mod dtype;
pub mod encode;
pub mod error;
pub mod formats;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_perm;
#[cfg(target_arch = "x86_64")]
mod avx2_rows;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;

pub use decode::{decode_row, decode_rows};
pub use dot::{axpy_f32, dot_f32, dot_row, dot_rows, dot_rows_using};

pub use dtype::DType;
pub use error::CodecError;

/// Encodes `src` as `dtype` and appends the bytes to `out`.
///
/// `src.len()` must be a whole number of blocks. Supported targets: F32, F16, BF16, Q8_0,
/// Q4_0, Q4_1 (same rounding as gguf-py's `gguf.quants.quantize`); the other encodings refuse
/// with [`CodecError::Unsupported`].
pub fn encode_row(dtype: DType, src: &[f32], out: &mut Vec<u8>) -> Result<(), CodecError> {
    let be = dtype.block_elems();
    if !src.len().is_multiple_of(be) {
        return Err(CodecError::Invalid(format!(
            "cannot encode {} values as {dtype}: not a whole number of {be}-element blocks",
            src.len()
        )));
    }
    match dtype.codec().encode {
        Some(encode) => encode(src, out),
        None => {
            return Err(CodecError::Unsupported(format!(
                "not supported yet: encoding to {dtype}"
            )))
        }
    }
    Ok(())
}

/// True when [`encode_row`] can encode to `dtype`.
pub fn can_encode(dtype: DType) -> bool {
    dtype.codec().encode.is_some()
}

/// Checks that `bytes` encodes exactly `elems` elements of `dtype`.
fn check_lengths(dtype: DType, bytes: usize, elems: usize, what: &str) -> Result<(), CodecError> {
    let be = dtype.block_elems();
    if !elems.is_multiple_of(be) {
        return Err(CodecError::Invalid(format!(
            "{what}: {elems} {dtype} elements is not a whole number of {be}-element blocks"
        )));
    }
    let want = (elems / be)
        .checked_mul(dtype.block_bytes())
        .ok_or_else(|| CodecError::Invalid(format!("{what}: {elems} elements overflow")))?;
    if bytes != want {
        return Err(CodecError::Invalid(format!(
            "{what}: {elems} {dtype} elements take {want} bytes, got {bytes}"
        )));
    }
    Ok(())
}
