//! Files no statement may write over: the bound model (its file, or every file under its
//! folder: a container, a layer package, a Hugging Face folder), each applied patch's
//! file, and any other model the statement itself reads (DIFF's sides). The check holds
//! under every alias of a path: `./p`, `a/../p`, a symbolic link (resolved) and a hard
//! link (the same device and inode).
//!
//! Writers call [`refuse_overwrite`] before they write (SAVE PATCH, DIFF … INTO PATCH,
//! TRACE … SAVE, RUN STAGE … INTO, BEGIN PATCH when it starts recording). COMPILE and
//! EXTRACT never write over an existing path at all.

use std::path::{Path, PathBuf};

use lql_storage::overlay::PatchOrigin;

use super::Cx;
use crate::error::{Error, Result};

/// What a target path is compared by.
struct Identity {
    /// The resolved path (symbolic links and `..` resolved), when it exists.
    real: Option<PathBuf>,
    /// (device, inode) of the file, when it exists (unix).
    inode: Option<(u64, u64)>,
}

fn identity(path: &Path) -> Identity {
    let real = std::fs::canonicalize(path).ok().or_else(|| {
        // A file not written yet: its folder resolved, its name appended.
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Some(std::fs::canonicalize(parent).ok()?.join(path.file_name()?))
    });
    #[cfg(unix)]
    let inode = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    };
    #[cfg(not(unix))]
    let inode = None;
    Identity { real, inode }
}

/// Whether `target` is `protected` (a file, or a folder whose whole tree is protected).
fn covers(protected: &Path, target: &Identity) -> bool {
    let p = identity(protected);
    if let (Some(a), Some(b)) = (p.inode, target.inode) {
        if a == b {
            return true;
        }
    }
    match (&p.real, &target.real) {
        (Some(pr), Some(tr)) => {
            tr == pr || (protected.is_dir() && tr.starts_with(pr)) || hard_link_inside(pr, target)
        }
        _ => false,
    }
}

/// A hard link to one of a protected folder's files, from outside it (folders hold few
/// files: a container's segments, a package's fragments).
fn hard_link_inside(dir: &Path, target: &Identity) -> bool {
    let Some(ino) = target.inode else {
        return false;
    };
    if !dir.is_dir() {
        return false;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let mut stack = vec![dir.to_path_buf()];
        let mut seen = 0usize;
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                seen += 1;
                if seen > 100_000 {
                    return false;
                }
                let Ok(m) = e.metadata() else { continue };
                if m.is_dir() {
                    stack.push(e.path());
                } else if (m.dev(), m.ino()) == ino {
                    return true;
                }
            }
        }
    }
    false
}

/// Refuses to write `target` when it is, or lies inside, a file the connection reads:
/// the bound model, an applied patch, or one of `also` (the statement's own inputs).
/// `what` names the statement in the error.
pub(crate) fn refuse_overwrite(
    cx: &Cx<'_>,
    target: &str,
    what: &str,
    also: &[&Path],
) -> Result<()> {
    refuse(cx, target, what, also, None)
}

/// [`refuse_overwrite`] for a statement that writes the applied patch `own` over its own
/// file (SAVE PATCH "file"): every other file the connection reads stays protected.
pub(crate) fn refuse_overwrite_but_own(
    cx: &Cx<'_>,
    target: &str,
    what: &str,
    own: &str,
) -> Result<()> {
    refuse(cx, target, what, &[], Some(own))
}

fn refuse(cx: &Cx<'_>, target: &str, what: &str, also: &[&Path], own: Option<&str>) -> Result<()> {
    let t = identity(Path::new(target));
    let mut protected: Vec<(PathBuf, String)> = also
        .iter()
        .map(|p| (p.to_path_buf(), "a model this statement reads".to_string()))
        .collect();
    if let Some(b) = cx.engine.bound.as_ref() {
        protected.push((b.model().path.clone(), "the bound model".into()));
        for p in b
            .edits
            .applied
            .iter()
            .filter(|p| Some(p.name().as_str()) != own)
        {
            if let PatchOrigin::File { path, .. } | PatchOrigin::Edited { path, .. } = &p.origin {
                protected.push((PathBuf::from(path), format!("the applied patch {path}")));
            }
        }
    }
    for (p, name) in &protected {
        if covers(p, &t) {
            return Err(Error::io(format!(
                "{what} {target:?}: that is {name} ({}); refusing to write over it",
                p.display()
            ))
            .with_code(crate::Code::Protected));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve_to_the_same_file() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("m.gguf");
        std::fs::write(&f, b"x").unwrap();
        let same = |s: &Path| covers(&f, &identity(s));
        assert!(same(&f));
        std::fs::create_dir(d.path().join("sub")).unwrap();
        assert!(same(&d.path().join("sub/../m.gguf")));
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&f, d.path().join("link")).unwrap();
            assert!(same(&d.path().join("link")));
            std::fs::hard_link(&f, d.path().join("hard")).unwrap();
            assert!(same(&d.path().join("hard")));
        }
        std::fs::write(d.path().join("other"), b"y").unwrap();
        assert!(!same(&d.path().join("other")));
        assert!(!same(&d.path().join("new-file")));
    }

    #[test]
    fn a_folder_protects_its_tree() {
        let d = tempfile::tempdir().unwrap();
        let c = d.path().join("c.vindex");
        std::fs::create_dir_all(c.join("seg")).unwrap();
        std::fs::write(c.join("seg/a.bin"), b"x").unwrap();
        assert!(covers(&c, &identity(&c.join("index.json"))));
        assert!(covers(&c, &identity(&c.join("seg/a.bin"))));
        #[cfg(unix)]
        {
            std::fs::hard_link(c.join("seg/a.bin"), d.path().join("out.svg")).unwrap();
            assert!(covers(&c, &identity(&d.path().join("out.svg"))));
        }
        assert!(!covers(&c, &identity(&d.path().join("elsewhere.svg"))));
    }
}
