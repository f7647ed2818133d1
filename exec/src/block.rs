//! The decoder block on the host: runs a layer's steps ([`crate::program`], the one
//! definition of what a layer computes) for every host pass (a prompt or a decode step in
//! [`crate::forward`], the batched step of several sequences in [`crate::batch`]). Every
//! fact comes from the [`Plan`] (lowered from the surface's
//! [`lql_storage::surface::BlockSpec`]); nothing here knows a family or a placement.
//!
//! One layer runs over `m` rows of the residual stream `x`, the rows grouped into
//! sequences ([`Seq`]: its rows, its first position, its key/value cache); each kind of
//! [`Step`] is implemented once, in [`Block::run`].

use lql_storage::model::{OperandKey, OperandSource, TensorView};
use lql_storage::surface::{ExecutionSurface, NormKind, NormPlacement};

use crate::backend::{encoded, AttnGeometry, AttnRule, AttnStep, Backend};
use crate::error::{ExecError, Result};
use crate::ffn::{self, FfnBuffers, FfnCtx};
use crate::kernels::{self, add_in_place, RopeTable};
use crate::kv::KvCache;
use crate::observer::{Observer, Site};
use crate::plan::{LayerPlan, Plan};
use crate::program::{Step, Sub};
use crate::steer::Steering;

/// One sequence's rows in a block's input: rows `row .. row + n`, at positions
/// `p0 .. p0 + n` of its own cache.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seq {
    pub row: usize,
    pub n: usize,
    pub p0: usize,
}

/// The operand view of `key`, or the missing-operand error naming it.
pub(crate) fn view<'s>(source: &'s dyn OperandSource, key: OperandKey) -> Result<TensorView<'s>> {
    source.view(key).ok_or(ExecError::MissingOperand {
        operand: key.role.name(),
        layer: key.layer,
    })
}

/// `row += bias` for every row of `x` (one value per column; none or an empty bias adds
/// nothing).
pub(crate) fn add_bias_rows(x: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias.filter(|b| !b.is_empty()) {
        for row in x.chunks_exact_mut(b.len()) {
            add_in_place(row, b);
        }
    }
}

/// The block's norm of each row of `x` into `out`: RMSNorm, or LayerNorm with `bias`.
pub(crate) fn norm(
    be: &dyn Backend,
    s: &ExecutionSurface,
    x: &[f32],
    weight: &[f32],
    bias: Option<&Vec<f32>>,
    out: &mut [f32],
) {
    match (s.block.norm, bias) {
        (NormKind::Layer, Some(b)) => kernels::layernorm_rows(x, weight, b, s.norm_eps, out),
        _ => be.rmsnorm(x, weight, s.norm_eps, out),
    }
}

/// The input rows of `ids` at `positions`: token embeddings × the embedding scale, plus
/// learned position embeddings where the model has them.
pub(crate) fn embed(
    source: &dyn OperandSource,
    plan: &Plan,
    ids: &[u32],
    positions: &[usize],
) -> Result<Vec<f32>> {
    let s = &plan.surface;
    let d = s.hidden;
    let emb = view(source, plan.embedding)?;
    let pos = plan.positions.map(|k| view(source, k)).transpose()?;
    // A row per token is read (counted at the operand seam; the table is not read whole).
    source.record_read(emb.dtype, (ids.len() * emb.row_bytes()) as u64);
    if let Some(pe) = &pos {
        source.record_read(pe.dtype, (positions.len() * pe.row_bytes()) as u64);
    }
    let mut x = vec![0.0f32; ids.len() * d];
    let mut p_row = vec![0.0f32; if pos.is_some() { d } else { 0 }];
    for ((row, &id), &p) in x.chunks_exact_mut(d).zip(ids).zip(positions) {
        encoded::decode_row(emb.dtype, emb.row(id as usize), row)
            .map_err(ExecError::Unsupported)?;
        if s.embedding_scale != 1.0 {
            row.iter_mut().for_each(|v| *v *= s.embedding_scale);
        }
        if let Some(pe) = &pos {
            if p >= pe.rows() {
                return Err(ExecError::InvalidOption(format!(
                    "position {p} is past the {} learned positions of the model",
                    pe.rows()
                )));
            }
            encoded::decode_row(pe.dtype, pe.row(p), &mut p_row).map_err(ExecError::Unsupported)?;
            add_in_place(row, &p_row);
        }
    }
    Ok(x)
}

/// The RoPE tables of a block's rows (one per [`Plan::ropes`] entry), row `i` at
/// `positions[i]`.
pub(crate) fn rope_tables(plan: &Plan, positions: &[usize]) -> Vec<RopeTable> {
    plan.ropes
        .iter()
        .map(|spec| RopeTable::at(positions, spec))
        .collect()
}

/// The attention rule of layer `lp`: the block's query scale (`1 / sqrt(head_dim)` unless
/// it says otherwise), the layer's sliding window, the block's softcap.
pub fn attn_rule(plan: &Plan, lp: &LayerPlan) -> AttnRule {
    let s = &plan.surface;
    AttnRule {
        scale: if s.block.attn_scale > 0.0 {
            s.block.attn_scale
        } else {
            1.0 / (s.head_dim as f32).sqrt()
        },
        window: lp.window,
        softcap: s.block.attn_softcap,
    }
}

/// The scratch of one block over `m` rows, reused layer after layer.
pub(crate) struct BlockBuffers {
    pub h: Vec<f32>,
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub att: Vec<f32>,
    pub attn_delta: Vec<f32>,
    pub ffn_delta: Vec<f32>,
    /// Where a post-norm writes before it is swapped in (empty without post-norms).
    pub post: Vec<f32>,
    pub ffn: FfnBuffers,
}

impl BlockBuffers {
    pub fn new(plan: &Plan, m: usize) -> BlockBuffers {
        let d = plan.surface.hidden;
        BlockBuffers {
            h: vec![0.0; m * d],
            q: vec![0.0; m * plan.q_dim],
            k: vec![0.0; m * plan.kv_dim],
            v: vec![0.0; m * plan.kv_dim],
            att: vec![0.0; m * plan.q_dim],
            attn_delta: vec![0.0; m * d],
            ffn_delta: vec![0.0; m * d],
            post: if plan.layers.iter().any(|l| l.extra.attn_post_norm.is_some()) {
                vec![0.0; m * d]
            } else {
                Vec::new()
            },
            ffn: FfnBuffers::new(m, plan.surface.ffn),
        }
    }
}

/// What a pass asks of a layer beyond its result.
#[derive(Default)]
pub(crate) struct Taps<'a, 'o> {
    /// The FFN keeps what observers read, positions from this one.
    pub observe: Option<usize>,
    /// Attention weights `[m × n_heads × keys]` are written here (one sequence only).
    pub weights: Option<&'a mut [f32]>,
    /// Called at each [`Site`] with the rows of the new positions (one sequence only),
    /// which it may replace.
    pub sites: Option<&'a mut (dyn Observer + 'o)>,
}

/// What one layer reads.
pub(crate) struct Block<'a> {
    pub source: &'a dyn OperandSource,
    pub plan: &'a Plan,
    pub backend: &'a dyn Backend,
    /// One table per [`Plan::ropes`] entry over the rows' positions.
    pub tables: &'a [RopeTable],
    /// Per sequence (as `seqs` in [`Block::run`]), the steering added to its rows after
    /// each layer ([`crate::steer`]); shorter than `seqs` means none for the rest.
    pub steering: &'a [Option<&'a Steering>],
    /// Per sequence, the state whose FFN overlays its rows get (`None`, or shorter than
    /// `seqs`: `source`'s): a batched step of several edited states.
    pub overlays: &'a [Option<&'a dyn OperandSource>],
}

impl Block<'_> {
    /// Runs layer `lp` (the `kl`-th layer of its cache) over the rows of `x`, step by step
    /// ([`LayerPlan::steps`]); `kvs[i]` is sequence `seqs[i]`'s cache (appended to, not
    /// committed). `taps` says what else the layer exposes (observed FFN values, attention
    /// weights, site calls).
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        lp: &LayerPlan,
        kl: usize,
        x: &mut [f32],
        seqs: &[Seq],
        kvs: &mut [&mut KvCache],
        buf: &mut BlockBuffers,
        taps: Taps<'_, '_>,
    ) -> Result<()> {
        let Taps {
            observe,
            mut weights,
            mut sites,
        } = taps;
        let plan = self.plan;
        let s = &plan.surface;
        let be = self.backend;
        let m = x.len() / s.hidden;
        let (qd, kvd) = (plan.q_dim, plan.kv_dim);
        let e = &lp.extra;
        let p0 = seqs.first().map_or(0, |q| q.p0);
        let parallel = s.block.placement == NormPlacement::Parallel;
        let mut tap = |site: Site, rows: &mut [f32]| {
            if let Some(o) = sites.as_deref_mut() {
                o.at_site(site, lp.index, p0..p0 + m, rows);
            }
        };
        // Row ranges whose FFN overlays come from a state of their own (none: `source`'s).
        let overlay_rows: Vec<(std::ops::Range<usize>, &dyn OperandSource)> =
            if self.overlays.iter().any(Option::is_some) {
                seqs.iter()
                    .enumerate()
                    .map(|(i, q)| {
                        let src = self
                            .overlays
                            .get(i)
                            .copied()
                            .flatten()
                            .unwrap_or(self.source);
                        (q.row..q.row + q.n, src)
                    })
                    .collect()
            } else {
                Vec::new()
            };
        let ffn_cx = FfnCtx {
            source: self.source,
            backend: be,
            activation: s.activation,
            rows: &overlay_rows,
        };
        tap(Site::ResidPre, x);
        for step in &lp.steps {
            match *step {
                Step::Norm(Sub::Attn) => norm(
                    be,
                    s,
                    x,
                    &lp.attn_norm,
                    e.attn_norm_bias.as_ref(),
                    &mut buf.h,
                ),
                Step::Norm(Sub::Ffn) => {
                    norm(be, s, x, &lp.ffn_norm, e.ffn_norm_bias.as_ref(), &mut buf.h)
                }
                Step::TakeResidual => buf.h.copy_from_slice(x),
                Step::Project => {
                    let (wq, wk, wv) = (
                        view(self.source, lp.q)?,
                        view(self.source, lp.k)?,
                        view(self.source, lp.v)?,
                    );
                    be.matmul_group(
                        &[wq, wk, wv],
                        &buf.h,
                        m,
                        &mut [&mut buf.q, &mut buf.k, &mut buf.v],
                    )?;
                    add_bias_rows(&mut buf.q, lp.q_bias.as_deref());
                    add_bias_rows(&mut buf.k, lp.k_bias.as_deref());
                    add_bias_rows(&mut buf.v, lp.v_bias.as_deref());
                }
                Step::QkNorm => {
                    if let (Some(qn), Some(kn)) = (&e.q_norm, &e.k_norm) {
                        qk_norm(&mut buf.q, qn, s.norm_eps);
                        qk_norm(&mut buf.k, kn, s.norm_eps);
                    }
                }
                Step::Rope => {
                    if let Some(table) = self.tables.get(lp.rope) {
                        be.rope(&mut buf.q, s.n_heads, s.head_dim, table, s.rope_pairing);
                        be.rope(&mut buf.k, s.n_kv_heads, s.head_dim, table, s.rope_pairing);
                    }
                }
                Step::Attend => {
                    let geom = AttnGeometry {
                        n_heads: s.n_heads,
                        n_kv_heads: s.n_kv_heads,
                        head_dim: s.head_dim,
                    };
                    let rule = attn_rule(plan, lp);
                    for (seq, kv) in seqs.iter().zip(kvs.iter_mut()) {
                        let (r, n) = (seq.row, seq.n);
                        kv.append(
                            kl,
                            &buf.k[r * kvd..(r + n) * kvd],
                            &buf.v[r * kvd..(r + n) * kvd],
                        );
                        let (kc, vc) = kv.layer(kl);
                        let step = AttnStep {
                            q: &buf.q[r * qd..(r + n) * qd],
                            k_cache: kc,
                            v_cache: vc,
                            p0: seq.p0,
                            n,
                            geom,
                            rule,
                        };
                        be.attention(
                            &step,
                            &mut buf.att[r * qd..(r + n) * qd],
                            weights.as_deref_mut(),
                        );
                    }
                    tap(Site::HeadOutputs, &mut buf.att);
                }
                Step::Output => {
                    be.matmul(&view(self.source, lp.o)?, &buf.att, m, &mut buf.attn_delta)?;
                    add_bias_rows(&mut buf.attn_delta, e.o_bias.as_deref());
                }
                Step::PostNorm(sub) => {
                    let (delta, w) = match sub {
                        Sub::Attn => (&mut buf.attn_delta, &e.attn_post_norm),
                        Sub::Ffn => (&mut buf.ffn_delta, &e.ffn_post_norm),
                    };
                    if let Some(w) = w {
                        post_norm(be, s, delta, w, &mut buf.post);
                    }
                }
                Step::Ffn => {
                    ffn::run(
                        &ffn_cx,
                        lp,
                        &buf.h,
                        m,
                        &mut buf.ffn,
                        observe,
                        &mut buf.ffn_delta,
                    )?;
                }
                Step::Added => {
                    ffn::run_added(&ffn_cx, lp, &buf.h, m, &mut buf.ffn, &mut buf.ffn_delta);
                }
                Step::Residual(Sub::Attn) => {
                    tap(Site::AttnOut, &mut buf.attn_delta);
                    add_in_place(x, &buf.attn_delta);
                    if !parallel {
                        tap(Site::ResidMid, x);
                    }
                }
                Step::Residual(Sub::Ffn) => {
                    tap(Site::MlpOut, &mut buf.ffn_delta);
                    add_in_place(x, &buf.ffn_delta);
                }
            }
        }
        // Steering: llama.cpp's control-vector point, after the layer's last residual add.
        for (seq, steer) in seqs.iter().zip(self.steering) {
            if let Some(v) = steer.and_then(|s| s.at(lp.index)) {
                let d = s.hidden;
                for row in x[seq.row * d..(seq.row + seq.n) * d].chunks_exact_mut(d) {
                    add_in_place(row, v);
                }
            }
        }
        Ok(())
    }
}

/// RMSNorm of the queries or keys: per head when the weights are one head long, else over
/// the whole projection of each row.
fn qk_norm(x: &mut [f32], w: &[f32], eps: f32) {
    let src = x.to_vec();
    kernels::rmsnorm_rows(&src, w, eps, x);
}

/// `delta = rmsnorm(delta) · w` through the scratch `tmp` (same length): the post-norms
/// are RMSNorms in every family that has them.
fn post_norm(
    be: &dyn Backend,
    s: &ExecutionSurface,
    delta: &mut Vec<f32>,
    w: &[f32],
    tmp: &mut Vec<f32>,
) {
    be.rmsnorm(delta, w, s.norm_eps, tmp);
    std::mem::swap(delta, tmp);
}

/// The final norm of residual rows `x` (`[m × hidden]`) into `normed`.
pub fn final_norm(be: &dyn Backend, plan: &Plan, x: &[f32], normed: &mut [f32]) {
    norm(
        be,
        &plan.surface,
        x,
        &plan.output_norm,
        plan.output_norm_bias.as_ref(),
        normed,
    );
}

/// Applies the block's final softcap to logits, in place.
pub fn cap_logits(plan: &Plan, logits: &mut [f32]) {
    let cap = plan.surface.block.final_softcap;
    if cap > 0.0 {
        kernels::softcap(logits, cap);
    }
}
