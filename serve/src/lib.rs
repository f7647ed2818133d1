//! # lql-serve: `lql serve`
//!
//! An HTTP server over one model opened as an [`lql::Database`]:
//!
//! - the OpenAI-compatible API (`/v1/models`, `/v1/completions`, `/v1/chat/completions`,
//!   `/v1/responses`), streaming with server-sent events;
//! - LQL over HTTP (`/v1/lql`), answering the CLI's JSON contract;
//! - `/health` and `/metrics` (Prometheus text).
//!
//! ```text
//!  request ──auth──▶ route ──▶ body (size bound, JSON) ──▶ Pool::acquire (N slots, bounded queue → 429)
//!     ──▶ lql::generation::Batcher (the engine's decode thread: prefill each choice, then every
//!         active sequence decodes in one batched step, each sampled as GENERATE samples) ──events──▶ JSON or SSE
//!     └─ /v1/lql ──▶ Connection, gated by access::decide on each bound plan's effects (files only under --allow-writes DIR) ──▶ JSON
//! ```
//!
//! Servers bind where [`Config::host`] says (127.0.0.1 unless told otherwise).

pub mod access;
pub mod auth;
pub mod config;
pub mod constraint;
pub mod embeddings;
pub mod error;
pub mod lql_http;
pub mod memory;
pub mod metrics;
pub mod openai;
pub mod patches;
pub mod pool;
pub mod routes;
pub mod server;
pub mod sessions;
pub mod sse;
pub mod state;
pub mod template;
pub mod tools;
pub mod ui;
pub mod wire;

pub use config::Config;
pub use server::{run, serve_on, ServeArgs, Server};
