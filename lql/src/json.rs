//! The statement-level JSON contract shared by the CLI's `--format json` and `lql serve`'s
//! `/v1/lql`: `{"statement": "<text>", "columns": ["…"], "rows": [[…], …]}`, keys in that
//! order.

use crate::rows::Rows;
use crate::value::Value;

/// The contract object for one statement's result.
pub fn statement_json(statement: &str, rows: &Rows) -> serde_json::Value {
    let mut obj = serde_json::Map::new();
    obj.insert("statement".into(), statement.into());
    obj.insert(
        "columns".into(),
        rows.columns
            .iter()
            .map(|c| serde_json::Value::from(c.name.clone()))
            .collect(),
    );
    obj.insert(
        "rows".into(),
        rows.rows
            .iter()
            .map(|r| r.iter().map(Value::to_json).collect::<serde_json::Value>())
            .collect(),
    );
    serde_json::Value::Object(obj)
}
