//! COMPACT: reorganises a VINDEX3 container's storage while keeping its semantic identity
//! (seed 002 §5.7, §20: "same graph, same effective values, same answers").
//!
//! [`stage`] builds the compacted container in a staging directory beside the source:
//! - every file the container references is **kept** byte for byte: `index.json` itself,
//!   and every file a string in `index.json`, the system graph or the MoE manifest names
//!   (representation segments — whether or not a profile selects them —, capability files,
//!   feature labels, bank segments, any field this build does not know). In place, a kept
//!   file is hard-linked (the source tree goes away after the swap); `INTO` copies it, so
//!   the output is independent of the source;
//! - a file under `segments/` nothing references, and a `system_graph*.json` the index
//!   does not name (the leftovers of an interrupted REPRESENT), is **discarded**, one
//!   named row each;
//! - every other file is **carried** (copied to the same relative path).
//!
//! Nothing is decoded or re-encoded, so an operand in an encoding this build cannot decode
//! is carried as it is, a canonical container stays canonical, and unknown index and graph
//! fields survive (the index is not rewritten). The staged copy is then checked: its
//! `index.json` bytes equal the source's, every kept file has the source's size (and, when
//! copied, its SHA-256), and it binds under every profile the source binds under. The
//! caller may check answers too, then [`publish`]es it: `INTO "out"` renames it to an
//! absent `out`; in place, the staging directory and the container are swapped in one
//! `renameat2` (`RENAME_EXCHANGE`) and the old tree is removed — at every instant the
//! container's path holds the old container or the new one, never a mix.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

use super::index::{read_json, MAX_INDEX_BYTES};
use super::reader::{open_model, open_model_profile, Container};
use super::verify::hash_file;
use super::ExtractProgress;
use crate::error::{Result, StorageError};
use crate::model::Model;

/// The size cap for the graph and MoE manifest documents scanned for file references.
const MAX_REFERENCING_DOC_BYTES: u64 = 256 << 20;

/// What COMPACT did with one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactRow {
    /// `kept`, `discarded` or `carried`.
    pub action: &'static str,
    /// `index`, `graph`, `segment`, `capability file`, … for kept files; `stray segment
    /// file`, `stale graph file` for discarded ones; `unknown file` for carried ones.
    pub kind: &'static str,
    /// Container-relative path.
    pub path: String,
    pub bytes: u64,
    pub detail: String,
}

/// A compacted container waiting in its staging directory.
#[derive(Debug)]
pub struct Staged {
    pub source: PathBuf,
    pub staging: PathBuf,
    /// The container as it binds by default, when it binds (for the caller's answer
    /// check); `None` when this build cannot bind it (its files are carried all the same).
    pub model: Option<Model>,
    pub rows: Vec<CompactRow>,
}

/// The files under `dir`, relative, sorted; symlinks and other non-regular entries are
/// reported as errors (a container holds regular files only).
fn files(dir: &Path) -> Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let abs = dir.join(&rel);
        for e in std::fs::read_dir(&abs).map_err(|e| StorageError::io(&abs, e))? {
            let e = e.map_err(|e| StorageError::io(&abs, e))?;
            let r = rel.join(e.file_name());
            let m =
                std::fs::symlink_metadata(e.path()).map_err(|x| StorageError::io(e.path(), x))?;
            if m.is_dir() {
                stack.push(r);
            } else if m.is_file() {
                out.push((r.to_string_lossy().into_owned(), m.len()));
            } else {
                return Err(StorageError::Invalid(format!(
                    "{}: not a regular file; COMPACT refuses to touch the container",
                    e.path().display()
                )));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The kind of a kept file, from the top-level field of the document that names it.
fn referenced_kind(doc: &str, field: &str) -> &'static str {
    match (doc, field) {
        ("index.json", "system_graph") => "graph",
        ("index.json", "moe_manifest") => "MoE manifest",
        ("index.json", "representations") => "segment",
        ("index.json", "capabilities") => "capability file",
        ("index.json", "feature_labels") => "feature labels",
        ("index.json", "segments") => "bank segment",
        _ => "referenced file",
    }
}

/// Every string under `v` that names a file of `present`, with the top-level field and
/// the path of the JSON value that names it (`representations["a@source"].segment`).
fn find_references(
    v: &Value,
    at: &mut Vec<String>,
    present: &BTreeMap<String, u64>,
    out: &mut Vec<(String, String, String)>,
) {
    match v {
        Value::String(s) => {
            let rel = s.strip_prefix("./").unwrap_or(s);
            if present.contains_key(rel) {
                let field = at.first().cloned().unwrap_or_default();
                out.push((rel.to_string(), field, at.concat()));
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                at.push(format!("[{i}]"));
                find_references(x, at, present, out);
                at.pop();
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                let step = if at.is_empty() {
                    k.clone()
                } else if k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    format!(".{k}")
                } else {
                    format!("[{k:?}]")
                };
                at.push(step);
                find_references(x, at, present, out);
                at.pop();
            }
        }
        _ => {}
    }
}

/// Each file the container references: path → (kind, where it is named). `index.json`
/// is scanned, then the graph and the MoE manifest it names.
fn references(
    dir: &Path,
    c: &Container,
    present: &BTreeMap<String, u64>,
) -> Result<BTreeMap<String, (&'static str, String)>> {
    let mut found = Vec::new();
    let index = read_json(&dir.join("index.json"), MAX_INDEX_BYTES)?;
    find_references(&index, &mut Vec::new(), present, &mut found);
    let mut out: BTreeMap<String, (&'static str, String)> = BTreeMap::new();
    let mut note = |doc: &str, found: Vec<(String, String, String)>| {
        for (rel, field, at) in found {
            out.entry(rel).or_insert_with(|| {
                (
                    referenced_kind(doc, &field),
                    format!("{doc} names it at {at}"),
                )
            });
        }
    };
    note("index.json", found);
    for rel in [&c.index.system_graph, &c.index.moe_manifest]
        .into_iter()
        .flatten()
    {
        let rel = rel.strip_prefix("./").unwrap_or(rel);
        if !present.contains_key(rel) {
            continue;
        }
        let path = super::index::resolve(dir, rel, "referenced document")?;
        let doc = read_json(&path, MAX_REFERENCING_DOC_BYTES)?;
        let mut found = Vec::new();
        find_references(&doc, &mut Vec::new(), present, &mut found);
        note(rel, found);
    }
    Ok(out)
}

/// Every file path a string of the index names as a representation segment, capability,
/// graph or manifest, present or not (a referenced file that is absent is refused).
fn required_files(c: &Container) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    out.extend(c.index.system_graph.clone());
    out.extend(c.index.moe_manifest.clone());
    out.extend(c.index.representations.values().map(|r| r.segment.clone()));
    out.extend(c.index.capabilities.values().map(|e| e.file.clone()));
    out.extend(c.index.feature_labels.as_ref().map(|l| l.segment.clone()));
    out.into_iter()
        .map(|p| p.strip_prefix("./").map(String::from).unwrap_or(p))
        .collect()
}

/// A sibling path of `dir` named `.{name}.{what}-{pid}-{nanos}` (the staging name of a
/// COMPACT or COMPILE output, renamed into place last).
pub fn sibling(dir: &Path, what: &str) -> Result<PathBuf> {
    let name = dir
        .file_name()
        .ok_or_else(|| StorageError::Invalid(format!("{}: not a directory name", dir.display())))?
        .to_string_lossy()
        .into_owned();
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    Ok(parent.join(format!(".{name}.{what}-{}-{nanos}", std::process::id())))
}

/// How a kept file reaches the staging directory.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Hard link (falling back to a copy where the file system refuses): for an in-place
    /// COMPACT, whose source tree is removed after the swap.
    Link,
    /// A copy: for `INTO "out"`, an artifact independent of its source.
    Copy,
}

/// Put `rel` of `from` at the same path under `to`; returns whether it was linked.
fn place(from: &Path, to: &Path, rel: &str, how: Placement) -> Result<bool> {
    let (src, dst) = (from.join(rel), to.join(rel));
    if let Some(p) = dst.parent() {
        std::fs::create_dir_all(p).map_err(|e| StorageError::io(p, e))?;
    }
    if how == Placement::Link && std::fs::hard_link(&src, &dst).is_ok() {
        return Ok(true);
    }
    // Inside the unpublished staging directory: a plain copy, synced.
    std::fs::copy(&src, &dst).map_err(|e| StorageError::io(&dst, e))?;
    std::fs::File::open(&dst)
        .and_then(|f| f.sync_all())
        .map_err(|e| StorageError::io(&dst, e))?;
    Ok(false)
}

/// The profile names `index.json` declares (for the binding check).
fn profile_names(c: &Container) -> Vec<String> {
    c.index
        .profiles
        .iter()
        .filter_map(|p| p.get("profile").and_then(|n| n.as_str()).map(String::from))
        .collect()
}

/// Compacts the container at `dir` into a staging directory beside it.
pub fn stage(
    dir: &Path,
    how: Placement,
    progress: &mut dyn FnMut(ExtractProgress),
    cancel: &AtomicBool,
) -> Result<Staged> {
    let c = Container::load(dir)?;
    let present: BTreeMap<String, u64> = files(dir)?.into_iter().collect();
    for rel in required_files(&c) {
        if !present.contains_key(&rel) {
            return Err(StorageError::Invalid(format!(
                "{}: index.json references {rel}, which is absent; COMPACT keeps every \
                 referenced file and changed nothing",
                dir.display()
            )));
        }
    }
    let mut kept = references(dir, &c, &present)?;
    kept.insert(
        "index.json".into(),
        ("index", "the container's root document".into()),
    );
    let model = open_model(dir).ok();
    let selected = Selected::of(&c);

    let staging = sibling(dir, "compacting")?;
    std::fs::create_dir(&staging).map_err(|e| StorageError::io(&staging, e))?;
    let total: u64 = present.values().sum();
    let mut done = 0u64;
    let mut rows = Vec::new();
    let mut copied = Vec::new();
    let mut fill = || -> Result<()> {
        for (rel, &bytes) in &present {
            if cancel.load(Ordering::Relaxed) {
                return Err(StorageError::Interrupted {
                    what: format!("{}: COMPACT at {rel}", dir.display()),
                });
            }
            if let Some((kind, why)) = kept.get(rel) {
                // index.json is always copied: it is the one file a later REPRESENT
                // replaces (by rename, never in place, but a copy costs nothing).
                let how = if rel == "index.json" {
                    Placement::Copy
                } else {
                    how
                };
                if !place(dir, &staging, rel, how)? {
                    copied.push(rel.clone());
                }
                rows.push(CompactRow {
                    action: "kept",
                    kind,
                    path: rel.clone(),
                    bytes,
                    detail: selected.detail(&c, rel, why),
                });
            } else if rel.starts_with("segments/") {
                rows.push(CompactRow {
                    action: "discarded",
                    kind: "stray segment file",
                    path: rel.clone(),
                    bytes,
                    detail: "nothing index.json, the graph or the manifest names references it"
                        .into(),
                });
            } else if !rel.contains('/')
                && rel.starts_with("system_graph")
                && rel.ends_with(".json")
            {
                rows.push(CompactRow {
                    action: "discarded",
                    kind: "stale graph file",
                    path: rel.clone(),
                    bytes,
                    detail: "a graph index.json does not name (left by an interrupted REPRESENT)"
                        .into(),
                });
            } else {
                place(dir, &staging, rel, Placement::Copy)?;
                copied.push(rel.clone());
                rows.push(CompactRow {
                    action: "carried",
                    kind: "unknown file",
                    path: rel.clone(),
                    bytes,
                    detail: "not referenced by the index; copied byte for byte".into(),
                });
            }
            done += bytes;
            progress(ExtractProgress {
                object: String::new(),
                tensor: rel.clone(),
                tensors_done: rows.len(),
                tensors_total: present.len(),
                bytes_done: done,
                bytes_total: total,
            });
        }
        crate::fsutil::sync_dir(&staging)?;
        check_identity(dir, &staging, &c, model.is_some(), &kept, &copied)
    };
    if let Err(e) = fill() {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    Ok(Staged {
        source: dir.to_path_buf(),
        staging,
        model,
        rows,
    })
}

/// Which representations the baseline and the profiles select (for the report).
struct Selected {
    baseline: BTreeSet<String>,
    profiles: BTreeSet<String>,
}

impl Selected {
    fn of(c: &Container) -> Selected {
        let baseline = c
            .graph
            .iter()
            .flat_map(|g| g.objects.iter())
            .filter_map(|o| c.selected_representation(&o.id))
            .collect();
        let mut profiles = BTreeSet::new();
        for name in profile_names(c) {
            if let Ok(sel) = c.selection(Some(&name)) {
                profiles.extend(sel.into_values());
            }
        }
        Selected { baseline, profiles }
    }

    /// The detail of a kept file: where it is named, and for a representation what
    /// selects it (kept either way: the index references it, §5.7).
    fn detail(&self, c: &Container, rel: &str, why: &str) -> String {
        let rep = c
            .index
            .representations
            .iter()
            .find(|(_, r)| r.segment.strip_prefix("./").unwrap_or(&r.segment) == rel);
        match rep {
            Some((id, r)) => {
                let by = if self.baseline.contains(id) {
                    "selected by the baseline"
                } else if self.profiles.contains(id) {
                    "selected by a profile"
                } else {
                    "selected by no profile, kept because the index references it"
                };
                format!("{id} ({}): {why}; {by}", r.encoding)
            }
            None => why.to_string(),
        }
    }
}

/// The staged copy is the source's identity: the same `index.json` bytes, every kept file
/// the same size (a copied one the same SHA-256), and it binds under every profile the
/// source binds under.
fn check_identity(
    dir: &Path,
    staging: &Path,
    c: &Container,
    source_binds: bool,
    kept: &BTreeMap<String, (&'static str, String)>,
    copied: &[String],
) -> Result<()> {
    let fail = |what: String| {
        StorageError::Internal(format!(
            "COMPACT identity check failed for {}: {what}; the container is unchanged",
            dir.display()
        ))
    };
    for rel in kept.keys() {
        let a = std::fs::metadata(dir.join(rel)).map_err(|e| StorageError::io(dir.join(rel), e))?;
        let b = std::fs::metadata(staging.join(rel))
            .map_err(|e| StorageError::io(staging.join(rel), e))?;
        if a.len() != b.len() {
            return Err(fail(format!("{rel} is {} bytes, was {}", b.len(), a.len())));
        }
    }
    for rel in copied.iter().filter(|r| kept.contains_key(*r)) {
        if hash_file(&dir.join(rel))? != hash_file(&staging.join(rel))? {
            return Err(fail(format!("{rel}: the copy's bytes differ")));
        }
    }
    let mut selections: Vec<Option<String>> = vec![None];
    selections.extend(profile_names(c).into_iter().map(Some));
    for p in selections {
        // The default binding of the source was opened by `stage` already.
        let binds = match &p {
            None => source_binds,
            Some(name) => open_model_profile(dir, Some(name)).is_ok(),
        };
        if binds {
            if let Err(e) = open_model_profile(staging, p.as_deref()) {
                return Err(fail(format!(
                    "it no longer binds{}: {e}",
                    p.map(|p| format!(" under profile {p:?}"))
                        .unwrap_or_default()
                )));
            }
        }
    }
    Ok(())
}

/// Removes a staged rewrite that will not be published.
pub fn abandon(staged: &Staged) {
    let _ = std::fs::remove_dir_all(&staged.staging);
}

/// Puts the staged container in place: at `into` (which must be absent), or over the
/// source by an atomic exchange, after which the old tree is removed.
pub fn publish(staged: &Staged, into: Option<&Path>) -> Result<PathBuf> {
    let parent_of = |p: &Path| match p.parent() {
        Some(q) if !q.as_os_str().is_empty() => q.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match into {
        Some(out) => {
            if std::fs::symlink_metadata(out).is_ok() {
                abandon(staged);
                return Err(StorageError::Invalid(format!(
                    "{}: COMPACT target exists; refusing to overwrite it",
                    out.display()
                )));
            }
            if let Some(p) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(p).map_err(|e| StorageError::io(p, e))?;
            }
            std::fs::rename(&staged.staging, out).map_err(|e| {
                abandon(staged);
                StorageError::io(out, e)
            })?;
            crate::fsutil::sync_dir(&parent_of(out))?;
            Ok(out.to_path_buf())
        }
        None => {
            exchange(&staged.staging, &staged.source).inspect_err(|_| abandon(staged))?;
            crate::fsutil::sync_dir(&parent_of(&staged.source))?;
            // The old container now lives at the staging name.
            let _ = std::fs::remove_dir_all(&staged.staging);
            Ok(staged.source.clone())
        }
    }
}

/// Swaps two directory entries atomically (Linux `renameat2(RENAME_EXCHANGE)`).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let ca = CString::new(a.as_os_str().as_bytes())
        .map_err(|_| StorageError::Invalid(format!("{}: NUL in path", a.display())))?;
    let cb = CString::new(b.as_os_str().as_bytes())
        .map_err(|_| StorageError::Invalid(format!("{}: NUL in path", b.display())))?;
    // SAFETY: both are valid NUL-terminated paths; AT_FDCWD resolves them like rename(2).
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc != 0 {
        return Err(StorageError::io(b, std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn exchange(_a: &Path, b: &Path) -> Result<()> {
    Err(StorageError::Unsupported(format!(
        "not supported yet: COMPACT in place on this platform (no atomic directory exchange); use COMPACT \"{}\" INTO \"out\"",
        b.display()
    )))
}
