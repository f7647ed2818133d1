//! `BrowseError`: why a WALK, DESCRIBE or virtual-table scan could not run, naming what and
//! where (operand, layer, token, column).

use lql_storage::StorageError;

use crate::error::{layer_suffix, ExecError};

/// Errors of the browse operators.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrowseError {
    /// An operand browse needs is absent.
    #[error("missing operand: {operand}{}", layer_suffix(*.layer))]
    MissingOperand {
        operand: &'static str,
        layer: Option<usize>,
    },
    /// An operand's shape or size disagrees with the execution surface.
    #[error("operand {operand}{}: {message}", layer_suffix(*.layer))]
    Shape {
        operand: &'static str,
        layer: Option<usize>,
        message: String,
    },
    /// A layer outside the model.
    #[error("layer {layer} is out of range: the model has {n_layers} layers (0-{})", n_layers.saturating_sub(1))]
    LayerOutOfRange { layer: usize, n_layers: usize },
    /// A reversed or empty layer range.
    #[error("empty layer range {start}-{end}")]
    EmptyLayerRange { start: usize, end: usize },
    /// A token id outside the vocabulary.
    #[error("token id {id} is out of range (vocabulary size {vocab})")]
    TokenOutOfRange { id: u32, vocab: usize },
    /// Nothing to build a query from.
    #[error("empty input: {0} tokenizes to no tokens")]
    EmptyInput(String),
    /// RESIDUAL mode on a binding that cannot run the model.
    #[error(
        "MODE RESIDUAL needs to run the model, but this binding is browse-only: missing {}",
        missing.join(", ")
    )]
    NotExecutable { missing: Vec<String> },
    #[error("not supported yet: {0}")]
    Unsupported(String),
    /// The caller's interrupt flag was raised.
    #[error("cancelled")]
    Cancelled,
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error("internal error (this is a bug): {0}")]
    Internal(String),
}

pub type Result<T, E = BrowseError> = std::result::Result<T, E>;

/// A codec's refusal is a storage error: the bytes came from a model file.
impl From<lql_storage::codec::CodecError> for BrowseError {
    fn from(e: lql_storage::codec::CodecError) -> Self {
        BrowseError::Storage(e.into())
    }
}
