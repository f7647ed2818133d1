//! Table mode: comfy-table with rounded UTF-8 borders, fitted to the terminal width;
//! numbers right-aligned, control characters in text shown escaped.

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{modifiers::UTF8_ROUND_CORNERS, Cell, CellAlignment, ContentArrangement, Table};
use lql::{Rows, Value};

use super::format_cell;

pub fn render(rows: &Rows, width: Option<u16>) -> String {
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .apply_modifier(UTF8_ROUND_CORNERS);
    match width {
        Some(w) => {
            table
                .set_content_arrangement(ContentArrangement::Dynamic)
                .set_width(w);
        }
        None => {
            table.force_no_tty();
        }
    }
    table.set_header(rows.columns.iter().map(|c| Cell::new(&c.name)));
    for (i, c) in rows.columns.iter().enumerate() {
        if c.ty.is_numeric() {
            if let Some(col) = table.column_mut(i) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
    }
    for row in &rows.rows {
        table.add_row(row.iter().map(|v| Cell::new(cell_text(v))));
    }
    let mut s = table.to_string();
    s.push('\n');
    s
}

/// Cell text with control characters escaped so every row stays on one line.
fn cell_text(v: &Value) -> String {
    let s = format_cell(v);
    if !s.chars().any(char::is_control) {
        return s;
    }
    let mut out = String::with_capacity(s.len() + 4);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::sample;
    use super::*;

    #[test]
    fn table_has_header_rows_and_readable_floats() {
        let s = render(&sample(), None);
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines[0].starts_with('╭'), "{s}");
        assert!(
            lines[1].contains("rank") && lines[1].contains("prob"),
            "{s}"
        );
        assert!(s.contains("0.123457"), "{s}");
        assert!(s.contains("[3, 4]"), "{s}");
        assert!(s.contains("NULL"), "{s}");
        assert!(lines.last().unwrap().starts_with('╰'), "{s}");
        // Numbers are right-aligned: "1" sits just before the column border.
        let row1 = lines.iter().find(|l| l.contains("Paris")).unwrap();
        assert!(row1.contains("    1 ┆"), "{s}");
    }

    #[test]
    fn table_fits_a_narrow_width() {
        let mut rows = sample();
        rows.rows[0][1] = Value::Text("word ".repeat(40));
        let s = render(&rows, Some(60));
        for l in s.lines() {
            assert!(l.chars().count() <= 60, "line too wide: {l}");
        }
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(cell_text(&Value::Text("a\nb".into())), "a\\nb");
    }
}
