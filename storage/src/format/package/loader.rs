//! Loading one stage of a layer package: select the fragments of a layer range, check them,
//! map only those, and build a [`Model`] holding just that range.
//!
//! Order (seed 000 "Layer Selection" and "Consumer Validation"): parse and validate the
//! manifest; check the requested range; check every selected artifact and every declared
//! projector on disk (safe path, regular file, size); verify the selected artifacts'
//! SHA-256 (always for `hf://`, for local folders unless turned off); only then map the
//! fragments. Selected: `shared.metadata`; `shared.embeddings` when the stage owns the input
//! boundary (layer 0) or owns the output boundary of a model whose head is tied to the
//! embedding; the layers in range; `shared.output` when the stage owns the last layer.

use std::path::{Path, PathBuf};

use super::integrity::{self, ArtifactId, Verified};
use super::manifest::{self, Artifact, Manifest};
use super::validate;
use crate::error::Result;
use crate::format::gguf::GgufFile;
use crate::import::gguf::PartialSpan;
use crate::model::Model;

/// Whether selected artifacts are hashed before use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyMode {
    /// Hash every selected artifact (using the checksum cache in this folder if given).
    Sha256 { cache_dir: Option<PathBuf> },
    /// Size and path checks only (local development folders, by explicit choice).
    SizeOnly,
}

impl VerifyMode {
    /// The default: hash, with the cache under `$LQL_HOME/package-verify` when it can be
    /// located. `LQL_PACKAGE_VERIFY=0` (or `false`) turns hashing off for local folders.
    pub fn default_local() -> VerifyMode {
        match std::env::var("LQL_PACKAGE_VERIFY") {
            Ok(v) if v == "0" || v.eq_ignore_ascii_case("false") => VerifyMode::SizeOnly,
            _ => VerifyMode::hashed(),
        }
    }

    /// Hash, with the default checksum cache.
    pub fn hashed() -> VerifyMode {
        VerifyMode::Sha256 {
            cache_dir: super::hf::lql_home().ok().map(|h| h.join("package-verify")),
        }
    }
}

/// Which part of the model a loaded stage holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageSpan {
    /// First and last layer (inclusive).
    pub first: usize,
    pub last: usize,
    /// The model's layer count.
    pub n_layers: usize,
    /// Owns the input boundary (tokens → embedding).
    pub input: bool,
    /// Owns the output boundary (final norm and head).
    pub output: bool,
}

impl StageSpan {
    /// Whether the stage is the whole model.
    pub fn is_whole(&self) -> bool {
        self.input && self.output
    }
}

/// One selected artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    /// `metadata`, `embeddings`, `layer` or `output`.
    pub role: &'static str,
    pub layer_index: Option<u64>,
    pub artifact: Artifact,
    /// Where it is on disk (after symlink resolution inside the root).
    pub file: PathBuf,
    /// How its checksum was established; `None` when hashing was off.
    pub verified: Option<Verified>,
}

/// A loaded stage.
#[derive(Debug, Clone)]
pub struct PackageModel {
    pub model: Model,
    pub manifest: Manifest,
    /// SHA-256 of `model-package.json` (the package's identity).
    pub manifest_sha256: String,
    pub span: StageSpan,
    /// The selected artifacts, in selection order: exactly the files mapped.
    pub selected: Vec<Selected>,
    pub root: PathBuf,
}

/// Load layers `layers` (inclusive; `None`: all) of the package in `dir`.
pub fn open_package(
    dir: &Path,
    layers: Option<(u64, u64)>,
    verify: &VerifyMode,
) -> Result<PackageModel> {
    let loaded = manifest::read(dir)?;
    let m = loaded.manifest;
    validate::manifest(&m)?;
    let (first, last) = layers.unwrap_or((0, m.layer_count - 1));
    validate::layer_range(&m, first, last)?;
    let input = first == 0;
    let output = last + 1 == m.layer_count;

    // Every declared projector: safe, a file, the declared size (none is mapped).
    for p in &m.projectors {
        validate::artifact_file(dir, "mmproj projector", &p.artifact)?;
    }
    let mut wanted: Vec<(&'static str, Option<u64>, &Artifact)> =
        vec![("metadata", None, &m.shared.metadata)];
    if input {
        wanted.push(("embeddings", None, &m.shared.embeddings));
    }
    for i in first..=last {
        let l = m.layer(i).ok_or_else(|| {
            super::refuse(
                "missing_layer",
                "model-package.json",
                format!("package is missing layer {i}"),
            )
        })?;
        wanted.push(("layer", Some(i), &l.artifact));
    }
    if output {
        wanted.push(("output", None, &m.shared.output));
    }
    let mut selected = Vec::with_capacity(wanted.len() + 1);
    for (role, li, a) in &wanted {
        selected.push(check(dir, role, *li, a)?);
    }
    for s in &mut selected {
        crate::interrupt::check(|| format!("package artifact {}", s.artifact.path))?;
        s.verified = hash(s, &loaded.sha256, verify)?;
    }
    // Map, in selection order. The output fragment tells whether the head is tied to the
    // embedding; if it is and the stage lacks the embedding, it is selected too.
    let mut files = Vec::with_capacity(selected.len() + 1);
    for s in &selected {
        files.push(GgufFile::open(&s.file)?);
    }
    let tied = output
        && files
            .last()
            .is_some_and(|f| f.tensor_info("output.weight").is_none());
    let mut embeddings = input;
    if tied && !input {
        let mut s = check(dir, "embeddings", None, &m.shared.embeddings)?;
        s.verified = hash(&s, &loaded.sha256, verify)?;
        files.push(GgufFile::open(&s.file)?);
        selected.push(s);
        embeddings = true;
    }
    let span = PartialSpan {
        first: first as usize,
        last: last as usize,
        embeddings,
        output,
        declared_layers: m.layer_count as usize,
    };
    let model = crate::import::gguf::from_parts(&files[0], &files, dir.to_path_buf(), Some(span))?;
    if model.surface.n_layers as u64 != m.layer_count {
        return Err(super::refuse(
            "layer_count",
            "model-package.json",
            format!(
                "layer_count {} differs from the fragments' block count {}",
                m.layer_count, model.surface.n_layers
            ),
        ));
    }
    Ok(PackageModel {
        model,
        manifest: m.clone(),
        manifest_sha256: loaded.sha256,
        span: StageSpan {
            first: first as usize,
            last: last as usize,
            n_layers: m.layer_count as usize,
            input,
            output,
        },
        selected,
        root: dir.to_path_buf(),
    })
}

fn check(dir: &Path, role: &'static str, li: Option<u64>, a: &Artifact) -> Result<Selected> {
    let label = match li {
        Some(i) => format!("layer {i}"),
        None => role.to_string(),
    };
    let file = validate::artifact_file(dir, &label, a)?;
    Ok(Selected {
        role,
        layer_index: li,
        artifact: a.clone(),
        file,
        verified: None,
    })
}

fn hash(s: &Selected, manifest_sha: &str, verify: &VerifyMode) -> Result<Option<Verified>> {
    match verify {
        VerifyMode::SizeOnly => Ok(None),
        VerifyMode::Sha256 { cache_dir } => integrity::verify(
            &s.file,
            manifest_sha,
            &ArtifactId {
                role: s.role,
                layer_index: s.layer_index,
                artifact: &s.artifact,
            },
            cache_dir.as_deref(),
        )
        .map(Some),
    }
}

/// Metadata-only inspection (seed 000, "Consumer Validation"): the manifest, validated,
/// and the shared metadata fragment checked (and hashed under `verify`); no layer range.
pub fn open_metadata(
    dir: &Path,
    verify: &VerifyMode,
) -> Result<(manifest::LoadedManifest, Selected)> {
    let loaded = manifest::read(dir)?;
    validate::manifest(&loaded.manifest)?;
    let mut s = check(dir, "metadata", None, &loaded.manifest.shared.metadata)?;
    s.verified = hash(&s, &loaded.sha256, verify)?;
    // It must be the GGUF it claims to be.
    GgufFile::open(&s.file)?;
    Ok((loaded, s))
}

impl PackageModel {
    /// The selected artifacts' repository-relative paths, in selection order.
    pub fn selected_paths(&self) -> Vec<&str> {
        self.selected
            .iter()
            .map(|s| s.artifact.path.as_str())
            .collect()
    }
}
