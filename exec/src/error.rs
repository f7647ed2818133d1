//! The executor's error type, the crate's one error enum (as candle keeps one per crate):
//! running a model, browsing its features (WALK, DESCRIBE, the virtual tables), tracing it
//! (captures, `.trace` files, drawings) and tokenizing. Every variant names what went wrong
//! and where; a wrapped error keeps its `source()`.

use std::path::PathBuf;

use lql_storage::StorageError;

/// Errors from running, browsing, tracing and tokenizing a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A required operand is absent from the model.
    #[error("missing operand: {operand}{}", layer_suffix(*.layer))]
    MissingOperand {
        operand: &'static str,
        layer: Option<usize>,
    },
    /// An operand's shape or encoding disagrees with the execution surface.
    #[error("operand {operand}{}: {message}", layer_suffix(*.layer))]
    Shape {
        operand: &'static str,
        layer: Option<usize>,
        message: String,
    },
    /// The execution surface itself is inconsistent.
    #[error("invalid execution surface: {0}")]
    Surface(String),
    #[error("empty prompt: at least one token is needed")]
    EmptyPrompt,
    /// More positions than the model's context allows.
    #[error("context limit exceeded: {needed} positions needed, the model's context is {limit}")]
    ContextOverflow { needed: usize, limit: usize },
    /// A token id outside the vocabulary (at `position` of the ids given, when there
    /// were several).
    #[error("token id {id}{} is out of range (vocabulary size {vocab})", position_suffix(*.position))]
    TokenOutOfRange {
        id: u32,
        position: Option<usize>,
        vocab: usize,
    },
    /// A layer outside the model.
    #[error("layer {layer} is out of range: the model has {n_layers} layers (0-{})", n_layers.saturating_sub(1))]
    LayerOutOfRange { layer: usize, n_layers: usize },
    /// A reversed or empty layer range.
    #[error("empty layer range {start}-{end}")]
    EmptyLayerRange { start: usize, end: usize },
    /// Nothing to build a browse query from.
    #[error("empty input: {0} tokenizes to no tokens")]
    EmptyInput(String),
    /// RESIDUAL mode (or another forward pass) on a binding that cannot run the model.
    #[error(
        "MODE RESIDUAL needs to run the model, but this binding is browse-only: missing {}",
        missing.join(", ")
    )]
    NotExecutable { missing: Vec<String> },
    /// A request a trace cannot answer (a position not kept, a token that is not one).
    #[error("{0}")]
    Invalid(String),
    /// A `.trace` file that is not one, or is damaged.
    #[error("{}: not a valid trace file: {what}", path.display())]
    TraceFormat { path: PathBuf, what: String },
    /// Drawing a heatmap failed.
    #[error("drawing {}: {message}", path.display())]
    Draw { path: PathBuf, message: String },
    /// The source carries no tokenizer at all.
    #[error("the model carries no tokenizer")]
    NoTokenizer,
    /// `tokenizer.ggml.model` names a tokenizer family that is not built.
    #[error(
        "not supported yet: tokenizer model `{0}` (tokenizer.ggml.model; supported: gpt2, llama)"
    )]
    UnknownTokenizerModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer that is not built.
    #[error("not supported yet: pre-tokenizer `{0}` (tokenizer.ggml.pre)")]
    UnknownPreTokenizer(String),
    /// The vocabulary description is inconsistent (`what` names the field and entry).
    #[error("invalid tokenizer vocabulary: {what}: {message}")]
    InvalidVocab { what: String, message: String },
    /// A Hugging Face `tokenizer.json` could not be loaded.
    #[error("invalid tokenizer.json: {0}")]
    TokenizerJson(String),
    /// The `tokenizers` library refused an input.
    #[error("tokenizer: {0}")]
    TokenizerLibrary(String),
    #[error("invalid option: {0}")]
    InvalidOption(String),
    #[error("cancelled")]
    Cancelled,
    #[error("not supported yet: {0}")]
    Unsupported(String),
    /// A grammar or JSON schema for constrained decoding that does not compile, or a
    /// generation it cannot continue.
    #[error("{kind}: {message}")]
    Grammar { kind: String, message: String },
    /// A device backend failed: no adapter, a kernel that did not compile, the device
    /// lost, out of device memory.
    #[error("{kind} on {adapter} during {operation}: {message}")]
    Device {
        kind: DeviceFault,
        adapter: String,
        operation: String,
        message: String,
    },
    /// A value the forward pass produced is NaN or infinite (weights, an edit or a scale
    /// that overflows f32).
    #[error("{what} are not finite: the model's weights, edits or scales produce NaN or infinity")]
    NonFinite { what: String },
    #[error("internal error (this is a bug): {0}")]
    Internal(String),
}

/// What went wrong on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceFault {
    /// No adapter of the kind asked for.
    NoAdapter,
    /// A kernel failed validation or compilation.
    KernelCompile,
    /// The device was lost (driver reset, removal).
    DeviceLost,
    /// Out of device memory.
    OutOfMemory,
    /// Any other device error (validation of a command).
    Other,
}

impl DeviceFault {
    /// The stable short name.
    pub fn name(self) -> &'static str {
        match self {
            DeviceFault::NoAdapter => "no GPU adapter",
            DeviceFault::KernelCompile => "kernel compile failure",
            DeviceFault::DeviceLost => "device lost",
            DeviceFault::OutOfMemory => "out of device memory",
            DeviceFault::Other => "device error",
        }
    }
}

impl std::fmt::Display for DeviceFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl ExecError {
    /// An inconsistent vocabulary: `what` names the field and entry.
    pub(crate) fn vocab(what: impl Into<String>, message: impl Into<String>) -> Self {
        ExecError::InvalidVocab {
            what: what.into(),
            message: message.into(),
        }
    }
}

/// " at position 3" for a token among several, nothing for a single one.
fn position_suffix(position: Option<usize>) -> String {
    position.map_or_else(String::new, |p| format!(" at position {p}"))
}

/// " of layer 3" for a per-layer operand, nothing for a global one.
pub(crate) fn layer_suffix(layer: Option<usize>) -> String {
    match layer {
        Some(l) => format!(" of layer {l}"),
        None => String::new(),
    }
}

pub type Result<T, E = ExecError> = std::result::Result<T, E>;

/// A codec's refusal (lengths that are not whole blocks, an encoding it does not write) is
/// a storage error: the bytes came from a model file.
impl From<lql_storage::codec::CodecError> for ExecError {
    fn from(e: lql_storage::codec::CodecError) -> Self {
        ExecError::Storage(e.into())
    }
}
