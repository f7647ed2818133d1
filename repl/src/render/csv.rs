//! CSV mode (RFC 4180): a header row, fields quoted when they hold `,`, `"` or a line
//! break; NULL as an empty field; floats in full precision.

use lql::{Rows, Value};

pub fn render(rows: &Rows) -> String {
    let mut s = String::new();
    let header: Vec<String> = rows.columns.iter().map(|c| field(&c.name)).collect();
    s.push_str(&header.join(","));
    s.push_str("\r\n");
    for r in &rows.rows {
        let cells: Vec<String> = r.iter().map(cell).collect();
        s.push_str(&cells.join(","));
        s.push_str("\r\n");
    }
    s
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        other => field(&other.to_string()),
    }
}

fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
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
    fn csv_quotes_and_escapes() {
        let s = render(&sample());
        let lines: Vec<&str> = s.split("\r\n").collect();
        assert_eq!(lines[0], "rank,token,prob,ids");
        assert_eq!(lines[1], "1, Paris,0.123456789,\"[3, 4]\"");
        assert_eq!(lines[2], "2,\"a,\"\"b\"\"\",2.0,");
    }
}
