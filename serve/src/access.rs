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

/// Every statement kind is named here, without a wildcard: a statement added to the
/// grammar does not compile until it is classified, so the gate cannot fail open.
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
        // Steering is the connection's state, like an edit; a control-vector file is read.
        StatementKind::SetSteering(s) => match steering_file(s.as_ref()) {
            None => return Access::Session,
            Some(f) => read.push(f),
        },
        StatementKind::SaveSteering(p) => write.push(p.value.clone()),
        // One statement steered: its own rule, plus the control-vector file it reads.
        StatementKind::Steered {
            steering,
            statement,
        } => {
            let inner = classify_kind(&statement.kind);
            return match (steering_file(Some(steering)), inner) {
                (None, inner) => inner,
                (Some(f), Access::Read) => Access::Files {
                    read: vec![f],
                    write: Vec::new(),
                },
                (Some(f), Access::Files { mut read, write }) => {
                    read.push(f);
                    Access::Files { read, write }
                }
                (Some(_), _) => Access::Refused(
                    "WITH STEERING from a file before an edit or SAVE PATCH over HTTP",
                ),
            };
        }
        StatementKind::Set(_) => {
            return Access::Refused("SET over HTTP: the served model's backend is fixed")
        }
        // Only the bound model, no file.
        StatementKind::Infer(_)
        | StatementKind::Generate(_)
        | StatementKind::Walk(_)
        | StatementKind::Describe(_)
        | StatementKind::Select(_)
        | StatementKind::Stats
        | StatementKind::Tokenize(_)
        | StatementKind::DescribeTable(_) => {}
        StatementKind::Patch(p) => {
            if let Some(s) = &p.save {
                write.push(s.value.clone());
            }
        }
        StatementKind::BeginPatch(p) => write.push(p.value.clone()),
        StatementKind::ApplyPatch(p) | StatementKind::RemovePatch(p) => read.push(p.value.clone()),
        StatementKind::Verify(v) => {
            read.extend(v.target.iter().chain(&v.against).map(|p| p.value.clone()))
        }
        StatementKind::RunStage(r) => {
            match &r.input {
                lql_grammar::StageSource::File(h) => read.push(h.value.clone()),
                lql_grammar::StageSource::Prompt(_) => {}
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
            // A layer package copies each projector file in: an input like the source.
            read.extend(e.projectors.iter().map(|p| p.value.clone()));
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
        // EXPLAIN runs WALK and INFER, and plans the others (planning may open the
        // files a statement names): each is held to its inner statement's rule.
        StatementKind::Explain(inner)
        | StatementKind::ExplainPlan(inner)
        | StatementKind::ExplainAnalyze(inner) => return classify_kind(&inner.kind),
    }
    if read.is_empty() && write.is_empty() {
        Access::Read
    } else {
        Access::Files { read, write }
    }
}

fn steering_file(s: Option<&lql_grammar::Spanned<lql_grammar::SteeringSpec>>) -> Option<String> {
    match &s?.value.source {
        lql_grammar::SteeringSource::File(f) => Some(f.value.clone()),
        lql_grammar::SteeringSource::Difference { .. } => None,
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

/// Checks one statement against the server's rules. `read_only`: the GET form. With
/// parameters the caller checks the text as sent and again as it runs (parameters in
/// place), so a path is held to the same rule however it is spelled.
pub fn check(stmt_text: &str, write_dir: Option<&Path>, read_only: bool) -> Result<(), String> {
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
        assert_eq!(classify("SET STEERING = OFF"), Access::Session);
        assert_eq!(
            classify("SET STEERING = ('a') MINUS ('b') AT LAYER 3"),
            Access::Session
        );
        let files = |read: &[&str], write: &[&str]| Access::Files {
            read: read.iter().map(|s| s.to_string()).collect(),
            write: write.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(classify("SET STEERING = 'v.gguf'"), files(&["v.gguf"], &[]));
        assert_eq!(classify("SAVE STEERING 'o.gguf'"), files(&[], &["o.gguf"]));
        assert_eq!(
            classify("WITH STEERING 'v.gguf' TRACE 'x' SAVE 't.json'"),
            files(&["v.gguf"], &["t.json"])
        );
        assert_eq!(
            classify("WITH STEERING ('a') MINUS ('b') AT LAYER 2 INFER 'x'"),
            Access::Read
        );
        assert!(matches!(
            classify("WITH STEERING 'v.gguf' INSERT INTO edges (subject, relation, target) VALUES ('a', 'b', 'c')"),
            Access::Refused(_)
        ));
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

    /// The decision for one statement of every kind, on a server without `--allow-writes`
    /// (POST and GET) and with it (a path inside the folder).
    #[test]
    fn every_statement_kind_has_a_decision() {
        let d = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(d.path()).unwrap();
        let p = |name: &str| format!("{:?}", dir.join(name).display().to_string());
        // (statement, kind name, allowed without a folder (POST), allowed on GET,
        //  allowed with the folder)
        let cases: Vec<(String, &str, bool, bool, bool)> = vec![
            (format!("USE {}", p("m.gguf")), "USE", false, false, false),
            ("INFER 'a' TOP 1".into(), "INFER", true, true, true),
            ("GENERATE 'a' MAX 1".into(), "GENERATE", true, true, true),
            ("WALK 'a'".into(), "WALK", true, true, true),
            ("DESCRIBE 'France'".into(), "DESCRIBE", true, true, true),
            ("SELECT * FROM layers".into(), "SELECT", true, true, true),
            ("TRACE 'a'".into(), "TRACE", true, true, true),
            (
                format!("TRACE 'a' SAVE {}", p("t.svg")),
                "TRACE",
                false,
                false,
                true,
            ),
            (
                "INSERT INTO edges (entity, relation, target) VALUES ('a', 'b', 'c')".into(),
                "INSERT",
                true,
                false,
                true,
            ),
            (
                "DELETE FROM edges WHERE entity = 'a'".into(),
                "DELETE",
                true,
                false,
                true,
            ),
            (
                "UPDATE features SET down_scale = 2 WHERE layer = 1 AND feature = 2".into(),
                "UPDATE",
                true,
                false,
                true,
            ),
            (
                format!("BEGIN PATCH {}", p("p.lqlpatch")),
                "BEGIN PATCH",
                false,
                false,
                true,
            ),
            ("SAVE PATCH".into(), "SAVE PATCH", false, false, true),
            ("SET backend = 'cpu'".into(), "SET", false, false, false),
            (
                format!("APPLY PATCH {}", p("p.lqlpatch")),
                "APPLY PATCH",
                false,
                false,
                true,
            ),
            (
                format!("REMOVE PATCH {}", p("p.lqlpatch")),
                "REMOVE PATCH",
                false,
                false,
                true,
            ),
            ("DIFF CURRENT".into(), "DIFF", true, true, true),
            (
                format!("DIFF {} CURRENT", p("a.gguf")),
                "DIFF",
                false,
                false,
                true,
            ),
            (
                format!("COMPILE CURRENT INTO GGUF {}", p("o.gguf")),
                "COMPILE",
                false,
                false,
                true,
            ),
            (
                format!("EXTRACT MODEL {} INTO {}", p("a.gguf"), p("o.vindex")),
                "EXTRACT",
                false,
                false,
                true,
            ),
            ("REPRESENT LABELS".into(), "REPRESENT", false, false, false),
            (
                format!("REPRESENT LABELS {}", p("c.vindex")),
                "REPRESENT",
                false,
                false,
                true,
            ),
            (
                format!("INSPECT {}", p("c.vindex")),
                "INSPECT",
                false,
                false,
                true,
            ),
            (
                format!("COMPACT {}", p("c.vindex")),
                "COMPACT",
                false,
                false,
                true,
            ),
            ("VERIFY".into(), "VERIFY", true, true, true),
            (
                format!("VERIFY {}", p("c.vindex")),
                "VERIFY",
                false,
                false,
                true,
            ),
            ("SHOW LAYERS".into(), "SHOW", true, true, true),
            (
                format!("SHOW COMPONENTS {}", p("c.vindex")),
                "SHOW",
                false,
                false,
                true,
            ),
            ("STATS".into(), "STATS", true, true, true),
            ("TOKENIZE 'a'".into(), "TOKENIZE", true, true, true),
            ("EXPLAIN INFER 'a'".into(), "EXPLAIN", true, true, true),
            (
                format!("EXPLAIN PLAN COMPILE CURRENT INTO GGUF {}", p("o.gguf")),
                "EXPLAIN PLAN",
                false,
                false,
                true,
            ),
            (
                "EXPLAIN ANALYZE INFER 'a'".into(),
                "EXPLAIN ANALYZE",
                true,
                true,
                true,
            ),
            (
                "DESCRIBE TABLE layers".into(),
                "DESCRIBE TABLE",
                true,
                true,
                true,
            ),
            (
                format!("RUN STAGE 'a' INTO {}", p("h.bin")),
                "RUN STAGE",
                false,
                false,
                true,
            ),
            (
                format!("INFER FROM {}", p("h.bin")),
                "INFER FROM",
                false,
                false,
                true,
            ),
        ];
        let mut kinds = std::collections::BTreeSet::new();
        for (text, kind, post, get, with_dir) in &cases {
            let parsed =
                lql_grammar::parse_statement(text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
            let name = parsed.kind.name();
            let name = if name == "DESCRIBE OBJECT" || name == "PRECISION" {
                "INSPECT"
            } else {
                name
            };
            assert_eq!(name, *kind, "{text}");
            kinds.insert(name);
            assert_eq!(check(text, None, false).is_ok(), *post, "{text} (POST)");
            assert_eq!(check(text, None, true).is_ok(), *get, "{text} (GET)");
            assert_eq!(
                check(text, Some(&dir), false).is_ok(),
                *with_dir,
                "{text} (--allow-writes)"
            );
        }
        // One case per `StatementKind` variant (INSPECT stands for the three artifact forms).
        assert_eq!(
            kinds.len(),
            31,
            "a statement kind without a case: {kinds:?}"
        );
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
