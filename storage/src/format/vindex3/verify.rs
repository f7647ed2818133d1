//! VERIFY: re-hash a container against its own recorded hashes (seed 002 §20). Every
//! representation's segment (whole file) and payload (tensors in table order) is
//! re-hashed; a drifted payload is localised to the tensor and its byte range in the file
//! through the per-tensor hashes; the graph and the capability files are checked too.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::index::{resolve, ContainerShape};
use super::reader::Container;
use super::segment::parse_header;
use crate::error::Result;
use crate::fsutil::hex;

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyStatus {
    Ok,
    Failed,
    /// Read and structurally sound, but nothing recorded to compare its hash against.
    Unverified,
}

impl VerifyStatus {
    pub fn name(self) -> &'static str {
        match self {
            VerifyStatus::Ok => "ok",
            VerifyStatus::Failed => "FAILED",
            VerifyStatus::Unverified => "unverified",
        }
    }
}

/// One row of VERIFY: a representation, the graph or a capability file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyRow {
    /// Logical object id, `graph` or `capability`.
    pub object: String,
    /// Representation id (`text.embedding@source`) or file name.
    pub representation: String,
    pub encoding: String,
    pub status: VerifyStatus,
    /// Recorded hash.
    pub expected: String,
    /// Hash of the bytes on disk (empty when the file could not be read).
    pub actual: String,
    /// What failed and where, or what was checked.
    pub detail: String,
}

/// SHA-256 (hex) and length of the regular file at `path`, streamed.
pub(super) fn hash_file(path: &Path) -> Result<(String, u64)> {
    let (mut f, _) = crate::fsutil::open_regular(path, "file")?;
    hash_open(path, &mut f)
}

fn hash_open(path: &Path, f: &mut std::fs::File) -> Result<(String, u64)> {
    crate::fsutil::sha256_stream(f).map_err(|e| crate::error::StorageError::io(path, e))
}

/// Re-hash every segment, payload, tensor, the graph and the capability files of the
/// container at `dir`. Errors only when the container cannot be read at all (unsupported
/// generation, unreadable index); everything else becomes a row.
pub fn verify(dir: &Path) -> Result<Vec<VerifyRow>> {
    let c = Container::load(dir)?;
    if c.shape == ContainerShape::Bank {
        return Ok(verify_bank(&c));
    }
    c.require_graph("VERIFY")?;
    let mut rows = Vec::new();
    match (&c.index.system_graph, &c.index.system_graph_sha256) {
        (Some(rel), Some(want)) => {
            rows.push(resolved_file_row(dir, "graph", rel, "system_graph", want))
        }
        (Some(rel), None) => rows.push(VerifyRow {
            object: "graph".into(),
            representation: rel.clone(),
            encoding: String::new(),
            status: VerifyStatus::Unverified,
            expected: String::new(),
            actual: String::new(),
            detail: format!("{rel}: index.json records no system_graph_sha256 to check it against"),
        }),
        (None, _) => {}
    }
    for (id, e) in &c.index.representations {
        crate::interrupt::check(|| format!("{}: representation {id}", dir.display()))?;
        rows.push(verify_representation(dir, id, e));
    }
    for cap in c.index.capabilities.values() {
        rows.push(resolved_file_row(
            dir,
            "capability",
            &cap.file,
            "capabilities",
            &cap.sha256,
        ));
    }
    if let Some(l) = &c.index.feature_labels {
        // Derived browse metadata: hashed like any other file the index names.
        rows.push(resolved_file_row(
            dir,
            "feature_labels",
            &l.segment,
            "feature_labels.segment",
            &l.sha256,
        ));
    }
    if !rows.iter().any(|r| r.status != VerifyStatus::Unverified) {
        // Nothing was compared with a recorded hash: that is not a verified container.
        rows.push(VerifyRow {
            object: "container".into(),
            representation: "index.json".into(),
            encoding: String::new(),
            status: VerifyStatus::Failed,
            expected: String::new(),
            actual: String::new(),
            detail: "the container records no hash (no representation, graph, capability or \
                     labels sha256): nothing could be verified"
                .into(),
        });
    }
    Ok(rows)
}

/// The row of a file the index names: refused (not read) when its path leaves the
/// container, hashed otherwise.
fn resolved_file_row(dir: &Path, object: &str, rel: &str, field: &str, want: &str) -> VerifyRow {
    match resolve(dir, rel, field) {
        Ok(path) => file_row(object, rel, &path, want),
        Err(e) => VerifyRow {
            object: object.into(),
            representation: rel.into(),
            encoding: String::new(),
            status: VerifyStatus::Failed,
            expected: want.into(),
            actual: String::new(),
            detail: e.to_string(),
        },
    }
}

fn file_row(object: &str, name: &str, path: &Path, want: &str) -> VerifyRow {
    let (actual, status, detail) = match hash_file(path) {
        Ok((h, n)) if h == want => (h, VerifyStatus::Ok, format!("{n} bytes")),
        Ok((h, n)) => (
            h,
            VerifyStatus::Failed,
            format!("{name}: {n} bytes on disk do not match the recorded sha256"),
        ),
        Err(e) => (String::new(), VerifyStatus::Failed, format!("{name}: {e}")),
    };
    VerifyRow {
        object: object.into(),
        representation: name.into(),
        encoding: String::new(),
        status,
        expected: want.into(),
        actual,
        detail,
    }
}

fn verify_representation(dir: &Path, id: &str, e: &super::index::RepresentationEntry) -> VerifyRow {
    let mut row = VerifyRow {
        object: e.object.clone(),
        representation: id.to_string(),
        encoding: e.encoding.clone(),
        status: VerifyStatus::Failed,
        expected: e.segment_sha256.clone(),
        actual: String::new(),
        detail: String::new(),
    };
    let path = match resolve(dir, &e.segment, "representations.segment") {
        Ok(p) => p,
        Err(err) => {
            row.detail = err.to_string();
            return row;
        }
    };
    let map = match crate::mapped::map_file(&path, "segment") {
        Ok(m) => m,
        Err(err) => {
            row.detail = format!("segment {}: {err}", e.segment);
            return row;
        }
    };
    // The whole-file hash and the payload hash run side by side; per-tensor hashes are
    // computed only when the payload drifted, to name the tensor.
    let parsed = parse_header(&path, &map, map.len() as u64);
    let (segment_hash, payload_pass) = rayon::join(
        || hex(Sha256::digest(&map[..])),
        || {
            parsed.as_ref().ok().map(|parsed| {
                let mut payload = Sha256::new();
                let mut total = 0u64;
                for t in &parsed.header.tensors {
                    let start = (parsed.payload_start + t.offset) as usize;
                    payload.update(&map[start..start + t.len as usize]);
                    total += t.len;
                }
                (hex(payload.finalize()), total)
            })
        },
    );
    row.actual = segment_hash;
    super::meter::count_payload(map.len() as u64);
    let mut problems = Vec::new();
    if let Some(want) = e.segment_bytes {
        if map.len() as u64 != want {
            problems.push(format!(
                "segment {} is {} bytes, index.json records {want}",
                e.segment,
                map.len()
            ));
        }
    }
    match parsed {
        Err(err) => problems.push(format!("segment {} header: {err}", e.segment)),
        Ok(parsed) => {
            // Present whenever the header parsed.
            let (payload, total) = payload_pass.unwrap_or_default();
            if payload != e.payload_sha256 && parsed.header.tensors.len() > 1 {
                for t in &parsed.header.tensors {
                    let Some(want) = e.tensor_sha256.get(&t.name) else {
                        continue;
                    };
                    let start = (parsed.payload_start + t.offset) as usize;
                    let got = hex(Sha256::digest(&map[start..start + t.len as usize]));
                    if &got != want {
                        problems.push(format!(
                            "tensor {:?} differs: file bytes [{start}, {}) (payload [{}, {})), \
                             sha256 {got}, recorded {want}",
                            t.name,
                            start + t.len as usize,
                            t.offset,
                            t.offset + t.len
                        ));
                    }
                }
            }
            if payload != e.payload_sha256 {
                if problems.is_empty() {
                    let range = parsed
                        .header
                        .tensors
                        .first()
                        .zip(parsed.header.tensors.last())
                        .map(|(a, b)| {
                            let what = if parsed.header.tensors.len() == 1 {
                                format!("tensor {:?}, ", a.name)
                            } else {
                                String::new()
                            };
                            format!(
                                "{what}file bytes [{}, {})",
                                parsed.payload_start + a.offset,
                                parsed.payload_start + b.offset + b.len
                            )
                        })
                        .unwrap_or_default();
                    problems.push(format!(
                        "payload differs ({range}): sha256 {payload}, recorded {}",
                        e.payload_sha256
                    ));
                } else {
                    problems.push(format!(
                        "payload sha256 {payload}, recorded {}",
                        e.payload_sha256
                    ));
                }
            }
            if total != e.payload_bytes {
                problems.push(format!(
                    "payload holds {total} bytes, index.json records {}",
                    e.payload_bytes
                ));
            }
            if row.actual != e.segment_sha256 && problems.is_empty() {
                problems.push(format!(
                    "bytes outside every tensor differ (length word, header [0, {}) or \
                     alignment padding); every tensor is intact",
                    parsed.payload_start
                ));
            }
        }
    }
    if row.actual != e.segment_sha256 && problems.is_empty() {
        problems.push("segment sha256 differs".into());
    }
    if problems.is_empty() {
        row.status = VerifyStatus::Ok;
        row.detail = format!(
            "{} tensors, {} payload bytes, segment and payload sha256 match",
            e.tensor_count, e.payload_bytes
        );
    } else {
        row.detail = format!("segment {}: {}", e.segment, problems.join("; "));
    }
    row
}

/// True when every row is ok.
pub fn all_ok(rows: &[VerifyRow]) -> bool {
    rows.iter().all(|r| r.status == VerifyStatus::Ok)
}

/// A bank container: every segment its index lists, dispatched on the declared codec
/// (never the file name). Each file is hashed and compared with the `sha256` its entry
/// records; an LYRW v2 file is also checked structurally (every table and region). A file
/// with nothing recorded to compare is `unverified`, never `ok`; a missing file, a hash
/// mismatch or a broken structure is `FAILED`; an index that lists no segment at all fails
/// rather than passing empty.
fn verify_bank(c: &Container) -> Vec<VerifyRow> {
    use super::inspect::{bank_segments, BankCodec};
    let segments = bank_segments(c);
    if segments.is_empty() {
        return vec![VerifyRow {
            object: "bank".into(),
            representation: "index.json".into(),
            encoding: String::new(),
            status: VerifyStatus::Failed,
            expected: String::new(),
            actual: String::new(),
            detail: "the bank container's index lists no segment file; nothing was verified".into(),
        }];
    }
    segments
        .into_iter()
        .map(|s| {
            let mut row = VerifyRow {
                object: "bank".into(),
                representation: s.rel.to_string(),
                encoding: match &s.codec {
                    BankCodec::LyrwV2 => "lyrw-v2".into(),
                    BankCodec::TensorTable => "tensor-table".into(),
                    BankCodec::Unknown(_) => "unknown".into(),
                },
                status: VerifyStatus::Failed,
                expected: s.sha256.unwrap_or_default().to_string(),
                actual: String::new(),
                detail: String::new(),
            };
            let path = match resolve(&c.dir, s.rel, "segments") {
                Ok(p) => p,
                Err(e) => {
                    row.detail = format!("segment {}: {e}", s.rel);
                    return row;
                }
            };
            match hash_file(&path) {
                Ok((h, n)) => {
                    super::meter::count_payload(n);
                    row.actual = h
                }
                Err(e) => {
                    row.detail = format!("segment {}: {e}", s.rel);
                    return row;
                }
            }
            let hash = match s.sha256 {
                Some(want) if want != row.actual => {
                    row.detail = format!(
                        "segment {}: bytes on disk do not match the recorded sha256",
                        s.rel
                    );
                    return row;
                }
                Some(_) => "sha256 matches",
                None => "no recorded sha256 to compare",
            };
            let structure = match &s.codec {
                BankCodec::LyrwV2 => match super::lyrw::read(&path) {
                    Ok(f) if super::lyrw::packing_violation(&f).is_some() => {
                        row.detail = format!(
                            "segment {}: {}",
                            s.rel,
                            super::lyrw::packing_violation(&f).unwrap_or_default()
                        );
                        return row;
                    }
                    Ok(f) => format!(
                        "layer {}: {} banks, {} segment descriptors; structure checked",
                        f.logical_layer,
                        f.banks.len(),
                        f.segments.len()
                    ),
                    Err(e) => {
                        row.detail = e.to_string();
                        return row;
                    }
                },
                BankCodec::TensorTable => match crate::mapped::map_file(&path, "segment")
                    .and_then(|m| super::segment::parse_header(&path, &m, m.len() as u64))
                {
                    Ok(p) => format!("{} tensors; header checked", p.header.tensors.len()),
                    Err(e) => {
                        row.detail = e.to_string();
                        return row;
                    }
                },
                BankCodec::Unknown(decl) => {
                    format!("declared {decl}: not supported yet: this codec is preserved, not read")
                }
            };
            row.status = if s.sha256.is_some() {
                VerifyStatus::Ok
            } else {
                VerifyStatus::Unverified
            };
            row.detail = format!("{structure}; {hash}");
            row
        })
        .collect()
}
