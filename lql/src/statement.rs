//! `Statement`: one prepared statement, with parameters, ready to run (and re-run).
//!
//! Parameters are written as SQLite writes them: `?` (the next index), `?NNN` (1-based) and
//! `:name`, wherever a string or a number may stand: prompts, counts, WHERE values. The text
//! is parsed once, each placeholder holding a stand-in value at its span; each run binds its
//! values into that parsed statement (a value that does not fit its place is refused at the
//! placeholder, and no text is parsed again). A statement without parameters keeps its bound
//! and lowered plan and re-binds only when the session it was bound against changed (USE);
//! one with parameters binds with the values of each call.
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

use crate::connection::{Connection, ToStart};
use crate::engine::{Gate, Prepared};
use crate::error::{Error, ErrorKind, Result};
use crate::rows::{Column, Rows};
use crate::stream::RowStream;
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
    /// A statement with parameters, parsed once: its syntax tree as a JSON tree, each
    /// placeholder holding a stand-in value at its span (the values of a run are set there).
    template: Option<serde_json::Value>,
}

impl<'conn> Statement<'conn> {
    pub(crate) fn new(conn: &'conn Connection, text: String, offset: usize) -> Result<Self> {
        let slots =
            lql_grammar::placeholders(&text).map_err(|e| Error::from(e).offset_spans(offset))?;
        let (plan, template) = if slots.is_empty() {
            let plan = conn
                .prepare_plan(&text)
                .map_err(|e| e.offset_spans(offset))?;
            (Some(plan), None)
        } else {
            let stmt = lql_grammar::parse_with_placeholders(&text)
                .map_err(|e| Error::from(e).offset_spans(offset))?;
            let tree = serde_json::to_value(&stmt)
                .map_err(|e| Error::internal(format!("the parsed statement as JSON: {e}")))?;
            for slot in &slots {
                if !has_literal_at(&tree, slot.span) {
                    let mut e = param_error(format!(
                        "parameter {} stands where no value can be bound (only where a string or a number may)",
                        slot_name(slot)
                    ));
                    e.span = Some(slot.span.range());
                    return Err(e.offset_spans(offset));
                }
            }
            (None, Some(tree))
        };
        Ok(Statement {
            conn,
            text,
            offset,
            slots,
            plan,
            template,
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

    /// Binds the statement with neutral values in its placeholders (NULL, else a number,
    /// else text: whichever fits where each stands), to learn its plan (columns, EXPLAIN)
    /// without running it.
    fn bind_neutral(&self) -> Result<Prepared> {
        let Some(template) = &self.template else {
            return self
                .conn
                .prepare_plan(&self.text)
                .map_err(|e| e.offset_spans(self.offset));
        };
        let mut last = None;
        for neutral in [Value::Null, Value::Int(1), Value::Text("?".into())] {
            let mut tree = template.clone();
            for slot in &self.slots {
                // Where the neutral value does not fit, the stand-in stays.
                let _ = set_literal_at(&mut tree, slot.span, &neutral);
            }
            match self.conn.prepare_parsed(from_tree(tree)?) {
                Ok(p) => return Ok(p),
                Err(e) => last = Some(e),
            }
        }
        Err(last
            .unwrap_or_else(|| param_error("the statement does not bind".into()))
            .offset_spans(self.offset))
    }

    /// The parsed statement with `values` bound at its placeholders.
    fn bind_values(&self, values: &[Value]) -> Result<lql_grammar::Statement> {
        let mut tree = self
            .template
            .clone()
            .ok_or_else(|| Error::internal("a statement without parameters has no template"))?;
        for slot in &self.slots {
            let v = values
                .get(slot.index - 1)
                .ok_or_else(|| param_error(format!("no value for parameter {}", slot.index)))?;
            set_literal_at(&mut tree, slot.span, v).map_err(|message| {
                let mut e = param_error(format!("parameter {}: {message}", slot_name(slot)));
                e.span = Some(slot.span.range());
                e.offset_spans(self.offset)
            })?;
        }
        from_tree(tree)
    }

    /// The statement bound and lowered with `values` at its placeholders.
    fn prepare_with(&self, values: &[Value]) -> Result<Prepared> {
        let stmt = self.bind_values(values)?;
        self.conn
            .prepare_parsed(stmt)
            .map_err(|e| e.offset_spans(self.offset))
    }

    /// The column names (as rusqlite's `column_names`).
    pub fn column_names(&mut self) -> Result<Vec<String>> {
        Ok(self.columns()?.into_iter().map(|c| c.name).collect())
    }

    /// The statement written with `params` as literals in its placeholders, for display
    /// and logs (what runs is the parsed statement with the values bound, not this text).
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
        Ok(self.prepare_with(&values)?.effects())
    }

    fn run<P: Params>(&mut self, params: P, gate: Option<Gate<'_>>) -> Result<Rows> {
        self.start(params, gate)?.into_rows()
    }

    /// Starts the statement with `params` and returns its rows as a [`RowStream`]: each row
    /// is computed when it is read, and dropping the stream stops the statement. The
    /// connection is busy until the stream is dropped.
    ///
    /// ```no_run
    /// # fn main() -> lql::Result<()> {
    /// let conn = lql::Connection::open("smollm2-135m-instruct")?;
    /// let mut stmt = conn.prepare("SELECT layer, feature FROM features WHERE layer >= ?")?;
    /// let first: Vec<Vec<lql::Value>> = stmt
    ///     .stream(lql::params![20])?
    ///     .take(5)
    ///     .collect::<lql::Result<_>>()?;
    /// assert_eq!(first.len(), 5);
    /// # Ok(()) }
    /// ```
    pub fn stream<P: Params>(&mut self, params: P) -> Result<RowStream<'conn>> {
        self.start(params, None)
    }

    /// [`Statement::stream`] with a gate (see [`crate::Connection::execute_each_gated`]).
    pub fn stream_gated<P: Params>(
        &mut self,
        params: P,
        gate: Gate<'_>,
    ) -> Result<RowStream<'conn>> {
        self.start(params, Some(gate))
    }

    /// Binds `params` and starts the statement: the plan kept by a statement without
    /// parameters (re-bound when the session changed), else the parsed statement with the
    /// values in its placeholders, bound and started under one hold of the connection, so
    /// no USE from another thread comes between its binding and its run.
    fn start<P: Params>(&mut self, params: P, gate: Option<Gate<'_>>) -> Result<RowStream<'conn>> {
        let values = params.resolve(&self.slots)?;
        let conn: &'conn Connection = self.conn;
        let what = match self.plan.as_mut() {
            Some(p) => ToStart::Kept(p),
            None => ToStart::Parsed(Box::new(self.bind_values(&values)?)),
        };
        conn.start(what, &self.text, self.offset, gate)
            .map_err(|e| e.offset_spans(self.offset))
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
        let mut out = String::with_capacity(self.text.len());
        let mut at = 0;
        for s in &self.slots {
            out.push_str(&self.text[at..s.span.start]);
            let v = values
                .get(s.index - 1)
                .ok_or_else(|| param_error(format!("no value for parameter {}", s.index)))?;
            out.push_str(&literal(v)?);
            at = s.span.end;
        }
        out.push_str(&self.text[at..]);
        Ok(out)
    }
}

/// How a placeholder is written (`:name`, or `?N`).
fn slot_name(slot: &lql_grammar::Placeholder) -> String {
    slot.name
        .clone()
        .unwrap_or_else(|| format!("?{}", slot.index))
}

/// A value's type as errors name it.
fn kind_name(v: &Value) -> &'static str {
    v.value_type().map_or("NULL", |t| t.name())
}

/// The statement back from its JSON tree.
fn from_tree(tree: serde_json::Value) -> Result<lql_grammar::Statement> {
    serde_json::from_value(tree).map_err(|e| {
        param_error(format!(
            "a parameter's value does not fit where it stands: {e}"
        ))
    })
}

type JsonMap = serde_json::Map<String, serde_json::Value>;

/// Whether the node holds the placeholder at `span`: its span ends with the placeholder's
/// (a literal's node spans the literal itself, or its clause: `TOP ?` spans `TOP ?`).
fn at_span(map: &JsonMap, span: lql_grammar::Span) -> bool {
    map.get("span").is_some_and(|s| {
        s.get("start")
            .and_then(|v| v.as_u64())
            .is_some_and(|start| start <= span.start as u64)
            && s.get("end").and_then(|v| v.as_u64()) == Some(span.end as u64)
    })
}

/// A grammar `Value` as serde writes it (`{"Int": 1}`, `{"String": "…"}`, …) holding a
/// placeholder's stand-in.
fn is_literal_value(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(m) if m.len() == 1 => m.iter().all(|(k, v)| match k.as_str() {
            "String" => v.as_str() == Some(lql_grammar::PLACEHOLDER_TEXT),
            "Int" | "Float" => v.as_f64() == Some(lql_grammar::PLACEHOLDER_INT as f64),
            _ => false,
        }),
        _ => false,
    }
}

/// Whether a `Spanned` node's value is a placeholder's stand-in: the text, the number or
/// the literal value the parser gives a placeholder (so a node that merely ends where the
/// placeholder does, such as a clause keyword's unit variant, is never taken for it).
fn is_literal_slot(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::String(t) => t == lql_grammar::PLACEHOLDER_TEXT,
        serde_json::Value::Number(n) => n.as_f64() == Some(lql_grammar::PLACEHOLDER_INT as f64),
        other => is_literal_value(other),
    }
}

/// Where a node holds a placeholder's stand-in.
#[derive(Clone, Copy)]
enum StandIn {
    /// A `Spanned` value that is the stand-in itself (text, number or literal value).
    Value,
    /// A `Spanned` value that is a one-field variant around a stand-in text
    /// (`{"Path": "?"}`).
    Wrapped,
    /// An expression's `Literal`.
    Literal,
}

/// Where the node holds a stand-in, if it does.
fn stand_in(map: &JsonMap) -> Option<StandIn> {
    match map.get("value") {
        Some(v) if is_literal_slot(v) => Some(StandIn::Value),
        Some(v) if wraps_stand_in(v) => Some(StandIn::Wrapped),
        _ => map
            .get("kind")
            .and_then(|k| k.get("Literal"))
            .filter(|v| is_literal_value(v))
            .map(|_| StandIn::Literal),
    }
}

/// The stand-in itself, where [`stand_in`] found it.
fn stand_in_mut(map: &mut JsonMap, at: StandIn) -> Option<&mut serde_json::Value> {
    match at {
        StandIn::Value => map.get_mut("value"),
        StandIn::Wrapped => map
            .get_mut("value")
            .and_then(|v| v.as_object_mut())
            .and_then(|m| m.values_mut().next()),
        StandIn::Literal => map.get_mut("kind").and_then(|k| k.get_mut("Literal")),
    }
}

/// A one-field enum variant around a stand-in text, as serde writes it.
fn wraps_stand_in(v: &serde_json::Value) -> bool {
    v.as_object().is_some_and(|m| {
        m.len() == 1
            && m.values()
                .all(|x| x.as_str() == Some(lql_grammar::PLACEHOLDER_TEXT))
    })
}

/// Whether `span` is a literal's in the tree (see [`stand_in`]).
fn has_literal_at(tree: &serde_json::Value, span: lql_grammar::Span) -> bool {
    match tree {
        serde_json::Value::Object(map) => {
            (at_span(map, span) && stand_in(map).is_some())
                || map.values().any(|v| has_literal_at(v, span))
        }
        serde_json::Value::Array(items) => items.iter().any(|v| has_literal_at(v, span)),
        _ => false,
    }
}

/// Sets the literal at `span` to `value`, checked against what stands there: text where a
/// string stands, an integer where a count does, a number where a scale does, any value
/// where a literal value does.
fn set_literal_at(
    tree: &mut serde_json::Value,
    span: lql_grammar::Span,
    value: &Value,
) -> std::result::Result<(), String> {
    let mut set = 0usize;
    set_in(tree, span, value, &mut set)?;
    if set == 0 {
        return Err("it stands where no value can be bound".into());
    }
    Ok(())
}

fn set_in(
    tree: &mut serde_json::Value,
    span: lql_grammar::Span,
    value: &Value,
    set: &mut usize,
) -> std::result::Result<(), String> {
    match tree {
        serde_json::Value::Object(map) => {
            if let Some(at) = stand_in(map).filter(|_| at_span(map, span)) {
                if let Some(slot) = stand_in_mut(map, at) {
                    *slot = fitted(slot, value)?;
                    *set += 1;
                }
            }
            for v in map.values_mut() {
                set_in(v, span, value, set)?;
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                set_in(v, span, value, set)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// `value` in the shape of the stand-in that `slot` holds, or why it does not fit there.
fn fitted(
    slot: &serde_json::Value,
    value: &Value,
) -> std::result::Result<serde_json::Value, String> {
    use serde_json::json;
    let finite = |f: f64| {
        if f.is_finite() {
            Ok(f)
        } else {
            Err(format!("{f} is not finite"))
        }
    };
    if let Value::List(_) = value {
        return Err("a list cannot be a parameter".into());
    }
    if is_literal_value(slot) {
        return Ok(match value {
            Value::Bool(b) => json!({ "Bool": b }),
            Value::Int(i) => json!({ "Int": i }),
            Value::Float(f) => json!({ "Float": finite(*f)? }),
            Value::Text(t) => json!({ "String": t }),
            _ => json!("Null"),
        });
    }
    match (slot, value) {
        (serde_json::Value::String(_), Value::Text(t)) => Ok(json!(t)),
        (serde_json::Value::String(_), other) => {
            Err(format!("text stands here, not {}", kind_name(other)))
        }
        (serde_json::Value::Number(n), Value::Int(i)) if !n.is_f64() => Ok(json!(i)),
        (serde_json::Value::Number(_), Value::Int(i)) => Ok(json!(*i as f64)),
        (serde_json::Value::Number(n), Value::Float(f)) if n.is_f64() => Ok(json!(finite(*f)?)),
        (serde_json::Value::Number(_), Value::Float(_)) => {
            Err("an integer stands here, not a float".into())
        }
        (serde_json::Value::Number(_), other) => {
            Err(format!("a number stands here, not {}", kind_name(other)))
        }
        _ => Err("it stands where no value can be bound".into()),
    }
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
