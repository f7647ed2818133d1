//! CSV mode (RFC 4180, LF line ends as sqlite3 writes on Unix): a header row unless
//! `.headers off`; a field is quoted when it holds `,`, `"` or a line break, or starts or
//! ends with whitespace (so ` Paris` keeps its space in every reader); NULL as an empty
//! field (or `.nullvalue`); lists as JSON arrays (`"[3,4]"`); floats in shortest form.

use lql::{Rows, Value};

use super::RenderOptions;

pub fn render(rows: &Rows, o: &RenderOptions<'_>) -> String {
    let mut s = String::new();
    if o.headers {
        let header: Vec<String> = rows.columns.iter().map(|c| field(&c.name)).collect();
        s.push_str(&header.join(","));
        s.push('\n');
    }
    for r in &rows.rows {
        let cells: Vec<String> = r.iter().map(|v| cell(v, o.nullvalue)).collect();
        s.push_str(&cells.join(","));
        s.push('\n');
    }
    s
}

fn cell(v: &Value, nullvalue: Option<&str>) -> String {
    match v {
        Value::Null => field(nullvalue.unwrap_or("")),
        Value::List(_) => field(&v.to_json().to_string()),
        other => field(&other.to_string()),
    }
}

fn field(s: &str) -> String {
    let edge_space = s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace);
    if edge_space || s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::sample;
    use super::*;

    #[test]
    fn csv_quotes_escapes_and_ends_lines_with_lf() {
        let s = render(&sample(), &RenderOptions::default());
        assert!(!s.contains('\r'), "{s:?}");
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "rank,token,prob,ids");
        assert_eq!(lines[1], "1,\" Paris\",0.123456789,\"[3,4]\"");
        assert_eq!(lines[2], "2,\"a,\"\"b\"\"\",2.0,");
    }

    #[test]
    fn headers_off_and_nullvalue() {
        let o = RenderOptions {
            headers: false,
            nullvalue: Some("NA"),
            ..RenderOptions::default()
        };
        let s = render(&sample(), &o);
        assert!(s.starts_with("1,"), "{s}");
        assert!(s.ends_with(",2.0,NA\n"), "{s}");
    }

    #[test]
    fn lists_of_text_are_json_arrays() {
        let v = Value::List(vec![Value::Text("a\"b".into()), Value::Float(0.5)]);
        assert_eq!(cell(&v, None), "\"[\"\"a\\\"\"b\"\",0.5]\"");
    }
}
