//! Activation files: the hidden states one pipeline stage hands to the next.
//!
//! Layout (little-endian):
//!
//! | bytes | content |
//! |---|---|
//! | 8 | magic `LQLACT01` |
//! | 4 | `u32` length `h` of the JSON header (at most 1 MiB) |
//! | h | JSON header (below) |
//! | `tokens × hidden × 4` | `f32` hidden states, token-major (row `i` = position `position_start + i`) |
//!
//! Header: `{"version": 1, "dtype": "f32", "layout": "token-major", "tokens", "hidden",
//! "position_start", "layer_end", "layer_count", "model_id", "manifest_sha256",
//! "token_ids"}` — `layer_end` is the boundary: the states are those after layer
//! `layer_end - 1`, so the stage that reads them must start at layer `layer_end`; the
//! package identity is the manifest's SHA-256. Files are written to an exclusive temporary
//! name, synced and renamed. Reading checks every size against the file length before
//! allocating, and [`ActivationFrame::check_for`] refuses states that belong to another
//! package, another boundary or another width, by name.

use std::io::{Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::refuse;
use crate::error::{Result, StorageError};

/// The magic bytes of an activation file.
pub const MAGIC: [u8; 8] = *b"LQLACT01";
const MAX_HEADER: u32 = 1 << 20;

/// The JSON header of an activation file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivationHeader {
    pub version: u32,
    pub dtype: String,
    pub layout: String,
    pub tokens: u64,
    pub hidden: u64,
    pub position_start: u64,
    /// The states follow layer `layer_end - 1`; the next stage starts at `layer_end`.
    pub layer_end: u64,
    pub layer_count: u64,
    pub model_id: String,
    /// SHA-256 of the package manifest the producing stage was loaded from.
    pub manifest_sha256: String,
    /// The token ids of the positions (for display; the states carry the computation).
    #[serde(default)]
    pub token_ids: Vec<u32>,
}

/// Hidden states and their header.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivationFrame {
    pub header: ActivationHeader,
    /// `tokens × hidden` floats, token-major.
    pub data: Vec<f32>,
}

/// What a consuming stage expects.
#[derive(Debug, Clone, Copy)]
pub struct Expect<'a> {
    pub manifest_sha256: &'a str,
    pub model_id: &'a str,
    pub first_layer: u64,
    pub hidden: u64,
}

fn bad(path: &Path, msg: impl Into<String>) -> StorageError {
    refuse("activation_file", path.display().to_string(), msg)
}

impl ActivationFrame {
    /// Write to `path` (exclusive temporary name, sync, rename).
    pub fn write(&self, path: &Path) -> Result<()> {
        let h = &self.header;
        if (h.tokens as u128) * (h.hidden as u128) != self.data.len() as u128 {
            return Err(StorageError::Internal(
                "activation header does not match its data".into(),
            ));
        }
        let header = serde_json::to_vec(h).expect("header serialises");
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        let name = path
            .file_name()
            .ok_or_else(|| bad(path, "not a file path"))?
            .to_string_lossy()
            .into_owned();
        super::writer::write_exclusive(&dir, &name, |w| {
            w.write_all(&MAGIC)?;
            w.write_all(&(header.len() as u32).to_le_bytes())?;
            w.write_all(&header)?;
            for v in &self.data {
                w.write_all(&v.to_le_bytes())?;
            }
            Ok(())
        })
    }

    /// Read `path`, checking magic, header and sizes against the file's length. Only a
    /// regular file is read: a FIFO or a device is refused before a byte is read (it
    /// would block, or never end).
    pub fn read(path: &Path) -> Result<ActivationFrame> {
        let (mut f, meta) = crate::fsutil::open_regular(path, "activation file")?;
        let len = meta.len();
        let mut head = [0u8; 12];
        f.read_exact(&mut head)
            .map_err(|_| bad(path, "shorter than an activation header"))?;
        if head[..8] != MAGIC {
            return Err(bad(path, "not an activation file (magic)"));
        }
        let hl = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
        if hl > MAX_HEADER || 12 + hl as u64 > len {
            return Err(bad(path, format!("header length {hl} is out of bounds")));
        }
        let mut hb = vec![0u8; hl as usize];
        f.read_exact(&mut hb)
            .map_err(|e| StorageError::io(path, e))?;
        let header: ActivationHeader = serde_json::from_slice(&hb)
            .map_err(|e| bad(path, format!("header is not valid JSON: {e}")))?;
        if header.version != 1 || header.dtype != "f32" || header.layout != "token-major" {
            return Err(bad(
                path,
                format!(
                    "unsupported activation frame (version {}, {} {})",
                    header.version, header.dtype, header.layout
                ),
            ));
        }
        let payload = header
            .tokens
            .checked_mul(header.hidden)
            .and_then(|n| n.checked_mul(4));
        if payload != Some(len - 12 - hl as u64) || header.tokens == 0 {
            return Err(bad(
                path,
                format!(
                    "{} tokens × {} floats do not match the {} payload bytes",
                    header.tokens,
                    header.hidden,
                    len - 12 - hl as u64
                ),
            ));
        }
        let mut raw = vec![0u8; payload.unwrap_or(0) as usize];
        f.read_exact(&mut raw)
            .map_err(|e| StorageError::io(path, e))?;
        let data = raw
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        Ok(ActivationFrame { header, data })
    }

    /// Refuse states that do not belong to the stage described by `want`.
    pub fn check_for(&self, want: &Expect<'_>) -> Result<()> {
        let h = &self.header;
        let at = "activation file";
        if !h.manifest_sha256.eq_ignore_ascii_case(want.manifest_sha256) {
            return Err(refuse(
                "activation_package",
                at,
                format!(
                    "the states come from package {} (manifest sha256 {}), this stage is package {} (manifest sha256 {})",
                    h.model_id, h.manifest_sha256, want.model_id, want.manifest_sha256
                ),
            ));
        }
        if h.layer_end != want.first_layer {
            return Err(refuse(
                "activation_boundary",
                at,
                format!(
                    "the states follow layer {} but this stage starts at layer {}",
                    h.layer_end as i64 - 1,
                    want.first_layer
                ),
            ));
        }
        if h.hidden != want.hidden {
            return Err(refuse(
                "activation_shape",
                at,
                format!(
                    "rows of {} floats; this model's hidden size is {}",
                    h.hidden, want.hidden
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(all(test, unix))]
mod fifo_tests {
    use super::*;

    /// A FIFO given as an activation file is refused at once, not read forever.
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("h.bin");
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file system entry.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = ActivationFrame::read(&p).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
