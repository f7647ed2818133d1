//! The FFN block of a decoder layer, on the normed residual: either the dense gated FFN
//! (`down · act(gate · h) * (up · h)`) or a bank programme — the router scores every
//! expert, the plan's selection picks `n_used` with weights, each picked expert runs the
//! gated FFN on its own matrices read in place from the stacked 3-D operands (only the
//! experts some position picked are computed, over the positions that picked them), an
//! optional shared expert runs on every position (scaled by its sigmoid gate), and the
//! weighted sum is the delta. The forward pass calls [`run`] once per layer and adds the
//! delta to the residual; an observer reads what [`FfnBuffers`] kept.

use lql_storage::model::{OperandKey, OperandSource};
use lql_storage::surface::{Activation, ExpertSelection};

use crate::backend::Backend;
use crate::block::{add_bias_rows, view};
use crate::error::Result;
use crate::kernels::{axpy, dot, exp};
use crate::observer::Route;
use std::ops::Range;

use crate::overlay;
use crate::plan::{expert, BankPlan, FfnPlan, LayerPlan};
use lql_storage::overlay::LayerOverlay;

/// Scratch space of the FFN block, reused across layers of one pass, and what an observer
/// may read after [`run`].
pub(crate) struct FfnBuffers {
    gate: Vec<f32>,
    up: Vec<f32>,
    gate_pre: Vec<f32>,
    /// A bank's expert inputs and outputs, gathered per expert.
    xs: Vec<f32>,
    ys: Vec<f32>,
    /// Router logits `[n × n_experts]`.
    logits: Vec<f32>,
    /// Width of the observed gate/activation rows: the FFN width for a dense FFN, 0 for a
    /// bank (its routes are kept instead).
    width: usize,
    /// With an observer: the router's choices of the last bank run.
    pub routes: Vec<Route>,
    /// The effective state's added features of the last run (gate pre-activations and
    /// activations, for observers; empty without an overlay).
    pub added: overlay::Added,
}

impl FfnBuffers {
    /// Buffers for `n` positions of a dense FFN `ff` wide (a bank grows them as needed).
    pub fn new(n: usize, ff: usize) -> Self {
        FfnBuffers {
            gate: vec![0.0; n * ff],
            up: vec![0.0; n * ff],
            gate_pre: Vec::new(),
            xs: Vec::new(),
            ys: Vec::new(),
            logits: Vec::new(),
            width: ff,
            routes: Vec::new(),
            added: overlay::Added::default(),
        }
    }

    /// Width of [`FfnBuffers::observed_gate`]'s rows.
    pub fn observed_width(&self) -> usize {
        self.width
    }

    /// The gate pre-activations `[n × width]` of the last dense run kept for an observer.
    pub fn observed_gate(&self) -> &[f32] {
        if self.width == 0 {
            &[]
        } else {
            &self.gate_pre
        }
    }

    /// The activations `act(gate) * up` `[n × width]` of the last dense run.
    pub fn observed_activation(&self) -> &[f32] {
        if self.width == 0 {
            &[]
        } else {
            &self.gate
        }
    }
}

/// Everything the FFN block reads besides its input.
pub(crate) struct FfnCtx<'a> {
    pub source: &'a dyn OperandSource,
    pub backend: &'a dyn Backend,
    pub activation: Activation,
    /// Row ranges and the state each takes its overlay from (a batched step of several
    /// edited states); empty: every row takes `source`'s.
    pub rows: &'a [(Range<usize>, &'a dyn OperandSource)],
}

/// Each row range and its overlay of one layer.
type Overlays<'a> = Vec<(Range<usize>, Option<&'a LayerOverlay>)>;

/// The FFN block of layer `lp` over `n` normed rows `h` (`[n × hidden]`), with the
/// overlay's feature scales: writes its output into `out` (`[n × hidden]`); the overlay's
/// added features are a step of their own ([`run_added`]). `observe` (the first position's
/// absolute index, when an observer is attached) keeps the gate pre-activations of a dense
/// FFN and the routes of a bank in `buf`.
pub(crate) fn run(
    cx: &FfnCtx<'_>,
    lp: &LayerPlan,
    h: &[f32],
    n: usize,
    buf: &mut FfnBuffers,
    observe: Option<usize>,
    out: &mut [f32],
) -> Result<()> {
    // The effective state's overlay of this layer (its feature scales), per row range when
    // the rows belong to several states.
    let ovs: Overlays<'_> = if cx.rows.is_empty() {
        vec![(0..n, cx.source.ffn_overlay(lp.index))]
    } else {
        cx.rows
            .iter()
            .map(|(r, src)| (r.clone(), src.ffn_overlay(lp.index)))
            .collect()
    };
    match &lp.ffn {
        FfnPlan::Dense {
            gate,
            up,
            down,
            gate_bias,
            up_bias,
        } => dense(
            cx,
            [*gate, *up, *down],
            [gate_bias.as_deref(), up_bias.as_deref()],
            &ovs,
            h,
            n,
            buf,
            observe.is_some(),
            out,
        )?,
        FfnPlan::Bank(b) => bank(cx, b, h, n, buf, observe, out)?,
        FfnPlan::Mlp {
            up,
            down,
            up_bias,
            down_bias,
        } => mlp(
            cx,
            [*up, *down],
            [up_bias.as_deref(), down_bias.as_deref()],
            &ovs,
            h,
            n,
            buf,
            observe.is_some(),
            out,
        )?,
    }
    Ok(())
}

/// The effective state's added features of layer `lp` over the FFN input `h` (`n` rows),
/// added to `out` ([`crate::program::Step::Added`]); their activations are kept in `buf`
/// for observers when the rows have one state.
pub(crate) fn run_added(
    cx: &FfnCtx<'_>,
    lp: &LayerPlan,
    h: &[f32],
    n: usize,
    buf: &mut FfnBuffers,
    out: &mut [f32],
) {
    buf.added = if cx.rows.is_empty() {
        overlay::add_features(cx.source.ffn_overlay(lp.index), cx.activation, h, out)
    } else {
        let d = h.len() / n.max(1);
        for (r, src) in cx.rows {
            let rows = r.start * d..r.end * d;
            overlay::add_features(
                src.ffn_overlay(lp.index),
                cx.activation,
                &h[rows.clone()],
                &mut out[rows],
            );
        }
        overlay::Added::default()
    };
}

/// The dense gated FFN.
#[allow(clippy::too_many_arguments)]
fn dense(
    cx: &FfnCtx<'_>,
    [gate, up, down]: [OperandKey; 3],
    [gate_bias, up_bias]: [Option<&[f32]>; 2],
    ovs: &Overlays<'_>,
    h: &[f32],
    n: usize,
    buf: &mut FfnBuffers,
    keep_pre: bool,
    out: &mut [f32],
) -> Result<()> {
    let be = cx.backend;
    let (wg, wu) = (view(cx.source, gate)?, view(cx.source, up)?);
    be.matmul_group(&[wg, wu], h, n, &mut [&mut buf.gate, &mut buf.up])?;
    add_bias_rows(&mut buf.gate, gate_bias);
    add_bias_rows(&mut buf.up, up_bias);
    activate_and_down(cx, ovs, buf, keep_pre, down, n, out, |b| {
        be.glu(cx.activation, &mut b.gate, &b.up)
    })
}

/// What every dense FFN does once its feature pre-activations are in `buf.gate`: the
/// overlay's gate scales, a copy for observers, `activate`, the overlay's activation
/// scales, and the down projection into `out`.
#[allow(clippy::too_many_arguments)]
fn activate_and_down(
    cx: &FfnCtx<'_>,
    ovs: &Overlays<'_>,
    buf: &mut FfnBuffers,
    keep_pre: bool,
    down: OperandKey,
    n: usize,
    out: &mut [f32],
    activate: impl FnOnce(&mut FfnBuffers),
) -> Result<()> {
    let w = buf.width;
    for (r, ov) in ovs {
        overlay::scale_gate(*ov, &mut buf.gate[r.start * w..r.end * w], w);
    }
    if keep_pre {
        buf.gate_pre.clear();
        buf.gate_pre.extend_from_slice(&buf.gate);
    }
    activate(buf);
    for (r, ov) in ovs {
        overlay::scale_activation(*ov, &mut buf.gate[r.start * w..r.end * w], w);
    }
    cx.backend
        .matmul(&view(cx.source, down)?, &buf.gate, n, out)
}

/// The ungated MLP: `down · act(up · h + b_up) + b_down`; its features are the up rows
/// (what observers read as the gate pre-activations).
#[allow(clippy::too_many_arguments)]
fn mlp(
    cx: &FfnCtx<'_>,
    [up, down]: [OperandKey; 2],
    [up_bias, down_bias]: [Option<&[f32]>; 2],
    ovs: &Overlays<'_>,
    h: &[f32],
    n: usize,
    buf: &mut FfnBuffers,
    keep_pre: bool,
    out: &mut [f32],
) -> Result<()> {
    let be = cx.backend;
    be.matmul(&view(cx.source, up)?, h, n, &mut buf.gate)?;
    add_bias_rows(&mut buf.gate, up_bias);
    activate_and_down(cx, ovs, buf, keep_pre, down, n, out, |b| {
        crate::kernels::activate(cx.activation, &mut b.gate)
    })?;
    add_bias_rows(out, down_bias);
    Ok(())
}

/// Pick `k` experts from router logits `z` with weights, appending `(expert, weight)` in
/// descending order of the selection score (ties: the lower expert first).
pub fn select(sel: ExpertSelection, z: &[f32], k: usize, out: &mut Vec<(usize, f32)>) {
    let score: Vec<f32> = match sel {
        ExpertSelection::TopKSoftmax => z.to_vec(),
        ExpertSelection::SoftmaxTopK => {
            let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = z.iter().map(|&v| exp(v - m)).collect();
            let sum: f32 = e.iter().sum();
            e.into_iter().map(|v| v / sum).collect()
        }
        ExpertSelection::SigmoidTopKNorm => z.iter().map(|&v| 1.0 / (1.0 + exp(-v))).collect(),
    };
    let mut idx: Vec<usize> = (0..z.len()).collect();
    idx.sort_by(|&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
    idx.truncate(k);
    let start = out.len();
    match sel {
        ExpertSelection::TopKSoftmax => {
            let m = score[idx[0]];
            let e: Vec<f32> = idx.iter().map(|&i| exp(score[i] - m)).collect();
            let sum: f32 = e.iter().sum();
            out.extend(idx.iter().zip(e).map(|(&i, v)| (i, v / sum)));
        }
        ExpertSelection::SoftmaxTopK => out.extend(idx.iter().map(|&i| (i, score[i]))),
        ExpertSelection::SigmoidTopKNorm => {
            let sum: f32 = idx.iter().map(|&i| score[i]).sum();
            out.extend(idx.iter().map(|&i| (i, score[i] / sum)));
        }
    }
    debug_assert_eq!(out.len() - start, k);
}

/// The bank programme.
fn bank(
    cx: &FfnCtx<'_>,
    b: &BankPlan,
    h: &[f32],
    n: usize,
    buf: &mut FfnBuffers,
    observe: Option<usize>,
    out: &mut [f32],
) -> Result<()> {
    let be = cx.backend;
    let d = out.len() / n.max(1);
    let (ne, k, ef) = (b.n_experts, b.n_used, b.expert_ffn);
    buf.width = 0;
    buf.routes.clear();

    // Router and selection.
    buf.logits.resize(n * ne, 0.0);
    be.matmul(&view(cx.source, b.router)?, h, n, &mut buf.logits)?;
    let mut chosen: Vec<(usize, f32)> = Vec::with_capacity(n * k);
    for t in 0..n {
        select(
            b.selection,
            &buf.logits[t * ne..(t + 1) * ne],
            k,
            &mut chosen,
        );
    }
    if let Some(p0) = observe {
        buf.routes
            .extend(chosen.iter().enumerate().map(|(i, &(e, w))| Route {
                position: p0 + i / k,
                expert: e,
                weight: w,
            }));
    }

    // Routed experts: each picked expert once, over the positions that picked it.
    out.fill(0.0);
    let (wg, wu, wd) = (
        view(cx.source, b.gate)?,
        view(cx.source, b.up)?,
        view(cx.source, b.down)?,
    );
    let (gu_shape, d_shape) = ([d, ef], [ef, d]);
    let mut users: Vec<(usize, f32)> = Vec::with_capacity(n);
    for e in 0..ne {
        users.clear();
        users.extend(
            chosen
                .iter()
                .enumerate()
                .filter(|(_, &(ce, _))| ce == e)
                .map(|(i, &(_, w))| (i / k, w)),
        );
        if users.is_empty() {
            continue;
        }
        let m = users.len();
        buf.xs.clear();
        for &(t, _) in &users {
            buf.xs.extend_from_slice(&h[t * d..(t + 1) * d]);
        }
        buf.gate.resize(m * ef, 0.0);
        buf.up.resize(m * ef, 0.0);
        buf.ys.resize(m * d, 0.0);
        let (g, u) = (expert(&wg, &gu_shape, e)?, expert(&wu, &gu_shape, e)?);
        let dv = expert(&wd, &d_shape, e)?;
        // Only this expert's rows are read: counted at the seam (EXPLAIN ANALYZE's read=).
        for part in [&g, &u, &dv] {
            cx.source.record_read(part.dtype, part.bytes.len() as u64);
        }
        be.matmul_group(
            &[g, u],
            &buf.xs,
            m,
            &mut [&mut buf.gate[..m * ef], &mut buf.up[..m * ef]],
        )?;
        be.glu(cx.activation, &mut buf.gate[..m * ef], &buf.up[..m * ef]);
        be.matmul(&dv, &buf.gate[..m * ef], m, &mut buf.ys[..m * d])?;
        for (i, &(t, w)) in users.iter().enumerate() {
            axpy(w, &buf.ys[i * d..(i + 1) * d], &mut out[t * d..(t + 1) * d]);
        }
    }

    // The shared expert.
    if let Some(sh) = &b.shared {
        let sf = sh.ffn;
        buf.gate.resize(n * sf, 0.0);
        buf.up.resize(n * sf, 0.0);
        buf.ys.resize(n * d, 0.0);
        let (g, u) = (view(cx.source, sh.gate)?, view(cx.source, sh.up)?);
        be.matmul_group(
            &[g, u],
            h,
            n,
            &mut [&mut buf.gate[..n * sf], &mut buf.up[..n * sf]],
        )?;
        be.glu(cx.activation, &mut buf.gate[..n * sf], &buf.up[..n * sf]);
        be.matmul(
            &view(cx.source, sh.down)?,
            &buf.gate[..n * sf],
            n,
            &mut buf.ys[..n * d],
        )?;
        for t in 0..n {
            let w = match &sh.gate_inp {
                Some(gw) => 1.0 / (1.0 + exp(-dot(gw, &h[t * d..(t + 1) * d]))),
                None => 1.0,
            };
            axpy(w, &buf.ys[t * d..(t + 1) * d], &mut out[t * d..(t + 1) * d]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(sel: ExpertSelection, z: &[f32], k: usize) -> Vec<(usize, f32)> {
        let mut out = Vec::new();
        select(sel, z, k, &mut out);
        out
    }

    #[test]
    fn selections_weigh_as_their_definitions_say() {
        let z = [0.5f32, 2.0, -1.0, 1.0];
        let t = pick(ExpertSelection::TopKSoftmax, &z, 2);
        assert_eq!((t[0].0, t[1].0), (1, 3));
        let w1 = 1.0 / (1.0 + (-1.0f32).exp());
        assert!((t[0].1 - w1).abs() < 1e-6 && (t[0].1 + t[1].1 - 1.0).abs() < 1e-6);

        let s = pick(ExpertSelection::SoftmaxTopK, &z, 2);
        let sum: f32 = z.iter().map(|v| v.exp()).sum();
        assert_eq!((s[0].0, s[1].0), (1, 3));
        assert!((s[0].1 - 2f32.exp() / sum).abs() < 1e-6);
        assert!((s[1].1 - 1f32.exp() / sum).abs() < 1e-6);

        let g = pick(ExpertSelection::SigmoidTopKNorm, &z, 3);
        let sig = |v: f32| 1.0 / (1.0 + (-v).exp());
        let tot = sig(2.0) + sig(1.0) + sig(0.5);
        assert_eq!(g.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 3, 0]);
        assert!((g[2].1 - sig(0.5) / tot).abs() < 1e-6);

        // Ties go to the lower expert.
        let t = pick(ExpertSelection::TopKSoftmax, &[1.0, 1.0, 1.0], 1);
        assert_eq!(t, vec![(0, 1.0)]);
    }
}
