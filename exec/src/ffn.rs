//! The FFN block of a decoder layer, on the normed residual: the dense gated FFN
//! (`down · act(gate · h) * (up · h)`). The forward pass calls [`run`] once per layer and
//! adds the returned delta to the residual; the observer reads the gate pre-activations
//! and activations kept in [`FfnBuffers`].

use lql_storage::model::{OperandKey, OperandSource, TensorView};
use lql_storage::surface::Activation;

use crate::backend::Backend;
use crate::error::{ExecError, Result};
use crate::plan::LayerPlan;

/// Scratch space of the FFN block, reused across layers of one pass.
pub(crate) struct FfnBuffers {
    /// After [`run`]: the activations `act(gate) * up`, `[n × ffn]`.
    pub gate: Vec<f32>,
    up: Vec<f32>,
    /// After [`run`] with `keep_pre`: the gate pre-activations, `[n × ffn]`.
    pub gate_pre: Vec<f32>,
}

impl FfnBuffers {
    /// Buffers for `n` positions of an FFN `ff` wide.
    pub fn new(n: usize, ff: usize) -> Self {
        FfnBuffers {
            gate: vec![0.0; n * ff],
            up: vec![0.0; n * ff],
            gate_pre: Vec::new(),
        }
    }
}

/// Everything the FFN block reads besides its input.
pub(crate) struct FfnCtx<'a> {
    pub source: &'a dyn OperandSource,
    pub backend: &'a dyn Backend,
    pub activation: Activation,
}

fn view<'s>(source: &'s dyn OperandSource, key: OperandKey) -> Result<TensorView<'s>> {
    source.view(key).ok_or(ExecError::MissingOperand {
        operand: key.role.name(),
        layer: key.layer,
    })
}

/// The FFN block of layer `lp` over `n` normed rows `h` (`[n × hidden]`): writes the delta
/// to add to the residual into `out` (`[n × hidden]`). With `keep_pre` the gate
/// pre-activations are kept in `buf.gate_pre`.
pub(crate) fn run(
    cx: &FfnCtx<'_>,
    lp: &LayerPlan,
    h: &[f32],
    n: usize,
    buf: &mut FfnBuffers,
    keep_pre: bool,
    out: &mut [f32],
) -> Result<()> {
    dense(cx, lp, h, n, buf, keep_pre, out)
}

/// The dense gated FFN.
fn dense(
    cx: &FfnCtx<'_>,
    lp: &LayerPlan,
    h: &[f32],
    n: usize,
    buf: &mut FfnBuffers,
    keep_pre: bool,
    out: &mut [f32],
) -> Result<()> {
    let be = cx.backend;
    let (wg, wu) = (view(cx.source, lp.gate)?, view(cx.source, lp.up)?);
    be.matmul_group(&[wg, wu], h, n, &mut [&mut buf.gate, &mut buf.up])?;
    if keep_pre {
        buf.gate_pre.clear();
        buf.gate_pre.extend_from_slice(&buf.gate);
    }
    be.glu(cx.activation, &mut buf.gate, &buf.up);
    be.matmul(&view(cx.source, lp.down)?, &buf.gate, n, out)
}
