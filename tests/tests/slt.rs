//! Runs every `.slt` golden script under `tests/slt/` against a fresh in-memory
//! connection. Floats compare within 1e-3 (see `lql_tests::slt_line_matches`).
//! `LQL_SLT_FILTER=substring` runs only the matching files.

use std::path::{Path, PathBuf};

use lql::Connection;
use lql_tests::{slt_cell, slt_line_matches};
use sqllogictest::{DBOutput, DefaultColumnType, Normalizer, Runner};

struct LqlDb {
    conn: Connection,
}

#[derive(Debug)]
struct SltError(String);

impl std::fmt::Display for SltError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for SltError {}

impl sqllogictest::DB for LqlDb {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let rows = self.conn.execute(sql).map_err(|e| {
            // No user input in the suites may reach an internal error.
            assert_ne!(
                e.kind,
                lql::ErrorKind::Internal,
                "internal error on {sql:?}: {e}"
            );
            SltError(format!("{} {}", e.code(), e.message))
        })?;
        if rows.columns.is_empty() {
            return Ok(DBOutput::StatementComplete(0));
        }
        Ok(DBOutput::Rows {
            types: vec![DefaultColumnType::Any; rows.columns.len()],
            rows: rows
                .rows
                .iter()
                .map(|r| r.iter().map(slt_cell).collect())
                .collect(),
        })
    }
}

fn float_tolerant(normalizer: Normalizer, actual: &[Vec<String>], expected: &[String]) -> bool {
    let actual: Vec<String> = actual
        .iter()
        .map(|row| row.iter().map(normalizer).collect::<Vec<_>>().join(" "))
        .collect();
    actual.len() == expected.len()
        && actual
            .iter()
            .zip(expected)
            .all(|(a, e)| slt_line_matches(a, &normalizer(e), 1e-3))
}

fn slt_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            slt_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "slt") {
            out.push(path);
        }
    }
}

#[test]
fn golden_scripts() {
    // The scripts bind the default model by name; make sure it is in the cache first.
    let _ = lql_tests::default_model_path();
    let root = lql_tests::repo_root().join("tests/slt");
    let mut files = Vec::new();
    slt_files(&root, &mut files);
    files.sort();
    let filter = std::env::var("LQL_SLT_FILTER").unwrap_or_default();
    files.retain(|f| f.to_string_lossy().contains(&filter));
    assert!(!files.is_empty(), "no .slt files under {}", root.display());

    let mut failures = Vec::new();
    for file in &files {
        let mut runner = Runner::new(|| async {
            Ok(LqlDb {
                conn: Connection::open_in_memory().map_err(|e| SltError(e.message))?,
            })
        });
        runner.with_validator(float_tolerant);
        match runner.run_file(file) {
            Ok(()) => println!("ok   {}", file.display()),
            Err(e) => {
                println!("FAIL {}\n{}", file.display(), e.display(false));
                failures.push(file.display().to_string());
            }
        }
    }
    assert!(failures.is_empty(), "failing scripts: {failures:?}");
}
