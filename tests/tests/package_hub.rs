//! `hf://` layer packages over the network, against a local HTTP server that serves the
//! Hub's `<ns>/<repo>/resolve/<rev>/<path>` shape from a package written from the default
//! model. The server logs every request, so the tests assert what was downloaded:
//!
//! - `USE "hf://…" LAYERS 10-19` downloads the manifest, the metadata fragment and layers
//!   10–19 only; a second USE in a new connection, with the server gone, needs no network.
//! - `SHOW PACKAGE "hf://…"` downloads only the manifest and the metadata fragment.
//! - A transfer that breaks once resumes with a range request and installs the package.
//! - A lying server (wrong bytes, a size that contradicts the manifest, a body that keeps
//!   breaking, a redirect loop, HTTP 500s, a refused token) leaves nothing installed and
//!   the error names what was wrong.
//!
//! Only the first test sets the process environment (`LQL_HOME`, `HF_ENDPOINT`,
//! `HF_TOKEN`); the others pass an explicit [`HubConfig`] with their own cache root.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use lql::Connection;
use lql_storage::format::package::hub::{self, HubConfig, Need};
use lql_storage::format::package::MANIFEST_NAME;

const NS: &str = "meshllm";
const REPO: &str = "SmolLM2-135M-Instruct-layers";
const REV: &str = "v1";

/// The package every server serves, written once per test binary.
fn package() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        // Under cargo's per-target scratch folder (a temporary folder would outlive every
        // run); rewritten once per test binary.
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hub-package");
        let _ = std::fs::remove_dir_all(&dir);
        lql_tests::write_default_package(&dir);
        dir
    })
}

/// How the server misbehaves, for paths ending in `target`.
#[derive(Debug, Clone)]
enum Lie {
    /// Same length, one byte flipped.
    WrongBytes(&'static str),
    /// The file plus trailing bytes, with a Content-Length that says so.
    WrongSize(&'static str),
    /// Declares the full length and closes half-way through the rest, every time.
    AlwaysTruncate(&'static str),
    /// Closes half-way through the first transfer only; honest (with ranges) after.
    TruncateOnce(&'static str),
    /// Every request redirects to itself.
    RedirectLoop,
    /// Every request is a 500.
    ServerError,
    /// Requests without `Authorization: Bearer <token>` get 401.
    Token(&'static str),
}

#[derive(Debug, Clone)]
struct Logged {
    /// The repository-relative path requested.
    path: String,
    range_from: Option<u64>,
}

struct Server {
    endpoint: String,
    log: Arc<Mutex<Vec<Logged>>>,
}

impl Server {
    fn start(lie: Lie) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let served = Arc::new(AtomicUsize::new(0));
        let (l, root) = (log.clone(), package().to_path_buf());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (l, root, lie, served) = (l.clone(), root.clone(), lie.clone(), served.clone());
                std::thread::spawn(move || {
                    let _ = handle(stream, &root, &lie, &l, &served);
                });
            }
        });
        Server { endpoint, log }
    }

    fn paths(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.path.clone())
            .collect()
    }

    fn config(&self, home: &Path, token: Option<&str>) -> HubConfig {
        HubConfig {
            endpoint: self.endpoint.clone(),
            token: token.map(str::to_string),
            offline: false,
            cache_root: home.join("packages"),
        }
    }
}

fn handle(
    mut stream: TcpStream,
    root: &Path,
    lie: &Lie,
    log: &Mutex<Vec<Logged>>,
    served: &AtomicUsize,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let url = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let (mut range_from, mut auth) = (None, None);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        let (k, v) = h.split_once(':').unwrap_or((&h, ""));
        let v = v.trim();
        match k.to_ascii_lowercase().as_str() {
            "range" => {
                range_from = v
                    .strip_prefix("bytes=")
                    .and_then(|r| r.trim_end_matches('-').parse::<u64>().ok())
            }
            "authorization" => auth = Some(v.to_string()),
            _ => {}
        }
    }
    let prefix = format!("/{NS}/{REPO}/resolve/{REV}/");
    let rel = url.strip_prefix(&prefix).unwrap_or("").to_string();
    log.lock().unwrap().push(Logged {
        path: rel.clone(),
        range_from,
    });
    let status = |s: &mut TcpStream, code: &str, extra: &str| {
        write!(
            s,
            "HTTP/1.1 {code}\r\n{extra}Content-Length: 0\r\nConnection: close\r\n\r\n"
        )
    };
    match lie {
        Lie::RedirectLoop => {
            return status(&mut stream, "302 Found", &format!("Location: {url}\r\n"))
        }
        Lie::ServerError => return status(&mut stream, "500 Internal Server Error", ""),
        Lie::Token(t) if auth.as_deref() != Some(&format!("Bearer {t}")) => {
            return status(&mut stream, "401 Unauthorized", "")
        }
        _ => {}
    }
    let Ok(mut body) = std::fs::read(root.join(&rel)) else {
        return status(&mut stream, "404 Not Found", "");
    };
    let targeted = |t: &str| rel.ends_with(t);
    match lie {
        Lie::WrongBytes(t) if targeted(t) => {
            let n = body.len() / 2;
            body[n] ^= 0x5a;
        }
        Lie::WrongSize(t) if targeted(t) => body.extend_from_slice(&[0u8; 100]),
        _ => {}
    }
    let total = body.len() as u64;
    let from = range_from.unwrap_or(0).min(total);
    let rest = &body[from as usize..];
    let head = if range_from.is_some() {
        format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {from}-{}/{total}\r\n",
            total.saturating_sub(1)
        )
    } else {
        "HTTP/1.1 200 OK\r\n".to_string()
    };
    write!(
        stream,
        "{head}Content-Length: {}\r\nConnection: close\r\n\r\n",
        rest.len()
    )?;
    let cut = match lie {
        Lie::AlwaysTruncate(t) if targeted(t) => rest.len() / 2,
        Lie::TruncateOnce(t) if targeted(t) && served.fetch_add(1, Ordering::SeqCst) == 0 => {
            rest.len() / 2
        }
        _ => rest.len(),
    };
    stream.write_all(&rest[..cut])?;
    stream.flush()?;
    // Drain, then close: a cut body ends the connection early.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 64];
    let _ = reader.read(&mut sink);
    Ok(())
}

fn reference() -> String {
    format!("hf://{NS}/{REPO}@{REV}")
}

fn cache_dir(home: &Path) -> PathBuf {
    home.join("packages").join(NS).join(REPO).join(REV)
}

/// Files installed in the cache folder (the staging folder excluded).
fn installed(home: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().to_string();
            if rel.starts_with(".partial") {
                continue;
            }
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(rel);
            }
        }
    }
    let root = cache_dir(home);
    let mut out = BTreeSet::new();
    walk(&root, &root, &mut out);
    out
}

fn stage_paths(first: u64, last: u64) -> BTreeSet<String> {
    let m = lql_storage::format::package::manifest::read(package())
        .unwrap()
        .manifest;
    let mut s: BTreeSet<String> = (first..=last)
        .map(|i| m.layer(i).unwrap().artifact.path.clone())
        .collect();
    s.insert(m.shared.metadata.path.clone());
    s
}

#[test]
fn use_layers_downloads_only_the_stage_and_a_second_use_needs_no_network() {
    let server = Server::start(Lie::Token("secret-token"));
    let home = tempfile::tempdir().unwrap();
    std::env::set_var("LQL_HOME", home.path());
    std::env::set_var("HF_ENDPOINT", &server.endpoint);
    std::env::set_var("HF_TOKEN", "secret-token");
    std::env::remove_var("HF_HUB_OFFLINE");
    std::env::remove_var("LQL_OFFLINE");

    let c = Connection::open_in_memory().unwrap();
    c.execute(&format!("USE \"{}\" LAYERS 10-19", reference()))
        .unwrap();
    let mut expected = stage_paths(10, 19);
    expected.insert(MANIFEST_NAME.into());
    let requested: BTreeSet<String> = server.paths().into_iter().collect();
    assert_eq!(requested, expected, "the server's log");
    assert_eq!(server.paths().len(), expected.len(), "each file once");
    assert_eq!(installed(home.path()), expected);
    assert_eq!(c.bound_package_files().unwrap().len(), 11);

    // A second USE, in a new connection, with the endpoint unreachable: the cache answers.
    let before = server.paths().len();
    std::env::set_var("HF_ENDPOINT", "http://127.0.0.1:9");
    let c2 = Connection::open_in_memory().unwrap();
    c2.execute(&format!("USE \"{}\" LAYERS 10-19", reference()))
        .unwrap();
    assert_eq!(server.paths().len(), before, "no request on the second USE");

    // A stage that needs more fetches only what it lacks (metadata and layers 10-19 are
    // cached): layers 20-29 and the output (tied to the embeddings, so those too).
    std::env::set_var("HF_ENDPOINT", &server.endpoint);
    c2.execute(&format!("USE \"{}\" LAYERS 15-29", reference()))
        .unwrap();
    let second: BTreeSet<String> = server.paths()[before..].iter().cloned().collect();
    assert!(second.iter().all(|p| !expected.contains(p)), "{second:?}");
    assert!(second.iter().any(|p| p.contains("output")), "{second:?}");

    // SHOW PACKAGE "hf://…" of an uncached package fetches the manifest and metadata only.
    let other_home = tempfile::tempdir().unwrap();
    std::env::set_var("LQL_HOME", other_home.path());
    let before = server.paths().len();
    let rows = c2
        .execute(&format!("SHOW PACKAGE \"{}\"", reference()))
        .unwrap();
    let after: BTreeSet<String> = server.paths()[before..].iter().cloned().collect();
    assert_eq!(
        after,
        stage_paths(1, 0)
            .into_iter()
            .chain([MANIFEST_NAME.to_string()])
            .collect()
    );
    let text = format!("{rows:?}");
    assert!(text.contains("manifest_sha256"), "{text}");
    assert!(text.contains("not downloaded"), "{text}");

    // An offline connection (`--offline`) never downloads, even with the endpoint set.
    let offline_home = tempfile::tempdir().unwrap();
    std::env::set_var("LQL_HOME", offline_home.path());
    let before = server.paths().len();
    let off = Connection::open_in_memory_with_flags(lql::OpenFlags::OFFLINE).unwrap();
    let err = off
        .execute(&format!("USE \"{}\" LAYERS 10-19", reference()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("network is off"), "{err}");
    assert_eq!(
        server.paths().len(),
        before,
        "no request from an offline connection"
    );
    assert!(installed(offline_home.path()).is_empty());

    // A wrong token is refused by name and installs nothing.
    std::env::set_var("HF_TOKEN", "wrong");
    let third_home = tempfile::tempdir().unwrap();
    std::env::set_var("LQL_HOME", third_home.path());
    let err = c2
        .execute(&format!("USE \"{}\" LAYERS 0-3", reference()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("401") && err.contains("HF_TOKEN"), "{err}");
    assert!(installed(third_home.path()).is_empty());
}

#[test]
fn a_broken_transfer_resumes_with_a_range_request() {
    let server = Server::start(Lie::TruncateOnce("layer-00012.gguf"));
    let home = tempfile::tempdir().unwrap();
    let cfg = server.config(home.path(), None);
    let dir = hub::resolve_with(&reference(), Need::Stage(Some((10, 19))), &cfg).unwrap();
    let log = server.log.lock().unwrap().clone();
    let tries: Vec<&Logged> = log
        .iter()
        .filter(|r| r.path.ends_with("layer-00012.gguf"))
        .collect();
    assert_eq!(tries.len(), 2, "{log:?}");
    assert_eq!(tries[0].range_from, None);
    assert!(tries[1].range_from.is_some_and(|n| n > 0), "{log:?}");
    // The resumed file is the real one.
    let m = lql_storage::format::package::manifest::read(&dir)
        .unwrap()
        .manifest;
    let a = &m.layer(12).unwrap().artifact;
    assert_eq!(
        lql_storage::format::package::integrity::sha256_file(&dir.join(&a.path)).unwrap(),
        a.sha256
    );
    assert!(!dir.join(".partial").exists());
}

fn refused(lie: Lie, expect: &[&str]) -> (tempfile::TempDir, String) {
    let server = Server::start(lie);
    let home = tempfile::tempdir().unwrap();
    let cfg = server.config(home.path(), None);
    let err = hub::resolve_with(&reference(), Need::Stage(Some((10, 19))), &cfg)
        .unwrap_err()
        .to_string();
    for e in expect {
        assert!(err.contains(e), "{e:?} not in {err}");
    }
    assert!(
        installed(home.path()).is_empty(),
        "installed after {err}: {:?}",
        installed(home.path())
    );
    (home, err)
}

#[test]
fn wrong_bytes_are_refused_by_hash_and_nothing_is_installed() {
    let (home, _) = refused(
        Lie::WrongBytes("layer-00013.gguf"),
        &["layer-00013.gguf", "sha256", "manifest declares"],
    );
    // The bad partial file is gone, not kept for a resume.
    let part = cache_dir(home.path()).join(".partial/layers/layer-00013.gguf.part");
    assert!(!part.exists());
}

#[test]
fn a_size_that_contradicts_the_manifest_is_refused() {
    refused(
        Lie::WrongSize("layer-00011.gguf"),
        &["layer-00011.gguf", "bytes", "manifest declares"],
    );
}

#[test]
fn a_body_that_keeps_breaking_is_refused_and_kept_for_a_resume() {
    let (home, _) = refused(
        Lie::AlwaysTruncate("layer-00014.gguf"),
        &["layer-00014.gguf", "truncated", "resumes"],
    );
    let part = cache_dir(home.path()).join(".partial/layers/layer-00014.gguf.part");
    assert!(part.is_file(), "the partial download is kept");
}

#[test]
fn a_redirect_loop_is_named() {
    refused(Lie::RedirectLoop, &["redirect", MANIFEST_NAME]);
}

#[test]
fn server_errors_are_retried_then_named() {
    let (_, err) = refused(Lie::ServerError, &["500", MANIFEST_NAME]);
    assert!(err.contains("attempts"), "{err}");
}

#[test]
fn offline_without_a_cache_says_so() {
    let home = tempfile::tempdir().unwrap();
    let cfg = HubConfig {
        endpoint: "http://127.0.0.1:9".into(),
        token: None,
        offline: true,
        cache_root: home.path().join("packages"),
    };
    let err = hub::resolve_with(&reference(), Need::Metadata, &cfg)
        .unwrap_err()
        .to_string();
    assert!(err.contains("network is off"), "{err}");
    assert!(
        err.contains(&cache_dir(home.path()).display().to_string()),
        "{err}"
    );
}
