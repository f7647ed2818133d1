//! `lql::Value` ↔ Python objects.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// A cell as a Python object: None, bool, int, float, str or list.
pub fn to_py<'py>(py: Python<'py>, v: &lql::Value) -> PyResult<Bound<'py, PyAny>> {
    use lql::Value as V;
    Ok(match v {
        V::Null => py.None().into_bound(py),
        V::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        V::Int(i) => i.into_pyobject(py)?.into_any(),
        V::Float(f) => PyFloat::new(py, *f).into_any(),
        V::Text(s) => PyString::new(py, s).into_any(),
        V::List(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
    })
}

/// A Python parameter value as an LQL value.
pub fn from_py(obj: &Bound<'_, PyAny>) -> PyResult<lql::Value> {
    use lql::Value as V;
    if obj.is_none() {
        return Ok(V::Null);
    }
    // bool before int: Python's bool is an int.
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(V::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        return Ok(V::Int(obj.extract::<i64>()?));
    }
    if obj.is_instance_of::<PyFloat>() {
        return Ok(V::Float(obj.extract::<f64>()?));
    }
    if obj.is_instance_of::<PyString>() {
        return Ok(V::Text(obj.extract::<String>()?));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for item in obj.try_iter()? {
            items.push(from_py(&item?)?);
        }
        return Ok(V::List(items));
    }
    // numpy scalars and other numbers: by their __index__ / __float__.
    if let Ok(i) = obj.extract::<i64>() {
        return Ok(V::Int(i));
    }
    if let Ok(f) = obj.extract::<f64>() {
        return Ok(V::Float(f));
    }
    Err(PyTypeError::new_err(format!(
        "a parameter of type {} cannot be bound (use None, bool, int, float, str or a list)",
        obj.get_type().name()?
    )))
}

/// Statement parameters: a sequence (positional, `?`) or a mapping (named, `:name`).
pub enum Params {
    None,
    Positional(Vec<lql::Value>),
    Named(Vec<(String, lql::Value)>),
}

impl Params {
    pub fn from_py(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Params> {
        let Some(obj) = obj.filter(|o| !o.is_none()) else {
            return Ok(Params::None);
        };
        if let Ok(d) = obj.cast::<PyDict>() {
            let mut named = Vec::with_capacity(d.len());
            for (k, v) in d.iter() {
                let key: String = k.extract().map_err(|_| {
                    PyTypeError::new_err("named parameters are given as a dict with str keys")
                })?;
                named.push((key, from_py(&v)?));
            }
            return Ok(Params::Named(named));
        }
        if obj.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(
                "parameters are a sequence or a dict, not a str (write [text] for one parameter)",
            ));
        }
        let mut values = Vec::new();
        for item in obj.try_iter().map_err(|_| {
            PyTypeError::new_err("parameters are a sequence (for ?) or a dict (for :name)")
        })? {
            values.push(from_py(&item?)?);
        }
        Ok(Params::Positional(values))
    }
}
