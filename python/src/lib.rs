//! `lql._lql`: the native half of the `lql` Python package (PyO3, abi3).
//!
//! The Python half (`python/lql/`) gives the DuckDB-shaped API (`lql.connect`, relations with
//! `.df()`/`.pl()`/`.arrow()`, the DB-API cursor, notebook reprs, batch jobs); this module
//! gives it the engine:
//!
//! - [`connection`]: `Database`, `Connection.execute` (the GIL released while a statement
//!   runs, Ctrl-C turned into the connection's interrupt);
//! - [`result`]: a statement's rows, as Python tuples on demand and as Arrow through the
//!   Arrow PyCapsule interface ([`arrow`]: one Arrow array per column, no per-value Python
//!   objects);
//! - [`errors`]: the PEP 249 exception tree, each exception carrying LQL's code, kind, span
//!   and help;
//! - [`trace`]: a `.trace` file's arrays as numpy arrays that own the loaded buffers (no copy).

mod arrow;
mod connection;
mod errors;
mod result;
mod trace;
mod values;

use pyo3::prelude::*;

#[pymodule]
fn _lql(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<connection::Database>()?;
    m.add_class::<connection::Connection>()?;
    m.add_class::<result::QueryResult>()?;
    m.add_function(wrap_pyfunction!(trace::load_trace, m)?)?;
    m.add_function(wrap_pyfunction!(quote, m)?)?;
    m.add_function(wrap_pyfunction!(error_codes, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    Ok(())
}

/// An LQL string literal for arbitrary text (quoted and escaped).
#[pyfunction]
fn quote(text: &str) -> String {
    lql::quote(text)
}

/// The registry of error codes: `[(code, meaning), …]`.
#[pyfunction]
fn error_codes() -> Vec<(&'static str, &'static str)> {
    lql::Code::ALL
        .iter()
        .map(|c| (c.as_str(), c.meaning()))
        .collect()
}
