//! The executor's error type: every variant names what went wrong and where.

use lql_storage::StorageError;

/// Errors from planning and running a model.
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
    #[error("token id {id} at position {position} is out of range (vocabulary size {vocab})")]
    TokenOutOfRange {
        id: u32,
        position: usize,
        vocab: usize,
    },
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
