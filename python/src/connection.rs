//! `Database` and `Connection`: the engine's objects, with each statement run off the GIL.
//!
//! A statement runs on a scoped worker thread while the calling thread waits with the GIL
//! released, waking every 50 ms to let Python look at its signals: Ctrl-C
//! (`KeyboardInterrupt`) becomes the connection's interrupt, the worker stops at its next
//! check, and the call raises `KeyboardInterrupt`; the connection stays usable.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::errors;
use crate::result::QueryResult;
use crate::values::Params;

fn flags(offline: bool, read_only: bool) -> lql::OpenFlags {
    let mut f = lql::OpenFlags::NONE;
    if offline {
        f |= lql::OpenFlags::OFFLINE;
    }
    if read_only {
        f |= lql::OpenFlags::READ_ONLY;
    }
    f
}

/// Runs `work` on a worker thread with the GIL released; Ctrl-C interrupts it.
fn run_interruptible<T: Send>(
    py: Python<'_>,
    conn: &lql::Connection,
    work: impl FnOnce() -> lql::Result<T> + Send,
) -> PyResult<T> {
    let stop = conn.interrupt_handle();
    std::thread::scope(|scope| {
        let (done_tx, done_rx) = mpsc::channel::<()>();
        // Receiver is not Sync; the detached closure borrows it through a lock.
        let done_rx = Mutex::new(done_rx);
        let worker = scope.spawn(move || {
            let out = work();
            let _ = done_tx.send(());
            out
        });
        let mut signal: Option<PyErr> = None;
        loop {
            let finished = py.detach(|| {
                done_rx
                    .lock()
                    .map(|rx| rx.recv_timeout(Duration::from_millis(50)).is_ok())
                    .unwrap_or(true)
            });
            if finished || worker.is_finished() {
                break;
            }
            if let Err(e) = py.check_signals() {
                signal.get_or_insert(e);
            }
            if signal.is_some() {
                // Repeated until the worker ends: a statement that had not yet reached its
                // first check (and reset the flag) still sees it.
                stop.interrupt();
            }
        }
        let out = py.detach(|| worker.join());
        if let Some(e) = signal {
            return Err(e);
        }
        match out {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(errors::to_py(py, &e)),
            Err(_) => Err(errors::InternalError::new_err(
                "the statement's worker thread panicked",
            )),
        }
    })
}

/// A database: a model (or none) mapped once and shared by its connections.
#[pyclass(module = "lql._lql", frozen)]
pub struct Database {
    db: lql::Database,
}

#[pymethods]
impl Database {
    /// Opens `model` (a GGUF file, a folder, a VINDEX3 container or a catalogue name);
    /// `None` gives a database with no model bound (`USE …` binds one).
    #[new]
    #[pyo3(signature = (model = None, offline = false, read_only = false))]
    fn new(
        py: Python<'_>,
        model: Option<String>,
        offline: bool,
        read_only: bool,
    ) -> PyResult<Self> {
        let f = flags(offline, read_only);
        let db = match model {
            None => Ok(lql::Database::new_with_flags(f)),
            Some(m) => py.detach(|| lql::Database::open_with_flags(&m, f)),
        }
        .map_err(|e| errors::to_py(py, &e))?;
        Ok(Database { db })
    }

    /// A new connection to this database (its own session: bound model, patches, settings).
    fn connect(&self, py: Python<'_>) -> PyResult<Connection> {
        let conn = self.db.connect().map_err(|e| errors::to_py(py, &e))?;
        Ok(Connection::from(conn))
    }

    /// The name of the model the database opened, if any.
    #[getter]
    fn model(&self) -> Option<String> {
        self.db.default_model().map(|(name, _)| name)
    }
}

/// One session on a database (`lql._lql.Connection`).
#[pyclass(module = "lql._lql", frozen)]
pub struct Connection {
    conn: Mutex<Option<Arc<lql::Connection>>>,
}

impl From<lql::Connection> for Connection {
    fn from(conn: lql::Connection) -> Self {
        Connection {
            conn: Mutex::new(Some(Arc::new(conn))),
        }
    }
}

impl Connection {
    fn live(&self) -> PyResult<Arc<lql::Connection>> {
        self.conn
            .lock()
            .map_err(|_| PyRuntimeError::new_err("connection lock poisoned"))?
            .clone()
            .ok_or_else(|| errors::closed("connection"))
    }
}

#[pymethods]
impl Connection {
    /// Runs `sql` and returns the rows of its last statement. With `params` (a sequence for
    /// `?`, a dict for `:name`) the text must hold one statement, and the values are bound
    /// into the prepared plan, never pasted into the text.
    #[pyo3(signature = (sql, params = None))]
    fn execute(
        &self,
        py: Python<'_>,
        sql: String,
        params: Option<Bound<'_, PyAny>>,
    ) -> PyResult<QueryResult> {
        let params = Params::from_py(params.as_ref())?;
        let conn = self.live()?;
        let rows = run_interruptible(py, &conn, || match params {
            Params::None => conn.execute(&sql),
            Params::Positional(values) => conn.prepare(&sql)?.query(values),
            Params::Named(named) => conn.prepare(&sql)?.query(lql::NamedParams(named)),
        })?;
        Ok(QueryResult::new(rows, sql))
    }

    /// The parameters a statement takes (0 for none).
    fn parameter_count(&self, py: Python<'_>, sql: &str) -> PyResult<usize> {
        let conn = self.live()?;
        let stmt = conn.prepare(sql).map_err(|e| errors::to_py(py, &e))?;
        Ok(stmt.parameter_count())
    }

    /// Cancels the statement this connection is running (from another thread).
    fn interrupt(&self) -> PyResult<()> {
        self.live()?.interrupt_handle().interrupt();
        Ok(())
    }

    /// The model bound now, if any.
    #[getter]
    fn bound_model(&self) -> PyResult<Option<String>> {
        Ok(self.live()?.bound_model())
    }

    /// A new connection to the same database (shares the mapped model).
    fn duplicate(&self, py: Python<'_>) -> PyResult<Connection> {
        let conn = self.live()?;
        let other = conn
            .database()
            .connect()
            .map_err(|e| errors::to_py(py, &e))?;
        Ok(Connection::from(other))
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.conn.lock().map(|c| c.is_none()).unwrap_or(true)
    }

    /// Closes the connection; later calls raise `InterfaceError`.
    fn close(&self) {
        if let Ok(mut c) = self.conn.lock() {
            c.take();
        }
    }
}
