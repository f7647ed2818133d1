//! Layer package repositories (seed 000, schema 1): a `model-package.json` manifest plus
//! GGUF fragments (shared metadata, embeddings, output, one file per layer) that a stage
//! selects by layer range and loads without the rest of the model.
//!
//! - [`manifest`]: the manifest types and strict parsing (size and nesting caps).
//! - [`validate`]: every MUST of the seed's manifest rules and "Consumer Validation", each
//!   refusal named by its check ([`crate::StorageError::Package`]).
//! - [`generation`]: the optional generation policy and speculative-decoding maps.
//! - [`classify`]: tensor name → layer index and role, the reference slicer's rule.
//! - [`writer`]: slicing a GGUF into fragments and writing the package (manifest last).
//! - [`integrity`]: SHA-256 of artifacts and the checksum cache.
//! - [`loader`]: selecting and mapping the fragments of a layer range into a [`crate::Model`].
//! - [`hf`]: `hf://org/repo[:rev|@rev]` references and their cache folders.
//! - [`hub`]: fetching what a stage needs from a Hub-shaped server into that cache (streamed
//!   verification, resume, atomic install).
//! - [`activation`]: the activation files stages hand each other.
//! - [`against`]: checking a package against its source GGUF (every tensor once, same bytes).

pub mod activation;
pub mod against;
pub mod classify;
pub mod generation;
pub mod hf;
pub mod hub;
pub mod integrity;
pub mod loader;
pub mod manifest;
pub mod validate;
pub mod writer;

pub use loader::{open_package, PackageModel, StageSpan, VerifyMode};
pub use manifest::{Artifact, LayerArtifact, Manifest, ProjectorArtifact};

/// The manifest's file name at the package root.
pub const MANIFEST_NAME: &str = "model-package.json";
/// The schema version this runtime reads and writes.
pub const SCHEMA_VERSION: u64 = 1;
/// The `format` value of a layer package.
pub const FORMAT: &str = "layer-package";
/// The slice ABI this runtime implements (the reference slicer's header version): packages
/// of the same major and a minor no greater than this one are accepted.
pub const RUNTIME_ABI: (u64, u64, u64) = (0, 1, 22);
/// Largest manifest read, in bytes (the reference caps peer-transferred manifests at this).
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;
/// Deepest JSON nesting accepted in a manifest.
pub const MAX_MANIFEST_DEPTH: usize = 32;
/// Most layers a manifest may declare.
pub const MAX_LAYERS: u64 = 100_000;

/// The error of a failed package check: `check` is the check's stable name.
pub(crate) fn refuse(
    check: &'static str,
    artifact: impl Into<String>,
    message: impl Into<String>,
) -> crate::StorageError {
    crate::StorageError::Package {
        check,
        artifact: artifact.into(),
        message: message.into(),
    }
}

/// The runtime ABI as text (`M.m.p`).
pub fn runtime_abi_string() -> String {
    format!("{}.{}.{}", RUNTIME_ABI.0, RUNTIME_ABI.1, RUNTIME_ABI.2)
}
