//! # lql: an embedded query engine in which the model is the database
//!
//! A language model is opened the way SQLite opens a file, and LQL statements run against
//! it:
//!
//! ```no_run
//! let conn = lql::Connection::open("smollm2-135m-instruct")?;
//! let rows = conn.execute("INFER 'The capital of France is' TOP 5;")?;
//! for row in rows.iter() {
//!     let token: String = row.get("token")?;
//!     let prob: f64 = row.get("prob")?;
//!     println!("{token:?} {prob:.3}");
//! }
//! # Ok::<(), lql::Error>(())
//! ```
//!
//! ```text
//!  text ──split──▶ statement ──lql_grammar::parse──▶ AST (spans)
//!        ──lql_planner::bind(Catalog = bound model)──▶ LogicalPlan ──lower──▶ PhysicalPlan
//!        ──engine dispatch (engine/*.rs, one file per statement family)──▶ Rows
//! ```
//!
//! - [`Connection`]: `open`, `open_with_flags` ([`OpenFlags`]: offline, read-only), `open_in_memory`, `execute`, `execute_batch`, `execute_each`,
//!   `prepare`, `query_row`, `interrupt_handle`, `set_progress_handler`, `set_token_handler`,
//!   `bench`; [`Statement`]: `query`, `query_row`, `query_map`, `column_names`.
//! - `for row in &rows`, `row.get::<_, T>(index or name)` (see [`Row`]); an interrupted
//!   GENERATE's text so far in [`Error::partial_rows`]; a connection used from its own
//!   callback answers `LQL-E0202` instead of deadlocking; a panicking handler or closure is
//!   caught and answered as `LQL-E0205`, and the connection stays usable.
//! - [`Rows`], [`Row`], [`Column`], [`Value`]: typed results; rendering is the caller's.
//! - [`Error`]: kind, message, span, labels, help; [`Error::render`] (ariadne) and
//!   [`Error::to_json`].
//! - [`generation`]: batched generation over a database's model (the decode scheduler, the
//!   prompt-prefix cache, per-request sampling, grammars, steering and patches, embeddings),
//!   the service `lql serve` answers its generating routes with.

mod code;
mod connection;
mod database;
mod engine;
pub mod error;
mod flags;
pub mod generation;
mod json;
mod panics;
pub mod progress;
pub mod reference;
mod rows;
mod statement;
mod stream;
mod value;

pub use connection::{BenchReport, Connection, InterruptHandle, StatementResult};
pub use database::Database;
pub use engine::{Gate, StageInput, StageResult, UNRELATED_PROMPTS};
pub use error::{Code, Error, ErrorKind, Label, Result};
pub use flags::OpenFlags;
pub use json::statement_json;
/// What a statement does besides returning rows, declared by its bound plan.
pub use lql_planner::{Effects, FileRef, StateChange};
pub use progress::{Progress, ProgressHandler, ProgressUnit, TokenHandler};
pub use rows::{Column, Row, RowIndex, RowIter, Rows};
pub use statement::{NamedParams, Params, Statement};
pub use stream::RowStream;
pub use value::{FromValue, Value, ValueType};

/// Statement splitting and completeness, as the grammar defines them (for shells).
pub use lql_grammar::{is_complete, split_statements, KEYWORDS};

/// An LQL string literal for arbitrary text (quotes and escapes it), for building
/// statements from user input.
pub use lql_grammar::quote;
