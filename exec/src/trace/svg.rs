//! The logit-lens heatmap: one row per stage (the embedding, then each layer, the last
//! layer at the top), one column per kept position; each cell is labelled with the lens's
//! top-1 token and shaded by its probability (white at 0, deep blue at 1). Drawn with
//! `plotters`' SVG backend into memory, then written beside the target and renamed.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::error::{Result, TraceError};
use super::file::write_atomically;
use super::lens::LogitLens;

const CELL_W: u32 = 84;
const CELL_H: u32 = 18;
const LEFT: u32 = 44;
const TOP: u32 = 30;
const BOTTOM: u32 = 26;
const RIGHT: u32 = 12;
/// Longest token label drawn in a cell, in characters.
const MAX_LABEL: usize = 10;

/// A token's text made printable and short: control characters escaped, long ones cut.
pub fn cell_label(text: &str) -> String {
    let mut out = String::new();
    for ch in text.chars() {
        match ch {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            ' ' => out.push('·'),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    if out.chars().count() > MAX_LABEL {
        out = out.chars().take(MAX_LABEL - 1).collect::<String>() + "…";
    }
    out
}

/// The fill of a cell of probability `p`: white → blue.
fn shade(p: f32) -> RGBColor {
    let p = p.clamp(0.0, 1.0);
    let mix = |a: f32, b: f32| (a + (b - a) * p).round() as u8;
    RGBColor(mix(255.0, 8.0), mix(255.0, 48.0), mix(255.0, 160.0))
}

/// Renders the heatmap as SVG text. `token_text(id)` names a token; `column_labels` (one
/// per kept position) head the columns; `title` is drawn above.
pub fn heatmap_svg(
    lens: &LogitLens,
    token_text: &dyn Fn(u32) -> String,
    column_labels: &[String],
    title: &str,
) -> Result<String> {
    let cols = lens.positions.len() as u32;
    let rows = lens.stages as u32;
    let w = LEFT + cols.max(1) * CELL_W + RIGHT;
    let h = TOP + rows * CELL_H + BOTTOM;
    let mut buf = String::new();
    let draw_err = |e: &dyn std::fmt::Display| TraceError::Internal(format!("svg: {e}"));
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw_err(&e))?;
        let font = |size: u32| ("sans-serif", size).into_font();
        let centre = Pos::new(HPos::Center, VPos::Center);
        root.draw(&Text::new(
            cell_label_title(title),
            (LEFT as i32, (TOP / 2) as i32),
            font(13)
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(|e| draw_err(&e))?;
        for st in 0..rows {
            // The last layer at the top, the embedding at the bottom.
            let y0 = (TOP + (rows - 1 - st) * CELL_H) as i32;
            let name = if st == 0 {
                "emb".to_string()
            } else {
                format!("L{}", st - 1)
            };
            root.draw(&Text::new(
                name,
                ((LEFT - 4) as i32, y0 + CELL_H as i32 / 2),
                font(11)
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(|e| draw_err(&e))?;
            for c in 0..cols {
                let cell = lens.cell(st as usize, c as usize);
                let x0 = (LEFT + c * CELL_W) as i32;
                let fill = shade(cell.top_prob);
                root.draw(&Rectangle::new(
                    [(x0, y0), (x0 + CELL_W as i32 - 1, y0 + CELL_H as i32 - 1)],
                    fill.filled(),
                ))
                .map_err(|e| draw_err(&e))?;
                let ink = if cell.top_prob > 0.55 { &WHITE } else { &BLACK };
                root.draw(&Text::new(
                    cell_label(&token_text(cell.top_id)),
                    (x0 + CELL_W as i32 / 2, y0 + CELL_H as i32 / 2),
                    font(11).color(ink).pos(centre),
                ))
                .map_err(|e| draw_err(&e))?;
            }
        }
        let yl = (TOP + rows * CELL_H + BOTTOM / 2) as i32;
        for (c, label) in column_labels.iter().enumerate().take(cols as usize) {
            let x = (LEFT + c as u32 * CELL_W + CELL_W / 2) as i32;
            root.draw(&Text::new(
                cell_label(label),
                (x, yl),
                font(11).color(&BLACK).pos(centre),
            ))
            .map_err(|e| draw_err(&e))?;
        }
        root.present().map_err(|e| draw_err(&e))?;
    }
    Ok(buf)
}

fn cell_label_title(t: &str) -> String {
    let one_line: String = t
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() > 80 {
        one_line.chars().take(79).collect::<String>() + "…"
    } else {
        one_line
    }
}

/// Renders the heatmap and writes it to `path` safely (temporary name, sync, rename).
pub fn write_heatmap_svg(
    path: &Path,
    lens: &LogitLens,
    token_text: &dyn Fn(u32) -> String,
    column_labels: &[String],
    title: &str,
) -> Result<()> {
    let svg =
        heatmap_svg(lens, token_text, column_labels, title).map_err(|e| TraceError::Draw {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    write_atomically(path, svg.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::lens::LensCell;

    #[test]
    fn draws_cells_and_labels() {
        let cell = |id, p| LensCell {
            top_id: id,
            top_prob: p,
            top_logit: 0.0,
            target: None,
        };
        let lens = LogitLens {
            stages: 3,
            positions: vec![0, 1],
            cells: vec![
                cell(1, 0.1),
                cell(2, 0.2),
                cell(3, 0.5),
                cell(4, 0.6),
                cell(5, 0.9),
                cell(6, 1.0),
            ],
        };
        let names = |id: u32| format!("t<{id}>&");
        let svg = heatmap_svg(&lens, &names, &["a".into(), "b\n".into()], "lens").unwrap();
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches("<rect").count(), 1 + 6, "background + cells");
        assert!(svg.contains("t&lt;6&gt;&amp;"));
        assert!(svg.contains("b\\n"));
        assert!(svg.contains(">\nL1\n<"));
    }

    #[test]
    fn labels_are_printable_and_short() {
        assert_eq!(cell_label(" Paris"), "·Paris");
        assert_eq!(cell_label("a\nb"), "a\\nb");
        assert_eq!(cell_label("abcdefghijklmnop").chars().count(), 10);
    }
}
