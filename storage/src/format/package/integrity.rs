//! SHA-256 of package artifacts and the checksum cache.
//!
//! A cache record lives at `<cache_dir>/<sha256(key)>.json`, where the key joins the
//! manifest's hash, the artifact's role, layer index, relative path, declared hash and
//! declared size. The record holds the hashes, the declared size and the file's length and
//! modification time when it was verified; a hit needs every field to match the file as it
//! is now. Records never contain a local path. An unreadable or corrupt record is a miss.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::manifest::Artifact;
use super::refuse;
use crate::error::{Result, StorageError};
use crate::fsutil::hex;

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(Sha256::digest(bytes))
}

/// Lowercase hex SHA-256 of the file at `path` (streamed, [`crate::fsutil::sha256_stream`]).
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path).map_err(|e| StorageError::io(path, e))?;
    crate::fsutil::sha256_stream(&mut f)
        .map(|(h, _)| h)
        .map_err(|e| StorageError::io(path, e))
}

/// One record of the checksum cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    schema_version: u32,
    manifest_sha256: String,
    artifact_sha256: String,
    artifact_bytes: u64,
    file_len: u64,
    modified_unix_nanos: u128,
}

/// Which artifact of a package a check is about.
#[derive(Debug, Clone, Copy)]
pub struct ArtifactId<'a> {
    /// `metadata`, `embeddings`, `output`, `layer` or `projector`.
    pub role: &'a str,
    pub layer_index: Option<u64>,
    pub artifact: &'a Artifact,
}

fn cache_key(manifest_sha: &str, id: &ArtifactId<'_>) -> String {
    let mut k: Vec<u8> = b"lql-package-integrity-cache-v1\0".to_vec();
    k.extend_from_slice(manifest_sha.as_bytes());
    k.push(0);
    k.extend_from_slice(id.role.as_bytes());
    k.push(0);
    let li = id
        .layer_index
        .map_or(u32::MAX, |i| i.min(u32::MAX as u64) as u32);
    k.extend_from_slice(&li.to_le_bytes());
    k.push(0);
    k.extend_from_slice(id.artifact.path.as_bytes());
    k.push(0);
    k.extend_from_slice(id.artifact.sha256.to_ascii_lowercase().as_bytes());
    k.push(0);
    k.extend_from_slice(&id.artifact.artifact_bytes.to_le_bytes());
    sha256_hex(&k)
}

fn mtime_nanos(meta: &std::fs::Metadata) -> u128 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos())
}

/// How one artifact's checksum was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verified {
    /// Hashed now.
    Hashed,
    /// A cache record matched the file's current length and modification time.
    Cached,
}

/// Verify `file` (the artifact `id` of the package whose manifest hashes to
/// `manifest_sha`) against its declared SHA-256, consulting and filling the cache in
/// `cache_dir` when given. Refused as `artifact_sha256` on a mismatch.
pub fn verify(
    file: &Path,
    manifest_sha: &str,
    id: &ArtifactId<'_>,
    cache_dir: Option<&Path>,
) -> Result<Verified> {
    let want = id.artifact.sha256.to_ascii_lowercase();
    let meta = std::fs::metadata(file).map_err(|e| StorageError::io(file, e))?;
    let record_path = cache_dir.map(|d| d.join(format!("{}.json", cache_key(manifest_sha, id))));
    let now = Record {
        schema_version: 1,
        manifest_sha256: manifest_sha.to_string(),
        artifact_sha256: want.clone(),
        artifact_bytes: id.artifact.artifact_bytes,
        file_len: meta.len(),
        modified_unix_nanos: mtime_nanos(&meta),
    };
    if let Some(rp) = &record_path {
        let hit = std::fs::read(rp)
            .ok()
            .filter(|b| b.len() < 4096)
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
            .is_some_and(|r| r == now);
        if hit {
            return Ok(Verified::Cached);
        }
    }
    let got = sha256_file(file)?;
    if got != want {
        return Err(refuse(
            "artifact_sha256",
            id.artifact.path.clone(),
            format!("package artifact checksum mismatch: expected {want}, got {got}"),
        ));
    }
    if let (Some(rp), Some(dir)) = (&record_path, cache_dir) {
        // A record is written only after a successful hash; failing to write one only
        // costs a re-hash next time.
        let _ = std::fs::create_dir_all(dir).and_then(|_| {
            let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
            std::io::Write::write_all(
                &mut tmp,
                serde_json::to_string(&now).unwrap_or_default().as_bytes(),
            )?;
            tmp.as_file().sync_all()?;
            tmp.persist(rp).map(|_| ()).map_err(|e| e.error)
        });
    }
    Ok(Verified::Hashed)
}
