//! Line mode (SQLite's `.mode line`): one `column = value` line per cell, names
//! right-aligned, a blank line between rows.

use lql::Rows;

use super::format_cell;

pub fn render(rows: &Rows) -> String {
    let w = rows
        .columns
        .iter()
        .map(|c| c.name.chars().count())
        .max()
        .unwrap_or(0);
    let mut s = String::new();
    for (i, r) in rows.rows.iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        for (c, v) in rows.columns.iter().zip(r) {
            s.push_str(&format!("{:>w$} = {}\n", c.name, format_cell(v)));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::tests::sample;
    use super::*;

    #[test]
    fn line_mode_aligns_names() {
        let s = render(&sample());
        assert!(s.starts_with(" rank = 1\ntoken =  Paris\n"), "{s}");
        assert!(s.contains("\n\n rank = 2\n"), "{s}");
    }
}
