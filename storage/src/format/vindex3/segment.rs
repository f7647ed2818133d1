//! Segment framing: `[u64 LE header length][header JSON, space-padded][payload]`, with a
//! tensor table sorted by name (dtype, shape in ggml order, offset from the payload start,
//! length). Building a header, and parsing one under hostile-input limits.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{ALIGN, SEGMENT_HEADER_SCHEMA};
use crate::dtype::DType;
use crate::error::{Result, StorageError};

/// Largest header accepted (256 MiB, as the reference reader).
pub const MAX_HEADER_BYTES: u64 = 256 << 20;
/// Most dimensions a tensor may declare.
pub const MAX_DIMS: usize = 8;

/// The JSON header of a segment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SegmentHeader {
    pub schema: u32,
    /// `{object}@{encoding}`.
    pub representation: String,
    pub tensors: Vec<TensorEntry>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One tensor of the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorEntry {
    /// Name relative to the object's binding prefix.
    pub name: String,
    /// Encoding name (`F32`, `Q4_1`, …); unknown names are kept and refused only by the
    /// operations that need the tensor.
    pub dtype: String,
    /// ggml order: `shape[0]` is the row length.
    pub shape: Vec<u64>,
    /// Byte offset from the payload start.
    pub offset: u64,
    pub len: u64,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A parsed, bounds-checked segment header.
#[derive(Debug, Clone)]
pub struct ParsedSegment {
    pub header: SegmentHeader,
    /// File offset where the payload starts.
    pub payload_start: u64,
    /// Payload length available in the file.
    pub payload_len: u64,
}

impl ParsedSegment {
    pub fn tensor(&self, name: &str) -> Option<&TensorEntry> {
        self.header
            .tensors
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.header.tensors[i])
    }
}

/// Serialise a header, padding it with spaces so the payload starts on an [`ALIGN`]
/// boundary. Returns the framed prefix (length word + header).
pub fn frame_header(header: &SegmentHeader) -> Result<Vec<u8>> {
    let mut json = serde_json::to_vec(header).map_err(|e| StorageError::Internal(e.to_string()))?;
    let total = 8 + json.len() as u64;
    let padded = total.div_ceil(ALIGN) * ALIGN;
    json.resize(json.len() + (padded - total) as usize, b' ');
    let mut out = Vec::with_capacity(padded as usize);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    Ok(out)
}

/// Round `x` up to the tensor alignment.
pub fn align_up(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

fn bad(path: &Path, offset: u64, field: &str, message: impl Into<String>) -> StorageError {
    StorageError::Format {
        path: path.to_path_buf(),
        offset,
        field: field.to_string(),
        message: message.into(),
    }
}

/// Parse and check a segment header from the first bytes of a file of `file_len` bytes.
/// `bytes` must hold at least the whole header (the mapped file does).
///
/// Checks: the length word fits the file and the 256 MiB cap; the header is a JSON object
/// of the expected schema; names are unique and sorted; every shape has 1–8 dimensions with
/// no overflow; every known dtype's length matches its shape; every range lies inside the
/// payload. A short file is reported as truncated, naming the segment.
pub fn parse_header(path: &Path, bytes: &[u8], file_len: u64) -> Result<ParsedSegment> {
    if file_len < 8 || bytes.len() < 8 {
        return Err(bad(
            path,
            0,
            "header length",
            format!("segment is truncated: {file_len} bytes, shorter than its 8-byte length word"),
        ));
    }
    let hlen = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if hlen > MAX_HEADER_BYTES {
        return Err(bad(
            path,
            0,
            "header length",
            format!("the length word exceeds the {MAX_HEADER_BYTES}-byte header limit"),
        ));
    }
    let payload_start = 8 + hlen;
    if payload_start > file_len || payload_start > bytes.len() as u64 {
        return Err(bad(
            path,
            0,
            "header length",
            format!(
                "segment is truncated: the header length word runs past the end of the \
                 {file_len}-byte file"
            ),
        ));
    }
    let header: SegmentHeader = serde_json::from_slice(&bytes[8..payload_start as usize])
        .map_err(|e| bad(path, 8, "segment header JSON", e.to_string()))?;
    if header.schema != SEGMENT_HEADER_SCHEMA {
        return Err(StorageError::Unsupported(format!(
            "{}: segment header schema {} (this build reads schema {SEGMENT_HEADER_SCHEMA})",
            path.display(),
            header.schema
        )));
    }
    let payload_len = file_len - payload_start;
    let mut prev: Option<&str> = None;
    for (at, t) in header.tensors.iter().enumerate() {
        crate::interrupt::every(at as u64, || format!("{}: tensor table", path.display()))?;
        let field = format!("tensor {:?}", t.name);
        if let Some(p) = prev {
            if p >= t.name.as_str() {
                return Err(bad(
                    path,
                    8,
                    &field,
                    "tensor table is not sorted by name (or names repeat)",
                ));
            }
        }
        prev = Some(&t.name);
        if t.shape.is_empty() || t.shape.len() > MAX_DIMS {
            return Err(bad(
                path,
                8,
                &field,
                format!("{} dimensions (1–{MAX_DIMS} allowed)", t.shape.len()),
            ));
        }
        let elems = t
            .shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| bad(path, 8, &field, "shape overflows"))?;
        if let Some(dt) = DType::from_name(&t.dtype) {
            if t.shape[0] % dt.block_elems() as u64 != 0 {
                return Err(bad(
                    path,
                    8,
                    &field,
                    format!(
                        "row length {} is not a whole number of {} blocks",
                        t.shape[0], dt
                    ),
                ));
            }
            let want = dt
                .bytes_for(elems)
                .ok_or_else(|| bad(path, 8, &field, "shape does not fit the encoding"))?;
            if want != t.len {
                return Err(bad(
                    path,
                    8,
                    &field,
                    format!(
                        "length {} does not match shape {:?} in {} ({want} bytes)",
                        t.len, t.shape, dt
                    ),
                ));
            }
        }
        let end = t
            .offset
            .checked_add(t.len)
            .ok_or_else(|| bad(path, 8, &field, "offset + length overflows"))?;
        if end > payload_len {
            return Err(bad(
                path,
                payload_start + t.offset,
                &field,
                format!(
                    "segment is truncated or corrupt: tensor bytes [{}, {}) of the payload lie \
                     outside its {payload_len} bytes",
                    t.offset, end
                ),
            ));
        }
    }
    Ok(ParsedSegment {
        header,
        payload_start,
        payload_len,
    })
}

/// Read and parse just the header of a segment file (VERIFY and SHOW TENSORS use this; the
/// reader parses the mapped bytes instead).
pub fn read_header(path: &Path) -> Result<ParsedSegment> {
    use std::io::Read;
    let (mut f, meta) = crate::fsutil::open_regular(path, "segment")?;
    let file_len = meta.len();
    let mut word = [0u8; 8];
    let got = read_up_to(&mut f, &mut word).map_err(|e| StorageError::io(path, e))?;
    if got < 8 {
        return parse_header(path, &word[..got], file_len);
    }
    let hlen = u64::from_le_bytes(word);
    if hlen > MAX_HEADER_BYTES || 8 + hlen > file_len {
        return parse_header(path, &word, file_len);
    }
    let mut buf = vec![0u8; 8 + hlen as usize];
    buf[..8].copy_from_slice(&word);
    f.read_exact(&mut buf[8..])
        .map_err(|e| StorageError::io(path, e))?;
    super::meter::count_header(buf.len() as u64);
    parse_header(path, &buf, file_len)
}

fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(tensors: Vec<TensorEntry>) -> SegmentHeader {
        SegmentHeader {
            schema: 1,
            representation: "text.x@source".into(),
            tensors,
            extra: Map::new(),
        }
    }

    fn entry(name: &str, dtype: &str, shape: Vec<u64>, offset: u64, len: u64) -> TensorEntry {
        TensorEntry {
            name: name.into(),
            dtype: dtype.into(),
            shape,
            offset,
            len,
            extra: Map::new(),
        }
    }

    fn file(h: &SegmentHeader, payload: usize) -> Vec<u8> {
        let mut b = frame_header(h).unwrap();
        b.resize(b.len() + payload, 0);
        b
    }

    #[test]
    fn framed_header_is_aligned_and_round_trips() {
        let h = header(vec![entry("a", "F32", vec![4], 0, 16)]);
        let b = file(&h, 16);
        let p = parse_header(Path::new("s"), &b, b.len() as u64).unwrap();
        assert_eq!(p.payload_start % ALIGN, 0);
        assert_eq!(p.header, h);
    }

    #[test]
    fn hostile_headers_are_refused() {
        let p = Path::new("seg.bin");
        // Length word larger than the file.
        let mut b = vec![0u8; 16];
        b[..8].copy_from_slice(&1000u64.to_le_bytes());
        assert!(parse_header(p, &b, 16).is_err());
        // Length word absurd.
        b[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse_header(p, &b, 16).is_err());
        // Tensor beyond the payload.
        let h = header(vec![entry("a", "F32", vec![4], 0, 16)]);
        let b = file(&h, 8);
        let e = parse_header(p, &b, b.len() as u64).unwrap_err().to_string();
        assert!(e.contains("truncated"), "{e}");
        // Length inconsistent with the shape.
        let h = header(vec![entry("a", "F32", vec![4], 0, 12)]);
        let b = file(&h, 16);
        assert!(parse_header(p, &b, b.len() as u64).is_err());
        // Shape overflow.
        let h = header(vec![entry("a", "F32", vec![u64::MAX, 4], 0, 12)]);
        let b = file(&h, 16);
        assert!(parse_header(p, &b, b.len() as u64).is_err());
        // Unsorted names.
        let h = header(vec![
            entry("b", "F32", vec![1], 0, 4),
            entry("a", "F32", vec![1], 32, 4),
        ]);
        let b = file(&h, 64);
        assert!(parse_header(p, &b, b.len() as u64).is_err());
        // Offset overflow.
        let h = header(vec![entry("a", "XYZ", vec![1], u64::MAX, 4)]);
        let b = file(&h, 64);
        assert!(parse_header(p, &b, b.len() as u64).is_err());
        // Not JSON.
        let mut b = vec![b'x'; 40];
        b[..8].copy_from_slice(&32u64.to_le_bytes());
        assert!(parse_header(p, &b, 40).is_err());
    }

    #[test]
    fn unknown_dtype_is_kept_when_in_bounds() {
        let h = header(vec![entry("a", "NVFP4", vec![64], 0, 36)]);
        let b = file(&h, 64);
        let p = parse_header(Path::new("s"), &b, b.len() as u64).unwrap();
        assert_eq!(p.header.tensors[0].dtype, "NVFP4");
    }
}
