//! Panics in code a connection calls back (token and progress handlers, `execute_each`
//! callbacks, `query_row`/`query_map` closures) are caught and reported as errors with code
//! `LQL-E0205`; the connection stays usable.
//!
//! A handler that panics inside a running statement does not unwind through the engine:
//! its wrapper catches the panic, records it in the connection's [`PanicSlot`] and raises
//! the interrupt flag, so the statement stops at its next check as an interrupted one
//! would (its state consistent), and the connection then answers with the panic's error.
//! A panic of the engine itself (a bug) is caught at the statement boundary and reported as
//! an internal error, so the session's lock is never poisoned.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

/// The code of a caught handler panic.
pub const PANIC_CODE: crate::Code = crate::Code::Panic;

/// The message of a panic payload (`panic!("…")` gives a `&str` or a `String`).
pub(crate) fn payload_text(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic payload".into())
}

/// The error of a panicking handler or closure (`what`: "the token handler", …).
pub(crate) fn handler_error(what: &str, message: &str) -> Error {
    Error::semantic(format!("{what} panicked: {message}"))
        .with_code(PANIC_CODE)
        .with_help("the statement stopped; the connection is still usable")
}

/// Runs a caller's closure, turning a panic into [`handler_error`].
pub(crate) fn catch_closure<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|p| Err(handler_error(what, &payload_text(&*p))))
}

/// The first handler panic of the running statement, if any.
#[derive(Debug, Clone, Default)]
pub(crate) struct PanicSlot(Arc<Mutex<Option<String>>>);

impl PanicSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the recorded panic (clearing the slot).
    pub fn take(&self) -> Option<String> {
        self.lock().take()
    }

    /// Wraps a handler: a panic is recorded (the first one, as `what … panicked: msg`) and
    /// raises `interrupt`; once one is recorded the handler is not called again.
    pub fn wrap<A: ?Sized>(
        &self,
        what: &'static str,
        interrupt: Arc<AtomicBool>,
        handler: impl Fn(&A) + Send + Sync + 'static,
    ) -> impl Fn(&A) + Send + Sync + 'static {
        let slot = self.clone();
        move |arg: &A| {
            if slot.lock().is_some() {
                return;
            }
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| handler(arg))) {
                *slot.lock() = Some(format!("{what} panicked: {}", payload_text(&*p)));
                interrupt.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Runs one statement: a panic of the engine becomes an internal error, and a handler
    /// panic recorded meanwhile replaces the statement's result (keeping the rows an
    /// interrupted statement produced).
    pub fn run<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<T> {
        self.take();
        let out = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
            Err(Error::internal(format!(
                "a statement panicked: {}",
                payload_text(&*p)
            )))
        });
        match self.take() {
            None => out,
            Some(msg) => {
                let e = Error::semantic(msg)
                    .with_code(PANIC_CODE)
                    .with_help("the statement stopped; the connection is still usable");
                match out.err().and_then(|x| x.partial_rows().cloned()) {
                    Some(rows) => Err(e.with_partial_rows(rows)),
                    None => Err(e),
                }
            }
        }
    }
}
