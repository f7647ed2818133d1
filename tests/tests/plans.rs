//! EXPLAIN shows the tree that runs: for every statement of the tour and of the `.slt`
//! suites, the tree `EXPLAIN PLAN` prints equals the tree `EXPLAIN ANALYZE` reports having
//! run (operator by operator, parameters included), and — for WALK and INFER — the tree
//! `EXPLAIN WALK` / `EXPLAIN INFER` prints above its per-layer trace. The columns a prepared
//! statement reports before running equal the columns of its result.

use std::path::Path;

use lql::{Connection, Value};
use lql_tests::{default_model_path, repo_root};

/// Statements worth checking from a `.slt` file or a script: the ones expected to succeed.
fn statements_of(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    if path.extension().is_some_and(|e| e == "lql") {
        return lql::split_statements(&text)
            .into_iter()
            .map(|s| text[s.range()].trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
    }
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        let l = l.trim();
        if l == "statement ok" || l.starts_with("query ") {
            let mut stmt = Vec::new();
            while let Some(n) = lines.peek() {
                if n.trim().is_empty() || n.trim() == "----" {
                    break;
                }
                stmt.push(lines.next().unwrap_or_default().to_string());
            }
            out.push(stmt.join("\n"));
        }
    }
    out
}

fn slt_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            slt_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "slt") {
            out.push(p);
        }
    }
}

fn lines_of(rows: &lql::Rows, col: usize) -> Vec<String> {
    rows.rows.iter().map(|r| r[col].to_string()).collect()
}

/// The tree part of an analyzed line: everything before the `  [stats]` suffix.
/// The line of the first `op` node in an EXPLAIN tree.
fn node_line<'a>(lines: &'a [String], op: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.trim_start().starts_with(op))
        .unwrap_or_else(|| panic!("no {op} node in {lines:#?}"))
}

fn strip_stats(l: &str) -> String {
    match l.rfind("  [") {
        Some(i) => l[..i].to_string(),
        None => l.to_string(),
    }
}

fn kind_of(stmt: &str) -> String {
    stmt.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase()
}

#[test]
fn explain_plan_equals_the_tree_that_runs() {
    let root = repo_root();
    let mut files = vec![root.join("examples/tour.lql")];
    slt_files(&root.join("tests/slt"), &mut files);
    files.sort();
    let model = default_model_path();
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for f in &files {
        let conn = Connection::open_in_memory().unwrap();
        conn.bind(model.to_str().unwrap()).unwrap();
        for stmt in statements_of(f) {
            let kind = kind_of(&stmt);
            // EXPLAIN is checked through its inner statements; writes go to a temp dir.
            if kind == "EXPLAIN" {
                continue;
            }
            let stmt = if kind == "EXTRACT" {
                let out = dir.path().join(format!("c{checked}"));
                let src = stmt.split('"').nth(1).unwrap_or_default().to_string();
                format!(
                    "EXTRACT MODEL {} INTO {}",
                    lql::quote(&src),
                    lql::quote(out.to_str().unwrap())
                )
            } else {
                stmt
            };
            let plan = conn
                .execute(&format!("EXPLAIN PLAN {stmt}"))
                .unwrap_or_else(|e| panic!("EXPLAIN PLAN {stmt}: {e}"));
            // Cost warnings and the declared effects follow the tree in EXPLAIN PLAN only.
            let plan: Vec<String> = lines_of(&plan, 0)
                .into_iter()
                .filter(|l| !l.starts_with("warning: ") && !l.starts_with("effects: "))
                .collect();
            // Columns known before running equal the result's.
            let before = conn.prepare(&stmt).unwrap().column_names().unwrap();
            let analyzed = conn
                .execute(&format!("EXPLAIN ANALYZE {stmt}"))
                .unwrap_or_else(|e| panic!("EXPLAIN ANALYZE {stmt}: {e}"));
            let ran: Vec<String> = lines_of(&analyzed, 0)
                .iter()
                .map(|l| strip_stats(l))
                .collect();
            assert_eq!(
                plan,
                ran,
                "{}: EXPLAIN PLAN vs ANALYZE of {stmt}",
                f.display()
            );
            assert!(
                lines_of(&analyzed, 0).iter().all(|l| l.contains("rows=")),
                "every node of {stmt} ran and reports its rows"
            );
            let result = conn.execute(&stmt).unwrap();
            let after: Vec<String> = result.columns.iter().map(|c| c.name.clone()).collect();
            assert_eq!(before, after, "columns before and after running {stmt}");
            match kind.as_str() {
                "WALK" => {
                    let ex = conn.execute(&format!("EXPLAIN {stmt}")).unwrap();
                    let tree: Vec<String> = lines_of(&ex, 0)
                        .iter()
                        .take(plan.len())
                        .map(|l| strip_stats(l))
                        .collect();
                    assert_eq!(plan, tree, "EXPLAIN WALK prints the tree it ran: {stmt}");
                }
                "INFER" if !stmt.to_ascii_uppercase().contains(" GENERATE ") => {
                    let ex = conn.execute(&format!("EXPLAIN {stmt}")).unwrap();
                    let tree: Vec<String> = ex
                        .rows
                        .iter()
                        .filter(|r| r[0] == Value::from("plan"))
                        .map(|r| r[2].to_string())
                        .collect();
                    assert_eq!(plan, tree, "EXPLAIN INFER prints the tree it ran: {stmt}");
                }
                _ => {}
            }
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} statements checked");
}

#[test]
fn walk_over_layers_20_to_22_runs_23_layers() {
    let conn = Connection::open(default_model_path().to_str().unwrap()).unwrap();
    let rows = conn
        .execute("EXPLAIN ANALYZE WALK 'The capital of France is' TOP 3 LAYERS 20-22 MODE RESIDUAL")
        .unwrap();
    let lines = lines_of(&rows, 0);
    let forward = node_line(&lines, "Forward");
    assert!(forward.contains("layers=0-22"), "{forward}");
    assert!(forward.contains("layers_run=23"), "{forward}");
    let scan = node_line(&lines, "GateScan");
    assert!(scan.contains("rows=9"), "3 layers × top 3: {scan}");
}

/// A LIMIT over a trace's rows stops its pass after the layers those rows need: the
/// embedding's row and layers 0–1 for `LIMIT 3`, so two layers run and no head; the rows
/// equal the first three of the whole trace, bit for bit.
#[test]
fn limit_over_a_trace_runs_only_the_layers_its_rows_need() {
    let conn = Connection::open(default_model_path().to_str().unwrap()).unwrap();
    let prompt = "'The capital of France is'";
    let q = format!("SELECT * FROM TRACE({prompt}) LIMIT 3");
    let lines = lines_of(&conn.execute(&format!("EXPLAIN ANALYZE {q}")).unwrap(), 0);
    let forward = node_line(&lines, "Forward");
    assert!(forward.contains("layers=0-1"), "{forward}");
    assert!(forward.contains("layers_run=2"), "{forward}");
    assert!(
        !lines.iter().any(|l| l.trim_start().starts_with("Head")),
        "{lines:#?}"
    );
    let planned = lines_of(&conn.execute(&format!("EXPLAIN PLAN {q}")).unwrap(), 0);
    assert!(
        planned.iter().any(|l| l.contains("Forward layers=0-1")),
        "{planned:#?}"
    );

    let limited = conn.execute(&q).unwrap();
    let whole = conn.execute(&format!("TRACE {prompt}")).unwrap();
    assert_eq!(limited.len(), 3);
    for i in 0..3 {
        assert_eq!(
            limited.row(i).unwrap().values(),
            whole.row(i).unwrap().values(),
            "row {i}"
        );
    }

    // What needs every layer keeps the whole pass: a filter, an order, or FOR.
    for q in [
        format!("SELECT * FROM TRACE({prompt}) WHERE top_prob > 0.5 LIMIT 3"),
        format!("SELECT * FROM TRACE({prompt}) ORDER BY top_prob LIMIT 3"),
        format!("SELECT * FROM TRACE({prompt}, FOR => ' Paris') LIMIT 3"),
    ] {
        let lines = lines_of(&conn.execute(&format!("EXPLAIN PLAN {q}")).unwrap(), 0);
        assert!(
            lines.iter().any(|l| l.contains("Forward layers=0-29")),
            "{q}: {lines:#?}"
        );
    }
}

/// ANALYZE's `layers_run=` is counted by the executor as each layer runs: GENERATE's
/// prefill runs every layer once, and each token after the first one more pass.
#[test]
fn layers_run_is_counted_as_the_layers_run() {
    let conn = Connection::open(default_model_path().to_str().unwrap()).unwrap();
    let n_layers: i64 = conn
        .query_row("SELECT count(*) FROM layers", (), |r| r.get(0))
        .unwrap();
    let lines = lines_of(
        &conn
            .execute("EXPLAIN ANALYZE GENERATE 'The capital of France is' MAX 5")
            .unwrap(),
        0,
    );
    let count = |op: &str| -> i64 {
        let l = node_line(&lines, op);
        let after = l.split_once("layers_run=").expect(l).1;
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().expect(l)
    };
    assert_eq!(count("Forward"), n_layers);
    let generated: i64 = conn
        .query_row(
            "SELECT generated_tokens FROM (GENERATE 'The capital of France is' MAX 5)",
            (),
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(count("DecodeLoop"), (generated - 1) * n_layers);
}
