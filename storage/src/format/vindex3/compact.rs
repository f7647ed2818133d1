//! COMPACT: rewrites a VINDEX3 container's storage while keeping its semantic identity.
//!
//! [`stage`] opens the container, re-writes the selected representation of every object
//! (the one the first profile selects) through the EXTRACT writer into a staging directory
//! beside it — keeping the container's authority and `derived_from_model` — and reports,
//! one row per file: representations no profile selects (`discarded`, superseded), files
//! under `segments/` nothing references (`discarded`, stray), every other file the index
//! does not reference (`carried`, copied byte for byte to the same relative path), and the
//! segments written (`written`). The caller checks the staged container's answers against
//! the original's, then [`publish`]es it: `INTO "out"` renames it to an absent `out`; in
//! place, the staging directory and the container are swapped in one `renameat2`
//! (`RENAME_EXCHANGE`) and the old tree is removed — at every instant the container's
//! path holds the old container or the new one, never a mix.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use super::index::{Authority, Vindex3Index};
use super::reader::{open_model, Container};
use super::writer::{extract_stamped, Derivation, ExtractProgress};
use super::ExtractEncoding;
use crate::error::{Result, StorageError};
use crate::model::Model;

/// What COMPACT did with one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactRow {
    /// `written`, `discarded` or `carried`.
    pub action: &'static str,
    /// `segment`, `superseded representation`, `stray segment file`, `unknown file`.
    pub kind: &'static str,
    /// Container-relative path.
    pub path: String,
    pub bytes: u64,
    pub detail: String,
}

/// A rewritten container waiting in its staging directory.
#[derive(Debug)]
pub struct Staged {
    pub source: PathBuf,
    pub staging: PathBuf,
    /// The container as it was opened (for the caller's equivalence check).
    pub model: Model,
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

fn derivation(index: &Vindex3Index) -> Option<Derivation> {
    match index.authority {
        Authority::Canonical => None,
        Authority::Derived => Some(Derivation {
            derived_from_model: index.derived_from_model.clone().unwrap_or_default(),
            applied_patches: index
                .extra
                .get("applied_patches")
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
        }),
    }
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

/// Rewrites the container at `dir` into a staging directory beside it.
pub fn stage(
    dir: &Path,
    progress: &mut dyn FnMut(ExtractProgress),
    cancel: &AtomicBool,
) -> Result<Staged> {
    let c = Container::load(dir)?;
    let model = open_model(dir)?;
    let graph = c.require_graph()?;
    let selected: BTreeSet<String> = graph
        .objects
        .iter()
        .filter_map(|o| c.selected_representation(&o.id))
        .collect();
    let mut referenced: BTreeSet<String> = BTreeSet::from(["index.json".to_string()]);
    if let Some(g) = &c.index.system_graph {
        referenced.insert(g.clone());
    }
    for cap in c.index.capabilities.values() {
        referenced.insert(cap.file.clone());
    }
    let mut rows = Vec::new();
    let mut superseded = BTreeSet::new();
    for (id, r) in &c.index.representations {
        if selected.contains(id) {
            referenced.insert(r.segment.clone());
        } else {
            superseded.insert(r.segment.clone());
        }
    }
    for (id, r) in &c.index.representations {
        if !selected.contains(id) && !referenced.contains(&r.segment) {
            rows.push(CompactRow {
                action: "discarded",
                kind: "superseded representation",
                path: r.segment.clone(),
                bytes: r.segment_bytes.unwrap_or(r.payload_bytes),
                detail: format!("{id} ({}): no profile selects it", r.encoding),
            });
        }
    }
    let mut carried = Vec::new();
    for (rel, bytes) in files(dir)? {
        if referenced.contains(&rel) || superseded.contains(&rel) {
            continue;
        }
        if rel.starts_with("segments/") {
            rows.push(CompactRow {
                action: "discarded",
                kind: "stray segment file",
                path: rel,
                bytes,
                detail: "no representation references it".into(),
            });
        } else {
            carried.push((rel, bytes));
        }
    }

    let staging = sibling(dir, "compacting")?;
    extract_stamped(
        &model,
        &staging,
        ExtractEncoding::Source,
        derivation(&c.index).as_ref(),
        progress,
        cancel,
    )?;
    let carry = || -> Result<()> {
        for (rel, _) in &carried {
            let to = staging.join(rel);
            if to.exists() {
                return Err(StorageError::Invalid(format!(
                    "{rel}: an unknown file collides with a file COMPACT writes"
                )));
            }
            if let Some(p) = to.parent() {
                std::fs::create_dir_all(p).map_err(|e| StorageError::io(p, e))?;
            }
            // Inside the unpublished staging directory: a plain copy, synced.
            std::fs::copy(dir.join(rel), &to).map_err(|e| StorageError::io(&to, e))?;
            std::fs::File::open(&to)
                .and_then(|f| f.sync_all())
                .map_err(|e| StorageError::io(&to, e))?;
        }
        crate::fsutil::sync_dir(&staging)
    };
    if let Err(e) = carry() {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    for (rel, bytes) in carried {
        rows.push(CompactRow {
            action: "carried",
            kind: "unknown file",
            path: rel,
            bytes,
            detail: "not referenced by the index; copied byte for byte".into(),
        });
    }
    let written = Container::load(&staging)?;
    for (id, r) in &written.index.representations {
        rows.push(CompactRow {
            action: "written",
            kind: "segment",
            path: r.segment.clone(),
            bytes: r.segment_bytes.unwrap_or(r.payload_bytes),
            detail: format!("{id} ({}, {} tensors)", r.encoding, r.tensor_count),
        });
    }
    Ok(Staged {
        source: dir.to_path_buf(),
        staging,
        model,
        rows,
    })
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
