//! `index.json`: the `Vindex3Index` envelope (seed 002 §5.2) and generation detection
//! (§5.7, §12.1): `version` alone decides the generation, before any segment byte is read.
//!
//! Unknown fields are kept in `extra` (serde `flatten`) so a rewrite preserves them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::INDEX_SCHEMAS_READ;
use crate::error::{Result, StorageError};

/// Largest `index.json` accepted (hostile-input limit).
pub const MAX_INDEX_BYTES: u64 = 64 << 20;

/// Whether a container is the source-of-truth encode or was derived from another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Authority {
    #[default]
    Canonical,
    Derived,
}

/// One representation: a physically present encoding of a logical object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepresentationEntry {
    pub object: String,
    pub encoding: String,
    /// Container-relative path of the segment file.
    pub segment: String,
    pub tensor_count: u64,
    /// Sum of the tensors' byte lengths (alignment gaps excluded).
    pub payload_bytes: u64,
    /// SHA-256 of the tensors' bytes concatenated in table order.
    pub payload_sha256: String,
    /// SHA-256 of the whole segment file.
    pub segment_sha256: String,
    /// Size of the segment file, checked at open (a truncated segment is refused by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_bytes: Option<u64>,
    /// Fidelity level (seed 002 §9.2): `source-exact`, `numerically-approximate`, …
    pub fidelity: String,
    /// SHA-256 per tensor name, so VERIFY can name what drifted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tensor_sha256: BTreeMap<String, String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A capability file of the snapshot (tokenizer, chat template, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapabilityEntry {
    pub file: String,
    pub bytes: u64,
    pub sha256: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The `index.json` envelope, schema 3–4.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Vindex3Index {
    pub version: u32,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub family: String,
    #[serde(default)]
    pub hidden_size: u32,
    #[serde(default)]
    pub num_layers: u32,
    #[serde(default)]
    pub system_graph: Option<String>,
    #[serde(default)]
    pub moe_manifest: Option<String>,
    #[serde(default)]
    pub representations: BTreeMap<String, RepresentationEntry>,
    #[serde(default)]
    pub segments: BTreeMap<String, Value>,
    #[serde(default)]
    pub profiles: Vec<Value>,
    #[serde(default)]
    pub variants: Value,
    #[serde(default)]
    pub authority: Authority,
    #[serde(default)]
    pub precision_map: Option<Value>,
    #[serde(default)]
    pub derived_from_model: Option<String>,
    /// SHA-256 of `system_graph.json`, checked by VERIFY.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_graph_sha256: Option<String>,
    /// The capability snapshot: name → file.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capabilities: BTreeMap<String, CapabilityEntry>,
    /// Stored feature labels (derived browse metadata, §15.8), when computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_labels: Option<super::labels::FeatureLabelsEntry>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Which on-disk shape a VINDEX3 container has (seed 002 §5.3, §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerShape {
    /// `system_graph.json` + plain tensor-table segments.
    Graph,
    /// `moe_manifest.json` + LYRW v2 bank files (executed through [`super::bank_reader`]).
    Bank,
}

impl ContainerShape {
    pub fn name(self) -> &'static str {
        match self {
            ContainerShape::Graph => "graph",
            ContainerShape::Bank => "bank",
        }
    }
}

/// What `index.json.version` says, judged before anything else is read.
fn judge_version(path: &Path, root: &Value) -> Result<u32> {
    let supported = "this build reads VINDEX3 containers (index.json version 3–4)";
    let v = match root.get("version") {
        None => {
            return Err(StorageError::Unsupported(format!(
                "{}: index.json has no \"version\" field; {supported}",
                path.display()
            )))
        }
        Some(v) => v,
    };
    let n = match v.as_u64() {
        Some(n) => n,
        None => {
            return Err(StorageError::Unsupported(format!(
                "{}: index.json \"version\" is {v} ({}), not an integer; {supported}",
                path.display(),
                json_kind(v)
            )))
        }
    };
    if INDEX_SCHEMAS_READ.contains(&n) {
        return Ok(n as u32);
    }
    if n == 1 || n == 2 {
        return Err(StorageError::Unsupported(format!(
            "{}: index.json version {n} is a VINDEX2 container; not supported yet: VINDEX2 \
             (a cross-generation container is refused; {supported})",
            path.display()
        )));
    }
    Err(StorageError::Unsupported(format!(
        "{}: index.json version {n} is unknown; {supported} (1–2 would be VINDEX2)",
        path.display()
    )))
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a non-integer number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Read a small JSON file with a size cap: a regular file only (a FIFO is refused before
/// it is opened for reading), strict JSON (a repeated key is refused); names the file on
/// every failure.
pub(crate) fn read_json(path: &Path, max: u64) -> Result<Value> {
    let what = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "JSON file".into());
    let bytes = crate::fsutil::read_capped(path, &what, max)?;
    crate::json_strict::parse(&bytes).map_err(|e| StorageError::Format {
        path: path.to_path_buf(),
        offset: 0,
        field: format!("JSON (line {}, column {})", e.line(), e.column()),
        message: e.to_string(),
    })
}

/// Read `dir/index.json`, judge its version, and parse the envelope. Refuses VINDEX2,
/// unknown or missing versions by name. Reads nothing but `index.json`.
pub fn read_index(dir: &Path) -> Result<(Vindex3Index, ContainerShape)> {
    let path = dir.join("index.json");
    if std::fs::symlink_metadata(&path).is_err() {
        return Err(StorageError::Invalid(format!(
            "{}: not a container (no index.json)",
            dir.display()
        )));
    }
    let path = crate::fsutil::resolve_inside(dir, "index.json", &path, "index.json")?;
    let root = read_json(&path, MAX_INDEX_BYTES)?;
    if !root.is_object() {
        return Err(StorageError::Format {
            path,
            offset: 0,
            field: "root".into(),
            message: "index.json is not a JSON object".into(),
        });
    }
    judge_version(&path, &root)?;
    let index: Vindex3Index = serde_json::from_value(root).map_err(|e| StorageError::Format {
        path: path.clone(),
        offset: 0,
        field: "Vindex3Index".into(),
        message: e.to_string(),
    })?;
    let shape = match (&index.system_graph, &index.moe_manifest) {
        (Some(_), _) => ContainerShape::Graph,
        (None, Some(_)) => ContainerShape::Bank,
        (None, None) => {
            return Err(StorageError::Format {
                path,
                offset: 0,
                field: "system_graph / moe_manifest".into(),
                message: "a VINDEX3 container carries at least one of system_graph and \
                          moe_manifest; this index names neither"
                    .into(),
            })
        }
    };
    Ok((index, shape))
}

/// The generation and shape of the container at `dir`: `Ok(shape)` for a VINDEX3
/// container this build recognises, an error naming what was found otherwise.
pub fn detect(dir: &Path) -> Result<ContainerShape> {
    read_index(dir).map(|(_, s)| s)
}

/// Resolve a container-relative path from the index or graph: plain relative components
/// only, and after following symlinks still inside the container (a hostile index or a
/// planted symlink must not reach outside it). The target must exist.
pub(crate) fn resolve(dir: &Path, rel: &str, field: &str) -> Result<PathBuf> {
    crate::fsutil::resolve_inside(dir, rel, &dir.join("index.json"), field)
}
