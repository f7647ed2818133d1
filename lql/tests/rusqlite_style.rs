//! The library as rusqlite users expect it, against the real default model: `query_row`,
//! `query_map`, `for row in &rows`, typed `row.get::<_, T>` (rusqlite's spelling, `&str` included), a clear error (code `LQL-E0202`)
//! instead of a deadlock when a connection is used from its own callback, and the text so
//! far of an interrupted GENERATE.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lql::{Connection, ErrorKind};

const MODEL: &str = "smollm2-135m-instruct";

#[test]
fn query_row_query_map_and_row_iteration() {
    let conn = Connection::open(MODEL).unwrap();
    let n: i64 = conn
        .query_row(
            "SELECT count(*) FROM layers WHERE layer < ?",
            lql::params![10],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 10);
    let e = conn
        .query_row("SELECT layer FROM layers WHERE layer > 99", (), |r| {
            r.get::<_, i64>(0)
        })
        .unwrap_err();
    assert_eq!(e.code(), "LQL-E0203");

    let mut stmt = conn
        .prepare("SELECT layer, bytes, gate_encoding FROM layers WHERE layer < :n ORDER BY layer")
        .unwrap();
    assert_eq!(
        stmt.column_names().unwrap(),
        ["layer", "bytes", "gate_encoding"]
    );
    let rows: Vec<(u8, u64, String)> = stmt
        .query_map(lql::named_params! { ":n": 3 }, |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap()
        .collect::<lql::Result<_>>()
        .unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[2].0, 2);

    let result = conn
        .execute("SELECT layer, layer > 1 AS big FROM layers WHERE layer < 3")
        .unwrap();
    let mut seen = 0;
    for row in &result {
        let layer: i32 = row.get("layer").unwrap();
        let big: bool = row.get("big").unwrap();
        assert_eq!(big, layer > 1);
        let maybe: Option<i64> = row.get(0).unwrap();
        assert_eq!(maybe, Some(layer as i64));
        seen += 1;
    }
    assert_eq!(seen, 3);
    // rusqlite's spelling, every integer width, and `&str` borrowing the cell.
    let enc = conn
        .execute("SELECT layer, gate_encoding FROM layers WHERE layer = 0")
        .unwrap();
    let row = enc.row(0).unwrap();
    let text: &str = row.get::<_, &str>("gate_encoding").unwrap();
    assert_eq!(text, row.get::<_, String>(1).unwrap());
    assert_eq!(row.get::<_, i8>(0).unwrap(), 0);
    assert_eq!(row.get::<_, i16>(0).unwrap(), 0);
    assert_eq!(row.get::<_, u32>(0).unwrap(), 0);
    assert_eq!(row.get::<_, Option<u64>>("layer").unwrap(), Some(0));
    assert!(row.get::<_, &str>(0).is_err());
    let e = result
        .row(0)
        .unwrap()
        .get::<_, String>("layer")
        .unwrap_err();
    assert!(e.message.contains("does not convert"), "{}", e.message);
}

#[test]
fn reentrant_use_from_a_callback_is_an_error_not_a_deadlock() {
    let conn = Connection::open(MODEL).unwrap();
    let err = conn
        .execute_each("STATS; STATS", |_| conn.execute("STATS").map(|_| ()))
        .unwrap_err();
    assert_eq!(err.code(), "LQL-E0202");
    assert!(err.message.contains("busy"), "{}", err.message);
    // A prepared statement from the callback is refused the same way.
    let err = conn
        .execute_each("STATS", |_| conn.prepare("STATS").map(|_| ()))
        .unwrap_err();
    assert_eq!(err.code(), "LQL-E0202");
    // And from a token handler, which cannot return it: the handler sees the error.
    let conn = Arc::new(conn);
    let seen = Arc::new(Mutex::new(None));
    let (c, s) = (Arc::downgrade(&conn), seen.clone());
    conn.set_token_handler(Some(move |_: &str| {
        if let Some(c) = c.upgrade() {
            let mut s = s.lock().unwrap();
            if s.is_none() {
                *s = Some(c.execute("STATS").map(|_| ()).unwrap_err().code());
            }
        }
    }));
    conn.execute("GENERATE 'a' MAX 2").unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(lql::Code::Busy));
    conn.set_token_handler(None::<fn(&str)>);
    // The connection is still usable afterwards.
    assert!(conn.execute("STATS").unwrap().len() > 1);
}

#[test]
fn an_interrupted_generate_keeps_its_text_so_far() {
    let conn = Connection::open(MODEL).unwrap();
    let handle = conn.interrupt_handle();
    let pieces = Arc::new(AtomicUsize::new(0));
    let p = pieces.clone();
    // Interrupt from the token handler after the third piece: no timing assumption.
    conn.set_token_handler(Some(move |_: &str| {
        if p.fetch_add(1, Ordering::SeqCst) == 2 {
            handle.interrupt();
        }
    }));
    let e = conn
        .execute("GENERATE '1, 2, 3, 4, 5,' MAX 500")
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Interrupted);
    let rows = e.partial_rows().expect("the rows so far");
    let row = rows.row(0).unwrap();
    assert_eq!(
        row.get::<_, String>("finish_reason").unwrap(),
        "interrupted"
    );
    let generated: i64 = row.get("generated_tokens").unwrap();
    assert!((3..500).contains(&generated), "{generated}");
    assert!(!row.get::<_, String>("text").unwrap().is_empty());
    conn.set_token_handler(None::<fn(&str)>);
    assert_eq!(conn.execute("TOKENIZE 'a'").unwrap().len(), 1);
}

/// An error of a statement run with parameters keeps its span, in the text given to
/// `prepare`: a clause after a value is found where it is written, and a value that does
/// not fit is pointed at by its placeholder.
#[test]
fn errors_with_parameters_keep_their_spans() {
    let conn = Connection::open(MODEL).unwrap();
    let text = "STATS; WALK :p LAYERS 40-41";
    let mut st = conn.prepare(&text[7..]).unwrap();
    let e = st
        .query(lql::named_params! {":p": "a long prompt about France"})
        .unwrap_err();
    assert_eq!(e.code(), lql::Code::OutOfRange, "{e}");
    let span = e.span.clone().expect("the span is kept");
    assert_eq!(&text[7..][span], "LAYERS 40-41", "{e:?}");
    // A value that does not fit where it stands: the span is its placeholder's.
    let text = "INFER 'x' TOP ?";
    let mut st = conn.prepare(text).unwrap();
    let e = st.query(lql::params!["three"]).unwrap_err();
    assert_eq!(e.code(), lql::Code::Parameters, "{e}");
    assert_eq!(&text[e.span.clone().expect("span")], "?", "{e:?}");
}
