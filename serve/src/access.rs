//! What a statement may do over HTTP. Statements run on a connection bound to the served
//! model; those that read or write files are the server's business:
//!
//! - USE is refused (the served model is fixed);
//! - statements that write files (EXTRACT, REPRESENT, COMPILE, COMPACT, DIFF … INTO PATCH, BEGIN/SAVE
//!   PATCH, TRACE … SAVE) are refused unless the server runs with `--allow-writes DIR`, and
//!   then every path they name must lie under DIR (after resolving `..` and symbolic links);
//! - statements that read other files (APPLY/REMOVE PATCH, VERIFY "file", INSPECT,
//!   DESCRIBE OBJECT, PRECISION, SHOW … "container", a source path)
//!   follow the same rule;
//! - `GET /v1/lql` runs only statements that change nothing (no overlay edits either).
//!
//! With parameters the gate runs twice: on the text as sent, and on the text as it runs
//! (each parameter in its place as a literal, `lql::Statement::bound_text`), so a path
//! given as `?` or `:name` is checked exactly like one written in the statement.
//!
//! Refusals are LQL errors with code [`REFUSED_CODE`] and the statement's span.

use std::path::{Component, Path, PathBuf};

use lql_grammar::{ModelRef, StatementKind};

/// The error code of a statement refused over HTTP.
pub const REFUSED_CODE: &str = "LQL-E1001";

/// What a statement does, for the HTTP gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// Reads the bound model only.
    Read,
    /// Edits the connection's overlay (INSERT/DELETE/UPDATE): no file.
    Session,
    /// Reads and writes these files.
    Files {
        read: Vec<String>,
        write: Vec<String>,
    },
    /// Writes to the patch file BEGIN PATCH named (checked then).
    SavePatch,
    /// Not allowed over HTTP at all.
    Refused(&'static str),
}

fn model_path(m: &ModelRef, out: &mut Vec<String>) {
    if let ModelRef::Path(p) = m {
        out.push(p.clone());
    }
}

/// Classifies one statement's text (text that does not parse is `Read`: the engine
/// answers it with its syntax error and does nothing).
pub fn classify(stmt_text: &str) -> Access {
    match lql_grammar::parse_statement(stmt_text) {
        Ok(s) => classify_kind(&s.kind),
        Err(_) => Access::Read,
    }
}

fn classify_kind(kind: &StatementKind) -> Access {
    let mut read = Vec::new();
    let mut write = Vec::new();
    match kind {
        StatementKind::Use(_) => {
            return Access::Refused("USE over HTTP: the served model is fixed")
        }
        StatementKind::Insert(_) | StatementKind::Delete(_) | StatementKind::Update(_) => {
            return Access::Session
        }
        StatementKind::SavePatch => return Access::SavePatch,
        StatementKind::Set(_) => {
            return Access::Refused("SET over HTTP: the served model's backend is fixed")
        }
        StatementKind::BeginPatch(p) => write.push(p.value.clone()),
        StatementKind::ApplyPatch(p) | StatementKind::RemovePatch(p) => read.push(p.value.clone()),
        StatementKind::Verify(v) => {
            read.extend(v.target.iter().chain(&v.against).map(|p| p.value.clone()))
        }
        StatementKind::RunStage(r) => {
            if let lql_grammar::StageSource::File(h) = &r.input {
                read.push(h.value.clone());
            }
            write.push(r.into.value.clone());
        }
        StatementKind::InferFrom(i) => read.push(i.file.value.clone()),
        StatementKind::Trace(t) => {
            if let Some(p) = &t.save {
                write.push(p.value.clone());
            }
        }
        StatementKind::Diff(d) => {
            model_path(&d.left.value, &mut read);
            if let Some(r) = &d.right {
                model_path(&r.value, &mut read);
            }
            if let Some(p) = &d.into_patch {
                write.push(p.value.clone());
            }
        }
        StatementKind::Compile(c) => {
            model_path(&c.source.value, &mut read);
            write.push(c.output.value.clone());
        }
        StatementKind::Extract(e) => {
            read.push(e.source.value.clone());
            write.push(e.output.value.clone());
        }
        StatementKind::Artifact(a) => read.push(a.container.value.clone()),
        StatementKind::Show(s) => read.extend(s.container.iter().map(|c| c.value.clone())),
        StatementKind::Represent(r) => match &r.container {
            Some(c) => write.push(c.value.clone()),
            None => {
                return Access::Refused(
                    "REPRESENT into the served model's container over HTTP (name a container under --allow-writes DIR)",
                )
            }
        },
        StatementKind::Compact(c) => match &c.into {
            Some(into) => {
                read.push(c.container.value.clone());
                write.push(into.value.clone());
            }
            None => write.push(c.container.value.clone()),
        },
        StatementKind::ExplainAnalyze(inner) => return classify_kind(&inner.kind),
        _ => {}
    }
    if read.is_empty() && write.is_empty() {
        Access::Read
    } else {
        Access::Files { read, write }
    }
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

/// Checks one statement against the server's rules. `read_only`: the GET form;
/// `with_params`: parameters are bound (file paths must then be literal, so statements
/// that touch files are refused).
pub fn check(
    stmt_text: &str,
    write_dir: Option<&Path>,
    read_only: bool,
    with_params: bool,
) -> Result<(), String> {
    let access = classify(stmt_text);
    match (&access, read_only) {
        (Access::Read, _) => return Ok(()),
        (Access::Refused(why), _) => return Err(format!("refused over HTTP: {why}")),
        (_, true) => {
            return Err(
                "refused over HTTP: GET /v1/lql runs only read-only statements; POST it".into(),
            )
        }
        (Access::Session, false) => return Ok(()),
        _ => {}
    }
    let Some(dir) = write_dir else {
        return Err("refused over HTTP: this statement reads or writes files; start the server with --allow-writes DIR to allow it under DIR".into());
    };
    if with_params {
        return Err("refused over HTTP: a statement that touches files must name its paths literally, not as parameters".into());
    }
    if let Access::Files { read, write } = &access {
        for p in read.iter().chain(write) {
            if let Some(why) = outside(dir, p) {
                return Err(format!(
                    "refused over HTTP: {why}; files are read and written only under --allow-writes {}",
                    dir.display()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_classified() {
        assert_eq!(classify("INFER 'a' TOP 3"), Access::Read);
        assert_eq!(classify("SHOW LAYERS"), Access::Read);
        assert!(matches!(classify("USE \"x.gguf\""), Access::Refused(_)));
        assert_eq!(
            classify("EXTRACT MODEL \"a.gguf\" INTO \"out.vindex\""),
            Access::Files {
                read: vec!["a.gguf".into()],
                write: vec!["out.vindex".into()]
            }
        );
        assert!(matches!(
            classify("TRACE 'a' SAVE \"t.svg\""),
            Access::Files { .. }
        ));
        assert_eq!(classify("not a statement"), Access::Read);
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
