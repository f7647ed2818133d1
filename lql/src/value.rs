//! `Value` and `ValueType`: the typed cells of a result row.
//!
//! Statements never return pre-formatted text; callers (the REPL, embedders) choose how to
//! render. [`FromValue`] gives rusqlite-style typed access (`row.get::<_, i64>(0)`).

use std::fmt;

/// One cell of a result row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
    List(Vec<Value>),
}

/// The declared type of a result column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    Bool,
    Int,
    Float,
    Text,
    /// A list of values (e.g. token ids).
    List,
    /// A column whose cells may be of any type (e.g. the `value` column of `STATS`).
    Any,
}

impl ValueType {
    /// The value type of a planner column type.
    pub fn from_column(t: lql_planner::ColumnType) -> ValueType {
        use lql_planner::ColumnType as C;
        match t {
            C::Int => ValueType::Int,
            C::Float => ValueType::Float,
            C::Text => ValueType::Text,
            C::Bool => ValueType::Bool,
            C::List => ValueType::List,
            C::Any => ValueType::Any,
        }
    }

    /// Lower-case name, as shown in type rows and JSON.
    pub fn name(self) -> &'static str {
        match self {
            ValueType::Bool => "bool",
            ValueType::Int => "int",
            ValueType::Float => "float",
            ValueType::Text => "text",
            ValueType::List => "list",
            ValueType::Any => "any",
        }
    }

    /// Whether renderers should right-align cells of this type.
    pub fn is_numeric(self) -> bool {
        matches!(self, ValueType::Int | ValueType::Float)
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Value {
    /// The runtime type of this value (`None` for `Null`).
    pub fn value_type(&self) -> Option<ValueType> {
        match self {
            Value::Null => None,
            Value::Bool(_) => Some(ValueType::Bool),
            Value::Int(_) => Some(ValueType::Int),
            Value::Float(_) => Some(ValueType::Float),
            Value::Text(_) => Some(ValueType::Text),
            Value::List(_) => Some(ValueType::List),
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The value as a float; integers widen.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(l) => Some(l),
            _ => None,
        }
    }

    /// The value as JSON: floats that are not finite become `null`.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(json_float(*f))
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::Text(s) => serde_json::Value::String(s.clone()),
            Value::List(l) => serde_json::Value::Array(l.iter().map(Value::to_json).collect()),
        }
    }
}

/// The shortest text that reads back as `x`. Most floats in results were `f32` in the model
/// (widened to `f64`); when `x` is exactly such a widened `f32`, the `f32`'s shortest form is
/// printed (`1e-5`, not `9.999999747378752e-6`), otherwise the `f64`'s. Non-finite values
/// print as `NaN`, `inf`, `-inf`.
pub fn format_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    let narrow = x as f32;
    if narrow as f64 == x {
        format!("{narrow:?}")
    } else {
        format!("{x:?}")
    }
}

/// The `f64` whose shortest form is [`format_float`]'s text: for a widened `f32`, the
/// decimal the `f32` prints as, so JSON shows `0.00001` rather than the widened digits.
fn json_float(x: f64) -> f64 {
    let narrow = x as f32;
    if x.is_finite() && narrow as f64 == x {
        format!("{narrow:?}").parse::<f64>().unwrap_or(x)
    } else {
        x
    }
}

/// Plain text: `NULL`, `true`, integers, floats by [`format_float`], text verbatim, lists
/// as `[a, b, c]`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => f.write_str(&format_float(*x)),
            Value::Text(s) => f.write_str(s),
            Value::List(items) => {
                f.write_str("[")?;
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
        }
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
/// Small integers convert losslessly (so `params![3]` works without a suffix).
macro_rules! small_int_into_value {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Self {
                Value::Int(i64::from(v))
            }
        }
    )*};
}
small_int_into_value!(i8, i16, i32, u8, u16);

impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Value::Int(v as i64)
    }
}
impl From<usize> for Value {
    fn from(v: usize) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<f32> for Value {
    fn from(v: f32) -> Self {
        Value::Float(v as f64)
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map(Into::into).unwrap_or(Value::Null)
    }
}
impl<T: Into<Value>> From<Vec<T>> for Value {
    fn from(v: Vec<T>) -> Self {
        Value::List(v.into_iter().map(Into::into).collect())
    }
}

/// Conversion from a cell to a Rust type, for typed access to rows (`row.get::<_, T>(i)`,
/// as rusqlite spells it). `'a` is the row's lifetime, so `&str` borrows the cell.
pub trait FromValue<'a>: Sized {
    /// `None` when the cell does not hold this type.
    fn from_value(v: &'a Value) -> Option<Self>;
}

impl FromValue<'_> for Value {
    fn from_value(v: &Value) -> Option<Self> {
        Some(v.clone())
    }
}
impl FromValue<'_> for bool {
    fn from_value(v: &Value) -> Option<Self> {
        match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
}
impl FromValue<'_> for i64 {
    fn from_value(v: &Value) -> Option<Self> {
        v.as_i64()
    }
}
macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl FromValue<'_> for $t {
            fn from_value(v: &Value) -> Option<Self> {
                match v {
                    Value::Int(i) => <$t>::try_from(*i).ok(),
                    _ => None,
                }
            }
        }
    )*};
}
from_int!(i8, i16, i32, u8, u16, u32, u64);
impl FromValue<'_> for usize {
    fn from_value(v: &Value) -> Option<Self> {
        v.as_i64().and_then(|i| usize::try_from(i).ok())
    }
}
impl FromValue<'_> for f64 {
    fn from_value(v: &Value) -> Option<Self> {
        v.as_f64()
    }
}
impl FromValue<'_> for f32 {
    fn from_value(v: &Value) -> Option<Self> {
        v.as_f64().map(|f| f as f32)
    }
}
impl<'a> FromValue<'a> for &'a str {
    fn from_value(v: &'a Value) -> Option<Self> {
        v.as_str()
    }
}
impl FromValue<'_> for String {
    fn from_value(v: &Value) -> Option<Self> {
        v.as_str().map(str::to_string)
    }
}
impl<'a, T: FromValue<'a>> FromValue<'a> for Option<T> {
    fn from_value(v: &'a Value) -> Option<Self> {
        match v {
            Value::Null => Some(None),
            other => T::from_value(other).map(Some),
        }
    }
}
impl<'a, T: FromValue<'a>> FromValue<'a> for Vec<T> {
    fn from_value(v: &'a Value) -> Option<Self> {
        v.as_list()?.iter().map(T::from_value).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_lists_and_nulls() {
        let v = Value::List(vec![Value::Int(1), Value::Text("a".into()), Value::Null]);
        assert_eq!(v.to_string(), "[1, a, NULL]");
        assert_eq!(Value::Float(0.5).to_string(), "0.5");
    }

    #[test]
    fn json_maps_non_finite_to_null() {
        assert_eq!(Value::Float(f64::NAN).to_json(), serde_json::Value::Null);
        assert_eq!(
            Value::from(vec![1i64, 2]).to_json(),
            serde_json::json!([1, 2])
        );
    }

    #[test]
    fn floats_print_the_shortest_form_of_the_stored_f32() {
        let stored = 1e-5f32 as f64;
        assert_eq!(stored.to_string(), "0.000009999999747378752");
        assert_eq!(Value::Float(stored).to_string(), "1e-5");
        assert_eq!(Value::Float(stored).to_json().to_string(), "0.00001");
        assert_eq!(Value::Float(0.1).to_string(), "0.1");
        assert_eq!(Value::Float(2.0).to_string(), "2.0");
        // Not a widened f32: the f64's own shortest form.
        assert_eq!(Value::Float(0.123456789).to_string(), "0.123456789");
        assert_eq!(
            Value::Float(0.123456789).to_json().to_string(),
            "0.123456789"
        );
        assert_eq!(Value::Float(0.1f32 as f64).to_json().to_string(), "0.1");
        assert_eq!(Value::Float(f64::INFINITY).to_string(), "inf");
    }

    #[test]
    fn typed_access() {
        assert_eq!(i64::from_value(&Value::Int(3)), Some(3));
        assert_eq!(f64::from_value(&Value::Int(3)), Some(3.0));
        assert_eq!(Option::<i64>::from_value(&Value::Null), Some(None));
        assert_eq!(String::from_value(&Value::Int(3)), None);
        assert_eq!(
            Vec::<u32>::from_value(&Value::from(vec![1i64, 2])),
            Some(vec![1, 2])
        );
    }
}
