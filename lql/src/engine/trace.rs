//! TRACE's operators — LogitLens, Decompose, SaveTrace — and its rows: watch the model
//! think, layer by layer.
//!
//! `TRACE "prompt" [FOR "token"] [DECOMPOSE] [LAYERS a-b] [POSITIONS LAST | ALL]
//! [SAVE "file"]` runs the prompt once (Forward with a capturing observer, then Head) and
//! reads the capture:
//!
//! - default: the logit lens per layer (top-1 token, id, probability) and the L2 norms of
//!   the layer's attention and FFN deltas;
//! - `FOR "tok"` (one token): the token's rank and probability per layer and the direct
//!   logit contributions of each delta (they add up to the final logit), with `who`;
//! - `DECOMPOSE`: delta norms, residual norm and the attention share (after FOR's columns
//!   when both are given);
//! - `POSITIONS ALL` adds a `position` column (rows position-major); `LAYERS a-b` keeps
//!   those layers' rows (the `emb` row only when the range starts at 0);
//! - `SAVE "x.svg"` draws the logit-lens heatmap, any other name writes a `.trace` file.
//!
//! Formulas and the file layout: `docs/trace.md`.

use std::path::Path;

use lql_exec::trace::{self, lens, LogitLens, Trace, TraceFile};
use lql_planner::{LayerRange, Positions};

use super::datum::Datum;
use super::interp::wrong_input;
use super::Cx;
use crate::error::{Error, Result};
use crate::rows::{Column, Rows};
use crate::value::Value;

/// The single token `text` stands for, or an error naming its pieces (`clause`: where the
/// text was given, e.g. `FOR`).
pub(crate) fn single_token(
    tok: &lql_exec::tokenizer::Tokenizer,
    text: &str,
    clause: &str,
) -> Result<u32> {
    let ids = tok.encode(text, false)?;
    if let [id] = ids[..] {
        return Ok(id);
    }
    let pieces: Vec<String> = ids
        .iter()
        .map(|&i| {
            format!(
                "{:?}",
                tok.token_text(i).unwrap_or_else(|| format!("<{i}>"))
            )
        })
        .collect();
    let mut e = Error::semantic(format!(
        "{clause} {text:?} is {} tokens ({}); it must be exactly one token",
        ids.len(),
        if pieces.is_empty() {
            "none".to_string()
        } else {
            pieces.join(" + ")
        }
    ));
    let spaced = format!(" {text}");
    if !text.starts_with(' ') && matches!(tok.encode(&spaced, false).as_deref(), Ok([_])) {
        e = e.with_help(format!(
            "{spaced:?} (with a leading space, as the word appears after another) is one token"
        ));
    } else {
        e = e.with_help("name one of the pieces, e.g. the first");
    }
    Err(e)
}

/// `LogitLens [for]`: what the residual reads as after each layer (final norm + head),
/// and the FOR token's trajectory when one is given.
pub(crate) fn logit_lens(cx: &mut Cx<'_>, input: Datum, target: Option<&str>) -> Result<Datum> {
    let Datum::Trace {
        trace, decompose, ..
    } = input
    else {
        return Err(wrong_input("LogitLens", &input));
    };
    let exec = cx.executor()?;
    let tok = cx.tokenizer()?;
    let target = target.map(|t| single_token(&tok, t, "FOR")).transpose()?;
    let lens = lens::logit_lens(&exec, &trace, target)?;
    Ok(Datum::Trace {
        trace,
        lens: Some(lens),
        decompose,
    })
}

/// `Decompose attn/ffn`: the rows gain the delta norms, residual norm and attention share.
pub(crate) fn decompose(input: Datum) -> Result<Datum> {
    match input {
        Datum::Trace { trace, lens, .. } => Ok(Datum::Trace {
            trace,
            lens,
            decompose: true,
        }),
        other => Err(wrong_input("Decompose", &other)),
    }
}

/// `SaveTrace "path"`: `.svg` draws the logit-lens heatmap, any other name writes a
/// `.trace` file; the trace passes through.
pub(crate) fn save(
    cx: &mut Cx<'_>,
    input: Datum,
    path: &str,
    prompt: &str,
    target: Option<&str>,
) -> Result<Datum> {
    let Datum::Trace {
        trace,
        lens,
        decompose,
    } = input
    else {
        return Err(wrong_input("SaveTrace", &input));
    };
    let text = cx.token_texts();
    save_to(cx, prompt, target, &trace, lens.as_ref(), path, &text)?;
    Ok(Datum::Trace {
        trace,
        lens,
        decompose,
    })
}

fn opt(v: Option<f64>) -> Value {
    v.map_or(Value::Null, Value::Float)
}

/// What TRACE's rows show (the `Rows` root's [`lql_planner::RowShape::Trace`]).
pub(crate) struct Shown<'a> {
    /// The layers with a row (the embedding's too when layer 0 is shown).
    pub layers: LayerRange,
    /// FOR's token: its rank and probability at each stage.
    pub target: Option<&'a str>,
    /// ALL: a position column first.
    pub positions: Positions,
}

/// TRACE's rows (see the module doc).
pub(crate) fn rows(
    cx: &mut Cx<'_>,
    input: Datum,
    columns: Vec<Column>,
    shown: Shown<'_>,
) -> Result<Rows> {
    let Shown {
        layers,
        target,
        positions,
    } = shown;
    let Datum::Trace {
        trace: tr,
        lens,
        decompose,
    } = input
    else {
        return Err(wrong_input("Rows", &input));
    };
    let exec = cx.executor()?;
    let tok = cx.tokenizer()?;
    let target = target.map(|t| single_token(&tok, t, "FOR")).transpose()?;
    let text = |id: u32| tok.token_text(id).unwrap_or_else(|| format!("<{id}>"));
    let need_lens = || Error::internal("TRACE rows need the logit lens");
    let mut rows = Rows::new(columns);
    let d = tr.hidden;
    let show = |stage: usize| {
        if stage == 0 {
            layers.first == 0
        } else {
            layers.contains(stage - 1)
        }
    };
    for (slot, &pos) in tr.positions.iter().enumerate() {
        cx.check_cancel()?;
        let trajectory = match target {
            Some(t) => {
                let l = lens.as_ref().ok_or_else(need_lens)?;
                Some(lens::target_trajectory(&exec, &tr, l, t, slot)?)
            }
            None => None,
        };
        for stage in 0..=tr.n_layers() {
            if !show(stage) {
                continue;
            }
            let mut row = Vec::new();
            if positions == Positions::All {
                row.push(Value::from(pos));
            }
            // The embedding row has no layer: NULL keeps the column an integer.
            row.push(if stage == 0 {
                Value::Null
            } else {
                Value::from(stage - 1)
            });
            let layer = (stage > 0).then(|| &tr.layers[stage - 1]);
            let norm_of = |m: fn(&lql_exec::trace::LayerCapture) -> &Vec<f32>| {
                layer.map(|l| lens::norm(Trace::row(m(l), slot, d)))
            };
            let attn_norm = norm_of(|l| &l.attn_delta);
            let ffn_norm = norm_of(|l| &l.ffn_delta);
            if let Some(tj) = &trajectory {
                let s = &tj.steps[stage];
                row.push(Value::from(s.rank));
                row.push(Value::from(s.prob));
                row.push(opt(s.attn));
                row.push(opt(s.ffn));
                row.push(Value::Float(s.total));
                row.push(match (s.attn, s.ffn) {
                    (Some(a), Some(f)) => Value::from(lens::who(a, f)),
                    _ => Value::Null,
                });
            } else if !decompose {
                let cell = lens.as_ref().ok_or_else(need_lens)?.cell(stage, slot);
                row.push(Value::from(text(cell.top_id)));
                row.push(Value::from(cell.top_id));
                row.push(Value::from(cell.top_prob));
                row.push(opt(attn_norm));
                row.push(opt(ffn_norm));
            }
            if decompose {
                let resid = lens::norm(lens::stage_residual(&tr, stage, slot));
                row.push(opt(attn_norm));
                row.push(opt(ffn_norm));
                row.push(Value::Float(resid));
                row.push(match (attn_norm, ffn_norm) {
                    (Some(a), Some(f)) if a + f > 0.0 => Value::Float(a / (a + f)),
                    (Some(_), Some(_)) => Value::Float(0.0),
                    _ => Value::Null,
                });
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

fn save_to(
    cx: &mut Cx<'_>,
    prompt: &str,
    target: Option<&str>,
    tr: &Trace,
    lens: Option<&LogitLens>,
    path: &str,
    text: &dyn Fn(u32) -> String,
) -> Result<()> {
    super::protect::refuse_overwrite(cx, path, "TRACE … SAVE", &[])?;
    let p = Path::new(path);
    if path.to_ascii_lowercase().ends_with(".svg") {
        let lens = lens.ok_or_else(|| Error::internal("lens not computed for SVG"))?;
        let labels: Vec<String> = tr
            .positions
            .iter()
            .map(|&i| format!("{i}:{}", text(tr.tokens[i])))
            .collect();
        let title = format!("logit lens: {:?}", prompt);
        trace::write_heatmap_svg(p, lens, text, &labels, &title).map_err(Error::from)
    } else {
        let b = cx.bound()?;
        let meta = serde_json::json!({
            "prompt": prompt,
            "model": b.name,
            "target": target,
            "norm_eps": b.model().surface.norm_eps,
            "written_by": "lql TRACE",
        });
        TraceFile::from_trace(tr, meta).save(p).map_err(Error::from)
    }
}
