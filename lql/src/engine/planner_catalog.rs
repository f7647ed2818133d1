//! The planner's `Catalog`, implemented from the bound model: its facts, derived once at
//! USE from the execution surface and the operands present.

use lql_planner::{Catalog, ModelFacts, SourceKind};
use lql_storage::model::SourceKind as StorageKind;
use lql_storage::{Model, OperandKey, Role};

use super::Bound;

/// The session as the planner sees it.
pub(crate) struct EngineCatalog<'a> {
    bound: Option<&'a Bound>,
    backend: lql_grammar::BackendChoice,
}

impl<'a> EngineCatalog<'a> {
    pub fn new(bound: Option<&'a Bound>, backend: lql_grammar::BackendChoice) -> Self {
        EngineCatalog { bound, backend }
    }
}

impl Catalog for EngineCatalog<'_> {
    fn bound(&self) -> Option<ModelFacts> {
        self.bound.map(|b| b.facts.clone())
    }
    fn backend(&self) -> lql_grammar::BackendChoice {
        self.backend
    }
    fn gpu_adapter(&self) -> Option<String> {
        super::backend::first_adapter()
    }
}

/// The facts of a model, as the planner needs them.
pub(crate) fn facts(name: &str, model: &Model) -> ModelFacts {
    let s = &model.surface;
    // Listed in forward order: the embedding, the layers, then the head.
    let mut required = s.required_keys();
    required.sort_by_key(|k| match (k.layer, k.role) {
        (None, Role::TokenEmbedding) => 0,
        (Some(_), _) => 1,
        (None, _) => 2,
    });
    let mut missing_exec = Vec::new();
    let mut missing_browse = Vec::new();
    for k in required
        .into_iter()
        .filter(|k| !model.operands.contains_key(k))
    {
        // A reason the binding recorded (a bank region missing: layer, bank, role,
        // segment) says more than the operand's name.
        let what = model
            .absent
            .get(&k)
            .cloned()
            .unwrap_or_else(|| k.to_string());
        if k.role == s.feature_key_role()
            || matches!(
                k.role,
                Role::TokenEmbedding | Role::FfnGateExps | Role::FfnGateShexp
            )
        {
            missing_browse.push(what.clone());
        }
        missing_exec.push(what);
    }
    let (gate, ffn, gate_bytes) = browse_width(model);
    // A tokenizer that fails its checks is named with its cause, not only as absent.
    let (can_tokenize, tokenizer_problem) = match model.tokenizer_spec() {
        Ok(t) if matches!(*t, lql_storage::tokenizer_spec::TokenizerSpec::None) => (
            false,
            Some("the model carries no tokenizer (no tokenizer.ggml.* metadata, tokenizer.json or tokenizer capability)".to_string()),
        ),
        Ok(_) => (true, None),
        Err(e) => (false, Some(e.to_string())),
    };
    ModelFacts {
        name: name.to_string(),
        source: match model.kind {
            StorageKind::Gguf => SourceKind::Gguf,
            StorageKind::Safetensors => SourceKind::Safetensors,
            StorageKind::Vindex3 => SourceKind::Vindex3,
        },
        n_layers: s.n_layers,
        stage: None,
        vocab: s.vocab,
        hidden: s.hidden,
        n_heads: s.n_heads,
        // Features per layer as browsed: a stored overlay's added features follow the base's.
        ffn: widest(ffn, model.overlays.values()),
        context_length: (s.context_length > 0).then_some(s.context_length),
        can_execute: missing_exec.is_empty(),
        missing_for_execute: missing_exec,
        can_browse: missing_browse.is_empty(),
        missing_for_browse: missing_browse,
        can_tokenize,
        tokenizer_problem,
        unsupported: model.uninterpreted.as_ref().map(|u| u.reason.clone()),
        gate_encoding: gate.map(|g| g.dtype.name().to_string()),
        gate_bytes_per_layer: gate_bytes,
        stored_labels: stored_labels(model),
    }
}

/// The widest layer: `ffn`, or base + added features of the widest overlay.
pub(crate) fn widest<'a>(
    ffn: usize,
    overlays: impl Iterator<Item = &'a lql_storage::overlay::LayerOverlay>,
) -> usize {
    overlays.map(|o| o.width()).fold(ffn, usize::max)
}

/// What a browse scan of one layer reads: the gate operand whose encoding EXPLAIN names,
/// the features of a layer (gate rows; on a bank layer every routed expert's and the
/// shared expert's, numbered v1-flattened `layer:feature`) and the bytes of a full scan.
fn browse_width(model: &Model) -> (Option<&lql_storage::model::Operand>, usize, Option<u64>) {
    let s = &model.surface;
    match &s.moe {
        None => {
            let gate = model.operand(OperandKey::layer(0, s.feature_key_role()));
            (gate, s.ffn, gate.map(|g| g.len as u64))
        }
        Some(m) => {
            let gate = model.operand(OperandKey::layer(0, Role::FfnGateExps));
            let shared = model.operand(OperandKey::layer(0, Role::FfnGateShexp));
            let bytes = gate.map(|g| (g.len + shared.map_or(0, |x| x.len)) as u64);
            (gate, m.n_experts * m.expert_ffn + m.shared_ffn, bytes)
        }
    }
}

/// The container's stored labels segment when it applies to this binding, judged from
/// `index.json` alone (no payload byte is read at bind).
fn stored_labels(model: &Model) -> Option<String> {
    if model.kind != StorageKind::Vindex3 || model.surface.moe.is_some() {
        return None;
    }
    match lql_storage::format::vindex3::labels::applicable(model) {
        Ok(Ok(Some(e))) => Some(e.segment),
        _ => None,
    }
}
