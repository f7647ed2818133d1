//! `Rows`: the typed result of a statement (columns + rows of [`Value`]s).

use crate::error::Error;
use crate::value::{FromValue, Value, ValueType};

/// A result column: its name and declared type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: ValueType,
}

impl Column {
    pub fn new(name: impl Into<String>, ty: ValueType) -> Self {
        Column {
            name: name.into(),
            ty,
        }
    }
}

/// The result of one statement. A statement that only changes state (none today) returns
/// `Rows` with no columns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Value>>,
    /// Set by a statement whose rows report a fault it found (VERIFY with a FAILED row, a
    /// package that does not validate): the statement ran, but what it checked is broken.
    /// Shells turn it into a non-zero exit code.
    pub fault: bool,
}

impl Rows {
    /// An empty result with these columns.
    pub fn new(columns: Vec<Column>) -> Self {
        Rows {
            columns,
            rows: Vec::new(),
            fault: false,
        }
    }

    /// A result with no columns (a status).
    pub fn empty() -> Self {
        Rows::default()
    }

    /// Appends a row. Debug builds check its width against the columns.
    pub fn push(&mut self, row: Vec<Value>) {
        debug_assert_eq!(row.len(), self.columns.len(), "row width != column count");
        self.rows.push(row);
    }

    /// Whether the statement reported a fault (see [`Rows::fault`]).
    pub fn has_fault(&self) -> bool {
        self.fault
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The index of a column by name (ASCII case-insensitive).
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(name))
    }

    pub fn column_names(&self) -> Vec<&str> {
        self.columns.iter().map(|c| c.name.as_str()).collect()
    }

    /// Row `i` as a [`Row`] view.
    pub fn row(&self, i: usize) -> Option<Row<'_>> {
        self.rows.get(i).map(|values| Row {
            columns: &self.columns,
            values,
        })
    }

    /// Iterates the rows as [`Row`] views.
    pub fn iter(&self) -> impl Iterator<Item = Row<'_>> {
        self.rows.iter().map(|values| Row {
            columns: &self.columns,
            values,
        })
    }

    /// `{"columns": [...], "rows": [[...], ...]}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "columns": self.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
            "rows": self.rows.iter()
                .map(|r| r.iter().map(Value::to_json).collect::<Vec<_>>())
                .collect::<Vec<_>>(),
        })
    }
}

/// `for row in &rows { … }`, as rusqlite users write it.
///
/// ```
/// use lql::{Column, Rows, Value, ValueType};
/// let mut rows = Rows::new(vec![Column::new("n", ValueType::Int)]);
/// rows.push(vec![Value::Int(1)]);
/// rows.push(vec![Value::Int(2)]);
/// let mut sum = 0i64;
/// for row in &rows {
///     sum += row.get::<_, i64>("n")?;
/// }
/// assert_eq!(sum, 3);
/// # Ok::<(), lql::Error>(())
/// ```
impl<'a> IntoIterator for &'a Rows {
    type Item = Row<'a>;
    type IntoIter = RowIter<'a>;
    fn into_iter(self) -> RowIter<'a> {
        RowIter {
            columns: &self.columns,
            rows: self.rows.iter(),
        }
    }
}

/// The rows of a result as [`Row`] views (`&Rows`'s iterator).
#[derive(Debug, Clone)]
pub struct RowIter<'a> {
    columns: &'a [Column],
    rows: std::slice::Iter<'a, Vec<Value>>,
}

impl<'a> Iterator for RowIter<'a> {
    type Item = Row<'a>;
    fn next(&mut self) -> Option<Row<'a>> {
        let columns = self.columns;
        self.rows.next().map(|values| Row { columns, values })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.rows.size_hint()
    }
}

/// One row of a result, with typed access by index or column name.
///
/// [`Row::get`] converts a cell (by index or column name) to `i64`, `i32`, `u64`, `usize`,
/// `f64`, `f32`, `bool`, `String`, `Vec<T>`, `Option<T>` (NULL → `None`) or [`Value`]; a
/// cell of another type, or a number out of range, is an error naming the column:
///
/// ```
/// use lql::{Column, Rows, Value, ValueType};
/// let mut rows = Rows::new(vec![
///     Column::new("layer", ValueType::Int),
///     Column::new("score", ValueType::Float),
///     Column::new("token", ValueType::Text),
///     Column::new("big", ValueType::Bool),
///     Column::new("label", ValueType::Text),
/// ]);
/// rows.push(vec![Value::Int(3), Value::Float(0.5), "Paris".into(), Value::Bool(true), Value::Null]);
/// let row = rows.row(0).unwrap();
/// assert_eq!(row.get::<_, i64>("layer")?, 3);
/// assert_eq!(row.get::<_, u8>(0)?, 3);
/// assert_eq!(row.get::<_, f64>("score")?, 0.5);
/// assert_eq!(row.get::<_, String>("token")?, "Paris");
/// assert!(row.get::<_, bool>("big")?);
/// assert_eq!(row.get::<_, Option<String>>("label")?, None);
/// assert!(row.get::<_, i64>("token").is_err());
/// # Ok::<(), lql::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    columns: &'a [Column],
    values: &'a [Value],
}

impl<'a> Row<'a> {
    /// Builds a view over a row's values and its columns.
    pub fn new(columns: &'a [Column], values: &'a [Value]) -> Self {
        Row { columns, values }
    }

    pub fn values(&self) -> &'a [Value] {
        self.values
    }

    pub fn columns(&self) -> &'a [Column] {
        self.columns
    }

    /// The cell at `idx` (a column index or a column name) converted to `T`, spelled as
    /// rusqlite spells it: `row.get::<_, i64>(0)`, `row.get::<_, &str>("token")`.
    pub fn get<I: RowIndex, T: FromValue<'a>>(&self, idx: I) -> Result<T, Error> {
        let i = idx.index(self.columns)?;
        let v = &self.values[i];
        T::from_value(v).ok_or_else(|| {
            Error::semantic(format!(
                "column {} ({}) holds {}, which does not convert to {}",
                i,
                self.columns[i].name,
                v.value_type().map_or("NULL", |t| t.name()),
                std::any::type_name::<T>()
            ))
        })
    }

    /// The raw cell at `idx`.
    pub fn value(&self, idx: impl RowIndex) -> Result<&'a Value, Error> {
        let i = idx.index(self.columns)?;
        Ok(&self.values[i])
    }
}

/// A way to name a column: its index or its name.
pub trait RowIndex {
    fn index(&self, columns: &[Column]) -> Result<usize, Error>;
}

impl RowIndex for usize {
    fn index(&self, columns: &[Column]) -> Result<usize, Error> {
        if *self < columns.len() {
            Ok(*self)
        } else {
            Err(Error::semantic(format!(
                "column index {self} out of range (the result has {} columns)",
                columns.len()
            )))
        }
    }
}

impl RowIndex for &str {
    fn index(&self, columns: &[Column]) -> Result<usize, Error> {
        columns
            .iter()
            .position(|c| c.name.eq_ignore_ascii_case(self))
            .ok_or_else(|| Error::semantic(format!("no column named {self:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_row_access() {
        let mut rows = Rows::new(vec![
            Column::new("rank", ValueType::Int),
            Column::new("token", ValueType::Text),
        ]);
        rows.push(vec![Value::Int(1), Value::Text(" Paris".into())]);
        let r = rows.row(0).unwrap();
        assert_eq!(r.get::<_, i64>(0).unwrap(), 1);
        assert_eq!(r.get::<_, String>("TOKEN").unwrap(), " Paris");
        assert!(r.get::<_, i64>(1).is_err());
        assert!(r.get::<_, i64>(5).is_err());
        assert!(r.get::<_, i64>("nope").is_err());
    }
}
