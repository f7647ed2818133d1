//! Steering statements: `SET STEERING = spec | OFF` (the connection's), `WITH STEERING spec
//! statement` (one statement's), `SHOW STEERING`, `SAVE STEERING "file.gguf"`.
//!
//! A spec becomes an [`lql_exec::steer::Steering`] here: a llama.cpp control-vector file
//! read and checked against the bound model (family, width, layers, finite values), or
//! activation addition — one pass per text over the bound model as edited (never steered),
//! the mean residual leaving each named layer of the first texts minus the second's (the
//! positions of a BOS the model adds left out). The
//! executor adds it in every pass ([`super::Cx::executor`]); nothing of the model changes,
//! so `SET STEERING = OFF` restores every logit bit for bit.

use std::path::Path;
use std::sync::Arc;

use lql_exec::steer::Steering;
use lql_exec::{LayerRecord, Observer};
use lql_planner::{SteeringPlan, SteeringPlanSource};

use super::datum::Datum;
use super::Cx;
use crate::error::{Error, Result};
use crate::rows::Rows;
use crate::value::Value;

/// Builds the steering a spec describes, for the bound model.
pub(crate) fn build(cx: &mut Cx<'_>, spec: &SteeringPlan) -> Result<Arc<Steering>> {
    let exec = cx.executor()?.with_steering(None)?;
    let surface = exec.plan().surface.clone();
    let scale = spec.scale as f32;
    let layers = spec.layers.map(|l| l.first..=l.last);
    let steering = match &spec.source {
        SteeringPlanSource::File(path) => {
            Steering::read_control_vector(&surface, path, scale, layers).map_err(|e| {
                // A file that is not a readable control vector gets the format's shape.
                let unreadable = matches!(e, lql_exec::ExecError::Storage(_));
                let e = Error::from(e);
                if unreadable {
                    e.with_help(
                        "a control vector is a GGUF made for llama.cpp (--control-vector): \
                         general.architecture = controlvector, tensors direction.N",
                    )
                } else {
                    e
                }
            })?
        }
        SteeringPlanSource::Difference { positive, negative } => {
            let range = layers.ok_or_else(|| {
                Error::internal("activation addition was bound without its layers")
            })?;
            let tok = cx.tokenizer()?;
            let residuals = |texts: &[String]| -> Result<Vec<Vec<Vec<f32>>>> {
                let mut per_text = Vec::with_capacity(texts.len());
                for t in texts {
                    cx.check_cancel()?;
                    let ids = tok.encode(t, true)?;
                    if ids.is_empty() {
                        return Err(Error::semantic(format!("{t:?} encodes to no token")));
                    }
                    // The tokens the model adds before any text (BOS) say nothing of it:
                    // their rows are left out of the mean.
                    let plain = tok.encode(t, false)?.len();
                    let skip = if ids.len() > plain && !ids[..ids.len() - plain].is_empty() {
                        ids.len() - plain
                    } else {
                        0
                    };
                    let mut keep = KeepResiduals {
                        layers: range.clone(),
                        rows: vec![Vec::new(); surface.n_layers],
                    };
                    exec.observe_layers(&ids, *range.end(), &mut keep)?;
                    let d = surface.hidden;
                    for rows in keep.rows.iter_mut().filter(|r| r.len() > skip * d) {
                        rows.drain(..skip * d);
                    }
                    per_text.push(keep.rows);
                }
                Ok(per_text)
            };
            let pos = residuals(positive)?;
            let neg = residuals(negative)?;
            let describe = |v: &[String]| {
                v.iter()
                    .map(|t| format!("{t:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut s = Steering::empty(
                &surface,
                format!("({}) MINUS ({})", describe(positive), describe(negative)),
                scale,
            );
            for l in range {
                let take = |v: &[Vec<Vec<f32>>]| v.iter().map(|t| t[l].clone()).collect::<Vec<_>>();
                let d = Steering::difference(surface.hidden, &take(&pos), &take(&neg))?;
                s.add(l, &d, scale)?;
            }
            s
        }
    };
    if steering.is_empty() {
        return Err(Error::semantic(format!(
            "the steering adds nothing: {} steers none of the layers asked for",
            steering.source
        )));
    }
    Ok(Arc::new(steering))
}

/// Keeps each chosen layer's output rows.
struct KeepResiduals {
    layers: std::ops::RangeInclusive<usize>,
    rows: Vec<Vec<f32>>,
}

impl Observer for KeepResiduals {
    fn on_layer(&mut self, r: &LayerRecord<'_>) {
        if self.layers.contains(&r.layer) {
            self.rows[r.layer].extend_from_slice(r.residual);
        }
    }
}

/// `SET STEERING = spec | OFF`: the connection's steering; the rows of SHOW STEERING.
pub(crate) fn set(cx: &mut Cx<'_>, spec: Option<&SteeringPlan>) -> Result<Datum> {
    let steering = match spec {
        Some(s) => Some(build(cx, s)?),
        None => None,
    };
    let b = cx.bound_mut()?;
    b.steering = steering;
    show(cx).map(Datum::Rows)
}

/// `SHOW STEERING`: per steered layer, the vector's norm, its source and scale (the
/// statement's steering under WITH STEERING, else the connection's).
pub(crate) fn show(cx: &mut Cx<'_>) -> Result<Rows> {
    let b = cx.bound()?;
    let mut rows = Rows::new(super::columns_of(&lql_planner::show_columns(
        lql_planner::ShowWhat::Steering,
    )));
    if let Some(s) = b.statement_steering.as_ref().or(b.steering.as_ref()) {
        for (layer, v) in s.layers() {
            let norm = v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
            rows.push(vec![
                Value::from(layer),
                Value::from(norm),
                Value::from(s.source.as_str()),
                Value::from(s.scale as f64),
            ]);
        }
    }
    Ok(rows)
}

/// `SAVE STEERING "file.gguf"`: the connection's steering as a llama.cpp control vector
/// (what is added, scale included), written atomically.
pub(crate) fn save(cx: &mut Cx<'_>, path: &str) -> Result<Datum> {
    super::protect::refuse_overwrite(cx, path, "SAVE STEERING", &[])?;
    let b = cx.bound()?;
    let s = b
        .statement_steering
        .as_ref()
        .or(b.steering.as_ref())
        .cloned()
        .ok_or_else(|| {
            Error::semantic("there is no steering to save")
                .with_help("SET STEERING = … first, or WITH STEERING … SAVE STEERING \"f.gguf\"")
        })?;
    let arch = b.model().surface.source_architecture.clone();
    let cv = s.to_control_vector(&arch)?;
    cv.write(Path::new(path))?;
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let mut rows = Rows::new(cx.result_columns());
    rows.push(vec![
        Value::from(path),
        Value::from(cv.directions.len()),
        Value::from(bytes),
    ]);
    Ok(Datum::Rows(rows))
}
