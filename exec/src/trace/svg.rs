//! Heat maps as SVG: a grid of labelled cells with row labels on the left and column labels
//! below, each cell shaded by a value in [-1, 1] (white at 0, deep blue at 1, deep red at
//! -1) and captioned with a short text. The logit lens (TRACE … SAVE "x.svg": one row per
//! stage, the last layer at the top, each cell the lens's top-1 token shaded by its
//! probability) and PATCH … SAVE (the fraction recovered per cell) are drawn with it. Drawn
//! with `plotters`' SVG backend into memory, then written beside the target and renamed.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::file::write_atomically;
use super::lens::LogitLens;
use crate::error::{ExecError, Result};

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

/// The fill of a cell of value `v`: white → blue for positive, white → red for negative.
fn shade(v: f32) -> RGBColor {
    let p = v.abs().clamp(0.0, 1.0);
    let mix = |a: f32, b: f32| (a + (b - a) * p).round() as u8;
    if v >= 0.0 {
        RGBColor(mix(255.0, 8.0), mix(255.0, 48.0), mix(255.0, 160.0))
    } else {
        RGBColor(mix(255.0, 170.0), mix(255.0, 20.0), mix(255.0, 30.0))
    }
}

/// One cell: its caption and its value in [-1, 1] (clamped).
#[derive(Debug, Clone, PartialEq)]
pub struct HeatCell {
    pub text: String,
    pub value: f32,
}

/// A grid to draw: `cells` row-major, row 0 drawn at the bottom.
#[derive(Debug, Clone, PartialEq)]
pub struct Heatmap {
    pub title: String,
    /// One per row, bottom row first.
    pub row_labels: Vec<String>,
    pub column_labels: Vec<String>,
    pub cells: Vec<HeatCell>,
}

/// Renders a heat map as SVG text.
pub fn render(map: &Heatmap) -> Result<String> {
    let cols = map.column_labels.len() as u32;
    let rows = map.row_labels.len() as u32;
    if map.cells.len() != (rows * cols) as usize {
        return Err(ExecError::Internal(format!(
            "a heat map of {rows} × {cols} has {} cells",
            map.cells.len()
        )));
    }
    let w = LEFT + cols.max(1) * CELL_W + RIGHT;
    let h = TOP + rows * CELL_H + BOTTOM;
    let mut buf = String::new();
    let draw_err = |e: &dyn std::fmt::Display| ExecError::Internal(format!("svg: {e}"));
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw_err(&e))?;
        let font = |size: u32| ("sans-serif", size).into_font();
        let centre = Pos::new(HPos::Center, VPos::Center);
        root.draw(&Text::new(
            cell_label_title(&map.title),
            (LEFT as i32, (TOP / 2) as i32),
            font(13)
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(|e| draw_err(&e))?;
        for (r, name) in map.row_labels.iter().enumerate() {
            let r = r as u32;
            let y0 = (TOP + (rows - 1 - r) * CELL_H) as i32;
            root.draw(&Text::new(
                name.clone(),
                ((LEFT - 4) as i32, y0 + CELL_H as i32 / 2),
                font(11)
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Right, VPos::Center)),
            ))
            .map_err(|e| draw_err(&e))?;
            for c in 0..cols {
                let cell = &map.cells[(r * cols + c) as usize];
                let x0 = (LEFT + c * CELL_W) as i32;
                root.draw(&Rectangle::new(
                    [(x0, y0), (x0 + CELL_W as i32 - 1, y0 + CELL_H as i32 - 1)],
                    shade(cell.value).filled(),
                ))
                .map_err(|e| draw_err(&e))?;
                let ink = if cell.value.abs() > 0.55 {
                    &WHITE
                } else {
                    &BLACK
                };
                root.draw(&Text::new(
                    cell_label(&cell.text),
                    (x0 + CELL_W as i32 / 2, y0 + CELL_H as i32 / 2),
                    font(11).color(ink).pos(centre),
                ))
                .map_err(|e| draw_err(&e))?;
            }
        }
        let yl = (TOP + rows * CELL_H + BOTTOM / 2) as i32;
        for (c, label) in map.column_labels.iter().enumerate() {
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

/// The logit lens as a heat map: one row per stage (`emb`, then `L0`, …, the last layer
/// at the top), one column per kept position; each cell the top-1 token, shaded by its
/// probability. `token_text(id)` names a token; `column_labels` head the columns.
pub fn lens_heatmap(
    lens: &LogitLens,
    token_text: &dyn Fn(u32) -> String,
    column_labels: &[String],
    title: &str,
) -> Heatmap {
    let cols = lens.positions.len();
    let mut cells = Vec::with_capacity(lens.stages * cols);
    for st in 0..lens.stages {
        for c in 0..cols {
            let cell = lens.cell(st, c);
            cells.push(HeatCell {
                text: token_text(cell.top_id),
                value: cell.top_prob,
            });
        }
    }
    Heatmap {
        title: title.to_string(),
        row_labels: (0..lens.stages)
            .map(|st| {
                if st == 0 {
                    "emb".to_string()
                } else {
                    format!("L{}", st - 1)
                }
            })
            .collect(),
        column_labels: column_labels.iter().take(cols).cloned().collect(),
        cells,
    }
}

/// Renders the logit-lens heat map as SVG text ([`lens_heatmap`]).
pub fn heatmap_svg(
    lens: &LogitLens,
    token_text: &dyn Fn(u32) -> String,
    column_labels: &[String],
    title: &str,
) -> Result<String> {
    render(&lens_heatmap(lens, token_text, column_labels, title))
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

/// Renders a heat map and writes it to `path` safely (temporary name, sync, rename).
pub fn write_svg(path: &Path, map: &Heatmap) -> Result<()> {
    let svg = render(map).map_err(|e| ExecError::Draw {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    write_atomically(path, svg.as_bytes())
}

/// Renders the logit-lens heat map and writes it to `path` safely.
pub fn write_heatmap_svg(
    path: &Path,
    lens: &LogitLens,
    token_text: &dyn Fn(u32) -> String,
    column_labels: &[String],
    title: &str,
) -> Result<()> {
    write_svg(path, &lens_heatmap(lens, token_text, column_labels, title))
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
