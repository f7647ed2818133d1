//! What every request handler shares: the settings, the database (mapped model, shared
//! tokenizer), the chat template, the decoding slots and the decode scheduler, sessions and metrics.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use lql::Database;
use lql_exec::tokenizer::Tokenizer;
use lql_exec::{CpuBackend, Executor};
use lql_storage::Model;

use crate::batcher::Batcher;
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
    pub model: Arc<Model>,
    pub tokenizer: Arc<Tokenizer>,
    /// `None` when the model has no chat template (chat routes then answer 400).
    pub template: Option<ChatTemplate>,
    pub pool: Arc<Pool>,
    /// What `/v1/embeddings` runs (the decode executor's model and backend).
    pub embedder: Executor,
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
        let (_, model) = db
            .default_model()
            .ok_or_else(|| "the model did not bind".to_string())?;
        let tokenizer = db.default_tokenizer().map_err(|e| e.to_string())?;
        let spec = model.tokenizer_spec().map_err(|e| e.to_string())?;
        let text_of = |id: Option<u32>| {
            id.and_then(|i| tokenizer.token_raw(i).map(str::to_string))
                .unwrap_or_default()
        };
        let file_template = match &config.chat_template_file {
            Some(path) => Some(
                lql_storage::fsutil::read_capped_text(path, "chat template", 1 << 20)
                    .map_err(|e| format!("--chat-template: {e}"))?,
            ),
            None => None,
        };
        let template = match file_template.as_deref().or(spec.chat_template()) {
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
        let source: Arc<dyn lql_storage::OperandSource> = model.clone();
        let backend =
            Arc::new(CpuBackend::new(config.decode_threads()).map_err(|e| e.to_string())?);
        let exec = Executor::with_backend(source, backend).map_err(|e| e.to_string())?;
        // Embeddings run beside the decode thread, on the same backend.
        let embedder = exec.clone();
        let cache = crate::prefix_cache::PrefixCache::new(
            usize::try_from(config.prompt_cache_bytes).unwrap_or(usize::MAX),
            config.prompt_chunk,
        );
        let batcher = Batcher::start(exec, tokenizer.clone(), metrics.clone(), cache)?;
        let pool = Pool::new(config.parallel, config.queue, batcher, config.max_memory);
        Ok(AppState {
            model_id: config.model_alias(),
            sessions: Sessions::new(config.max_sessions, config.max_memory),
            config,
            db,
            model,
            tokenizer,
            template,
            pool: Arc::new(pool),
            embedder,
            patches,
            metrics,
            started: now_secs(),
            write_dir,
            shutting_down: AtomicBool::new(false),
        })
    }

    /// The most prompt tokens accepted.
    pub fn prompt_limit(&self) -> usize {
        let ctx = self.model.surface.context_length;
        match self.config.max_prompt_tokens {
            0 => ctx.saturating_sub(1),
            n => n.min(ctx.saturating_sub(1)),
        }
    }
}
