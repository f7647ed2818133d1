//! The shell as sqlite3 and duckdb users expect it, through the binary: the model and
//! statements as arguments, sqlite's single-dash flags, `.tables`/`.schema`, scripts that go
//! on after an error (and `-bail`), faults in the exit code, output settings (`.headers`,
//! `.output`, `.once`, `.echo`, `.nullvalue`, `.width`, modes), CSV/JSON shapes, floats and
//! visible spaces. Run with `--release` (the default model is used).

mod common;

use common::{lql, lql_in, lql_stdin, model_file, stderr, stdout, MODEL};

#[test]
fn a_model_file_first_binds_it_and_the_next_argument_runs_as_statements() {
    let gguf = model_file();
    let o = lql(&[gguf.to_str().unwrap(), "-csv", "TOKENIZE 'Hello world';"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "position,token_id,token\n0,19556,Hello\n1,905,\" world\"\n"
    );
    // A catalogue name binds too; several SQL arguments run in order.
    let o = lql(&[
        MODEL,
        "-noheader",
        "-csv",
        "SHOW LAYERS LIKE '29';",
        "STATS",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("29,Q4_1,"), "{out}");
    assert!(out.contains("\nlayers,30\n"), "{out}");
}

#[test]
fn statements_as_the_only_argument_are_not_a_file_name() {
    let o = lql(&["SHOW MODELS;"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(MODEL));
    // Without a model the statement runs and says what is missing.
    let o = lql(&["TOKENIZE \"x\";"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(!err.contains("No such file"), "{err}");
    assert!(err.contains("no model"), "{err}");
}

#[test]
fn sqlite_single_dash_options() {
    // -csv before -c is a mode, not `-c sv`.
    let o = lql(&["-csv", "-c", "SHOW MODELS;"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("name,cached,"), "{}", stdout(&o));
    let o = lql(&["-csv", "-noheader", "-c", "SHOW MODELS;"]);
    assert!(stdout(&o).starts_with(MODEL), "{}", stdout(&o));
    let o = lql(&["-line", "-c", "SHOW MODELS;"]);
    assert!(stdout(&o).contains("   name = smollm2"), "{}", stdout(&o));
    let o = lql(&["-box", "-c", "SHOW MODELS;"]);
    assert!(stdout(&o).starts_with("┌"), "{}", stdout(&o));
    let o = lql(&["-markdown", "-c", "SHOW MODELS;"]);
    assert!(
        stdout(&o).starts_with("|         name          |"),
        "{}",
        stdout(&o)
    );
    let o = lql(&["-json", "-c", "SHOW MODELS;"]);
    assert!(stdout(&o).starts_with("[{\"name\":"), "{}", stdout(&o));
    // -cmd runs first; -echo prints each statement; the long spellings still work.
    let o = lql(&[
        "-cmd",
        ".mode csv",
        "-echo",
        "--model",
        MODEL,
        "SHOW LAYERS LIKE '0';",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).lines().take(3).collect::<Vec<_>>(),
        [
            ".mode csv",
            "SHOW LAYERS LIKE '0';",
            "layer,attn_encoding,ffn_encoding,norm_encoding,tensors,bytes"
        ]
    );
    let o = lql(&["-version"]);
    assert!(stdout(&o).starts_with("lql "), "{}", stdout(&o));
    // --offline with a cached model works as usual.
    let o = lql(&["--offline", MODEL, "-csv", "SHOW LAYERS LIKE '1';"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // -readonly refuses writes (and the run fails), reads still answer.
    let o = lql(&[
        "-readonly",
        MODEL,
        "-csv",
        "SAVE PATCH; SELECT count(*) FROM layers;",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("LQL-E0204"), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("read-only connection"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).contains("30"), "{}", stdout(&o));
}

#[test]
fn offline_refuses_a_model_that_is_not_cached() {
    let home = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lql"))
        .args(["-offline", MODEL, "STATS;"])
        .env("LQL_HOME", home.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    let cached = home.path().join("models").join(format!("{MODEL}.gguf"));
    assert!(
        err.contains("model smollm2-135m-instruct: offline: it is not in the cache")
            && err.contains(&cached.display().to_string()),
        "{err}"
    );
    // USE MODEL inside a script is refused the same way.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_lql"))
        .args(["-offline", &format!("USE MODEL \"{MODEL}\"; STATS;")])
        .env("LQL_HOME", home.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("offline: it is not in the cache"),
        "{}",
        stderr(&o)
    );
    // Nothing was fetched.
    assert!(!home
        .path()
        .join("models")
        .join(format!("{MODEL}.gguf"))
        .exists());
}

#[test]
fn tables_and_schema_list_what_answers() {
    let o = lql(&[MODEL, ".tables"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "features  layers  tokens  tensors  edges  attention  heads  contexts  histograms\n"
    );
    // `routes` answers only on a model with a router: the schema source still has it.
    let o = lql(&[MODEL, ".schema routes"]);
    assert!(
        stdout(&o).starts_with("CREATE TABLE routes (\n  prompt TEXT,"),
        "{}",
        stdout(&o)
    );
    let o = lql(&[MODEL, ".schema layers"]);
    assert_eq!(
        stdout(&o),
        "CREATE TABLE layers (\n  layer INTEGER,\n  features INTEGER,\n  \
         gate_encoding TEXT,\n  bytes INTEGER\n);\n"
    );
    let o = lql(&[MODEL, ".schema"]);
    assert_eq!(stdout(&o).matches("CREATE TABLE").count(), 9);
    // A table that does not answer is an error naming it; no model is one too.
    let o = lql(&[MODEL, ".schema nosuch"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains(".schema nosuch"), "{}", stderr(&o));
    let o = lql(&[".tables"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no model is bound"), "{}", stderr(&o));
}

/// `HELP <statement>` (no `;` needed on a line of its own) and `.help <statement>` print
/// the statement's grammar; `.timer` prints sqlite3's line with user and system time.
#[test]
fn help_for_a_statement_and_the_timer() {
    let o = lql_stdin(&[], b"HELP extract\n.help trace\n.timer on\nSHOW MODELS;\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("EXTRACT MODEL \"source\" INTO \"out\""),
        "{out}"
    );
    assert!(out.contains("TRACE \"prompt\""), "{out}");
    let err = stderr(&o);
    let line = err
        .lines()
        .find(|l| l.starts_with("Run Time:"))
        .unwrap_or_default();
    assert!(
        line.contains("real ") && line.contains(" user ") && line.contains(" sys "),
        "{err}"
    );
    let o = lql_stdin(&[], b"HELP nothing\n");
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no statement"), "{}", stderr(&o));
}

#[test]
fn bail_stops_at_the_first_error() {
    let script = "SHOW MODELS;\nFROB;\nSHOW MODELS;\n";
    let o = lql(&["-bail", "-c", script]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o).matches("cached").count(), 1, "{}", stdout(&o));
    let o = lql_stdin(&[], format!(".bail on\n{script}").as_bytes());
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o).matches("cached").count(), 1, "{}", stdout(&o));
    // Without bail: both SHOW MODELS run, one error, exit 1.
    let o = lql_stdin(&[], script.as_bytes());
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o).matches("cached").count(), 2, "{}", stdout(&o));
    assert_eq!(stderr(&o).matches("unknown keyword").count(), 1);
}

#[test]
fn a_failing_nested_read_prints_one_error_and_a_bom_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("inner.lql"), "FROB 'x';\n").unwrap();
    std::fs::write(dir.path().join("middle.lql"), ".read inner.lql\n").unwrap();
    std::fs::write(
        dir.path().join("outer.lql"),
        "\u{feff}.read middle.lql\n.mode csv\nSHOW MODELS;\n",
    )
    .unwrap();
    let o = lql_in(Some(dir.path()), &["outer.lql"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.matches("unknown keyword FROB").count(), 1, "{err}");
    assert!(!err.contains("stopped"), "{err}");
    assert!(err.contains("inner.lql:1:1"), "{err}");
    // The BOM did not hide the first dot-command, and the script went on.
    assert!(stdout(&o).starts_with("name,cached,"), "{}", stdout(&o));
}

#[test]
fn a_verify_that_finds_a_fault_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("smol.vindex");
    let extract = format!("EXTRACT MODEL '{MODEL}' INTO '{}';", out.display());
    // JSON mode: stderr carries nothing but JSON (no progress lines).
    let o = lql(&["--format", "json", "-c", &extract]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o), "");
    let verify = format!("VERIFY '{}';", out.display());
    let o = lql(&["-csv", "-c", &verify]);
    assert!(o.status.success(), "{}", stderr(&o));
    let seg = out.join("segments/text.embedding.bin");
    let mut b = std::fs::read(&seg).unwrap();
    let n = b.len();
    b[n - 100] ^= 0x10;
    std::fs::write(&seg, &b).unwrap();
    let o = lql(&["-csv", "-c", &format!("{verify} SHOW MODELS;")]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).contains(",FAILED,"), "{}", stdout(&o));
    // Without bail the run went on; with it, it stops at the fault.
    assert!(stdout(&o).contains(MODEL));
    let o = lql(&["-csv", "-bail", "-c", &format!("{verify} SHOW MODELS;")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!stdout(&o).contains("cached"), "{}", stdout(&o));
}

#[test]
fn output_once_headers_nullvalue_and_width() {
    let dir = tempfile::tempdir().unwrap();
    let script = ".mode csv\n.once once.csv\nSHOW LAYERS LIKE '3';\nSHOW LAYERS LIKE '4';\n\
                  .output all.csv\n.headers off\nSHOW LAYERS LIKE '5';\nSHOW LAYERS LIKE '6';\n\
                  .output\nSHOW LAYERS LIKE '7';\n";
    std::fs::write(dir.path().join("s.lql"), script).unwrap();
    let o = lql_in(Some(dir.path()), &[MODEL, "s.lql"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let once = std::fs::read_to_string(dir.path().join("once.csv")).unwrap();
    assert!(
        once.starts_with("layer,") && once.contains("\n3,"),
        "{once}"
    );
    assert!(!once.contains("\n4,"), "{once}");
    let all = std::fs::read_to_string(dir.path().join("all.csv")).unwrap();
    assert!(all.starts_with("5,") && all.contains("\n6,"), "{all}");
    let out = stdout(&o);
    assert!(out.contains("\n4,") && out.starts_with("layer,"), "{out}");
    assert!(out.contains("\n7,Q4_1,"), "{out}");
    assert!(!out.contains("\n5,"), "{out}");
    // No temporary file is left beside the outputs.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");

    // .width cuts a grid column with an ellipsis.
    let o = lql_stdin(
        &[MODEL],
        b".mode box\n.width 0 4\nVERIFY;\nTOKENIZE 'Hello';\n",
    );
    // VERIFY on a GGUF is an error; the script goes on.
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("│ tok… │"), "{out}");
    assert!(out.contains("│ 195… │"), "{out}");
}

#[test]
fn jsonl_rows_carry_their_statement_index_and_use_is_silent() {
    let o = lql(&[
        "-jsonl",
        "-c",
        &format!("USE MODEL '{MODEL}'; TOKENIZE 'a b'; TOKENIZE 'c';"),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("{\"stmt\":2,"), "{out}");
    assert!(lines[1].starts_with("{\"stmt\":2,"), "{out}");
    assert!(lines[2].starts_with("{\"stmt\":3,"), "{out}");
    // csv likewise: only the query's block.
    let o = lql(&[
        "-csv",
        "-c",
        &format!("USE MODEL '{MODEL}'; SHOW LAYERS LIKE '0';"),
    ]);
    assert!(stdout(&o).starts_with("layer,"), "{}", stdout(&o));
    // With echo, USE shows.
    let o = lql(&["-csv", "-echo", "-c", &format!("USE MODEL '{MODEL}';")]);
    assert!(stdout(&o).contains("model,format,"), "{}", stdout(&o));
}

#[test]
fn floats_lists_and_spaces_print_as_stored() {
    let o = lql(&[
        MODEL,
        "-csv",
        "STATS;",
        "SELECT name, shape FROM tensors WHERE name = 'token_embd.weight';",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // norm_eps is an f32 1e-5: its shortest form, not 9.999999747378752e-6.
    assert!(out.contains("\nnorm_eps,1e-5\n"), "{out}");
    assert!(
        out.contains("\ntoken_embd.weight,\"[576,49152]\"\n"),
        "{out}"
    );
    let o = lql(&[MODEL, "-json", "STATS;"]);
    assert!(stdout(&o).contains("{\"key\":\"norm_eps\",\"value\":0.00001}"));
    // Table mode shows the leading space; csv and json keep the raw text.
    let o = lql(&[MODEL, "TOKENIZE 'Hello world';"]);
    assert!(stdout(&o).contains("┆ ␣world │"), "{}", stdout(&o));
    let o = lql(&[MODEL, "-jsonl", "TOKENIZE 'Hello world';"]);
    assert!(
        stdout(&o).contains("\"token\":\" world\""),
        "{}",
        stdout(&o)
    );
}

#[test]
fn misplaced_and_missing_arguments_are_named() {
    let gguf = model_file();
    let o = lql(&["SHOW MODELS;", gguf.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("a model goes first"), "{}", stderr(&o));
    let o = lql(&["missing.lql"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("missing.lql: no such file"),
        "{}",
        stderr(&o)
    );
}
