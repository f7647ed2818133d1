//! Attribution patching (AtP): activation patching's grid estimated from two forward passes
//! and one backward pass instead of one run per cell.
//!
//! ```text
//!  clean run      records the cells' activations a_clean       (activation_patch::record)
//!  corrupted run  records them too, a_corrupt, and its input
//!  backward       g = ∂metric/∂a at the corrupted run, every layer and position
//!                 (grad::DenseTail::site_gradients, the gradient pass INSERT uses)
//!  cell estimate  Σ over the cell's rows and columns of (a_clean − a_corrupt) · g
//! ```
//!
//! The estimate is the first-order Taylor term of restoring the cell: exact for a metric
//! linear in the activation, close where the model is smooth between the two runs, worst
//! where one position's state decides a nonlinearity (an early subject token) — which is
//! why docs/interpretability.md reports its Pearson correlation with the exact grid. With
//! `steps` > 1 the gradient is instead averaged over runs whose input is interpolated from
//! the corrupted prompt's embedding to the clean one's, at the midpoints of `steps` equal
//! intervals (integrated gradients, as in EAP-IG): each step one more forward and backward
//! pass, the estimate exact at the first layer (completeness) and far closer where one
//! token's state is swapped.
//! The backward pass runs in f32 on decoded weights (grad.rs), the forward recordings in
//! the engine's own kernels.

use crate::activation_patch::{self as ap, Cell, Noise, Recording};
use crate::error::{ExecError, Result};
use crate::grad::{DenseTail, LayerGradients};
use crate::observer::Site;
use crate::session::{Executor, Logits};

/// The corrupted run's metric inputs and every cell's estimated change of the metric.
pub struct Attribution {
    /// The corrupted run's last-position logits (the engine's pass).
    pub corrupt_logits: Logits,
    /// Per cell, in the order given: the metric's estimated change when the cell is
    /// restored from the clean run.
    pub estimates: Vec<f64>,
}

/// Estimates, for each of `cells`, how restoring it from `clean` (recorded over a prompt of
/// `ids`'s length at every site the cells name, and at the first layer's `resid_pre`)
/// changes the metric of the corrupted run of `ids` (with `noise`); `dmetric` gives
/// ∂metric/∂logits from a pass's last-position logits. `steps` 0 or 1 takes the gradient at
/// the corrupted run; more average it along the interpolation from the corrupted input to
/// the clean one.
pub fn attribute(
    exec: &Executor,
    ids: &[u32],
    noise: Option<&Noise>,
    clean: &Recording,
    cells: &[Cell],
    steps: usize,
    dmetric: &dyn Fn(&[f32]) -> Vec<f32>,
) -> Result<Attribution> {
    let plan = exec.plan();
    let s = &plan.surface;
    let mut sites: Vec<Site> = cells.iter().map(|c| c.site).collect();
    sites.push(Site::ResidPre);
    sites.sort();
    sites.dedup();
    let (corrupt_logits, corrupt) = ap::record(exec, ids, noise, &sites)?;
    let start = corrupt
        .rows(Site::ResidPre, plan.stage.first)
        .ok_or_else(|| ExecError::Internal("the corrupted run recorded no input".into()))?;
    let source = exec.source();
    let tail = DenseTail::new(source.as_ref(), plan, plan.stage.first)?;
    let grads = if steps <= 1 {
        tail.site_gradients(source.as_ref(), start, dmetric)?
    } else {
        let goal = clean
            .rows(Site::ResidPre, plan.stage.first)
            .filter(|g| g.len() == start.len())
            .ok_or_else(|| {
                ExecError::Internal("the clean run recorded no input to interpolate to".into())
            })?;
        let mut sum: Option<Vec<LayerGradients>> = None;
        let mut x = vec![0.0f32; start.len()];
        for k in 0..steps {
            let alpha = (k as f32 + 0.5) / steps as f32;
            for ((xi, a), b) in x.iter_mut().zip(start).zip(goal) {
                *xi = a + alpha * (b - a);
            }
            let g = tail.site_gradients(source.as_ref(), &x, dmetric)?;
            match sum.as_mut() {
                None => sum = Some(g),
                Some(s) => s.iter_mut().zip(&g).for_each(|(s, g)| s.add(g)),
            }
        }
        let mut g = sum.unwrap_or_default();
        let inv = 1.0 / steps as f32;
        g.iter_mut().for_each(|l| l.scale(inv));
        g
    };
    let n = ids.len();
    let head_dim = s.head_dim;
    let estimates = cells
        .iter()
        .map(|&cell| {
            // A window's estimate is the sum of its layers' (first order).
            cell.layers(s.n_layers)
                .map(|layer| estimate(&grads, clean, &corrupt, cell, layer, n, head_dim))
                .sum::<Result<f64>>()
        })
        .collect::<Result<Vec<f64>>>()?;
    Ok(Attribution {
        corrupt_logits,
        estimates,
    })
}

/// One layer's term of a cell's estimate: Σ (clean − corrupted) · ∂metric/∂activation over
/// the cell's rows and columns at `layer`.
fn estimate(
    grads: &[LayerGradients],
    clean: &Recording,
    corrupt: &Recording,
    cell: Cell,
    layer: usize,
    n: usize,
    head_dim: usize,
) -> Result<f64> {
    let g = grads
        .iter()
        .find(|g| g.layer == layer)
        .ok_or_else(|| ExecError::Internal(format!("no gradient at layer {layer}")))?;
    let g = gradient_at(g, cell.site);
    let (a, b) = match (clean.rows(cell.site, layer), corrupt.rows(cell.site, layer)) {
        (Some(a), Some(b)) if a.len() == b.len() && a.len() == g.len() && n > 0 => (a, b),
        _ => {
            return Err(ExecError::InvalidOption(format!(
                "no {} recorded at layer {layer} for both runs",
                cell.site.name(),
            )))
        }
    };
    let width = a.len() / n;
    let cols = match cell.head {
        Some(h) => h * head_dim..(h + 1) * head_dim,
        None => 0..width,
    };
    let mut sum = 0.0f64;
    for p in 0..n {
        if cell.position.is_some_and(|q| q != p) {
            continue;
        }
        for c in cols.clone() {
            let i = p * width + c;
            sum += (a[i] as f64 - b[i] as f64) * g[i] as f64;
        }
    }
    Ok(sum)
}

/// The gradient of a site: the attention sub-block's output (after its post-norm, where
/// the block has one) adds to the residual stream it leaves (resid_mid; with a parallel
/// residual only the FFN's add follows, so it equals resid_post), the FFN's to the stream
/// leaving the layer.
fn gradient_at(g: &LayerGradients, site: Site) -> &[f32] {
    match site {
        Site::ResidPre => &g.resid_pre,
        Site::HeadOutputs => &g.head_outputs,
        Site::AttnOut | Site::ResidMid => &g.resid_mid,
        Site::MlpOut => &g.resid_post,
    }
}
