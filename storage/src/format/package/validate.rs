//! The manifest rules and the consumer validation of seed 000, each a named check.
//!
//! [`manifest`] checks what the manifest alone can say (ABI, identity, artifact entries,
//! layer coverage, projector kinds, generation maps); [`artifact_file`] checks one selected
//! artifact on disk (a safe relative path that stays inside the root through symlinks, a
//! regular file, the declared size). Every refusal is a [`crate::StorageError::Package`]
//! whose `check` is one of the names below, raised before any tensor byte is read.
//!
//! | check | rule |
//! |---|---|
//! | `manifest_present`, `manifest_size`, `manifest_depth`, `manifest_json`, `manifest_fields` | the file exists, is at most 16 MiB, nests at most 32 deep, parses |
//! | `schema_version`, `format` | `1`, `layer-package` |
//! | `abi_version` | same major as the runtime, minor no greater |
//! | `model_id`, `source_identity`, `source_sha256` | non-empty identity, hex digests |
//! | `artifact_path` | non-empty, relative, no `..`/`.`/empty component, no symlink out of the root |
//! | `artifact_sha256_format`, `artifact_bytes`, `tensor_bytes` | entry consistency |
//! | `layer_count`, `layer_index_range`, `duplicate_layer`, `missing_layer` | one entry per layer |
//! | `projector_kind` | non-empty and `mmproj` |
//! | `artifact_file`, `artifact_size`, `artifact_sha256` | on disk: a file, the declared size and hash |
//! | `layer_range` | a requested range is non-empty and inside the model |

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::manifest::{Artifact, Manifest};
use super::{refuse, RUNTIME_ABI};
use crate::error::{Result, StorageError};

/// Check everything the manifest alone can say.
pub fn manifest(m: &Manifest) -> Result<()> {
    abi(&m.skippy_abi_version)?;
    if m.model_id.trim().is_empty() {
        return Err(refuse(
            "model_id",
            "model-package.json",
            "package manifest model_id must not be empty",
        ));
    }
    identity(m)?;
    for (role, a) in [
        ("metadata", &m.shared.metadata),
        ("embeddings", &m.shared.embeddings),
        ("output", &m.shared.output),
    ] {
        entry(role, a)?;
    }
    layers(m)?;
    for p in &m.projectors {
        if p.kind.trim().is_empty() {
            return Err(refuse(
                "projector_kind",
                p.artifact.path.clone(),
                "package projector kind must not be empty",
            ));
        }
        if p.kind != "mmproj" {
            return Err(refuse(
                "projector_kind",
                p.artifact.path.clone(),
                format!("unsupported package projector kind {:?}", p.kind),
            ));
        }
        entry("mmproj projector", &p.artifact)?;
    }
    if let Some(g) = &m.generation {
        super::generation::validate(g, m.layer_count)?;
    }
    Ok(())
}

/// The ABI rule: same major as the runtime, minor no greater; patch ignored (but must parse).
pub fn abi(v: &str) -> Result<()> {
    let bad = |msg: String| refuse("abi_version", "model-package.json", msg);
    let mut it = v.trim().split('.');
    let part = |s: Option<&str>, what: &str| -> Result<Option<u64>> {
        match s {
            None => Ok(None),
            Some(s) => s
                .parse::<u64>()
                .map(Some)
                .map_err(|_| bad(format!("parse package ABI {what} version in {v:?}"))),
        }
    };
    let major = part(it.next().filter(|s| !s.is_empty()), "major")?
        .ok_or_else(|| bad("package ABI version is missing a major version".into()))?;
    let minor = part(it.next(), "minor")?.ok_or_else(|| {
        bad(format!(
            "package ABI version {v:?} is missing a minor version"
        ))
    })?;
    part(it.next(), "patch")?;
    if it.next().is_some() {
        return Err(bad(format!(
            "package ABI version {v:?} has more than three parts"
        )));
    }
    if major != RUNTIME_ABI.0 || minor > RUNTIME_ABI.1 {
        return Err(bad(format!(
            "package ABI version {v} is not compatible with runtime ABI {}",
            super::runtime_abi_string()
        )));
    }
    Ok(())
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn identity(m: &Manifest) -> Result<()> {
    let s = &m.source_model;
    let bad = |check, msg: &str| refuse(check, "model-package.json", msg.to_string());
    let blank = |o: &Option<String>| o.as_ref().is_some_and(|v| v.trim().is_empty());
    if s.path.trim().is_empty()
        || blank(&s.repo)
        || blank(&s.revision)
        || blank(&s.primary_file)
        || blank(&s.canonical_ref)
        || blank(&s.distribution_id)
    {
        return Err(bad(
            "source_identity",
            "package manifest source_model identity fields must not be empty",
        ));
    }
    if !is_hex64(&s.sha256) {
        return Err(bad(
            "source_sha256",
            "source_model sha256 must be a hex SHA-256 digest",
        ));
    }
    for f in &s.files {
        if f.path.trim().is_empty() || f.sha256.as_ref().is_some_and(|h| h.trim().is_empty()) {
            return Err(bad(
                "source_identity",
                "package manifest source_model files must not contain empty path or sha256",
            ));
        }
        if f.sha256.as_ref().is_some_and(|h| !is_hex64(h)) {
            return Err(bad(
                "source_sha256",
                "source_model file sha256 must be a hex SHA-256 digest",
            ));
        }
    }
    Ok(())
}

/// A repository-relative path that names something inside the root: non-empty, not
/// absolute, every `/`-separated component a plain name (no `..`, `.`, empty, backslash or
/// NUL).
pub fn safe_relative(role: &str, p: &str) -> Result<()> {
    let bad = |msg: String| refuse("artifact_path", p.to_string(), format!("{role}: {msg}"));
    if p.is_empty() {
        return Err(bad("manifest file path is empty".into()));
    }
    if p.starts_with('/') || Path::new(p).is_absolute() {
        return Err(bad(format!("absolute path {p:?} is not allowed")));
    }
    for c in p.split('/') {
        if c.is_empty() || c == "." || c == ".." || c.contains('\\') || c.contains('\0') {
            return Err(bad(format!(
                "manifest file path must be a safe relative path: {p:?}"
            )));
        }
    }
    Ok(())
}

/// The rules of one artifact entry.
pub fn entry(role: &str, a: &Artifact) -> Result<()> {
    safe_relative(role, &a.path)?;
    let bad = |check, msg: String| refuse(check, a.path.clone(), format!("{role}: {msg}"));
    if !is_hex64(&a.sha256) {
        return Err(bad(
            "artifact_sha256_format",
            format!("package {role} artifact sha256 must be a hex SHA-256 digest"),
        ));
    }
    if a.artifact_bytes == 0 {
        return Err(bad(
            "artifact_bytes",
            format!("package {role} artifact_bytes must be greater than zero"),
        ));
    }
    if a.tensor_count == 0 && a.tensor_bytes != 0 {
        return Err(bad(
            "tensor_bytes",
            format!("package {role} tensor_bytes must be zero when tensor_count is zero"),
        ));
    }
    if a.tensor_count > 0 && a.tensor_bytes == 0 {
        return Err(bad(
            "tensor_bytes",
            format!(
                "package {role} tensor_bytes must be greater than zero when tensors are present"
            ),
        ));
    }
    if a.tensor_bytes > a.artifact_bytes {
        return Err(bad(
            "tensor_bytes",
            format!(
                "tensor_bytes {} exceed artifact_bytes {}",
                a.tensor_bytes, a.artifact_bytes
            ),
        ));
    }
    Ok(())
}

fn layers(m: &Manifest) -> Result<()> {
    let n = m.layer_count;
    if n == 0 || n > super::MAX_LAYERS {
        return Err(refuse(
            "layer_count",
            "model-package.json",
            format!(
                "layer_count {n} must be between 1 and {}",
                super::MAX_LAYERS
            ),
        ));
    }
    let mut seen = BTreeSet::new();
    let mut dups = BTreeSet::new();
    for (i, l) in m.layers.iter().enumerate() {
        crate::interrupt::every(i as u64, || "model-package.json: layers".to_string())?;
        if l.layer_index >= n {
            return Err(refuse(
                "layer_index_range",
                l.artifact.path.clone(),
                format!(
                    "package layer index {} exceeds layer_count {n}",
                    l.layer_index
                ),
            ));
        }
        entry(&format!("layer {}", l.layer_index), &l.artifact)?;
        if !seen.insert(l.layer_index) {
            dups.insert(l.layer_index);
        }
    }
    if !dups.is_empty() {
        return Err(refuse(
            "duplicate_layer",
            "model-package.json",
            format!("package manifest contains duplicate layers: {dups:?}"),
        ));
    }
    if let Some(missing) = (0..n).find(|i| !seen.contains(i)) {
        return Err(refuse(
            "missing_layer",
            "model-package.json",
            format!("package is missing layer {missing} (layers must cover 0..{n} exactly once)"),
        ));
    }
    Ok(())
}

/// Check a requested inclusive layer range against the manifest.
pub fn layer_range(m: &Manifest, first: u64, last: u64) -> Result<()> {
    if first > last || last >= m.layer_count {
        return Err(refuse(
            "layer_range",
            "model-package.json",
            format!(
                "layers {first}-{last} are not a non-empty range inside the package's {} layers",
                m.layer_count
            ),
        ));
    }
    Ok(())
}

/// The on-disk path of artifact `a` (role `role`) under `root`, after checking that it is a
/// safe relative path, that no component is a symlink leading out of the root, that it is a
/// regular file and that its length is `artifact_bytes`. Reads no file contents.
pub fn artifact_file(root: &Path, role: &str, a: &Artifact) -> Result<PathBuf> {
    safe_relative(role, &a.path)?;
    let canon_root = root.canonicalize().map_err(|e| StorageError::io(root, e))?;
    let full = canon_root.join(&a.path);
    let meta = match std::fs::symlink_metadata(&full) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse(
                "artifact_file",
                a.path.clone(),
                format!("{role}: the artifact is missing"),
            ))
        }
        Err(e) => return Err(StorageError::io(&full, e)),
    };
    let resolved = if meta.file_type().is_symlink() || has_symlink_parent(&canon_root, &a.path) {
        let target = full.canonicalize().map_err(|_| {
            refuse(
                "artifact_path",
                a.path.clone(),
                format!("{role}: a symlink that does not resolve"),
            )
        })?;
        if !target.starts_with(&canon_root) {
            return Err(refuse(
                "artifact_path",
                a.path.clone(),
                format!("{role}: a symlink leading out of the package root"),
            ));
        }
        target
    } else {
        full
    };
    let meta = std::fs::metadata(&resolved).map_err(|e| StorageError::io(&resolved, e))?;
    if !meta.is_file() {
        return Err(refuse(
            "artifact_file",
            a.path.clone(),
            format!("{role}: package part is not a file"),
        ));
    }
    if meta.len() != a.artifact_bytes {
        return Err(refuse(
            "artifact_size",
            a.path.clone(),
            format!(
                "{role}: package part size mismatch: expected {}, got {}",
                a.artifact_bytes,
                meta.len()
            ),
        ));
    }
    Ok(resolved)
}

fn has_symlink_parent(root: &Path, rel: &str) -> bool {
    let mut p = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for c in &parts[..parts.len().saturating_sub(1)] {
        p.push(c);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            return true;
        }
    }
    false
}
