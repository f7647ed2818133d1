//! The `Backend` trait: the numeric operations the forward pass needs, over encoded
//! weights ([`TensorView`]) and f32 activations. The CPU backend ([`cpu::CpuBackend`])
//! runs them on the host; a backend with its own device (the `lql-gpu` crate) also offers
//! [`device::DeviceBackend`], and whole passes then run there.

pub mod attention;
pub mod cpu;
pub mod device;
pub mod encoded;

use lql_storage::model::TensorView;
use lql_storage::surface::{Activation, RopePairing};

use crate::error::Result;
use crate::kernels::{self, RopeTable};

/// Head geometry of one attention step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttnGeometry {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// How scores are formed and which keys a query sees, beyond causality.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnRule {
    /// Multiplies `q · k` (`1 / sqrt(head_dim)` unless the block says otherwise).
    pub scale: f32,
    /// A query at position `p` sees keys `p − window < j ≤ p`; 0 = every earlier key.
    pub window: usize,
    /// Scores become `cap · tanh(score / cap)`; 0 = no cap.
    pub softcap: f32,
}

impl AttnRule {
    /// Plain causal attention with the `1 / sqrt(head_dim)` scale.
    pub fn standard(head_dim: usize) -> AttnRule {
        AttnRule {
            scale: 1.0 / (head_dim as f32).sqrt(),
            window: 0,
            softcap: 0.0,
        }
    }

    /// The first key a query at position `p` sees.
    #[inline(always)]
    pub fn first_key(&self, p: usize) -> usize {
        if self.window == 0 {
            0
        } else {
            (p + 1).saturating_sub(self.window)
        }
    }
}

/// One causal attention step over the key/value cache.
///
/// `q` is `[n × n_heads × head_dim]` for the `n` new positions `p0 .. p0 + n`; the caches
/// hold `p0 + n` positions of `[n_kv_heads × head_dim]`. Query `i` attends to keys
/// `rule.first_key(p0 + i) ..= p0 + i`.
pub struct AttnStep<'a> {
    pub q: &'a [f32],
    pub k_cache: &'a [f32],
    pub v_cache: &'a [f32],
    pub p0: usize,
    pub n: usize,
    pub geom: AttnGeometry,
    pub rule: AttnRule,
}

/// The numeric operations of a forward pass.
pub trait Backend: Send + Sync {
    /// A short name (`cpu`).
    fn name(&self) -> &'static str;

    /// Worker threads used.
    fn threads(&self) -> usize;

    /// The device side, for a backend that runs whole passes on its own device (weights,
    /// activations and key/value cache resident there). `None`: passes run on the host
    /// through the operations below.
    fn device(&self) -> Option<&dyn device::DeviceBackend> {
        None
    }

    /// Run `f` with the backend's workers at hand (the CPU backend runs it inside its
    /// thread pool, so the many parallel operations of a forward pass pay no hand-off).
    fn scope(&self, f: &mut (dyn FnMut() + Send)) {
        f()
    }

    /// `out[r] = W.row(r) · x` for every row of `w`.
    fn matvec(&self, w: &TensorView<'_>, x: &[f32], out: &mut [f32]) -> Result<()>;

    /// `out[t, r] = W.row(r) · x[t]` for `n` inputs `x = [n × row_len]`, `out = [n × rows]`.
    fn matmul(&self, w: &TensorView<'_>, x: &[f32], n: usize, out: &mut [f32]) -> Result<()>;

    /// Several matrices applied to the same input (Q/K/V, gate/up): `outs[i] = ws[i] · x`.
    fn matmul_group(
        &self,
        ws: &[TensorView<'_>],
        x: &[f32],
        n: usize,
        outs: &mut [&mut [f32]],
    ) -> Result<()> {
        for (w, out) in ws.iter().zip(outs.iter_mut()) {
            self.matmul(w, x, n, out)?;
        }
        Ok(())
    }

    /// RMSNorm of each row of `x` (rows of `weight.len()`), into `out`.
    fn rmsnorm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        kernels::rmsnorm_rows(x, weight, eps, out)
    }

    /// Rotary embedding of `x = [n × n_heads × head_dim]`, in place.
    fn rope(
        &self,
        x: &mut [f32],
        n_heads: usize,
        head_dim: usize,
        table: &RopeTable,
        pairing: RopePairing,
    ) {
        kernels::rope(x, n_heads, head_dim, table, pairing)
    }

    /// `gate = act(gate) * up`, element-wise.
    fn glu(&self, act: Activation, gate: &mut [f32], up: &[f32]) {
        kernels::glu(act, gate, up)
    }

    /// Causal attention: writes `out = [n × n_heads × head_dim]`; when `weights` is given
    /// (`[n × n_heads × (p0 + n)]`) also the softmax weights, zero past each query's
    /// position.
    fn attention(&self, step: &AttnStep<'_>, out: &mut [f32], weights: Option<&mut [f32]>);
}
