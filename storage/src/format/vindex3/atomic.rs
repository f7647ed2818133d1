//! Crash-safe container primitives: files are written through [`crate::fsutil`]
//! (exclusive temporary file, fsync, rename, fsync of the folder); a container is built in
//! a sibling temporary directory, claimed exclusively, and renamed into place last.

use std::path::{Path, PathBuf};

use crate::error::{Result, StorageError};

/// Write `bytes` to `path` through an exclusive temporary file, fsync, rename.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::fsutil::write_atomic(path, bytes)
}

/// fsync a directory so the renames inside it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    crate::fsutil::sync_dir(dir)
}

/// Refuse `out` unless it is absent or an empty directory; create its parent. Returns the
/// sibling temporary directory (created) the container is built in.
pub(crate) fn claim_target(out: &Path) -> Result<PathBuf> {
    // `symlink_metadata`: a symlink at the target is refused, never followed.
    match std::fs::symlink_metadata(out) {
        Ok(m) if m.is_dir() => {
            let mut it = std::fs::read_dir(out).map_err(|e| StorageError::io(out, e))?;
            if it.next().is_some() {
                return Err(StorageError::Invalid(format!(
                    "{}: EXTRACT target exists and is not empty; refusing to overwrite it",
                    out.display()
                )));
            }
        }
        Ok(_) => {
            return Err(StorageError::Invalid(format!(
                "{}: EXTRACT target exists and is not a directory",
                out.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(StorageError::io(out, e)),
    }
    let name = out
        .file_name()
        .ok_or_else(|| StorageError::Invalid(format!("{}: not a directory name", out.display())))?
        .to_string_lossy()
        .into_owned();
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| StorageError::io(&parent, e))?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let tmp = parent.join(format!("{name}.tmp-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&tmp).map_err(|e| StorageError::io(&tmp, e))?;
    Ok(tmp)
}

/// Move the finished temporary directory to `out` (an absent path or an empty directory)
/// and make the rename durable.
pub(crate) fn publish_dir(tmp: &Path, out: &Path) -> Result<()> {
    sync_dir(tmp)?;
    std::fs::rename(tmp, out).map_err(|e| StorageError::io(out, e))?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    sync_dir(&parent)
}
