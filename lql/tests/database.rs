//! `Database` + many `Connection`s, prepared statements with parameters, and error codes,
//! against the real default model (run with `--release`).

use std::sync::Arc;

use lql::{named_params, params, Connection, Database, Value};

const MODEL: &str = "smollm2-135m-instruct";

/// A mix of the statement families a session runs.
pub const MIX: [&str; 4] = [
    "INFER 'The capital of France is' TOP 3",
    "WALK 'The capital of France is' TOP 2 LAYERS 27-29",
    "SELECT layer, feature, top_token FROM features WHERE layer = 3 AND feature < 4",
    "TRACE 'The capital of France is' FOR ' Paris' LAYERS 28-29",
];

#[test]
fn connections_on_one_database_run_concurrently_and_agree() {
    let db = Database::open(MODEL).unwrap();
    let single = db.connect().unwrap();
    let want: Vec<lql::Rows> = MIX.iter().map(|s| single.execute(s).unwrap()).collect();
    let want = Arc::new(want);
    let handles: Vec<_> = (0..3)
        .map(|t| {
            let db = db.clone();
            let want = want.clone();
            std::thread::spawn(move || {
                let conn = db.connect().unwrap();
                assert_eq!(conn.bound_model().as_deref(), Some(MODEL));
                for i in 0..MIX.len() {
                    let k = (i + t) % MIX.len();
                    let got = conn.execute(MIX[k]).unwrap();
                    assert_eq!(got, want[k], "thread {t}: {}", MIX[k]);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn a_use_on_one_connection_does_not_touch_another() {
    let db = Database::open(MODEL).unwrap();
    let a = db.connect().unwrap();
    let b = Database::new().connect().unwrap();
    assert!(b.bound_model().is_none());
    assert!(b.execute("STATS").is_err());
    assert!(a.execute("STATS").is_ok());
}

#[test]
fn prepared_statements_take_parameters() {
    let conn = Connection::open(MODEL).unwrap();
    let mut stmt = conn
        .prepare("SELECT layer, features FROM layers WHERE layer = ?")
        .unwrap();
    assert_eq!(stmt.parameter_count(), 1);
    assert_eq!(stmt.column_names().unwrap(), ["layer", "features"]);
    for l in [0i64, 7, 29] {
        let rows = stmt.query(params![l]).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows.row(0).unwrap().get::<_, i64>("layer").unwrap(), l);
    }
    let mut infer = conn.prepare("INFER ? TOP 2").unwrap();
    let rows = infer.query(params!["The capital of France is"]).unwrap();
    assert_eq!(
        rows.row(0).unwrap().get::<_, String>("token").unwrap(),
        " Paris"
    );
    let mut named = conn.prepare("INFER :prompt TOP :k").unwrap();
    let rows = named
        .query(named_params! {":prompt": "The capital of France is", ":k": 4})
        .unwrap();
    assert_eq!(rows.len(), 4);
    let mut numbered = conn
        .prepare("SELECT layer FROM layers WHERE layer BETWEEN ?1 AND ?2")
        .unwrap();
    assert_eq!(numbered.query(params![3, 5]).unwrap().len(), 3);

    // Wrong count, unknown name, wrong type: errors with the parameters' code.
    let e = stmt.query(params![1, 2]).unwrap_err();
    assert_eq!(e.code(), "LQL-E0701", "{e}");
    let e = stmt.query(()).unwrap_err();
    assert_eq!(e.code(), "LQL-E0701", "{e}");
    let e = named.query(named_params! {":nope": 1}).unwrap_err();
    assert_eq!(e.code(), "LQL-E0701", "{e}");
    let e = infer.query(params![5]).unwrap_err();
    assert_eq!(e.code(), "LQL-E0701", "{e}");
    let e = stmt.query(params![Value::List(vec![])]).unwrap_err();
    assert_eq!(e.code(), "LQL-E0701", "{e}");
}

#[test]
fn a_prepared_statement_rebinds_after_use() {
    let conn = Connection::open_in_memory().unwrap();
    // Without a model the statement cannot bind.
    assert!(conn.prepare("STATS").is_err());
    conn.execute(&format!("USE MODEL {}", lql::quote(MODEL)))
        .unwrap();
    let mut stmt = conn
        .prepare("SELECT layer FROM layers WHERE layer = 1")
        .unwrap();
    assert_eq!(stmt.query(()).unwrap().len(), 1);
    conn.execute(&format!("USE MODEL {}", lql::quote(MODEL)))
        .unwrap();
    assert_eq!(stmt.query(()).unwrap().len(), 1, "re-bound after USE");
}

#[test]
fn errors_carry_codes_and_sources() {
    let conn = Connection::open(MODEL).unwrap();
    let cases = [
        ("INFER", "LQL-E0101"),
        ("WALK 'x' LAYERS 40-41", "LQL-E0211"),
        ("COMPILE CURRENT INTO PACKAGE 'p'", "LQL-E0201"),
        ("USE '/nonexistent/model.gguf'", "LQL-E0401"),
        (
            "UPDATE features SET down = 0 WHERE layer = 1 AND feature = 2",
            "LQL-E0301",
        ),
        // The common semantic errors have codes of their own.
        ("SELECT nope FROM layers", "LQL-E0208"),
        ("SELECT a.layer FROM layers b", "LQL-E0209"),
        ("SELECT * FROM featurs", "LQL-E0209"),
        ("SELECT * FROM layers WHERE layer = 'three'", "LQL-E0210"),
        ("INFER 'x' TOP 0", "LQL-E0211"),
    ];
    for (stmt, code) in cases {
        let e = conn.execute(stmt).unwrap_err();
        assert_eq!(e.code(), code, "{stmt}: {e}");
        assert_eq!(e.to_json()["error"]["code"], code);
    }
    assert!(lql::Code::ALL.iter().any(|c| *c == "LQL-E0701"));
    let unbound = Connection::open_in_memory().unwrap();
    let e = unbound.execute("INFER 'x'").unwrap_err();
    assert_eq!(e.code(), lql::Code::NoModel, "{e}");
    assert_eq!(e.kind, lql::ErrorKind::Semantic);
}

#[test]
fn a_model_file_changed_since_use_is_refused_by_name() {
    let src = lql_storage::catalogue::resolve(MODEL, &mut |_| {}).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("m.gguf");
    std::fs::copy(&src, &copy).unwrap();
    let conn = Connection::open(copy.to_str().unwrap()).unwrap();
    assert!(conn
        .execute("INFER 'The capital of France is' TOP 1")
        .is_ok());
    // Grow the file (what an overwrite in place does): the next statement refuses.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&copy)
        .unwrap();
    std::io::Write::write_all(&mut f, b"x").unwrap();
    drop(f);
    let e = conn
        .execute("INFER 'The capital of France is' TOP 1")
        .unwrap_err();
    assert_eq!(e.code(), "LQL-E0502", "{e}");
    assert!(e.message.contains("changed since USE"), "{e}");
    assert!(e.message.contains("m.gguf"), "{e}");
    // Binding again works.
    conn.execute(&format!("USE {}", lql::quote(copy.to_str().unwrap())))
        .unwrap();
    let again = conn.execute("INFER 'The capital of France is' TOP 1");
    assert!(again.is_ok(), "{again:?}");
}

/// The f32 layers INSERT optimises through are one copy per model, shared by the
/// connections of a database: a second connection's INSERT reuses the first's copy (each
/// `X-LQL-Session` of a server used to keep its own, ~420 MB apiece).
#[test]
fn inserts_on_two_connections_share_one_optimisation_cache() {
    let db = Database::open(MODEL).unwrap();
    assert_eq!(db.cache_bytes(), 0);
    let a = db.connect().unwrap();
    a.execute(
        "INSERT INTO edges (entity, relation, target) VALUES ('Atlantis', 'capital', 'Poseidonia')",
    )
    .unwrap();
    let one = db.cache_bytes();
    assert!(one > 100 << 20, "{one} bytes");
    let b = db.connect().unwrap();
    b.execute("INSERT INTO edges (entity, relation, target) VALUES ('Lemuria', 'capital', 'Mu')")
        .unwrap();
    assert_eq!(db.cache_bytes(), one);
}

/// A prepared statement is parsed once and its values are bound into the parsed statement:
/// a value that would not survive being pasted into the text (quotes, a comment marker, a
/// placeholder) arrives exactly; a value that does not fit its place is refused at its
/// placeholder; and text run directly refuses placeholders.
#[test]
fn parameters_are_bound_as_values_not_pasted_as_text() {
    let conn = Connection::open(MODEL).unwrap();
    let mut tok = conn.prepare("TOKENIZE ?").unwrap();
    let tricky = "it's -- not a comment ? :x \"quoted\"";
    let direct = conn
        .execute(&format!("TOKENIZE {}", lql::quote(tricky)))
        .unwrap();
    assert_eq!(tok.query(params![tricky]).unwrap(), direct);

    let mut top = conn
        .prepare("INFER 'The capital of France is' TOP ?")
        .unwrap();
    assert_eq!(top.query(params![2]).unwrap().len(), 2);
    let e = top.query(params![2.5]).unwrap_err();
    assert_eq!(e.code(), "LQL-E0701", "{e}");
    let at = "INFER 'The capital of France is' TOP ".len();
    assert_eq!(e.span, Some(at..at + 1), "{e}");
    let e = top.query(params!["three"]).unwrap_err();
    assert_eq!(e.code(), "LQL-E0701", "{e}");

    let e = conn.execute("INFER ? TOP 3").unwrap_err();
    assert!(e.message.contains("prepared statement"), "{e}");
    assert_eq!(e.span, Some(6..7), "{e}");
}
