//! `Statement`: one statement whose syntax has been checked, ready to run (and re-run).

use crate::connection::Connection;
use crate::error::Result;
use crate::rows::Rows;

/// A prepared statement, borrowed from its connection (as in rusqlite).
pub struct Statement<'conn> {
    conn: &'conn Connection,
    text: String,
    /// Byte offset of the statement in the text given to `prepare` (for error spans).
    offset: usize,
}

impl<'conn> Statement<'conn> {
    pub(crate) fn new(conn: &'conn Connection, text: String, offset: usize) -> Self {
        Statement { conn, text, offset }
    }

    /// The statement's text (without its `;`).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Runs the statement and returns its rows; iterate them with [`Rows::iter`] and read
    /// cells with `row.get::<T>(i)`.
    pub fn query(&mut self) -> Result<Rows> {
        self.conn
            .run_one(&self.text)
            .map_err(|e| e.offset_spans(self.offset))
    }

    /// The physical plan, one line per row (as `EXPLAIN <statement>`).
    pub fn explain(&mut self) -> Result<Rows> {
        self.conn
            .run_one(&format!("EXPLAIN {}", self.text))
            .map_err(|e| e.shift_back("EXPLAIN ".len()).offset_spans(self.offset))
    }
}
