//! `Executor` (a validated plan over an operand source, plus a backend) and `Session`
//! (one continuation: the key/value cache and the tokens it holds).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use lql_storage::model::OperandSource;
use lql_storage::surface::ExecutionSurface;

use crate::backend::cpu::CpuBackend;
use crate::backend::device::DeviceModel;
use crate::backend::Backend;
use crate::error::{ExecError, Result};
use crate::forward::{LogitsWanted, Pass, PassInput};
use crate::kv::KvCache;
use crate::observer::Observer;
use crate::plan::{Plan, StageRange};
use crate::steer::Steering;

/// One ranked next-token candidate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TopToken {
    /// 1-based rank.
    pub rank: usize,
    pub token_id: u32,
    /// Softmax probability over the whole vocabulary.
    pub prob: f32,
    pub logit: f32,
}

/// The logits of one position.
#[derive(Debug, Clone, PartialEq)]
pub struct Logits {
    pub values: Vec<f32>,
}

impl Logits {
    /// Refuses logits that hold NaN or infinity (a model, edit or scale that overflows):
    /// sampling them would answer a token that means nothing. `position` is the position
    /// whose next token they score.
    pub fn check_finite(&self, position: usize) -> Result<(), crate::ExecError> {
        match self.values.iter().position(|v| !v.is_finite()) {
            None => Ok(()),
            Some(token) => Err(crate::ExecError::NonFinite {
                what: format!(
                    "the logits after position {position} (token {token} is {})",
                    self.values[token]
                ),
            }),
        }
    }

    /// The highest-scoring token (the lowest id among ties).
    pub fn argmax(&self) -> u32 {
        let mut best = 0usize;
        for (i, &v) in self.values.iter().enumerate() {
            if v > self.values[best] {
                best = i;
            }
        }
        best as u32
    }

    /// The `k` best tokens with their probabilities, best first.
    pub fn top(&self, k: usize) -> Vec<TopToken> {
        let v = &self.values;
        let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = v.iter().map(|&x| ((x - max) as f64).exp()).sum();
        let mut idx: Vec<u32> = (0..v.len() as u32).collect();
        let k = k.min(v.len());
        let cmp = |a: &u32, b: &u32| v[*b as usize].total_cmp(&v[*a as usize]).then(a.cmp(b));
        if k < idx.len() && k > 0 {
            idx.select_nth_unstable_by(k - 1, cmp);
        }
        idx.truncate(k);
        idx.sort_by(cmp);
        idx.into_iter()
            .enumerate()
            .map(|(r, id)| {
                let logit = v[id as usize];
                TopToken {
                    rank: r + 1,
                    token_id: id,
                    prob: (((logit - max) as f64).exp() / sum) as f32,
                    logit,
                }
            })
            .collect()
    }
}

/// A model ready to run: operand source, validated plan, backend, cancellation flag.
/// Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Executor {
    source: Arc<dyn OperandSource>,
    plan: Arc<Plan>,
    backend: Arc<dyn Backend>,
    /// The model resident on the backend's device (a device backend only).
    device: Option<Arc<dyn DeviceModel>>,
    cancel: Arc<AtomicBool>,
    /// Decoder layers run by this executor's passes, counted as each layer runs (EXPLAIN
    /// ANALYZE's `layers_run=`; shared by the executors derived from this one).
    layers_run: Arc<AtomicU64>,
    /// Vectors every pass adds to the residual stream (none: the model as it is).
    steering: Option<Arc<Steering>>,
    /// An edited state of `source` whose FFN overlays every pass applies, the weights still
    /// read from `source` ([`Executor::with_overlay`]).
    overlay: Option<Arc<dyn OperandSource>>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("backend", &self.backend.name())
            .field("threads", &self.backend.threads())
            .finish_non_exhaustive()
    }
}

/// The plan's operands made resident on `backend`'s device, when it has one.
fn prepare_device(
    backend: &dyn Backend,
    source: &Arc<dyn OperandSource>,
    plan: &Arc<Plan>,
    previous: Option<&Arc<dyn DeviceModel>>,
) -> Result<Option<Arc<dyn DeviceModel>>> {
    match backend.device() {
        Some(dev) => dev.prepare(source.clone(), plan.clone(), previous),
        None => Ok(None),
    }
}

impl Executor {
    /// Validate `source` and prepare to run it on the CPU with `threads` threads
    /// (0: one per core).
    pub fn new(source: Arc<dyn OperandSource>, threads: usize) -> Result<Executor> {
        let backend = Arc::new(CpuBackend::new(threads)?);
        Executor::with_backend(source, backend)
    }

    /// Validate `source` and run it on `backend`.
    pub fn with_backend(
        source: Arc<dyn OperandSource>,
        backend: Arc<dyn Backend>,
    ) -> Result<Executor> {
        let plan = Arc::new(Plan::build(source.as_ref())?);
        let device = prepare_device(backend.as_ref(), &source, &plan, None)?;
        Ok(Executor {
            source,
            plan,
            backend,
            device,
            cancel: Arc::new(AtomicBool::new(false)),
            layers_run: Arc::default(),
            steering: None,
            overlay: None,
        })
    }

    /// The same backend and cancel flag over another operand source (an edited state):
    /// the plan is built anew from `source`.
    pub fn with_source(&self, source: Arc<dyn OperandSource>) -> Result<Executor> {
        let plan = Arc::new(Plan::build(source.as_ref())?);
        let device = prepare_device(self.backend.as_ref(), &source, &plan, self.device.as_ref())?;
        Ok(Executor {
            source,
            plan,
            backend: self.backend.clone(),
            device,
            cancel: self.cancel.clone(),
            layers_run: self.layers_run.clone(),
            steering: None,
            overlay: None,
        })
    }

    /// The same backend and cancel flag over `stage` of another operand source, on the
    /// CPU (a device backend's prepared model is not carried over): what re-runs only the
    /// layers an edit can change, from the hidden states before them.
    pub fn with_stage_source(
        &self,
        source: Arc<dyn OperandSource>,
        stage: StageRange,
    ) -> Result<Executor> {
        if self.device.is_some() {
            return Err(ExecError::Internal(
                "a stage over another source runs on the CPU backend only".into(),
            ));
        }
        let plan = Arc::new(Plan::build_stage(source.as_ref(), stage)?);
        Ok(Executor {
            source,
            plan,
            backend: self.backend.clone(),
            device: None,
            cancel: self.cancel.clone(),
            layers_run: self.layers_run.clone(),
            steering: None,
            overlay: None,
        })
    }

    /// Validate only the operands of `stage` and prepare to run it (one pipeline stage of
    /// a layer package) on the CPU with `threads` threads. Its sessions hold key/value rows
    /// for the stage's layers only.
    pub fn for_stage(
        source: Arc<dyn OperandSource>,
        threads: usize,
        stage: StageRange,
    ) -> Result<Executor> {
        let backend: Arc<dyn Backend> = Arc::new(CpuBackend::new(threads)?);
        let plan = Arc::new(Plan::build_stage(source.as_ref(), stage)?);
        Ok(Executor {
            source,
            plan,
            backend,
            device: None,
            cancel: Arc::new(AtomicBool::new(false)),
            layers_run: Arc::default(),
            steering: None,
            overlay: None,
        })
    }

    /// The part of the model this executor runs.
    pub fn stage(&self) -> StageRange {
        self.plan.stage
    }

    /// Use `flag` as the cancellation flag (checked between layers and tokens; setting it
    /// makes a running pass stop with [`ExecError::Cancelled`]). The caller clears it.
    pub fn with_cancel_flag(mut self, flag: Arc<AtomicBool>) -> Executor {
        self.cancel = flag;
        self
    }

    /// Count the layers this executor's passes run into `counter` (the caller reads it
    /// before and after a piece of work to measure it).
    pub fn with_layer_counter(mut self, counter: Arc<AtomicU64>) -> Executor {
        self.layers_run = counter;
        self
    }

    /// The counter its passes add each layer they run to.
    pub(crate) fn layer_counter(&self) -> &AtomicU64 {
        &self.layers_run
    }

    /// Decoder layers run so far by this executor's passes (and those sharing its counter).
    pub fn layers_run(&self) -> u64 {
        self.layers_run.load(Ordering::Relaxed)
    }

    /// This executor with `steering` added in every pass (none: unsteered). Refused on a
    /// device backend and for vectors of another model's shape.
    pub fn with_steering(mut self, steering: Option<Arc<Steering>>) -> Result<Executor> {
        if let Some(s) = &steering {
            s.check(&self.plan.surface)?;
            if self.device.is_some() {
                return Err(ExecError::Unsupported(
                    "not supported yet: steering on the GPU backend; USE the model with BACKEND cpu to steer it".into(),
                ));
            }
        }
        self.steering = steering.filter(|s| !s.is_empty());
        Ok(self)
    }

    /// This executor with the FFN overlays of `state` (an edited state of this executor's
    /// model, such as an `EffectiveModel` over it) applied in every pass, the weights still
    /// read from this executor's source: the plan is shared, so sessions of both decode in
    /// one batched step, each with its own overlay. Refused on a device backend and for a
    /// state of another shape.
    pub fn with_overlay(mut self, state: Option<Arc<dyn OperandSource>>) -> Result<Executor> {
        if let Some(st) = &state {
            let (a, b) = (st.surface(), &self.plan.surface);
            if a.hidden != b.hidden || a.n_layers != b.n_layers || a.vocab != b.vocab {
                return Err(ExecError::InvalidOption(format!(
                    "an overlay of hidden size {} over {} layers does not fit a model of hidden size {} over {}",
                    a.hidden, a.n_layers, b.hidden, b.n_layers
                )));
            }
            if self.device.is_some() {
                return Err(ExecError::Unsupported(
                    "not supported yet: a per-request overlay on the GPU backend".into(),
                ));
            }
        }
        self.overlay = state;
        Ok(self)
    }

    /// The state whose FFN overlays every pass applies, if any.
    pub fn overlay(&self) -> Option<&Arc<dyn OperandSource>> {
        self.overlay.as_ref()
    }

    /// The steering every pass adds, if any.
    pub fn steering(&self) -> Option<&Arc<Steering>> {
        self.steering.as_ref()
    }

    /// The cancellation flag.
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The shared plan (sessions of one executor and its clones hold the same one).
    pub(crate) fn plan_arc(&self) -> &Arc<Plan> {
        &self.plan
    }

    pub fn surface(&self) -> &ExecutionSurface {
        &self.plan.surface
    }

    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// The backend, shared (to run another model on the same device).
    pub fn backend_arc(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The model resident on the backend's device, when passes run there.
    pub fn device(&self) -> Option<&dyn DeviceModel> {
        self.device.as_deref()
    }

    pub fn source(&self) -> &Arc<dyn OperandSource> {
        &self.source
    }

    /// A new, empty continuation.
    pub fn session(&self) -> Session {
        let s = &self.plan.surface;
        Session {
            exec: self.clone(),
            kv: KvCache::new(self.plan.layers.len(), self.plan.kv_dim, s.context_length),
            tokens: Vec::new(),
        }
    }

    /// The `top` most likely next tokens after `ids`.
    pub fn infer(&self, ids: &[u32], top: usize) -> Result<Vec<TopToken>> {
        Ok(self.session().prefill(ids)?.top(top))
    }

    /// Logits at every position of `ids` (one batched pass).
    pub fn logits_all(&self, ids: &[u32]) -> Result<Vec<Logits>> {
        self.session().extend(ids, LogitsWanted::All, None)
    }

    /// Run layers `0..=last_layer` over `ids` (a fresh continuation), with `observer`
    /// attached; no logits. Layers past `last_layer` do not run.
    pub fn observe_layers(
        &self,
        ids: &[u32],
        last_layer: usize,
        observer: &mut dyn Observer,
    ) -> Result<()> {
        let mut session = self.session();
        session.run_pass(ids, LogitsWanted::None, Some(observer), last_layer)?;
        Ok(())
    }

    /// Final norm and output head over one residual row (`[hidden]`), as a whole pass
    /// ends: bit-identical to the logits the pass would have given.
    pub fn head(&self, residual: &[f32]) -> Result<Logits> {
        if let Some(dev) = &self.device {
            let values = dev.head(residual)?;
            if values.len() != self.plan.surface.vocab {
                return Err(ExecError::Internal("head takes exactly one row".into()));
            }
            return Ok(Logits { values });
        }
        let mut out = None;
        let mut result = Ok(());
        self.backend.scope(&mut || match crate::forward::head(
            self.source.as_ref(),
            &self.plan,
            self.backend.as_ref(),
            residual,
            0..1,
            None,
        ) {
            Ok(v) => out = Some(v),
            Err(e) => result = Err(e),
        });
        result?;
        let values = out.ok_or_else(|| ExecError::Internal("head did not run".into()))?;
        if values.len() != self.plan.surface.vocab {
            return Err(ExecError::Internal("head takes exactly one row".into()));
        }
        Ok(Logits { values })
    }

    /// Run `ids` with `observer` attached; returns the logits asked for.
    pub fn observe(
        &self,
        ids: &[u32],
        want: LogitsWanted,
        observer: &mut dyn Observer,
    ) -> Result<Vec<Logits>> {
        self.session().extend(ids, want, Some(observer))
    }
}

/// One continuation: the tokens seen and their key/value rows.
#[derive(Debug, Clone)]
pub struct Session {
    exec: Executor,
    kv: KvCache,
    tokens: Vec<u32>,
}

impl Session {
    /// Run `ids` after the tokens already held; the logits of the last one.
    pub fn prefill(&mut self, ids: &[u32]) -> Result<Logits> {
        let mut v = self.extend(ids, LogitsWanted::Last, None)?;
        v.pop()
            .ok_or_else(|| ExecError::Internal("no logits".into()))
    }

    /// Run one more token; its logits.
    pub fn decode(&mut self, id: u32) -> Result<Logits> {
        self.prefill(&[id])
    }

    /// Run `ids` (one batched pass), optionally observed; the logits asked for.
    pub fn extend(
        &mut self,
        ids: &[u32],
        want: LogitsWanted,
        observer: Option<&mut dyn Observer>,
    ) -> Result<Vec<Logits>> {
        let flat = self.run_pass(ids, want, observer, self.last_layer())?;
        let vocab = self.exec.plan.surface.vocab;
        Ok(flat
            .chunks_exact(vocab)
            .map(|c| Logits { values: c.to_vec() })
            .collect())
    }

    /// Run `ids` through every layer (optionally observed) and return the last position's
    /// residual stream (before the final norm); [`Executor::head`] turns it into logits.
    pub fn extend_to_residual(
        &mut self,
        ids: &[u32],
        observer: Option<&mut dyn Observer>,
    ) -> Result<Vec<f32>> {
        self.run_pass(ids, LogitsWanted::Residual, observer, self.last_layer())
    }

    /// The last layer this session's plan holds.
    fn last_layer(&self) -> usize {
        let p = &self.exec.plan;
        (p.stage.first + p.layers.len()).saturating_sub(1)
    }

    /// Run one pipeline stage over new positions: from token ids (a stage owning the input
    /// boundary) or from the previous stage's hidden states `[m × hidden]`, through the
    /// stage's layers. Returns the hidden states of every new position after the stage's
    /// last layer, `[m × hidden]`.
    pub fn stage_hidden(&mut self, input: PassInput<'_>) -> Result<Vec<f32>> {
        self.stage_pass(input, LogitsWanted::Hidden)
    }

    /// Run the final stage (it owns the output boundary) over new positions; the logits of
    /// the last one. Bit-identical to the whole model's logits for the same positions.
    pub fn stage_logits(&mut self, input: PassInput<'_>) -> Result<Logits> {
        let mut v = self.stage_pass(input, LogitsWanted::Last)?;
        let vocab = self.exec.plan.surface.vocab;
        if v.len() != vocab {
            return Err(ExecError::Internal("no logits".into()));
        }
        Ok(Logits {
            values: std::mem::take(&mut v),
        })
    }

    fn stage_pass(&mut self, input: PassInput<'_>, want: LogitsWanted) -> Result<Vec<f32>> {
        let pass = Pass {
            source: self.exec.source.as_ref(),
            plan: &self.exec.plan,
            backend: self.exec.backend.as_ref(),
            cancel: &self.exec.cancel,
            layers_run: &self.exec.layers_run,
            last_layer: self.last_layer(),
            device: self.exec.device.as_deref(),
            steering: self.exec.steering.as_deref(),
            overlay: self.exec.overlay.as_deref(),
        };
        let out = pass.run_from(&mut self.kv, input, want, None)?;
        if let PassInput::Tokens(ids) = input {
            self.tokens.extend_from_slice(ids);
        }
        Ok(out)
    }

    fn run_pass(
        &mut self,
        ids: &[u32],
        want: LogitsWanted,
        observer: Option<&mut dyn Observer>,
        last_layer: usize,
    ) -> Result<Vec<f32>> {
        let pass = Pass {
            source: self.exec.source.as_ref(),
            plan: &self.exec.plan,
            backend: self.exec.backend.as_ref(),
            cancel: &self.exec.cancel,
            layers_run: &self.exec.layers_run,
            last_layer,
            device: self.exec.device.as_deref(),
            steering: self.exec.steering.as_deref(),
            overlay: self.exec.overlay.as_deref(),
        };
        let flat = pass.run(&mut self.kv, ids, want, observer)?;
        self.tokens.extend_from_slice(ids);
        Ok(flat)
    }

    /// Positions held (the next token's position).
    pub fn position(&self) -> usize {
        self.kv.len()
    }

    /// The tokens held.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The model's context length (the most positions a session can hold).
    pub fn context_limit(&self) -> usize {
        self.kv.limit()
    }

    /// Bytes allocated by the key/value cache.
    pub fn cache_bytes(&self) -> usize {
        self.kv.allocated_bytes()
    }

    /// The key/value cache (for the batched step, which appends to several at once).
    pub(crate) fn kv_mut(&mut self) -> &mut KvCache {
        &mut self.kv
    }

    /// Record a token the batched step ran.
    pub(crate) fn push_token(&mut self, id: u32) {
        self.tokens.push(id);
    }

    /// Keep only the first `len` positions.
    pub fn truncate(&mut self, len: usize) {
        self.kv.truncate(len);
        self.tokens.truncate(self.kv.len());
    }

    /// Forget everything.
    pub fn reset(&mut self) {
        self.truncate(0);
    }

    /// A new session holding this one's first `len` positions (a prompt-prefix cache's
    /// entry, or a continuation from it), its memory sized to them; `None` when the cache
    /// lives on a device.
    pub fn fork(&self, len: usize) -> Option<Session> {
        let kv = self.kv.prefix(len)?;
        let n = kv.len();
        Some(Session {
            exec: self.exec.clone(),
            kv,
            tokens: self.tokens[..n].to_vec(),
        })
    }

    pub fn executor(&self) -> &Executor {
        &self.exec
    }
}
