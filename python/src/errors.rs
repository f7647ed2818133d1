//! The PEP 249 exception tree, and `lql::Error` → Python exception.
//!
//! ```text
//! Exception ─ Warning
//!           └ Error ─ InterfaceError
//!                   └ DatabaseError ─ DataError          (format: a malformed or hostile file)
//!                                   ├ OperationalError   (io, busy)
//!                                   ├ IntegrityError
//!                                   ├ InternalError      (a bug in LQL)
//!                                   ├ ProgrammingError ─ ParserError (syntax)  (semantic)
//!                                   └ NotSupportedError  (unsupported)
//! ```
//!
//! Every exception raised from an `lql::Error` carries `code` (`"LQL-E0201"`), `kind`
//! (`"semantic"`), `span` (`(start, end)` byte offsets in the statement text, or `None`),
//! `help` (a list of strings) and `message`. An interrupted statement raises Python's own
//! `KeyboardInterrupt` (see `connection.rs`).

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyList;

pyo3::create_exception!(lql, Warning, PyException, "PEP 249: important warnings.");
pyo3::create_exception!(
    lql,
    Error,
    PyException,
    "PEP 249: the base of LQL's errors."
);
pyo3::create_exception!(
    lql,
    InterfaceError,
    Error,
    "PEP 249: misuse of the interface (a closed connection or cursor)."
);
pyo3::create_exception!(lql, DatabaseError, Error, "PEP 249: errors of the engine.");
pyo3::create_exception!(
    lql,
    DataError,
    DatabaseError,
    "A malformed, hostile or inconsistent file (kind 'format')."
);
pyo3::create_exception!(
    lql,
    OperationalError,
    DatabaseError,
    "Reading or writing a file failed, or the connection is busy (kind 'io')."
);
pyo3::create_exception!(
    lql,
    IntegrityError,
    DatabaseError,
    "PEP 249: integrity errors."
);
pyo3::create_exception!(
    lql,
    InternalError,
    DatabaseError,
    "A bug in LQL (kind 'internal')."
);
pyo3::create_exception!(lql, ProgrammingError, DatabaseError, "The statement means nothing here: no model bound, unknown column, wrong parameters … (kind 'semantic').");
pyo3::create_exception!(
    lql,
    ParserError,
    ProgrammingError,
    "The text does not parse (kind 'syntax')."
);
pyo3::create_exception!(lql, NotSupportedError, DatabaseError, "A statement or feature that is not built (yet) or not available for this model (kind 'unsupported').");

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Warning", py.get_type::<Warning>())?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("InterfaceError", py.get_type::<InterfaceError>())?;
    m.add("DatabaseError", py.get_type::<DatabaseError>())?;
    m.add("DataError", py.get_type::<DataError>())?;
    m.add("OperationalError", py.get_type::<OperationalError>())?;
    m.add("IntegrityError", py.get_type::<IntegrityError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    m.add("ProgrammingError", py.get_type::<ProgrammingError>())?;
    m.add("ParserError", py.get_type::<ParserError>())?;
    m.add("NotSupportedError", py.get_type::<NotSupportedError>())?;
    Ok(())
}

/// The Python exception for an LQL error, with its code, kind, span and help attached.
pub fn to_py(py: Python<'_>, e: &lql::Error) -> PyErr {
    use lql::ErrorKind as K;
    let message = e.message.clone();
    let err = match e.kind {
        K::Syntax => ParserError::new_err(message.clone()),
        K::Semantic if e.code() == lql::Code::Busy => OperationalError::new_err(message.clone()),
        K::Semantic => ProgrammingError::new_err(message.clone()),
        K::Unsupported => NotSupportedError::new_err(message.clone()),
        K::Io | K::Interrupted => OperationalError::new_err(message.clone()),
        K::Format => DataError::new_err(message.clone()),
        _ => InternalError::new_err(message.clone()),
    };
    let value = err.value(py);
    let attach = || -> PyResult<()> {
        value.setattr("code", e.code().as_str())?;
        value.setattr("kind", e.kind.name())?;
        value.setattr("message", message.as_str())?;
        value.setattr("span", e.span.as_ref().map(|s| (s.start, s.end)))?;
        value.setattr("help", PyList::new(py, &e.help)?)?;
        Ok(())
    };
    match attach() {
        Ok(()) => err,
        Err(attach_err) => attach_err,
    }
}

/// A connection or cursor used after `close()`.
pub fn closed(what: &str) -> PyErr {
    InterfaceError::new_err(format!("the {what} is closed"))
}
