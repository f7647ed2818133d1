//! `VERIFY "dir" [AGAINST "source.gguf"]` on a layer package: the full consumer validation
//! (every artifact and projector: path, file, size, SHA-256, tensor count and bytes as the
//! manifest declares) and, against a source, the writer-side check of reference §9: every
//! owned source tensor appears exactly once across the fragments with identical bytes, no
//! fragment holds a tensor the source lacks, and the source's hash and layer count match.
//! The result is one row per check.

use std::collections::BTreeMap;
use std::path::Path;

use super::classify::{role, SliceRole};
use super::integrity::{self, ArtifactId};
use super::manifest::{self, Artifact};
use super::validate;
use crate::error::{Result, StorageError};
use crate::format::gguf::GgufFile;

/// One row of the verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRow {
    pub check: String,
    pub artifact: String,
    /// `ok` or `failed`.
    pub status: &'static str,
    pub detail: String,
}

fn row(check: &str, artifact: &str, ok: bool, detail: String) -> CheckRow {
    CheckRow {
        check: check.into(),
        artifact: artifact.into(),
        status: if ok { "ok" } else { "failed" },
        detail,
    }
}

fn refused(e: StorageError) -> CheckRow {
    match e {
        StorageError::Package {
            check,
            artifact,
            message,
        } => row(check, &artifact, false, message),
        other => row("io", "", false, other.to_string()),
    }
}

/// Verify the package in `dir`, against `source` when given. Never fails on a bad package:
/// a failed check is a row; the first refusal of the manifest ends the list.
pub fn verify(dir: &Path, source: Option<&Path>) -> Result<Vec<CheckRow>> {
    let mut rows = Vec::new();
    let loaded = match manifest::read(dir) {
        Ok(l) => l,
        Err(e) => return Ok(vec![refused(e)]),
    };
    let m = &loaded.manifest;
    if let Err(e) = validate::manifest(m) {
        return Ok(vec![refused(e)]);
    }
    rows.push(row(
        "manifest",
        "model-package.json",
        true,
        format!(
            "schema {}, {} layers, ABI {}, sha256 {}",
            m.schema_version, m.layer_count, m.skippy_abi_version, loaded.sha256
        ),
    ));
    let mut arts: Vec<(String, &'static str, Option<u64>, &Artifact)> = vec![
        ("metadata".into(), "metadata", None, &m.shared.metadata),
        (
            "embeddings".into(),
            "embeddings",
            None,
            &m.shared.embeddings,
        ),
        ("output".into(), "output", None, &m.shared.output),
    ];
    for l in &m.layers {
        arts.push((
            format!("layer {}", l.layer_index),
            "layer",
            Some(l.layer_index),
            &l.artifact,
        ));
    }
    for p in &m.projectors {
        arts.push(("mmproj projector".into(), "projector", None, &p.artifact));
    }
    let mut opened: Vec<(&'static str, &Artifact, Option<GgufFile>)> = Vec::new();
    for (label, role_name, li, a) in &arts {
        crate::interrupt::check(|| format!("package artifact {}", a.path))?;
        let file = match validate::artifact_file(dir, label, a) {
            Ok(f) => f,
            Err(e) => {
                rows.push(refused(e));
                continue;
            }
        };
        let id = ArtifactId {
            role: role_name,
            layer_index: *li,
            artifact: a,
        };
        match integrity::verify(&file, &loaded.sha256, &id, None) {
            Ok(_) => rows.push(row(
                "artifact_sha256",
                &a.path,
                true,
                format!("{} bytes, sha256 matches", a.artifact_bytes),
            )),
            Err(e) => {
                rows.push(refused(e));
                continue;
            }
        }
        let g = GgufFile::open(&file)?;
        let count = g.tensors().len() as u64;
        let bytes: u64 = g.tensors().iter().map(|t| t.nbytes).sum();
        rows.push(row(
            "tensor_count",
            &a.path,
            count == a.tensor_count && bytes == a.tensor_bytes,
            format!(
                "{count} tensors of {bytes} bytes; manifest says {} of {}",
                a.tensor_count, a.tensor_bytes
            ),
        ));
        opened.push((role_name, a, (*role_name != "projector").then_some(g)));
    }
    let Some(source) = source else {
        return Ok(rows);
    };
    let src = GgufFile::open(source)?;
    let sha = integrity::sha256_file(source)?;
    rows.push(row(
        "source_sha256",
        &source.display().to_string(),
        sha.eq_ignore_ascii_case(&m.source_model.sha256),
        format!("source {sha}, manifest {}", m.source_model.sha256),
    ));
    let src_layers = src
        .tensors()
        .iter()
        .filter_map(|t| match role(&t.name) {
            SliceRole::Layer(i) => Some(i + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    rows.push(row(
        "layer_count",
        "model-package.json",
        src_layers == m.layer_count,
        format!("source {src_layers}, manifest {}", m.layer_count),
    ));
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, a, g) in &opened {
        let Some(g) = g else { continue };
        for (i, t) in g.tensors().iter().enumerate() {
            crate::interrupt::every(i as u64, || format!("{}: tensors", a.path))?;
            let Some(s) = src.tensor_info(&t.name) else {
                rows.push(row(
                    "missing_from_source",
                    &a.path,
                    false,
                    format!("tensor {} is not in the source", t.name),
                ));
                continue;
            };
            if s.dtype != t.dtype || s.shape != t.shape || src.view(s).bytes != g.view(t).bytes {
                rows.push(row(
                    "tensor_bytes",
                    &a.path,
                    false,
                    format!("tensor {} differs from the source", t.name),
                ));
            }
            if role(&t.name).is_owned() {
                *seen.entry(s.name.as_str()).or_default() += 1;
            }
        }
    }
    let owned: Vec<&str> = src
        .tensors()
        .iter()
        .filter(|t| role(&t.name).is_owned())
        .map(|t| t.name.as_str())
        .collect();
    let missing: Vec<&str> = owned
        .iter()
        .copied()
        .filter(|n| !seen.contains_key(n))
        .collect();
    let dup: Vec<&str> = seen
        .iter()
        .filter(|(_, &c)| c > 1)
        .map(|(n, _)| *n)
        .collect();
    rows.push(row(
        "owned_tensors",
        "package",
        missing.is_empty() && dup.is_empty(),
        format!(
            "{} owned source tensors; missing {:?}; duplicated {:?}",
            owned.len(),
            missing,
            dup
        ),
    ));
    Ok(rows)
}
