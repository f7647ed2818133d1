//! The embedding API against the real default model (found through the catalogue cache:
//! `LQL_HOME` or `~/.cache/lql/models`). Run with `--release`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lql::{Connection, ErrorKind, Value, ValueType};

const MODEL: &str = "smollm2-135m-instruct";

#[test]
fn open_by_name_and_infer() {
    let conn = Connection::open(MODEL).unwrap();
    assert_eq!(conn.bound_model().as_deref(), Some(MODEL));
    let rows = conn
        .execute("INFER 'The capital of France is' TOP 3;")
        .unwrap();
    let names: Vec<_> = rows
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.ty))
        .collect();
    assert_eq!(
        names,
        vec![
            ("rank", ValueType::Int),
            ("token", ValueType::Text),
            ("token_id", ValueType::Int),
            ("prob", ValueType::Float),
            ("logit", ValueType::Float),
        ]
    );
    assert_eq!(rows.len(), 3);
    let first = rows.row(0).unwrap();
    assert_eq!(first.get::<_, String>("token").unwrap(), " Paris");
    assert_eq!(first.get::<_, i64>(0).unwrap(), 1);
}

#[test]
fn in_memory_then_use_and_batch_results() {
    let conn = Connection::open_in_memory().unwrap();
    assert!(conn.bound_model().is_none());
    let results = conn
        .execute_batch(&format!(
            "USE MODEL '{MODEL}';\nTOKENIZE 'Hello world';\nSTATS;"
        ))
        .unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(results[1].text, "TOKENIZE 'Hello world'");
    assert_eq!(results[1].rows.rows[0][1], Value::Int(19556));
    let stats = &results[2].rows;
    let vocab = stats
        .iter()
        .find(|r| r.get::<_, String>("key").unwrap() == "vocab")
        .unwrap();
    assert_eq!(vocab.get::<_, i64>("value").unwrap(), 49152);
}

#[test]
fn errors_carry_spans_in_the_whole_text() {
    let conn = Connection::open_in_memory().unwrap();
    let text = "SHOW MODELS;\nINFER 'x' TOP 5;";
    let e = conn.execute(text).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Semantic);
    let span = e.span.clone().unwrap();
    assert!(
        span.start >= 13,
        "span {span:?} should be in the second statement"
    );
    let rendered = e.render("t", text, false);
    assert!(rendered.contains("no model"), "{rendered}");
    let e = conn.execute("SHOW MODELS; WALK 'x' TOPP 3;").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Syntax);
    assert_eq!(e.span.unwrap().start, "SHOW MODELS; WALK 'x' ".len());
}

#[test]
fn prepare_checks_syntax_and_runs_again() {
    let conn = Connection::open(MODEL).unwrap();
    let mut stmt = conn
        .prepare("GENERATE 'The capital of France is' MAX 3")
        .unwrap();
    let a = stmt.query(()).unwrap();
    let b = stmt.query(()).unwrap();
    assert_eq!(a, b, "greedy generation is deterministic");
    assert_eq!(
        a.row(0).unwrap().get::<_, i64>("generated_tokens").unwrap(),
        3
    );
    assert!(conn.prepare("STATS; STATS").is_err());
    assert_eq!(
        conn.prepare("STAT").err().map(|e| e.kind),
        Some(ErrorKind::Syntax)
    );
    let plan = conn.prepare("TOKENIZE 'x'").unwrap().explain().unwrap();
    assert_eq!(plan.columns[0].name, "plan");
    assert!(!plan.is_empty());
}

#[test]
fn interrupt_handle_cancels_a_running_statement() {
    let conn = Arc::new(Connection::open(MODEL).unwrap());
    let handle = conn.interrupt_handle();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    // Keep interrupting until the statement has returned: no timing assumption.
    let t = std::thread::spawn(move || {
        while !d.load(Ordering::SeqCst) {
            handle.interrupt();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    });
    let r = conn.execute("GENERATE '1, 2, 3, 4,' MAX 2000;");
    done.store(true, Ordering::SeqCst);
    t.join().unwrap();
    assert_eq!(r.unwrap_err().kind, ErrorKind::Interrupted);
    // The session survives.
    assert_eq!(conn.execute("TOKENIZE 'a';").unwrap().len(), 1);
}

#[test]
fn open_refuses_unknown_names_and_missing_files() {
    let e = Connection::open("no-such-model").err().unwrap();
    assert_eq!(e.kind, ErrorKind::Semantic);
    assert!(e.message.contains("catalogue"), "{e}");
    let e = Connection::open("/nonexistent/model.gguf").err().unwrap();
    assert_eq!(e.kind, ErrorKind::Io);
}

#[test]
fn unbuilt_statements_say_so() {
    let conn = Connection::open(MODEL).unwrap();
    let e = conn
        .execute("UPDATE features SET down = 0 WHERE layer = 1 AND feature = 2;")
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
    assert_eq!(
        e.message,
        "not supported yet: UPDATE features SET down (gate_scale and down_scale are built)"
    );
}
