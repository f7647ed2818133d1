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
