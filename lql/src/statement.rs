//! `Statement`: one prepared statement, with parameters, ready to run (and re-run).
//!
//! Parameters are written as SQLite writes them: `?` (the next index), `?NNN` (1-based) and
//! `:name`. Each bound value replaces its placeholder as a literal (text is quoted, numbers
//! written exactly), so a parameter stands wherever a literal may: prompts, counts, WHERE
//! values. A statement without parameters keeps its bound and lowered plan and re-binds only
//! when the session it was bound against changed (USE); one with parameters binds with the
//! values of each call.
//!
//! ```no_run
//! # fn main() -> lql::Result<()> {
//! let conn = lql::Connection::open("smollm2-135m-instruct")?;
//! let mut stmt = conn.prepare("SELECT layer, features FROM layers WHERE layer = ?")?;
//! let rows = stmt.query(lql::params![3])?;
//! let mut infer = conn.prepare("INFER :prompt TOP 3")?;
//! let top = infer.query(lql::named_params! { ":prompt": "The capital of France is" })?;
//! # Ok(()) }
//! ```

use std::ops::Range;

use crate::connection::Connection;
use crate::engine::{Gate, Prepared};
use crate::error::{Error, ErrorKind, Result};
use crate::rows::{Column, Rows};
use crate::value::Value;
use lql_planner::Effects;

/// Values for a statement's parameters: positional (`params![…]`, a slice, an array, `()`)
/// or named (`named_params!{…}`).
pub trait Params {
    /// The values by 1-based index, given the statement's placeholders.
    fn resolve(self, slots: &[lql_grammar::Placeholder]) -> Result<Vec<Value>>;
}

fn param_error(message: String) -> Error {
    Error::new(ErrorKind::Semantic, message).with_code(crate::Code::Parameters)
}

fn positional(values: Vec<Value>, slots: &[lql_grammar::Placeholder]) -> Result<Vec<Value>> {
    let wanted = slots.iter().map(|s| s.index).max().unwrap_or(0);
    if values.len() != wanted {
        return Err(param_error(format!(
            "the statement takes {wanted} parameter{}, {} given",
            if wanted == 1 { "" } else { "s" },
            values.len()
        )));
    }
    Ok(values)
}

impl Params for () {
    fn resolve(self, slots: &[lql_grammar::Placeholder]) -> Result<Vec<Value>> {
        positional(Vec::new(), slots)
    }
}

impl Params for Vec<Value> {
    fn resolve(self, slots: &[lql_grammar::Placeholder]) -> Result<Vec<Value>> {
        positional(self, slots)
    }
}

impl Params for &[Value] {
    fn resolve(self, slots: &[lql_grammar::Placeholder]) -> Result<Vec<Value>> {
        positional(self.to_vec(), slots)
    }
}

impl<T: Into<Value>, const N: usize> Params for [T; N] {
    fn resolve(self, slots: &[lql_grammar::Placeholder]) -> Result<Vec<Value>> {
        positional(self.into_iter().map(Into::into).collect(), slots)
    }
}

/// Named parameter values (`named_params!{":name": value}`).
#[derive(Debug, Clone, Default)]
pub struct NamedParams(pub Vec<(String, Value)>);

impl Params for NamedParams {
    fn resolve(self, slots: &[lql_grammar::Placeholder]) -> Result<Vec<Value>> {
        let wanted = slots.iter().map(|s| s.index).max().unwrap_or(0);
        let mut out = vec![Value::Null; wanted];
        let mut seen = vec![false; wanted];
        for (name, v) in self.0 {
            let key = if name.starts_with(':') {
                name.clone()
            } else {
                format!(":{name}")
            };
            let slot = slots
                .iter()
                .find(|s| s.name.as_deref() == Some(key.as_str()))
                .ok_or_else(|| param_error(format!("the statement has no parameter {key}")))?;
            out[slot.index - 1] = v;
            seen[slot.index - 1] = true;
        }
        if let Some(i) = seen.iter().position(|s| !s) {
            let name = slots
                .iter()
                .find(|s| s.index == i + 1)
                .and_then(|s| s.name.clone())
                .unwrap_or_else(|| format!("?{}", i + 1));
            return Err(param_error(format!("no value given for parameter {name}")));
        }
        Ok(out)
    }
}

/// Positional parameters: `params![1, "text", 0.5]`.
#[macro_export]
macro_rules! params {
    () => { ::std::vec::Vec::<$crate::Value>::new() };
    ($($v:expr),+ $(,)?) => { ::std::vec![$($crate::Value::from($v)),+] };
}

/// Named parameters: `named_params!{":prompt": "text", ":k": 3}`.
#[macro_export]
macro_rules! named_params {
    ($($k:literal : $v:expr),* $(,)?) => {
        $crate::NamedParams(::std::vec![$((::std::string::String::from($k), $crate::Value::from($v))),*])
    };
}

/// A prepared statement, borrowed from its connection (as in rusqlite).
pub struct Statement<'conn> {
    conn: &'conn Connection,
    text: String,
    /// Byte offset of the statement in the text given to `prepare` (for error spans).
    offset: usize,
    slots: Vec<lql_grammar::Placeholder>,
    /// The bound plan of a statement without parameters.
    plan: Option<Prepared>,
}

impl<'conn> Statement<'conn> {
    pub(crate) fn new(conn: &'conn Connection, text: String, offset: usize) -> Result<Self> {
        let slots =
            lql_grammar::placeholders(&text).map_err(|e| Error::from(e).offset_spans(offset))?;
        let plan = if slots.is_empty() {
            Some(
                conn.prepare_plan(&text)
                    .map_err(|e| e.offset_spans(offset))?,
            )
        } else {
            // Syntax is checked with every placeholder as a neutral literal at bind time.
            None
        };
        Ok(Statement {
            conn,
            text,
            offset,
            slots,
            plan,
        })
    }

    /// The statement's text (without its `;`).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// How many parameters the statement takes.
    pub fn parameter_count(&self) -> usize {
        self.slots.iter().map(|s| s.index).max().unwrap_or(0)
    }

    /// The columns the statement returns, known before it runs (a statement's columns do
    /// not depend on its parameters' values; it is bound with neutral values to find them).
    pub fn columns(&mut self) -> Result<Vec<Column>> {
        if let Some(p) = &self.plan {
            if p.version == self.conn.session_version() {
                return Ok(crate::engine::columns_of(p.physical.columns()));
            }
        }
        let p = self.bind_neutral()?;
        Ok(crate::engine::columns_of(p.physical.columns()))
    }

    /// Binds the statement with neutral values in its placeholders (NULL, else text, else a
    /// number: whichever fits where each stands), to learn its plan without running it.
    fn bind_neutral(&self) -> Result<Prepared> {
        let n = self.parameter_count();
        let mut last = None;
        for neutral in [Value::Null, Value::Text("?".into()), Value::Int(1)] {
            let text = self.text_with(&vec![neutral; n])?;
            match self.conn.prepare_plan(&text) {
                Ok(p) => return Ok(p),
                Err(e) => last = Some(e),
            }
        }
        Err(last
            .unwrap_or_else(|| param_error("the statement does not bind".into()))
            .without_spans())
    }

    /// The column names (as rusqlite's `column_names`).
    pub fn column_names(&mut self) -> Result<Vec<String>> {
        Ok(self.columns()?.into_iter().map(|c| c.name).collect())
    }

    /// The statement's text with `params` in its placeholders: the text that runs (a
    /// gate deciding what a statement may do decides on this, not on the placeholders).
    pub fn bound_text<P: Params>(&self, params: P) -> Result<String> {
        let values = params.resolve(&self.slots)?;
        if self.plan.is_some() {
            return Ok(self.text.clone());
        }
        self.text_with(&values)
    }

    /// Runs the statement with `params` and returns its rows.
    pub fn query<P: Params>(&mut self, params: P) -> Result<Rows> {
        self.run(params, None)
    }

    /// [`Statement::query`] with a gate (see [`crate::Connection::execute_each_gated`]):
    /// `gate` sees the effects of the plan bound with `params` right before it runs.
    pub fn query_gated<P: Params>(&mut self, params: P, gate: Gate<'_>) -> Result<Rows> {
        self.run(params, Some(gate))
    }

    /// The effects the statement declares when bound with `params` (its plan's), without
    /// running it.
    pub fn effects<P: Params>(&self, params: P) -> Result<Effects> {
        let values = params.resolve(&self.slots)?;
        if let Some(p) = &self.plan {
            if p.version == self.conn.session_version() {
                return Ok(p.effects());
            }
        }
        let text = self.text_with(&values)?;
        Ok(self
            .conn
            .prepare_plan(&text)
            .map_err(|e| self.value_error(e, &values))?
            .effects())
    }

    /// A statement's error with its parameters in place (`values`): a syntax error means a
    /// value did not fit where it stands. Spans in the substituted text are mapped back to
    /// the statement as written (a span inside a value to its placeholder), then to the
    /// text given to `prepare`.
    fn value_error(&self, e: Error, values: &[Value]) -> Error {
        let e = if e.kind == ErrorKind::Syntax {
            let message = format!(
                "a parameter's value does not fit where it stands: {}",
                e.message
            );
            let span = e.span.clone();
            let mut p = param_error(message);
            p.span = span;
            p
        } else {
            e
        };
        match self.substitute(values) {
            Ok((_, subs)) => e
                .map_spans(|r| {
                    let start = to_written(&subs, r.start, false);
                    let end = to_written(&subs, r.end, true).max(start);
                    start..end
                })
                .offset_spans(self.offset),
            Err(_) => e.without_spans(),
        }
    }

    fn run<P: Params>(&mut self, params: P, gate: Option<Gate<'_>>) -> Result<Rows> {
        let values = params.resolve(&self.slots)?;
        if let Some(p) = self.plan.as_mut() {
            return self
                .conn
                .run_prepared(p, &self.text, gate)
                .map_err(|e| e.offset_spans(self.offset));
        }
        let text = self.text_with(&values)?;
        let conn = self.conn;
        conn.run_one(&text, gate)
            .map_err(|e| self.value_error(e, &values))
    }

    /// Runs the statement and maps its first row with `f` (as rusqlite's `query_row`); a
    /// result without rows is an error (code `LQL-E0203`).
    ///
    /// ```no_run
    /// # fn main() -> lql::Result<()> {
    /// let conn = lql::Connection::open("smollm2-135m-instruct")?;
    /// let mut stmt = conn.prepare("SELECT count(*) FROM layers WHERE layer < ?")?;
    /// let n: i64 = stmt.query_row(lql::params![10], |row| row.get(0))?;
    /// assert_eq!(n, 10);
    /// # Ok(()) }
    /// ```
    pub fn query_row<T, P, F>(&mut self, params: P, f: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&crate::rows::Row<'_>) -> Result<T>,
    {
        let rows = self.query(params)?;
        first_row(&rows, f)
    }

    /// Runs the statement and maps every row with `f` (as rusqlite's `query_map`): an
    /// iterator of each row's result (a row whose `f` panicked gives an error with code
    /// `LQL-E0205`).
    ///
    /// ```no_run
    /// # fn main() -> lql::Result<()> {
    /// let conn = lql::Connection::open("smollm2-135m-instruct")?;
    /// let mut stmt = conn.prepare("SELECT layer, bytes FROM layers WHERE layer < :n")?;
    /// let sizes: Vec<(i64, u64)> = stmt
    ///     .query_map(lql::named_params! { ":n": 3 }, |row| Ok((row.get(0)?, row.get(1)?)))?
    ///     .collect::<lql::Result<_>>()?;
    /// assert_eq!(sizes.len(), 3);
    /// # Ok(()) }
    /// ```
    pub fn query_map<T, P, F>(
        &mut self,
        params: P,
        mut f: F,
    ) -> Result<std::vec::IntoIter<Result<T>>>
    where
        P: Params,
        F: FnMut(&crate::rows::Row<'_>) -> Result<T>,
    {
        let rows = self.query(params)?;
        Ok(rows
            .iter()
            .map(|r| crate::panics::catch_closure("the query_map closure", || f(&r)))
            .collect::<Vec<_>>()
            .into_iter())
    }

    /// The physical plan, one line per row (as `EXPLAIN PLAN <statement>`).
    pub fn explain(&mut self) -> Result<Rows> {
        let p = self.bind_neutral()?;
        let mut rows = Rows::new(vec![Column::new("plan", crate::value::ValueType::Text)]);
        for l in p.physical.lines() {
            rows.push(vec![Value::from(l)]);
        }
        Ok(rows)
    }

    /// The text with every placeholder replaced by its value as a literal.
    fn text_with(&self, values: &[Value]) -> Result<String> {
        Ok(self.substitute(values)?.0)
    }

    /// The text with every placeholder replaced by its value as a literal, and where each
    /// value stands in it.
    fn substitute(&self, values: &[Value]) -> Result<(String, Vec<Substitution>)> {
        let mut out = String::with_capacity(self.text.len());
        let mut subs = Vec::with_capacity(self.slots.len());
        let mut at = 0;
        for s in &self.slots {
            out.push_str(&self.text[at..s.span.start]);
            let v = values
                .get(s.index - 1)
                .ok_or_else(|| param_error(format!("no value for parameter {}", s.index)))?;
            let start = out.len();
            out.push_str(&literal(v)?);
            subs.push((start, out.len(), s.span.range()));
            at = s.span.end;
        }
        out.push_str(&self.text[at..]);
        Ok((out, subs))
    }
}

/// Where a value stands in the substituted text: its start and end there, and its
/// placeholder's span in the statement as written.
type Substitution = (usize, usize, Range<usize>);

/// An offset of the substituted text as an offset of the statement as written: past a
/// value, shifted by the difference in lengths; inside one, the placeholder's start (or its
/// end, for the end of a span).
fn to_written(subs: &[Substitution], at: usize, is_end: bool) -> usize {
    let mut shift: isize = 0;
    for (start, end, written) in subs {
        if at < *start || (at == *start && !is_end) {
            break;
        }
        if at < *end || (at == *end && is_end) {
            return if is_end && at > *start {
                written.end
            } else {
                written.start
            };
        }
        shift = written.end as isize - *end as isize;
    }
    (at as isize + shift).max(0) as usize
}

/// A value as an LQL literal.
fn literal(v: &Value) -> Result<String> {
    Ok(match v {
        Value::Null => "NULL".into(),
        Value::Bool(b) => if *b { "TRUE" } else { "FALSE" }.into(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) if f.is_finite() => format!("{f:?}"),
        Value::Float(f) => return Err(param_error(format!("parameter value {f} is not finite"))),
        Value::Text(t) => lql_grammar::quote(t),
        Value::List(_) => return Err(param_error("a list cannot be a parameter".into())),
    })
}

/// `f` over the first row of `rows`, or the no-rows error.
pub(crate) fn first_row<T>(
    rows: &Rows,
    f: impl FnOnce(&crate::rows::Row<'_>) -> Result<T>,
) -> Result<T> {
    match rows.row(0) {
        Some(r) => crate::panics::catch_closure("the query_row closure", || f(&r)),
        None => Err(Error::semantic("the query returned no rows").with_code(crate::Code::NoRows)),
    }
}
