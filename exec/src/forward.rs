//! The forward pass: runs the operation plan over new positions, appending to the
//! key/value cache, calling an observer if one is attached, and computing the logits asked
//! for. Generic: every fact comes from the [`Plan`]; nothing branches on an architecture.

use std::sync::atomic::{AtomicBool, Ordering};

use lql_storage::model::{OperandKey, OperandSource, TensorView};

use crate::backend::device::DeviceModel;
use crate::backend::{encoded, AttnGeometry, AttnStep, Backend};
use crate::error::{ExecError, Result};
use crate::ffn::{self, FfnBuffers, FfnCtx};
use crate::kernels::{add_in_place, RopeTable};
use crate::kv::KvCache;
use crate::observer::{LayerRecord, Observer};
use crate::plan::Plan;

/// Which positions' logits a pass computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsWanted {
    /// None (e.g. a residual walk): the head is skipped.
    None,
    /// The last new position only.
    Last,
    /// Every new position.
    All,
    /// No logits: the residual stream of the last new position after the last layer run
    /// (before the final norm), `[hidden]`; the head is left to [`head`].
    Residual,
    /// No logits: the residual stream of every new position after the last layer run,
    /// `[m × hidden]` (what a pipeline stage hands to the next one).
    Hidden,
}

/// What a pass starts from.
#[derive(Debug, Clone, Copy)]
pub enum PassInput<'a> {
    /// Token ids, embedded by the pass (the model or stage owns the input boundary).
    Tokens(&'a [u32]),
    /// Hidden states `[m × hidden]` handed over by the previous pipeline stage.
    Hidden(&'a [f32]),
}

/// Everything a pass reads.
pub(crate) struct Pass<'a> {
    pub source: &'a dyn OperandSource,
    pub plan: &'a Plan,
    pub backend: &'a dyn Backend,
    pub cancel: &'a AtomicBool,
    /// The last layer this pass runs (`n_layers - 1` for a whole pass). A pass that stops
    /// early computes no logits.
    pub last_layer: usize,
    /// The model resident on the backend's device, when it has one: the pass runs there.
    pub device: Option<&'a dyn DeviceModel>,
}

fn view<'s>(source: &'s dyn OperandSource, key: OperandKey) -> Result<TensorView<'s>> {
    source.view(key).ok_or(ExecError::MissingOperand {
        operand: key.role.name(),
        layer: key.layer,
    })
}

fn add_bias_rows(x: &mut [f32], bias: Option<&Vec<f32>>) {
    if let Some(b) = bias {
        for row in x.chunks_exact_mut(b.len()) {
            add_in_place(row, b);
        }
    }
}

impl Pass<'_> {
    /// Run `ids` at positions `kv.len() ..`; on success the cache holds them too.
    /// Returns the logits asked for, row-major `[m × vocab]`.
    pub fn run(
        &self,
        kv: &mut KvCache,
        ids: &[u32],
        want: LogitsWanted,
        observer: Option<&mut dyn Observer>,
    ) -> Result<Vec<f32>> {
        self.run_from(kv, PassInput::Tokens(ids), want, observer)
    }

    /// [`Pass::run`] from token ids or from the hidden states of a previous stage.
    pub fn run_from(
        &self,
        kv: &mut KvCache,
        input: PassInput<'_>,
        want: LogitsWanted,
        observer: Option<&mut dyn Observer>,
    ) -> Result<Vec<f32>> {
        if let Some(dev) = self.device {
            return dev.run(kv, input, want, observer, self.last_layer, self.cancel);
        }
        let start = kv.len();
        let mut result = Err(ExecError::Internal("forward pass did not run".into()));
        let mut observer = observer;
        self.backend.scope(&mut || {
            result = self.run_inner(kv, input, want, observer.take());
        });
        if result.is_err() {
            kv.truncate(start);
        }
        result
    }

    fn run_inner(
        &self,
        kv: &mut KvCache,
        input: PassInput<'_>,
        want: LogitsWanted,
        mut obs: Option<&mut dyn Observer>,
    ) -> Result<Vec<f32>> {
        let plan = self.plan;
        let s = &plan.surface;
        let be = self.backend;
        let d = s.hidden;
        let p0 = kv.len();
        let n = check_pass(plan, p0, input, want, self.last_layer)?;
        let first_layer = plan.stage.first;
        kv.reserve(n)?;
        let (qd, kvd, ff) = (plan.q_dim, plan.kv_dim, s.ffn);
        let positions = p0..p0 + n;

        let mut x = match input {
            PassInput::Tokens(ids) => {
                // Embedding.
                let emb = view(self.source, plan.embedding)?;
                let mut x = vec![0.0f32; n * d];
                for (row, &id) in x.chunks_exact_mut(d).zip(ids) {
                    encoded::decode_row(emb.dtype, emb.row(id as usize), row)
                        .map_err(ExecError::Unsupported)?;
                    if s.embedding_scale != 1.0 {
                        row.iter_mut().for_each(|v| *v *= s.embedding_scale);
                    }
                }
                if let Some(o) = obs.as_deref_mut() {
                    o.on_embedding(positions.clone(), &x);
                }
                x
            }
            PassInput::Hidden(h) => h.to_vec(),
        };

        let table = RopeTable::new(p0, n, s.head_dim, s.rope_theta);
        let geom = AttnGeometry {
            n_heads: s.n_heads,
            n_kv_heads: s.n_kv_heads,
            head_dim: s.head_dim,
        };
        let want_attn = obs.as_deref().is_some_and(|o| o.wants_attention());
        let total = p0 + n;
        let mut h = vec![0.0f32; n * d];
        let mut q = vec![0.0f32; n * qd];
        let mut k = vec![0.0f32; n * kvd];
        let mut v = vec![0.0f32; n * kvd];
        let mut att = vec![0.0f32; n * qd];
        let mut attn_delta = vec![0.0f32; n * d];
        let mut ffn_delta = vec![0.0f32; n * d];
        let mut ffn_buf = FfnBuffers::new(n, ff);
        let ffn_cx = FfnCtx {
            source: self.source,
            backend: be,
            activation: s.activation,
        };
        let mut weights = if want_attn {
            vec![0.0f32; n * s.n_heads * total]
        } else {
            Vec::new()
        };

        for lp in &plan.layers[..=self.last_layer - first_layer] {
            if self.cancel.load(Ordering::Relaxed) {
                return Err(ExecError::Cancelled);
            }
            let l = lp.index;
            let kl = l - first_layer;
            // Attention block.
            be.rmsnorm(&x, &lp.attn_norm, s.norm_eps, &mut h);
            let (wq, wk, wv) = (
                view(self.source, lp.q)?,
                view(self.source, lp.k)?,
                view(self.source, lp.v)?,
            );
            be.matmul_group(&[wq, wk, wv], &h, n, &mut [&mut q, &mut k, &mut v])?;
            add_bias_rows(&mut q, lp.q_bias.as_ref());
            add_bias_rows(&mut k, lp.k_bias.as_ref());
            add_bias_rows(&mut v, lp.v_bias.as_ref());
            be.rope(&mut q, s.n_heads, s.head_dim, &table, s.rope_pairing);
            be.rope(&mut k, s.n_kv_heads, s.head_dim, &table, s.rope_pairing);
            kv.append(kl, &k, &v);
            let (kc, vc) = kv.layer(kl);
            let step = AttnStep {
                q: &q,
                k_cache: kc,
                v_cache: vc,
                p0,
                n,
                geom,
            };
            be.attention(&step, &mut att, want_attn.then_some(&mut weights[..]));
            be.matmul(&view(self.source, lp.o)?, &att, n, &mut attn_delta)?;
            add_in_place(&mut x, &attn_delta);

            // FFN block.
            be.rmsnorm(&x, &lp.ffn_norm, s.norm_eps, &mut h);
            ffn::run(
                &ffn_cx,
                lp,
                &h,
                n,
                &mut ffn_buf,
                obs.is_some().then_some(p0),
                &mut ffn_delta,
            )?;
            add_in_place(&mut x, &ffn_delta);

            if let Some(o) = obs.as_deref_mut() {
                o.on_layer(&LayerRecord {
                    layer: l,
                    positions: positions.clone(),
                    hidden: d,
                    ffn: ffn_buf.observed_width(),
                    n_heads: s.n_heads,
                    residual: &x,
                    attn_delta: &attn_delta,
                    ffn_delta: &ffn_delta,
                    ffn_input: &h,
                    gate: ffn_buf.observed_gate(),
                    activation: ffn_buf.observed_activation(),
                    added_gate: &ffn_buf.added.gate,
                    added_activation: &ffn_buf.added.activation,
                    attention: want_attn.then_some(&weights[..]),
                    routes: &ffn_buf.routes,
                });
            }
        }
        kv.commit(n);

        // Final norm and head.
        let first = match want {
            LogitsWanted::None => return Ok(Vec::new()),
            LogitsWanted::Residual => return Ok(x[(n - 1) * d..].to_vec()),
            LogitsWanted::Hidden => return Ok(x),
            LogitsWanted::Last => n - 1,
            LogitsWanted::All => 0,
        };
        head(
            self.source,
            plan,
            be,
            &x[first * d..],
            p0 + first..p0 + n,
            obs,
        )
    }
}

/// The checks every pass makes before it runs, on the host or on a device: the input's
/// shape, the layers asked for, the token ids. Returns the number of new positions.
pub fn check_pass(
    plan: &Plan,
    p0: usize,
    input: PassInput<'_>,
    want: LogitsWanted,
    last_layer: usize,
) -> Result<usize> {
    let s = &plan.surface;
    let d = s.hidden;
    let n = match input {
        PassInput::Tokens(ids) => ids.len(),
        PassInput::Hidden(h) => {
            if d == 0 || !h.len().is_multiple_of(d) {
                return Err(ExecError::InvalidOption(format!(
                    "hidden states of {} floats are not whole rows of {d}",
                    h.len()
                )));
            }
            h.len() / d
        }
    };
    if n == 0 {
        return Err(ExecError::EmptyPrompt);
    }
    let first_layer = plan.stage.first;
    let end = first_layer + plan.layers.len();
    if last_layer < first_layer || last_layer >= end {
        return Err(ExecError::Internal(format!(
            "pass asked to stop after layer {last_layer} of a plan holding layers {first_layer}-{}",
            end.saturating_sub(1)
        )));
    }
    let partial = last_layer + 1 < end || !plan.stage.output;
    if partial && matches!(want, LogitsWanted::Last | LogitsWanted::All) {
        return Err(ExecError::Internal(
            "logits need every layer; this pass stops early".into(),
        ));
    }
    match input {
        PassInput::Tokens(ids) => {
            if !plan.stage.input {
                return Err(ExecError::InvalidOption(format!(
                    "this stage starts at layer {first_layer}: it takes hidden states, not tokens"
                )));
            }
            for (i, &id) in ids.iter().enumerate() {
                if id as usize >= s.vocab {
                    return Err(ExecError::TokenOutOfRange {
                        id,
                        position: p0 + i,
                        vocab: s.vocab,
                    });
                }
            }
        }
        PassInput::Hidden(_) => {
            if plan.stage.input {
                return Err(ExecError::InvalidOption(
                    "this stage owns the input boundary: it takes tokens, not hidden states".into(),
                ));
            }
        }
    }
    Ok(n)
}

/// Final norm and output head over residual rows `x` (`[m × hidden]`, at `positions`):
/// logits `[m × vocab]`. The same arithmetic whether it ends a pass or runs on its own.
pub(crate) fn head(
    source: &dyn OperandSource,
    plan: &Plan,
    be: &dyn Backend,
    x: &[f32],
    positions: std::ops::Range<usize>,
    obs: Option<&mut dyn Observer>,
) -> Result<Vec<f32>> {
    let s = &plan.surface;
    let d = s.hidden;
    if d == 0 || !x.len().is_multiple_of(d) {
        return Err(ExecError::Internal(format!(
            "head input of {} floats is not whole rows of {d}",
            x.len()
        )));
    }
    let m = x.len() / d;
    let mut normed = vec![0.0f32; m * d];
    be.rmsnorm(x, &plan.output_norm, s.norm_eps, &mut normed);
    if let Some(o) = obs {
        o.on_final_norm(positions, &normed);
    }
    let head = view(source, plan.head)?;
    let mut logits = vec![0.0f32; m * s.vocab];
    be.matmul(&head, &normed, m, &mut logits)?;
    Ok(logits)
}
