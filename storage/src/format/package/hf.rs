//! `hf://namespace/repo[:revision|@revision]` package references and their folders in the
//! package cache `$LQL_HOME/packages/<namespace>/<repo>/<revision>/` (revision `main` when
//! none is given). `@` takes precedence over `:` (split at the last `:`), as in the
//! reference parser. [`super::hub`] fills the folder from the network; packages resolved
//! this way are always checksum-verified, cache hits included.

use std::path::PathBuf;

use crate::error::{Result, StorageError};

/// A parsed `hf://` reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfRef {
    pub namespace: String,
    pub repo: String,
    pub revision: Option<String>,
}

/// Whether `s` is an `hf://` reference (as opposed to a path or catalogue name).
pub fn is_hf_ref(s: &str) -> bool {
    s.starts_with("hf://")
}

fn bad(s: &str, why: &str) -> StorageError {
    StorageError::Invalid(format!("invalid package reference {s:?}: {why}"))
}

fn plain(part: &str) -> bool {
    !part.is_empty()
        && part != "."
        && part != ".."
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Parse `hf://ns/repo`, `hf://ns/repo@rev` or `hf://ns/repo:rev`.
pub fn parse(s: &str) -> Result<HfRef> {
    let rest = s
        .strip_prefix("hf://")
        .ok_or_else(|| bad(s, "it must start with hf://"))?;
    let (repo_part, revision) = if let Some((r, v)) = rest.split_once('@') {
        (r, Some(v))
    } else if let Some((r, v)) = rest.rsplit_once(':') {
        (r, Some(v))
    } else {
        (rest, None)
    };
    if revision.is_some_and(|v| !plain(v)) {
        return Err(bad(s, "the revision is empty or not a plain name"));
    }
    let (ns, repo) = repo_part
        .split_once('/')
        .ok_or_else(|| bad(s, "the repository must be namespace/repo"))?;
    if !plain(ns) || !plain(repo) {
        return Err(bad(s, "the repository must be exactly namespace/repo"));
    }
    Ok(HfRef {
        namespace: ns.into(),
        repo: repo.into(),
        revision: revision.map(str::to_string),
    })
}

/// `$LQL_HOME`, else `~/.cache/lql`.
pub fn lql_home() -> Result<PathBuf> {
    if let Some(h) = std::env::var_os("LQL_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(h));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache").join("lql")),
        None => Err(StorageError::Invalid(
            "cannot locate the package cache: neither LQL_HOME nor HOME is set".into(),
        )),
    }
}

impl HfRef {
    /// The cache folder of this reference under the package cache `root`.
    pub fn cache_path_in(&self, root: &std::path::Path) -> PathBuf {
        root.join(&self.namespace)
            .join(&self.repo)
            .join(self.revision.as_deref().unwrap_or("main"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_as_the_reference_does() {
        let r = parse("hf://meshllm/Qwen3-8B-layers").unwrap();
        assert_eq!((r.namespace.as_str(), r.revision), ("meshllm", None));
        assert_eq!(
            parse("hf://a/b:8f4c2d1").unwrap().revision.as_deref(),
            Some("8f4c2d1")
        );
        assert_eq!(
            parse("hf://a/b@main").unwrap().revision.as_deref(),
            Some("main")
        );
        for bad in [
            "hf://a",
            "hf://a/b/c",
            "hf://a/b@",
            "hf://../b",
            "hf:///b",
            "x://a/b",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
