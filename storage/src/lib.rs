//! # lql-storage
//!
//! Everything LQL reads from or writes to disk, and the model representation the executor
//! runs on.
//!
//! ```text
//!  GGUF file ─┐                     ┌─ surface   (judged facts, serialisable)
//!  HF folder ─┼─ format::* ─ import ┼─ tokenizer (capability snapshot)
//!  VINDEX3  ──┘   (mmap, no copies) └─ operands  (layer, role) → TensorView into the map
//! ```
//!
//! - [`dtype`] and [`codec`]: the `lql-codec` crate, re-exported (tensor encodings; decode,
//!   encode and fused dot products per encoding).
//! - [`format`]: the file formats (GGUF reader/writer, safetensors, VINDEX3).
//! - [`import`]: architecture judgement, source → [`model::Model`].
//! - [`catalogue`]: named models and the local cache.
//! - [`fsutil`]: file-access rules (regular files only, size caps, paths resolved inside
//!   their root, exclusive temporary files renamed into place).
//! - [`mapped`]: mapped model files, their fingerprints and the SIGBUS reporter.
//! - [`interrupt`]: the running statement's interrupt flag, polled by loops over counts a
//!   file declares.
//! - [`material`]: the material seam DIFF and COMPILE read states through; [`diff`]: DIFF.
//! - [`overlay`]: the effective model state (base + patches) and the patch file format.

pub mod catalogue;
pub mod diff;
pub mod error;
pub mod format;
pub mod fsutil;
pub mod import;
pub mod interrupt;
pub mod json_strict;
pub mod mapped;
pub mod material;
pub mod meter;
pub mod model;
pub mod overlay;
pub mod surface;
pub mod tokenizer_spec;
pub mod user_catalogue;

pub use error::{Result, StorageError};
pub use lql_codec::{self as codec, dtype, DType};
pub use model::{Model, OperandKey, OperandSource, Role, TensorView};
pub use surface::ExecutionSurface;
