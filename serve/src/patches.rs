//! Per-request model state: `"patches": ["fact.lqlpatch", "<sha256>"]` names `.lqlpatch`
//! files in the folder given at start (`--patches DIR`), by file name or by the sha256 of
//! the file. The server keeps one mapped base; each distinct patch stack gets the engine's
//! patched model state over it ([`lql::generation::GenerationModel::patched`]: an executor
//! over the base that applies the stack's FFN overlay; built once, kept for reuse), and its
//! requests decode in the same batched steps as everyone else's, each sequence with its own
//! overlay. This file is the server's policy: which names a request may give, how many, and
//! how many states are kept.
//! A patch outside the folder, not in it, made on another model, or a request naming
//! patches to a server started without the folder, is a 400 naming `patches`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use lql::generation::{GenerationModel, PatchFile, PatchedModel};

use crate::error::ApiError;

/// Most patch stacks whose states are kept.
const KEPT_STATES: usize = 16;
/// Most patches one request may name.
const MAX_PATCHES: usize = 16;

/// The `--patches` folder and the model states built over it.
pub struct PatchStore {
    dir: PathBuf,
    states: Mutex<Vec<(Vec<[u8; 32]>, PatchedModel)>>,
}

fn bad(m: impl Into<String>) -> ApiError {
    ApiError::invalid_param("patches", m.into())
}

impl PatchStore {
    pub fn new(dir: PathBuf) -> PatchStore {
        PatchStore {
            dir,
            states: Mutex::new(Vec::new()),
        }
    }

    /// The state of `model` with `names` applied in order (`None` for no names).
    pub fn state(
        &self,
        names: &[String],
        model: &GenerationModel,
    ) -> Result<Option<PatchedModel>, ApiError> {
        if names.is_empty() {
            return Ok(None);
        }
        if names.len() > MAX_PATCHES {
            return Err(bad(format!("at most {MAX_PATCHES} patches")));
        }
        let mut patches: Vec<PatchFile> = Vec::with_capacity(names.len());
        for name in names {
            let patch = self.read(name)?;
            if let Some(why) = model.patch_mismatch(&patch) {
                return Err(bad(format!("{name}: {why}")));
            }
            if patches.iter().any(|p| p.sha256() == patch.sha256()) {
                return Err(bad(format!("{name} is named twice")));
            }
            patches.push(patch);
        }
        let key: Vec<[u8; 32]> = patches.iter().map(PatchFile::sha256).collect();
        let mut states = self
            .states
            .lock()
            .map_err(|_| ApiError::internal("the patch states are poisoned"))?;
        if let Some((_, state)) = states.iter().find(|(k, _)| *k == key) {
            return Ok(Some(state.clone()));
        }
        let state = model.patched(patches).map_err(bad)?;
        if states.len() >= KEPT_STATES {
            states.remove(0);
        }
        states.push((key, state.clone()));
        Ok(Some(state))
    }

    /// A patch by file name in the folder, or by the sha256 of a file in it.
    fn read(&self, name: &str) -> Result<PatchFile, ApiError> {
        if name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            let want = name.to_ascii_lowercase();
            let entries = std::fs::read_dir(&self.dir)
                .map_err(|e| bad(format!("the patches folder cannot be read: {e}")))?;
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|x| x == "lqlpatch") {
                    if let Ok(patch) = PatchFile::read(&path) {
                        if patch.sha256_hex() == want {
                            return Ok(patch);
                        }
                    }
                }
            }
            return Err(bad(format!(
                "no patch in the patches folder has sha256 {want}"
            )));
        }
        let path = self.dir.join(name);
        if Path::new(name).is_absolute() {
            return Err(bad(format!(
                "{name:?}: name a patch by its file name in the patches folder"
            )));
        }
        if let Some(why) = crate::access::outside(&self.dir, &path.display().to_string()) {
            return Err(bad(format!(
                "{why}; patches are read only from the patches folder"
            )));
        }
        if !path.is_file() {
            return Err(bad(format!("{name:?} is not in the patches folder")));
        }
        PatchFile::read(&path).map_err(|e| bad(format!("{name}: {e}")))
    }
}
