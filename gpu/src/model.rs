//! One executor's model on the device and its forward pass: embedding lookup, per layer
//! RMSNorm → Q/K/V (+ biases) → RoPE → append to the device cache → attention → output
//! projection → residual add → RMSNorm → gate/up → activation → down → residual add, then
//! the final norm and head, all on the device. Only the logits asked for come back, and an
//! observer gets back what its hooks read (per layer: residual, deltas, FFN input, gate and
//! activation; the attention weights only when it asks for them).

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lql_exec::backend::device::DeviceModel;
use lql_exec::forward::{check_pass, LogitsWanted, PassInput};
use lql_exec::kernels::RopeTable;
use lql_exec::kv::KvCache;
use lql_exec::plan::{FfnPlan, Plan};
use lql_exec::{ExecError, LayerRecord, Observer};
use lql_storage::model::OperandSource;
use lql_storage::surface::{Activation, RopePairing};
use lql_storage::DType;

use crate::context::Gpu;
use crate::kv::GpuKv;
use crate::record::{pipelines_for, AttnDims, Recorder};
use crate::shaders::Pipelines;
use crate::weights::{make_resident, upload_bytes, upload_f32, Resident};

/// A plan's operands resident on a device, ready to run passes.
pub struct GpuModel {
    gpu: Arc<Gpu>,
    // Keeps the mapped operands alive as long as the plan that names them.
    _source: Arc<dyn OperandSource>,
    plan: Arc<Plan>,
    pub(crate) resident: Resident,
    ops: Pipelines,
    mats: HashMap<DType, Pipelines>,
}

impl GpuModel {
    pub(crate) fn new(
        gpu: Arc<Gpu>,
        source: Arc<dyn OperandSource>,
        plan: Arc<Plan>,
        previous: Option<&GpuModel>,
    ) -> Result<GpuModel, ExecError> {
        let resident = make_resident(&gpu, source.as_ref(), &plan, previous.map(|p| &p.resident))?;
        let (ops, mats) = pipelines_for(&gpu, resident.matrices.values().map(|m| m.dtype))?;
        Ok(GpuModel {
            gpu,
            _source: source,
            plan,
            resident,
            ops,
            mats,
        })
    }

    /// Bytes of weights this model uploaded.
    pub fn uploaded_bytes(&self) -> u64 {
        self.resident.bytes
    }

    fn recorder(&self) -> Recorder<'_> {
        Recorder::new(&self.gpu, self.ops.clone(), self.mats.clone())
    }

    fn pass(
        &self,
        kv: &mut KvCache,
        input: PassInput<'_>,
        want: LogitsWanted,
        mut obs: Option<&mut dyn Observer>,
        last_layer: usize,
        cancel: &AtomicBool,
    ) -> Result<Vec<f32>, ExecError> {
        let plan = &*self.plan;
        let s = &plan.surface;
        let p0 = kv.len();
        let n = check_pass(plan, p0, input, want, last_layer)?;
        let limit = kv.limit();
        kv.reserve(n)?;
        let layers_run = last_layer + 1 - plan.stage.first;
        let (d, qd, kvd) = (s.hidden, plan.q_dim, plan.kv_dim);
        let total = p0 + n;
        let positions = p0..total;
        let mut rec = self.recorder();
        let op = "the forward pass";

        // The device cache (made by the first pass of a session).
        let slot = kv.device_mut();
        if slot.is_none() {
            *slot = Some(Box::new(GpuKv::new(
                self.gpu.clone(),
                plan.layers.len(),
                kvd,
            )));
        }
        let dev_kv = slot
            .as_mut()
            .and_then(|b| b.as_any_mut().downcast_mut::<GpuKv>())
            .ok_or_else(|| {
                ExecError::Internal("the session's cache belongs to another backend".into())
            })?;
        dev_kv.ensure(&mut rec, total, p0, limit);

        // Input.
        let x = rec.buffer("x", n * d);
        match input {
            PassInput::Tokens(ids) => {
                let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
                let idb = upload_bytes(&self.gpu, "ids", &bytes, 0);
                let emb = self.resident.matrix(plan.embedding)?;
                rec.embed(emb, &idb, n, s.embedding_scale, &x)?;
                if let Some(o) = obs.as_deref_mut() {
                    let rows = rec.read(&x, 0, n * d, "the embedding")?;
                    o.on_embedding(positions.clone(), &rows);
                }
            }
            PassInput::Hidden(h) => {
                let src = upload_f32(&self.gpu, "hidden", h);
                rec.copy(&src, 0, &x, 0, n * d);
            }
        }

        let table = RopeTable::new(p0, n, s.head_dim, s.rope_theta);
        let cos = upload_f32(&self.gpu, "rope cos", &table.cos);
        let sin = upload_f32(&self.gpu, "rope sin", &table.sin);
        let half_split = s.rope_pairing == RopePairing::HalfSplit;
        let gelu = s.activation == Activation::Gelu;
        let want_attn = obs.as_deref().is_some_and(|o| o.wants_attention());
        let h = rec.buffer("h", n * d);
        let q = rec.buffer("q", n * qd);
        let k = rec.buffer("k", n * kvd);
        let v = rec.buffer("v", n * kvd);
        let att = rec.buffer("att", n * qd);
        let attn_delta = rec.buffer("attn_delta", n * d);
        let ffn_delta = rec.buffer("ffn_delta", n * d);
        let ff = s.ffn;
        let gate = rec.buffer("gate", n * ff);
        let up = rec.buffer("up", n * ff);
        let gate_pre = obs.is_some().then(|| rec.buffer("gate_pre", n * ff));
        let weights = rec.buffer("attention weights", n * s.n_heads * total);
        let dims = AttnDims {
            n: n as u32,
            p0: p0 as u32,
            n_heads: s.n_heads as u32,
            n_kv_heads: s.n_kv_heads as u32,
            head_dim: s.head_dim as u32,
        };

        for (kl, lp) in plan.layers[..layers_run].iter().enumerate() {
            if cancel.load(Ordering::Relaxed) {
                return Err(ExecError::Cancelled);
            }
            let vecs = &self.resident.layers[kl];
            let m = |key| self.resident.matrix(key);
            // Attention block.
            rec.rmsnorm(&x, &vecs.attn_norm, n, d, s.norm_eps, &h)?;
            rec.matmul(m(lp.q)?, &h, n, &q)?;
            rec.matmul(m(lp.k)?, &h, n, &k)?;
            rec.matmul(m(lp.v)?, &h, n, &v)?;
            for (buf, bias, len) in [
                (&q, &vecs.q_bias, qd),
                (&k, &vecs.k_bias, kvd),
                (&v, &vecs.v_bias, kvd),
            ] {
                if let Some(b) = bias {
                    rec.add(buf, b, n * len, len)?;
                }
            }
            rec.rope(&q, &cos, &sin, n, s.n_heads, s.head_dim, half_split)?;
            rec.rope(&k, &cos, &sin, n, s.n_kv_heads, s.head_dim, half_split)?;
            rec.copy(&k, 0, &dev_kv.k[kl], p0 * kvd, n * kvd);
            rec.copy(&v, 0, &dev_kv.v[kl], p0 * kvd, n * kvd);
            rec.attention(&q, &dev_kv.k[kl], &dev_kv.v[kl], dims, &att, &weights)?;
            rec.matmul(m(lp.o)?, &att, n, &attn_delta)?;
            rec.add(&x, &attn_delta, n * d, n * d)?;

            // FFN block.
            rec.rmsnorm(&x, &vecs.ffn_norm, n, d, s.norm_eps, &h)?;
            let FfnPlan::Dense {
                gate: wg,
                up: wu,
                down: wd,
                gate_bias,
                up_bias,
            } = &lp.ffn
            else {
                return Err(ExecError::Unsupported(
                    "expert banks on the gpu backend; use BACKEND cpu".into(),
                ));
            };
            if gate_bias.is_some() || up_bias.is_some() {
                return Err(ExecError::Unsupported(
                    "FFN gate/up biases (a compiled edited model) on the gpu backend; use BACKEND cpu"
                        .into(),
                ));
            }
            rec.matmul(m(*wg)?, &h, n, &gate)?;
            rec.matmul(m(*wu)?, &h, n, &up)?;
            if let Some(gp) = &gate_pre {
                rec.copy(&gate, 0, gp, 0, n * ff);
            }
            rec.glu(&gate, &up, n * ff, gelu)?;
            rec.matmul(m(*wd)?, &gate, n, &ffn_delta)?;
            rec.add(&x, &ffn_delta, n * d, n * d)?;

            if let (Some(o), Some(gp)) = (obs.as_deref_mut(), &gate_pre) {
                let what = format!("reading layer {} for an observer", lp.index);
                let residual = rec.read(&x, 0, n * d, &what)?;
                let ad = rec.read(&attn_delta, 0, n * d, &what)?;
                let fd = rec.read(&ffn_delta, 0, n * d, &what)?;
                let fin = rec.read(&h, 0, n * d, &what)?;
                let g = rec.read(gp, 0, n * ff, &what)?;
                let act = rec.read(&gate, 0, n * ff, &what)?;
                let attn = if want_attn {
                    Some(rec.read(&weights, 0, n * s.n_heads * total, &what)?)
                } else {
                    None
                };
                o.on_layer(&LayerRecord {
                    layer: lp.index,
                    positions: positions.clone(),
                    hidden: d,
                    ffn: ff,
                    n_heads: s.n_heads,
                    residual: &residual,
                    attn_delta: &ad,
                    ffn_delta: &fd,
                    ffn_input: &fin,
                    gate: &g,
                    activation: &act,
                    added_gate: &[],
                    added_activation: &[],
                    attention: attn.as_deref(),
                    routes: &[],
                });
            }
        }

        let first = match want {
            LogitsWanted::None => {
                rec.submit(op)?;
                self.gpu.wait(op)?;
                return Ok(Vec::new());
            }
            LogitsWanted::Residual => return rec.read(&x, (n - 1) * d, d, op),
            LogitsWanted::Hidden => return rec.read(&x, 0, n * d, op),
            LogitsWanted::Last => n - 1,
            LogitsWanted::All => 0,
        };
        self.head_rows(
            &mut rec,
            &x,
            first,
            n,
            positions.start + first..positions.end,
            obs,
        )
    }

    /// Final norm and head over rows `first..n` of `x`.
    fn head_rows(
        &self,
        rec: &mut Recorder<'_>,
        x: &wgpu::Buffer,
        first: usize,
        n: usize,
        positions: std::ops::Range<usize>,
        obs: Option<&mut dyn Observer>,
    ) -> Result<Vec<f32>, ExecError> {
        let plan = &*self.plan;
        let s = &plan.surface;
        let d = s.hidden;
        let m = n - first;
        let rows = rec.buffer("head rows", m * d);
        rec.copy(x, first * d, &rows, 0, m * d);
        let normed = rec.buffer("normed", m * d);
        let norm = self
            .resident
            .output_norm
            .as_ref()
            .ok_or_else(|| ExecError::Internal("this plan has no head".into()))?;
        rec.rmsnorm(&rows, norm, m, d, s.norm_eps, &normed)?;
        if let Some(o) = obs {
            let v = rec.read(&normed, 0, m * d, "the final norm")?;
            o.on_final_norm(positions, &v);
        }
        let logits = rec.buffer("logits", m * s.vocab);
        rec.matmul(self.resident.matrix(plan.head)?, &normed, m, &logits)?;
        rec.read(&logits, 0, m * s.vocab, "the head")
    }
}

impl DeviceModel for GpuModel {
    fn run(
        &self,
        kv: &mut KvCache,
        input: PassInput<'_>,
        want: LogitsWanted,
        observer: Option<&mut dyn Observer>,
        last_layer: usize,
        cancel: &AtomicBool,
    ) -> Result<Vec<f32>, ExecError> {
        let out = self.pass(kv, input, want, observer, last_layer, cancel)?;
        // The positions count once every layer appended them and the pass succeeded.
        let n = match input {
            PassInput::Tokens(ids) => ids.len(),
            PassInput::Hidden(h) => h.len() / self.plan.surface.hidden.max(1),
        };
        kv.commit(n);
        Ok(out)
    }

    fn head(&self, x: &[f32]) -> Result<Vec<f32>, ExecError> {
        let d = self.plan.surface.hidden;
        if d == 0 || !x.len().is_multiple_of(d) || x.is_empty() {
            return Err(ExecError::Internal(format!(
                "head input of {} floats is not whole rows of {d}",
                x.len()
            )));
        }
        let n = x.len() / d;
        let mut rec = self.recorder();
        let buf = upload_f32(&self.gpu, "residual", x);
        self.head_rows(&mut rec, &buf, 0, n, 0..n, None)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Arg-max and probability of each row of `logits`, on the device.
pub(crate) fn argmax_once(
    gpu: &Arc<Gpu>,
    logits: &[f32],
    len: usize,
) -> Result<Vec<(u32, f32)>, ExecError> {
    if len == 0 || !logits.len().is_multiple_of(len) {
        return Err(ExecError::InvalidOption(format!(
            "{} logits are not whole rows of {len}",
            logits.len()
        )));
    }
    let rows = logits.len() / len;
    let (ops, mats) = pipelines_for(gpu, [])?;
    let mut rec = Recorder::new(gpu, ops, mats);
    let lb = upload_f32(gpu, "logits", logits);
    let out = rec.buffer("argmax", 2 * rows);
    rec.argmax(&lb, rows, len, &out)?;
    let v = rec.read(&out, 0, 2 * rows, "an arg-max")?;
    Ok((0..rows).map(|r| (v[r].to_bits(), v[rows + r])).collect())
}

/// One matrix product on the device over an encoded host tensor (uploaded for the call).
pub(crate) fn matmul_once(
    gpu: &Arc<Gpu>,
    w: &lql_storage::model::TensorView<'_>,
    x: &[f32],
    n: usize,
) -> Result<Vec<f32>, ExecError> {
    if x.len() != n * w.row_len() || !w.row_len().is_multiple_of(32) {
        return Err(ExecError::InvalidOption(format!(
            "{} inputs of {} rows of {} elements",
            x.len(),
            n,
            w.row_len()
        )));
    }
    if crate::shaders::matmul_kernel(w.dtype).is_none() {
        return Err(ExecError::Unsupported(format!(
            "encoding {} on the gpu backend",
            w.dtype
        )));
    }
    let (ops, mats) = pipelines_for(gpu, [w.dtype])?;
    let mut rec = Recorder::new(gpu, ops, mats);
    let m = crate::weights::Matrix::upload(gpu, "probe", w)?;
    let xb = upload_f32(gpu, "x", x);
    let y = rec.buffer("y", n * w.rows());
    rec.matmul(&m, &xb, n, &y)?;
    rec.read(&y, 0, n * w.rows(), "a matmul")
}
