//! One executor's model on the device and its forward pass: the embedding lookup (plus
//! learned positions), then each layer's steps (`lql_exec::program`, the one definition of
//! a layer, shared with the host), each step kind implemented once here on the device
//! kernels, then the final norm and head. The FFN runs dense, MLP and bank layers with the
//! effective state's overlay (scales and added features). Only the logits asked for come
//! back (the final softcap applied to them), and an observer gets back what its hooks read
//! (per layer: residual, deltas, FFN input, gate and activation, added features, routes;
//! the attention weights only when it asks for them).

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lql_exec::backend::device::DeviceModel;
use lql_exec::block::{attn_rule, cap_logits};
use lql_exec::forward::{check_pass, LogitsWanted, PassInput};
use lql_exec::kernels::RopeTable;
use lql_exec::kv::KvCache;
use lql_exec::plan::{BankPlan, FfnPlan, LayerPlan, Plan};
use lql_exec::program::{Step, Sub};
use lql_exec::{select_experts, ExecError, LayerRecord, Observer, Route};
use lql_storage::model::OperandSource;
use lql_storage::surface::{Activation, NormKind, RopePairing};
use lql_storage::DType;

use crate::context::Gpu;
use crate::kv::GpuKv;
use crate::record::{pipelines_for, AttnDims, Recorder};
use crate::shaders::Pipelines;
use crate::weights::{make_resident, upload_bytes, upload_f32, Matrix, Resident};

/// A plan's operands resident on a device, ready to run passes.
pub struct GpuModel {
    gpu: Arc<Gpu>,
    // Keeps the mapped operands alive as long as the plan that names them; the passes
    // report what they read to it.
    source: Arc<dyn OperandSource>,
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
            source,
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

    /// A recorder for this model's kernels; what they read of the stored operands is
    /// reported to the source (the engine's read meter), as the host pass's views are.
    fn recorder(&self) -> Recorder<'_> {
        Recorder::new(&self.gpu, self.ops.clone(), self.mats.clone())
            .reporting_reads_to(self.source.as_ref())
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

        let added = self
            .resident
            .layers
            .iter()
            .filter_map(|l| l.overlay.as_ref()?.added.as_ref().map(|a| a.width))
            .max()
            .unwrap_or(0);
        let b = PassBuffers::new(&rec, plan, n, total, added, obs.is_some());
        // Input.
        match input {
            PassInput::Tokens(ids) => {
                self.embed(&mut rec, ids, positions.clone(), &b)?;
                if let Some(o) = obs.as_deref_mut() {
                    let rows = rec.read(&b.x, 0, n * d, "the embedding")?;
                    o.on_embedding(positions.clone(), &rows);
                }
            }
            PassInput::Hidden(h) => {
                let src = upload_f32(&self.gpu, "hidden", h);
                rec.copy(&src, 0, &b.x, 0, n * d);
            }
        }

        let at: Vec<usize> = positions.clone().collect();
        let tables: Vec<(wgpu::Buffer, wgpu::Buffer, usize)> = plan
            .ropes
            .iter()
            .map(|spec| {
                let t = RopeTable::at(&at, spec);
                (
                    upload_f32(&self.gpu, "rope cos", &t.cos),
                    upload_f32(&self.gpu, "rope sin", &t.sin),
                    t.half,
                )
            })
            .collect();
        let half_split = s.rope_pairing == RopePairing::HalfSplit;
        let want_attn = obs.as_deref().is_some_and(|o| o.wants_attention());
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
            let e = &lp.extra;
            let m = |key| self.resident.matrix(key);
            let mut seen = FfnSeen::default();
            for step in &lp.steps {
                match *step {
                    Step::Norm(Sub::Attn) => self.norm(
                        &mut rec,
                        &b.x,
                        &vecs.attn_norm,
                        vecs.attn_norm_bias.as_ref(),
                        n,
                        &b.h,
                    )?,
                    Step::Norm(Sub::Ffn) => self.norm(
                        &mut rec,
                        &b.x,
                        &vecs.ffn_norm,
                        vecs.ffn_norm_bias.as_ref(),
                        n,
                        &b.h,
                    )?,
                    Step::TakeResidual => rec.copy(&b.x, 0, &b.h, 0, n * d),
                    Step::Project => {
                        rec.matmul(m(lp.q)?, &b.h, n, &b.q)?;
                        rec.matmul(m(lp.k)?, &b.h, n, &b.k)?;
                        rec.matmul(m(lp.v)?, &b.h, n, &b.v)?;
                        for (buf, bias, len) in [
                            (&b.q, &vecs.q_bias, qd),
                            (&b.k, &vecs.k_bias, kvd),
                            (&b.v, &vecs.v_bias, kvd),
                        ] {
                            if let Some(bias) = bias {
                                rec.add(buf, bias, n * len, len)?;
                            }
                        }
                    }
                    Step::QkNorm => {
                        for (buf, w, len, width) in [
                            (&b.q, &vecs.q_norm, &e.q_norm, qd),
                            (&b.k, &vecs.k_norm, &e.k_norm, kvd),
                        ] {
                            if let (Some(w), Some(len)) = (w, len.as_ref().map(|v| v.len())) {
                                let rows = n * width / len.max(1);
                                rec.rmsnorm(buf, w, rows, len, s.norm_eps, &b.tmp)?;
                                rec.copy(&b.tmp, 0, buf, 0, n * width);
                            }
                        }
                    }
                    Step::Rope => {
                        if let Some((cos, sin, half)) = tables.get(lp.rope) {
                            for (buf, heads) in [(&b.q, s.n_heads), (&b.k, s.n_kv_heads)] {
                                rec.rope(buf, cos, sin, n, heads, s.head_dim, *half, half_split)?;
                            }
                        }
                    }
                    Step::Attend => {
                        rec.copy(&b.k, 0, &dev_kv.k[kl], p0 * kvd, n * kvd);
                        rec.copy(&b.v, 0, &dev_kv.v[kl], p0 * kvd, n * kvd);
                        rec.attention(
                            &b.q,
                            &dev_kv.k[kl],
                            &dev_kv.v[kl],
                            dims,
                            attn_rule(plan, lp),
                            &b.att,
                            &b.weights,
                        )?;
                    }
                    Step::Output => {
                        rec.matmul(m(lp.o)?, &b.att, n, &b.attn_delta)?;
                        if let Some(bias) = &vecs.o_bias {
                            rec.add(&b.attn_delta, bias, n * d, d)?;
                        }
                    }
                    Step::PostNorm(sub) => {
                        let (delta, w) = match sub {
                            Sub::Attn => (&b.attn_delta, &vecs.attn_post_norm),
                            Sub::Ffn => (&b.ffn_delta, &vecs.ffn_post_norm),
                        };
                        if let Some(w) = w {
                            rec.rmsnorm(delta, w, n, d, s.norm_eps, &b.tmp)?;
                            rec.copy(&b.tmp, 0, delta, 0, n * d);
                        }
                    }
                    Step::Ffn => seen = self.ffn(&mut rec, lp, kl, &b, n, p0, obs.is_some())?,
                    Step::Added => seen.added = self.added(&mut rec, kl, &b, n)?,
                    Step::Residual(sub) => {
                        let delta = match sub {
                            Sub::Attn => &b.attn_delta,
                            Sub::Ffn => &b.ffn_delta,
                        };
                        rec.add(&b.x, delta, n * d, n * d)?;
                    }
                }
            }

            if let Some(o) = obs.as_deref_mut() {
                let what = format!("reading layer {} for an observer", lp.index);
                let residual = rec.read(&b.x, 0, n * d, &what)?;
                let ad = rec.read(&b.attn_delta, 0, n * d, &what)?;
                let fd = rec.read(&b.ffn_delta, 0, n * d, &what)?;
                let fin = rec.read(&b.h, 0, n * d, &what)?;
                let width = seen.width;
                let (g, act) = match &b.gate_pre {
                    Some(gp) if width > 0 => (
                        rec.read(gp, 0, n * width, &what)?,
                        rec.read(&b.gate, 0, n * width, &what)?,
                    ),
                    _ => (Vec::new(), Vec::new()),
                };
                let (ag, aa) = match (&seen.added, &b.added_pre) {
                    (Some((count, w)), Some(pre)) => {
                        let strip = |v: Vec<f32>| -> Vec<f32> {
                            v.chunks_exact(*w)
                                .flat_map(|r| r[..*count].to_vec())
                                .collect()
                        };
                        (
                            strip(rec.read(pre, 0, n * w, &what)?),
                            strip(rec.read(&b.added_gate, 0, n * w, &what)?),
                        )
                    }
                    _ => (Vec::new(), Vec::new()),
                };
                let attn = if want_attn {
                    Some(rec.read(&b.weights, 0, n * s.n_heads * total, &what)?)
                } else {
                    None
                };
                o.on_layer(&LayerRecord {
                    layer: lp.index,
                    positions: positions.clone(),
                    hidden: d,
                    ffn: width,
                    n_heads: s.n_heads,
                    residual: &residual,
                    attn_delta: &ad,
                    ffn_delta: &fd,
                    ffn_input: &fin,
                    gate: &g,
                    activation: &act,
                    added_gate: &ag,
                    added_activation: &aa,
                    attention: attn.as_deref(),
                    routes: &seen.routes,
                });
            }
        }

        let first = match want {
            LogitsWanted::None => {
                rec.submit(op)?;
                self.gpu.wait(op)?;
                return Ok(Vec::new());
            }
            LogitsWanted::Residual => return rec.read(&b.x, (n - 1) * d, d, op),
            LogitsWanted::Hidden => return rec.read(&b.x, 0, n * d, op),
            LogitsWanted::Last => n - 1,
            LogitsWanted::All => 0,
        };
        self.head_rows(
            &mut rec,
            &b.x,
            first,
            n,
            positions.start + first..positions.end,
            obs,
        )
    }

    /// The input rows of `ids`: token embeddings × the embedding scale, plus the learned
    /// position embeddings of `positions` where the model has them.
    fn embed(
        &self,
        rec: &mut Recorder<'_>,
        ids: &[u32],
        positions: std::ops::Range<usize>,
        b: &PassBuffers,
    ) -> Result<(), ExecError> {
        let plan = &*self.plan;
        let n = ids.len();
        let words = |v: &mut dyn Iterator<Item = u32>| -> Vec<u8> {
            v.flat_map(|i| i.to_le_bytes()).collect()
        };
        let idb = upload_bytes(&self.gpu, "ids", &words(&mut ids.iter().copied()), 0);
        let emb = self.resident.matrix(plan.embedding)?;
        rec.embed(emb, &idb, n, plan.surface.embedding_scale, &b.x)?;
        if let Some(key) = plan.positions {
            let pe = self.resident.matrix(key)?;
            if positions.end > pe.rows {
                return Err(ExecError::InvalidOption(format!(
                    "position {} is past the {} learned positions of the model",
                    positions.end - 1,
                    pe.rows
                )));
            }
            let pb = upload_bytes(
                &self.gpu,
                "positions",
                &words(&mut positions.map(|p| p as u32)),
                0,
            );
            rec.embed(pe, &pb, n, 1.0, &b.tmp)?;
            let len = n * plan.surface.hidden;
            rec.add(&b.x, &b.tmp, len, len)?;
        }
        Ok(())
    }

    /// The block's norm of `rows` rows of `x` into `out`: LayerNorm with `bias`, or RMSNorm.
    fn norm(
        &self,
        rec: &mut Recorder<'_>,
        x: &wgpu::Buffer,
        weight: &wgpu::Buffer,
        bias: Option<&wgpu::Buffer>,
        rows: usize,
        out: &wgpu::Buffer,
    ) -> Result<(), ExecError> {
        let s = &self.plan.surface;
        match (s.block.norm, bias) {
            (NormKind::Layer, Some(b)) => {
                rec.layernorm(x, weight, b, rows, s.hidden, s.norm_eps, out)
            }
            _ => rec.rmsnorm(x, weight, rows, s.hidden, s.norm_eps, out),
        }
    }

    /// The FFN of layer `lp` over `b.h` into `b.ffn_delta`, with the effective state's
    /// overlay (see `lql_exec::overlay`): what the observer may read of it.
    #[allow(clippy::too_many_arguments)]
    fn ffn(
        &self,
        rec: &mut Recorder<'_>,
        lp: &LayerPlan,
        kl: usize,
        b: &PassBuffers,
        n: usize,
        p0: usize,
        observe: bool,
    ) -> Result<FfnSeen, ExecError> {
        let s = &self.plan.surface;
        let d = s.hidden;
        let vecs = &self.resident.layers[kl];
        let ov = vecs.overlay.as_ref();
        let m = |key| self.resident.matrix(key);
        let gelu = s.activation == Activation::Gelu;
        let ff = s.ffn;
        let mut seen = FfnSeen::default();
        // The base features' tail: overlay gate scales, a copy for observers, the
        // activation, the overlay's activation scales, the down projection.
        let activate_and_down =
            |rec: &mut Recorder<'_>, down: &Matrix, up: Option<&wgpu::Buffer>| {
                if let Some(gs) = ov.and_then(|o| o.gate_scale.as_ref()) {
                    rec.mul(&b.gate, gs, n * ff, ff)?;
                }
                if let Some(gp) = &b.gate_pre {
                    rec.copy(&b.gate, 0, gp, 0, n * ff);
                }
                match up {
                    Some(up) => rec.glu(&b.gate, up, n * ff, gelu)?,
                    None => rec.act(&b.gate, n * ff, gelu)?,
                }
                if let Some(ds) = ov.and_then(|o| o.down_scale.as_ref()) {
                    rec.mul(&b.gate, ds, n * ff, ff)?;
                }
                rec.matmul(down, &b.gate, n, &b.ffn_delta)
            };
        match &lp.ffn {
            FfnPlan::Dense { gate, up, down, .. } => {
                rec.matmul(m(*gate)?, &b.h, n, &b.gate)?;
                rec.matmul(m(*up)?, &b.h, n, &b.up)?;
                for (buf, bias) in [(&b.gate, &vecs.gate_bias), (&b.up, &vecs.up_bias)] {
                    if let Some(bias) = bias {
                        rec.add(buf, bias, n * ff, ff)?;
                    }
                }
                activate_and_down(rec, m(*down)?, Some(&b.up))?;
                seen.width = ff;
            }
            FfnPlan::Mlp { up, down, .. } => {
                rec.matmul(m(*up)?, &b.h, n, &b.gate)?;
                if let Some(bias) = &vecs.up_bias {
                    rec.add(&b.gate, bias, n * ff, ff)?;
                }
                activate_and_down(rec, m(*down)?, None)?;
                if let Some(bias) = &vecs.down_bias {
                    rec.add(&b.ffn_delta, bias, n * d, d)?;
                }
                seen.width = ff;
            }
            FfnPlan::Bank(bank) => {
                seen.routes = self.bank(rec, bank, kl, b, n, p0, observe)?;
            }
        }
        Ok(seen)
    }

    /// The effective state's added features of layer `kl` over the FFN input, added to
    /// the FFN's output ([`Step::Added`]): their count and width, for observers.
    fn added(
        &self,
        rec: &mut Recorder<'_>,
        kl: usize,
        b: &PassBuffers,
        n: usize,
    ) -> Result<Option<(usize, usize)>, ExecError> {
        let d = self.plan.surface.hidden;
        let gelu = self.plan.surface.activation == Activation::Gelu;
        let Some(a) = self.resident.layers[kl]
            .overlay
            .as_ref()
            .and_then(|o| o.added.as_ref())
        else {
            return Ok(None);
        };
        let w = a.width;
        rec.matmul(&a.gate, &b.h, n, &b.added_gate)?;
        rec.add(&b.added_gate, &a.gate_bias, n * w, w)?;
        if let Some(gs) = &a.gate_scale {
            rec.mul(&b.added_gate, gs, n * w, w)?;
        }
        if let Some(pre) = &b.added_pre {
            rec.copy(&b.added_gate, 0, pre, 0, n * w);
        }
        rec.matmul(&a.up, &b.h, n, &b.added_up)?;
        rec.add(&b.added_up, &a.up_bias, n * w, w)?;
        rec.glu(&b.added_gate, &b.added_up, n * w, gelu)?;
        if let Some(ds) = &a.down_scale {
            rec.mul(&b.added_gate, ds, n * w, w)?;
        }
        rec.matmul(&a.down, &b.added_gate, n, &b.tmp)?;
        rec.add(&b.ffn_delta, &b.tmp, n * d, n * d)?;
        Ok(Some((a.count, w)))
    }

    /// A bank of experts: the router's logits (and the shared expert's gate) come back to
    /// the host, which selects as the CPU does (`lql_exec::select_experts`); each expert
    /// some position picked then runs on the device over every position, added with each
    /// position's weight (0 where it was not picked), and the shared expert on every
    /// position. Returns the routes when `observe`.
    #[allow(clippy::too_many_arguments)]
    fn bank(
        &self,
        rec: &mut Recorder<'_>,
        bank: &BankPlan,
        kl: usize,
        b: &PassBuffers,
        n: usize,
        p0: usize,
        observe: bool,
    ) -> Result<Vec<Route>, ExecError> {
        let s = &self.plan.surface;
        let d = s.hidden;
        let gelu = s.activation == Activation::Gelu;
        let vecs = &self.resident.layers[kl];
        let (ne, k) = (bank.n_experts, bank.n_used);
        let what = "routing a bank of experts";
        let logits = rec.buffer("router logits", n * ne);
        rec.matmul(self.resident.matrix(bank.router)?, &b.h, n, &logits)?;
        let shared_gate = match &vecs.shared_gate {
            Some(g) => {
                let out = rec.buffer("shared gate", n);
                rec.matmul(g, &b.h, n, &out)?;
                Some(rec.read(&out, 0, n, what)?)
            }
            None => None,
        };
        let z = rec.read(&logits, 0, n * ne, what)?;
        let mut chosen: Vec<(usize, f32)> = Vec::with_capacity(n * k);
        for t in 0..n {
            select_experts(bank.selection, &z[t * ne..(t + 1) * ne], k, &mut chosen);
        }
        // The experts' weighted outputs are summed into a zeroed delta.
        let delta = &b.ffn_delta;
        rec.copy(&b.zeros, 0, delta, 0, n * d);
        let ef = bank.expert_ffn;
        let (eg, eu) = (
            rec.buffer("expert gate", n * ef),
            rec.buffer("expert up", n * ef),
        );
        let ey = rec.buffer("expert out", n * d);
        for (e, mats) in self.resident.experts[kl].iter().enumerate() {
            let mut w = vec![0.0f32; n];
            for (i, &(ce, cw)) in chosen.iter().enumerate() {
                if ce == e {
                    w[i / k] = cw;
                }
            }
            if !chosen.iter().any(|&(ce, _)| ce == e) {
                continue;
            }
            let wb = upload_f32(&self.gpu, "expert weights", &w);
            rec.matmul(&mats.gate, &b.h, n, &eg)?;
            rec.matmul(&mats.up, &b.h, n, &eu)?;
            rec.glu(&eg, &eu, n * ef, gelu)?;
            rec.matmul(&mats.down, &eg, n, &ey)?;
            rec.axpy_rows(delta, &ey, &wb, n * d, d)?;
        }
        if let Some(sh) = &bank.shared {
            let sf = sh.ffn;
            let (sg, su) = (
                rec.buffer("shared gate", n * sf),
                rec.buffer("shared up", n * sf),
            );
            rec.matmul(self.resident.matrix(sh.gate)?, &b.h, n, &sg)?;
            rec.matmul(self.resident.matrix(sh.up)?, &b.h, n, &su)?;
            rec.glu(&sg, &su, n * sf, gelu)?;
            rec.matmul(self.resident.matrix(sh.down)?, &sg, n, &ey)?;
            let w: Vec<f32> = match &shared_gate {
                Some(g) => g.iter().map(|&v| 1.0 / (1.0 + (-v).exp())).collect(),
                None => vec![1.0; n],
            };
            let wb = upload_f32(&self.gpu, "shared expert weights", &w);
            rec.axpy_rows(delta, &ey, &wb, n * d, d)?;
        }
        Ok(if observe {
            chosen
                .iter()
                .enumerate()
                .map(|(i, &(e, w))| Route {
                    position: p0 + i / k,
                    expert: e,
                    weight: w,
                })
                .collect()
        } else {
            Vec::new()
        })
    }

    /// Final norm and head over rows `first..n` of `x` (the block's final softcap applied
    /// to what comes back).
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
        self.norm(
            rec,
            &rows,
            norm,
            self.resident.output_norm_bias.as_ref(),
            m,
            &normed,
        )?;
        if let Some(o) = obs {
            let v = rec.read(&normed, 0, m * d, "the final norm")?;
            o.on_final_norm(positions, &v);
        }
        let logits = rec.buffer("logits", m * s.vocab);
        rec.matmul(self.resident.matrix(plan.head)?, &normed, m, &logits)?;
        let mut out = rec.read(&logits, 0, m * s.vocab, "the head")?;
        cap_logits(plan, &mut out);
        Ok(out)
    }
}

/// What an observer may read of one layer's FFN.
#[derive(Default)]
struct FfnSeen {
    /// Width of the base features kept in `gate_pre`/`gate` (0 for a bank).
    width: usize,
    /// `(count, padded width)` of the added features kept in `added_pre`/`added_gate`.
    added: Option<(usize, usize)>,
    routes: Vec<Route>,
}

/// The device scratch of one pass over `n` positions, reused layer after layer.
struct PassBuffers {
    x: wgpu::Buffer,
    h: wgpu::Buffer,
    q: wgpu::Buffer,
    k: wgpu::Buffer,
    v: wgpu::Buffer,
    att: wgpu::Buffer,
    attn_delta: wgpu::Buffer,
    ffn_delta: wgpu::Buffer,
    /// `n × hidden` zeros (a bank's delta starts from them).
    zeros: wgpu::Buffer,
    /// Scratch as wide as the widest row of `h`, `q` and `k`.
    tmp: wgpu::Buffer,
    gate: wgpu::Buffer,
    up: wgpu::Buffer,
    gate_pre: Option<wgpu::Buffer>,
    added_gate: wgpu::Buffer,
    added_up: wgpu::Buffer,
    added_pre: Option<wgpu::Buffer>,
    weights: wgpu::Buffer,
}

impl PassBuffers {
    /// Buffers for `n` new positions (`total` with the cached ones); `added` is the widest
    /// (padded) set of added features of any layer.
    fn new(
        rec: &Recorder<'_>,
        plan: &Plan,
        n: usize,
        total: usize,
        added: usize,
        observe: bool,
    ) -> Self {
        let s = &plan.surface;
        let d = s.hidden;
        let (qd, kvd, ff) = (plan.q_dim, plan.kv_dim, s.ffn);
        PassBuffers {
            x: rec.buffer("x", n * d),
            h: rec.buffer("h", n * d),
            q: rec.buffer("q", n * qd),
            k: rec.buffer("k", n * kvd),
            v: rec.buffer("v", n * kvd),
            att: rec.buffer("att", n * qd),
            attn_delta: rec.buffer("attn_delta", n * d),
            ffn_delta: rec.buffer("ffn_delta", n * d),
            zeros: rec.buffer("zeros", n * d),
            tmp: rec.buffer("tmp", n * d.max(qd).max(kvd)),
            gate: rec.buffer("gate", n * ff),
            up: rec.buffer("up", n * ff),
            gate_pre: observe.then(|| rec.buffer("gate_pre", n * ff)),
            added_gate: rec.buffer("added gate", n * added),
            added_up: rec.buffer("added up", n * added),
            added_pre: (observe && added > 0).then(|| rec.buffer("added gate_pre", n * added)),
            weights: rec.buffer("attention weights", n * s.n_heads * total),
        }
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
