//! Rows pulled through the operator tree.
//!
//! The row pipeline's operators — a `features` scan, Filter, Offset, Limit, LateLabels,
//! Project, Relation and a statement's Rows root — hand each other a [`Stream`]: a source
//! that yields its rows a batch at a time when the operator above asks for them. So a
//! LIMIT stops pulling once it has its rows, and nothing below it does the work of rows
//! nobody reads: `SELECT … FROM features WHERE … LIMIT 3` labels the layers it visits, and
//! only the rows that pass a LIMIT are labelled late. Operators that need all of their
//! input (Sort, Aggregate, Distinct, Join, every statement) get it drained: the
//! interpreter drains a stream before it hands it to one (`interp::node`).
//!
//! A stream node's statistics for EXPLAIN ANALYZE accrue while it is pulled: each pull
//! adds the rows it returned and the time, operand bytes, layers and labels it spent, less
//! what the pulls of its inputs spent, so every node reports its own work as an eager node
//! does.
//!
//! ```text
//!   Limit 3 ──pull──▶ Filter ──pull──▶ TableScan features   (one labelling pass per pull)
//!      ◀── 3 rows ───        ◀── rows of 2 layers ──
//! ```

use super::datum::Datum;
use super::interp::{wrong_input, Probe, Run, Spent};
use super::Cx;
use crate::error::Result;
use crate::rows::Column;
use crate::value::Value;

/// Rows, in a stream's columns.
pub(crate) type Batch = Vec<Vec<Value>>;

/// A source of batches.
pub(crate) trait Pull {
    /// The next batch, or `None` once the source is done. A batch may be empty.
    fn pull(&mut self, cx: &mut Cx<'_>, r: &mut Run) -> Result<Option<Batch>>;
}

/// A node's rows, pulled batch by batch.
pub(crate) struct Stream {
    pub columns: Vec<Column>,
    source: Box<dyn Pull>,
}

impl Stream {
    pub fn new(columns: Vec<Column>, source: impl Pull + 'static) -> Stream {
        Stream {
            columns,
            source: Box::new(source),
        }
    }

    /// The next non-empty batch, or `None` at the end.
    pub fn next_batch(&mut self, cx: &mut Cx<'_>, r: &mut Run) -> Result<Option<Batch>> {
        loop {
            cx.check_cancel()?;
            match self.source.pull(cx, r)? {
                Some(b) if b.is_empty() => continue,
                other => return Ok(other),
            }
        }
    }

    /// Every remaining row.
    pub fn drain(mut self, cx: &mut Cx<'_>, r: &mut Run) -> Result<(Vec<Column>, Batch)> {
        let mut rows = Vec::new();
        while let Some(b) = self.next_batch(cx, r)? {
            rows.extend(b);
        }
        Ok((self.columns, rows))
    }

    /// The same rows, each pull's work recorded as plan node `id`'s.
    pub fn measured(self, id: usize) -> Stream {
        let columns = self.columns.clone();
        Stream::new(columns, Measured { id, inner: self })
    }
}

/// The rows of an input as a stream: a stream as it is, finished rows as one batch.
pub(crate) fn stream_of(input: Datum, op: &str) -> Result<Stream> {
    match input {
        Datum::Stream(s) => Ok(s),
        Datum::Table { columns, rows } => Ok(Stream::new(columns, Once(Some(rows)))),
        Datum::Rows(r) => Ok(Stream::new(r.columns, Once(Some(r.rows)))),
        other => Err(wrong_input(op, &other)),
    }
}

/// `input`'s rows with each batch made over by `f` (given the session and the input's
/// columns), in `columns` (the input's when `None`): Filter, Project and LateLabels.
pub(crate) fn map<F>(input: Datum, op: &str, columns: Option<Vec<Column>>, f: F) -> Result<Datum>
where
    F: FnMut(&mut Cx<'_>, &[Column], Batch) -> Result<Batch> + 'static,
{
    let input = stream_of(input, op)?;
    let columns = columns.unwrap_or_else(|| input.columns.clone());
    Ok(Datum::Stream(Stream::new(columns, Map { input, f })))
}

/// `input`'s rows through the source `make` builds over it, in the same columns: Limit
/// and Offset.
pub(crate) fn through<P: Pull + 'static>(
    input: Datum,
    op: &str,
    make: impl FnOnce(Stream) -> P,
) -> Result<Datum> {
    let input = stream_of(input, op)?;
    let columns = input.columns.clone();
    Ok(Datum::Stream(Stream::new(columns, make(input))))
}

/// Each batch of `input` made over by `f`.
struct Map<F> {
    input: Stream,
    f: F,
}

impl<F> Pull for Map<F>
where
    F: FnMut(&mut Cx<'_>, &[Column], Batch) -> Result<Batch>,
{
    fn pull(&mut self, cx: &mut Cx<'_>, r: &mut Run) -> Result<Option<Batch>> {
        match self.input.next_batch(cx, r)? {
            None => Ok(None),
            Some(b) => (self.f)(cx, &self.input.columns, b).map(Some),
        }
    }
}

/// Rows already computed, handed over in one batch.
struct Once(Option<Batch>);

impl Pull for Once {
    fn pull(&mut self, _: &mut Cx<'_>, _: &mut Run) -> Result<Option<Batch>> {
        Ok(self.0.take())
    }
}

/// Records what each pull of `inner` spent as node `id`'s own work.
struct Measured {
    id: usize,
    inner: Stream,
}

impl Pull for Measured {
    fn pull(&mut self, cx: &mut Cx<'_>, r: &mut Run) -> Result<Option<Batch>> {
        // What this pull's inputs spend is added to `r.pulled` by their own wrappers.
        let outer = std::mem::take(&mut r.pulled);
        let probe = Probe::start(cx);
        let out = self.inner.source.pull(cx, r);
        let spent = probe.finish();
        let inputs = std::mem::replace(&mut r.pulled, outer);
        r.pulled.add(&spent);
        let own = spent.minus(&inputs);
        let s = &mut r.stats[self.id];
        own.add_to(s);
        if let Ok(Some(b)) = &out {
            s.rows += b.len();
        }
        out
    }
}

/// `Limit n`: stops pulling its input once `n` rows have passed.
pub(crate) struct Limit {
    pub input: Stream,
    pub left: usize,
}

impl Pull for Limit {
    fn pull(&mut self, cx: &mut Cx<'_>, r: &mut Run) -> Result<Option<Batch>> {
        if self.left == 0 {
            return Ok(None);
        }
        let Some(mut b) = self.input.next_batch(cx, r)? else {
            return Ok(None);
        };
        b.truncate(self.left);
        self.left -= b.len();
        Ok(Some(b))
    }
}

/// `Offset n`: drops the first `n` rows.
pub(crate) struct Offset {
    pub input: Stream,
    pub skip: usize,
}

impl Pull for Offset {
    fn pull(&mut self, cx: &mut Cx<'_>, r: &mut Run) -> Result<Option<Batch>> {
        let Some(mut b) = self.input.next_batch(cx, r)? else {
            return Ok(None);
        };
        let n = self.skip.min(b.len());
        b.drain(..n);
        self.skip -= n;
        Ok(Some(b))
    }
}

impl Spent {
    /// Adds these figures to a node's statistics.
    fn add_to(&self, s: &mut super::interp::NodeStats) {
        s.millis += self.millis;
        for (encoding, bytes) in &self.bytes {
            if *bytes > 0 {
                s.weight_bytes += bytes;
                s.encodings.insert(encoding.to_string());
            }
        }
        s.layers_run += self.layers;
        s.labels_computed += self.labels;
    }
}
