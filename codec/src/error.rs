//! The codec error type.

/// Errors from decoding or encoding rows: lengths that are not whole blocks, and
/// encodings a codec does not write.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// An encoding the operation does not support (a decode-only format as an encode
    /// target, say).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Lengths that do not fit the encoding's blocks, or disagree with each other.
    #[error("{0}")]
    Invalid(String),
}
