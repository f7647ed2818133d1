//! The tokenizer's error type: every variant names what was refused and why.

use lql_storage::StorageError;

/// Errors from building or running a tokenizer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// The source carries no tokenizer at all.
    #[error("the model carries no tokenizer")]
    NoTokenizer,
    /// `tokenizer.ggml.model` names a tokenizer family that is not built.
    #[error(
        "not supported yet: tokenizer model `{0}` (tokenizer.ggml.model; supported: gpt2, llama)"
    )]
    UnknownModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer that is not built.
    #[error("not supported yet: pre-tokenizer `{0}` (tokenizer.ggml.pre)")]
    UnknownPreTokenizer(String),
    /// The vocabulary description is inconsistent (`what` names the field and entry).
    #[error("invalid tokenizer vocabulary: {what}: {message}")]
    InvalidVocab { what: String, message: String },
    /// A Hugging Face `tokenizer.json` could not be loaded.
    #[error("invalid tokenizer.json: {0}")]
    Json(String),
    /// A token id outside the vocabulary was given to decode.
    #[error("token id {id} at position {position} is outside the vocabulary of {vocab} tokens")]
    UnknownTokenId {
        id: u32,
        position: usize,
        vocab: usize,
    },
    /// The `tokenizers` library refused an input.
    #[error("tokenizer: {0}")]
    Library(String),
    /// Reading the tokenizer metadata from its source failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl TokenizerError {
    pub(crate) fn vocab(what: impl Into<String>, message: impl Into<String>) -> Self {
        TokenizerError::InvalidVocab {
            what: what.into(),
            message: message.into(),
        }
    }
}

/// Result with [`TokenizerError`].
pub type Result<T, E = TokenizerError> = std::result::Result<T, E>;
