//! sqlite3's own output conventions, side by side: the same rows (`SELECT * FROM layers
//! LIMIT 3` on the default model, inserted into a sqlite table of the same columns) printed
//! by `lql` and by `sqlite3` with `-csv -header`, `-json`, `-line` and `.mode line` must be
//! the same bytes. Skips (with a note) when sqlite3 is not installed.

mod common;

use std::process::Command;

use common::{lql, stderr, stdout, MODEL};

const QUERY: &str = "SELECT * FROM layers LIMIT 3;";

fn have_sqlite3() -> bool {
    Command::new("sqlite3")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn sqlite3(db: &std::path::Path, args: &[&str]) -> String {
    let o = Command::new("sqlite3")
        .arg(db)
        .args(args)
        .output()
        .expect("run sqlite3");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// A SQL literal for a JSON cell (integers and text only: what `layers` holds).
fn literal(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => format!("'{}'", s.replace('\'', "''")),
        serde_json::Value::Number(n) if n.is_i64() => n.to_string(),
        other => panic!("layers holds only integers and text, found {other}"),
    }
}

#[test]
fn output_shapes_match_sqlite3_byte_for_byte() {
    if !have_sqlite3() {
        eprintln!("note: sqlite3 is not installed; skipping (apt-get install sqlite3)");
        return;
    }
    // The rows as LQL returns them.
    let o = lql(&[MODEL, "--format", "json", QUERY]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let columns: Vec<&str> = v["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);

    // The same rows in sqlite, with column types from the values.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("same.db");
    let types: Vec<&str> = rows[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| if c.is_string() { "TEXT" } else { "INTEGER" })
        .collect();
    let cols: Vec<String> = columns
        .iter()
        .zip(&types)
        .map(|(c, t)| format!("{c} {t}"))
        .collect();
    let mut sql = format!("CREATE TABLE layers ({});", cols.join(", "));
    for r in rows {
        let vals: Vec<String> = r.as_array().unwrap().iter().map(literal).collect();
        sql.push_str(&format!("INSERT INTO layers VALUES ({});", vals.join(", ")));
    }
    sqlite3(&db, &[&sql]);

    for flags in [
        &["-csv", "-header"][..],
        &["-json"][..],
        &["-line"][..],
        &["-cmd", ".mode line"][..],
        &["-csv", "-noheader"][..],
    ] {
        let mut args: Vec<&str> = flags.to_vec();
        args.push(QUERY);
        let theirs = sqlite3(&db, &args);
        let mut ours_args = vec![MODEL];
        ours_args.extend(&args);
        let o = lql(&ours_args);
        assert!(o.status.success(), "{flags:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), theirs, "lql {flags:?} differs from sqlite3's");
    }
}
