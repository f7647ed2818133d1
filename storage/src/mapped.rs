//! Mapped model files: every read-only map LQL makes of a model file goes through
//! [`map_file`], which refuses non-regular files, records the file's fingerprint (size,
//! mtime, inode, device) and registers the mapping.
//!
//! The registry serves two checks (docs/security.md, "model files that change"):
//! - **Between statements**: [`check_backings`] (behind `Model::check_unchanged`) re-reads
//!   the fingerprint of every mapped file of a model and refuses with "model file changed
//!   since USE: re-bind" naming the file, before a statement touches a stale mapping.
//! - **During a statement**: a file truncated under a live mapping makes the next read of
//!   a vanished page raise SIGBUS. [`install_sigbus_reporter`] installs a handler that
//!   writes a fatal message naming the mapped file (looked up by the faulting address in a
//!   fixed table of atomics, with `write(2)` only: async-signal-safe) and exits with
//!   [`SIGBUS_EXIT_CODE`] instead of dying on a bare signal.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use memmap2::Mmap;

use crate::error::{Result, StorageError};
use crate::fsutil;

/// Exit status of a process whose mapped model file vanished under it (`EX_IOERR`).
pub const SIGBUS_EXIT_CODE: i32 = 74;

/// What identifies the version of a file: a rewrite in place changes size or mtime, a
/// replacement by rename changes the inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    pub len: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: i64,
    pub ino: u64,
    pub dev: u64,
}

impl Fingerprint {
    pub fn of(meta: &std::fs::Metadata) -> Fingerprint {
        Fingerprint {
            len: meta.len(),
            mtime_sec: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
            ino: meta.ino(),
            dev: meta.dev(),
        }
    }

    /// What differs between `self` (at open) and `now`, in words.
    fn difference(&self, now: &Fingerprint) -> Option<String> {
        if self.ino != now.ino || self.dev != now.dev {
            Some("the file was replaced".into())
        } else if self.len != now.len {
            Some(format!("size {} bytes at USE, now {}", self.len, now.len))
        } else if (self.mtime_sec, self.mtime_nsec) != (now.mtime_sec, now.mtime_nsec) {
            Some("modified in place since USE".into())
        } else {
            None
        }
    }
}

struct Entry {
    map: Weak<Mmap>,
    path: PathBuf,
    fingerprint: Fingerprint,
    slot: Option<usize>,
}

static REGISTRY: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// Slots the signal handler reads: start address, length and the file's path (a leaked,
/// never freed byte string, so the handler can never read freed memory).
struct Slot {
    start: AtomicUsize,
    len: AtomicUsize,
    path: AtomicPtr<u8>,
    path_len: AtomicUsize,
}

const SLOTS: usize = 256;
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    path: AtomicPtr::new(std::ptr::null_mut()),
    path_len: AtomicUsize::new(0),
};
static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];

fn publish(map: &Mmap, path: &Path) -> Option<usize> {
    use std::os::unix::ffi::OsStrExt;
    let i = TABLE
        .iter()
        .position(|s| s.start.load(Ordering::Acquire) == 0)?;
    let bytes: &'static mut [u8] =
        Box::leak(path.as_os_str().as_bytes().to_vec().into_boxed_slice());
    let s = &TABLE[i];
    s.path_len.store(bytes.len(), Ordering::Release);
    s.path.store(bytes.as_mut_ptr(), Ordering::Release);
    s.len.store(map.len(), Ordering::Release);
    s.start.store(map.as_ptr() as usize, Ordering::Release);
    Some(i)
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// Drop entries whose mapping is gone, freeing their slots.
fn prune(reg: &mut Vec<Entry>) {
    reg.retain(|e| {
        let live = e.map.strong_count() > 0;
        if !live {
            if let Some(i) = e.slot {
                TABLE[i].start.store(0, Ordering::Release);
            }
        }
        live
    });
}

/// Open `path` (refusing anything but a regular file; `what` names it in errors), map it
/// read-only, and register the mapping with its fingerprint.
pub fn map_file(path: &Path, what: &str) -> Result<Arc<Mmap>> {
    let (file, meta) = fsutil::open_regular(path, what)?;
    // SAFETY: a read-only map. A file truncated while mapped raises SIGBUS on access;
    // `check_backings` refuses a changed file between statements and the reporter of
    // `install_sigbus_reporter` turns a fault during one into a named fatal error.
    let map = unsafe { Mmap::map(&file) }.map_err(|e| StorageError::io(path, e))?;
    let map = Arc::new(map);
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut reg = lock();
    prune(&mut reg);
    let slot = if map.is_empty() {
        None
    } else {
        publish(&map, &abs)
    };
    reg.push(Entry {
        map: Arc::downgrade(&map),
        path: abs,
        fingerprint: Fingerprint::of(&meta),
        slot,
    });
    Ok(map)
}

/// The path and fingerprint a mapping was registered with.
pub fn registered(map: &Arc<Mmap>) -> Option<(PathBuf, Fingerprint)> {
    let reg = lock();
    // Only a live entry can be this mapping: a dead one may share its address.
    reg.iter()
        .rev()
        .find(|e| e.map.upgrade().is_some_and(|m| Arc::ptr_eq(&m, map)))
        .map(|e| (e.path.clone(), e.fingerprint))
}

/// The files currently mapped through [`map_file`].
pub fn mapped_paths() -> Vec<PathBuf> {
    let mut reg = lock();
    prune(&mut reg);
    let mut v: Vec<PathBuf> = reg.iter().map(|e| e.path.clone()).collect();
    v.sort();
    v.dedup();
    v
}

/// Refuse when a file behind any of `maps` changed (size, mtime, inode) since it was
/// mapped, or can no longer be examined.
pub fn check_maps<'a>(maps: impl IntoIterator<Item = &'a Arc<Mmap>>) -> Result<()> {
    for map in maps {
        let Some((path, at_open)) = registered(map) else {
            continue;
        };
        let now = match std::fs::metadata(&path) {
            Ok(m) => Fingerprint::of(&m),
            Err(e) => {
                return Err(StorageError::Changed {
                    path,
                    what: format!("it can no longer be read: {e}"),
                })
            }
        };
        if let Some(what) = at_open.difference(&now) {
            return Err(StorageError::Changed { path, what });
        }
    }
    Ok(())
}

/// [`check_maps`] over a model's backings (the owned ones cannot change).
pub fn check_backings(backings: &[crate::model::Backing]) -> Result<()> {
    check_maps(backings.iter().filter_map(|b| match b {
        crate::model::Backing::Mmap(m) => Some(m),
        crate::model::Backing::Owned(_) => None,
    }))
}

// ---- SIGBUS reporter ------------------------------------------------------------------

fn write_stderr(bytes: &[u8]) {
    let mut at = 0;
    while at < bytes.len() {
        // SAFETY: write(2) on fd 2 with a valid buffer; async-signal-safe.
        let n = unsafe { libc::write(2, bytes[at..].as_ptr().cast(), bytes.len() - at) };
        if n <= 0 {
            return;
        }
        at += n as usize;
    }
}

fn write_number(mut n: usize) {
    let mut buf = [0u8; 24];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    write_stderr(&buf[i..]);
}

fn slot_path(s: &Slot) -> &'static [u8] {
    let p = s.path.load(Ordering::Acquire);
    let n = s.path_len.load(Ordering::Acquire);
    if p.is_null() {
        return b"?";
    }
    // SAFETY: `p` points to a leaked, never freed byte string of length `n`.
    unsafe { std::slice::from_raw_parts(p, n) }
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = if info.is_null() {
        0
    } else {
        unsafe { (*info).si_addr() as usize }
    };
    let mut found = false;
    for s in &TABLE {
        let start = s.start.load(Ordering::Acquire);
        let len = s.len.load(Ordering::Acquire);
        if start != 0 && addr >= start && addr - start < len {
            write_stderr(b"lql: fatal: model file ");
            write_stderr(slot_path(s));
            write_stderr(b" changed while in use (bus error reading byte ");
            write_number(addr - start);
            write_stderr(
                b"): it was truncated or rewritten in place; re-open it with USE after it is complete\n",
            );
            found = true;
            break;
        }
    }
    if !found {
        write_stderr(b"lql: fatal: bus error (SIGBUS)");
        let mut first = true;
        for s in &TABLE {
            if s.start.load(Ordering::Acquire) != 0 {
                write_stderr(if first {
                    b"; mapped model files: "
                } else {
                    b", "
                });
                write_stderr(slot_path(s));
                first = false;
            }
        }
        write_stderr(b"\n");
    }
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(SIGBUS_EXIT_CODE) }
}

/// Install (once per process) the SIGBUS handler that reports a mapped model file that
/// changed under the process and exits with [`SIGBUS_EXIT_CODE`].
pub fn install_sigbus_reporter() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction with our handler; SA_SIGINFO gives the address.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_detected_and_named() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m.gguf");
        std::fs::write(&p, vec![1u8; 8192]).unwrap();
        let map = map_file(&p, "model file").unwrap();
        check_maps([&map]).unwrap();
        assert!(mapped_paths().iter().any(|x| x.ends_with("m.gguf")));
        // Same size, later mtime.
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
            .unwrap();
        let e = check_maps([&map]).unwrap_err().to_string();
        assert!(e.contains("model file changed since USE: re-bind"), "{e}");
        assert!(e.contains("m.gguf"), "{e}");
        // Replaced by rename.
        let map2 = map_file(&p, "model file").unwrap();
        let q = d.path().join("n");
        std::fs::write(&q, vec![1u8; 8192]).unwrap();
        std::fs::rename(&q, &p).unwrap();
        let e = check_maps([&map2]).unwrap_err().to_string();
        assert!(e.contains("replaced"), "{e}");
        drop((map, map2));
        assert!(!mapped_paths().iter().any(|x| x.ends_with("m.gguf")));
    }
}
