//! `/v1/lql`: the CLI's JSON contract byte for byte (the `lql` binary's `--format json`
//! lines when it is built beside the tests, and `lql::statement_json` always), errors as
//! the CLI's error object with a code and a 4xx status, writes refused without
//! `--allow-writes` and outside its folder, GET for read-only statements, sessions.

mod common;

use std::path::PathBuf;

use serde_json::json;

const STATEMENTS: &str =
    "INFER \"The capital of France is\" TOP 3; TOKENIZE \"Hello world\"; SHOW LAYERS";

fn post_text(url: &str, text: &str, session: Option<&str>) -> (u16, String) {
    let mut r = common::client()
        .post(format!("{url}/v1/lql"))
        .header("content-type", "text/plain")
        .body(text.to_string());
    if let Some(s) = session {
        r = r.header("X-LQL-Session", s);
    }
    let r = r.send().unwrap();
    (r.status().as_u16(), r.text().unwrap())
}

/// The `lql` binary of this build, when it has been built (a workspace test run builds it).
fn lql_binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?;
    let p = dir.join("lql");
    p.is_file().then_some(p)
}

#[test]
fn results_are_the_cli_contract_byte_for_byte() {
    let s = common::start(common::config());
    let (st, body) = post_text(&s.url(), STATEMENTS, None);
    assert_eq!(st, 200, "{body}");
    // In-process: the same statements through a connection, rendered by the contract.
    let conn = common::reference();
    let lines: Vec<String> = conn
        .execute_batch(STATEMENTS)
        .unwrap()
        .iter()
        .map(|r| lql::statement_json(&r.text, &r.rows).to_string())
        .collect();
    assert_eq!(body, format!("{{\"results\":[{}]}}", lines.join(",")));
    // The CLI itself, when built.
    match lql_binary() {
        Some(bin) => {
            let out = std::process::Command::new(bin)
                .args(["-m", &common::model(), "-f", "json", "-c", STATEMENTS])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let cli: Vec<String> = String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect();
            assert_eq!(body, format!("{{\"results\":[{}]}}", cli.join(",")));
        }
        None => eprintln!("note: the lql binary is not built beside the tests; compared with lql::statement_json only"),
    }
    // The JSON form with parameters answers the same as the literal statement.
    let (st, v) = common::post(
        &format!("{}/v1/lql", s.url()),
        json!({"statements": "INFER ? TOP 3", "params": ["The capital of France is"]}),
    );
    assert_eq!(st, 200, "{v}");
    let lit: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(v["results"][0]["rows"], lit["rows"]);
    // GET for read-only statements.
    let r = common::client()
        .get(format!("{}/v1/lql", s.url()))
        .query(&[("q", "TOKENIZE \"Hello world\"")])
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.text().unwrap(), format!("{{\"results\":[{}]}}", lines[1]));
}

#[test]
fn errors_are_the_cli_error_object_with_a_code() {
    let s = common::start(common::config());
    let (st, body) = post_text(
        &s.url(),
        "TOKENIZE \"a\"; INFER \"x\" TOP; SHOW LAYERS",
        None,
    );
    assert_eq!(st, 400, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["kind"], "syntax");
    assert_eq!(v["error"]["code"], "LQL-E0101");
    assert!(v["error"]["span"].is_array());
    // The statement before the error ran; its result is kept.
    assert_eq!(v["results"].as_array().unwrap().len(), 1);
    // Parameters of the wrong count.
    let (st, v) = common::post(
        &format!("{}/v1/lql", s.url()),
        json!({"statements": "INFER ? TOP 3", "params": []}),
    );
    assert_eq!(st, 400);
    assert_eq!(v["error"]["code"], "LQL-E0701");
    // Invalid JSON: the standard shape.
    let r = common::client()
        .post(format!("{}/v1/lql", s.url()))
        .header("content-type", "application/json")
        .body("{nope")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: serde_json::Value = r.json().unwrap();
    assert_eq!(v["error"]["code"], "invalid_json");
}

#[test]
fn writes_are_refused_without_allow_writes_and_outside_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let s = common::start(common::config());
    let target = dir.path().join("t.svg");
    let stmt = format!(
        "TRACE \"The capital of France is\" SAVE {}",
        lql::quote(&target.display().to_string())
    );
    let (st, body) = post_text(&s.url(), &stmt, None);
    assert_eq!(st, 403, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], lql_serve::access::REFUSED_CODE.as_str());
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--allow-writes"));
    assert!(!target.exists());
    // USE is refused: the served model is fixed.
    let (st, _) = post_text(&s.url(), "USE \"/etc/passwd\"", None);
    assert_eq!(st, 403);
    drop(s);

    let mut c = common::config();
    c.allow_writes = Some(dir.path().to_path_buf());
    let s = common::start(c);
    // Outside the folder, by path and by '..'.
    for bad in [
        other.path().join("t.svg").display().to_string(),
        format!("{}/../t.svg", dir.path().display()),
    ] {
        let stmt = format!(
            "TRACE \"The capital of France is\" SAVE {}",
            lql::quote(&bad)
        );
        let (st, body) = post_text(&s.url(), &stmt, None);
        assert_eq!(st, 403, "{body}");
        assert!(body.contains(lql_serve::access::REFUSED_CODE.as_str()));
    }
    assert!(!other.path().join("t.svg").exists());
    // Inside: it runs and writes the file.
    let (st, body) = post_text(&s.url(), &stmt, None);
    assert_eq!(st, 200, "{body}");
    assert!(target.is_file());
    // GET never writes.
    let r = common::client()
        .get(format!("{}/v1/lql", s.url()))
        .query(&[("q", stmt.as_str())])
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
}

fn post_json(url: &str, body: serde_json::Value) -> (u16, String) {
    let r = common::client()
        .post(format!("{url}/v1/lql"))
        .json(&body)
        .send()
        .unwrap();
    (r.status().as_u16(), r.text().unwrap())
}

/// Every statement that opens or writes a file, with its path written in the statement, as
/// `?` and as `:name`: the gate decides on the text as it runs, so each is refused on a
/// server without `--allow-writes` (and with it, outside its folder), and nothing is
/// written. `{a}`, `{b}`, `{c}` mark the paths; each is tried outside the folder in turn.
#[test]
fn paths_given_as_parameters_are_checked_like_literal_ones() {
    let outside = tempfile::tempdir().unwrap();
    let allowed = tempfile::tempdir().unwrap();
    let allowed_dir = std::fs::canonicalize(allowed.path()).unwrap();
    // Every statement that names a file, with every path argument as a slot: each slot in
    // turn is a file outside the allowed folder (literal, `?`, `:name`), the others lie
    // inside it.
    let statements = [
        "USE {a}",
        "TRACE \"The capital\" SAVE {a}",
        "EXTRACT MODEL {a} INTO {b}",
        "EXTRACT MODEL {a} INTO {b} FORMAT PACKAGE MODEL_ID \"o/r:d\" SOURCE_REVISION \"r\" PROJECTOR {c}",
        "COMPILE CURRENT INTO GGUF {a}",
        "COMPILE {a} INTO VINDEX {b}",
        "DIFF {a} CURRENT INTO PATCH {b}",
        "DIFF {a} {b}",
        "BEGIN PATCH {a}",
        "APPLY PATCH {a}",
        "REMOVE PATCH {a}",
        "VERIFY {a}",
        "VERIFY {a} AGAINST {b}",
        "INSPECT {a}",
        "DESCRIBE OBJECT {a} \"L0\"",
        "PRECISION {a}",
        "SHOW COMPONENTS {a}",
        "SHOW REPRESENTATIONS {a}",
        "SHOW PROFILES {a}",
        "REPRESENT LABELS {a}",
        "REPRESENT ALL AS F16 INTO {a}",
        "COMPACT {a}",
        "COMPACT {a} INTO {b}",
        "RUN STAGE \"The capital\" INTO {a}",
        "RUN STAGE FROM {a} INTO {b}",
        "INFER FROM {a}",
        "EXPLAIN ANALYZE TRACE \"The capital\" SAVE {a}",
    ];
    let mut cases = 0;
    for allow in [None, Some(allowed_dir.clone())] {
        let mut c = common::config();
        c.allow_writes = allow.clone();
        let s = common::start(c);
        for (i, stmt) in statements.iter().enumerate() {
            for slot in ["{a}", "{b}", "{c}"]
                .into_iter()
                .filter(|s| stmt.contains(*s))
            {
                let path = outside.path().join(format!("f{i}")).display().to_string();
                let mut text = stmt.to_string();
                for other in ["{a}", "{b}", "{c}"].into_iter().filter(|o| *o != slot) {
                    let inside = allowed_dir.join(format!("in{i}{}", &other[1..2]));
                    text = text.replace(other, &lql::quote(&inside.display().to_string()));
                }
                for (form, body) in [
                    (
                        "literal",
                        json!({"statements": text.replace(slot, &lql::quote(&path))}),
                    ),
                    (
                        "?",
                        json!({"statements": text.replace(slot, "?"), "params": [path]}),
                    ),
                    (
                        ":name",
                        json!({"statements": text.replace(slot, ":p"), "params": {":p": path}}),
                    ),
                ] {
                    let (st, answer) = post_json(&s.url(), body);
                    let why =
                        format!("{stmt} slot {slot} ({form}, allow-writes {allow:?}): {answer}");
                    if stmt.starts_with("RUN STAGE") || stmt.starts_with("INFER FROM") {
                        // A stage statement does not bind on the served GGUF: the engine
                        // answers with its own error and nothing runs.
                        assert!(st == 403 || st == 400, "{why}");
                    } else {
                        assert_eq!(st, 403, "{why}");
                        assert!(
                            answer.contains(lql_serve::access::REFUSED_CODE.as_str()),
                            "{why}"
                        );
                    }
                    cases += 1;
                }
            }
        }
        drop(s);
    }
    eprintln!("{cases} refusals checked");
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        0,
        "nothing was written outside"
    );
}

/// The statements that read only the served model run with parameters (the gate lets
/// them through in every form).
#[test]
fn statements_without_files_run_with_parameters() {
    let s = common::start(common::config());
    for (stmt, params) in [
        ("TOKENIZE ?", json!(["Hello"])),
        ("TOKENIZE :t", json!({":t": "Hello"})),
        ("INFER ? TOP 1", json!(["The capital of France is"])),
        ("SELECT count(*) FROM layers WHERE layer < ?", json!([3])),
        ("EXPLAIN PLAN INFER ? TOP 1", json!(["Paris"])),
        // EXPLAIN PLAN runs nothing: the paths it names are not touched.
        (
            "EXPLAIN PLAN EXTRACT MODEL ? INTO ?",
            json!(["/etc/passwd", "/tmp/x.vindex"]),
        ),
        (
            "EXPLAIN COMPILE CURRENT INTO GGUF :o",
            json!({":o": "/x.gguf"}),
        ),
    ] {
        let (st, answer) = post_json(&s.url(), json!({"statements": stmt, "params": params}));
        assert_eq!(st, 200, "{stmt}: {answer}");
    }
}

/// `--read-only`: edits and file writes over /v1/lql are refused with the library's code;
/// reads still answer. `--offline`: an uncached catalogue name does not start a download.
#[test]
fn read_only_and_offline_servers() {
    let mut c = common::config();
    c.read_only = true;
    c.offline = true;
    let s = common::start(c);
    let (st, body) = post_text(
        &s.url(),
        "INSERT INTO edges (entity, relation, target) VALUES ('France', 'capital', 'Rome')",
        None,
    );
    assert_ne!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "LQL-E0204", "{body}");
    let (st, body) = post_text(&s.url(), "INFER \"The capital of France is\" TOP 1", None);
    assert_eq!(st, 200, "{body}");
    drop(s);

    let mut c = common::config();
    c.read_only = true;
    c.allow_writes = Some(std::env::temp_dir());
    let e = lql_serve::Server::start(c).err().expect("refused");
    assert!(e.to_string().contains("--read-only"), "{e}");
}

#[test]
fn sessions_are_kept_per_client_and_bounded() {
    let mut c = common::config();
    c.max_sessions = 2;
    let s = common::start(c);
    let metric = |url: &str| -> String {
        let m = common::client()
            .get(format!("{url}/metrics"))
            .send()
            .unwrap()
            .text()
            .unwrap();
        m.lines()
            .find(|l| l.starts_with("lql_sessions "))
            .unwrap()
            .to_string()
    };
    for id in ["alice", "bob", "alice", "carol"] {
        let (st, _) = post_text(&s.url(), "STATS", Some(id));
        assert_eq!(st, 200);
    }
    assert_eq!(metric(&s.url()), "lql_sessions 2");
    let (st, body) = post_text(&s.url(), "STATS", Some("no spaces allowed"));
    assert_eq!(st, 400, "{body}");
}
