//! `model-package.json`: the manifest types (schema 1) and strict parsing.
//!
//! Parsing never trusts the file: its size is checked against [`MAX_MANIFEST_BYTES`] before
//! a byte is read, its nesting is measured by a scan before any JSON parser runs (so a
//! document nested 100 000 deep is refused by name, not by a stack overflow), the schema
//! version and format are checked before the typed parse, and unknown fields are ignored
//! (schema-1 changes are additive).

use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{
    refuse, FORMAT, MANIFEST_NAME, MAX_MANIFEST_BYTES, MAX_MANIFEST_DEPTH, SCHEMA_VERSION,
};
use crate::error::{Result, StorageError};

/// One artifact (a file of the package).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Repository-relative path.
    pub path: String,
    pub tensor_count: u64,
    /// Sum of the tensors' encoded sizes, without padding.
    pub tensor_bytes: u64,
    /// The file's exact length.
    pub artifact_bytes: u64,
    /// SHA-256 of the whole file, 64 hex digits (either case).
    pub sha256: String,
}

/// A `layers[]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerArtifact {
    pub layer_index: u64,
    #[serde(flatten)]
    pub artifact: Artifact,
}

/// A `projectors[]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectorArtifact {
    pub kind: String,
    #[serde(flatten)]
    pub artifact: Artifact,
}

/// The shared artifacts every package has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shared {
    pub metadata: Artifact,
    pub embeddings: Artifact,
    pub output: Artifact,
}

/// One file of the source model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFile {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// The source artifact the package was built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceModel {
    pub path: String,
    pub sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canonical_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<SourceFile>,
}

/// `model-package.json`, schema 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema_version: u64,
    pub model_id: String,
    pub source_model: SourceModel,
    pub format: String,
    pub layer_count: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_width: Option<u64>,
    pub shared: Shared,
    /// Package-owned generation defaults, validated by [`super::generation`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<serde_json::Value>,
    pub layers: Vec<LayerArtifact>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projectors: Vec<ProjectorArtifact>,
    pub skippy_abi_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at_unix_secs: Option<u64>,
}

/// A parsed manifest and the SHA-256 of its bytes (the package's identity).
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedManifest {
    pub manifest: Manifest,
    pub sha256: String,
}

/// Read and parse `dir/model-package.json` (size cap first; then [`parse`]).
pub fn read(dir: &Path) -> Result<LoadedManifest> {
    let path = dir.join(MANIFEST_NAME);
    let meta = std::fs::symlink_metadata(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            refuse(
                "manifest_present",
                MANIFEST_NAME,
                format!("{} has no {MANIFEST_NAME}", dir.display()),
            )
        } else {
            StorageError::io(&path, e)
        }
    })?;
    if !meta.is_file() {
        return Err(refuse(
            "manifest_present",
            MANIFEST_NAME,
            "is not a regular file (symlinks are not followed)",
        ));
    }
    if meta.len() > MAX_MANIFEST_BYTES {
        return Err(refuse(
            "manifest_size",
            MANIFEST_NAME,
            format!(
                "{} bytes is more than the {MAX_MANIFEST_BYTES}-byte limit",
                meta.len()
            ),
        ));
    }
    let f = std::fs::File::open(&path).map_err(|e| StorageError::io(&path, e))?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(MAX_MANIFEST_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| StorageError::io(&path, e))?;
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(refuse(
            "manifest_size",
            MANIFEST_NAME,
            "grew past the size limit while being read",
        ));
    }
    let manifest = parse(&bytes)?;
    Ok(LoadedManifest {
        manifest,
        sha256: super::integrity::sha256_hex(&bytes),
    })
}

/// Parse manifest bytes: size and depth caps, schema version, format, then the typed
/// fields. Identity and artifact rules are [`super::validate::manifest`]'s job.
pub fn parse(bytes: &[u8]) -> Result<Manifest> {
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(refuse(
            "manifest_size",
            MANIFEST_NAME,
            format!(
                "{} bytes is more than the {MAX_MANIFEST_BYTES}-byte limit",
                bytes.len()
            ),
        ));
    }
    check_depth(bytes)?;
    // A repeated key is refused (serde_json would keep the last one silently, so two
    // readers could see two manifests).
    let value: serde_json::Value = crate::json_strict::parse(bytes)
        .map_err(|e| refuse("manifest_json", MANIFEST_NAME, format!("not JSON: {e}")))?;
    let obj = value.as_object().ok_or_else(|| {
        refuse(
            "manifest_json",
            MANIFEST_NAME,
            "the manifest must be a JSON object",
        )
    })?;
    match obj.get("schema_version").and_then(|v| v.as_u64()) {
        Some(SCHEMA_VERSION) => {}
        other => {
            return Err(refuse(
                "schema_version",
                MANIFEST_NAME,
                format!(
                    "unsupported package manifest schema_version {}; this runtime reads {SCHEMA_VERSION}",
                    other.map_or_else(
                        || obj
                            .get("schema_version")
                            .map_or("(missing)".to_string(), |v| v.to_string()),
                        |n| n.to_string()
                    )
                ),
            ))
        }
    }
    match obj.get("format").and_then(|v| v.as_str()) {
        Some(FORMAT) => {}
        other => {
            return Err(refuse(
                "format",
                MANIFEST_NAME,
                format!("package manifest format must be {FORMAT}, found {other:?}"),
            ))
        }
    }
    serde_json::from_value(value)
        .map_err(|e| refuse("manifest_fields", MANIFEST_NAME, e.to_string()))
}

/// Refuse JSON nested deeper than [`MAX_MANIFEST_DEPTH`], by a scan that allocates nothing.
fn check_depth(bytes: &[u8]) -> Result<()> {
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate() {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_MANIFEST_DEPTH {
                    return Err(refuse(
                        "manifest_depth",
                        MANIFEST_NAME,
                        format!("nesting deeper than {MAX_MANIFEST_DEPTH} levels at byte {i}"),
                    ));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

impl Manifest {
    /// The manifest as written: pretty JSON with a trailing newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a manifest serialises");
        s.push('\n');
        s
    }

    /// The `layers[]` entry of layer `i`.
    pub fn layer(&self, i: u64) -> Option<&LayerArtifact> {
        self.layers.iter().find(|l| l.layer_index == i)
    }
}
