//! EXTRACT encodings: which encoding each tensor gets, and the streaming re-encoder
//! (decode a batch of rows to f32, encode to the target, hand the bytes on).

use crate::codec;
use crate::dtype::DType;
use crate::error::{Result, StorageError};

/// The encoding an EXTRACT writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtractEncoding {
    /// The source bytes verbatim (fidelity `source-exact`).
    Source,
    /// Every tensor as F32 (fidelity `source-equivalent`: decoding is exact in f32).
    F32,
    /// Matrices as F16; 1-D tensors (norms, biases) F32.
    F16,
    /// Matrices as BF16; 1-D tensors F32.
    BF16,
    /// Matrices as Q8_0 (rows not a multiple of 32 fall back to F16); 1-D tensors F32.
    Q8_0,
}

impl ExtractEncoding {
    /// Lower-case name, as written in representation ids (`text.embedding@source`).
    pub fn name(self) -> &'static str {
        match self {
            ExtractEncoding::Source => "source",
            ExtractEncoding::F32 => "f32",
            ExtractEncoding::F16 => "f16",
            ExtractEncoding::BF16 => "bf16",
            ExtractEncoding::Q8_0 => "q8_0",
        }
    }

    /// Parse a name (case-insensitive): `source`, `f16`, `bf16`, `q8_0`.
    pub fn from_name(s: &str) -> Option<Self> {
        [
            ExtractEncoding::Source,
            ExtractEncoding::F32,
            ExtractEncoding::F16,
            ExtractEncoding::BF16,
            ExtractEncoding::Q8_0,
        ]
        .into_iter()
        .find(|e| e.name().eq_ignore_ascii_case(s))
    }

    /// The encoding a tensor of `src` encoding and `shape` (ggml order) is written in.
    pub fn target(self, src: DType, shape: &[usize]) -> DType {
        let one_d = shape.iter().skip(1).all(|&d| d == 1);
        match self {
            ExtractEncoding::Source => src,
            ExtractEncoding::F32 => DType::F32,
            _ if one_d => DType::F32,
            ExtractEncoding::F16 => DType::F16,
            ExtractEncoding::BF16 => DType::BF16,
            ExtractEncoding::Q8_0 => {
                if shape.first().copied().unwrap_or(0) % DType::Q8_0.block_elems() == 0 {
                    DType::Q8_0
                } else {
                    DType::F16
                }
            }
        }
    }
}

impl std::fmt::Display for ExtractEncoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Rows decoded and re-encoded per batch (bounded memory: a few MiB at most).
const BATCH_ELEMS: usize = 1 << 20;

/// Re-encode a tensor of `shape` from `src_dtype` bytes to `dst`, handing each encoded
/// batch to `sink`. Memory use is bounded by one batch, whatever the tensor size.
pub(crate) fn reencode(
    src_dtype: DType,
    dst: DType,
    shape: &[usize],
    bytes: &[u8],
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let row_len = shape.first().copied().unwrap_or(0);
    if row_len == 0 {
        return Ok(());
    }
    let rows: usize = shape.iter().skip(1).product();
    let src_row = src_dtype
        .bytes_for(row_len as u64)
        .ok_or_else(|| StorageError::Invalid(format!("row of {row_len} {src_dtype}")))?
        as usize;
    if src_row.checked_mul(rows) != Some(bytes.len()) {
        return Err(StorageError::Invalid(format!(
            "tensor of shape {shape:?} in {src_dtype} should take {} bytes, has {}",
            src_row.saturating_mul(rows),
            bytes.len()
        )));
    }
    let batch_rows = (BATCH_ELEMS / row_len).max(1);
    let mut vals = vec![0f32; batch_rows.min(rows) * row_len];
    let mut out = Vec::new();
    let mut r = 0;
    while r < rows {
        let n = batch_rows.min(rows - r);
        let v = &mut vals[..n * row_len];
        codec::decode_rows(
            src_dtype,
            &bytes[r * src_row..(r + n) * src_row],
            row_len,
            v,
        )?;
        out.clear();
        for row in v.chunks_exact(row_len) {
            codec::encode_row(dst, row, &mut out)?;
        }
        sink(&out)?;
        r += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let e = ExtractEncoding::Q8_0;
        assert_eq!(e.target(DType::Q4_1, &[576, 576]), DType::Q8_0);
        assert_eq!(e.target(DType::F32, &[576]), DType::F32);
        assert_eq!(e.target(DType::F32, &[576, 1]), DType::F32);
        assert_eq!(e.target(DType::F16, &[33, 4]), DType::F16);
        assert_eq!(
            ExtractEncoding::Source.target(DType::Q4_1, &[64, 2]),
            DType::Q4_1
        );
        assert_eq!(
            ExtractEncoding::from_name("BF16"),
            Some(ExtractEncoding::BF16)
        );
        assert_eq!(ExtractEncoding::from_name("q4"), None);
        assert_eq!(
            ExtractEncoding::F32.target(DType::Q4_1, &[64, 2]),
            DType::F32
        );
    }

    #[test]
    fn reencode_f32_to_f16_in_batches() {
        let vals: Vec<f32> = (0..64 * 3).map(|i| i as f32 * 0.5).collect();
        let mut src = Vec::new();
        codec::encode_row(DType::F32, &vals, &mut src).unwrap();
        let mut got = Vec::new();
        reencode(DType::F32, DType::F16, &[64, 3], &src, &mut |b| {
            got.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        let mut want = Vec::new();
        codec::encode_row(DType::F16, &vals, &mut want).unwrap();
        assert_eq!(got, want);
    }
}
