//! The server's settings (the `lql serve` flags) and their defaults.

use std::path::PathBuf;

/// Settings of one server.
#[derive(Debug, Clone)]
pub struct Config {
    /// A model path or catalogue name.
    pub model: String,
    /// Address to bind (127.0.0.1 by default).
    pub host: String,
    /// Port (0: any free port).
    pub port: u16,
    /// Requests that decode at once.
    pub parallel: usize,
    /// Requests that may wait for a slot; one more is answered 429.
    pub queue: usize,
    /// When set, every route but `/health` needs `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    /// Statements that write files run over HTTP only when set, and only under this folder.
    pub allow_writes: Option<PathBuf>,
    /// Largest request body accepted (413 above).
    pub max_body_bytes: usize,
    /// Most prompt tokens accepted (400 above); 0: the model's context length.
    pub max_prompt_tokens: usize,
    /// Most completion tokens one request may ask for.
    pub max_tokens_limit: usize,
    /// Most `n` (choices) one request may ask for.
    pub max_n: usize,
    /// Most `X-LQL-Session` sessions kept (the least recently used is dropped).
    pub max_sessions: usize,
    /// Seconds in-flight requests get to finish after SIGTERM before they are cancelled.
    pub shutdown_grace_s: u64,
    /// Backend threads of the decode scheduler (0: one per core).
    pub threads: usize,
    /// Never download: a catalogue name not in the cache is refused at start.
    pub offline: bool,
    /// Refuse every statement that writes files or edits the model state over `/v1/lql`
    /// (`LQL-E0204`), even session edits; cannot be combined with `allow_writes`.
    pub read_only: bool,
    /// Serve the browser workbench at `/` (`--no-ui` turns it off).
    pub ui: bool,
    /// The model's name to clients (`/v1/models` ids, `/health`, responses' `model`);
    /// `None`: [`Config::model_alias`]'s default. The path itself is never shown.
    pub alias: Option<String>,
    /// Most open connections; one more is answered 503 and closed at once.
    pub max_connections: usize,
    /// Seconds a connection gets to send a request's headers (also while idle between
    /// requests); then it is closed.
    pub header_timeout_s: u64,
    /// Seconds a request gets to send its whole body; then 408.
    pub body_timeout_s: u64,
    /// Resident memory at which requests that run the model, and new sessions, are
    /// answered 503 (`None`: no bound).
    pub max_memory: Option<u64>,
    /// Bytes of key/value state the prompt-prefix cache keeps (0: none).
    pub prompt_cache_bytes: u64,
    /// The folder of `.lqlpatch` files requests may name (`"patches"`); `None`: requests
    /// naming patches are refused.
    pub patch_dir: Option<PathBuf>,
    /// `--chat-template FILE`: a Jinja chat template used instead of the model's own.
    pub chat_template_file: Option<PathBuf>,
    /// Positions per prompt prefill chunk: prompts are prefilled in chunks starting at
    /// multiples of it, and cached prefixes are reused in whole chunks.
    pub prompt_chunk: usize,
}

impl Config {
    /// Defaults for serving `model`.
    pub fn new(model: impl Into<String>) -> Config {
        Config {
            model: model.into(),
            host: "127.0.0.1".into(),
            port: 8080,
            parallel: 4,
            queue: 64,
            api_key: None,
            allow_writes: None,
            max_body_bytes: 4 << 20,
            max_prompt_tokens: 0,
            max_tokens_limit: 4096,
            max_n: 8,
            max_sessions: 64,
            shutdown_grace_s: 30,
            threads: 0,
            offline: false,
            read_only: false,
            ui: true,
            alias: None,
            max_connections: 512,
            header_timeout_s: 10,
            body_timeout_s: 30,
            max_memory: None,
            prompt_cache_bytes: 256 << 20,
            prompt_chunk: 256,
            patch_dir: None,
            chat_template_file: None,
        }
    }

    /// The name clients see: the alias when given, else the model file's stem (a folder's
    /// name), or the catalogue name as given. A path would tell clients where the server
    /// keeps its files.
    pub fn model_alias(&self) -> String {
        if let Some(a) = &self.alias {
            return a.clone();
        }
        let p = std::path::Path::new(&self.model);
        let looks_like_path = self.model.contains(std::path::MAIN_SEPARATOR)
            || self.model.contains('/')
            || p.extension().is_some();
        match p.file_stem() {
            Some(stem) if looks_like_path => stem.to_string_lossy().into_owned(),
            _ => self.model.clone(),
        }
    }

    /// The options the served database is opened with.
    pub fn open_flags(&self) -> lql::OpenFlags {
        let mut f = lql::OpenFlags::NONE;
        if self.offline {
            f |= lql::OpenFlags::OFFLINE;
        }
        if self.read_only {
            f |= lql::OpenFlags::READ_ONLY;
        }
        f
    }

    /// Threads of the decode scheduler's backend (every slot's sequences decode together
    /// on them).
    pub fn decode_threads(&self) -> usize {
        if self.threads > 0 {
            return self.threads;
        }
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alias_never_shows_a_path() {
        let mut c = Config::new("/srv/models/SmolLM2-135M.Q8_0.gguf");
        assert_eq!(c.model_alias(), "SmolLM2-135M.Q8_0");
        c.alias = Some("smol".into());
        assert_eq!(c.model_alias(), "smol");
        assert_eq!(
            Config::new("smollm2-135m-instruct").model_alias(),
            "smollm2-135m-instruct"
        );
        assert_eq!(Config::new("./m/gemma.vindex").model_alias(), "gemma");
    }
}
