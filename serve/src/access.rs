//! What a statement may do over HTTP, decided from the effects its bound plan declares
//! ([`lql::Effects`]) and from nothing else: the engine calls [`decide`] on each statement
//! right before it runs, on the plan bound with its parameters' values
//! (`Connection::execute_each_gated`, `Statement::query_gated`), and the handler checks
//! every statement of a request the same way before the first one runs. The rule is
//! closed — [`decide`] destructures the declaration field by field, so an effect added to
//! the engine does not compile until it is decided here:
//!
//! - a statement that binds a model (USE) or changes a setting (SET) is refused: the
//!   served model and its backend are fixed;
//! - one that may use the network (a `hf://` source, a catalogue fetch) is refused;
//! - one that writes the served model's own files (REPRESENT without a container) is
//!   refused;
//! - `GET /v1/lql` runs only statements that change nothing: no edit, no steering, no
//!   patch, no file read or written besides the served model's;
//! - edits of the session's overlay (INSERT, DELETE, UPDATE, SET STEERING, APPLY/REMOVE
//!   PATCH) run on POST;
//! - a statement that reads or writes files runs only on a server started with
//!   `--allow-writes DIR`, and then every path it names must lie under DIR (after
//!   resolving `..` and symbolic links); SAVE PATCH writes the file BEGIN PATCH named,
//!   which was checked then.
//!
//! Refusals are LQL errors with code [`REFUSED_CODE`] and the statement's span.

use std::path::{Component, Path, PathBuf};

use lql::{Effects, FileRef, StateChange};

/// The error code of a statement refused over HTTP.
pub const REFUSED_CODE: lql::Code = lql::Code::Refused;

/// Whether a statement with these effects may run over HTTP. `read_only`: the GET form.
/// `Err` says why not (without the "refused over HTTP" prefix [`refusal`] adds).
pub fn decide(effects: &Effects, write_dir: Option<&Path>, read_only: bool) -> Result<(), String> {
    let Effects {
        reads_model: _,
        state,
        reads,
        writes,
        network,
        long_running: _,
    } = effects;
    if *network {
        return Err("the statement may use the network; the server reads only local files".into());
    }
    match state {
        Some(StateChange::Binding) => return Err("USE over HTTP: the served model is fixed".into()),
        Some(StateChange::Setting) => {
            return Err("SET over HTTP: the served model's settings are fixed".into())
        }
        Some(
            StateChange::Edits
            | StateChange::PatchStack
            | StateChange::Recording
            | StateChange::Steering,
        ) if read_only => return Err("GET /v1/lql runs only read-only statements; POST it".into()),
        Some(
            StateChange::Edits
            | StateChange::PatchStack
            | StateChange::Recording
            | StateChange::Steering,
        )
        | None => {}
    }
    if writes.contains(&FileRef::BoundModel) {
        return Err("the statement writes the served model's files (name a container under --allow-writes DIR)".into());
    }
    let files: Vec<&FileRef> = reads
        .iter()
        .chain(writes)
        .filter(|f| **f != FileRef::BoundModel)
        .collect();
    if files.is_empty() {
        return Ok(());
    }
    if read_only {
        return Err("GET /v1/lql runs only read-only statements; POST it".into());
    }
    let Some(dir) = write_dir else {
        return Err("this statement reads or writes files; start the server with --allow-writes DIR to allow it under DIR".into());
    };
    for f in files {
        match f {
            FileRef::Path(p) => {
                if let Some(why) = outside(dir, p) {
                    return Err(format!(
                        "{why}; files are read and written only under --allow-writes {}",
                        dir.display()
                    ));
                }
            }
            // BEGIN PATCH's path was held to this rule when it ran.
            FileRef::RecordedPatch => {}
            FileRef::BoundModel => unreachable!("filtered above"),
        }
    }
    Ok(())
}

/// [`decide`]'s answer as the LQL error the server returns (code [`REFUSED_CODE`]).
pub fn refusal(why: String) -> lql::Error {
    lql::Error::new(
        lql::ErrorKind::Semantic,
        format!("refused over HTTP: {why}"),
    )
    .with_code(REFUSED_CODE)
}

/// The gate the engine runs before each statement (see [`decide`]).
pub fn gate(
    write_dir: Option<&Path>,
    read_only: bool,
) -> impl Fn(&Effects) -> lql::Result<()> + '_ {
    move |e| decide(e, write_dir, read_only).map_err(refusal)
}

/// Why `path` is not under `dir` (`None`: it is). Relative paths are taken from the
/// server's working directory, as the engine takes them.
pub fn outside(dir: &Path, path: &str) -> Option<String> {
    let p = Path::new(path);
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Some(format!("{path:?} contains '..'"));
    }
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        match std::env::current_dir() {
            Ok(cwd) => cwd.join(p),
            Err(e) => return Some(format!("the working directory is unknown: {e}")),
        }
    };
    // Resolve symbolic links through the longest part of the path that exists.
    let mut existing = abs.clone();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    let real = loop {
        match std::fs::canonicalize(&existing) {
            Ok(r) => break r,
            Err(_) => match (existing.file_name(), existing.parent()) {
                (Some(name), Some(parent)) => {
                    rest.push(name.to_os_string());
                    existing = parent.to_path_buf();
                }
                _ => return Some(format!("{path:?} cannot be resolved")),
            },
        }
    };
    let mut full: PathBuf = real;
    for part in rest.iter().rev() {
        full.push(part);
    }
    if full.starts_with(dir) {
        None
    } else {
        Some(format!(
            "{path:?} resolves to {} outside {}",
            full.display(),
            dir.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(reads: &[&str], writes: &[&str]) -> Effects {
        Effects {
            reads: reads.iter().map(|p| FileRef::Path(p.to_string())).collect(),
            writes: writes
                .iter()
                .map(|p| FileRef::Path(p.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    /// Each kind of effect, on a server without `--allow-writes` (POST and GET) and with
    /// it (paths inside the folder and outside).
    #[test]
    fn every_effect_has_a_decision() {
        let d = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(d.path()).unwrap();
        let inside = dir.join("o.vindex").display().to_string();
        let state = |s| Effects {
            reads_model: true,
            state: Some(s),
            ..Default::default()
        };
        // (effects, POST without a folder, GET, POST with the folder)
        let cases: Vec<(Effects, bool, bool, bool)> = vec![
            (Effects::default(), true, true, true),
            (
                Effects {
                    reads_model: true,
                    long_running: true,
                    ..Default::default()
                },
                true,
                true,
                true,
            ),
            (state(StateChange::Binding), false, false, false),
            (state(StateChange::Setting), false, false, false),
            (state(StateChange::Edits), true, false, true),
            (state(StateChange::Steering), true, false, true),
            (
                Effects {
                    network: true,
                    ..Default::default()
                },
                false,
                false,
                false,
            ),
            (files(&[], &[&inside]), false, false, true),
            (files(&[&inside], &[]), false, false, true),
            (files(&["/etc/passwd"], &[]), false, false, false),
            (
                files(&[], &[&format!("{}/../x", dir.display())]),
                false,
                false,
                false,
            ),
            (
                Effects {
                    writes: vec![FileRef::RecordedPatch],
                    ..Default::default()
                },
                false,
                false,
                true,
            ),
            (
                Effects {
                    writes: vec![FileRef::BoundModel],
                    ..Default::default()
                },
                false,
                false,
                false,
            ),
            (
                Effects {
                    reads: vec![FileRef::BoundModel],
                    ..Default::default()
                },
                true,
                true,
                true,
            ),
        ];
        for (e, post, get, with_dir) in &cases {
            assert_eq!(decide(e, None, false).is_ok(), *post, "{e:?} (POST)");
            assert_eq!(decide(e, None, true).is_ok(), *get, "{e:?} (GET)");
            assert_eq!(
                decide(e, Some(&dir), false).is_ok(),
                *with_dir,
                "{e:?} (--allow-writes)"
            );
        }
    }

    #[test]
    fn paths_outside_the_folder_are_named() {
        let d = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(d.path()).unwrap();
        assert!(outside(&dir, &dir.join("a/b.vindex").display().to_string()).is_none());
        assert!(outside(&dir, &format!("{}/../x", dir.display())).is_some());
        assert!(outside(&dir, "/etc/passwd").is_some());
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/tmp", dir.join("link")).unwrap();
            assert!(outside(&dir, &dir.join("link/x").display().to_string()).is_some());
        }
    }
}
