//! Crash-safe file primitives: write to a temporary name, fsync, rename; fsync directories;
//! claim a sibling temporary directory for a container being built.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Result, StorageError};

/// The temporary name a file is written under before being renamed into place.
pub(crate) fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Write `bytes` to `path` through a temporary name, fsync, rename.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_name(path);
    let res = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(StorageError::io(path, e));
    }
    Ok(())
}

/// fsync a directory so the renames inside it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| StorageError::io(dir, e))
}

/// Refuse `out` unless it is absent or an empty directory; create its parent. Returns the
/// sibling temporary directory (created) the container is built in.
pub(crate) fn claim_target(out: &Path) -> Result<PathBuf> {
    match std::fs::metadata(out) {
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
