//! JSON modes: LQL's statement-level contract (`json`), sqlite3's array of row objects
//! (`array`, what `-json` selects) and one object per row (`jsonl`).

use lql::{Rows, Value};

/// `{"statement": "<text>", "columns": ["…"], "rows": [[…], …]}` on one line.
pub fn render_statement(statement: &str, rows: &Rows) -> String {
    let mut s = lql::statement_json(statement, rows).to_string();
    s.push('\n');
    s
}

fn row_object(rows: &Rows, r: &[Value]) -> serde_json::Map<String, serde_json::Value> {
    rows.columns
        .iter()
        .zip(r)
        .map(|(c, v)| (c.name.clone(), v.to_json()))
        .collect()
}

/// sqlite3's `-json`: `[{…},\n{…}]` and a newline; nothing for a result with no rows.
pub fn render_array(rows: &Rows) -> String {
    if rows.rows.is_empty() {
        return String::new();
    }
    let objects: Vec<String> = rows
        .rows
        .iter()
        .map(|r| serde_json::Value::Object(row_object(rows, r)).to_string())
        .collect();
    format!("[{}]\n", objects.join(",\n"))
}

/// One `{"stmt": index, "column": value, …}` object per row, one per line; `stmt` is the
/// statement's 1-based index in the run, so rows of different statements stay apart.
pub fn render_lines(rows: &Rows, index: usize) -> String {
    let mut s = String::new();
    for r in &rows.rows {
        let mut obj = serde_json::Map::new();
        obj.insert("stmt".into(), index.into());
        obj.extend(row_object(rows, r));
        s.push_str(&serde_json::Value::Object(obj).to_string());
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::tests::sample;
    use super::*;

    #[test]
    fn statement_object_follows_the_contract() {
        let s = render_statement("INFER 'x' TOP 2", &sample());
        assert_eq!(s.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["statement"], "INFER 'x' TOP 2");
        assert_eq!(
            v["columns"],
            serde_json::json!(["rank", "token", "prob", "ids"])
        );
        assert_eq!(v["rows"][0][1], " Paris");
        assert_eq!(v["rows"][0][2], 0.123456789);
        assert_eq!(v["rows"][0][3], serde_json::json!([3, 4]));
        assert!(v["rows"][1][3].is_null());
        // Keys keep the contract's order.
        assert!(s.starts_with("{\"statement\":"), "{s}");
    }

    #[test]
    fn array_is_sqlites_shape() {
        let s = render_array(&sample());
        assert_eq!(
            s,
            "[{\"rank\":1,\"token\":\" Paris\",\"prob\":0.123456789,\"ids\":[3,4]},\n\
             {\"rank\":2,\"token\":\"a,\\\"b\\\"\",\"prob\":2.0,\"ids\":null}]\n"
        );
        assert_eq!(render_array(&Rows::new(sample().columns)), "");
    }

    #[test]
    fn lines_are_objects_per_row_with_the_statement_index() {
        let s = render_lines(&sample(), 3);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("{\"stmt\":3,\"rank\":1,"), "{s}");
        let v: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(v["rank"], 2);
        assert_eq!(v["token"], "a,\"b\"");
    }
}
