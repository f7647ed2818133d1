//! A `.trace` file's arrays as numpy arrays.
//!
//! The file is read and checked by the engine's own reader (`TraceFile::load`: magic,
//! version, header length, every shape and extent), and each array's buffer is handed to
//! numpy as it is, without a copy: the numpy array owns the loaded `Vec<f32>`.

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors;

/// Loads a `.trace` file: `{"arrays": {name: ndarray}, "tokens": [...], "positions":
/// [...], "meta": json-text, "hidden", "ffn", "n_heads", "n_layers", "context"}`.
#[pyfunction]
pub fn load_trace<'py>(py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyDict>> {
    let file = py
        .detach(|| lql_exec::trace::TraceFile::load(std::path::Path::new(path)))
        .map_err(|e| errors::DataError::new_err(e.to_string()))?;
    let out = PyDict::new(py);
    out.set_item("tokens", file.tokens().to_vec())?;
    out.set_item("positions", file.positions().to_vec())?;
    out.set_item("meta", file.meta().to_string())?;
    let dims = file.dims();
    out.set_item("hidden", dims.hidden)?;
    out.set_item("ffn", dims.ffn)?;
    out.set_item("n_heads", dims.n_heads)?;
    out.set_item("n_layers", dims.n_layers)?;
    out.set_item("context", dims.context)?;
    let arrays = PyDict::new(py);
    for (info, data) in file.into_arrays() {
        let flat = PyArray1::from_vec(py, data);
        let shaped = flat.reshape(info.shape.clone())?;
        arrays.set_item(info.name, shaped)?;
    }
    out.set_item("arrays", arrays)?;
    Ok(out)
}
