//! The forward pass: runs the operation plan over new positions, appending to the
//! key/value cache, calling an observer if one is attached, and computing the logits asked
//! for. Generic: every fact comes from the [`Plan`]; nothing branches on an architecture.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use lql_storage::model::OperandSource;

use crate::backend::device::DeviceModel;
use crate::backend::Backend;
use crate::block::{self, view, Block, BlockBuffers, Seq, Taps};
use crate::error::{ExecError, Result};
use crate::kv::KvCache;
use crate::observer::{LayerRecord, Observer};
use crate::plan::Plan;
use crate::steer::Steering;

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
    /// Each layer the pass runs adds one (EXPLAIN ANALYZE's measured `layers_run=`).
    pub layers_run: &'a AtomicU64,
    /// The last layer this pass runs (`n_layers - 1` for a whole pass). A pass that stops
    /// early computes no logits.
    pub last_layer: usize,
    /// The model resident on the backend's device, when it has one: the pass runs there.
    pub device: Option<&'a dyn DeviceModel>,
    /// Vectors added to the residual stream leaving each layer.
    pub steering: Option<&'a Steering>,
    /// Where the FFN overlays come from, when not from `source` ([`Executor::with_overlay`]).
    ///
    /// [`Executor::with_overlay`]: crate::Executor::with_overlay
    pub overlay: Option<&'a dyn OperandSource>,
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
            if self.steering.is_some() {
                return Err(ExecError::Unsupported(
                    "not supported yet: steering on the GPU backend; USE the model with BACKEND cpu to steer it".into(),
                ));
            }
            if observer.as_deref().is_some_and(|o| o.wants_sites()) {
                return Err(ExecError::Unsupported(
                    "interventions inside the layers (activation patching, noise, steering) on the GPU backend; USE the model with BACKEND cpu for them".into(),
                ));
            }
            let out = dev.run(kv, input, want, observer, self.last_layer, self.cancel)?;
            // The device ran the stage's layers through the last one asked for.
            let ran = (self.last_layer + 1).saturating_sub(self.plan.stage.first);
            self.layers_run.fetch_add(ran as u64, Ordering::Relaxed);
            return Ok(out);
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
        let positions: Vec<usize> = (p0..p0 + n).collect();

        let mut x = match input {
            PassInput::Tokens(ids) => {
                let x = block::embed(self.source, plan, ids, &positions)?;
                if let Some(o) = obs.as_deref_mut() {
                    o.on_embedding(p0..p0 + n, &x);
                }
                x
            }
            PassInput::Hidden(h) => h.to_vec(),
        };

        let tables = block::rope_tables(plan, &positions);
        let steer = [self.steering];
        let overlays = [self.overlay];
        let layer = Block {
            source: self.source,
            plan,
            backend: be,
            tables: &tables,
            steering: &steer,
            overlays: &overlays,
        };
        let want_attn = obs.as_deref().is_some_and(|o| o.wants_attention());
        let total = p0 + n;
        let mut buf = BlockBuffers::new(plan, n);
        let mut weights = if want_attn {
            vec![0.0f32; n * s.n_heads * total]
        } else {
            Vec::new()
        };
        let seqs = [Seq { row: 0, n, p0 }];

        for lp in &plan.layers[..=self.last_layer - first_layer] {
            if self.cancel.load(Ordering::Relaxed) {
                return Err(ExecError::Cancelled);
            }
            let l = lp.index;
            layer.run(
                lp,
                l - first_layer,
                &mut x,
                &seqs,
                &mut [&mut *kv],
                &mut buf,
                Taps {
                    observe: obs.is_some().then_some(p0),
                    weights: want_attn.then_some(&mut weights[..]),
                    sites: match obs {
                        Some(ref mut o) if o.wants_sites() => Some(&mut **o),
                        _ => None,
                    },
                },
            )?;
            self.layers_run.fetch_add(1, Ordering::Relaxed);
            if let Some(o) = obs.as_deref_mut() {
                o.on_layer(&LayerRecord {
                    layer: l,
                    positions: p0..p0 + n,
                    hidden: d,
                    ffn: buf.ffn.observed_width(),
                    n_heads: s.n_heads,
                    residual: &x,
                    attn_delta: &buf.attn_delta,
                    ffn_delta: &buf.ffn_delta,
                    ffn_input: &buf.h,
                    gate: buf.ffn.observed_gate(),
                    activation: buf.ffn.observed_activation(),
                    added_gate: &buf.ffn.added.gate,
                    added_activation: &buf.ffn.added.activation,
                    attention: want_attn.then_some(&weights[..]),
                    routes: &buf.ffn.routes,
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
                        position: Some(p0 + i),
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
    block::final_norm(be, plan, x, &mut normed);
    if let Some(o) = obs {
        o.on_final_norm(positions, &normed);
    }
    let head = view(source, plan.head)?;
    if plan.head.role == lql_storage::Role::TokenEmbedding {
        // A tied head reads the whole embedding table (a gathered table is counted per row).
        source.record_read(head.dtype, head.bytes.len() as u64);
    }
    let mut logits = vec![0.0f32; m * s.vocab];
    be.matmul(&head, &normed, m, &mut logits)?;
    block::cap_logits(plan, &mut logits);
    Ok(logits)
}
