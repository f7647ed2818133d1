//! Cooperative interruption of storage work. The engine installs the running statement's
//! interrupt flag for the thread that runs it ([`Scope`]); loops over counts a file declares
//! (metadata entries, tensor tables, package artifacts) poll it through [`check`] /
//! [`every`] and stop with [`StorageError::Interrupted`] naming what they were reading.
//! Without a scope (a library call outside a statement) polling is a no-op.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Result, StorageError};

thread_local! {
    static FLAG: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// While alive, storage work on this thread polls `flag`; the previous flag (if any) is
/// restored on drop.
#[must_use = "the flag is polled only while the scope is alive"]
pub struct Scope {
    previous: Option<Arc<AtomicBool>>,
}

impl Scope {
    pub fn new(flag: &Arc<AtomicBool>) -> Scope {
        let previous = FLAG.with(|f| f.borrow_mut().replace(flag.clone()));
        Scope { previous }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        FLAG.with(|f| *f.borrow_mut() = previous);
    }
}

/// `Err(Interrupted)` when this thread's statement was interrupted.
pub fn check(what: impl FnOnce() -> String) -> Result<()> {
    let set = FLAG.with(|f| {
        f.borrow()
            .as_ref()
            .is_some_and(|a| a.load(Ordering::Relaxed))
    });
    if set {
        Err(StorageError::Interrupted { what: what() })
    } else {
        Ok(())
    }
}

/// [`check`] on every 1024th iteration `i` (and the first), for hot loops.
pub fn every(i: u64, what: impl FnOnce() -> String) -> Result<()> {
    if i.is_multiple_of(1024) {
        check(what)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_only_inside_a_scope_and_restores_the_previous_flag() {
        let outer = Arc::new(AtomicBool::new(false));
        let inner = Arc::new(AtomicBool::new(true));
        assert!(check(|| "x".into()).is_ok());
        let _a = Scope::new(&outer);
        assert!(check(|| "x".into()).is_ok());
        {
            let _b = Scope::new(&inner);
            let e = check(|| "tensor table".into()).unwrap_err();
            assert!(e.to_string().contains("tensor table"), "{e}");
            assert!(every(1, || "x".into()).is_ok());
            assert!(every(2048, || "x".into()).is_err());
        }
        assert!(check(|| "x".into()).is_ok());
    }
}
