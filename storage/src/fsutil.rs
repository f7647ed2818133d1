//! File-access rules every reader and writer of LQL follows (docs/security.md):
//!
//! - **Reading**: [`open_regular`] opens without blocking and refuses anything that is not a
//!   regular file (a FIFO, a device, a socket, a directory) before a byte is read, so a
//!   named pipe planted as a model file cannot hang the process; [`read_capped`] reads a
//!   small file whole under a documented size cap ([`limits`]) with a typed error.
//! - **Hashing**: [`sha256_stream`] is the one streamed SHA-256 (1 MiB reads) behind every
//!   file hash (VERIFY, COMPACT, package artifacts, model identity); [`hex`] writes every
//!   digest.
//! - **Paths named by a file**: [`resolve_inside`] resolves a path a container or folder
//!   names against its root *after following symlinks* and refuses anything that lands
//!   outside the root.
//! - **Writing**: [`AtomicFile`] (and [`write_atomic`]) writes through a temporary file
//!   created exclusively (`O_EXCL`, an unpredictable name, never following a planted
//!   symlink) in the target's folder, fsyncs it, refuses to replace anything that is not a
//!   regular file ([`check_replaceable`]), renames it into place last and fsyncs the folder.

use std::fs::{File, Metadata};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Result, StorageError};

/// Size caps on files read whole into memory (hostile-input limits).
pub mod limits {
    /// `config.json` of a Hugging Face folder.
    pub const CONFIG_JSON: u64 = 16 << 20;
    /// `tokenizer_config.json` (it may hold a chat template).
    pub const TOKENIZER_CONFIG_JSON: u64 = 16 << 20;
    /// `tokenizer.json` (large vocabularies are tens of MB).
    pub const TOKENIZER_JSON: u64 = 256 << 20;
    /// `chat_template.jinja`.
    pub const CHAT_TEMPLATE: u64 = 16 << 20;
    /// `model.safetensors.index.json`.
    pub const SAFETENSORS_INDEX: u64 = 64 << 20;
    /// A model cache `.sha256` side file.
    pub const SIDECAR: u64 = 4 << 10;
}

/// The type of a file in words, for refusals.
fn kind_of(meta: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a named pipe (FIFO)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

fn not_regular(path: &Path, what: &str, meta: &Metadata) -> StorageError {
    StorageError::Format {
        path: path.to_path_buf(),
        offset: 0,
        field: what.to_string(),
        message: format!(
            "is {}, not a regular file; refusing to read it",
            kind_of(meta)
        ),
    }
}

/// Open `path` for reading, refusing anything that is not a regular file. The open never
/// blocks (`O_NONBLOCK`: a FIFO with no writer does not hang it) and the type is checked
/// on the opened handle, so swapping the file between a check and the open does not help.
/// `what` names the file's role in errors (`"model file"`, `"segment"`, …).
pub fn open_regular(path: &Path, what: &str) -> Result<(File, Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| StorageError::io(path, e))?;
    let meta = file.metadata().map_err(|e| StorageError::io(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(path, what, &meta));
    }
    Ok((file, meta))
}

/// Refuse `path` unless it is a regular file (following symlinks), without opening it.
pub fn require_regular(path: &Path, what: &str) -> Result<Metadata> {
    let meta = std::fs::metadata(path).map_err(|e| StorageError::io(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(path, what, &meta));
    }
    Ok(meta)
}

/// The error for a file over its cap.
pub fn too_large(path: &Path, what: &str, size: u64, limit: u64) -> StorageError {
    StorageError::TooLarge {
        path: path.to_path_buf(),
        field: what.to_string(),
        size,
        limit,
    }
}

/// Read a regular file whole, refusing it when it holds more than `max` bytes (checked on
/// the size and again while reading, so a file that grows is refused too).
pub fn read_capped(path: &Path, what: &str, max: u64) -> Result<Vec<u8>> {
    let (file, meta) = open_regular(path, what)?;
    if meta.len() > max {
        return Err(too_large(path, what, meta.len(), max));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| StorageError::io(path, e))?;
    if buf.len() as u64 > max {
        return Err(too_large(path, what, buf.len() as u64, max));
    }
    Ok(buf)
}

/// [`read_capped`] as UTF-8 text.
pub fn read_capped_text(path: &Path, what: &str, max: u64) -> Result<String> {
    let bytes = read_capped(path, what, max)?;
    String::from_utf8(bytes).map_err(|e| StorageError::Format {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to() as u64,
        field: what.to_string(),
        message: "not valid UTF-8".into(),
    })
}

/// Like [`read_capped_text`], but `Ok(None)` when the file does not exist (an optional
/// file); every other failure is kept.
pub fn read_optional_text(path: &Path, what: &str, max: u64) -> Result<Option<String>> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        _ => read_capped_text(path, what, max).map(Some),
    }
}

/// An optional file `name` of the folder `root`: `Ok(None)` when absent; otherwise resolved
/// inside `root` ([`resolve_inside`]) and read under the cap `max`. Every failure but
/// absence is kept (a tokenizer that cannot be read says why).
pub fn read_optional_inside(root: &Path, name: &str, max: u64) -> Result<Option<String>> {
    let path = root.join(name);
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StorageError::io(&path, e)),
        Ok(_) => {
            let real = resolve_inside(root, name, &path, name)?;
            read_capped_text(&real, name, max).map(Some)
        }
    }
}

/// Resolve `rel`, a path a file inside `root` names, to a real path inside `root`: `rel`
/// must be relative with plain components only, and after following every symlink the
/// result must still lie inside `root` (itself resolved). `index` is the file that named
/// the path and `field` the field, for errors. The target must exist.
pub fn resolve_inside(root: &Path, rel: &str, index: &Path, field: &str) -> Result<PathBuf> {
    let p = Path::new(rel);
    let plain = !rel.is_empty()
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if !plain {
        return Err(StorageError::Format {
            path: index.to_path_buf(),
            offset: 0,
            field: field.into(),
            message: format!(
                "path {rel:?} is not a plain container-relative path (relative, without `..`) inside {}",
                root.display()
            ),
        });
    }
    let real_root = root.canonicalize().map_err(|e| StorageError::io(root, e))?;
    let joined = root.join(p);
    let real = joined
        .canonicalize()
        .map_err(|e| StorageError::io(&joined, e))?;
    if !real.starts_with(&real_root) {
        return Err(StorageError::Format {
            path: index.to_path_buf(),
            offset: 0,
            field: field.into(),
            message: format!(
                "path {rel:?} resolves (through a symbolic link) outside {}; refusing to read it",
                root.display()
            ),
        });
    }
    Ok(real)
}

/// Refuse to replace `path` unless it is absent or a regular file (not a symlink, a
/// directory, a device such as `/dev/full`, a FIFO or a socket).
pub fn check_replaceable(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io(path, e)),
        Ok(m) if m.file_type().is_file() => Ok(()),
        Ok(m) => Err(StorageError::Invalid(format!(
            "{}: is {}, not a regular file; refusing to replace it",
            path.display(),
            kind_of(&m)
        ))),
    }
}

/// The folder a file at `path` lives in (`.` for a bare name).
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// fsync a directory so the renames inside it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| StorageError::io(dir, e))
}

/// A file being written: a temporary sibling created exclusively with an unpredictable
/// name, renamed over the target by [`AtomicFile::commit`]. Dropped without a commit, the
/// temporary file is removed and the target is untouched.
pub struct AtomicFile {
    target: PathBuf,
    tmp: tempfile::NamedTempFile,
}

impl AtomicFile {
    /// Start writing `target`. Refuses at once a target that exists and is not a regular
    /// file, and one without a file name.
    pub fn create(target: &Path) -> Result<AtomicFile> {
        let name = target.file_name().ok_or_else(|| {
            StorageError::Invalid(format!("{}: not a file path", target.display()))
        })?;
        check_replaceable(target)?;
        let dir = parent_of(target);
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{}.", name.to_string_lossy()))
            .suffix(".tmp")
            // Created with mode 0666 less the umask, like any new file.
            .permissions(std::fs::Permissions::from_mode(0o666))
            .tempfile_in(&dir)
            .map_err(|e| StorageError::io(&dir, e))?;
        Ok(AtomicFile {
            target: target.to_path_buf(),
            tmp,
        })
    }

    /// The file being written.
    pub fn file(&mut self) -> &mut File {
        self.tmp.as_file_mut()
    }

    /// The target path.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The temporary path (for error messages).
    pub fn temp_path(&self) -> &Path {
        self.tmp.path()
    }

    /// fsync the data, check the target is still replaceable, rename over it, fsync the
    /// folder.
    pub fn commit(self) -> Result<()> {
        let AtomicFile { target, tmp } = self;
        tmp.as_file()
            .sync_all()
            .map_err(|e| StorageError::io(&target, e))?;
        check_replaceable(&target)?;
        tmp.persist(&target)
            .map_err(|e| StorageError::io(&target, e.error))?;
        sync_dir(&parent_of(&target))
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tmp.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.tmp.flush()
    }
}

/// Write `bytes` to `path` atomically (see [`AtomicFile`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.write_all(bytes)
        .map_err(|e| StorageError::io(f.temp_path(), e))?;
    f.commit()
}

/// Write `path` atomically through a buffered writer filled by `body`.
pub fn write_atomic_with(
    path: &Path,
    body: impl FnOnce(&mut std::io::BufWriter<&mut File>) -> std::io::Result<()>,
) -> Result<()> {
    let mut f = AtomicFile::create(path)?;
    {
        let tmp_path = f.temp_path().to_path_buf();
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f.file());
        body(&mut w).map_err(|e| StorageError::io(&tmp_path, e))?;
        w.flush().map_err(|e| StorageError::io(&tmp_path, e))?;
    }
    f.commit()
}

/// Lowercase hex SHA-256 of everything `r` yields, and its length, read in 1 MiB chunks.
pub fn sha256_stream(r: &mut impl Read) -> std::io::Result<(String, u64)> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = r.read(&mut buf)?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((hex(h.finalize()), n))
}

/// Lowercase hex of a digest (or any bytes).
pub fn hex(bytes: impl AsRef<[u8]>) -> String {
    bytes.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkfifo(path: &Path) {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn fifo_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("pipe");
        mkfifo(&p);
        let e = open_regular(&p, "model file").unwrap_err().to_string();
        assert!(e.contains("named pipe"), "{e}");
        let e = read_capped(&p, "config.json", 10).unwrap_err().to_string();
        assert!(e.contains("named pipe"), "{e}");
        let e = open_regular(d.path(), "model file")
            .unwrap_err()
            .to_string();
        assert!(e.contains("directory"), "{e}");
    }

    #[test]
    fn cap_is_enforced_with_a_typed_error() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("config.json");
        std::fs::write(&p, vec![b' '; 100]).unwrap();
        assert!(read_capped(&p, "config.json", 100).is_ok());
        let e = read_capped(&p, "config.json", 99).unwrap_err();
        assert!(
            matches!(
                e,
                StorageError::TooLarge {
                    size: 100,
                    limit: 99,
                    ..
                }
            ),
            "{e}"
        );
        assert!(read_optional_text(&d.path().join("absent"), "x", 10)
            .unwrap()
            .is_none());
    }

    #[test]
    fn resolve_inside_refuses_symlinks_out() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        std::fs::create_dir_all(root.join("segments")).unwrap();
        std::fs::write(d.path().join("secret"), b"TOPSECRETBYTES").unwrap();
        std::fs::write(root.join("segments/ok.bin"), b"x").unwrap();
        std::os::unix::fs::symlink(d.path().join("secret"), root.join("segments/out.bin")).unwrap();
        std::os::unix::fs::symlink(root.join("segments/ok.bin"), root.join("in.bin")).unwrap();
        std::os::unix::fs::symlink(d.path(), root.join("up")).unwrap();
        let idx = root.join("index.json");
        assert!(resolve_inside(&root, "segments/ok.bin", &idx, "f").is_ok());
        assert!(resolve_inside(&root, "in.bin", &idx, "f").is_ok());
        for bad in [
            "segments/out.bin",
            "up/secret",
            "../secret",
            "/etc/passwd",
            "",
        ] {
            let e = resolve_inside(&root, bad, &idx, "f")
                .unwrap_err()
                .to_string();
            assert!(!e.contains("TOPSECRET"), "{e}");
            assert!(e.contains("index.json"), "{bad}: {e}");
        }
    }

    #[test]
    fn atomic_write_refuses_non_regular_targets_and_planted_links() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        // A symlink at the target: refused, the link's target untouched.
        let link = d.path().join("out.trace");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(write_atomic(&link, b"new").is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        // A directory, a FIFO, a device.
        assert!(write_atomic(d.path(), b"x").is_err());
        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
        assert!(write_atomic(&fifo, b"x").is_err());
        let e = write_atomic(Path::new("/dev/null"), b"x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("character device"), "{e}");
        // The old predictable temp names are irrelevant: plant links at them anyway.
        let target = d.path().join("new.trace");
        for name in [
            format!(".new.trace.tmp-{}", std::process::id()),
            ".new.trace.tmp".to_string(),
        ] {
            std::os::unix::fs::symlink(&victim, d.path().join(name)).unwrap();
        }
        write_atomic(&target, b"data").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"data");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        // Regular files are replaced; nothing temporary is left behind.
        write_atomic(&target, b"again").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"again");
        let leftovers = std::fs::read_dir(d.path())
            .unwrap()
            .filter(|e| {
                let e = e.as_ref().unwrap();
                e.file_type().unwrap().is_file()
                    && e.file_name().to_string_lossy().ends_with(".tmp")
            })
            .count();
        assert_eq!(leftovers, 0);
    }
}
