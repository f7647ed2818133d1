//! Reverse-mode gradients through the decoder layers above one layer: what an edit's value
//! optimisation needs (docs/editing.md, "The subject's value").
//!
//! ```text
//!  start  residual stream after layer first − 1 of each prompt   [T × hidden]
//!  x      start, with δ added at one position (the subject's last token)
//!  layers first .. n_layers (attention, FFN with the overlay in force), final norm, head
//!  loss   Σ_prompts weight · −log p(target | prompt) at the prompt's last position
//!  grad   ∂loss/∂δ, by the chain rule back through every layer and position
//! ```
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
use lql_storage::surface::{Activation, RopePairing};

use crate::backend::encoded;
use crate::error::{ExecError, Result};
use crate::kernels::{rope_from, RopeTable};
use crate::plan::{FfnPlan, Plan};

/// One layer's base operands, decoded to f32 (`[out × in]` row-major).
struct DenseLayer {
    index: usize,
    attn_norm: Vec<f32>,
    wq: Vec<f32>,
    wk: Vec<f32>,
    wv: Vec<f32>,
    wo: Vec<f32>,
    q_bias: Option<Vec<f32>>,
    k_bias: Option<Vec<f32>>,
    v_bias: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    wg: Vec<f32>,
    wu: Vec<f32>,
    wd: Vec<f32>,
    gate_bias: Option<Vec<f32>>,
    up_bias: Option<Vec<f32>>,
}

/// The layers from `first` on, the final norm and the head, decoded to f32.
pub struct DenseTail {
    first: usize,
    layers: Vec<DenseLayer>,
    out_norm: Vec<f32>,
    head: Vec<f32>,
    hidden: usize,
    ffn: usize,
    vocab: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    eps: f32,
    rope_theta: f32,
    pairing: RopePairing,
    activation: Activation,
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
    /// The residual stream between attention and FFN — also the gradient of the attention
    /// sub-block's output, which it is the sum of.
    pub resid_mid: Vec<f32>,
    /// The residual stream leaving the layer — also the gradient of the FFN's output.
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
/// segment, this layer's), and the rotary table of their positions.
#[derive(Clone, Copy)]
struct Rows<'a> {
    spans: &'a [Span],
    prefix: Option<&'a [(Vec<f32>, Vec<f32>)]>,
    table: &'a RopeTable,
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
            row.iter_mut().zip(b).for_each(|(v, x)| *v += *x);
        }
    }
}

/// RMSNorm of each row; returns each row's inverse root mean square.
fn rmsnorm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) -> Vec<f32> {
    let d = w.len();
    x.chunks_exact(d)
        .zip(out.chunks_exact_mut(d))
        .map(|(xr, or)| {
            let ss: f32 = xr.iter().map(|v| v * v).sum::<f32>() / d as f32;
            let inv = 1.0 / (ss + eps).sqrt();
            for ((o, xi), wi) in or.iter_mut().zip(xr).zip(w) {
                *o = xi * inv * wi;
            }
            inv
        })
        .collect()
}

/// `dx += ∂(rmsnorm(x)·w)/∂x · dy`, row by row.
fn rmsnorm_back(x: &[f32], inv: &[f32], w: &[f32], dy: &[f32], dx: &mut [f32]) {
    let d = w.len();
    for (((xr, &r), dyr), dxr) in x
        .chunks_exact(d)
        .zip(inv)
        .zip(dy.chunks_exact(d))
        .zip(dx.chunks_exact_mut(d))
    {
        let dot: f32 = dyr.iter().zip(w).zip(xr).map(|((g, w), x)| g * w * x).sum();
        let c = r * r * r * dot / d as f32;
        for (((o, g), wi), xi) in dxr.iter_mut().zip(dyr).zip(w).zip(xr) {
            *o += r * g * wi - c * xi;
        }
    }
}

/// The gate activation and its derivative at `x`.
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

/// What the forward pass keeps of one layer for the backward pass.
struct Saved {
    x: Vec<f32>,
    inv1: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    /// Per segment, `[heads × T × T]` softmax weights (zero above the diagonal).
    probs: Vec<Vec<f32>>,
    x2: Vec<f32>,
    inv2: Vec<f32>,
    g: Vec<f32>,
    up: Vec<f32>,
    ga: Vec<f32>,
    ua: Vec<f32>,
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
        if !s.block.is_plain() {
            return Err(ExecError::Unsupported(format!(
                "not supported yet: the subject write (value optimisation) through the {} block's {}; pin the edit with INSERT … AT LAYER n",
                s.source_architecture,
                s.block.features().join(", ")
            )));
        }
        let mut layers = Vec::new();
        for lp in &plan.layers[first..] {
            let FfnPlan::Dense {
                gate,
                up,
                down,
                gate_bias,
                up_bias,
            } = &lp.ffn
            else {
                return Err(ExecError::Unsupported(
                    "value optimisation through a bank of experts".into(),
                ));
            };
            layers.push(DenseLayer {
                index: lp.index,
                attn_norm: lp.attn_norm.clone(),
                wq: decode(source, lp.q)?.0,
                wk: decode(source, lp.k)?.0,
                wv: decode(source, lp.v)?.0,
                wo: decode(source, lp.o)?.0,
                q_bias: lp.q_bias.clone(),
                k_bias: lp.k_bias.clone(),
                v_bias: lp.v_bias.clone(),
                ffn_norm: lp.ffn_norm.clone(),
                wg: decode(source, *gate)?.0,
                wu: decode(source, *up)?.0,
                wd: decode(source, *down)?.0,
                gate_bias: gate_bias.clone(),
                up_bias: up_bias.clone(),
            });
        }
        let (head, vocab, _) = decode(source, plan.head)?;
        Ok(DenseTail {
            first,
            layers,
            out_norm: plan.output_norm.clone(),
            head,
            hidden: s.hidden,
            ffn: s.ffn,
            vocab,
            n_heads: s.n_heads,
            n_kv_heads: s.n_kv_heads,
            head_dim: s.head_dim,
            eps: s.norm_eps,
            rope_theta: s.rope_theta,
            pairing: s.rope_pairing,
            activation: s.activation,
        })
    }

    /// The first layer the tail runs.
    pub fn first(&self) -> usize {
        self.first
    }

    /// The bytes its decoded f32 operands hold.
    pub fn bytes(&self) -> usize {
        let opt = |v: &Option<Vec<f32>>| v.as_ref().map_or(0, Vec::len);
        let floats: usize = self
            .layers
            .iter()
            .map(|l| {
                l.attn_norm.len()
                    + l.wq.len()
                    + l.wk.len()
                    + l.wv.len()
                    + l.wo.len()
                    + opt(&l.q_bias)
                    + opt(&l.k_bias)
                    + opt(&l.v_bias)
                    + l.ffn_norm.len()
                    + l.wg.len()
                    + l.wu.len()
                    + l.wd.len()
                    + opt(&l.gate_bias)
                    + opt(&l.up_bias)
            })
            .sum::<usize>()
            + self.out_norm.len()
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
        let table = self.table(&spans);
        let kvd = self.n_kv_heads * self.head_dim;
        let mut kv = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            let ov = source.ffn_overlay(layer.index);
            let (next, sv) = self.layer_forward(
                layer,
                ov,
                x,
                Rows {
                    spans: &spans,
                    prefix: None,
                    table: &table,
                },
            );
            x = next;
            kv.push(
                spans
                    .iter()
                    .zip(segs)
                    .map(|(sp, sg)| {
                        let r = sp.row..sp.row + sg.pos;
                        (
                            sv.k[r.start * kvd..r.end * kvd].to_vec(),
                            sv.v[r.start * kvd..r.end * kvd].to_vec(),
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

    fn table(&self, spans: &[Span]) -> RopeTable {
        let max_t = spans.iter().map(|s| s.p0 + s.len).max().unwrap_or(0);
        RopeTable::new(0, max_t, self.head_dim, self.rope_theta)
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
        let table = self.table(&spans);
        let mut saved = Vec::with_capacity(self.layers.len());
        for (li, layer) in self.layers.iter().enumerate() {
            let ov = source.ffn_overlay(layer.index);
            let prefix = frozen.map(|f| &f.kv[li][..]);
            let (next, sv) = self.layer_forward(
                layer,
                ov,
                x,
                Rows {
                    spans: &spans,
                    prefix,
                    table: &table,
                },
            );
            x = next;
            if grad {
                saved.push(sv);
            }
        }
        // Final norm and head at each segment's last row.
        let n = segs.len();
        let mut last = Vec::with_capacity(n * d);
        for sp in &spans {
            let e = sp.row + sp.len;
            last.extend_from_slice(&x[(e - 1) * d..e * d]);
        }
        let mut z = vec![0.0f32; n * d];
        let inv = rmsnorm(&last, &self.out_norm, self.eps, &mut z);
        let mut logits = vec![0.0f32; n * self.vocab];
        xwt(&z, &self.head, n, self.vocab, d, &mut logits, false);
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
        let mut dz = vec![0.0f32; n * d];
        xw(&dlogits, &self.head, n, self.vocab, d, &mut dz, false);
        let mut dlast = vec![0.0f32; n * d];
        rmsnorm_back(&last, &inv, &self.out_norm, &dz, &mut dlast);
        let mut dx = vec![0.0f32; rows * d];
        for (i, sp) in spans.iter().enumerate() {
            let e = sp.row + sp.len;
            dx[(e - 1) * d..e * d].copy_from_slice(&dlast[i * d..(i + 1) * d]);
        }
        for (li, (layer, sv)) in self.layers.iter().zip(&saved).enumerate().rev() {
            let ov = source.ffn_overlay(layer.index);
            let prefix = frozen.map(|f| &f.kv[li][..]);
            dx = self.layer_backward(
                layer,
                ov,
                sv,
                dx,
                Rows {
                    spans: &spans,
                    prefix,
                    table: &table,
                },
                None,
            );
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
    /// from the logits this pass computes. What attribution patching multiplies the
    /// difference of two runs' activations by.
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
        let table = self.table(&spans);
        let rows = Rows {
            spans: &spans,
            prefix: None,
            table: &table,
        };
        let mut x = start.to_vec();
        let mut saved = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            let ov = source.ffn_overlay(layer.index);
            let (next, sv) = self.layer_forward(layer, ov, x, rows);
            x = next;
            saved.push(sv);
        }
        let last = &x[(t - 1) * d..];
        let mut z = vec![0.0f32; d];
        let inv = rmsnorm(last, &self.out_norm, self.eps, &mut z);
        let mut logits = vec![0.0f32; self.vocab];
        xwt(&z, &self.head, 1, self.vocab, d, &mut logits, false);
        let dlogits = dmetric(&logits);
        if dlogits.len() != self.vocab {
            return Err(ExecError::Internal(
                "∂metric/∂logits is not one vocabulary row".into(),
            ));
        }
        let mut dz = vec![0.0f32; d];
        xw(&dlogits, &self.head, 1, self.vocab, d, &mut dz, false);
        let mut dx = vec![0.0f32; t * d];
        rmsnorm_back(last, &inv, &self.out_norm, &dz, &mut dx[(t - 1) * d..]);
        let mut out: Vec<LayerGradients> = Vec::with_capacity(self.layers.len());
        for (layer, sv) in self.layers.iter().zip(&saved).rev() {
            let ov = source.ffn_overlay(layer.index);
            let mut g = LayerGradients {
                layer: layer.index,
                ..LayerGradients::default()
            };
            dx = self.layer_backward(layer, ov, sv, dx, rows, Some(&mut g));
            out.push(g);
        }
        out.reverse();
        Ok(out)
    }

    fn layer_forward(
        &self,
        l: &DenseLayer,
        ov: Option<&LayerOverlay>,
        x: Vec<f32>,
        at: Rows<'_>,
    ) -> (Vec<f32>, Saved) {
        let Rows {
            spans,
            prefix,
            table,
        } = at;
        let (d, ff, hd) = (self.hidden, self.ffn, self.head_dim);
        let (qd, kvd) = (self.n_heads * hd, self.n_kv_heads * hd);
        let rows = x.len() / d;
        let mut h = vec![0.0f32; rows * d];
        let inv1 = rmsnorm(&x, &l.attn_norm, self.eps, &mut h);
        let mut q = vec![0.0f32; rows * qd];
        let mut k = vec![0.0f32; rows * kvd];
        let mut v = vec![0.0f32; rows * kvd];
        xwt(&h, &l.wq, rows, qd, d, &mut q, false);
        xwt(&h, &l.wk, rows, kvd, d, &mut k, false);
        xwt(&h, &l.wv, rows, kvd, d, &mut v, false);
        add_rows(&mut q, l.q_bias.as_ref());
        add_rows(&mut k, l.k_bias.as_ref());
        add_rows(&mut v, l.v_bias.as_ref());
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
        let group = self.n_heads / self.n_kv_heads.max(1);
        let scale = 1.0 / (hd as f32).sqrt();
        let mut att = vec![0.0f32; rows * qd];
        let mut probs = Vec::with_capacity(spans.len());
        for (si, sp) in spans.iter().enumerate() {
            let (t, total) = (sp.len, sp.p0 + sp.len);
            let kv = KvRows {
                prefix: prefix.map(|p| &p[si]),
                k: &k,
                v: &v,
                span: *sp,
                kvd,
            };
            let mut p = vec![0.0f32; self.n_heads * t * total];
            for head in 0..self.n_heads {
                let kvh = head / group;
                for i in 0..t {
                    let qi = &q[(sp.row + i) * qd + head * hd..][..hd];
                    let pr = &mut p[(head * t + i) * total..][..total];
                    let visible = sp.p0 + i + 1;
                    let mut max = f32::NEG_INFINITY;
                    for (j, pj) in pr.iter_mut().enumerate().take(visible) {
                        let kj = &kv.key(j)[kvh * hd..][..hd];
                        *pj = qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f32>() * scale;
                        max = max.max(*pj);
                    }
                    let mut sum = 0.0f32;
                    for pj in pr.iter_mut().take(visible) {
                        *pj = (*pj - max).exp();
                        sum += *pj;
                    }
                    let out = &mut att[(sp.row + i) * qd + head * hd..][..hd];
                    for (j, pj) in pr.iter_mut().enumerate().take(visible) {
                        *pj /= sum;
                        let vj = &kv.value(j)[kvh * hd..][..hd];
                        out.iter_mut().zip(vj).for_each(|(a, b)| *a += *pj * b);
                    }
                }
            }
            probs.push(p);
        }
        let mut x2 = x.clone();
        xwt(&att, &l.wo, rows, d, qd, &mut x2, true);
        let mut h2 = vec![0.0f32; rows * d];
        let inv2 = rmsnorm(&x2, &l.ffn_norm, self.eps, &mut h2);
        let mut g = vec![0.0f32; rows * ff];
        let mut up = vec![0.0f32; rows * ff];
        xwt(&h2, &l.wg, rows, ff, d, &mut g, false);
        xwt(&h2, &l.wu, rows, ff, d, &mut up, false);
        add_rows(&mut g, l.gate_bias.as_ref());
        add_rows(&mut up, l.up_bias.as_ref());
        let (gs, ds) = scales(ov, ff);
        let mut a = vec![0.0f32; rows * ff];
        for r in 0..rows {
            for f in 0..ff {
                let i = r * ff + f;
                g[i] *= gs.map_or(1.0, |s| s[f]);
                a[i] = act(self.activation, g[i]).0 * up[i] * ds.map_or(1.0, |s| s[f]);
            }
        }
        let mut out = x2.clone();
        xwt(&a, &l.wd, rows, d, ff, &mut out, true);
        let (mut ga, mut ua) = (Vec::new(), Vec::new());
        if let Some(o) = ov.filter(|o| o.added() > 0) {
            let kk = o.added();
            ga = vec![0.0f32; rows * kk];
            ua = vec![0.0f32; rows * kk];
            xwt(&h2, &o.gate, rows, kk, d, &mut ga, false);
            xwt(&h2, &o.up, rows, kk, d, &mut ua, false);
            add_rows(&mut ga, Some(&o.gate_bias));
            add_rows(&mut ua, Some(&o.up_bias));
            let mut aa = vec![0.0f32; rows * kk];
            for r in 0..rows {
                for i in 0..kk {
                    let j = r * kk + i;
                    ga[j] *= o.gate_scale.as_ref().map_or(1.0, |s| s[o.ffn + i]);
                    let dsc = o.down_scale.as_ref().map_or(1.0, |s| s[o.ffn + i]);
                    aa[j] = act(self.activation, ga[j]).0 * ua[j] * dsc;
                }
            }
            // `o.down` is `[k × hidden]`: out += aa · down.
            xw(&aa, &o.down, rows, kk, d, &mut out, true);
        }
        (
            out,
            Saved {
                x,
                inv1,
                q,
                k,
                v,
                probs,
                x2,
                inv2,
                g,
                up,
                ga,
                ua,
            },
        )
    }

    fn layer_backward(
        &self,
        l: &DenseLayer,
        ov: Option<&LayerOverlay>,
        s: &Saved,
        dout: Vec<f32>,
        at: Rows<'_>,
        mut taps: Option<&mut LayerGradients>,
    ) -> Vec<f32> {
        let Rows {
            spans,
            prefix,
            table,
        } = at;
        let (d, ff, hd) = (self.hidden, self.ffn, self.head_dim);
        let (qd, kvd) = (self.n_heads * hd, self.n_kv_heads * hd);
        let rows = dout.len() / d;
        // FFN block.
        let (gs, ds) = scales(ov, ff);
        let mut da = vec![0.0f32; rows * ff];
        xw(&dout, &l.wd, rows, d, ff, &mut da, false);
        let mut dg = vec![0.0f32; rows * ff];
        for r in 0..rows {
            for f in 0..ff {
                let i = r * ff + f;
                let dai = da[i] * ds.map_or(1.0, |s| s[f]);
                let (a, da_dg) = act(self.activation, s.g[i]);
                dg[i] = dai * s.up[i] * da_dg * gs.map_or(1.0, |s| s[f]);
                da[i] = dai * a; // now ∂/∂up
            }
        }
        let mut dh2 = vec![0.0f32; rows * d];
        xw(&dg, &l.wg, rows, ff, d, &mut dh2, false);
        xw(&da, &l.wu, rows, ff, d, &mut dh2, true);
        if let Some(o) = ov.filter(|o| o.added() > 0) {
            let kk = o.added();
            let mut daa = vec![0.0f32; rows * kk];
            xwt(&dout, &o.down, rows, kk, d, &mut daa, false);
            let mut dga = vec![0.0f32; rows * kk];
            for r in 0..rows {
                for i in 0..kk {
                    let j = r * kk + i;
                    let dsc = o.down_scale.as_ref().map_or(1.0, |s| s[o.ffn + i]);
                    let gsc = o.gate_scale.as_ref().map_or(1.0, |s| s[o.ffn + i]);
                    let dj = daa[j] * dsc;
                    let (a, da_dg) = act(self.activation, s.ga[j]);
                    dga[j] = dj * s.ua[j] * da_dg * gsc;
                    daa[j] = dj * a;
                }
            }
            xw(&dga, &o.gate, rows, kk, d, &mut dh2, true);
            xw(&daa, &o.up, rows, kk, d, &mut dh2, true);
        }
        if let Some(t) = taps.as_deref_mut() {
            t.resid_post = dout.clone();
        }
        let mut dx2 = dout;
        rmsnorm_back(&s.x2, &s.inv2, &l.ffn_norm, &dh2, &mut dx2);
        // Attention block.
        let mut datt = vec![0.0f32; rows * qd];
        xw(&dx2, &l.wo, rows, d, qd, &mut datt, false);
        if let Some(t) = taps.as_deref_mut() {
            t.resid_mid = dx2.clone();
            t.head_outputs = datt.clone();
        }
        let group = self.n_heads / self.n_kv_heads.max(1);
        let scale = 1.0 / (hd as f32).sqrt();
        let mut dq = vec![0.0f32; rows * qd];
        let mut dk = vec![0.0f32; rows * kvd];
        let mut dv = vec![0.0f32; rows * kvd];
        for (si, (sp, p)) in spans.iter().zip(&s.probs).enumerate() {
            let (o, t, total) = (sp.row, sp.len, sp.p0 + sp.len);
            let kv = KvRows {
                prefix: prefix.map(|p| &p[si]),
                k: &s.k,
                v: &s.v,
                span: *sp,
                kvd,
            };
            let mut dp = vec![0.0f32; total];
            for head in 0..self.n_heads {
                let kvh = head / group;
                for i in 0..t {
                    let visible = sp.p0 + i + 1;
                    let doi = &datt[(o + i) * qd + head * hd..][..hd];
                    let pr = &p[(head * t + i) * total..][..total];
                    let mut dot = 0.0f32;
                    for j in 0..visible {
                        let vj = &kv.value(j)[kvh * hd..][..hd];
                        dp[j] = doi.iter().zip(vj).map(|(a, b)| a * b).sum();
                        dot += pr[j] * dp[j];
                        if j >= sp.p0 {
                            let r = o + j - sp.p0;
                            let dvj = &mut dv[r * kvd + kvh * hd..][..hd];
                            dvj.iter_mut().zip(doi).for_each(|(a, b)| *a += pr[j] * b);
                        }
                    }
                    for j in 0..visible {
                        let dsij = pr[j] * (dp[j] - dot) * scale;
                        if dsij == 0.0 {
                            continue;
                        }
                        let kj = &kv.key(j)[kvh * hd..][..hd];
                        let dqi = &mut dq[(o + i) * qd + head * hd..][..hd];
                        dqi.iter_mut().zip(kj).for_each(|(a, b)| *a += dsij * b);
                        if j >= sp.p0 {
                            let r = o + j - sp.p0;
                            let qi = &s.q[(o + i) * qd + head * hd..][..hd];
                            let dkj = &mut dk[r * kvd + kvh * hd..][..hd];
                            dkj.iter_mut().zip(qi).for_each(|(a, b)| *a += dsij * b);
                        }
                    }
                }
            }
        }
        // The rotation's transpose is the rotation by the opposite angle.
        let back = RopeTable {
            half: table.half,
            cos: table.cos.clone(),
            sin: table.sin.iter().map(|v| -v).collect(),
        };
        for sp in spans {
            let (a, b) = (sp.row, sp.row + sp.len);
            rope_from(
                &mut dq[a * qd..b * qd],
                sp.p0,
                self.n_heads,
                hd,
                &back,
                self.pairing,
            );
            rope_from(
                &mut dk[a * kvd..b * kvd],
                sp.p0,
                self.n_kv_heads,
                hd,
                &back,
                self.pairing,
            );
        }
        let mut dh = vec![0.0f32; rows * d];
        xw(&dq, &l.wq, rows, qd, d, &mut dh, false);
        xw(&dk, &l.wk, rows, kvd, d, &mut dh, true);
        xw(&dv, &l.wv, rows, kvd, d, &mut dh, true);
        let mut dx = dx2;
        rmsnorm_back(&s.x, &s.inv1, &l.attn_norm, &dh, &mut dx);
        if let Some(t) = taps {
            t.resid_pre = dx.clone();
        }
        dx
    }
}

/// The overlay's gate and down scales of the base features, when it has them.
fn scales(ov: Option<&LayerOverlay>, ff: usize) -> (Option<&[f32]>, Option<&[f32]>) {
    (
        ov.and_then(|o| first(o.gate_scale.as_ref(), ff)),
        ov.and_then(|o| first(o.down_scale.as_ref(), ff)),
    )
}

fn first(s: Option<&Vec<f32>>, n: usize) -> Option<&[f32]> {
    s.filter(|s| s.len() >= n).map(|s| &s[..n])
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
