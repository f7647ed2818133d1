//! Starting and stopping: bind (127.0.0.1 unless told otherwise), serve until the shutdown
//! signal (SIGTERM or Ctrl-C for `lql serve`, a future for embedders and tests), then stop
//! accepting, give in-flight requests `shutdown_grace_s` seconds to finish, cancel what is
//! left, and return. Also the `lql serve` flags ([`ServeArgs`]).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::state::AppState;

/// `lql serve MODEL [flags]`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// A path, or a catalogue name
    pub model: String,
    /// Address to bind
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0: any free port; the address is printed)
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Requests that decode at once
    #[arg(long, default_value_t = 4)]
    pub parallel: usize,
    /// Requests that may wait for a slot (one more is answered 429)
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Require `Authorization: Bearer KEY` (also read from LQL_API_KEY)
    #[arg(long, env = "LQL_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Allow statements that write files over HTTP, only under this folder
    #[arg(long, value_name = "DIR")]
    pub allow_writes: Option<std::path::PathBuf>,
    /// Largest request body in bytes (413 above)
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body: usize,
    /// Most prompt tokens (0: the model's context length)
    #[arg(long, default_value_t = 0)]
    pub max_prompt_tokens: usize,
    /// Backend threads of the decoder, shared by every slot (0: one per core)
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Seconds in-flight requests get after SIGTERM before they are cancelled
    #[arg(long, default_value_t = 30)]
    pub shutdown_grace: u64,
    /// Never download: a catalogue name must already be in the cache
    #[arg(long)]
    pub offline: bool,
    /// Refuse statements that write files or edit the model over /v1/lql (LQL-E0204)
    #[arg(long, conflicts_with = "allow_writes")]
    pub read_only: bool,
    /// Serve no workbench: `/` and the browser UI's routes answer 404
    #[arg(long)]
    pub no_ui: bool,
    /// The model's name in /v1/models, /health and responses (default: the file's stem,
    /// or the catalogue name)
    #[arg(long)]
    pub alias: Option<String>,
    /// Most X-LQL-Session sessions kept (past it the least recently used idle one is
    /// dropped; with all busy, 503)
    #[arg(long, default_value_t = 64)]
    pub max_sessions: usize,
    /// Most open connections (one more is answered 503 and closed)
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,
    /// Seconds a client gets to send a request's headers, or to start its next request
    #[arg(long, default_value_t = 10)]
    pub header_timeout: u64,
    /// Resident memory (bytes, or with K, M, G) at which requests that run the model and
    /// new sessions are answered 503
    #[arg(long, value_parser = crate::memory::parse_size)]
    pub max_memory: Option<u64>,
    /// Seconds a client gets to send a request's body (408 after)
    #[arg(long, default_value_t = 30)]
    pub body_timeout: u64,
    /// Key/value state of recent prompts kept for prefix reuse (bytes, or with K, M, G;
    /// 0 keeps none)
    #[arg(long, value_parser = crate::memory::parse_size, default_value = "256M")]
    pub prompt_cache: u64,
    /// A folder of .lqlpatch files: a request's "patches" names files in it, applied to
    /// that request only
    #[arg(long)]
    pub patches: Option<std::path::PathBuf>,
    /// A Jinja chat template file used instead of the model's own (as llama.cpp's
    /// --chat-template-file); tool calling follows the template's tool format
    #[arg(long, value_name = "FILE")]
    pub chat_template: Option<std::path::PathBuf>,
}

impl ServeArgs {
    pub fn config(&self) -> Config {
        let mut c = Config::new(self.model.clone());
        c.host = self.host.clone();
        c.port = self.port;
        c.parallel = self.parallel.max(1);
        c.queue = self.queue;
        c.api_key = self.api_key.clone().filter(|k| !k.is_empty());
        c.allow_writes = self.allow_writes.clone();
        c.max_body_bytes = self.max_body;
        c.max_prompt_tokens = self.max_prompt_tokens;
        c.threads = self.threads;
        c.shutdown_grace_s = self.shutdown_grace;
        c.offline = self.offline;
        c.read_only = self.read_only;
        c.ui = !self.no_ui;
        c.alias = self.alias.clone().filter(|a| !a.trim().is_empty());
        c.max_connections = self.max_connections.max(1);
        c.max_sessions = self.max_sessions.max(1);
        c.max_memory = self.max_memory;
        c.header_timeout_s = self.header_timeout.max(1);
        c.body_timeout_s = self.body_timeout.max(1);
        c.prompt_cache_bytes = self.prompt_cache;
        c.patch_dir = self.patches.clone();
        c.chat_template_file = self.chat_template.clone();
        c
    }
}

/// Serves on `listener` until `shutdown` resolves, then drains and returns.
///
/// Each connection holds one of `max_connections` permits; a connection beyond them is
/// answered 503 and closed at once, so a crowd of slow clients cannot starve `/health`
/// or completions of sockets for long: each gets `header_timeout_s` to send its headers
/// (and to start its next request on a kept-alive connection) and `body_timeout_s` for
/// its body ([`crate::routes`]).
pub async fn serve_on(
    state: Arc<AppState>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = crate::routes::router(state.clone());
    let grace = Duration::from_secs(state.config.shutdown_grace_s);
    let header_timeout = Duration::from_secs(state.config.header_timeout_s);
    let permits = Arc::new(tokio::sync::Semaphore::new(state.config.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut signal = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                // Out of descriptors or a connection reset before accept: wait a moment,
                // go on (the listener itself is fine).
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = &mut signal => break,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            state.metrics.rejected_connection();
            tokio::spawn(refuse_connection(stream, Refusal::TooManyConnections));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(header_timeout)
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _permit = permit;
            let _ = conn.await;
        });
    }
    state.shutting_down.store(true, Ordering::SeqCst);
    // After the grace period, cancel whatever still decodes; the connections then end.
    let st = state.clone();
    tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        st.pool.cancel_all();
    });
    // While in-flight requests drain, a new connection is answered 503 (not refused at
    // connect), so clients and balancers see why.
    let drained = graceful.shutdown();
    let mut drained = std::pin::pin!(drained);
    loop {
        tokio::select! {
            _ = &mut drained => break,
            r = listener.accept() => {
                if let Ok((stream, _)) = r {
                    tokio::spawn(refuse_connection(stream, Refusal::ShuttingDown));
                }
            }
        }
    }
    Ok(())
}

/// Why a connection is answered 503 without being served.
#[derive(Clone, Copy)]
enum Refusal {
    TooManyConnections,
    ShuttingDown,
}

/// Answers a connection that is not served (over the cap, or during shutdown): 503 with
/// the API's error shape, then closes it (within a second, whatever the client does).
async fn refuse_connection(mut stream: tokio::net::TcpStream, why: Refusal) {
    use tokio::io::AsyncWriteExt;
    let error = match why {
        Refusal::TooManyConnections => crate::error::ApiError::too_many_connections(),
        Refusal::ShuttingDown => crate::error::ApiError::shutting_down(),
    };
    let body = error.body().to_string();
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(reply.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// A server running on its own runtime thread (embedders and tests).
pub struct Server {
    pub addr: SocketAddr,
    pub state: Arc<AppState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Server {
    /// Opens the model and starts serving on `config.host:config.port`.
    pub fn start(config: Config) -> Result<Server, String> {
        let state = Arc::new(AppState::open(config)?);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let addr = format!("{}:{}", state.config.host, state.config.port);
        let listener = rt
            .block_on(TcpListener::bind(&addr))
            .map_err(|e| format!("binding {addr}: {e}"))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let st = state.clone();
        let thread = std::thread::spawn(move || {
            rt.block_on(serve_on(st, listener, async move {
                let _ = rx.await;
            }))
        });
        Ok(Server {
            addr: local,
            state,
            stop: Some(tx),
            thread: Some(thread),
        })
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, drains in-flight requests, and waits.
    pub fn stop(mut self) -> std::io::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> std::io::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("server thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn termination() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `lql serve`: opens the model, binds, prints the address, serves until SIGTERM/Ctrl-C.
pub fn run(args: &ServeArgs) -> Result<(), String> {
    let config = args.config();
    if config.host != "127.0.0.1" && config.host != "localhost" && config.host != "::1" {
        eprintln!(
            "lql serve: warning: binding {} makes the server reachable from other machines{}",
            config.host,
            if config.api_key.is_none() {
                " without an API key"
            } else {
                ""
            }
        );
    }
    let state = Arc::new(AppState::open(config)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async move {
        let addr = format!("{}:{}", state.config.host, state.config.port);
        let listener = TcpListener::bind(&addr)
            .await
            .map_err(|e| format!("binding {addr}: {e}"))?;
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        eprintln!(
            "lql serve: {} on http://{local} ({} slots, queue {})",
            state.model_id,
            state.pool.parallel(),
            state.config.queue
        );
        // Scripts read the address from stdout.
        println!("http://{local}");
        serve_on(state, listener, termination())
            .await
            .map_err(|e| e.to_string())
    })?;
    eprintln!("lql serve: stopped");
    Ok(())
}
