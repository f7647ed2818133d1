//! `RowStream`: a statement's rows pulled one at a time from its running plan.
//!
//! [`Statement::query`](crate::Statement::query) runs a statement to its last row and
//! returns them all. [`Statement::stream`](crate::Statement::stream) starts it and hands
//! back a `RowStream`: each row is computed when it is asked for, by pulling through the
//! operator tree (see the engine's `stream.rs`), so reading the first rows of a large scan
//! costs what those rows cost, and dropping the stream stops the statement. A stream holds
//! its connection until it is dropped: the connection refuses other statements meanwhile
//! (code `LQL-E0202`), as a rusqlite `Rows` borrows its statement.
//!
//! ```no_run
//! # fn main() -> lql::Result<()> {
//! let conn = lql::Connection::open("smollm2-135m-instruct")?;
//! let mut stmt = conn.prepare("SELECT layer, feature, top_token FROM features")?;
//! let mut rows = stmt.stream(())?;
//! // Labels the features of the first layers only, not all 46,080.
//! while let Some(row) = rows.next_row()? {
//!     let token: String = row.get("top_token")?;
//!     if token.starts_with(" Paris") {
//!         break;
//!     }
//! }
//! # Ok(()) }
//! ```

use std::collections::VecDeque;

use crate::connection::{Connection, EngineGuard};
use crate::engine::Running;
use crate::error::Result;
use crate::rows::{Column, Row, Rows};
use crate::value::Value;

/// A running statement's rows, computed as they are read.
#[must_use = "a RowStream computes its rows only as they are read"]
pub struct RowStream<'conn> {
    conn: &'conn Connection,
    engine: EngineGuard<'conn>,
    /// The statement's text and its offset in the text given to `prepare` (error spans).
    text: String,
    offset: usize,
    running: Option<Running>,
    columns: Vec<Column>,
    /// Rows of the last batch not read yet.
    buffer: VecDeque<Vec<Value>>,
    /// The row `next_row` returned last.
    current: Vec<Value>,
}

impl std::fmt::Debug for RowStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowStream")
            .field("text", &self.text)
            .field("columns", &self.columns)
            .finish_non_exhaustive()
    }
}

impl<'conn> RowStream<'conn> {
    pub(crate) fn new(
        conn: &'conn Connection,
        engine: EngineGuard<'conn>,
        text: String,
        offset: usize,
        running: Running,
    ) -> RowStream<'conn> {
        RowStream {
            conn,
            engine,
            text,
            offset,
            columns: running.columns.clone(),
            running: Some(running),
            buffer: VecDeque::new(),
            current: Vec::new(),
        }
    }

    /// The columns of the rows.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Whether the statement's rows report a fault (see [`Rows::has_fault`]).
    pub fn has_fault(&self) -> bool {
        self.running.as_ref().is_some_and(|r| r.fault)
    }

    /// The next row, as a [`Row`] view valid until the next call (rusqlite's
    /// `Rows::next`); `None` after the last row.
    pub fn next_row(&mut self) -> Result<Option<Row<'_>>> {
        match self.next_values()? {
            None => Ok(None),
            Some(values) => {
                self.current = values;
                Ok(Some(Row::new(&self.columns, &self.current)))
            }
        }
    }

    /// Every remaining row, as a [`Rows`].
    pub fn into_rows(mut self) -> Result<Rows> {
        let mut rows = Rows::new(self.columns.clone());
        while let Some(values) = self.next_values()? {
            rows.rows.push(values);
        }
        rows.fault = self.has_fault();
        Ok(rows)
    }

    fn next_values(&mut self) -> Result<Option<Vec<Value>>> {
        loop {
            if let Some(values) = self.buffer.pop_front() {
                return Ok(Some(values));
            }
            let Some(running) = self.running.as_mut() else {
                return Ok(None);
            };
            let engine = &mut *self.engine;
            let text = &self.text;
            let interrupt = self.conn.interrupt_flag();
            let batch = self
                .conn
                .panic_slot()
                .run(|| engine.pull(running, text, interrupt))
                .map_err(|e| e.offset_spans(self.offset));
            match batch {
                Ok(Some(batch)) => self.buffer.extend(batch),
                Ok(None) => return Ok(None),
                Err(e) => {
                    self.end();
                    return Err(e);
                }
            }
        }
    }

    /// Ends the statement (its steering stops); no more rows are pulled.
    fn end(&mut self) {
        if let Some(running) = self.running.take() {
            self.engine.finish(running);
        }
    }
}

impl Iterator for RowStream<'_> {
    type Item = Result<Vec<Value>>;

    fn next(&mut self) -> Option<Result<Vec<Value>>> {
        self.next_values().transpose()
    }
}

impl Drop for RowStream<'_> {
    fn drop(&mut self) {
        self.end();
    }
}
