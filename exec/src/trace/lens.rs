//! Reading a [`Trace`]: the logit lens (each layer's residual through the final norm and
//! the head), the answer trajectory of one token (its rank and probability per layer and
//! the direct logit contributions of the attention and FFN deltas), and the decomposition
//! (delta norms and the attention share).
//!
//! Stages are numbered `0 ..= n_layers`: stage 0 is the embedding, stage `l + 1` the
//! residual after layer `l`.
//!
//! Direct logit contribution of a vector `v` to token `t` at a position whose final
//! residual is `x_L`:
//!
//! ```text
//!   c(v) = Σ_i  w_i · v_i · u_t,i  /  rms(x_L),   rms(x) = sqrt(mean(x²) + eps)
//! ```
//!
//! with `w` the final norm's weight and `u_t` the token's unembedding row. Because
//! `x_L = emb + Σ_l (attn_l + ffn_l)` and the final logit is `(w ⊙ x_L / rms(x_L)) · u_t`,
//! the embedding's contribution plus every layer's attention and FFN contributions add up to
//! the final logit exactly (up to float rounding).

use lql_storage::model::TensorView;

use crate::backend::encoded;
use crate::session::Executor;

use super::capture::Trace;
use crate::error::{ExecError, Result};

/// The logit-lens reading of one (stage, kept position).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LensCell {
    pub top_id: u32,
    pub top_prob: f32,
    pub top_logit: f32,
    /// `(rank (1-based), prob, logit)` of the target token, when one was given.
    pub target: Option<(usize, f32, f32)>,
}

/// The logit lens of a trace: `stages × kept positions` cells.
#[derive(Debug, Clone, PartialEq)]
pub struct LogitLens {
    /// `n_layers + 1` (the embedding, then each layer).
    pub stages: usize,
    /// Kept positions (absolute), the column order of `cells`.
    pub positions: Vec<usize>,
    /// Row-major `[stage][slot]`.
    pub cells: Vec<LensCell>,
}

impl LogitLens {
    pub fn cell(&self, stage: usize, slot: usize) -> &LensCell {
        &self.cells[stage * self.positions.len() + slot]
    }
}

/// The residual (or embedding) row of `stage` at kept `slot`.
pub fn stage_residual(trace: &Trace, stage: usize, slot: usize) -> &[f32] {
    let d = trace.hidden;
    if stage == 0 {
        Trace::row(&trace.embedding, slot, d)
    } else {
        Trace::row(&trace.layers[stage - 1].residual, slot, d)
    }
}

fn head_view(exec: &Executor) -> Result<TensorView<'_>> {
    exec.source()
        .view(exec.plan().head)
        .ok_or_else(|| ExecError::MissingOperand {
            operand: exec.plan().head.role.name(),
            layer: None,
        })
}

/// Logit lens of every stage at every kept position; with `target`, also its rank,
/// probability and logit in each cell.
pub fn logit_lens(exec: &Executor, trace: &Trace, target: Option<u32>) -> Result<LogitLens> {
    let plan = exec.plan();
    let s = &plan.surface;
    let vocab = s.vocab;
    if let Some(t) = target {
        if t as usize >= vocab {
            return Err(ExecError::Invalid(format!(
                "token id {t} is out of range (vocabulary size {vocab})"
            )));
        }
    }
    check_shape(trace, s.hidden, s.n_layers)?;
    let head = head_view(exec)?;
    let stages = trace.n_layers() + 1;
    let d = trace.hidden;
    let k = trace.positions.len();
    let mut cells = vec![
        LensCell {
            top_id: 0,
            top_prob: 0.0,
            top_logit: 0.0,
            target: None,
        };
        stages * k
    ];
    let mut rows = vec![0.0f32; stages * d];
    let mut normed = vec![0.0f32; stages * d];
    let mut logits = vec![0.0f32; stages * vocab];
    let cancel = exec.cancel_flag();
    for slot in 0..k {
        if cancel.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(ExecError::Cancelled);
        }
        for st in 0..stages {
            rows[st * d..(st + 1) * d].copy_from_slice(stage_residual(trace, st, slot));
        }
        crate::block::final_norm(exec.backend(), plan, &rows, &mut normed);
        exec.backend().matmul(&head, &normed, stages, &mut logits)?;
        crate::block::cap_logits(plan, &mut logits);
        for st in 0..stages {
            cells[st * k + slot] = read_cell(&logits[st * vocab..(st + 1) * vocab], target);
        }
    }
    Ok(LogitLens {
        stages,
        positions: trace.positions.clone(),
        cells,
    })
}

fn read_cell(l: &[f32], target: Option<u32>) -> LensCell {
    let mut best = 0usize;
    let mut max = f32::NEG_INFINITY;
    for (i, &v) in l.iter().enumerate() {
        if v > max {
            max = v;
            best = i;
        }
    }
    let sum: f64 = l.iter().map(|&v| ((v - max) as f64).exp()).sum();
    let prob = |v: f32| (((v - max) as f64).exp() / sum) as f32;
    LensCell {
        top_id: best as u32,
        top_prob: prob(max),
        top_logit: max,
        target: target.map(|t| {
            let tv = l[t as usize];
            let rank = 1 + l.iter().filter(|&&v| v > tv).count();
            (rank, prob(tv), tv)
        }),
    }
}

fn check_shape(trace: &Trace, hidden: usize, n_layers: usize) -> Result<()> {
    let k = trace.positions.len();
    let ok = trace.hidden == hidden
        // A trace of the first layers only (a pass stopped early) has fewer.
        && trace.layers.len() <= n_layers
        && trace.embedding.len() == k * hidden
        && trace.layers.iter().all(|l| {
            l.residual.len() == k * hidden
                && l.attn_delta.len() == k * hidden
                && l.ffn_delta.len() == k * hidden
        });
    if ok {
        Ok(())
    } else {
        Err(ExecError::Invalid(format!(
            "the trace does not fit the bound model (hidden {hidden}, {n_layers} layers)"
        )))
    }
}

/// One stage of an answer trajectory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TargetStep {
    /// 0: the embedding; `l + 1`: layer `l`.
    pub stage: usize,
    pub rank: usize,
    pub prob: f32,
    /// Direct logit contribution of the layer's attention delta (None on the embedding).
    pub attn: Option<f64>,
    /// Direct logit contribution of the layer's FFN delta (None on the embedding).
    pub ffn: Option<f64>,
    /// The stage's total: `attn + ffn`, or the embedding's contribution.
    pub total: f64,
}

/// The trajectory of one token at one kept position.
#[derive(Debug, Clone, PartialEq)]
pub struct Trajectory {
    pub token: u32,
    pub position: usize,
    pub steps: Vec<TargetStep>,
    /// `rms(x_L)` of the position's final residual.
    pub final_rms: f64,
    /// Σ of every step's total: the final logit reconstructed from the contributions.
    pub contrib_sum: f64,
}

/// The unembedding row of `token` (the head's row; the embedding row when tied).
pub fn unembedding_row(exec: &Executor, token: u32) -> Result<Vec<f32>> {
    let head = head_view(exec)?;
    if token as usize >= head.rows() {
        return Err(ExecError::Invalid(format!(
            "token id {token} is out of range (vocabulary size {})",
            head.rows()
        )));
    }
    let mut u = vec![0.0f32; head.row_len()];
    encoded::decode_row(head.dtype, head.row(token as usize), &mut u)
        .map_err(ExecError::Unsupported)?;
    Ok(u)
}

/// The final norm and head toward one token, linearised at a final residual: the norm's
/// scale (1 / RMS of the residual, after centring for a LayerNorm) is held fixed, so a
/// vector's direct contribution to the token's logit is linear in it. TRACE's
/// contributions and the per-head terms read vectors through it.
#[derive(Debug, Clone)]
pub struct LogitDirection {
    /// Per dimension: `w_i · u_i / rms`.
    coef: Vec<f64>,
    /// A LayerNorm centres each vector first.
    centre: bool,
    /// What the final norm's bias adds (`b · u`; 0 without one).
    pub bias_term: f64,
    /// The final residual's RMS.
    pub rms: f64,
}

impl LogitDirection {
    /// The direction of `token` at final residual `x_final` (`[hidden]`).
    pub fn new(exec: &Executor, x_final: &[f32], token: u32) -> Result<LogitDirection> {
        let plan = exec.plan();
        let eps = plan.surface.norm_eps as f64;
        let d = x_final.len();
        let u = unembedding_row(exec, token)?;
        let layer_norm = plan.output_norm_bias.as_ref();
        let centre = layer_norm.is_some();
        let mu = if centre {
            x_final.iter().map(|&a| a as f64).sum::<f64>() / d as f64
        } else {
            0.0
        };
        let ms = x_final
            .iter()
            .map(|&v| (v as f64 - mu) * (v as f64 - mu))
            .sum::<f64>()
            / d as f64;
        let rms = (ms + eps).sqrt();
        let coef = plan
            .output_norm
            .iter()
            .zip(&u)
            .map(|(&wi, &ui)| wi as f64 * ui as f64 / rms)
            .collect();
        let bias_term = layer_norm.map_or(0.0, |b| {
            b.iter()
                .zip(&u)
                .map(|(&bi, &ui)| bi as f64 * ui as f64)
                .sum()
        });
        Ok(LogitDirection {
            coef,
            centre,
            bias_term,
            rms,
        })
    }

    /// The direct contribution of `v` (`[hidden]`) to the token's logit.
    pub fn apply(&self, v: &[f32]) -> f64 {
        let wide: Vec<f64> = v.iter().map(|&a| a as f64).collect();
        self.apply_f64(&wide)
    }

    /// [`LogitDirection::apply`] of a vector held in f64.
    pub fn apply_f64(&self, v: &[f64]) -> f64 {
        let m = if self.centre {
            v.iter().sum::<f64>() / v.len() as f64
        } else {
            0.0
        };
        v.iter().zip(&self.coef).map(|(&a, &b)| (a - m) * b).sum()
    }
}

/// The answer trajectory of `token` at kept `slot`, from a lens computed with that target.
pub fn target_trajectory(
    exec: &Executor,
    trace: &Trace,
    lens: &LogitLens,
    token: u32,
    slot: usize,
) -> Result<Trajectory> {
    let d = trace.hidden;
    let x_final = trace
        .final_residual(slot)
        .ok_or_else(|| ExecError::Invalid(format!("no kept position at slot {slot}")))?;
    let dir = LogitDirection::new(exec, x_final, token)?;
    let c = |v: &[f32]| dir.apply(v);
    let bias_term = dir.bias_term;
    let rms = dir.rms;
    let mut steps = Vec::with_capacity(lens.stages);
    for st in 0..lens.stages {
        let cell = lens.cell(st, slot);
        let (rank, prob, _) = cell.target.ok_or_else(|| {
            ExecError::Internal("the lens was computed without the target".into())
        })?;
        let (attn, ffn, total) = if st == 0 {
            let e = c(Trace::row(&trace.embedding, slot, d)) + bias_term;
            (None, None, e)
        } else {
            let l = &trace.layers[st - 1];
            let a = c(Trace::row(&l.attn_delta, slot, d));
            let f = c(Trace::row(&l.ffn_delta, slot, d));
            (Some(a), Some(f), a + f)
        };
        steps.push(TargetStep {
            stage: st,
            rank,
            prob,
            attn,
            ffn,
            total,
        });
    }
    let contrib_sum = steps.iter().map(|s| s.total).sum();
    Ok(Trajectory {
        token,
        position: trace.positions[slot],
        steps,
        final_rms: rms,
        contrib_sum,
    })
}

/// Threshold (in logits) below which a contribution counts as negligible in [`who`].
pub const WHO_THRESHOLD: f64 = 0.5;

/// Which block moved the token's logit at a layer, from its attention and FFN
/// contributions `a` and `f`:
/// - `~` when both are within ±0.5;
/// - `both ↑` / `both ↓` when both pass the threshold in the same direction;
/// - otherwise the block with the larger magnitude among those past the threshold, with
///   its direction: `attn ↑`, `attn ↓`, `ffn ↑`, `ffn ↓`.
pub fn who(a: f64, f: f64) -> &'static str {
    let t = WHO_THRESHOLD;
    let (ab, fb) = (a.abs() >= t, f.abs() >= t);
    match (ab, fb) {
        (false, false) => "~",
        (true, true) if a > 0.0 && f > 0.0 => "both ↑",
        (true, true) if a < 0.0 && f < 0.0 => "both ↓",
        _ => {
            let attn_wins = ab && (!fb || a.abs() >= f.abs());
            match (attn_wins, if attn_wins { a } else { f } > 0.0) {
                (true, true) => "attn ↑",
                (true, false) => "attn ↓",
                (false, true) => "ffn ↑",
                (false, false) => "ffn ↓",
            }
        }
    }
}

/// Norms of one layer at one kept position.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decomposition {
    pub layer: usize,
    pub position: usize,
    pub attn_norm: f64,
    pub ffn_norm: f64,
    /// ‖residual after the layer‖.
    pub residual_norm: f64,
    /// `‖attn‖ / (‖attn‖ + ‖ffn‖)` (0 when both are 0).
    pub attn_share: f64,
}

fn l2(v: &[f32]) -> f64 {
    v.iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt()
}

/// The L2 norm of a row.
pub fn norm(v: &[f32]) -> f64 {
    l2(v)
}

/// Decomposition of every layer at every kept position, layer-major.
pub fn decompose(trace: &Trace) -> Vec<Decomposition> {
    let d = trace.hidden;
    let mut out = Vec::with_capacity(trace.layers.len() * trace.positions.len());
    for l in &trace.layers {
        for (slot, &pos) in trace.positions.iter().enumerate() {
            let a = l2(Trace::row(&l.attn_delta, slot, d));
            let f = l2(Trace::row(&l.ffn_delta, slot, d));
            let r = l2(Trace::row(&l.residual, slot, d));
            out.push(Decomposition {
                layer: l.layer,
                position: pos,
                attn_norm: a,
                ffn_norm: f,
                residual_norm: r,
                attn_share: if a + f > 0.0 { a / (a + f) } else { 0.0 },
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::who;

    #[test]
    fn who_rule() {
        assert_eq!(who(0.1, -0.2), "~");
        assert_eq!(who(1.0, 2.0), "both ↑");
        assert_eq!(who(-1.0, -0.7), "both ↓");
        assert_eq!(who(3.0, -1.0), "attn ↑");
        assert_eq!(who(0.2, -1.0), "ffn ↓");
        assert_eq!(who(-2.0, 0.1), "attn ↓");
        assert_eq!(who(1.0, -4.0), "ffn ↓");
    }
}
