//! Writing a layer package from one GGUF file, exactly as the reference slicer lays out
//! its fragments (reference §3–4, §6).
//!
//! Every fragment copies all source metadata in source order, keeps (or sets to 32)
//! `general.alignment`, adds the five `skippy.slice.*` keys, and holds the selected tensors
//! in source order with their bytes copied unchanged and zero padding after each. Files are
//! written to temporary names created exclusively in the package folder, synced and renamed;
//! each is reopened and compared with the plan (names, order and bytes) before it is
//! recorded. The README comes next and `model-package.json` last, so a crash never leaves a
//! folder that opens as a package.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::classify::{role, Slice, SliceRole};
use super::integrity::{sha256_file, sha256_hex};
use super::manifest::{
    Artifact, LayerArtifact, Manifest, ProjectorArtifact, Shared, SourceFile, SourceModel,
};
use super::{refuse, runtime_abi_string, FORMAT, MANIFEST_NAME, SCHEMA_VERSION};
use crate::error::{Result, StorageError};
use crate::format::gguf::{GgufFile, GgufWriter, MetaValue};

/// What to write.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// The source GGUF file.
    pub source: PathBuf,
    /// The package folder (created; must be absent or empty).
    pub out_dir: PathBuf,
    /// The model coordinate shown to users, `org/repo[:distribution]`.
    pub model_id: String,
    /// The source's revision (commit or tag).
    pub source_revision: String,
    /// Projector GGUFs to copy and declare (`kind: "mmproj"`).
    pub projectors: Vec<PathBuf>,
    /// The name the source artifact is recorded under when `source` is a staging copy that
    /// will not outlive the write (COMPILE … INTO PACKAGE slices a GGUF exported under a
    /// temporary name): `source_model.path`, `primary_file` and `files[0].path` then carry
    /// this name (the file COMPILE … INTO GGUF of the same state writes, byte for byte
    /// the bytes `sha256` names) instead of a path that exists nowhere after the write.
    pub recorded_as: Option<String>,
}

/// What was written.
#[derive(Debug, Clone)]
pub struct Written {
    pub manifest: Manifest,
    pub manifest_sha256: String,
}

/// `org/repo[:dist]` split into repo and distribution, or `None` if not a coordinate.
pub fn parse_coordinate(id: &str) -> Option<(String, Option<String>)> {
    let (repo, dist) = match id.rsplit_once(':') {
        Some((r, d)) => (r, Some(d)),
        None => (id, None),
    };
    let (org, name) = repo.split_once('/')?;
    let ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    if !ok(org) || !ok(name) || dist.is_some_and(|d| !ok(d)) {
        return None;
    }
    Some((repo.to_string(), dist.map(str::to_string)))
}

fn invalid(check: &'static str, msg: String) -> StorageError {
    refuse(check, "write", msg)
}

/// Write the package described by `opts`.
pub fn write_package(opts: &WriteOptions) -> Result<Written> {
    let (repo, dist) = parse_coordinate(&opts.model_id).ok_or_else(|| {
        invalid(
            "model_id",
            format!(
                "MODEL_ID must be a model coordinate like org/repo:Q4_K_M, got {:?}",
                opts.model_id
            ),
        )
    })?;
    if opts.source_revision.trim().is_empty() {
        return Err(invalid(
            "source_identity",
            "a local source needs SOURCE_REVISION (the source's commit or tag)".into(),
        ));
    }
    for p in &opts.projectors {
        if !p.is_file() {
            return Err(invalid(
                "projector",
                format!("projector is not a file: {}", p.display()),
            ));
        }
    }
    let target = &opts.out_dir;
    match std::fs::symlink_metadata(target) {
        Ok(m) if m.file_type().is_symlink() => {
            return Err(invalid(
                "out_dir",
                format!(
                    "{} is a symbolic link; refusing to write a package through it",
                    target.display()
                ),
            ))
        }
        Ok(m) if !m.is_dir() => {
            return Err(invalid(
                "out_dir",
                format!("{} exists and is not a folder", target.display()),
            ))
        }
        Ok(_) => {
            let mut it = std::fs::read_dir(target).map_err(|e| StorageError::io(target, e))?;
            if it.next().is_some() {
                return Err(invalid(
                    "out_dir",
                    format!("{} exists and is not empty", target.display()),
                ));
            }
        }
        Err(_) => {}
    }
    // Everything is written into a staging folder beside the target, renamed into place
    // last: a write that fails or is killed never leaves a partial package at the target
    // (a retry is not blocked), and the staging folders of writers that died are removed.
    let staging = staging_dir(target)?;
    let written = GgufFile::open(&opts.source)
        .and_then(|src| write_into(opts, &staging, &src, repo, dist))
        .and_then(|w| {
            if target.exists() {
                // The empty folder the caller made: the package replaces it.
                std::fs::remove_dir(target).map_err(|e| StorageError::io(target, e))?;
            }
            std::fs::rename(&staging, target).map_err(|e| StorageError::io(target, e))?;
            if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
                if let Ok(d) = std::fs::File::open(parent) {
                    let _ = d.sync_all();
                }
            }
            Ok(w)
        });
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    written
}

/// A fresh staging folder beside `target` (`.NAME.staging-PID-NANOS`), created
/// exclusively, after removing those left by writers of the same target that are no
/// longer running.
fn staging_dir(target: &Path) -> Result<PathBuf> {
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = target
        .file_name()
        .ok_or_else(|| {
            invalid(
                "out_dir",
                format!("{} has no folder name", target.display()),
            )
        })?
        .to_string_lossy()
        .into_owned();
    let prefix = format!(".{name}.staging-");
    // The target's folders are made as needed, as a plain create of the target would.
    std::fs::create_dir_all(&parent).map_err(|e| StorageError::io(&parent, e))?;
    if let Ok(entries) = std::fs::read_dir(&parent) {
        for e in entries.flatten() {
            let file_name = e.file_name();
            // `{prefix}{pid}-{nanos}` (`vindex3::compact::sibling`'s staging names).
            let Some(pid) = file_name
                .to_str()
                .and_then(|n| n.strip_prefix(&prefix))
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<i32>().ok())
            else {
                continue;
            };
            // SAFETY: signal 0 sends nothing; it asks whether the process exists.
            let gone = pid != std::process::id() as i32
                && unsafe { libc::kill(pid, 0) } != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            if gone {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    // Unique to this process and moment, as COMPACT's and COMPILE's staging folders.
    let staging = crate::format::vindex3::compact::sibling(target, "staging")?;
    std::fs::create_dir(&staging).map_err(|e| StorageError::io(&staging, e))?;
    Ok(staging)
}

/// Writes the package's files into `out` (the staging folder).
fn write_into(
    opts: &WriteOptions,
    out: &Path,
    src: &GgufFile,
    repo: String,
    dist: Option<String>,
) -> Result<Written> {
    let layer_count = src
        .tensors()
        .iter()
        .filter_map(|t| match role(&t.name) {
            SliceRole::Layer(i) => Some(i + 1),
            _ => None,
        })
        .max()
        .ok_or_else(|| invalid("layer_count", "model has no layer tensors".into()))?;
    for d in ["shared", "layers"] {
        std::fs::create_dir_all(out.join(d)).map_err(|e| StorageError::io(out.join(d), e))?;
    }

    let frag = |rel: &str, slice: Slice| write_fragment(src, slice, out, rel);
    let metadata = frag(
        "shared/metadata.gguf",
        Slice {
            stage_index: 0,
            layer_start: 0,
            layer_end: 0,
            include_embeddings: false,
            include_output: false,
        },
    )?;
    let embeddings = frag(
        "shared/embeddings.gguf",
        Slice {
            stage_index: 1,
            layer_start: 0,
            layer_end: 0,
            include_embeddings: true,
            include_output: false,
        },
    )?;
    let output = frag(
        "shared/output.gguf",
        Slice {
            stage_index: 2,
            layer_start: layer_count,
            layer_end: layer_count,
            include_embeddings: false,
            include_output: true,
        },
    )?;
    let mut layers = Vec::with_capacity(layer_count as usize);
    for i in 0..layer_count {
        let a = frag(
            &format!("layers/layer-{i:05}.gguf"),
            Slice {
                stage_index: 1000 + i as i32,
                layer_start: i,
                layer_end: i + 1,
                include_embeddings: false,
                include_output: false,
            },
        )?;
        layers.push(LayerArtifact {
            layer_index: i,
            artifact: a,
        });
    }
    let mut projectors = Vec::new();
    if !opts.projectors.is_empty() {
        std::fs::create_dir_all(out.join("projectors"))
            .map_err(|e| StorageError::io(out.join("projectors"), e))?;
    }
    for (i, p) in opts.projectors.iter().enumerate() {
        let base = p
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
            .filter(|b| super::validate::safe_relative("projector", b).is_ok())
            .unwrap_or_else(|| format!("mmproj-{i:03}.gguf"));
        let rel = format!("projectors/{base}");
        let (mut from, _) = crate::fsutil::open_regular(p, "projector")?;
        write_exclusive(out, &rel, |w| std::io::copy(&mut from, w).map(|_| ()))?;
        let artifact = measure(out, &rel)?;
        projectors.push(ProjectorArtifact {
            kind: "mmproj".into(),
            artifact,
        });
    }

    let arch = src
        .get_str("general.architecture")?
        .unwrap_or("")
        .to_string();
    let activation_width = src.get_u64(&format!("{arch}.embedding_length"))?;
    let source_sha = sha256_file(&opts.source)?;
    let source_len = std::fs::metadata(&opts.source)
        .map_err(|e| StorageError::io(&opts.source, e))?
        .len();
    let (primary, source_path) = match &opts.recorded_as {
        Some(name) => (name.clone(), name.clone()),
        None => (
            opts.source
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default(),
            opts.source
                .canonicalize()
                .unwrap_or_else(|_| opts.source.clone())
                .display()
                .to_string(),
        ),
    };
    let manifest = Manifest {
        schema_version: SCHEMA_VERSION,
        model_id: opts.model_id.clone(),
        source_model: SourceModel {
            path: source_path,
            sha256: source_sha.clone(),
            repo: Some(repo.clone()),
            revision: Some(opts.source_revision.clone()),
            primary_file: Some(primary.clone()),
            canonical_ref: Some(format!("{repo}@{}/{primary}", opts.source_revision)),
            distribution_id: dist.clone(),
            files: vec![SourceFile {
                path: primary.clone(),
                size_bytes: Some(source_len),
                sha256: Some(source_sha.clone()),
            }],
        },
        format: FORMAT.into(),
        layer_count,
        activation_width,
        shared: Shared {
            metadata,
            embeddings,
            output,
        },
        generation: native_mtp_generation(src),
        layers,
        projectors,
        skippy_abi_version: runtime_abi_string(),
        created_at_unix_secs: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs()),
    };
    super::validate::manifest(&manifest)?;
    let json = manifest.to_json();
    let manifest_sha256 = sha256_hex(json.as_bytes());
    let readme = readme(&manifest, &manifest_sha256);
    write_exclusive(out, "README.md", |w| w.write_all(readme.as_bytes()))?;
    write_exclusive(out, MANIFEST_NAME, |w| w.write_all(json.as_bytes()))?;
    if let Ok(d) = std::fs::File::open(out) {
        let _ = d.sync_all();
    }
    Ok(Written {
        manifest,
        manifest_sha256,
    })
}

/// `generation` declaring native MTP when the source has `*.nextn.*` tensors (the
/// reference writer's only generation output); `None` otherwise.
fn native_mtp_generation(src: &GgufFile) -> Option<serde_json::Value> {
    let mut layers: Vec<u64> = src
        .tensors()
        .iter()
        .filter(|t| t.name.contains(".nextn."))
        .filter_map(|t| super::classify::layer_index(&t.name))
        .collect();
    layers.sort_unstable();
    layers.dedup();
    if layers.is_empty() {
        return None;
    }
    Some(serde_json::json!({
        "speculative_decoding": {
            "default": "mtp",
            "proposers": {
                "mtp": {"type": "native-mtp", "prediction_depth": 1, "layer_indices": layers}
            },
            "strategies": {
                "mtp": {
                    "type": "native-mtp",
                    "proposer": "mtp",
                    "window_policy": {"default": "fixed", "initial_window": 1, "min_window": 1, "max_window": 1}
                }
            }
        }
    }))
}

/// Write `dir/rel` through a temporary file created exclusively beside it, synced and
/// renamed into place.
pub(crate) fn write_exclusive(
    dir: &Path,
    rel: &str,
    body: impl FnOnce(&mut std::io::BufWriter<&std::fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    let path = dir.join(rel);
    let parent = path.parent().unwrap_or(dir);
    let run = || -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::Builder::new()
            .prefix(".partial-")
            // Mode 0666 less the umask, like any new file (not the temporary file's 0600).
            .permissions(std::fs::Permissions::from_mode(0o666))
            .tempfile_in(parent)?;
        {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, tmp.as_file());
            body(&mut w)?;
            w.flush()?;
        }
        tmp.as_file().sync_all()?;
        tmp.persist(&path).map_err(|e| e.error)?;
        Ok(())
    };
    run().map_err(|e| StorageError::io(&path, e))
}

/// Write one fragment, reopen it and compare it with the plan; its manifest entry.
fn write_fragment(src: &GgufFile, slice: Slice, dir: &Path, rel: &str) -> Result<Artifact> {
    let mut w = GgufWriter::new();
    for kv in src.metadata() {
        if kv.key.starts_with("skippy.slice.") {
            continue;
        }
        w.add_kv(kv.key.clone(), kv.value.clone())?;
    }
    match src.get("general.alignment") {
        Some(MetaValue::U32(_)) => {}
        _ => {
            w.set_kv("general.alignment", src.alignment().max(1) as u32)?;
        }
    }
    w.add_kv(
        "skippy.slice.stage_index",
        MetaValue::I32(slice.stage_index),
    )?;
    w.add_kv(
        "skippy.slice.layer_start",
        MetaValue::I32(slice.layer_start as i32),
    )?;
    w.add_kv(
        "skippy.slice.layer_end",
        MetaValue::I32(slice.layer_end as i32),
    )?;
    w.add_kv(
        "skippy.slice.include_embeddings",
        MetaValue::Bool(slice.include_embeddings),
    )?;
    w.add_kv(
        "skippy.slice.include_output",
        MetaValue::Bool(slice.include_output),
    )?;
    let planned: Vec<_> = src
        .tensors()
        .iter()
        .filter(|t| slice.selects(&t.name))
        .collect();
    for t in &planned {
        w.add_tensor(&t.name, t.dtype, &t.shape, src.view(t).bytes)?;
    }
    write_exclusive(dir, rel, |f| w.write_to(f))?;

    // Reopen and compare with the plan: same names, order, types, shapes and bytes.
    let path = dir.join(rel);
    let back = GgufFile::open(&path)?;
    let differs = |m: String| {
        refuse(
            "writer_plan",
            rel.to_string(),
            format!("the packaging plan and the written fragment disagree: {m}"),
        )
    };
    if back.tensors().len() != planned.len() {
        return Err(differs(format!(
            "{} tensors planned, {} written",
            planned.len(),
            back.tensors().len()
        )));
    }
    for (p, b) in planned.iter().zip(back.tensors()) {
        if p.name != b.name || p.dtype != b.dtype || p.shape != b.shape {
            return Err(differs(format!("tensor {} written as {}", p.name, b.name)));
        }
        if src.view(p).bytes != back.view(b).bytes {
            return Err(differs(format!("tensor {} bytes differ", p.name)));
        }
    }
    drop(back);
    measure(dir, rel)
}

/// Measure the artifact at `dir/rel` as the manifest records it (what the file holds).
fn measure(dir: &Path, rel: &str) -> Result<Artifact> {
    let path = dir.join(rel);
    let f = GgufFile::open(&path)?;
    let tensor_bytes = f.tensors().iter().map(|t| t.nbytes).sum();
    let artifact_bytes = std::fs::metadata(&path)
        .map_err(|e| StorageError::io(&path, e))?
        .len();
    Ok(Artifact {
        path: rel.to_string(),
        tensor_count: f.tensors().len() as u64,
        tensor_bytes,
        artifact_bytes,
        sha256: sha256_file(&path)?,
    })
}

/// The README.md the seed asks a published package to carry.
fn readme(m: &Manifest, manifest_sha: &str) -> String {
    let s = &m.source_model;
    let mut r = format!(
        "# {id} — layer package\n\n\
         A layer package repository (schema {sv}, format `{fmt}`): `model-package.json` plus GGUF\n\
         fragments that a pipeline stage selects by layer range.\n\n\
         | field | value |\n|---|---|\n\
         | source model | {repo} |\n| source revision | {rev} |\n\
         | source file | {file} |\n| source sha256 | {ssha} |\n\
         | manifest sha256 | {msha} (of `model-package.json`) |\n\
         | layer count | {lc} |\n| activation width | {aw} |\n\
         | skippy ABI | {abi} |\n",
        id = m.model_id,
        sv = m.schema_version,
        fmt = m.format,
        repo = s.repo.as_deref().unwrap_or("-"),
        rev = s.revision.as_deref().unwrap_or("-"),
        file = s.primary_file.as_deref().unwrap_or("-"),
        ssha = s.sha256,
        msha = manifest_sha,
        lc = m.layer_count,
        aw = m.activation_width.map_or("-".into(), |w| w.to_string()),
        abi = m.skippy_abi_version,
    );
    if m.projectors.is_empty() {
        r.push_str("| projectors | none |\n");
    }
    for p in &m.projectors {
        r.push_str(&format!(
            "| projector ({}) | {} sha256 {} |\n",
            p.kind, p.artifact.path, p.artifact.sha256
        ));
    }
    r.push_str(&format!(
        "| generation defaults | {} |\n\n",
        match &m.generation {
            None => "none".to_string(),
            Some(g) => g.to_string(),
        }
    ));
    r.push_str(
        "## Validation\n\nWritten by LQL, which reopened every fragment and compared it with the\n\
         packaging plan. Check it against its source with:\n\n\
         ```\nVERIFY \"<this folder>\" AGAINST \"<source.gguf>\"\n```\n\n\
         Every owned tensor (embeddings, layers, final norm, output) appears in exactly one\n\
         fragment with its bytes unchanged; other tensors and all metadata are repeated where a\n\
         fragment needs them to load.\n",
    );
    r
}
