//! JSON modes: the statement-level contract (`json`) and one object per row (`jsonl`).

use lql::Rows;

/// `{"statement": "<text>", "columns": ["…"], "rows": [[…], …]}` on one line.
pub fn render_statement(statement: &str, rows: &Rows) -> String {
    let mut s = lql::statement_json(statement, rows).to_string();
    s.push('\n');
    s
}

/// One `{"column": value, …}` object per row, one per line.
pub fn render_lines(rows: &Rows) -> String {
    let mut s = String::new();
    for r in &rows.rows {
        let obj: serde_json::Map<String, serde_json::Value> = rows
            .columns
            .iter()
            .zip(r)
            .map(|(c, v)| (c.name.clone(), v.to_json()))
            .collect();
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
    fn lines_are_objects_per_row() {
        let s = render_lines(&sample());
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 2);
        let v: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(v["rank"], 2);
        assert_eq!(v["token"], "a,\"b\"");
    }
}
