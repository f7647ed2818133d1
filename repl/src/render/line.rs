//! Line mode (sqlite3's `.mode line`): one `column = value` line per cell, names
//! right-aligned to the widest (at least 5, as sqlite3 does), a blank line between rows;
//! control characters other than newline and tab escaped (`render::terminal_safe`).

use lql::Rows;

use super::{format_cell, RenderOptions};

pub fn render(rows: &Rows, o: &RenderOptions<'_>) -> String {
    let w = rows
        .columns
        .iter()
        .map(|c| c.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(5);
    let mut s = String::new();
    for (i, r) in rows.rows.iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        for (c, v) in rows.columns.iter().zip(r) {
            s.push_str(&format!(
                "{:>w$} = {}\n",
                c.name,
                super::terminal_safe(&format_cell(v, o.nullvalue))
            ));
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
        let s = render(&sample(), &RenderOptions::default());
        assert!(s.starts_with(" rank = 1\ntoken =  Paris\n"), "{s}");
        assert!(s.contains("\n\n rank = 2\n"), "{s}");
        assert!(s.ends_with("  ids = NULL\n"), "{s}");
    }
}
