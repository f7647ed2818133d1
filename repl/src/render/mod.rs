//! Output modes: each renders a statement's [`Rows`] as text. The REPL and batch runner
//! pick one with `--format`, the sqlite-style flags (`-csv`, `-box`, …) or `.mode`.
//!
//! Human modes (table, box, markdown, line) show NULL as the `.nullvalue` text, lists as
//! `[a, b]` and, in the grids, control characters escaped and edge spaces visible (`␣Paris`);
//! machine modes (csv, json, array, jsonl) carry the raw text. Floats print everywhere with
//! the shortest form of the stored value (`lql::Value`'s `Display`).

mod csv;
mod grid;
mod json;
mod line;

use std::fmt;
use std::str::FromStr;

use lql::{Rows, Value};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputMode {
    /// A grid with rounded UTF-8 borders fitted to the terminal width (the default).
    Table,
    /// A grid with square UTF-8 borders (sqlite3's `.mode box`).
    Box,
    /// A Markdown table (sqlite3's `.mode markdown`).
    Markdown,
    /// One JSON object per statement: `{"statement", "columns", "rows"}` (LQL's contract).
    Json,
    /// One JSON array of row objects per statement, as sqlite3's and duckdb's `-json`.
    Array,
    /// One JSON object per row, keyed by column name, with the statement's index.
    Jsonl,
    /// RFC 4180 CSV (LF line ends) with a header row unless headers are off.
    Csv,
    /// One `column = value` line per cell, rows separated by a blank line.
    Line,
}

impl OutputMode {
    pub const ALL: [OutputMode; 8] = [
        OutputMode::Table,
        OutputMode::Box,
        OutputMode::Markdown,
        OutputMode::Json,
        OutputMode::Array,
        OutputMode::Jsonl,
        OutputMode::Csv,
        OutputMode::Line,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OutputMode::Table => "table",
            OutputMode::Box => "box",
            OutputMode::Markdown => "markdown",
            OutputMode::Json => "json",
            OutputMode::Array => "array",
            OutputMode::Jsonl => "jsonl",
            OutputMode::Csv => "csv",
            OutputMode::Line => "line",
        }
    }

    /// `table|box|…`, for usage lines.
    pub fn names() -> String {
        let names: Vec<&str> = OutputMode::ALL.iter().map(|m| m.name()).collect();
        names.join("|")
    }

    /// Whether errors should be printed as JSON (machine-readable modes).
    pub fn json_errors(self) -> bool {
        matches!(
            self,
            OutputMode::Json | OutputMode::Jsonl | OutputMode::Array
        )
    }

    /// Machine-readable modes: a script's output in them is data, so status results (USE)
    /// stay silent unless echo is on.
    pub fn is_machine(self) -> bool {
        matches!(
            self,
            OutputMode::Json | OutputMode::Jsonl | OutputMode::Array | OutputMode::Csv
        )
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

/// The shell settings a renderer needs.
#[derive(Debug, Clone, Copy)]
pub struct RenderOptions<'a> {
    /// Width to fit grids into (`None`: no fitting).
    pub width: Option<u16>,
    /// Header rows in csv (`.headers`).
    pub headers: bool,
    /// How NULL shows in human modes and csv (`.nullvalue`; default `NULL`, empty in csv).
    pub nullvalue: Option<&'a str>,
    /// Fixed column widths in grids (`.width`; 0 or missing: automatic).
    pub widths: &'a [usize],
    /// The statement's 1-based index in the run (jsonl's `stmt`).
    pub index: usize,
}

impl Default for RenderOptions<'_> {
    fn default() -> Self {
        RenderOptions {
            width: None,
            headers: true,
            nullvalue: None,
            widths: &[],
            index: 1,
        }
    }
}

/// Renders one statement's result. Results without columns (status-only statements)
/// render as nothing. The text ends with a newline unless empty.
pub fn render(mode: OutputMode, statement: &str, rows: &Rows, o: &RenderOptions<'_>) -> String {
    if rows.columns.is_empty() {
        return String::new();
    }
    match mode {
        OutputMode::Table => grid::render(grid::Style::Rounded, rows, o),
        OutputMode::Box => grid::render(grid::Style::Box, rows, o),
        OutputMode::Markdown => grid::render(grid::Style::Markdown, rows, o),
        OutputMode::Json => json::render_statement(statement, rows),
        OutputMode::Array => json::render_array(rows),
        OutputMode::Jsonl => json::render_lines(rows, o.index),
        OutputMode::Csv => csv::render(rows, o),
        OutputMode::Line => line::render(rows, o),
    }
}

/// A cell for people (grid and line modes): NULL as `nullvalue` (default `NULL`), lists as
/// `[a, b, c]`, everything else as its `Display`.
pub fn format_cell(v: &Value, nullvalue: Option<&str>) -> String {
    match v {
        Value::Null => nullvalue.unwrap_or("NULL").to_string(),
        Value::List(items) => {
            let inner: Vec<String> = items.iter().map(|i| format_cell(i, None)).collect();
            format!("[{}]", inner.join(", "))
        }
        other => other.to_string(),
    }
}

/// Text safe to print on a terminal: control characters other than newline and tab
/// (escape sequences, carriage returns, backspaces) escaped as `\u{1b}`, so a cell from a
/// file (an edge's text in a patch) cannot move the cursor or rewrite the screen.
pub fn terminal_safe(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lql::{Column, ValueType};

    #[test]
    fn escape_sequences_are_printed_escaped() {
        assert_eq!(terminal_safe("Rome"), "Rome");
        assert_eq!(terminal_safe("a\u{1b}[2Jb\r"), "a\\u{1b}[2Jb\\u{d}");
        assert_eq!(terminal_safe("two\nlines\tok"), "two\nlines\tok");
    }

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
    fn modes_parse_by_name() {
        assert_eq!("JSON".parse::<OutputMode>().unwrap(), OutputMode::Json);
        assert_eq!("box".parse::<OutputMode>().unwrap(), OutputMode::Box);
        assert!("xml".parse::<OutputMode>().is_err());
        assert_eq!(
            OutputMode::names(),
            "table|box|markdown|json|array|jsonl|csv|line"
        );
    }

    #[test]
    fn status_results_render_nothing() {
        for m in OutputMode::ALL {
            assert_eq!(
                render(m, "USE 'x'", &Rows::empty(), &RenderOptions::default()),
                ""
            );
        }
    }

    #[test]
    fn cells_format_lists_nulls_and_f32_floats() {
        assert_eq!(
            format_cell(&Value::List(vec![Value::Float(0.5), Value::Int(2)]), None),
            "[0.5, 2]"
        );
        assert_eq!(format_cell(&Value::Null, None), "NULL");
        assert_eq!(format_cell(&Value::Null, Some("-")), "-");
        assert_eq!(format_cell(&Value::Float(1e-5f32 as f64), None), "1e-5");
    }
}
