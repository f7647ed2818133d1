//! Model states a request may generate with: `.lqlpatch` files ([`PatchFile`]) read and
//! checked against the served model, and a stack of them built into a [`PatchedModel`]: an
//! executor over the shared base that applies the stack's FFN overlay (the same
//! `EffectiveModel` `APPLY PATCH` builds, attached with `Executor::with_overlay`). Such
//! executors share the base's plan, so their sequences decode in the same batched steps as
//! everyone else's, each with its own overlay ([`super::batcher`]).
//!
//! Which files a caller may name (a folder, names or hashes) is the caller's policy;
//! `lql serve`'s is its `--patches DIR`.

use std::path::Path;
use std::sync::Arc;

use lql_exec::Executor;
use lql_storage::fsutil::hex;
use lql_storage::model::OperandSource;
use lql_storage::overlay::patch::{self as patch_format};
use lql_storage::overlay::{EffectiveModel, Patch, PatchOrigin};

use super::model::GenerationModel;

/// A `.lqlpatch` file, read and hashed.
#[derive(Debug)]
pub struct PatchFile {
    path: String,
    file: patch_format::PatchFile,
    sha256: [u8; 32],
}

impl PatchFile {
    /// Reads the patch file at `path` (every check of the format; the message says what
    /// is wrong).
    pub fn read(path: &Path) -> Result<PatchFile, String> {
        let (file, sha256) = patch_format::read(path).map_err(|e| e.to_string())?;
        Ok(PatchFile {
            path: path.display().to_string(),
            file,
            sha256,
        })
    }

    /// The SHA-256 of the file's bytes (a patch's identity).
    pub fn sha256(&self) -> [u8; 32] {
        self.sha256
    }

    /// [`PatchFile::sha256`] in lower-case hex.
    pub fn sha256_hex(&self) -> String {
        hex(self.sha256)
    }
}

/// A model state to generate with: the base model with a stack of patches applied. Cheap
/// to clone (the executor's plan and the overlay are shared).
#[derive(Debug, Clone)]
pub struct PatchedModel {
    exec: Executor,
}

impl PatchedModel {
    pub(crate) fn executor(&self) -> &Executor {
        &self.exec
    }
}

impl GenerationModel {
    /// Why `patch` cannot apply to this model (made on another model, or for another
    /// shape), if it cannot.
    pub fn patch_mismatch(&self, patch: &PatchFile) -> Option<String> {
        let identity = self.identity();
        if patch.file.base_sha256 != identity {
            return Some(format!(
                "the patch was made on the model with sha256 {}; this model has sha256 {}",
                hex(patch.file.base_sha256),
                hex(identity)
            ));
        }
        let surface = &self.model().surface;
        if patch.file.hidden != surface.hidden || patch.file.n_layers != surface.n_layers {
            return Some("the patch is for another model's shape".into());
        }
        None
    }

    /// This model with `patches` applied in order (each checked with
    /// [`GenerationModel::patch_mismatch`] by the caller, which words the refusal).
    pub fn patched(&self, patches: Vec<PatchFile>) -> Result<PatchedModel, String> {
        let patches: Vec<Patch> = patches
            .into_iter()
            .map(|p| Patch {
                origin: PatchOrigin::File {
                    path: p.path,
                    sha256: p.sha256,
                },
                edits: p.file.edits,
            })
            .collect();
        let state = EffectiveModel::new(self.model().clone(), patches)?;
        let source: Arc<dyn OperandSource> = Arc::new(state);
        let exec = self
            .base_executor()
            .clone()
            .with_overlay(Some(source))
            .map_err(|e| format!("the patched model does not run: {e}"))?;
        Ok(PatchedModel { exec })
    }
}
