//! The storage error type: every variant names what went wrong and where.

use std::path::PathBuf;

/// Errors from reading, writing and verifying model files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A malformed or hostile file: names the file, the byte offset and the field.
    #[error("{path}: at byte {offset}, {field}: {message}")]
    Format {
        path: PathBuf,
        offset: u64,
        field: String,
        message: String,
    },
    /// A tensor that is missing, misshapen or unexpected for the judged architecture.
    #[error("{path}: tensor {tensor}: {message}")]
    Tensor {
        path: PathBuf,
        tensor: String,
        message: String,
    },
    /// A file larger than the documented cap for its kind (docs/security.md).
    #[error("{path}: {field}: {size} bytes exceeds the {limit}-byte limit")]
    TooLarge {
        path: PathBuf,
        field: String,
        size: u64,
        limit: u64,
    },
    /// A mapped model file changed (size, mtime or inode) since it was opened.
    #[error("{path}: model file changed since USE: re-bind ({what})")]
    Changed { path: PathBuf, what: String },
    /// The model catalogue could not provide a model (download, checksum, cache).
    #[error("model {name}: {message}")]
    Catalogue { name: String, message: String },
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("missing operand: {key}")]
    MissingOperand { key: String },
    #[error("{0}")]
    Invalid(String),
    /// A layer package refused by one named check of its validation (seed 000).
    #[error("layer package check {check} failed for {artifact}: {message}")]
    Package {
        check: &'static str,
        artifact: String,
        message: String,
    },
    /// A package download failed: the reference, the URL and what the server did wrong.
    #[error("{reference}: fetching {url}: {message}")]
    Fetch {
        reference: String,
        url: String,
        message: String,
    },
    /// The statement was interrupted (Ctrl-C, `Connection::interrupt`) while reading.
    #[error("interrupted while reading {what}")]
    Interrupted { what: String },
    #[error("internal error (this is a bug): {0}")]
    Internal(String),
}

impl StorageError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StorageError::Io {
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = StorageError> = std::result::Result<T, E>;

impl From<lql_codec::CodecError> for StorageError {
    fn from(e: lql_codec::CodecError) -> Self {
        match e {
            lql_codec::CodecError::Unsupported(m) => StorageError::Unsupported(m),
            lql_codec::CodecError::Invalid(m) => StorageError::Invalid(m),
            other => StorageError::Invalid(other.to_string()),
        }
    }
}
