//! The `lql` binary in batch mode: `-c`, script files, stdin, `--format json`, and errors
//! rendered on stderr with exit code 1 (the run goes on after them unless `-bail`).
//!
//! Tests that run the model find it through the catalogue (`LQL_HOME` or
//! `~/.cache/lql/models`); run them with `--release`.

use std::io::Write;
use std::process::{Command, Output, Stdio};

const MODEL: &str = "smollm2-135m-instruct";

fn lql(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lql"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run lql")
}

fn lql_stdin(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lql"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lql");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().expect("wait for lql")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Parses every stdout line as a JSON object.
fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

#[test]
fn c_flag_runs_statements_and_prints_a_table() {
    let o = lql(&["-c", "SHOW MODELS;"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains(MODEL), "{out}");
    assert!(out.contains("╭") && out.contains("cached"), "{out}");
}

#[test]
fn json_format_follows_the_contract() {
    let o = lql(&[
        "--format",
        "json",
        "-c",
        &format!("SHOW MODELS; USE MODEL '{MODEL}'; STATS;"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = json_lines(&o);
    // USE is a status: silent in a script's JSON output.
    assert_eq!(lines.len(), 2, "{}", stdout(&o));
    assert_eq!(lines[0]["statement"], "SHOW MODELS");
    assert_eq!(lines[0]["columns"][0], "name");
    assert_eq!(lines[1]["statement"], "STATS");
    let stats = &lines[1]["rows"];
    let layers = stats
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[0] == "layers")
        .expect("a layers row");
    assert_eq!(layers[1], 30);
}

#[test]
fn scripts_run_in_order_with_dot_commands() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.lql");
    let b = dir.path().join("b.lql");
    std::fs::write(
        &a,
        "-- first script\n.mode csv\nSHOW MODELS\n  LIKE 'smol%';\n",
    )
    .unwrap();
    std::fs::write(&b, ".mode jsonl\nSHOW MODELS;\n").unwrap();
    let o = lql(&[a.to_str().unwrap(), b.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let mut lines = out.lines();
    assert_eq!(
        lines.next().unwrap(),
        "name,cached,bytes,licence,package,path"
    );
    assert!(lines.next().unwrap().starts_with(MODEL), "{out}");
    let last: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(last["name"], MODEL);
}

#[test]
fn statements_are_read_from_stdin() {
    let o = lql_stdin(&["--format", "line"], "SHOW MODELS;\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("name = {MODEL}")),
        "{}",
        stdout(&o)
    );
}

#[test]
fn an_error_exits_1_with_a_caret_and_the_run_goes_on() {
    let o = lql(&["-c", "SHOW MODELS;\nFROB 'x';\nSHOW MODELS;"]);
    assert_eq!(o.status.code(), Some(1));
    // The statement after the error ran too.
    assert_eq!(stdout(&o).matches("cached").count(), 2, "{}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains("unknown keyword FROB"), "{err}");
    // The source line and a marker under FROB (column 0 of line 2).
    let lines: Vec<&str> = err.lines().collect();
    let src = lines
        .iter()
        .position(|l| l.contains("FROB 'x';"))
        .expect("source line");
    let col = lines[src].find("FROB").unwrap();
    let under = lines[src + 1];
    let mark = under.find(['^', '┬', '─']).expect("marker line");
    assert_eq!(
        under[..mark].chars().count(),
        lines[src][..col].chars().count(),
        "{err}"
    );
    assert!(err.contains("-c:2:1"), "{err}");
}

#[test]
fn json_errors_are_one_line_on_stderr() {
    let o = lql(&["--format", "json", "-c", "SHOW MODELS; FROB 'x';"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(json_lines(&o).len(), 1);
    let err = stderr(&o);
    let v: serde_json::Value = serde_json::from_str(err.trim()).expect("one JSON line");
    assert_eq!(v["error"]["kind"], "syntax");
    assert_eq!(v["error"]["span"], serde_json::json!([13, 17]));
    assert!(v["error"]["message"].as_str().unwrap().contains("FROB"));
}

#[test]
fn semantic_errors_name_their_kind() {
    let o = lql(&["--format", "json", "-c", "STATS;"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(stderr(&o).trim()).unwrap();
    assert_eq!(v["error"]["kind"], "semantic");
    assert!(v["error"]["message"].as_str().unwrap().contains("no model"));
}

#[test]
fn unbuilt_statements_are_unsupported() {
    let o = lql(&[
        "--format",
        "json",
        "--model",
        MODEL,
        "-c",
        "UPDATE features SET down = 0 WHERE layer = 1 AND feature = 2;",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(stderr(&o).trim()).unwrap();
    assert_eq!(v["error"]["kind"], "unsupported");
    assert_eq!(
        v["error"]["message"],
        "not supported yet: UPDATE features SET down (gate_scale and down_scale are built)"
    );
}

#[test]
fn missing_script_file_fails() {
    let o = lql(&["/nonexistent/script.lql"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("/nonexistent/script.lql"));
}

#[test]
fn model_flag_binds_before_the_first_statement() {
    let o = lql(&[
        "--model",
        MODEL,
        "--format",
        "csv",
        "-c",
        "SHOW LAYERS LIKE '29';",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("\n29,Q4_1,Q4_1,F32,9,"), "{out}");
    assert!(!out.contains('\r'), "CSV lines end with LF: {out:?}");
}

#[test]
fn infer_ranks_paris_first() {
    let o = lql(&[
        "--format",
        "json",
        "-c",
        &format!("USE MODEL '{MODEL}'; INFER 'The capital of France is' TOP 5;"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = json_lines(&o);
    assert_eq!(lines.len(), 1, "USE is silent: {}", stdout(&o));
    let infer = &lines[0];
    assert_eq!(
        infer["columns"],
        serde_json::json!(["rank", "token", "token_id", "prob", "logit"])
    );
    let rows = infer["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[0][0], 1);
    assert_eq!(rows[0][1], " Paris", "{rows:?}");
    let p = rows[0][3].as_f64().unwrap();
    assert!(p > 0.0 && p <= 1.0);
    // Probabilities are ranked.
    for w in rows.windows(2) {
        assert!(w[0][3].as_f64().unwrap() >= w[1][3].as_f64().unwrap());
    }
}

#[test]
fn generate_returns_one_row_and_respects_max() {
    let o = lql(&[
        "--format",
        "json",
        "--model",
        MODEL,
        "-c",
        "GENERATE 'The capital of France is' MAX 4; INFER 'The capital of France is' GENERATE 3; TOKENIZE 'Hello world';",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = json_lines(&o);
    let g = &lines[0];
    assert_eq!(
        g["columns"],
        serde_json::json!([
            "text",
            "token_ids",
            "finish_reason",
            "prompt_tokens",
            "generated_tokens"
        ])
    );
    let row = &g["rows"][0];
    assert_eq!(row[4], 4);
    assert_eq!(row[1].as_array().unwrap().len(), 4);
    assert_eq!(row[2], "length");
    assert!(row[0].as_str().unwrap().contains("Paris"), "{row}");
    assert_eq!(lines[1]["rows"][0][4], 3);
    let tok = &lines[2];
    assert_eq!(
        tok["columns"],
        serde_json::json!(["position", "token_id", "token"])
    );
    assert_eq!(tok["rows"][0][2], "Hello");
    assert_eq!(tok["rows"][1][2], " world");
}
