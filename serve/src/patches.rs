//! Per-request model state: `"patches": ["fact.lqlpatch", "<sha256>"]` names `.lqlpatch`
//! files in the folder given at start (`--patches DIR`), by file name or by the sha256 of
//! the file. The server keeps one mapped base; each distinct patch stack gets an executor
//! over the base that applies the stack's FFN overlay (`Executor::with_overlay`; built once,
//! kept for reuse), and its requests decode in the same batched steps as everyone else's,
//! each sequence with its own overlay ([`crate::batcher`]).
//! A patch outside the folder, not in it, made on another model, or a request naming
//! patches to a server started without the folder, is a 400 naming `patches`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use lql_exec::Executor;
use lql_storage::model::{Model, OperandSource};
use lql_storage::overlay::patch::{self as pf, PatchFile};
use lql_storage::overlay::{EffectiveModel, Patch, PatchOrigin};

use crate::error::ApiError;

/// Most patch stacks whose executors are kept.
const KEPT_STATES: usize = 16;
/// Most patches one request may name.
const MAX_PATCHES: usize = 16;

/// The `--patches` folder and the executors built over it.
pub struct PatchStore {
    dir: PathBuf,
    identity: OnceLock<[u8; 32]>,
    states: Mutex<Vec<(Vec<[u8; 32]>, Executor)>>,
}

fn bad(m: impl Into<String>) -> ApiError {
    ApiError::invalid_param("patches", m.into())
}

fn hex(b: &[u8; 32]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl PatchStore {
    pub fn new(dir: PathBuf) -> PatchStore {
        PatchStore {
            dir,
            identity: OnceLock::new(),
            states: Mutex::new(Vec::new()),
        }
    }

    /// The executor of `base` with `names` applied in order (`None` for no names).
    pub fn executor(
        &self,
        names: &[String],
        model: &Arc<Model>,
        base: &Executor,
    ) -> Result<Option<Executor>, ApiError> {
        if names.is_empty() {
            return Ok(None);
        }
        if names.len() > MAX_PATCHES {
            return Err(bad(format!("at most {MAX_PATCHES} patches")));
        }
        let identity = *self.identity.get_or_init(|| pf::model_identity(model));
        let mut patches = Vec::with_capacity(names.len());
        for name in names {
            let (path, file, sha256) = self.read(name)?;
            if file.base_sha256 != identity {
                return Err(bad(format!(
                    "{name}: the patch was made on the model with sha256 {}; this server's model has sha256 {}",
                    hex(&file.base_sha256),
                    hex(&identity)
                )));
            }
            if file.hidden != model.surface.hidden || file.n_layers != model.surface.n_layers {
                return Err(bad(format!(
                    "{name}: the patch is for another model's shape"
                )));
            }
            if patches.iter().any(|p: &Patch| {
                matches!(&p.origin, PatchOrigin::File { sha256: h, .. } if *h == sha256)
            }) {
                return Err(bad(format!("{name} is named twice")));
            }
            patches.push(Patch {
                origin: PatchOrigin::File {
                    path: path.display().to_string(),
                    sha256,
                },
                edits: file.edits,
            });
        }
        let key: Vec<[u8; 32]> = patches
            .iter()
            .filter_map(|p| match &p.origin {
                PatchOrigin::File { sha256, .. } => Some(*sha256),
                _ => None,
            })
            .collect();
        let mut states = self
            .states
            .lock()
            .map_err(|_| ApiError::internal("the patch states are poisoned"))?;
        if let Some((_, e)) = states.iter().find(|(k, _)| *k == key) {
            return Ok(Some(e.clone()));
        }
        let state = EffectiveModel::new(model.clone(), patches).map_err(bad)?;
        let source: Arc<dyn OperandSource> = Arc::new(state);
        let exec = base
            .clone()
            .with_overlay(Some(source))
            .map_err(|e| bad(format!("the patched model does not run: {e}")))?;
        if states.len() >= KEPT_STATES {
            states.remove(0);
        }
        states.push((key, exec.clone()));
        Ok(Some(exec))
    }

    /// A patch by file name in the folder, or by the sha256 of a file in it.
    fn read(&self, name: &str) -> Result<(PathBuf, PatchFile, [u8; 32]), ApiError> {
        if name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            let want = name.to_ascii_lowercase();
            let entries = std::fs::read_dir(&self.dir)
                .map_err(|e| bad(format!("the patches folder cannot be read: {e}")))?;
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|x| x == "lqlpatch") {
                    if let Ok((file, sha)) = pf::read(&path) {
                        if hex(&sha) == want {
                            return Ok((path, file, sha));
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
        let (file, sha) = pf::read(&path).map_err(|e| bad(format!("{name}: {e}")))?;
        Ok((path, file, sha))
    }
}
