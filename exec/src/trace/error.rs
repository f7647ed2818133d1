//! The trace module's error type: capture, file and drawing failures, naming the file and
//! what was wrong in it.

use std::path::PathBuf;

use crate::error::ExecError;

/// Errors from tracing, saving, loading or drawing a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `.trace` file that is not one, or is damaged.
    #[error("{}: not a valid trace file: {what}", path.display())]
    Format { path: PathBuf, what: String },
    /// A request the trace cannot answer (token out of range, position not kept, …).
    #[error("{0}")]
    Invalid(String),
    /// Drawing the heatmap failed.
    #[error("drawing {}: {message}", path.display())]
    Draw { path: PathBuf, message: String },
    #[error("internal error (this is a bug): {0}")]
    Internal(String),
}

pub type Result<T, E = TraceError> = std::result::Result<T, E>;
