//! sqlite3 as the oracle of LQL's SQL: loading a database from a script, running a query
//! as JSON rows, and comparing LQL's values with sqlite's.

use std::path::Path;
use std::process::Command;

use lql::Value;

/// Whether the `sqlite3` shell runs here.
pub fn available() -> bool {
    Command::new("sqlite3")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `script` through the sqlite3 shell into the database file `db`.
pub fn load(db: &Path, script: &str) {
    let out = crate::run_with_stdin(Command::new("sqlite3").arg(db), script.as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// sqlite3's rows for `q` on `db`, each a JSON object in column order.
pub fn query(db: &Path, q: &str) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let out = Command::new("sqlite3")
        .arg(db)
        .arg("-json")
        .arg(format!("{q};"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sqlite3: {q}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    if text.trim().is_empty() {
        Vec::new()
    } else {
        serde_json::from_str(&text).unwrap()
    }
}

/// Whether LQL's value equals sqlite's (floats to 1e-9 relative; booleans as 0/1).
pub fn same_cell(ours: &Value, theirs: &serde_json::Value) -> bool {
    match (ours, theirs) {
        (Value::Null, serde_json::Value::Null) => true,
        (Value::Int(a), serde_json::Value::Number(b)) => {
            b.as_i64() == Some(*a) || b.as_f64() == Some(*a as f64)
        }
        (Value::Float(a), serde_json::Value::Number(b)) => {
            let b = b.as_f64().unwrap();
            (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
        }
        (Value::Text(a), serde_json::Value::String(b)) => a == b,
        (Value::Bool(a), serde_json::Value::Number(b)) => b.as_i64() == Some(*a as i64),
        _ => false,
    }
}
