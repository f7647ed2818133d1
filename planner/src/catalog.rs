//! What the planner may know about the bound model, through a trait the engine
//! (`lql` crate) implements — so the planner is testable without a model.

/// The planner's window onto the session: the bound model's facts, if any.
pub trait Catalog {
    /// Facts about the bound model; `None` when no model is bound.
    fn bound(&self) -> Option<ModelFacts>;
    /// The session's backend setting (`SET backend`): where a USE that names none runs.
    fn backend(&self) -> lql_grammar::BackendChoice {
        lql_grammar::BackendChoice::Cpu
    }
    /// The first GPU adapter present (the one the GPU backend runs on), if any: what
    /// `BACKEND auto` resolves by.
    fn gpu_adapter(&self) -> Option<String> {
        None
    }
}

/// What kind of artefact the bound model came from.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub enum SourceKind {
    #[default]
    Gguf,
    Vindex3,
    Package,
    Safetensors,
    Other(String),
}

impl std::fmt::Display for SourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceKind::Gguf => f.write_str("GGUF"),
            SourceKind::Vindex3 => f.write_str("VINDEX3"),
            SourceKind::Package => f.write_str("layer package"),
            SourceKind::Safetensors => f.write_str("safetensors"),
            SourceKind::Other(s) => f.write_str(s),
        }
    }
}

/// Facts about the bound model that planning needs.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct ModelFacts {
    /// Display name (path or catalogue name), used in messages.
    pub name: String,
    pub source: SourceKind,
    /// Layers of the whole model.
    pub n_layers: usize,
    /// When a stage was bound (`USE "pkg" LAYERS a-b`): the inclusive layer range present.
    pub stage: Option<(usize, usize)>,
    pub vocab: usize,
    pub hidden: usize,
    pub ffn: usize,
    /// Attention heads per layer (0: unknown; PATCH's head is then checked when it runs).
    pub n_heads: usize,
    /// Longest sequence the model supports, when known.
    pub context_length: Option<usize>,
    /// All operands for a forward pass are present.
    pub can_execute: bool,
    /// Operands a forward pass needs that are absent (named in refusals).
    pub missing_for_execute: Vec<String>,
    /// Gate rows and the embedding are present (WALK EMBEDDING, DESCRIBE).
    pub can_browse: bool,
    /// Operands browsing needs that are absent.
    pub missing_for_browse: Vec<String>,
    /// A tokenizer is available.
    pub can_tokenize: bool,
    /// Why not, when it is not (the capability file that failed its checks, or what the
    /// file lacks).
    pub tokenizer_problem: Option<String>,
    /// Set when the model's architecture cannot run at all (the file opened for
    /// inspection): why, naming the supported architectures.
    pub unsupported: Option<String>,
    /// Encoding of the FFN gate rows (e.g. "Q4_1"), for EXPLAIN.
    pub gate_encoding: Option<String>,
    /// Bytes of gate rows read per layer by a full gate scan, for EXPLAIN.
    pub gate_bytes_per_layer: Option<u64>,
    /// The container's stored labels segment, when it applies to this binding (labels are
    /// then read, not computed).
    pub stored_labels: Option<String>,
}

impl ModelFacts {
    /// The inclusive range of layers present (the stage, or all layers).
    pub fn layer_bounds(&self) -> (usize, usize) {
        self.stage.unwrap_or((0, self.n_layers.saturating_sub(1)))
    }
}

/// A catalog with no model bound (and the default table schemas).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct EmptyCatalog;

impl Catalog for EmptyCatalog {
    fn bound(&self) -> Option<ModelFacts> {
        None
    }
}

/// A catalog over fixed facts (tests, tools).
impl Catalog for ModelFacts {
    fn bound(&self) -> Option<ModelFacts> {
        Some(self.clone())
    }
}
