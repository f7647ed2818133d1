//! What every request handler shares: the settings, the database (mapped model, shared
//! tokenizer), the engine's generation service over it, the chat template, the decoding
//! slots and the decode scheduler, sessions and metrics.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use lql::generation::{read_chat_template, GenerationModel, PrefixCache, Tokenizer};
use lql::Database;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::pool::Pool;
use crate::sessions::Sessions;
use crate::template::ChatTemplate;

/// Shared server state.
pub struct AppState {
    pub config: Config,
    pub db: Database,
    /// The model's id on `/v1/models` (the name or path it was opened by).
    pub model_id: String,
    /// The model as the engine's generation service opens it: decoding, embeddings,
    /// steering and patched states run on its one executor.
    pub generation: GenerationModel,
    pub tokenizer: Arc<Tokenizer>,
    /// `None` when the model has no chat template (chat routes then answer 400).
    pub template: Option<ChatTemplate>,
    pub pool: Arc<Pool>,
    /// The `--patches` folder requests may name patches from.
    pub patches: Option<crate::patches::PatchStore>,
    pub sessions: Sessions,
    pub metrics: Arc<Metrics>,
    /// Unix seconds at start (`created` of the model object).
    pub started: u64,
    /// The canonical `--allow-writes` folder.
    pub write_dir: Option<PathBuf>,
    /// Set once SIGTERM (or the shutdown future) arrived.
    pub shutting_down: AtomicBool,
}

/// Unix time in seconds.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl AppState {
    /// Opens the model and builds everything a server needs.
    pub fn open(config: Config) -> Result<AppState, String> {
        if config.read_only && config.allow_writes.is_some() {
            return Err("--read-only and --allow-writes cannot be combined".into());
        }
        let db = Database::open_with_flags(&config.model, config.open_flags())
            .map_err(|e| e.to_string())?;
        let generation =
            GenerationModel::open(&db, config.decode_threads()).map_err(|e| e.message)?;
        let tokenizer = generation.tokenizer().clone();
        let text_of = |id: Option<u32>| {
            id.and_then(|i| tokenizer.token_raw(i).map(str::to_string))
                .unwrap_or_default()
        };
        let template_source = match &config.chat_template_file {
            Some(path) => Some(
                read_chat_template(path).map_err(|e| format!("--chat-template: {}", e.message))?,
            ),
            None => generation.chat_template().map_err(|e| e.message)?,
        };
        let template = match template_source.as_deref() {
            Some(src) => Some(ChatTemplate::new(
                src,
                text_of(tokenizer.bos_id()),
                text_of(tokenizer.eos_id()),
            )?),
            None => None,
        };
        let patches = match &config.patch_dir {
            Some(d) => Some(crate::patches::PatchStore::new(
                std::fs::canonicalize(d).map_err(|e| format!("--patches {}: {e}", d.display()))?,
            )),
            None => None,
        };
        let write_dir = match &config.allow_writes {
            Some(d) => Some(
                std::fs::canonicalize(d)
                    .map_err(|e| format!("--allow-writes {}: {e}", d.display()))?,
            ),
            None => None,
        };
        let metrics = Arc::new(Metrics::default());
        let cache = PrefixCache::new(
            usize::try_from(config.prompt_cache_bytes).unwrap_or(usize::MAX),
            config.prompt_chunk,
        );
        let batcher = generation
            .start_batcher(cache, metrics.clone())
            .map_err(|e| e.message)?;
        let pool = Pool::new(config.parallel, config.queue, batcher, config.max_memory);
        Ok(AppState {
            model_id: config.model_alias(),
            sessions: Sessions::new(config.max_sessions, config.max_memory),
            config,
            db,
            generation,
            tokenizer,
            template,
            pool: Arc::new(pool),
            patches,
            metrics,
            started: now_secs(),
            write_dir,
            shutting_down: AtomicBool::new(false),
        })
    }

    /// The most prompt tokens accepted.
    pub fn prompt_limit(&self) -> usize {
        let ctx = self.generation.context_length();
        match self.config.max_prompt_tokens {
            0 => ctx.saturating_sub(1),
            n => n.min(ctx.saturating_sub(1)),
        }
    }
}
