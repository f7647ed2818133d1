//! Fetching `hf://` layer packages from a Hub-shaped HTTP server into the package cache.
//!
//! A reference resolves to its cache folder `$LQL_HOME/packages/<ns>/<repo>/<rev>/`
//! ([`super::hf`]). What is already there is used without the network; what a request
//! needs and the cache lacks is downloaded from `<endpoint>/<ns>/<repo>/resolve/<rev>/<path>`:
//!
//! - [`Need::Metadata`] (inspection): the manifest and the shared metadata fragment.
//! - [`Need::Stage`]: those plus exactly the fragments the stage maps — the embeddings when
//!   it owns layer 0, its layers, the output when it owns the last layer, and the
//!   embeddings as well when that output fragment ties the head to them — and the declared
//!   projectors, which consumer validation requires as files before any stage starts.
//!
//! Every artifact is streamed into `<cache>/.partial/<path>.part` while its SHA-256 and
//! length are computed; a body longer or shorter than the manifest declares, a wrong
//! hash, or a `Content-Length`/`Content-Range` that contradicts the manifest is refused by
//! name and the partial file removed. A transfer that breaks (connection reset, truncated
//! body, 5xx) keeps its partial file and resumes with an HTTP range request, up to
//! [`ATTEMPTS`] times per call and again on the next call. Only when every needed
//! artifact has verified are they renamed into place, the manifest last, so a failed
//! download installs nothing and the cache never holds a file that did not verify.
//!
//! The endpoint is `HF_ENDPOINT` (default `https://huggingface.co`); a token from
//! `HF_TOKEN` (or `HUGGING_FACE_HUB_TOKEN`) is sent as a bearer token, and only to the
//! endpoint's host (redirects to another host drop it). `HF_HUB_OFFLINE=1`,
//! `LQL_OFFLINE=1` or [`HubConfig::offline`] (an offline connection) turns the network off:
//! only the cache answers.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::hf::{self, HfRef};
use super::manifest::{self, Artifact, Manifest};
use super::{validate, MANIFEST_NAME, MAX_MANIFEST_BYTES};
use crate::error::{Result, StorageError};
use crate::fsutil::hex;

/// Tries per artifact within one call (the first transfer and its resumptions).
pub const ATTEMPTS: u32 = 3;
/// The endpoint when `HF_ENDPOINT` is unset.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";
/// Redirects followed before a transfer is refused as a loop.
const MAX_REDIRECTS: usize = 10;
/// The staging folder inside a package's cache folder.
const PARTIAL_DIR: &str = ".partial";

/// What a caller needs from a package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The manifest and the shared metadata fragment (SHOW PACKAGE "hf://…").
    Metadata,
    /// What layers `first..=last` map (`None`: the whole model).
    Stage(Option<(u64, u64)>),
}

/// Where the network is and who we are to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubConfig {
    /// Base URL, without a trailing slash.
    pub endpoint: String,
    pub token: Option<String>,
    /// No network: only the cache answers.
    pub offline: bool,
    /// The package cache: `<cache_root>/<ns>/<repo>/<rev>/` (`$LQL_HOME/packages`).
    pub cache_root: PathBuf,
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn env_flag(name: &str) -> bool {
    env_nonempty(name).is_some_and(|v| matches!(v.trim(), "1" | "true" | "TRUE" | "yes" | "ON"))
}

impl HubConfig {
    /// From `HF_ENDPOINT`, `HF_TOKEN`/`HUGGING_FACE_HUB_TOKEN`, `HF_HUB_OFFLINE`/`LQL_OFFLINE`
    /// and `LQL_HOME`.
    pub fn from_env() -> Result<HubConfig> {
        Ok(HubConfig {
            endpoint: env_nonempty("HF_ENDPOINT")
                .unwrap_or_else(|| DEFAULT_ENDPOINT.into())
                .trim_end_matches('/')
                .to_string(),
            token: env_nonempty("HF_TOKEN").or_else(|| env_nonempty("HUGGING_FACE_HUB_TOKEN")),
            offline: env_flag("HF_HUB_OFFLINE") || env_flag("LQL_OFFLINE"),
            cache_root: hf::lql_home()?.join("packages"),
        })
    }
}

/// The local folder of `reference` holding at least what `need` asks for, downloading
/// what the cache lacks.
pub fn resolve_with(reference: &str, need: Need, cfg: &HubConfig) -> Result<PathBuf> {
    let r = hf::parse(reference)?;
    let dir = r.cache_path_in(&cfg.cache_root);
    let mut net = Network {
        cfg,
        r: &r,
        reference,
        dir: &dir,
        fetcher: None,
    };
    let fetched_manifest = if dir.join(MANIFEST_NAME).is_file() {
        None
    } else {
        Some(net.fetcher(MANIFEST_NAME)?.manifest()?)
    };
    let m = match &fetched_manifest {
        Some((m, _)) => m.clone(),
        None => manifest::read(&dir)?.manifest,
    };
    validate::manifest(&m)?;
    let staging = dir.join(PARTIAL_DIR);
    let mut staged = Vec::new();
    for a in needed(&m, need)?.into_iter().filter(|a| !present(&dir, a)) {
        let part = net.fetcher(&a.path)?.artifact(&a, &staging)?;
        staged.push((a, part));
    }
    // A stage that owns the output but not the input maps the embeddings too when the
    // output fragment (cached or just staged) has no head of its own (a tied head).
    if let Some(extra) = tied_embeddings(&dir, &m, need, &staged)? {
        let part = net.fetcher(&extra.path)?.artifact(&extra, &staging)?;
        staged.push((extra, part));
    }
    if !staged.is_empty() || fetched_manifest.is_some() {
        install(
            &dir,
            &staged,
            fetched_manifest.as_ref().map(|(_, b)| b.as_slice()),
        )?;
    }
    Ok(dir)
}

/// The network for one resolution: one HTTP client, opened when the cache first lacks
/// something, or the refusal naming what it lacks when the network is off.
struct Network<'a> {
    cfg: &'a HubConfig,
    r: &'a HfRef,
    reference: &'a str,
    dir: &'a Path,
    fetcher: Option<Fetcher<'a>>,
}

impl<'a> Network<'a> {
    fn fetcher(&mut self, lacks: &str) -> Result<&Fetcher<'a>> {
        if self.cfg.offline {
            return Err(StorageError::Unsupported(format!(
                "{}: the local package cache {} lacks {lacks} and the network is off \
                 (--offline, HF_HUB_OFFLINE or LQL_OFFLINE): fill it with the package \
                 (model-package.json and its artifacts)",
                self.reference,
                self.dir.display()
            )));
        }
        if self.fetcher.is_none() {
            self.fetcher = Some(Fetcher::new(self.cfg, self.r, self.reference)?);
        }
        self.fetcher
            .as_ref()
            .ok_or_else(|| StorageError::Internal("the HTTP client was not opened".into()))
    }
}

/// The artifacts `need` maps, in the loader's selection order (the tied-head embeddings
/// are decided after the output fragment is local).
pub fn needed(m: &Manifest, need: Need) -> Result<Vec<Artifact>> {
    let mut out = vec![m.shared.metadata.clone()];
    let Need::Stage(layers) = need else {
        return Ok(out);
    };
    let (first, last) = layers.unwrap_or((0, m.layer_count.saturating_sub(1)));
    validate::layer_range(m, first, last)?;
    if first == 0 {
        out.push(m.shared.embeddings.clone());
    }
    for i in first..=last {
        let l = m.layer(i).ok_or_else(|| {
            super::refuse(
                "missing_layer",
                MANIFEST_NAME,
                format!("package is missing layer {i}"),
            )
        })?;
        out.push(l.artifact.clone());
    }
    if last + 1 == m.layer_count {
        out.push(m.shared.output.clone());
    }
    // Consumer validation wants every declared projector to be a file of its declared size
    // before a stage starts, so a stage download includes them (their hashes verified as
    // they arrive, as the seed asks of a first download).
    out.extend(m.projectors.iter().map(|p| p.artifact.clone()));
    Ok(out)
}

/// Whether the cache holds `a` at its declared size (its hash is the loader's to check).
fn present(dir: &Path, a: &Artifact) -> bool {
    std::fs::metadata(dir.join(&a.path)).is_ok_and(|m| m.is_file() && m.len() == a.artifact_bytes)
}

/// The embeddings artifact, when the stage owns the output but not the input, the output
/// fragment (cached or just staged) has no `output.weight`, and the cache lacks them.
fn tied_embeddings(
    dir: &Path,
    m: &Manifest,
    need: Need,
    staged: &[(Artifact, PathBuf)],
) -> Result<Option<Artifact>> {
    let Need::Stage(layers) = need else {
        return Ok(None);
    };
    let (first, last) = layers.unwrap_or((0, m.layer_count.saturating_sub(1)));
    if first == 0 || last + 1 != m.layer_count || present(dir, &m.shared.embeddings) {
        return Ok(None);
    }
    let output_file = staged
        .iter()
        .find(|(a, _)| a.path == m.shared.output.path)
        .map(|(_, p)| p.clone())
        .unwrap_or_else(|| dir.join(&m.shared.output.path));
    let f = crate::format::gguf::GgufFile::open(&output_file)?;
    Ok(f.tensor_info("output.weight")
        .is_none()
        .then(|| m.shared.embeddings.clone()))
}

/// Rename every staged artifact into place, then write the manifest (when fetched) last.
fn install(dir: &Path, staged: &[(Artifact, PathBuf)], manifest: Option<&[u8]>) -> Result<()> {
    for (a, part) in staged {
        let target = dir.join(&a.path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| StorageError::io(parent, e))?;
        }
        crate::fsutil::check_replaceable(&target)?;
        std::fs::rename(part, &target).map_err(|e| StorageError::io(&target, e))?;
    }
    if let Some(bytes) = manifest {
        crate::fsutil::write_atomic(&dir.join(MANIFEST_NAME), bytes)?;
    }
    // The staging folder goes when nothing is left in it (a concurrent download may be).
    remove_empty_dirs(&dir.join(PARTIAL_DIR));
    crate::fsutil::sync_dir(dir)
}

fn remove_empty_dirs(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_dirs(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// One reference's downloads.
struct Fetcher<'a> {
    client: reqwest::blocking::Client,
    cfg: &'a HubConfig,
    r: &'a HfRef,
    reference: &'a str,
}

/// Why one transfer attempt ended without a verified file.
enum Attempt {
    /// Worth resuming (a broken connection, a truncated body, a 5xx): the message.
    Broken(String),
    /// The server contradicted the manifest or refused: no retry, the partial removed.
    Refused(StorageError),
}

impl<'a> Fetcher<'a> {
    fn new(cfg: &'a HubConfig, r: &'a HfRef, reference: &'a str) -> Result<Fetcher<'a>> {
        let client = reqwest::blocking::Client::builder()
            .user_agent(concat!("lql/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::limited(MAX_REDIRECTS))
            .connect_timeout(Duration::from_secs(30))
            // Per read of the body, not for the whole transfer.
            .timeout(Duration::from_secs(120))
            .build()
            .map_err(|e| self_error(reference, &cfg.endpoint, format!("HTTP client: {e}")))?;
        Ok(Fetcher {
            client,
            cfg,
            r,
            reference,
        })
    }

    fn url(&self, path: &str) -> Result<reqwest::Url> {
        let mut url = reqwest::Url::parse(&self.cfg.endpoint).map_err(|e| {
            StorageError::Invalid(format!(
                "HF_ENDPOINT {:?} is not a URL: {e}",
                self.cfg.endpoint
            ))
        })?;
        let rev = self.r.revision.as_deref().unwrap_or("main");
        url.path_segments_mut()
            .map_err(|_| {
                StorageError::Invalid(format!(
                    "HF_ENDPOINT {:?} cannot be a base URL",
                    self.cfg.endpoint
                ))
            })?
            .pop_if_empty()
            .extend([
                self.r.namespace.as_str(),
                self.r.repo.as_str(),
                "resolve",
                rev,
            ])
            .extend(path.split('/'));
        Ok(url)
    }

    fn fetch_error(&self, url: &reqwest::Url, message: impl Into<String>) -> StorageError {
        StorageError::Fetch {
            reference: self.reference.to_string(),
            url: url.to_string(),
            message: message.into(),
        }
    }

    fn get(&self, url: &reqwest::Url, from: u64) -> reqwest::Result<reqwest::blocking::Response> {
        let mut req = self.client.get(url.clone());
        if let Some(t) = &self.cfg.token {
            req = req.bearer_auth(t);
        }
        if from > 0 {
            req = req.header(reqwest::header::RANGE, format!("bytes={from}-"));
        }
        req.send()
    }

    /// A status that ends the transfer: 5xx is worth retrying, anything else is not.
    fn status_error(&self, url: &reqwest::Url, status: reqwest::StatusCode) -> Attempt {
        let hint = match status.as_u16() {
            401 | 403 => "; a gated or private repository needs HF_TOKEN",
            404 => "; check the repository, revision and that it is a layer package",
            _ => "",
        };
        let msg = format!("the server answered HTTP {status}{hint}");
        if status.is_server_error() {
            Attempt::Broken(msg)
        } else {
            Attempt::Refused(self.fetch_error(url, msg))
        }
    }

    /// The manifest: downloaded into memory (at most [`MAX_MANIFEST_BYTES`]) and parsed.
    fn manifest(&self) -> Result<(Manifest, Vec<u8>)> {
        let url = self.url(MANIFEST_NAME)?;
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            crate::interrupt::check(|| format!("{} {MANIFEST_NAME}", self.reference))?;
            let resp = match self.get(&url, 0) {
                Ok(r) => r,
                Err(e) => {
                    last = transport_message(&e);
                    if e.is_redirect() {
                        break;
                    }
                    continue;
                }
            };
            if !resp.status().is_success() {
                match self.status_error(&url, resp.status()) {
                    Attempt::Broken(m) => {
                        last = m;
                        continue;
                    }
                    Attempt::Refused(e) => return Err(e),
                }
            }
            if let Some(n) = resp.content_length().filter(|&n| n > MAX_MANIFEST_BYTES) {
                return Err(self.fetch_error(
                    &url,
                    format!("the manifest is {n} bytes, over the {MAX_MANIFEST_BYTES}-byte limit"),
                ));
            }
            let mut bytes = Vec::new();
            match resp.take(MAX_MANIFEST_BYTES + 1).read_to_end(&mut bytes) {
                Ok(_) if bytes.len() as u64 > MAX_MANIFEST_BYTES => {
                    return Err(self.fetch_error(
                        &url,
                        format!("the manifest exceeds the {MAX_MANIFEST_BYTES}-byte limit"),
                    ))
                }
                Ok(_) => {
                    let m = manifest::parse(&bytes).map_err(|e| {
                        self.fetch_error(&url, format!("the manifest is not valid: {e}"))
                    })?;
                    return Ok((m, bytes));
                }
                Err(e) => last = format!("the transfer broke: {e}"),
            }
        }
        Err(self.fetch_error(&url, format!("{last} (after {ATTEMPTS} attempts)")))
    }

    /// Download `a` into the staging folder, resuming a partial file; the verified path.
    fn artifact(&self, a: &Artifact, staging: &Path) -> Result<PathBuf> {
        let url = self.url(&a.path)?;
        let part = staging.join(format!("{}.part", a.path));
        if let Some(parent) = part.parent() {
            std::fs::create_dir_all(parent).map_err(|e| StorageError::io(parent, e))?;
        }
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            match self.attempt(a, &url, &part) {
                Ok(()) => return Ok(part),
                Err(Attempt::Refused(e)) => {
                    let _ = std::fs::remove_file(&part);
                    return Err(e);
                }
                Err(Attempt::Broken(m)) => last = m,
            }
        }
        Err(self.fetch_error(
            &url,
            format!(
                "{}: {last} (after {ATTEMPTS} attempts; the partial download is kept and the \
                 next use resumes it)",
                a.path
            ),
        ))
    }

    /// One transfer of `a` into `part` (resuming what is there); `Ok` once it verified.
    fn attempt(&self, a: &Artifact, url: &reqwest::Url, part: &Path) -> Result<(), Attempt> {
        let io = |e: std::io::Error| Attempt::Refused(StorageError::io(part, e));
        let size = a.artifact_bytes;
        let mut f = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(part)
            .map_err(io)?;
        let mut have = f.metadata().map_err(io)?.len();
        if have > size {
            f.set_len(0).map_err(io)?;
            have = 0;
        }
        let mut h = Sha256::new();
        if have > 0 {
            hash_prefix(&mut f, have, &mut h).map_err(io)?;
        }
        if have < size {
            crate::interrupt::check(|| format!("{} {}", self.reference, a.path))
                .map_err(Attempt::Refused)?;
            let mut resp = match self.get(url, have) {
                // A redirect loop does not end by trying again.
                Err(e) if e.is_redirect() => {
                    return Err(Attempt::Refused(
                        self.fetch_error(url, transport_message(&e)),
                    ))
                }
                Err(e) => return Err(Attempt::Broken(transport_message(&e))),
                Ok(r) if !r.status().is_success() => return Err(self.status_error(url, r.status())),
                Ok(r) => r,
            };
            let refused =
                |m: String| Attempt::Refused(self.fetch_error(url, format!("{}: {m}", a.path)));
            match resp.status().as_u16() {
                206 if have > 0 => {
                    let (start, total) = content_range(&resp).ok_or_else(|| {
                        refused("a partial answer without a usable Content-Range".into())
                    })?;
                    if start != have {
                        return Err(refused(format!(
                            "asked for bytes from {have}, the server sent bytes from {start}"
                        )));
                    }
                    if total.is_some_and(|t| t != size) {
                        return Err(refused(format!(
                            "the server says the file is {} bytes; the manifest declares {size}",
                            total.unwrap_or(0)
                        )));
                    }
                }
                200 => {
                    // A fresh body: whatever was partial is discarded.
                    f.set_len(0).map_err(io)?;
                    h = Sha256::new();
                    have = 0;
                }
                s => {
                    return Err(refused(format!(
                        "unexpected HTTP status {s} for a file transfer"
                    )))
                }
            }
            if let Some(n) = resp.content_length() {
                if have + n != size {
                    return Err(refused(format!(
                        "the server declares {} bytes; the manifest declares {size}",
                        have + n
                    )));
                }
            }
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = match resp.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) => {
                        return Err(Attempt::Broken(format!(
                            "the body was cut short (truncated) after {have} of {size} bytes: {}",
                            chain(&e)
                        )))
                    }
                };
                if have + n as u64 > size {
                    return Err(refused(format!(
                        "the server sent more than the {size} bytes the manifest declares"
                    )));
                }
                f.write_all(&buf[..n]).map_err(io)?;
                h.update(&buf[..n]);
                have += n as u64;
                crate::interrupt::check(|| format!("{} {}", self.reference, a.path))
                    .map_err(Attempt::Refused)?;
            }
            if have < size {
                return Err(Attempt::Broken(format!(
                    "the body ended after {have} of {size} bytes (truncated)"
                )));
            }
        }
        f.sync_all().map_err(io)?;
        let got = hex(h.finalize());
        if !got.eq_ignore_ascii_case(&a.sha256) {
            return Err(Attempt::Refused(self.fetch_error(
                url,
                format!(
                    "{}: sha256 of the downloaded bytes is {got}; the manifest declares {}",
                    a.path, a.sha256
                ),
            )));
        }
        Ok(())
    }
}

fn self_error(reference: &str, endpoint: &str, message: String) -> StorageError {
    StorageError::Fetch {
        reference: reference.to_string(),
        url: endpoint.to_string(),
        message,
    }
}

/// An error and its sources as one line (`a: b: c`).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = s.source();
    }
    out
}

/// A transport error as one line, naming redirect loops as such.
fn transport_message(e: &reqwest::Error) -> String {
    if e.is_redirect() {
        format!("too many redirects (more than {MAX_REDIRECTS}): a redirect loop")
    } else if e.is_timeout() {
        "the server stopped answering (timed out)".into()
    } else if e.is_connect() {
        format!("cannot connect: {}", chain(e))
    } else {
        format!("the transfer failed: {}", chain(e))
    }
}

/// `Content-Range: bytes start-end/total` → (start, total when known).
fn content_range(resp: &reqwest::blocking::Response) -> Option<(u64, Option<u64>)> {
    let v = resp
        .headers()
        .get(reqwest::header::CONTENT_RANGE)?
        .to_str()
        .ok()?;
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (start, _end) = range.split_once('-')?;
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    Some((start.trim().parse().ok()?, total))
}

/// Feed the first `len` bytes of `f` into `h` (the resumed prefix); leaves `f` at its end.
fn hash_prefix(f: &mut File, len: u64, h: &mut Sha256) -> std::io::Result<()> {
    f.seek(SeekFrom::Start(0))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let want = buf.len().min(left as usize);
        let n = f.read(&mut buf[..want])?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the partial file shrank while it was read",
            ));
        }
        h.update(&buf[..n]);
        left -= n as u64;
    }
    f.seek(SeekFrom::End(0))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_follow_the_hub_resolve_shape_and_escape_segments() {
        let cfg = HubConfig {
            endpoint: "http://127.0.0.1:9/mirror".into(),
            token: None,
            offline: false,
            cache_root: PathBuf::from("/nonexistent"),
        };
        let r = hf::parse("hf://ns/repo@v1").unwrap();
        let f = Fetcher::new(&cfg, &r, "hf://ns/repo@v1").unwrap();
        assert_eq!(
            f.url("layers/layer 1.gguf").unwrap().as_str(),
            "http://127.0.0.1:9/mirror/ns/repo/resolve/v1/layers/layer%201.gguf"
        );
        let r = hf::parse("hf://ns/repo").unwrap();
        let f = Fetcher::new(&cfg, &r, "hf://ns/repo").unwrap();
        assert!(f
            .url(MANIFEST_NAME)
            .unwrap()
            .as_str()
            .ends_with("/ns/repo/resolve/main/model-package.json"));
    }
}
