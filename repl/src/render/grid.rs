//! Grid modes: `table` (rounded borders, numbers right-aligned; the default), `box` and
//! `markdown` (sqlite3's shapes: centred headers, cells left-aligned).
//!
//! Grids are fitted to the terminal width by narrowing the widest columns; a cell longer
//! than its column is cut with `…` (never wrapped, so a row stays one line). `.width`
//! fixes a column's width. Cell text is made unambiguous: control characters are escaped
//! (`\n`) and leading/trailing spaces shown as `␣`, so `␣Paris` and `Paris` differ.

use lql::{Rows, Value};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

use super::{format_cell, RenderOptions};

/// A grid's border set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Rounded,
    Box,
    Markdown,
}

/// The narrowest a column is squeezed to when fitting (unless its content is narrower).
const MIN_FIT: usize = 6;

pub fn render(style: Style, rows: &Rows, o: &RenderOptions<'_>) -> String {
    let n = rows.columns.len();
    let headers: Vec<String> = rows.columns.iter().map(|c| visible(&c.name)).collect();
    // EXPLAIN's `plan` column is an indented tree: its leading spaces are layout, shown
    // as spaces, not as the `␣` that marks a token's own edge spaces.
    let layout: Vec<bool> = rows.columns.iter().map(|c| c.name == "plan").collect();
    let cells: Vec<Vec<String>> = rows
        .rows
        .iter()
        .map(|r| {
            r.iter()
                .zip(&layout)
                .map(|(v, &tree)| match (v, tree) {
                    (Value::Text(t), true) => escaped(t, false),
                    _ => cell_text(v, o.nullvalue),
                })
                .collect()
        })
        .collect();
    let numeric: Vec<bool> = rows.columns.iter().map(|c| c.ty.is_numeric()).collect();

    let mut widths: Vec<usize> = (0..n)
        .map(|i| {
            let cells_w = cells.iter().map(|r| r[i].width()).max().unwrap_or(0);
            headers[i].width().max(cells_w).max(1)
        })
        .collect();
    let fixed: Vec<bool> = (0..n)
        .map(|i| o.widths.get(i).is_some_and(|w| *w > 0))
        .collect();
    for i in 0..n {
        if fixed[i] {
            widths[i] = o.widths[i];
        }
    }
    if let Some(limit) = o.width {
        fit(&mut widths, &fixed, limit as usize);
    }

    let mut s = String::new();
    let line = |s: &mut String, left: &str, fill: &str, mid: &str, right: &str| {
        s.push_str(left);
        for (i, w) in widths.iter().enumerate() {
            if i > 0 {
                s.push_str(mid);
            }
            s.push_str(&fill.repeat(w + 2));
        }
        s.push_str(right);
        s.push('\n');
    };
    let row = |s: &mut String, texts: &[String], align: &dyn Fn(usize) -> Align, sep: &str| {
        let outer = if style == Style::Markdown { "|" } else { "│" };
        s.push_str(outer);
        for (i, (t, w)) in texts.iter().zip(&widths).enumerate() {
            if i > 0 {
                s.push_str(sep);
            }
            s.push(' ');
            s.push_str(&pad(&truncate(t, *w), *w, align(i)));
            s.push(' ');
        }
        s.push_str(outer);
        s.push('\n');
    };
    match style {
        Style::Rounded => {
            line(&mut s, "╭", "─", "┬", "╮");
            row(&mut s, &headers, &|_| Align::Left, "┆");
            line(&mut s, "╞", "═", "╪", "╡");
            for r in &cells {
                row(&mut s, r, &|i| number_align(numeric[i]), "┆");
            }
            line(&mut s, "╰", "─", "┴", "╯");
        }
        Style::Box => {
            line(&mut s, "┌", "─", "┬", "┐");
            row(&mut s, &headers, &|_| Align::Centre, "│");
            line(&mut s, "├", "─", "┼", "┤");
            for r in &cells {
                row(&mut s, r, &|_| Align::Left, "│");
            }
            line(&mut s, "└", "─", "┴", "┘");
        }
        Style::Markdown => {
            let headers: Vec<String> = headers.iter().map(|h| h.replace('|', "\\|")).collect();
            row(&mut s, &headers, &|_| Align::Centre, "|");
            line(&mut s, "|", "-", "|", "|");
            for r in &cells {
                let r: Vec<String> = r.iter().map(|c| c.replace('|', "\\|")).collect();
                row(&mut s, &r, &|_| Align::Left, "|");
            }
        }
    }
    s
}

#[derive(Debug, Clone, Copy)]
enum Align {
    Left,
    Right,
    Centre,
}

fn number_align(numeric: bool) -> Align {
    if numeric {
        Align::Right
    } else {
        Align::Left
    }
}

/// Narrows the widest free columns one step at a time until the grid fits `limit`
/// columns of screen (borders: `│ ` before each cell, ` ` after, one closing `│`).
fn fit(widths: &mut [usize], fixed: &[bool], limit: usize) {
    let total = |w: &[usize]| w.iter().sum::<usize>() + 3 * w.len() + 1;
    while total(widths) > limit {
        let widest = (0..widths.len())
            .filter(|&i| !fixed[i] && widths[i] > MIN_FIT)
            .max_by_key(|&i| (widths[i], std::cmp::Reverse(i)));
        match widest {
            Some(i) => widths[i] -= 1,
            None => break,
        }
    }
}

/// `s` cut to `w` screen columns, ending in `…` when it was cut.
fn truncate(s: &str, w: usize) -> String {
    if s.width() <= w {
        return s.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let cw = c.width().unwrap_or(0);
        if used + cw + 1 > w {
            break;
        }
        out.push(c);
        used += cw;
    }
    // A cut at a word break shows the ellipsis against the last word.
    let kept = out.trim_end_matches(' ').len();
    out.truncate(kept);
    out.push('…');
    out
}

fn pad(s: &str, w: usize, align: Align) -> String {
    let gap = w.saturating_sub(s.width());
    match align {
        Align::Left => format!("{s}{}", " ".repeat(gap)),
        Align::Right => format!("{}{s}", " ".repeat(gap)),
        Align::Centre => {
            let left = gap / 2;
            format!("{}{s}{}", " ".repeat(left), " ".repeat(gap - left))
        }
    }
}

/// A cell's grid text: see [`visible`].
fn cell_text(v: &Value, nullvalue: Option<&str>) -> String {
    match v {
        Value::Text(t) => visible(t),
        other => visible(&format_cell(other, nullvalue)),
    }
}

/// Text made unambiguous on one line: control characters escaped (`\n`, `\t`, `\u{7}`),
/// leading and trailing spaces shown as `␣` (inner spaces stay).
pub fn visible(s: &str) -> String {
    escaped(s, true)
}

/// [`visible`], with the edge spaces marked (`mark_edges`) or kept as spaces.
fn escaped(s: &str, mark_edges: bool) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    let chars: Vec<char> = s.chars().collect();
    let lead = chars.iter().take_while(|c| **c == ' ').count();
    let trail = if lead == chars.len() {
        0
    } else {
        chars.iter().rev().take_while(|c| **c == ' ').count()
    };
    for (i, &c) in chars.iter().enumerate() {
        match c {
            ' ' if mark_edges && (i < lead || i >= chars.len() - trail) => out.push('␣'),
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

    fn opts() -> RenderOptions<'static> {
        RenderOptions::default()
    }

    #[test]
    fn table_has_header_rows_and_full_floats() {
        let s = render(Style::Rounded, &sample(), &opts());
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines[0].starts_with('╭'), "{s}");
        assert!(
            lines[1].contains("rank") && lines[1].contains("prob"),
            "{s}"
        );
        assert!(lines[2].starts_with('╞'), "{s}");
        assert!(s.contains("0.123456789"), "{s}");
        assert!(s.contains("[3, 4]"), "{s}");
        assert!(s.contains("NULL"), "{s}");
        assert!(lines.last().unwrap().starts_with('╰'), "{s}");
        // Numbers are right-aligned: "1" sits just before the column separator.
        let row1 = lines.iter().find(|l| l.contains("Paris")).unwrap();
        assert!(row1.starts_with("│    1 ┆"), "{s}");
        // The leading space of " Paris" is visible.
        assert!(row1.contains("┆ ␣Paris"), "{s}");
        // Every line has the same screen width.
        let w = lines[0].width();
        assert!(lines.iter().all(|l| l.width() == w), "{s}");
    }

    #[test]
    fn wide_cells_are_cut_with_an_ellipsis_not_wrapped() {
        let mut rows = sample();
        rows.rows[0][1] = Value::Text("word ".repeat(40).trim_end().to_string());
        let o = RenderOptions {
            width: Some(60),
            ..opts()
        };
        let s = render(Style::Rounded, &rows, &o);
        assert_eq!(s.lines().count(), 6, "one line per row:\n{s}");
        for l in s.lines() {
            assert!(l.width() <= 60, "line too wide: {l}");
        }
        assert!(s.contains("word word…"), "{s}");
        assert!(!s.contains(" …"), "{s}");
    }

    #[test]
    fn widths_fix_columns() {
        let widths = [0, 3];
        let o = RenderOptions {
            widths: &widths,
            ..opts()
        };
        let s = render(Style::Box, &sample(), &o);
        assert!(s.contains("│ ␣P… │"), "{s}");
    }

    #[test]
    fn box_and_markdown_follow_sqlite() {
        let s = render(Style::Box, &sample(), &opts());
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "┌──────┬────────┬─────────────┬────────┐");
        assert_eq!(lines[1], "│ rank │ token  │    prob     │  ids   │");
        assert_eq!(lines[2], "├──────┼────────┼─────────────┼────────┤");
        assert_eq!(lines[3], "│ 1    │ ␣Paris │ 0.123456789 │ [3, 4] │");
        let m = render(Style::Markdown, &sample(), &opts());
        let lines: Vec<&str> = m.lines().collect();
        assert_eq!(lines[0], "| rank | token  |    prob     |  ids   |");
        assert_eq!(lines[1], "|------|--------|-------------|--------|");
        assert_eq!(lines[3], "| 2    | a,\"b\"  | 2.0         | NULL   |");
    }

    #[test]
    fn visible_marks_edge_spaces_and_escapes_controls() {
        assert_eq!(visible(" Paris"), "␣Paris");
        assert_eq!(visible("a b "), "a b␣");
        assert_eq!(visible("  "), "␣␣");
        assert_eq!(visible("a\nb"), "a\\nb");
        assert_eq!(visible("\u{7}"), "\\u{7}");
    }

    #[test]
    fn cjk_is_measured_in_screen_columns() {
        assert_eq!(truncate("日本語テキスト", 7), "日本語…");
        assert_eq!(pad("日本", 6, Align::Right), "  日本");
    }
}
