//! What generation runs on: a database's default model, its shared tokenizer and one
//! executor on a CPU backend of its own. The decode scheduler, embeddings and patched
//! model states are all built over that one executor, so one mapped model and one thread
//! pool serve them all.

use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::Arc;

use lql_exec::steer::Steering;
use lql_exec::tokenizer::Tokenizer;
use lql_exec::{CpuBackend, Executor};
use lql_storage::model::OperandSource;
use lql_storage::Model;

use super::batcher::{BatchObserver, Batcher};
use super::prefix_cache::PrefixCache;
use crate::database::{Database, SharedModel};
use crate::error::{Error, Result};

/// Largest chat template file read ([`read_chat_template`]).
const MAX_CHAT_TEMPLATE_BYTES: u64 = 1 << 20;

/// The model generation runs on, with its tokenizer and executor.
pub struct GenerationModel {
    /// The database's model as its connections share it: one tokenizer, one identity hash.
    shared: Arc<SharedModel>,
    tokenizer: Arc<Tokenizer>,
    exec: Executor,
}

/// The lower layer's error with its text unchanged (servers answer that text as it is),
/// and the engine's kind and code.
pub(super) fn verbatim<E: std::fmt::Display + Into<Error>>(e: E) -> Error {
    let message = e.to_string();
    let mut error: Error = e.into();
    error.message = message;
    error
}

impl GenerationModel {
    /// Generation over `db`'s default model: its shared tokenizer, and an executor on a
    /// CPU backend of `threads` threads (0: one per core) that decoding, embeddings and
    /// patched states share.
    pub fn open(db: &Database, threads: usize) -> Result<GenerationModel> {
        let shared = db
            .default_shared()
            .ok_or_else(|| Error::semantic("the model did not bind"))?;
        let tokenizer = shared.tokenizer()?;
        let source: Arc<dyn OperandSource> = shared.model.clone();
        let backend = Arc::new(CpuBackend::new(threads).map_err(verbatim)?);
        let exec = Executor::with_backend(source, backend).map_err(verbatim)?;
        Ok(GenerationModel {
            shared,
            tokenizer,
            exec,
        })
    }

    /// The model's tokenizer (the one every connection of the database shares).
    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.tokenizer
    }

    /// Positions the model attends over (a prompt and its completion together).
    pub fn context_length(&self) -> usize {
        self.shared.model.surface.context_length
    }

    /// Token ids are below this.
    pub fn vocab_size(&self) -> usize {
        self.shared.model.surface.vocab
    }

    /// Values in an embedding ([`GenerationModel::embed`]): the model's hidden width.
    pub fn embedding_width(&self) -> usize {
        self.shared.model.surface.hidden
    }

    /// The chat template the model's file carries, if any.
    pub fn chat_template(&self) -> Result<Option<String>> {
        let spec = self.shared.model.tokenizer_spec().map_err(verbatim)?;
        Ok(spec.chat_template().map(str::to_string))
    }

    /// Starts the decode scheduler on its own thread over this model's executor, with
    /// `cache` for prompt prefixes; `observer` sees what it counts.
    pub fn start_batcher(
        &self,
        cache: PrefixCache,
        observer: Arc<dyn BatchObserver>,
    ) -> Result<Batcher> {
        Batcher::start(self.exec.clone(), self.tokenizer.clone(), observer, cache)
            .map_err(Error::internal)
    }

    /// The embedding of `ids` (a fresh sequence, outside the decode batch): the
    /// final-normed hidden states, mean-pooled and scaled to unit length.
    pub fn embed(&self, ids: &[u32]) -> Result<Vec<f32>> {
        lql_exec::embedding::mean_pooled(&self.exec, ids).map_err(verbatim)
    }

    /// Steering from the llama.cpp control vector at `path`, scaled by `scale`, on
    /// `layers` (all of the file's when `None`), checked against this model.
    pub fn steering(
        &self,
        path: &str,
        scale: f32,
        layers: Option<RangeInclusive<usize>>,
    ) -> Result<Steering> {
        Steering::read_control_vector(&self.shared.model.surface, path, scale, layers)
            .map_err(verbatim)
    }

    pub(super) fn model(&self) -> &Arc<Model> {
        &self.shared.model
    }

    pub(super) fn base_executor(&self) -> &Executor {
        &self.exec
    }

    pub(super) fn identity(&self) -> [u8; 32] {
        self.shared.identity()
    }
}

/// A chat template from a file (UTF-8, at most 1 MiB), read under the engine's file rules.
pub fn read_chat_template(path: &Path) -> Result<String> {
    lql_storage::fsutil::read_capped_text(path, "chat template", MAX_CHAT_TEMPLATE_BYTES)
        .map_err(verbatim)
}
