//! Progress reports for long operations (model downloads, EXTRACT, COMPILE), delivered to
//! a handler the embedder installs with `Connection::set_progress_handler`; and the token
//! stream of GENERATE, for a handler installed with `Connection::set_token_handler`.

use std::sync::Arc;

/// What a progress count measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressUnit {
    Bytes,
    Items,
}

/// One progress report. A task sends a first report with `done = 0`, updates as it goes,
/// and a last one with `finished = true`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// What is being done, e.g. `download smollm2-135m-instruct`.
    pub task: String,
    pub done: u64,
    /// The total, when known.
    pub total: Option<u64>,
    pub unit: ProgressUnit,
    pub finished: bool,
}

/// A progress handler: called from the thread running the statement.
pub type ProgressHandler = Arc<dyn Fn(&Progress) + Send + Sync>;

/// Reports `done` of `total` bytes of `task` to `handler`, when one is installed (the
/// writers' byte counts: EXTRACT, COMPILE, COMPACT).
pub(crate) fn report_bytes(
    handler: Option<&ProgressHandler>,
    task: &str,
    done: u64,
    total: u64,
    finished: bool,
) {
    report(handler, task, done, total, ProgressUnit::Bytes, finished)
}

/// Reports `done` of `total` items of `task` to `handler`, when one is installed (rows of an
/// INSERT, facts scored, PATCH cells, a COMPILE's steps).
pub(crate) fn report_items(
    handler: Option<&ProgressHandler>,
    task: &str,
    done: u64,
    total: u64,
    finished: bool,
) {
    report(handler, task, done, total, ProgressUnit::Items, finished)
}

fn report(
    handler: Option<&ProgressHandler>,
    task: &str,
    done: u64,
    total: u64,
    unit: ProgressUnit,
    finished: bool,
) {
    if let Some(h) = handler {
        h(&Progress {
            task: task.to_string(),
            done,
            total: Some(total),
            unit,
            finished,
        });
    }
}

/// A token-stream handler: called with each piece of text GENERATE produces, as it is
/// produced (whole UTF-8 characters; the statement's row still carries the full text).
pub type TokenHandler = Arc<dyn Fn(&str) + Send + Sync>;
