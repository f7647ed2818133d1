//! A statement's rows as one Arrow record batch, exported through the Arrow PyCapsule
//! interface (`__arrow_c_stream__`, `__arrow_c_schema__`): pyarrow, polars and pandas take
//! the columns as they are, with no Python object per value.
//!
//! Column types follow the cells (a column declared `any` holding only integers is Int64):
//!
//! | cells | Arrow type |
//! |---|---|
//! | bool | Boolean |
//! | int | Int64 |
//! | float, or int and float | Float64 |
//! | text | Utf8 |
//! | lists (of one of the above) | List of that type |
//! | anything else (mixed kinds, nested lists) | Utf8, each non-text cell as JSON |
//! | only NULL | the declared type, or Null |

use std::sync::Arc;

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, Int64Builder, ListBuilder, StringBuilder,
};
use arrow_array::{ArrayRef, NullArray, RecordBatch, RecordBatchOptions};
use arrow_schema::{ArrowError, Field, Schema};
use lql::{Rows, Value, ValueType};

/// What the cells of a column (or the items of its lists) hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Int,
    Float,
    Text,
    /// Mixed kinds or nested lists: JSON text.
    Json,
}

impl Kind {
    fn of(v: &Value) -> Kind {
        match v {
            Value::Null => Kind::Null,
            Value::Bool(_) => Kind::Bool,
            Value::Int(_) => Kind::Int,
            Value::Float(_) => Kind::Float,
            Value::Text(_) => Kind::Text,
            Value::List(_) => Kind::Json,
        }
    }

    fn join(self, other: Kind) -> Kind {
        match (self, other) {
            (a, b) if a == b => a,
            (Kind::Null, b) => b,
            (a, Kind::Null) => a,
            (Kind::Int, Kind::Float) | (Kind::Float, Kind::Int) => Kind::Float,
            _ => Kind::Json,
        }
    }

    fn declared(t: ValueType) -> Kind {
        match t {
            ValueType::Bool => Kind::Bool,
            ValueType::Int => Kind::Int,
            ValueType::Float => Kind::Float,
            ValueType::Text => Kind::Text,
            ValueType::List | ValueType::Any => Kind::Null,
        }
    }
}

/// A column's layout: scalars of a kind, or lists whose items are of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    Scalar(Kind),
    List(Kind),
}

fn layout(rows: &Rows, col: usize) -> Layout {
    let mut scalar = Kind::Null;
    let mut item = Kind::Null;
    let (mut lists, mut scalars) = (false, false);
    for row in &rows.rows {
        match &row[col] {
            Value::Null => {}
            Value::List(items) => {
                lists = true;
                for v in items {
                    item = item.join(Kind::of(v));
                }
            }
            v => {
                scalars = true;
                scalar = scalar.join(Kind::of(v));
            }
        }
    }
    match (lists, scalars) {
        (true, false) => Layout::List(item),
        (true, true) => Layout::Scalar(Kind::Json),
        (false, true) => Layout::Scalar(scalar),
        (false, false) => match rows.columns[col].ty {
            ValueType::List => Layout::List(Kind::Null),
            t => Layout::Scalar(Kind::declared(t)),
        },
    }
}

fn json_text(v: &Value) -> String {
    match v {
        Value::Text(s) => s.clone(),
        other => other.to_json().to_string(),
    }
}

/// Appends cells of `kind` to one of the typed builders.
enum Builder {
    Null(usize),
    Bool(BooleanBuilder),
    Int(Int64Builder),
    Float(Float64Builder),
    Text(StringBuilder),
}

impl Builder {
    fn new(kind: Kind, capacity: usize) -> Builder {
        match kind {
            Kind::Null => Builder::Null(0),
            Kind::Bool => Builder::Bool(BooleanBuilder::with_capacity(capacity)),
            Kind::Int => Builder::Int(Int64Builder::with_capacity(capacity)),
            Kind::Float => Builder::Float(Float64Builder::with_capacity(capacity)),
            Kind::Text | Kind::Json => {
                Builder::Text(StringBuilder::with_capacity(capacity, capacity * 8))
            }
        }
    }

    fn append(&mut self, v: &Value) {
        match (self, v) {
            (Builder::Null(n), _) => *n += 1,
            (Builder::Bool(b), Value::Bool(x)) => b.append_value(*x),
            (Builder::Int(b), Value::Int(x)) => b.append_value(*x),
            (Builder::Float(b), Value::Float(x)) => b.append_value(*x),
            (Builder::Float(b), Value::Int(x)) => b.append_value(*x as f64),
            (Builder::Text(b), Value::Null) => b.append_null(),
            (Builder::Text(b), v) => b.append_value(json_text(v)),
            (Builder::Bool(b), _) => b.append_null(),
            (Builder::Int(b), _) => b.append_null(),
            (Builder::Float(b), _) => b.append_null(),
        }
    }

    fn finish(self) -> ArrayRef {
        match self {
            Builder::Null(n) => Arc::new(NullArray::new(n)),
            Builder::Bool(mut b) => Arc::new(b.finish()),
            Builder::Int(mut b) => Arc::new(b.finish()),
            Builder::Float(mut b) => Arc::new(b.finish()),
            Builder::Text(mut b) => Arc::new(b.finish()),
        }
    }
}

fn list_column(rows: &Rows, col: usize, item: Kind) -> ArrayRef {
    macro_rules! lists {
        ($builder:expr, $push:expr) => {{
            let mut lb = ListBuilder::new($builder);
            for row in &rows.rows {
                match &row[col] {
                    Value::List(items) => {
                        for v in items {
                            $push(lb.values(), v);
                        }
                        lb.append(true);
                    }
                    _ => lb.append(false),
                }
            }
            Arc::new(lb.finish()) as ArrayRef
        }};
    }
    match item {
        Kind::Bool => lists!(
            BooleanBuilder::new(),
            |b: &mut BooleanBuilder, v: &Value| match v {
                Value::Bool(x) => b.append_value(*x),
                _ => b.append_null(),
            }
        ),
        Kind::Int => lists!(
            Int64Builder::new(),
            |b: &mut Int64Builder, v: &Value| match v {
                Value::Int(x) => b.append_value(*x),
                _ => b.append_null(),
            }
        ),
        Kind::Float => lists!(
            Float64Builder::new(),
            |b: &mut Float64Builder, v: &Value| {
                match v.as_f64() {
                    Some(x) => b.append_value(x),
                    None => b.append_null(),
                }
            }
        ),
        // Text, JSON or empty/null-only lists: a list of strings.
        _ => lists!(
            StringBuilder::new(),
            |b: &mut StringBuilder, v: &Value| match v {
                Value::Null => b.append_null(),
                v => b.append_value(json_text(v)),
            }
        ),
    }
}

/// The rows as one record batch.
pub fn record_batch(rows: &Rows) -> Result<RecordBatch, ArrowError> {
    let mut fields = Vec::with_capacity(rows.columns.len());
    let mut arrays = Vec::with_capacity(rows.columns.len());
    for (i, c) in rows.columns.iter().enumerate() {
        let array = match layout(rows, i) {
            Layout::Scalar(kind) => {
                let mut b = Builder::new(kind, rows.rows.len());
                for row in &rows.rows {
                    b.append(&row[i]);
                }
                b.finish()
            }
            Layout::List(item) => list_column(rows, i, item),
        };
        fields.push(Field::new(c.name.clone(), array.data_type().clone(), true));
        arrays.push(array);
    }
    let schema = Arc::new(Schema::new(fields));
    RecordBatch::try_new_with_options(
        schema,
        arrays,
        &RecordBatchOptions::new().with_row_count(Some(rows.rows.len())),
    )
}
