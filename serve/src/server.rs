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
        c
    }
}

/// Serves on `listener` until `shutdown` resolves, then drains and returns.
pub async fn serve_on(
    state: Arc<AppState>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = crate::routes::router(state.clone());
    let grace = Duration::from_secs(state.config.shutdown_grace_s);
    let st = state.clone();
    let signal = async move {
        shutdown.await;
        st.shutting_down.store(true, Ordering::SeqCst);
        // After the grace period, cancel whatever still decodes.
        let st2 = st.clone();
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            st2.pool.cancel_all();
        });
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(signal)
        .await
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
