//! Output modes: each renders a statement's [`Rows`] as text. The REPL and batch runner
//! pick one with `--format` or `.mode`.

mod csv;
mod json;
mod line;
mod table;

use std::fmt;
use std::str::FromStr;

use lql::{Rows, Value};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// A box-drawn table fitted to the terminal width (comfy-table).
    Table,
    /// One JSON object per statement: `{"statement", "columns", "rows"}`.
    Json,
    /// One JSON object per row, keyed by column name.
    Jsonl,
    /// RFC 4180 CSV with a header row.
    Csv,
    /// One `column = value` line per cell, rows separated by a blank line.
    Line,
}

impl OutputMode {
    pub const ALL: [OutputMode; 5] = [
        OutputMode::Table,
        OutputMode::Json,
        OutputMode::Jsonl,
        OutputMode::Csv,
        OutputMode::Line,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OutputMode::Table => "table",
            OutputMode::Json => "json",
            OutputMode::Jsonl => "jsonl",
            OutputMode::Csv => "csv",
            OutputMode::Line => "line",
        }
    }

    /// Whether errors should be printed as JSON (machine-readable modes).
    pub fn json_errors(self) -> bool {
        matches!(self, OutputMode::Json | OutputMode::Jsonl)
    }
}

impl fmt::Display for OutputMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for OutputMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        OutputMode::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let names: Vec<_> = OutputMode::ALL.iter().map(|m| m.name()).collect();
                format!("unknown mode {s:?}: expected one of {}", names.join(", "))
            })
    }
}

/// Renders one statement's result. Results without columns (status-only statements)
/// render as nothing. The text ends with a newline unless empty.
pub fn render(mode: OutputMode, statement: &str, rows: &Rows, width: Option<u16>) -> String {
    if rows.columns.is_empty() {
        return String::new();
    }
    match mode {
        OutputMode::Table => table::render(rows, width),
        OutputMode::Json => json::render_statement(statement, rows),
        OutputMode::Jsonl => json::render_lines(rows),
        OutputMode::Csv => csv::render(rows),
        OutputMode::Line => line::render(rows),
    }
}

/// A float for people: six significant digits, trailing zeros trimmed, at least one
/// decimal; scientific notation for very large or very small magnitudes.
pub fn format_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return "0.0".into();
    }
    let mag = x.abs();
    if !(1e-4..1e15).contains(&mag) {
        let s = format!("{x:.5e}");
        // Trim zeros of the mantissa: 1.50000e-7 → 1.5e-7.
        return match s.split_once('e') {
            Some((m, e)) => {
                let m = m.trim_end_matches('0');
                let m = m.strip_suffix('.').unwrap_or(m);
                format!("{m}e{e}")
            }
            None => s,
        };
    }
    let int_digits = mag.log10().floor() as i32 + 1;
    let decimals = (6 - int_digits).clamp(1, 12) as usize;
    let s = format!("{x:.decimals$}");
    let s = s.trim_end_matches('0');
    if s.ends_with('.') {
        format!("{s}0")
    } else {
        s.to_string()
    }
}

/// A cell for people (table and line modes): NULL, floats by [`format_float`], lists
/// as `[a, b, c]`.
pub fn format_cell(v: &Value) -> String {
    match v {
        Value::Float(x) => format_float(*x),
        Value::List(items) => {
            let inner: Vec<String> = items.iter().map(format_cell).collect();
            format!("[{}]", inner.join(", "))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lql::{Column, ValueType};

    pub(crate) fn sample() -> Rows {
        let mut rows = Rows::new(vec![
            Column::new("rank", ValueType::Int),
            Column::new("token", ValueType::Text),
            Column::new("prob", ValueType::Float),
            Column::new("ids", ValueType::List),
        ]);
        rows.push(vec![
            Value::Int(1),
            Value::Text(" Paris".into()),
            Value::Float(0.123456789),
            Value::List(vec![Value::Int(3), Value::Int(4)]),
        ]);
        rows.push(vec![
            Value::Int(2),
            Value::Text("a,\"b\"".into()),
            Value::Float(2.0),
            Value::Null,
        ]);
        rows
    }

    #[test]
    fn floats_are_readable() {
        assert_eq!(format_float(0.123456789), "0.123457");
        assert_eq!(format_float(15.23456789), "15.2346");
        assert_eq!(format_float(2.0), "2.0");
        assert_eq!(format_float(-3.5), "-3.5");
        assert_eq!(format_float(0.0), "0.0");
        assert_eq!(format_float(1.5e-7), "1.5e-7");
        assert_eq!(format_float(123456.7), "123456.7");
        assert_eq!(format_float(f64::NAN), "NaN");
    }

    #[test]
    fn modes_parse_by_name() {
        assert_eq!("JSON".parse::<OutputMode>().unwrap(), OutputMode::Json);
        assert!("xml".parse::<OutputMode>().is_err());
    }

    #[test]
    fn status_results_render_nothing() {
        for m in OutputMode::ALL {
            assert_eq!(render(m, "USE 'x'", &Rows::empty(), None), "");
        }
    }

    #[test]
    fn cells_format_lists_and_nulls() {
        assert_eq!(
            format_cell(&Value::List(vec![Value::Float(0.5), Value::Int(2)])),
            "[0.5, 2]"
        );
        assert_eq!(format_cell(&Value::Null), "NULL");
    }
}
