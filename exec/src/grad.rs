//! Reverse-mode gradients through the decoder layers above one layer: what an edit's value
//! optimisation needs (docs/editing.md, "The subject's value"), and attribution patching's
//! backward pass ([`crate::attribution_patch`]).
//!
//! ```text
//!  start  residual stream after layer first − 1 of each prompt   [T × hidden]
//!  x      start, with δ added at one position (the subject's last token)
//!  layers first .. n_layers (each by its steps, the FFN with the overlay in force),
//!         final norm, head (and the final softcap where the block has one)
//!  loss   Σ_prompts weight · −log p(target | prompt) at the prompt's last position
//!  grad   ∂loss/∂δ, by the chain rule back through every layer and position
//! ```
//!
//! Each layer runs its step programme ([`crate::program`], `LayerPlan::steps`), the one
//! definition of what a layer computes, with the host block's meaning of each step
//! ([`crate::block::Block::run`]); the forward pass keeps what each step's backward needs
//! (a [`Tape`] entry per step), and the backward pass walks the steps in reverse. Each kind
//! of step has one forward and one backward here; which steps a layer has, and in which
//! order, comes from the plan alone, so no family or norm placement is named in this file.
//! A bank of experts runs as the host's bank programme does (router, selection, the chosen
//! experts' gated FFNs, the shared expert); its backward treats each row's chosen experts
//! as fixed (the selection is piecewise constant, as in any autodiff framework) and
//! differentiates through the chosen experts, their routing weights (the selection's
//! softmax or normalisation) back into the router logits, and the shared expert and its
//! gate.
//!
//! A [`DenseTail`] holds the base operands of those layers decoded to f32 once (the head
//! too), so each step is a few GEMMs (faer) over the rows of every prompt at once; the
//! overlay (added features, gate and down scales) is read from the state passed to each
//! call, so one tail serves every state over the same base. The arithmetic is f32 on
//! decoded weights, not the quantised kernels of the forward pass: it steers an
//! optimisation whose result the engine then measures with its own pass.

use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use lql_storage::model::{OperandKey, OperandSource, TensorView};
use lql_storage::overlay::LayerOverlay;
use lql_storage::surface::{Activation, ExpertSelection, NormKind, RopePairing};

use crate::backend::{encoded, AttnRule};
use crate::block::attn_rule;
use crate::error::{ExecError, Result};
use crate::ffn::select;
use crate::kernels::{add_in_place, exp, rope_from, RopeTable};
use crate::plan::{BankPlan, FfnPlan, LayerPlan, Plan, RopeSpec};
use crate::program::{Step, Sub};

/// A norm's weights: LayerNorm with its bias, or RMSNorm (`bias` none), as
/// [`crate::block::norm`] chooses.
struct Norm {
    w: Vec<f32>,
    bias: Option<Vec<f32>>,
}

impl Norm {
    fn new(kind: NormKind, w: &[f32], bias: Option<&Vec<f32>>) -> Norm {
        Norm {
            w: w.to_vec(),
            bias: bias.filter(|_| kind == NormKind::Layer).cloned(),
        }
    }

    fn floats(&self) -> usize {
        self.w.len() + opt_len(&self.bias)
    }
}

fn opt_len(v: &Option<Vec<f32>>) -> usize {
    v.as_ref().map_or(0, Vec::len)
}

/// One layer's FFN, its matrices decoded to f32 (`[out × in]` row-major).
enum DenseFfn {
    /// `down · (act(gate · h + b_g) ⊙ (up · h + b_u))` ([`FfnPlan::Dense`]).
    Gated {
        wg: Vec<f32>,
        wu: Vec<f32>,
        wd: Vec<f32>,
        gate_bias: Option<Vec<f32>>,
        up_bias: Option<Vec<f32>>,
    },
    /// `down · act(up · h + b_u) + b_d` ([`FfnPlan::Mlp`]); its features are the up rows.
    Mlp {
        wu: Vec<f32>,
        wd: Vec<f32>,
        up_bias: Option<Vec<f32>>,
        down_bias: Option<Vec<f32>>,
    },
    /// A bank of routed experts and its optional shared expert ([`FfnPlan::Bank`]).
    Bank(BankFfn),
}

/// A bank of routed experts, decoded to f32: `router` `[n_experts × hidden]`, expert `e`'s
/// gate and up `[expert_ffn × hidden]` at `e · expert_ffn · hidden` of `wg`/`wu`, its down
/// `[hidden × expert_ffn]` at `e · hidden · expert_ffn` of `wd`.
struct BankFfn {
    router: Vec<f32>,
    wg: Vec<f32>,
    wu: Vec<f32>,
    wd: Vec<f32>,
    n_experts: usize,
    n_used: usize,
    expert_ffn: usize,
    selection: ExpertSelection,
    shared: Option<SharedFfn>,
}

/// The shared expert every row runs through: a gated FFN of width `ffn`, its output
/// scaled by `sigmoid(gate_inp · h)` where it has that gate.
struct SharedFfn {
    wg: Vec<f32>,
    wu: Vec<f32>,
    wd: Vec<f32>,
    ffn: usize,
    gate_inp: Option<Vec<f32>>,
}

impl SharedFfn {
    fn weights(&self) -> FfnWeights<'_> {
        FfnWeights::plain(&self.wg, &self.wu, &self.wd, self.ffn)
    }
}

impl BankFfn {
    fn new(source: &dyn OperandSource, b: &BankPlan) -> Result<BankFfn> {
        let shared = match &b.shared {
            Some(sh) => Some(SharedFfn {
                wg: decode(source, sh.gate)?.0,
                wu: decode(source, sh.up)?.0,
                wd: decode(source, sh.down)?.0,
                ffn: sh.ffn,
                gate_inp: sh.gate_inp.clone(),
            }),
            None => None,
        };
        Ok(BankFfn {
            router: decode(source, b.router)?.0,
            wg: decode(source, b.gate)?.0,
            wu: decode(source, b.up)?.0,
            wd: decode(source, b.down)?.0,
            n_experts: b.n_experts,
            n_used: b.n_used,
            expert_ffn: b.expert_ffn,
            selection: b.selection,
            shared,
        })
    }

    fn floats(&self) -> usize {
        let shared = self.shared.as_ref().map_or(0, |s| {
            s.wg.len() + s.wu.len() + s.wd.len() + opt_len(&s.gate_inp)
        });
        self.router.len() + self.wg.len() + self.wu.len() + self.wd.len() + shared
    }

    /// Expert `e`'s gate, up (`[expert_ffn × hidden]`) and down (`[hidden × expert_ffn]`).
    fn expert(&self, e: usize) -> (&[f32], &[f32], &[f32]) {
        let n = self.expert_ffn * (self.router.len() / self.n_experts);
        (
            &self.wg[e * n..(e + 1) * n],
            &self.wu[e * n..(e + 1) * n],
            &self.wd[e * n..(e + 1) * n],
        )
    }
}

/// One layer: its steps and the operands they read, decoded to f32 (`[out × in]`
/// row-major).
struct DenseLayer {
    index: usize,
    steps: Vec<Step>,
    attn_norm: Norm,
    ffn_norm: Norm,
    wq: Vec<f32>,
    wk: Vec<f32>,
    wv: Vec<f32>,
    wo: Vec<f32>,
    q_bias: Option<Vec<f32>>,
    k_bias: Option<Vec<f32>>,
    v_bias: Option<Vec<f32>>,
    o_bias: Option<Vec<f32>>,
    /// Q/K RMSNorm weights (one head's, or the whole projection's).
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    attn_post_norm: Option<Vec<f32>>,
    ffn_post_norm: Option<Vec<f32>>,
    ffn: DenseFfn,
    /// Which of [`DenseTail::ropes`] rotates this layer.
    rope: usize,
    rule: AttnRule,
}

impl DenseLayer {
    fn norm(&self, sub: Sub) -> &Norm {
        match sub {
            Sub::Attn => &self.attn_norm,
            Sub::Ffn => &self.ffn_norm,
        }
    }

    fn post_norm(&self, sub: Sub) -> Option<&Vec<f32>> {
        match sub {
            Sub::Attn => self.attn_post_norm.as_ref(),
            Sub::Ffn => self.ffn_post_norm.as_ref(),
        }
    }

    fn floats(&self) -> usize {
        let ffn = match &self.ffn {
            DenseFfn::Gated {
                wg,
                wu,
                wd,
                gate_bias,
                up_bias,
            } => wg.len() + wu.len() + wd.len() + opt_len(gate_bias) + opt_len(up_bias),
            DenseFfn::Mlp {
                wu,
                wd,
                up_bias,
                down_bias,
            } => wu.len() + wd.len() + opt_len(up_bias) + opt_len(down_bias),
            DenseFfn::Bank(b) => b.floats(),
        };
        self.attn_norm.floats()
            + self.ffn_norm.floats()
            + self.wq.len()
            + self.wk.len()
            + self.wv.len()
            + self.wo.len()
            + [
                &self.q_bias,
                &self.k_bias,
                &self.v_bias,
                &self.o_bias,
                &self.q_norm,
                &self.k_norm,
                &self.attn_post_norm,
                &self.ffn_post_norm,
            ]
            .into_iter()
            .map(opt_len)
            .sum::<usize>()
            + ffn
    }
}

/// The layers from `first` on, the final norm and the head, decoded to f32.
pub struct DenseTail {
    first: usize,
    layers: Vec<DenseLayer>,
    out_norm: Norm,
    head: Vec<f32>,
    hidden: usize,
    ffn: usize,
    vocab: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    eps: f32,
    /// The rotary embedding of each set of layers ([`Plan::ropes`]).
    ropes: Vec<RopeSpec>,
    pairing: RopePairing,
    activation: Activation,
    /// `cap · tanh(logit / cap)` on the logits; 0 = none.
    final_softcap: f32,
}

/// One prompt of an optimisation: its residual stream after layer `first − 1`, the
/// position δ is added at, the token its last position should give, and its weight.
#[derive(Debug, Clone)]
pub struct Segment {
    pub start: Vec<f32>,
    pub pos: usize,
    pub target: u32,
    pub weight: f32,
}

/// What one evaluation returns.
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// Σ weight · −log p(target).
    pub loss: f32,
    /// p(target) of each segment.
    pub probs: Vec<f32>,
    /// ∂loss/∂δ, `[hidden]` (empty when not asked for).
    pub grad: Vec<f32>,
    /// Gradient steps taken before it ([`optimise`]; 0 for a plain evaluation).
    pub steps: usize,
}

/// Keys and values a tail pass does not recompute ([`DenseTail::freeze`]): per layer, per
/// segment, the rows before the segment's δ position (`[pos × kv_dim]` each).
pub struct Frozen {
    kv: Vec<Vec<(Vec<f32>, Vec<f32>)>>,
}

impl Frozen {
    /// The rows of the segments `keep` (indices into the frozen segments), in that order.
    fn select(&self, keep: &[usize]) -> Frozen {
        Frozen {
            kv: self
                .kv
                .iter()
                .map(|layer| keep.iter().map(|&i| layer[i].clone()).collect())
                .collect(),
        }
    }
}

/// One value [`optimise_each`] optimises: the segments it is added to and the residual norm
/// it is measured against.
#[derive(Debug, Clone)]
pub struct Group {
    pub segs: Vec<Segment>,
    pub norm: f32,
}

/// ∂metric/∂activation at one layer, every position (`[T × width]` each): what
/// [`DenseTail::site_gradients`] returns per layer.
#[derive(Debug, Clone, Default)]
pub struct LayerGradients {
    pub layer: usize,
    /// The residual stream entering the layer.
    pub resid_pre: Vec<f32>,
    /// The attention heads' outputs before the output projection (`z`).
    pub head_outputs: Vec<f32>,
    /// The residual stream just after the attention sub-block's output is added to it
    /// (its `Residual(Attn)` step) — also the gradient of that output, which it is the sum
    /// of. In a sequential block that is the stream between attention and FFN; with a
    /// parallel residual the FFN reads the layer's input, so nothing downstream sees the
    /// stream between the two adds apart from the FFN's add, and this equals `resid_post`.
    pub resid_mid: Vec<f32>,
    /// The residual stream leaving the layer — also the gradient of the FFN's output (after
    /// its post-norm where the block has one).
    pub resid_post: Vec<f32>,
}

impl LayerGradients {
    fn parts(&mut self) -> [&mut Vec<f32>; 4] {
        [
            &mut self.resid_pre,
            &mut self.head_outputs,
            &mut self.resid_mid,
            &mut self.resid_post,
        ]
    }

    /// Adds another pass's gradients at the same layer.
    pub fn add(&mut self, other: &LayerGradients) {
        let theirs = [
            &other.resid_pre,
            &other.head_outputs,
            &other.resid_mid,
            &other.resid_post,
        ];
        for (a, b) in self.parts().into_iter().zip(theirs) {
            a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
        }
    }

    /// Multiplies every gradient by `k`.
    pub fn scale(&mut self, k: f32) {
        for a in self.parts() {
            a.iter_mut().for_each(|x| *x *= k);
        }
    }
}

/// One segment's rows in a pass: `len` rows at absolute positions `p0 ..`, from row `row`.
#[derive(Debug, Clone, Copy)]
struct Span {
    row: usize,
    len: usize,
    p0: usize,
}

/// The rows of a pass: each segment's span, the frozen keys and values before them (per
/// segment, this layer's), and the rotary tables of their positions (one per
/// [`DenseTail::ropes`] entry, row `p` at position `p`).
#[derive(Clone, Copy)]
struct Rows<'a> {
    spans: &'a [Span],
    prefix: Option<&'a [(Vec<f32>, Vec<f32>)]>,
    tables: &'a [RopeTable],
}

/// The keys and values one segment's attention reads: frozen rows before `p0`, the pass's
/// rows from there.
struct KvRows<'a> {
    prefix: Option<&'a (Vec<f32>, Vec<f32>)>,
    k: &'a [f32],
    v: &'a [f32],
    span: Span,
    kvd: usize,
}

impl KvRows<'_> {
    fn row<'b>(&'b self, m: &'b [f32], frozen: Option<&'b Vec<f32>>, j: usize) -> &'b [f32] {
        match frozen {
            Some(f) if j < self.span.p0 => &f[j * self.kvd..(j + 1) * self.kvd],
            _ => {
                let r = self.span.row + j - self.span.p0;
                &m[r * self.kvd..(r + 1) * self.kvd]
            }
        }
    }
    fn key(&self, j: usize) -> &[f32] {
        self.row(self.k, self.prefix.map(|p| &p.0), j)
    }
    fn value(&self, j: usize) -> &[f32] {
        self.row(self.v, self.prefix.map(|p| &p.1), j)
    }
}

fn decode(source: &dyn OperandSource, key: OperandKey) -> Result<(Vec<f32>, usize, usize)> {
    let v: TensorView<'_> = source.view(key).ok_or(ExecError::MissingOperand {
        operand: key.role.name(),
        layer: key.layer,
    })?;
    let (cols, rows) = (v.row_len(), v.rows());
    let mut out = vec![0.0f32; rows * cols];
    encoded::decode_rows(v.dtype, v.bytes, cols, &mut out).map_err(ExecError::Unsupported)?;
    Ok((out, rows, cols))
}

/// `y[r × out] (=|+=) x[r × inp] · W[out × inp]ᵀ`.
fn xwt(x: &[f32], w: &[f32], rows: usize, out: usize, inp: usize, y: &mut [f32], add: bool) {
    let dst = MatMut::from_row_major_slice_mut(y, rows, out);
    let lhs = MatRef::from_row_major_slice(x, rows, inp);
    let rhs = MatRef::from_row_major_slice(w, out, inp).transpose();
    let acc = if add { Accum::Add } else { Accum::Replace };
    matmul(dst, acc, lhs, rhs, 1.0f32, Par::rayon(0));
}

/// `dx[r × inp] (=|+=) dy[r × out] · W[out × inp]`.
fn xw(dy: &[f32], w: &[f32], rows: usize, out: usize, inp: usize, dx: &mut [f32], add: bool) {
    let dst = MatMut::from_row_major_slice_mut(dx, rows, inp);
    let lhs = MatRef::from_row_major_slice(dy, rows, out);
    let rhs = MatRef::from_row_major_slice(w, out, inp);
    let acc = if add { Accum::Add } else { Accum::Replace };
    matmul(dst, acc, lhs, rhs, 1.0f32, Par::rayon(0));
}

fn add_rows(m: &mut [f32], bias: Option<&Vec<f32>>) {
    if let Some(b) = bias.filter(|b| !b.is_empty()) {
        for row in m.chunks_exact_mut(b.len()) {
            add_in_place(row, b);
        }
    }
}

/// Each row of `x` (rows of `w.len()`) normalised into `out`: LayerNorm
/// `(x − mean) / sqrt(var + eps) · w + bias` with a bias, else RMSNorm
/// `x / sqrt(mean(x²) + eps) · w`; returns each row's `1 / sqrt(var + eps)` (RMSNorm:
/// `1 / sqrt(mean(x²) + eps)`).
fn norm_rows(x: &[f32], w: &[f32], bias: Option<&[f32]>, eps: f32, out: &mut [f32]) -> Vec<f32> {
    let d = w.len();
    x.chunks_exact(d)
        .zip(out.chunks_exact_mut(d))
        .map(|(xr, or)| match bias {
            Some(b) => {
                let mean = xr.iter().sum::<f32>() / d as f32;
                let var = xr.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
                let inv = 1.0 / (var + eps).sqrt();
                for (((o, xi), wi), bi) in or.iter_mut().zip(xr).zip(w).zip(b) {
                    *o = (xi - mean) * inv * wi + bi;
                }
                inv
            }
            None => {
                let ss: f32 = xr.iter().map(|v| v * v).sum::<f32>() / d as f32;
                let inv = 1.0 / (ss + eps).sqrt();
                for ((o, xi), wi) in or.iter_mut().zip(xr).zip(w) {
                    *o = xi * inv * wi;
                }
                inv
            }
        })
        .collect()
}

/// `dx += ∂norm(x)/∂x · dy`, row by row, for [`norm_rows`]'s norm (`centred`: LayerNorm).
/// With `x̂ = (x − mean) · inv` and `g = dy ⊙ w`:
/// `dx = inv · (g − mean(g) − x̂ · mean(g ⊙ x̂))`, the `mean(g)` term only when centred.
fn norm_back(x: &[f32], inv: &[f32], w: &[f32], centred: bool, dy: &[f32], dx: &mut [f32]) {
    let d = w.len();
    for (((xr, &r), dyr), dxr) in x
        .chunks_exact(d)
        .zip(inv)
        .zip(dy.chunks_exact(d))
        .zip(dx.chunks_exact_mut(d))
    {
        let mean = if centred {
            xr.iter().sum::<f32>() / d as f32
        } else {
            0.0
        };
        let (mut sg, mut sgx) = (0.0f32, 0.0f32);
        for ((g, wi), xi) in dyr.iter().zip(w).zip(xr) {
            let gi = g * wi;
            sg += gi;
            sgx += gi * (xi - mean);
        }
        let mg = if centred { sg / d as f32 } else { 0.0 };
        let c = r * r * sgx / d as f32;
        for (((o, g), wi), xi) in dxr.iter_mut().zip(dyr).zip(w).zip(xr) {
            *o += r * (g * wi - mg - c * (xi - mean));
        }
    }
}

/// The activation and its derivative at `x`.
fn act(a: Activation, x: f32) -> (f32, f32) {
    match a {
        Activation::Silu => {
            let s = 1.0 / (1.0 + (-x).exp());
            (x * s, s * (1.0 + x * (1.0 - s)))
        }
        Activation::Gelu => {
            const C: f32 = 0.797_884_6;
            let u = C * (x + 0.044_715 * x * x * x);
            let t = u.tanh();
            let d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * C * (1.0 + 3.0 * 0.044_715 * x * x);
            (0.5 * x * (1.0 + t), d)
        }
    }
}

/// The overlay's gate and down scales of the base features (the first `ff` of each, as the
/// forward pass's overlay reads them), when it has them.
fn scales(ov: Option<&LayerOverlay>, ff: usize) -> (Option<&[f32]>, Option<&[f32]>) {
    fn base(s: Option<&Vec<f32>>, ff: usize) -> Option<&[f32]> {
        s.map(|s| &s[..ff.min(s.len())])
    }
    (
        ov.and_then(|o| base(o.gate_scale.as_ref(), ff)),
        ov.and_then(|o| base(o.down_scale.as_ref(), ff)),
    )
}

/// Feature `f`'s factor in `s` (1 where it has none).
fn factor(s: Option<&[f32]>, f: usize) -> f32 {
    s.and_then(|s| s.get(f)).copied().unwrap_or(1.0)
}

/// What a FFN step's forward pass keeps.
struct FfnTape {
    /// The features' gate-scaled pre-activations (`[rows × ffn]`: a gated FFN's gate, an
    /// MLP's up projection).
    g: Vec<f32>,
    /// A gated FFN's up projections (empty for an MLP).
    up: Vec<f32>,
}

/// One FFN as the gradient pass computes it, over rows `x`: gated,
/// `down · (s_d ⊙ act(s_g ⊙ (gate · x + b_g)) ⊙ (up · x + b_u)) + b_d`, or, without `gate`,
/// an MLP `down · (s_d ⊙ act(s_g ⊙ (up · x + b_u))) + b_d`. The layer's FFN, each routed
/// expert, the shared expert and the overlay's added features are each one.
struct FfnWeights<'a> {
    width: usize,
    /// `[width × hidden]`; `None` for an MLP.
    gate: Option<&'a [f32]>,
    /// `[width × hidden]`.
    up: &'a [f32],
    down: Down<'a>,
    gate_bias: Option<&'a Vec<f32>>,
    up_bias: Option<&'a Vec<f32>>,
    down_bias: Option<&'a Vec<f32>>,
    /// Per-feature factors of the pre-activation and of the activation (edits' scales).
    gate_scale: Option<&'a [f32]>,
    down_scale: Option<&'a [f32]>,
}

/// A layer's FFN: one FFN, or a bank of experts.
enum LayerFfn<'a> {
    Dense(FfnWeights<'a>),
    Bank(&'a BankFfn),
}

/// How an FFN's down matrix is stored.
enum Down<'a> {
    /// `[hidden × width]`, as a model stores it.
    Rows(&'a [f32]),
    /// `[width × hidden]`, as an overlay stores its added features' down vectors.
    Columns(&'a [f32]),
}

impl<'a> FfnWeights<'a> {
    /// A gated FFN of width `width` without biases or scales (an expert).
    fn plain(wg: &'a [f32], wu: &'a [f32], wd: &'a [f32], width: usize) -> FfnWeights<'a> {
        FfnWeights {
            width,
            gate: Some(wg),
            up: wu,
            down: Down::Rows(wd),
            gate_bias: None,
            up_bias: None,
            down_bias: None,
            gate_scale: None,
            down_scale: None,
        }
    }

    /// Layer `l`'s own FFN of width `ff`, with the overlay's scales of its features, or
    /// its bank.
    fn of_layer(l: &'a DenseLayer, ov: Option<&'a LayerOverlay>, ff: usize) -> LayerFfn<'a> {
        let (gate_scale, down_scale) = scales(ov, ff);
        let w = match &l.ffn {
            DenseFfn::Gated {
                wg,
                wu,
                wd,
                gate_bias,
                up_bias,
            } => FfnWeights {
                gate_bias: gate_bias.as_ref(),
                up_bias: up_bias.as_ref(),
                ..FfnWeights::plain(wg, wu, wd, ff)
            },
            DenseFfn::Mlp {
                wu,
                wd,
                up_bias,
                down_bias,
            } => FfnWeights {
                width: ff,
                gate: None,
                up: wu,
                down: Down::Rows(wd),
                gate_bias: None,
                up_bias: up_bias.as_ref(),
                down_bias: down_bias.as_ref(),
                gate_scale: None,
                down_scale: None,
            },
            DenseFfn::Bank(bank) => return LayerFfn::Bank(bank),
        };
        LayerFfn::Dense(FfnWeights {
            gate_scale,
            down_scale,
            ..w
        })
    }

    /// The overlay's added features, with their scales (`None` without any).
    fn added(o: &'a LayerOverlay) -> Option<FfnWeights<'a>> {
        if o.added() == 0 {
            return None;
        }
        let tail = |s: &'a Option<Vec<f32>>| s.as_ref().and_then(|s| s.get(o.ffn..));
        Some(FfnWeights {
            width: o.added(),
            gate: Some(&o.gate),
            up: &o.up,
            down: Down::Columns(&o.down),
            gate_bias: Some(&o.gate_bias),
            up_bias: Some(&o.up_bias),
            down_bias: None,
            gate_scale: tail(&o.gate_scale),
            down_scale: tail(&o.down_scale),
        })
    }
}

/// What one step's forward pass keeps for its backward pass.
enum Tape {
    /// An `Added` step's added features.
    Added(FfnTape),
    /// Nothing: the step's backward reads only weights (or the step did nothing).
    None,
    /// A norm's input and each row's inverse deviation (`Norm`, `PostNorm`).
    Norm {
        x: Vec<f32>,
        inv: Vec<f32>,
    },
    /// The queries and keys before their norm, and the norms' inverse deviations.
    QkNorm {
        q: Vec<f32>,
        k: Vec<f32>,
        inv_q: Vec<f32>,
        inv_k: Vec<f32>,
    },
    /// The queries, keys and values attended with; per segment the attention weights
    /// (`[heads × t × total]`) and, under a softcap, `1 − tanh²` of each capped score.
    Attend {
        q: Vec<f32>,
        k: Vec<f32>,
        v: Vec<f32>,
        probs: Vec<Vec<f32>>,
        caps: Vec<Vec<f32>>,
    },
    Ffn(FfnTape),
    Bank(BankTape),
}

/// What a bank's forward pass keeps: the router logits, each row's chosen experts and
/// weights, each computed expert's rows, and the shared expert's.
struct BankTape {
    /// `[rows × n_experts]`.
    logits: Vec<f32>,
    /// Row `t`'s chosen `(expert, weight)` at `t · n_used ..`.
    chosen: Vec<(usize, f32)>,
    experts: Vec<ExpertTape>,
    shared: Option<SharedTape>,
}

/// One routed expert over the rows that chose it.
struct ExpertTape {
    e: usize,
    /// Indices into [`BankTape::chosen`] (row `slot / n_used`).
    slots: Vec<usize>,
    /// Its forward pass over those rows.
    ffn: FfnTape,
    /// The expert's output before its routing weight, `[m × hidden]`.
    y: Vec<f32>,
}

/// The shared expert over every row.
struct SharedTape {
    ffn: FfnTape,
    /// Its output before its gate, `[rows × hidden]`.
    y: Vec<f32>,
    /// Each row's gate (1 without one).
    sigma: Vec<f32>,
}

/// The buffers the steps name ([`crate::program`]): `h` the sub-block's input, `q`/`k`/`v`,
/// `att`, and one delta per sub-block (the residual `x` is the pass's own); in the backward
/// pass, their gradients.
#[derive(Default)]
struct Bufs {
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    attn_delta: Vec<f32>,
    ffn_delta: Vec<f32>,
}

impl Bufs {
    fn delta(&mut self, sub: Sub) -> &mut Vec<f32> {
        match sub {
            Sub::Attn => &mut self.attn_delta,
            Sub::Ffn => &mut self.ffn_delta,
        }
    }
}

impl DenseTail {
    /// Decodes layers `first ..` of `plan` (a whole-model plan over `source`).
    pub fn new(source: &dyn OperandSource, plan: &Plan, first: usize) -> Result<DenseTail> {
        let s = &plan.surface;
        if plan.stage.first != 0 || !plan.stage.output || first >= s.n_layers {
            return Err(ExecError::Unsupported(
                "value optimisation needs the whole model and a layer inside it".into(),
            ));
        }
        let kind = s.block.norm;
        let mut layers = Vec::new();
        for lp in &plan.layers[first..] {
            let ffn = match &lp.ffn {
                FfnPlan::Dense {
                    gate,
                    up,
                    down,
                    gate_bias,
                    up_bias,
                } => DenseFfn::Gated {
                    wg: decode(source, *gate)?.0,
                    wu: decode(source, *up)?.0,
                    wd: decode(source, *down)?.0,
                    gate_bias: gate_bias.clone(),
                    up_bias: up_bias.clone(),
                },
                FfnPlan::Mlp {
                    up,
                    down,
                    up_bias,
                    down_bias,
                } => DenseFfn::Mlp {
                    wu: decode(source, *up)?.0,
                    wd: decode(source, *down)?.0,
                    up_bias: up_bias.clone(),
                    down_bias: down_bias.clone(),
                },
                FfnPlan::Bank(b) => DenseFfn::Bank(BankFfn::new(source, b)?),
            };
            layers.push(Self::layer(source, plan, lp, kind, ffn)?);
        }
        let (head, vocab, _) = decode(source, plan.head)?;
        Ok(DenseTail {
            first,
            layers,
            out_norm: Norm::new(kind, &plan.output_norm, plan.output_norm_bias.as_ref()),
            head,
            hidden: s.hidden,
            ffn: s.ffn,
            vocab,
            n_heads: s.n_heads,
            n_kv_heads: s.n_kv_heads,
            head_dim: s.head_dim,
            eps: s.norm_eps,
            ropes: plan.ropes.clone(),
            pairing: s.rope_pairing,
            activation: s.activation,
            final_softcap: s.block.final_softcap,
        })
    }

    fn layer(
        source: &dyn OperandSource,
        plan: &Plan,
        lp: &LayerPlan,
        kind: NormKind,
        ffn: DenseFfn,
    ) -> Result<DenseLayer> {
        let e = &lp.extra;
        Ok(DenseLayer {
            index: lp.index,
            steps: lp.steps.clone(),
            attn_norm: Norm::new(kind, &lp.attn_norm, e.attn_norm_bias.as_ref()),
            ffn_norm: Norm::new(kind, &lp.ffn_norm, e.ffn_norm_bias.as_ref()),
            wq: decode(source, lp.q)?.0,
            wk: decode(source, lp.k)?.0,
            wv: decode(source, lp.v)?.0,
            wo: decode(source, lp.o)?.0,
            q_bias: lp.q_bias.clone(),
            k_bias: lp.k_bias.clone(),
            v_bias: lp.v_bias.clone(),
            o_bias: e.o_bias.clone(),
            q_norm: e.q_norm.clone(),
            k_norm: e.k_norm.clone(),
            attn_post_norm: e.attn_post_norm.clone(),
            ffn_post_norm: e.ffn_post_norm.clone(),
            ffn,
            rope: lp.rope,
            rule: attn_rule(plan, lp),
        })
    }

    /// The first layer the tail runs.
    pub fn first(&self) -> usize {
        self.first
    }

    /// The bytes its decoded f32 operands hold.
    pub fn bytes(&self) -> usize {
        let floats: usize = self.layers.iter().map(DenseLayer::floats).sum::<usize>()
            + self.out_norm.floats()
            + self.head.len();
        floats * 4
    }

    /// Runs every segment with `delta` added at its position; with `grad`, the gradient
    /// of the loss with respect to `delta` too.
    pub fn evaluate(
        &self,
        source: &dyn OperandSource,
        segs: &[Segment],
        delta: &[f32],
        grad: bool,
    ) -> Result<Evaluation> {
        self.evaluate_with(source, segs, None, delta, grad)
    }

    /// The keys and values of every segment's positions before its δ position, at every
    /// layer: they do not depend on δ, so [`DenseTail::evaluate_with`] computes only the
    /// rows from the δ position on.
    pub fn freeze(&self, source: &dyn OperandSource, segs: &[Segment]) -> Result<Frozen> {
        let (spans, mut x) = self.spans(segs, None)?;
        let tables = self.tables(&spans);
        let kvd = self.n_kv_heads * self.head_dim;
        let mut kv = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            let ov = source.ffn_overlay(layer.index);
            let tape = self.layer_forward(
                layer,
                ov,
                &mut x,
                Rows {
                    spans: &spans,
                    prefix: None,
                    tables: &tables,
                },
            );
            let (k, v) = tape
                .iter()
                .find_map(|t| match t {
                    Tape::Attend { k, v, .. } => Some((k, v)),
                    _ => None,
                })
                .ok_or_else(|| ExecError::Internal("a layer without attention".into()))?;
            kv.push(
                spans
                    .iter()
                    .zip(segs)
                    .map(|(sp, sg)| {
                        let r = sp.row..sp.row + sg.pos;
                        (
                            k[r.start * kvd..r.end * kvd].to_vec(),
                            v[r.start * kvd..r.end * kvd].to_vec(),
                        )
                    })
                    .collect(),
            );
        }
        Ok(Frozen { kv })
    }

    /// The rows each segment contributes to a pass (from its δ position on when `frozen`)
    /// and the pass's input rows with δ not yet added.
    fn spans(&self, segs: &[Segment], frozen: Option<&Frozen>) -> Result<(Vec<Span>, Vec<f32>)> {
        let d = self.hidden;
        let mut spans = Vec::with_capacity(segs.len());
        let mut rows = 0usize;
        let mut x = Vec::new();
        for s in segs {
            let t = s.start.len() / d;
            if t == 0 || s.start.len() != t * d || s.pos >= t {
                return Err(ExecError::Internal("segment is not whole rows".into()));
            }
            let p0 = match frozen {
                Some(f) if f.kv.first().is_some_and(|l| l.len() == segs.len()) => s.pos,
                Some(_) => return Err(ExecError::Internal("frozen rows of other segments".into())),
                None => 0,
            };
            spans.push(Span {
                row: rows,
                len: t - p0,
                p0,
            });
            x.extend_from_slice(&s.start[p0 * d..]);
            rows += t - p0;
        }
        Ok((spans, x))
    }

    /// The rotary tables of positions `0 ..` the longest span's end, one per rope.
    fn tables(&self, spans: &[Span]) -> Vec<RopeTable> {
        let max_t = spans.iter().map(|s| s.p0 + s.len).max().unwrap_or(0);
        let positions: Vec<usize> = (0..max_t).collect();
        self.ropes
            .iter()
            .map(|spec| RopeTable::at(&positions, spec))
            .collect()
    }

    /// [`DenseTail::evaluate`], computing only the rows from each δ position on when the
    /// segments' earlier rows are `frozen` ([`DenseTail::freeze`] of the same segments).
    pub fn evaluate_with(
        &self,
        source: &dyn OperandSource,
        segs: &[Segment],
        frozen: Option<&Frozen>,
        delta: &[f32],
        grad: bool,
    ) -> Result<Evaluation> {
        self.evaluate_groups(source, segs, &vec![0; segs.len()], frozen, delta, grad)
    }

    /// [`DenseTail::evaluate_with`] for several values at once: segment `i` takes value
    /// `of[i]` of `deltas` (`[values × hidden]`), and the gradient is one row per value. One
    /// pass carries every segment, so each layer's weights are read once for all of them.
    pub fn evaluate_groups(
        &self,
        source: &dyn OperandSource,
        segs: &[Segment],
        of: &[usize],
        frozen: Option<&Frozen>,
        deltas: &[f32],
        grad: bool,
    ) -> Result<Evaluation> {
        let d = self.hidden;
        let values = deltas.len() / d;
        if values == 0 || deltas.len() != values * d {
            return Err(ExecError::Internal("δ is not whole hidden rows".into()));
        }
        if of.len() != segs.len() || of.iter().any(|&g| g >= values) {
            return Err(ExecError::Internal("a segment names no δ".into()));
        }
        let (spans, mut x) = self.spans(segs, frozen)?;
        let rows = x.len() / d;
        for ((s, sp), &g) in segs.iter().zip(&spans).zip(of) {
            let at = sp.row + s.pos - sp.p0;
            let r = &mut x[at * d..(at + 1) * d];
            let delta = &deltas[g * d..(g + 1) * d];
            r.iter_mut().zip(delta).for_each(|(v, dv)| *v += dv);
        }
        let tables = self.tables(&spans);
        let at = |li: usize| Rows {
            spans: &spans,
            prefix: frozen.map(|f| &f.kv[li][..]),
            tables: &tables,
        };
        let mut saved = Vec::with_capacity(self.layers.len());
        for (li, layer) in self.layers.iter().enumerate() {
            let ov = source.ffn_overlay(layer.index);
            let tape = self.layer_forward(layer, ov, &mut x, at(li));
            if grad {
                saved.push(tape);
            }
        }
        // Final norm and head at each segment's last row.
        let n = segs.len();
        let mut last = Vec::with_capacity(n * d);
        for sp in &spans {
            let e = sp.row + sp.len;
            last.extend_from_slice(&x[(e - 1) * d..e * d]);
        }
        let (logits, inv) = self.logits(&last);
        let mut loss = 0.0f32;
        let mut probs = Vec::with_capacity(n);
        let mut dlogits = vec![0.0f32; n * self.vocab];
        for (i, s) in segs.iter().enumerate() {
            let l = &logits[i * self.vocab..(i + 1) * self.vocab];
            let max = l.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = l.iter().map(|&v| ((v - max) as f64).exp()).sum();
            let t = s.target as usize;
            let logp = (l[t] - max) as f64 - sum.ln();
            loss += -(logp as f32) * s.weight;
            probs.push(logp.exp() as f32);
            let dl = &mut dlogits[i * self.vocab..(i + 1) * self.vocab];
            for (g, &v) in dl.iter_mut().zip(l) {
                *g = (((v - max) as f64).exp() / sum) as f32 * s.weight;
            }
            dl[t] -= s.weight;
        }
        if !grad {
            return Ok(Evaluation {
                loss,
                probs,
                grad: Vec::new(),
                steps: 0,
            });
        }
        let dlast = self.logits_back(&last, &inv, &logits, dlogits);
        let mut dx = vec![0.0f32; rows * d];
        for (i, sp) in spans.iter().enumerate() {
            let e = sp.row + sp.len;
            dx[(e - 1) * d..e * d].copy_from_slice(&dlast[i * d..(i + 1) * d]);
        }
        for (li, (layer, tape)) in self.layers.iter().zip(&saved).enumerate().rev() {
            let ov = source.ffn_overlay(layer.index);
            dx = self.layer_backward(layer, ov, tape, dx, at(li), None);
        }
        let mut g = vec![0.0f32; values * d];
        for ((s, sp), &v) in segs.iter().zip(&spans).zip(of) {
            let at = sp.row + s.pos - sp.p0;
            let r = &dx[at * d..(at + 1) * d];
            g[v * d..(v + 1) * d]
                .iter_mut()
                .zip(r)
                .for_each(|(a, b)| *a += b);
        }
        Ok(Evaluation {
            loss,
            probs,
            grad: g,
            steps: 0,
        })
    }

    /// The gradient of a function of one prompt's last-position logits with respect to
    /// the activations of every layer and position: `start` is the prompt's residual
    /// stream entering layer `first` (`[T × hidden]`), `dmetric` gives ∂metric/∂logits
    /// from the logits this pass computes (after the final softcap, where the block has
    /// one, as the engine's). What attribution patching multiplies the difference of two
    /// runs' activations by.
    pub fn site_gradients(
        &self,
        source: &dyn OperandSource,
        start: &[f32],
        dmetric: &dyn Fn(&[f32]) -> Vec<f32>,
    ) -> Result<Vec<LayerGradients>> {
        let d = self.hidden;
        let t = start.len() / d;
        if t == 0 || start.len() != t * d {
            return Err(ExecError::Internal(
                "the prompt's rows are not whole".into(),
            ));
        }
        let spans = [Span {
            row: 0,
            len: t,
            p0: 0,
        }];
        let tables = self.tables(&spans);
        let rows = Rows {
            spans: &spans,
            prefix: None,
            tables: &tables,
        };
        let mut x = start.to_vec();
        let mut saved = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            let ov = source.ffn_overlay(layer.index);
            saved.push(self.layer_forward(layer, ov, &mut x, rows));
        }
        let last = &x[(t - 1) * d..];
        let (logits, inv) = self.logits(last);
        let dlogits = dmetric(&logits);
        if dlogits.len() != self.vocab {
            return Err(ExecError::Internal(
                "∂metric/∂logits is not one vocabulary row".into(),
            ));
        }
        let mut dx = vec![0.0f32; t * d];
        dx[(t - 1) * d..].copy_from_slice(&self.logits_back(last, &inv, &logits, dlogits));
        let mut out: Vec<LayerGradients> = Vec::with_capacity(self.layers.len());
        for (layer, tape) in self.layers.iter().zip(&saved).rev() {
            let ov = source.ffn_overlay(layer.index);
            let mut g = LayerGradients {
                layer: layer.index,
                ..LayerGradients::default()
            };
            dx = self.layer_backward(layer, ov, tape, dx, rows, Some(&mut g));
            out.push(g);
        }
        out.reverse();
        Ok(out)
    }

    /// The logits of residual rows `last` (`[n × hidden]`): the final norm, the head and
    /// the final softcap; and the norm's inverse deviations.
    fn logits(&self, last: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let d = self.hidden;
        let n = last.len() / d;
        let mut z = vec![0.0f32; n * d];
        let n_ = &self.out_norm;
        let inv = norm_rows(last, &n_.w, n_.bias.as_deref(), self.eps, &mut z);
        let mut logits = vec![0.0f32; n * self.vocab];
        xwt(&z, &self.head, n, self.vocab, d, &mut logits, false);
        if self.final_softcap > 0.0 {
            crate::kernels::softcap(&mut logits, self.final_softcap);
        }
        (logits, inv)
    }

    /// ∂/∂`last` from ∂/∂logits, back through [`DenseTail::logits`].
    fn logits_back(&self, last: &[f32], inv: &[f32], logits: &[f32], mut dl: Vec<f32>) -> Vec<f32> {
        let d = self.hidden;
        let n = last.len() / d;
        let cap = self.final_softcap;
        if cap > 0.0 {
            for (g, l) in dl.iter_mut().zip(logits) {
                let t = l / cap;
                *g *= 1.0 - t * t;
            }
        }
        let mut dz = vec![0.0f32; n * d];
        xw(&dl, &self.head, n, self.vocab, d, &mut dz, false);
        let mut dlast = vec![0.0f32; n * d];
        let n_ = &self.out_norm;
        norm_back(last, inv, &n_.w, n_.bias.is_some(), &dz, &mut dlast);
        dlast
    }

    /// Runs layer `l`'s steps over the residual rows `x`, in place; returns what each
    /// step keeps for [`DenseTail::layer_backward`].
    fn layer_forward(
        &self,
        l: &DenseLayer,
        ov: Option<&LayerOverlay>,
        x: &mut [f32],
        at: Rows<'_>,
    ) -> Vec<Tape> {
        let (d, hd, eps) = (self.hidden, self.head_dim, self.eps);
        let (qd, kvd) = (self.n_heads * hd, self.n_kv_heads * hd);
        let rows = x.len() / d;
        let mut b = Bufs::default();
        let mut tape = Vec::with_capacity(l.steps.len());
        for step in &l.steps {
            tape.push(match *step {
                Step::Norm(sub) => {
                    let n = l.norm(sub);
                    b.h = vec![0.0f32; rows * d];
                    let inv = norm_rows(x, &n.w, n.bias.as_deref(), eps, &mut b.h);
                    Tape::Norm { x: x.to_vec(), inv }
                }
                Step::TakeResidual => {
                    b.h = x.to_vec();
                    Tape::None
                }
                Step::Project => {
                    b.q = vec![0.0f32; rows * qd];
                    b.k = vec![0.0f32; rows * kvd];
                    b.v = vec![0.0f32; rows * kvd];
                    xwt(&b.h, &l.wq, rows, qd, d, &mut b.q, false);
                    xwt(&b.h, &l.wk, rows, kvd, d, &mut b.k, false);
                    xwt(&b.h, &l.wv, rows, kvd, d, &mut b.v, false);
                    add_rows(&mut b.q, l.q_bias.as_ref());
                    add_rows(&mut b.k, l.k_bias.as_ref());
                    add_rows(&mut b.v, l.v_bias.as_ref());
                    Tape::None
                }
                Step::QkNorm => match (&l.q_norm, &l.k_norm) {
                    (Some(qn), Some(kn)) => {
                        let (q, k) = (std::mem::take(&mut b.q), std::mem::take(&mut b.k));
                        b.q = vec![0.0f32; q.len()];
                        b.k = vec![0.0f32; k.len()];
                        let inv_q = norm_rows(&q, qn, None, eps, &mut b.q);
                        let inv_k = norm_rows(&k, kn, None, eps, &mut b.k);
                        Tape::QkNorm { q, k, inv_q, inv_k }
                    }
                    _ => Tape::None,
                },
                Step::Rope => {
                    if let Some(table) = at.tables.get(l.rope) {
                        self.rotate(&mut b.q, &mut b.k, at.spans, table);
                    }
                    Tape::None
                }
                Step::Attend => {
                    let (att, probs, caps) = self.attend(&l.rule, &b.q, &b.k, &b.v, at);
                    b.att = att;
                    Tape::Attend {
                        q: std::mem::take(&mut b.q),
                        k: std::mem::take(&mut b.k),
                        v: std::mem::take(&mut b.v),
                        probs,
                        caps,
                    }
                }
                Step::Output => {
                    b.attn_delta = vec![0.0f32; rows * d];
                    xwt(&b.att, &l.wo, rows, d, qd, &mut b.attn_delta, false);
                    add_rows(&mut b.attn_delta, l.o_bias.as_ref());
                    Tape::None
                }
                Step::PostNorm(sub) => match l.post_norm(sub) {
                    Some(w) => {
                        let delta = b.delta(sub);
                        let pre = std::mem::replace(delta, vec![0.0f32; rows * d]);
                        let inv = norm_rows(&pre, w, None, eps, delta);
                        Tape::Norm { x: pre, inv }
                    }
                    None => Tape::None,
                },
                Step::Ffn => {
                    let (out, t) = self.ffn_forward(l, ov, &b.h);
                    b.ffn_delta = out;
                    t
                }
                Step::Added => match self.added_forward(ov, &b.h, &mut b.ffn_delta) {
                    Some(t) => Tape::Added(t),
                    None => Tape::None,
                },
                Step::Residual(sub) => {
                    add_in_place(x, b.delta(sub));
                    Tape::None
                }
            });
        }
        tape
    }

    /// Layer `l`'s backward pass: from ∂/∂(the layer's output rows) `dout`, walking its
    /// steps in reverse, ∂/∂(its input rows); `taps` takes the gradients at its sites.
    fn layer_backward(
        &self,
        l: &DenseLayer,
        ov: Option<&LayerOverlay>,
        tape: &[Tape],
        dout: Vec<f32>,
        at: Rows<'_>,
        mut taps: Option<&mut LayerGradients>,
    ) -> Vec<f32> {
        let (d, hd) = (self.hidden, self.head_dim);
        let (qd, kvd) = (self.n_heads * hd, self.n_kv_heads * hd);
        let rows = dout.len() / d;
        if let Some(t) = taps.as_deref_mut() {
            t.resid_post = dout.clone();
        }
        let mut dx = dout;
        // The gradients of the buffers the steps name.
        let mut g = Bufs::default();
        for (step, tp) in l.steps.iter().zip(tape).rev() {
            match (*step, tp) {
                (Step::Residual(sub), _) => {
                    g.delta(sub).clone_from(&dx);
                    if sub == Sub::Attn {
                        if let Some(t) = taps.as_deref_mut() {
                            t.resid_mid = dx.clone();
                        }
                    }
                }
                // The FFN's input gets the added features' gradient (walked first, being
                // later in the layer; none without them) and the FFN's own.
                (Step::Added, Tape::Added(t)) => {
                    g.h = self.added_backward(ov, t, &g.ffn_delta);
                }
                (Step::Added, _) => g.h = Vec::new(),
                (Step::Ffn, t @ (Tape::Ffn(_) | Tape::Bank(_))) => {
                    let mut dh = self.ffn_backward(l, ov, t, &g.ffn_delta);
                    if !g.h.is_empty() {
                        add_in_place(&mut dh, &g.h);
                    }
                    g.h = dh;
                }
                (Step::PostNorm(sub), Tape::Norm { x, inv }) => {
                    if let Some(w) = l.post_norm(sub) {
                        let mut dpre = vec![0.0f32; x.len()];
                        norm_back(x, inv, w, false, g.delta(sub), &mut dpre);
                        *g.delta(sub) = dpre;
                    }
                }
                (Step::Norm(sub), Tape::Norm { x, inv }) => {
                    let n = l.norm(sub);
                    norm_back(x, inv, &n.w, n.bias.is_some(), &g.h, &mut dx);
                }
                (Step::TakeResidual, _) => add_in_place(&mut dx, &g.h),
                (Step::Output, _) => {
                    g.att = vec![0.0f32; rows * qd];
                    xw(&g.attn_delta, &l.wo, rows, d, qd, &mut g.att, false);
                    if let Some(t) = taps.as_deref_mut() {
                        t.head_outputs = g.att.clone();
                    }
                }
                (
                    Step::Attend,
                    Tape::Attend {
                        q,
                        k,
                        v,
                        probs,
                        caps,
                    },
                ) => {
                    (g.q, g.k, g.v) = self.attend_back(&l.rule, &g.att, q, k, v, probs, caps, at);
                }
                (Step::Rope, _) => {
                    if let Some(table) = at.tables.get(l.rope) {
                        // The rotation's transpose is the rotation by the opposite angle.
                        let back = RopeTable {
                            half: table.half,
                            cos: table.cos.clone(),
                            sin: table.sin.iter().map(|v| -v).collect(),
                        };
                        self.rotate(&mut g.q, &mut g.k, at.spans, &back);
                    }
                }
                (Step::QkNorm, Tape::QkNorm { q, k, inv_q, inv_k }) => {
                    if let (Some(qn), Some(kn)) = (&l.q_norm, &l.k_norm) {
                        let mut dq = vec![0.0f32; q.len()];
                        let mut dk = vec![0.0f32; k.len()];
                        norm_back(q, inv_q, qn, false, &g.q, &mut dq);
                        norm_back(k, inv_k, kn, false, &g.k, &mut dk);
                        (g.q, g.k) = (dq, dk);
                    }
                }
                (Step::Project, _) => {
                    g.h = vec![0.0f32; rows * d];
                    xw(&g.q, &l.wq, rows, qd, d, &mut g.h, false);
                    xw(&g.k, &l.wk, rows, kvd, d, &mut g.h, true);
                    xw(&g.v, &l.wv, rows, kvd, d, &mut g.h, true);
                }
                // A step that did nothing forward (a post-norm or Q/K norm the layer lacks).
                _ => {}
            }
        }
        if let Some(t) = taps {
            t.resid_pre = dx.clone();
        }
        dx
    }

    /// Rotates the queries `q` and keys `k` of every span by `table` (row `p` = position
    /// `p`), in place.
    fn rotate(&self, q: &mut [f32], k: &mut [f32], spans: &[Span], table: &RopeTable) {
        let hd = self.head_dim;
        let (qd, kvd) = (self.n_heads * hd, self.n_kv_heads * hd);
        for sp in spans {
            let (a, b) = (sp.row, sp.row + sp.len);
            rope_from(
                &mut q[a * qd..b * qd],
                sp.p0,
                self.n_heads,
                hd,
                table,
                self.pairing,
            );
            rope_from(
                &mut k[a * kvd..b * kvd],
                sp.p0,
                self.n_kv_heads,
                hd,
                table,
                self.pairing,
            );
        }
    }

    /// Causal attention of every span's queries under `rule` (scale, sliding window,
    /// softcap), the keys and values before a span's rows read from the frozen prefix:
    /// the output (`[rows × q_dim]`), the weights per span (`[heads × t × total]`, zero
    /// outside each query's visible keys) and, under a softcap, `1 − tanh²` of each score
    /// (same layout; empty without).
    #[allow(clippy::type_complexity)]
    fn attend(
        &self,
        rule: &AttnRule,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        at: Rows<'_>,
    ) -> (Vec<f32>, Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let hd = self.head_dim;
        let (qd, kvd) = (self.n_heads * hd, self.n_kv_heads * hd);
        let rows = q.len() / qd;
        let group = self.n_heads / self.n_kv_heads.max(1);
        let cap = rule.softcap;
        let mut att = vec![0.0f32; rows * qd];
        let mut probs = Vec::with_capacity(at.spans.len());
        let mut caps = Vec::new();
        for (si, sp) in at.spans.iter().enumerate() {
            let (t, total) = (sp.len, sp.p0 + sp.len);
            let kv = KvRows {
                prefix: at.prefix.map(|p| &p[si]),
                k,
                v,
                span: *sp,
                kvd,
            };
            let mut p = vec![0.0f32; self.n_heads * t * total];
            let mut c = vec![0.0f32; if cap > 0.0 { p.len() } else { 0 }];
            for head in 0..self.n_heads {
                let kvh = head / group;
                for i in 0..t {
                    let qi = &q[(sp.row + i) * qd + head * hd..][..hd];
                    let at_row = (head * t + i) * total;
                    let pr = &mut p[at_row..][..total];
                    let pos = sp.p0 + i;
                    let (first, visible) = (rule.first_key(pos), pos + 1);
                    let mut max = f32::NEG_INFINITY;
                    for j in first..visible {
                        let kj = &kv.key(j)[kvh * hd..][..hd];
                        let mut s = qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * rule.scale;
                        if cap > 0.0 {
                            let th = (s / cap).tanh();
                            c[at_row + j] = 1.0 - th * th;
                            s = cap * th;
                        }
                        pr[j] = s;
                        max = max.max(s);
                    }
                    let mut sum = 0.0f32;
                    for pj in &mut pr[first..visible] {
                        *pj = (*pj - max).exp();
                        sum += *pj;
                    }
                    let out = &mut att[(sp.row + i) * qd + head * hd..][..hd];
                    for (j, pj) in pr.iter_mut().enumerate().take(visible).skip(first) {
                        *pj /= sum;
                        let vj = &kv.value(j)[kvh * hd..][..hd];
                        out.iter_mut().zip(vj).for_each(|(a, b)| *a += *pj * b);
                    }
                }
            }
            probs.push(p);
            if cap > 0.0 {
                caps.push(c);
            }
        }
        (att, probs, caps)
    }

    /// [`DenseTail::attend`]'s backward pass: from ∂/∂att, ∂/∂q, ∂/∂k and ∂/∂v of the
    /// pass's rows (the frozen prefix takes none).
    #[allow(clippy::too_many_arguments)]
    fn attend_back(
        &self,
        rule: &AttnRule,
        datt: &[f32],
        q: &[f32],
        k: &[f32],
        v: &[f32],
        probs: &[Vec<f32>],
        caps: &[Vec<f32>],
        at: Rows<'_>,
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let hd = self.head_dim;
        let (qd, kvd) = (self.n_heads * hd, self.n_kv_heads * hd);
        let rows = q.len() / qd;
        let group = self.n_heads / self.n_kv_heads.max(1);
        let mut dq = vec![0.0f32; rows * qd];
        let mut dk = vec![0.0f32; rows * kvd];
        let mut dv = vec![0.0f32; rows * kvd];
        for (si, (sp, p)) in at.spans.iter().zip(probs).enumerate() {
            let (o, t, total) = (sp.row, sp.len, sp.p0 + sp.len);
            let c = caps.get(si);
            let kv = KvRows {
                prefix: at.prefix.map(|p| &p[si]),
                k,
                v,
                span: *sp,
                kvd,
            };
            let mut dp = vec![0.0f32; total];
            for head in 0..self.n_heads {
                let kvh = head / group;
                for i in 0..t {
                    let pos = sp.p0 + i;
                    let (first, visible) = (rule.first_key(pos), pos + 1);
                    let doi = &datt[(o + i) * qd + head * hd..][..hd];
                    let at_row = (head * t + i) * total;
                    let pr = &p[at_row..][..total];
                    let mut dot = 0.0f32;
                    for j in first..visible {
                        let vj = &kv.value(j)[kvh * hd..][..hd];
                        dp[j] = doi.iter().zip(vj).map(|(a, b)| a * b).sum();
                        dot += pr[j] * dp[j];
                        if j >= sp.p0 {
                            let r = o + j - sp.p0;
                            let dvj = &mut dv[r * kvd + kvh * hd..][..hd];
                            let pj = pr[j];
                            dvj.iter_mut().zip(doi).for_each(|(a, b)| *a += pj * b);
                        }
                    }
                    for j in first..visible {
                        let mut dsij = pr[j] * (dp[j] - dot) * rule.scale;
                        if let Some(c) = c {
                            dsij *= c[at_row + j];
                        }
                        if dsij == 0.0 {
                            continue;
                        }
                        let kj = &kv.key(j)[kvh * hd..][..hd];
                        let dqi = &mut dq[(o + i) * qd + head * hd..][..hd];
                        dqi.iter_mut().zip(kj).for_each(|(a, b)| *a += dsij * b);
                        if j >= sp.p0 {
                            let r = o + j - sp.p0;
                            let qi = &q[(o + i) * qd + head * hd..][..hd];
                            let dkj = &mut dk[r * kvd + kvh * hd..][..hd];
                            dkj.iter_mut().zip(qi).for_each(|(a, b)| *a += dsij * b);
                        }
                    }
                }
            }
        }
        (dq, dk, dv)
    }

    /// Layer `l`'s FFN of the normed rows `h` with the overlay `ov`'s scales: its delta,
    /// and what its backward pass needs.
    fn ffn_forward(
        &self,
        l: &DenseLayer,
        ov: Option<&LayerOverlay>,
        h: &[f32],
    ) -> (Vec<f32>, Tape) {
        match FfnWeights::of_layer(l, ov, self.ffn) {
            LayerFfn::Dense(w) => {
                let (out, t) = self.ffn_rows(&w, h);
                (out, Tape::Ffn(t))
            }
            LayerFfn::Bank(bank) => {
                let (out, t) = self.bank_forward(bank, h);
                (out, Tape::Bank(t))
            }
        }
    }

    /// [`DenseTail::ffn_forward`]'s backward pass: ∂/∂h from ∂/∂delta.
    fn ffn_backward(
        &self,
        l: &DenseLayer,
        ov: Option<&LayerOverlay>,
        tape: &Tape,
        dout: &[f32],
    ) -> Vec<f32> {
        match (FfnWeights::of_layer(l, ov, self.ffn), tape) {
            (LayerFfn::Bank(bank), Tape::Bank(t)) => self.bank_backward(bank, t, dout),
            (LayerFfn::Dense(w), Tape::Ffn(t)) => {
                let mut dh = vec![0.0f32; dout.len()];
                self.ffn_rows_backward(&w, t, dout, &mut dh);
                dh
            }
            _ => unreachable!("an FFN step keeps the tape of its own kind"),
        }
    }

    /// One FFN `w` of the rows `x`: its output, and what its backward pass needs. Every FFN
    /// the gradient pass runs is computed here (the layer's, each routed expert, the shared
    /// expert, the overlay's added features).
    fn ffn_rows(&self, w: &FfnWeights<'_>, x: &[f32]) -> (Vec<f32>, FfnTape) {
        let (d, ff) = (self.hidden, w.width);
        let rows = x.len() / d;
        let mut g = vec![0.0f32; rows * ff];
        let mut up = Vec::new();
        match w.gate {
            Some(wg) => {
                up = vec![0.0f32; rows * ff];
                xwt(x, wg, rows, ff, d, &mut g, false);
                xwt(x, w.up, rows, ff, d, &mut up, false);
                add_rows(&mut g, w.gate_bias);
                add_rows(&mut up, w.up_bias);
            }
            None => {
                xwt(x, w.up, rows, ff, d, &mut g, false);
                add_rows(&mut g, w.up_bias);
            }
        }
        let mut a = vec![0.0f32; rows * ff];
        for (r, (gr, ar)) in g
            .chunks_exact_mut(ff)
            .zip(a.chunks_exact_mut(ff))
            .enumerate()
        {
            if let Some(s) = w.gate_scale {
                gr.iter_mut().zip(s).for_each(|(v, k)| *v *= k);
            }
            for (av, gv) in ar.iter_mut().zip(gr.iter()) {
                *av = act(self.activation, *gv).0;
            }
            if !up.is_empty() {
                mul_in_place(ar, &up[r * ff..(r + 1) * ff]);
            }
            if let Some(s) = w.down_scale {
                ar.iter_mut().zip(s).for_each(|(v, k)| *v *= k);
            }
        }
        let mut y = vec![0.0f32; rows * d];
        match w.down {
            Down::Rows(wd) => xwt(&a, wd, rows, d, ff, &mut y, false),
            Down::Columns(wd) => xw(&a, wd, rows, ff, d, &mut y, false),
        }
        add_rows(&mut y, w.down_bias);
        (y, FfnTape { g, up })
    }

    /// [`DenseTail::ffn_rows`]'s backward pass: ∂/∂x from ∂/∂(its output) `dy`, added to
    /// `dx`.
    fn ffn_rows_backward(&self, w: &FfnWeights<'_>, t: &FfnTape, dy: &[f32], dx: &mut [f32]) {
        let (d, ff) = (self.hidden, w.width);
        let rows = dy.len() / d;
        // ∂/∂(the activations), then ∂/∂up (gated) in place and ∂/∂(gate pre-activation).
        let mut da = vec![0.0f32; rows * ff];
        match w.down {
            Down::Rows(wd) => xw(dy, wd, rows, d, ff, &mut da, false),
            Down::Columns(wd) => xwt(dy, wd, rows, ff, d, &mut da, false),
        }
        let gated = !t.up.is_empty();
        let mut dg = vec![0.0f32; rows * ff];
        for r in 0..rows {
            for f in 0..ff {
                let i = r * ff + f;
                let dai = da[i] * factor(w.down_scale, f);
                let (a, da_dg) = act(self.activation, t.g[i]);
                let u = if gated { t.up[i] } else { 1.0 };
                dg[i] = dai * u * da_dg * factor(w.gate_scale, f);
                da[i] = dai * a;
            }
        }
        match w.gate {
            Some(wg) => {
                xw(&dg, wg, rows, ff, d, dx, true);
                xw(&da, w.up, rows, ff, d, dx, true);
            }
            None => xw(&dg, w.up, rows, ff, d, dx, true),
        }
    }

    /// A bank's delta of the FFN input rows `h`, as the host's bank programme computes it
    /// (`crate::ffn`): router logits, each row's selection, each chosen expert's gated FFN
    /// over the rows that chose it, weighted, plus the shared expert scaled by its gate.
    fn bank_forward(&self, b: &BankFfn, h: &[f32]) -> (Vec<f32>, BankTape) {
        let d = self.hidden;
        let rows = h.len() / d;
        let (ne, k, ef) = (b.n_experts, b.n_used, b.expert_ffn);
        let mut logits = vec![0.0f32; rows * ne];
        xwt(h, &b.router, rows, ne, d, &mut logits, false);
        let mut chosen = Vec::with_capacity(rows * k);
        for z in logits.chunks_exact(ne) {
            select(b.selection, z, k, &mut chosen);
        }
        let mut out = vec![0.0f32; rows * d];
        let mut experts = Vec::new();
        for e in 0..ne {
            let slots: Vec<usize> = (0..chosen.len()).filter(|&s| chosen[s].0 == e).collect();
            if slots.is_empty() {
                continue;
            }
            let m = slots.len();
            let mut xs = Vec::with_capacity(m * d);
            for &s in &slots {
                let t = s / k;
                xs.extend_from_slice(&h[t * d..(t + 1) * d]);
            }
            let (wg, wu, wd) = b.expert(e);
            let (y, ffn) = self.ffn_rows(&FfnWeights::plain(wg, wu, wd, ef), &xs);
            for (i, &s) in slots.iter().enumerate() {
                let (t, w) = (s / k, chosen[s].1);
                let o = &mut out[t * d..(t + 1) * d];
                o.iter_mut()
                    .zip(&y[i * d..(i + 1) * d])
                    .for_each(|(a, v)| *a += w * v);
            }
            experts.push(ExpertTape { e, slots, ffn, y });
        }
        let shared = b.shared.as_ref().map(|sh| {
            let (y, ffn) = self.ffn_rows(&sh.weights(), h);
            let sigma: Vec<f32> = match &sh.gate_inp {
                Some(gw) => h
                    .chunks_exact(d)
                    .map(|hr| {
                        let z: f32 = gw.iter().zip(hr).map(|(a, b)| a * b).sum();
                        1.0 / (1.0 + exp(-z))
                    })
                    .collect(),
                None => vec![1.0; rows],
            };
            for ((o, yr), &s) in out.chunks_exact_mut(d).zip(y.chunks_exact(d)).zip(&sigma) {
                o.iter_mut().zip(yr).for_each(|(a, v)| *a += s * v);
            }
            SharedTape { ffn, y, sigma }
        });
        (
            out,
            BankTape {
                logits,
                chosen,
                experts,
                shared,
            },
        )
    }

    /// [`DenseTail::bank_forward`]'s backward pass: ∂/∂h from ∂/∂delta, with each row's
    /// chosen experts held fixed. The routing weights' gradient goes back through the
    /// selection's weighting into the router logits, and from there through the router.
    fn bank_backward(&self, b: &BankFfn, t: &BankTape, dout: &[f32]) -> Vec<f32> {
        let d = self.hidden;
        let rows = dout.len() / d;
        let (ne, k, ef) = (b.n_experts, b.n_used, b.expert_ffn);
        let mut dh = vec![0.0f32; rows * d];
        // ∂/∂(each chosen slot's weight).
        let mut dw = vec![0.0f32; t.chosen.len()];
        for et in &t.experts {
            let m = et.slots.len();
            let mut dy = vec![0.0f32; m * d];
            for (i, &s) in et.slots.iter().enumerate() {
                let (r, w) = (s / k, t.chosen[s].1);
                let dr = &dout[r * d..(r + 1) * d];
                dw[s] = dr
                    .iter()
                    .zip(&et.y[i * d..(i + 1) * d])
                    .map(|(a, b)| a * b)
                    .sum();
                dy[i * d..(i + 1) * d]
                    .iter_mut()
                    .zip(dr)
                    .for_each(|(a, v)| *a = w * v);
            }
            let (wg, wu, wd) = b.expert(et.e);
            let mut dxs = vec![0.0f32; m * d];
            self.ffn_rows_backward(&FfnWeights::plain(wg, wu, wd, ef), &et.ffn, &dy, &mut dxs);
            for (i, &s) in et.slots.iter().enumerate() {
                let r = s / k;
                add_in_place(&mut dh[r * d..(r + 1) * d], &dxs[i * d..(i + 1) * d]);
            }
        }
        // The weights' gradient into the router logits, by the selection's weighting.
        let mut dz = vec![0.0f32; rows * ne];
        for r in 0..rows {
            let z = &t.logits[r * ne..(r + 1) * ne];
            let ch = &t.chosen[r * k..(r + 1) * k];
            let dwr = &dw[r * k..(r + 1) * k];
            let dzr = &mut dz[r * ne..(r + 1) * ne];
            weights_backward(b.selection, z, ch, dwr, dzr);
        }
        xw(&dz, &b.router, rows, ne, d, &mut dh, true);
        // The shared expert and its gate.
        if let (Some(sh), Some(st)) = (&b.shared, &t.shared) {
            let mut dy = dout.to_vec();
            for (r, (dyr, &s)) in dy.chunks_exact_mut(d).zip(&st.sigma).enumerate() {
                if let Some(gw) = &sh.gate_inp {
                    let ds: f32 = dyr
                        .iter()
                        .zip(&st.y[r * d..(r + 1) * d])
                        .map(|(a, b)| a * b)
                        .sum();
                    let dpre = ds * s * (1.0 - s);
                    dh[r * d..(r + 1) * d]
                        .iter_mut()
                        .zip(gw)
                        .for_each(|(a, w)| *a += dpre * w);
                }
                dyr.iter_mut().for_each(|v| *v *= s);
            }
            self.ffn_rows_backward(&sh.weights(), &st.ffn, &dy, &mut dh);
        }
        dh
    }

    /// The overlay's added features of the FFN input rows `h`, added to `delta`
    /// ([`Step::Added`]); what their backward pass needs (none without them).
    fn added_forward(
        &self,
        ov: Option<&LayerOverlay>,
        h: &[f32],
        delta: &mut [f32],
    ) -> Option<FfnTape> {
        let w = FfnWeights::added(ov?)?;
        let (y, t) = self.ffn_rows(&w, h);
        add_in_place(delta, &y);
        Some(t)
    }

    /// [`DenseTail::added_forward`]'s backward pass: ∂/∂h from ∂/∂delta.
    fn added_backward(&self, ov: Option<&LayerOverlay>, t: &FfnTape, dout: &[f32]) -> Vec<f32> {
        let mut dh = vec![0.0f32; dout.len()];
        if let Some(w) = ov.and_then(FfnWeights::added) {
            self.ffn_rows_backward(&w, t, dout, &mut dh);
        }
        dh
    }
}

/// The gradient of one row's routing weights (`dw`, one per chosen `(expert, weight)` of
/// `chosen`) into its router logits `z`, written to `dz`, with the chosen set fixed:
/// - top-k then softmax: `w = softmax(z_chosen)`, so `dz_j = w_j (dw_j − Σ w·dw)` on the
///   chosen, 0 elsewhere;
/// - softmax then top-k: `w_j = p_j` of the softmax over every expert, so
///   `dz_i = p_i ([i chosen] dw_i − Σ_chosen p·dw)` for every expert;
/// - sigmoid, top-k, normalised: `w_j = s_j / S` with `s = sigmoid(z)`, `S = Σ_chosen s`, so
///   `dz_j = s_j (1 − s_j) (dw_j − Σ w·dw) / S` on the chosen.
fn weights_backward(
    sel: ExpertSelection,
    z: &[f32],
    chosen: &[(usize, f32)],
    dw: &[f32],
    dz: &mut [f32],
) {
    let wdw: f32 = chosen.iter().zip(dw).map(|(c, g)| c.1 * g).sum();
    match sel {
        ExpertSelection::TopKSoftmax => {
            for (&(e, w), g) in chosen.iter().zip(dw) {
                dz[e] += w * (g - wdw);
            }
        }
        ExpertSelection::SoftmaxTopK => {
            let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let p: Vec<f32> = z.iter().map(|&v| exp(v - m)).collect();
            let sum: f32 = p.iter().sum();
            for (i, o) in dz.iter_mut().enumerate() {
                *o -= p[i] / sum * wdw;
            }
            for (&(e, w), g) in chosen.iter().zip(dw) {
                dz[e] += w * g;
            }
        }
        ExpertSelection::SigmoidTopKNorm => {
            let sig = |v: f32| 1.0 / (1.0 + exp(-v));
            let total: f32 = chosen.iter().map(|&(e, _)| sig(z[e])).sum();
            for (&(e, _), g) in chosen.iter().zip(dw) {
                let s = sig(z[e]);
                dz[e] += s * (1.0 - s) * (g - wdw) / total;
            }
        }
    }
}

/// `a[i] *= b[i]`.
fn mul_in_place(a: &mut [f32], b: &[f32]) {
    a.iter_mut().zip(b).for_each(|(x, y)| *x *= y);
}

/// How [`optimise`] searches for a value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Optimise {
    /// Most gradient steps.
    pub steps: usize,
    /// Stop once every segment gives its target at least this probability.
    pub aim: f32,
    /// Adam's step per coordinate, as a fraction of the residual's RMS at the position.
    pub rate: f32,
    /// Weight of ‖δ‖² / ‖residual‖² in the loss.
    pub decay: f32,
    /// ‖δ‖ is kept at most this many times the residual's norm.
    pub max_norm: f32,
}

impl Default for Optimise {
    fn default() -> Self {
        Optimise {
            steps: 25,
            aim: 0.9,
            rate: 0.15,
            decay: 0.5,
            max_norm: 4.0,
        }
    }
}

/// The vector δ that, added to the residual stream at each segment's position after layer
/// `tail.first() − 1`, makes every segment's last position give its target (Adam on the
/// mean negative log-probability plus a norm penalty; `norm` is the residual's norm at those
/// positions, the scale δ is measured against). Returns δ and its evaluation.
pub fn optimise(
    tail: &DenseTail,
    source: &dyn OperandSource,
    segs: &[Segment],
    norm: f32,
    opts: Optimise,
) -> Result<(Vec<f32>, Evaluation)> {
    let group = Group {
        segs: segs.to_vec(),
        norm,
    };
    optimise_each(tail, source, std::slice::from_ref(&group), opts)?
        .pop()
        .ok_or_else(|| ExecError::Internal("no value optimised".into()))
}

/// [`optimise`] for several values at once, each on its own segments, as independent
/// optimisations whose passes are shared: every step runs the segments of the values not yet
/// done in one pass ([`DenseTail::evaluate_groups`]), so the layers' weights and the head
/// are read once per step for all of them. Each value stops on its own once its segments
/// reach the aim, with what [`optimise`] alone would have reached.
pub fn optimise_each(
    tail: &DenseTail,
    source: &dyn OperandSource,
    groups: &[Group],
    opts: Optimise,
) -> Result<Vec<(Vec<f32>, Evaluation)>> {
    let d = tail.hidden;
    if groups
        .iter()
        .any(|g| !(g.norm.is_finite() && g.norm > 0.0) || g.segs.is_empty())
    {
        return Err(ExecError::InvalidOption(
            "value optimisation needs prompts and a residual to scale by".into(),
        ));
    }
    let n = groups.len();
    let (b1, b2, eps) = (0.9f32, 0.999f32, 1e-8f32);
    let mut delta = vec![vec![0.0f32; d]; n];
    let mut m = vec![vec![0.0f32; d]; n];
    let mut v = vec![vec![0.0f32; d]; n];
    let mut done: Vec<Option<Evaluation>> = vec![None; n];
    let all: Vec<Segment> = groups.iter().flat_map(|g| g.segs.iter().cloned()).collect();
    let owner: Vec<usize> = groups
        .iter()
        .enumerate()
        .flat_map(|(i, g)| std::iter::repeat_n(i, g.segs.len()))
        .collect();
    let frozen_all = tail.freeze(source, &all)?;
    // The pass of the values still running: their segments, which value each takes, and
    // their frozen rows (rebuilt when a value finishes).
    let pass_of = |active: &[usize]| {
        let idx: Vec<usize> = (0..all.len())
            .filter(|&i| active.contains(&owner[i]))
            .collect();
        let segs: Vec<Segment> = idx.iter().map(|&i| all[i].clone()).collect();
        let of: Vec<usize> = idx
            .iter()
            .map(|&i| active.iter().position(|&g| g == owner[i]).unwrap_or(0))
            .collect();
        (segs, of, frozen_all.select(&idx))
    };
    // The deltas of `values`, end to end; value `k`'s outcome in a pass of them.
    let flat = |delta: &[Vec<f32>], values: &[usize]| -> Vec<f32> {
        values
            .iter()
            .flat_map(|&g| delta[g].iter().copied())
            .collect()
    };
    let outcome = |e: &Evaluation, of: &[usize], k: usize, g: usize, steps: usize| {
        let probs: Vec<f32> = e
            .probs
            .iter()
            .zip(of)
            .filter(|(_, &o)| o == k)
            .map(|(p, _)| *p)
            .collect();
        Evaluation {
            loss: group_loss(&groups[g].segs, &probs),
            probs,
            grad: Vec::new(),
            steps,
        }
    };
    let mut active: Vec<usize> = (0..n).collect();
    let mut pass = pass_of(&active);
    for step in 1..=opts.steps {
        let (segs, of, frozen) = &pass;
        let e =
            tail.evaluate_groups(source, segs, of, Some(frozen), &flat(&delta, &active), true)?;
        for (k, &g) in active.iter().enumerate() {
            let reached = outcome(&e, of, k, g, step - 1);
            if reached.probs.iter().all(|&p| p >= opts.aim) {
                done[g] = Some(reached);
                continue;
            }
            let norm = groups[g].norm;
            let lr = opts.rate * norm / (d as f32).sqrt();
            let k2 = 2.0 * opts.decay / (norm * norm);
            let count = groups[g].segs.len() as f32;
            let grad = &e.grad[k * d..(k + 1) * d];
            let (delta, m, v) = (&mut delta[g], &mut m[g], &mut v[g]);
            for i in 0..d {
                let gr = grad[i] / count + k2 * delta[i];
                m[i] = b1 * m[i] + (1.0 - b1) * gr;
                v[i] = b2 * v[i] + (1.0 - b2) * gr * gr;
                let mh = m[i] / (1.0 - b1.powi(step as i32));
                let vh = v[i] / (1.0 - b2.powi(step as i32));
                delta[i] -= lr * mh / (vh.sqrt() + eps);
            }
            let len = delta.iter().map(|x| x * x).sum::<f32>().sqrt();
            let cap = opts.max_norm * norm;
            if len > cap {
                delta.iter_mut().for_each(|x| *x *= cap / len);
            }
        }
        let still: Vec<usize> = active
            .iter()
            .copied()
            .filter(|&g| done[g].is_none())
            .collect();
        if still.is_empty() {
            break;
        }
        if still.len() != active.len() {
            active = still;
            pass = pass_of(&active);
        }
    }
    // The values that used every step (those still active, `pass` theirs): their
    // evaluation at the last δ.
    if active.iter().any(|&g| done[g].is_none()) {
        let (segs, of, frozen) = &pass;
        let e = tail.evaluate_groups(
            source,
            segs,
            of,
            Some(frozen),
            &flat(&delta, &active),
            false,
        )?;
        for (k, &g) in active.iter().enumerate() {
            done[g] = Some(outcome(&e, of, k, g, opts.steps));
        }
    }
    delta
        .into_iter()
        .zip(done)
        .map(|(dl, e)| {
            e.map(|e| (dl, e))
                .ok_or_else(|| ExecError::Internal("a value was not evaluated".into()))
        })
        .collect()
}

/// Σ weight · −log p(target) of `segs` at `probs`.
fn group_loss(segs: &[Segment], probs: &[f32]) -> f32 {
    segs.iter()
        .zip(probs)
        .map(|(s, &p)| -(p.max(f32::MIN_POSITIVE)).ln() * s.weight)
        .sum()
}
