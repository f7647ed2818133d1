//! `GpuBackend`: the [`Backend`] whose forward passes run on a wgpu device. Its
//! [`DeviceBackend`] side makes each executor's operands resident ([`GpuModel`]); the host
//! operations of the trait (used outside the forward pass: gate scans, edits, the logit
//! lens) run on the CPU backend it carries.

use std::sync::Arc;

use lql_exec::backend::device::{DeviceBackend, DeviceModel};
use lql_exec::backend::AttnStep;
use lql_exec::{Backend, CpuBackend, ExecError, Plan};
use lql_storage::model::{OperandSource, TensorView};

use crate::context::Gpu;
use crate::model::GpuModel;

/// Forward passes on a GPU adapter; everything else on the CPU.
pub struct GpuBackend {
    gpu: Arc<Gpu>,
    cpu: CpuBackend,
    /// `BACKEND auto`: a plan the device cannot run (an encoding without a kernel, rows
    /// not in groups of 4 elements) or a device failure while preparing it runs on the CPU.
    fallback: bool,
}

impl std::fmt::Debug for GpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuBackend")
            .field("adapter", &self.gpu.adapter())
            .finish_non_exhaustive()
    }
}

impl GpuBackend {
    /// The backend on the best adapter (or the first whose name contains `adapter`), with
    /// `threads` CPU threads for the host operations (0: one per core). Fails with a typed
    /// "no GPU adapter" error when there is none.
    pub fn new(adapter: Option<&str>, threads: usize) -> Result<GpuBackend, ExecError> {
        let gpu = Gpu::open(adapter)?;
        Ok(GpuBackend {
            gpu,
            cpu: CpuBackend::new(threads)?,
            fallback: false,
        })
    }

    /// Make plans the device cannot run fall back to the CPU (`BACKEND auto`) instead of
    /// failing.
    pub fn with_fallback(mut self, fallback: bool) -> GpuBackend {
        self.fallback = fallback;
        self
    }

    /// The adapter's name.
    pub fn adapter(&self) -> &str {
        self.gpu.adapter()
    }

    /// One dequantising matrix product on the device, `out[t, r] = W.row(r) · x[t]` for
    /// `n` inputs (the kernel checks: every encoding against the CPU codec).
    pub fn matmul_once(
        &self,
        w: &TensorView<'_>,
        x: &[f32],
        n: usize,
    ) -> Result<Vec<f32>, ExecError> {
        crate::model::matmul_once(&self.gpu, w, x, n)
    }

    /// The arg-max (lowest id among ties) and its softmax probability of each of the rows of
    /// `logits` (`[rows × len]`), computed on the device: greedy sampling's read-back of two
    /// numbers per row.
    pub fn argmax_once(&self, logits: &[f32], len: usize) -> Result<Vec<(u32, f32)>, ExecError> {
        crate::model::argmax_once(&self.gpu, logits, len)
    }
}

impl DeviceBackend for GpuBackend {
    fn prepare(
        &self,
        source: Arc<dyn OperandSource>,
        plan: Arc<Plan>,
        previous: Option<&Arc<dyn DeviceModel>>,
    ) -> Result<Option<Arc<dyn DeviceModel>>, ExecError> {
        let prev = previous.and_then(|p| p.as_any().downcast_ref::<GpuModel>());
        match GpuModel::new(self.gpu.clone(), source, plan, prev) {
            Ok(m) => Ok(Some(Arc::new(m))),
            Err(ExecError::Unsupported(_) | ExecError::Device { .. }) if self.fallback => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn threads(&self) -> usize {
        self.cpu.threads()
    }

    fn device(&self) -> Option<&dyn DeviceBackend> {
        Some(self)
    }

    fn scope(&self, f: &mut (dyn FnMut() + Send)) {
        self.cpu.scope(f)
    }

    fn matvec(&self, w: &TensorView<'_>, x: &[f32], out: &mut [f32]) -> lql_exec::Result<()> {
        self.cpu.matvec(w, x, out)
    }

    fn matmul(
        &self,
        w: &TensorView<'_>,
        x: &[f32],
        n: usize,
        out: &mut [f32],
    ) -> lql_exec::Result<()> {
        self.cpu.matmul(w, x, n, out)
    }

    fn matmul_group(
        &self,
        ws: &[TensorView<'_>],
        x: &[f32],
        n: usize,
        outs: &mut [&mut [f32]],
    ) -> lql_exec::Result<()> {
        self.cpu.matmul_group(ws, x, n, outs)
    }

    fn attention(&self, step: &AttnStep<'_>, out: &mut [f32], weights: Option<&mut [f32]>) {
        self.cpu.attention(step, out, weights)
    }
}
