//! `QueryResult`: one statement's rows, kept in Rust and handed to Python on demand — as
//! tuples (`rows(start, stop)`) or as Arrow (`__arrow_c_stream__`).

use std::sync::Arc;

use arrow_array::ffi::FFI_ArrowSchema;
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{RecordBatchIterator, RecordBatchReader};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyList, PyTuple};

use crate::{arrow, values};

/// The rows of one statement (`lql._lql.QueryResult`).
#[pyclass(module = "lql._lql", frozen)]
pub struct QueryResult {
    rows: Arc<lql::Rows>,
    statement: String,
}

impl QueryResult {
    pub fn new(rows: lql::Rows, statement: String) -> QueryResult {
        QueryResult {
            rows: Arc::new(rows),
            statement,
        }
    }

    fn batch(&self) -> PyResult<arrow_array::RecordBatch> {
        arrow::record_batch(&self.rows).map_err(|e| PyValueError::new_err(e.to_string()))
    }
}

#[pymethods]
impl QueryResult {
    /// The column names.
    #[getter]
    fn columns(&self) -> Vec<String> {
        self.rows.columns.iter().map(|c| c.name.clone()).collect()
    }

    /// The declared column types (`int`, `float`, `text`, `bool`, `list`, `any`).
    #[getter]
    fn types(&self) -> Vec<&'static str> {
        self.rows.columns.iter().map(|c| c.ty.name()).collect()
    }

    /// The statement's text.
    #[getter]
    fn statement(&self) -> &str {
        &self.statement
    }

    /// Whether the statement reported a fault it found (VERIFY with a FAILED row).
    #[getter]
    fn fault(&self) -> bool {
        self.rows.fault
    }

    fn __len__(&self) -> usize {
        self.rows.rows.len()
    }

    /// Rows `start .. stop` as a list of tuples.
    #[pyo3(signature = (start = 0, stop = None))]
    fn rows<'py>(
        &self,
        py: Python<'py>,
        start: usize,
        stop: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        let n = self.rows.rows.len();
        let stop = stop.unwrap_or(n).min(n);
        let start = start.min(stop);
        let out = PyList::empty(py);
        for row in &self.rows.rows[start..stop] {
            let cells = row
                .iter()
                .map(|v| values::to_py(py, v))
                .collect::<PyResult<Vec<_>>>()?;
            out.append(PyTuple::new(py, cells)?)?;
        }
        Ok(out)
    }

    /// One column's cells as a list.
    fn column<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyList>> {
        if index >= self.rows.columns.len() {
            return Err(PyValueError::new_err(format!(
                "column index {index} out of range (the result has {} columns)",
                self.rows.columns.len()
            )));
        }
        let out = PyList::empty(py);
        for row in &self.rows.rows {
            out.append(values::to_py(py, &row[index])?)?;
        }
        Ok(out)
    }

    /// Arrow PyCapsule interface: the schema.
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let batch = self.batch()?;
        let schema = FFI_ArrowSchema::try_from(batch.schema().as_ref())
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        PyCapsule::new_with_value(py, schema, c"arrow_schema")
    }

    /// Arrow PyCapsule interface: the rows as a stream of one record batch. A requested
    /// schema is not honoured (the consumer casts).
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let batch = self.batch()?;
        let schema = batch.schema();
        let reader: Box<dyn RecordBatchReader + Send> =
            Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema));
        let stream = FFI_ArrowArrayStream::new(reader);
        PyCapsule::new_with_value(py, stream, c"arrow_array_stream")
    }

    fn __repr__(&self) -> String {
        format!(
            "<lql result: {} rows × {} columns>",
            self.rows.rows.len(),
            self.rows.columns.len()
        )
    }
}
