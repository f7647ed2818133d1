//! Stored feature labels (seed 002 §15.8): derived browse metadata — each FFN feature's top
//! output tokens through the unembedding — kept as a checksummed segment beside the
//! weights and recorded in `index.json` (`feature_labels`). Derived, never authoritative:
//! the entry names the representations (and their payload hashes) the labels were
//! computed from, and a binding that maps other bytes does not use them.
//!
//! ```text
//! segments/text.feature_labels.<sha256[..16]>.bin
//!   [u64 LE header length][header JSON, space-padded to 32][payload]
//!   header: {"schema": 1, "kind": "feature_labels", "layers": L, "features": F,
//!            "top_k": K, "vocab": V, "record": "u32 token, f32 logit (LE)"}
//!   payload: for layer 0..L, feature 0..F, rank 0..K: u32 token id, f32 logit (8 bytes)
//! ```
//!
//! The file name carries its hash, so replacing the labels (`REPRESENT LABELS` again) writes
//! a new file, then `index.json` (atomically), then removes the old file: a crash leaves the
//! old labels or the new ones, never a half-written entry. Reading checks the recorded size
//! before reading, the SHA-256, the header against the binding's shape, the exact payload
//! length and every token id against the vocabulary.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::index::{read_index, resolve};
use super::reader::Container;
use super::segment::align_up;
use crate::error::{Result, StorageError};
use crate::model::Model;

/// Header schema of a labels segment.
pub const LABELS_SCHEMA: u32 = 1;
/// Bytes per stored token (u32 id + f32 logit).
const RECORD: u64 = 8;
/// Largest header accepted.
const MAX_HEADER: u64 = 1 << 20;
/// Most tokens kept per feature a reader accepts.
pub const MAX_TOP_K: u64 = 64;

/// One representation the labels were computed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelInput {
    pub representation: String,
    pub payload_sha256: String,
}

/// `index.json.feature_labels`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureLabelsEntry {
    /// Container-relative path of the segment.
    pub segment: String,
    pub sha256: String,
    pub bytes: u64,
    pub layers: u64,
    pub features: u64,
    pub top_k: u64,
    /// Always `derived`: labels are computed from the weights, never a source of truth.
    pub authority: String,
    /// What the labels were computed with (the unembedding, for people).
    pub unembedding: String,
    /// Object → the representation (and its payload hash) the labels were computed from.
    pub computed_from: BTreeMap<String, LabelInput>,
}

/// Labels for every feature of every layer: `top[(layer * features + feature) * k + rank]`.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelTable {
    pub layers: usize,
    pub features: usize,
    pub top_k: usize,
    pub top: Vec<(u32, f32)>,
}

impl LabelTable {
    /// The top tokens of one feature, best first.
    pub fn get(&self, layer: usize, feature: usize) -> Option<&[(u32, f32)]> {
        if layer >= self.layers || feature >= self.features {
            return None;
        }
        let at = (layer * self.features + feature) * self.top_k;
        self.top.get(at..at + self.top_k)
    }
}

/// Whether the labels recorded in a container apply to a binding, judged from `index.json`
/// alone (no payload byte): `Ok(Some(entry))` when they were computed from exactly the
/// representations the binding maps, `Ok(None)` when the container records none, and
/// `Err(reason)` when they exist but were computed from other bytes.
pub fn applicable(
    model: &Model,
) -> Result<std::result::Result<Option<FeatureLabelsEntry>, String>> {
    let c = Container::load(&model.path)?;
    let Some(entry) = c.index.feature_labels.clone() else {
        return Ok(Ok(None));
    };
    let in_use = super::provenance::in_use(model, &c)?;
    for (object, input) in &entry.computed_from {
        let mapped = in_use.get(object);
        let same = mapped.is_some_and(|rep| {
            *rep == input.representation
                && c.index
                    .representations
                    .get(rep)
                    .is_some_and(|r| r.payload_sha256 == input.payload_sha256)
        });
        if !same {
            return Ok(Err(format!(
                "stored labels were computed from {} and the binding maps {}",
                input.representation,
                mapped.map_or("nothing", String::as_str)
            )));
        }
    }
    Ok(Ok(Some(entry)))
}

fn bad(path: &Path, offset: u64, field: &str, message: impl Into<String>) -> StorageError {
    StorageError::Format {
        path: path.to_path_buf(),
        offset,
        field: field.to_string(),
        message: message.into(),
    }
}

/// Reads and checks the labels segment `entry` of the container at `dir` for a binding of
/// `layers` × `features` features over a vocabulary of `vocab` tokens.
pub fn read(
    dir: &Path,
    entry: &FeatureLabelsEntry,
    layers: usize,
    features: usize,
    vocab: usize,
) -> Result<LabelTable> {
    let path = resolve(dir, &entry.segment, "feature_labels.segment")?;
    if entry.top_k == 0 || entry.top_k > MAX_TOP_K {
        return Err(bad(
            &path,
            0,
            "feature_labels.top_k",
            format!("top_k {} is outside 1–{MAX_TOP_K}", entry.top_k),
        ));
    }
    if entry.layers != layers as u64 || entry.features != features as u64 {
        return Err(bad(
            &path,
            0,
            "feature_labels",
            format!(
                "index.json records labels for {} layers × {} features; the binding has {layers} × {features}",
                entry.layers, entry.features
            ),
        ));
    }
    let payload = (layers as u64)
        .checked_mul(features as u64)
        .and_then(|n| n.checked_mul(entry.top_k * RECORD))
        .ok_or_else(|| bad(&path, 0, "feature_labels", "label count overflows"))?;
    let cap = payload.saturating_add(MAX_HEADER);
    if entry.bytes > cap {
        return Err(bad(
            &path,
            0,
            "feature_labels.bytes",
            format!("{} bytes recorded; at most {cap} expected", entry.bytes),
        ));
    }
    let bytes = crate::fsutil::read_capped(&path, "feature labels segment", entry.bytes)?;
    super::meter::count_payload(bytes.len() as u64);
    if bytes.len() as u64 != entry.bytes {
        return Err(bad(
            &path,
            0,
            "size",
            format!(
                "labels segment is {} bytes; index.json records {}",
                bytes.len(),
                entry.bytes
            ),
        ));
    }
    let sha = crate::fsutil::hex(Sha256::digest(&bytes));
    if sha != entry.sha256 {
        return Err(bad(
            &path,
            0,
            "sha256",
            format!(
                "labels segment hash {sha} differs from index.json's {}: the segment is corrupted",
                entry.sha256
            ),
        ));
    }
    if bytes.len() < 8 {
        return Err(bad(&path, 0, "header length", "segment is truncated"));
    }
    let hlen = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if hlen > MAX_HEADER || 8 + hlen > bytes.len() as u64 {
        return Err(bad(
            &path,
            0,
            "header length",
            format!("header length {hlen} does not fit the segment"),
        ));
    }
    let start = (8 + hlen) as usize;
    let header: Value = crate::json_strict::parse(&bytes[8..start])
        .map_err(|e| bad(&path, 8, "header", e.to_string()))?;
    let field = |k: &str| header.get(k).and_then(Value::as_u64);
    let expect = [
        ("schema", LABELS_SCHEMA as u64),
        ("layers", entry.layers),
        ("features", entry.features),
        ("top_k", entry.top_k),
    ];
    for (k, want) in expect {
        if field(k) != Some(want) {
            return Err(bad(
                &path,
                8,
                k,
                format!("header says {:?}; expected {want}", header.get(k)),
            ));
        }
    }
    if header.get("kind").and_then(Value::as_str) != Some("feature_labels") {
        return Err(bad(&path, 8, "kind", "not a feature_labels segment"));
    }
    let body = &bytes[start..];
    if body.len() as u64 != payload {
        return Err(bad(
            &path,
            start as u64,
            "payload",
            format!("payload is {} bytes; {payload} expected", body.len()),
        ));
    }
    let mut top = Vec::with_capacity(body.len() / RECORD as usize);
    for (i, rec) in body.chunks_exact(RECORD as usize).enumerate() {
        crate::interrupt::every(i as u64, || format!("{}: labels", path.display()))?;
        let id = u32::from_le_bytes(rec[..4].try_into().expect("4 bytes"));
        let logit = f32::from_le_bytes(rec[4..].try_into().expect("4 bytes"));
        if id as usize >= vocab {
            return Err(bad(
                &path,
                start as u64 + i as u64 * RECORD,
                "token id",
                format!("token id {id} is outside the vocabulary of {vocab}"),
            ));
        }
        top.push((id, logit));
    }
    Ok(LabelTable {
        layers,
        features,
        top_k: entry.top_k as usize,
        top,
    })
}

/// Writes `table` into the container at `dir` as a labels segment and records it in
/// `index.json` (replacing any labels recorded before), computed from `computed_from`.
/// Existing segments are not touched. Returns the entry written.
pub fn write(
    dir: &Path,
    table: &LabelTable,
    unembedding: &str,
    computed_from: BTreeMap<String, LabelInput>,
) -> Result<FeatureLabelsEntry> {
    let (mut index, _) = read_index(dir)?;
    if table.top.len() != table.layers * table.features * table.top_k {
        return Err(StorageError::Internal(format!(
            "label table holds {} tokens for {} × {} × {}",
            table.top.len(),
            table.layers,
            table.features,
            table.top_k
        )));
    }
    let header = json!({
        "schema": LABELS_SCHEMA,
        "kind": "feature_labels",
        "layers": table.layers,
        "features": table.features,
        "top_k": table.top_k,
        "record": "u32 token, f32 logit (LE)",
    });
    let mut h = serde_json::to_vec(&header).map_err(|e| StorageError::Internal(e.to_string()))?;
    let padded = align_up(8 + h.len() as u64) - 8;
    h.resize(padded as usize, b' ');
    let mut bytes = Vec::with_capacity(8 + h.len() + table.top.len() * RECORD as usize);
    bytes.extend_from_slice(&(h.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&h);
    for &(id, logit) in &table.top {
        bytes.extend_from_slice(&id.to_le_bytes());
        bytes.extend_from_slice(&logit.to_le_bytes());
    }
    let sha = crate::fsutil::hex(Sha256::digest(&bytes));
    let rel = format!("segments/text.feature_labels.{}.bin", &sha[..16]);
    let segments = dir.join("segments");
    std::fs::create_dir_all(&segments).map_err(|e| StorageError::io(&segments, e))?;
    let old = index.feature_labels.as_ref().map(|e| e.segment.clone());
    if old.as_deref() != Some(rel.as_str()) {
        crate::fsutil::write_atomic(&dir.join(&rel), &bytes)?;
    }
    let entry = FeatureLabelsEntry {
        segment: rel.clone(),
        sha256: sha,
        bytes: bytes.len() as u64,
        layers: table.layers as u64,
        features: table.features as u64,
        top_k: table.top_k as u64,
        authority: "derived".into(),
        unembedding: unembedding.to_string(),
        computed_from,
    };
    index.feature_labels = Some(entry.clone());
    let text =
        serde_json::to_vec_pretty(&index).map_err(|e| StorageError::Internal(e.to_string()))?;
    crate::fsutil::write_atomic(&dir.join("index.json"), &text)?;
    crate::fsutil::sync_dir(dir)?;
    if let Some(old) = old.filter(|o| *o != rel) {
        // The old labels are no longer recorded; a file we cannot resolve is left alone.
        if let Ok(p) = resolve(dir, &old, "feature_labels.segment") {
            let _ = std::fs::remove_file(p);
        }
    }
    Ok(entry)
}

/// The representations (and payload hashes) of `objects` that `model`, opened from the
/// container at its path, maps: what labels computed from it depend on.
pub fn inputs_of(model: &Model, objects: &[&str]) -> Result<BTreeMap<String, LabelInput>> {
    let c = Container::load(&model.path)?;
    let in_use = super::provenance::in_use(model, &c)?;
    let mut out = BTreeMap::new();
    for &o in objects {
        if let Some(rep) = in_use.get(o) {
            let e = &c.index.representations[rep];
            out.insert(
                o.to_string(),
                LabelInput {
                    representation: rep.clone(),
                    payload_sha256: e.payload_sha256.clone(),
                },
            );
        }
    }
    Ok(out)
}
