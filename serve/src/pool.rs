//! Admission and back-pressure: `parallel` slots (requests that decode at once: the
//! decode scheduler, [`lql::generation::Batcher`], runs them together in one batch over the one
//! shared, mapped model); requests beyond the slots wait in a queue bounded by `queue`, and
//! one more is refused with 429.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lql::generation::Batcher;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// The slots, the queue and the decode scheduler they feed.
pub struct Pool {
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    queue: usize,
    parallel: usize,
    batcher: Batcher,
    /// `--max-memory`: no slot is handed out at or above it ([`crate::memory`]).
    max_memory: Option<u64>,
}

/// A held slot, freed when dropped.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
}

/// Counts a waiting request while it waits (also when its future is dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Pool {
    /// `parallel` slots, `queue` places to wait, feeding `batcher`.
    pub fn new(parallel: usize, queue: usize, batcher: Batcher, max_memory: Option<u64>) -> Pool {
        let parallel = parallel.max(1);
        Pool {
            slots: Arc::new(Semaphore::new(parallel)),
            waiting: AtomicUsize::new(0),
            queue,
            parallel,
            batcher,
            max_memory,
        }
    }

    /// The decode scheduler.
    pub fn batcher(&self) -> &Batcher {
        &self.batcher
    }

    /// A slot, waiting in the queue if every slot is busy; 429 when the queue is full, 503
    /// at or above the memory bound.
    pub async fn acquire(self: &Arc<Self>) -> Result<Slot, ApiError> {
        crate::memory::check(self.max_memory)?;
        let permit = match self.slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                let before = self.waiting.fetch_add(1, Ordering::SeqCst);
                let _guard = Waiting(&self.waiting);
                if before >= self.queue {
                    return Err(ApiError::overloaded(self.queue));
                }
                self.slots
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| ApiError::shutting_down())?
            }
        };
        Ok(Slot { _permit: permit })
    }

    /// Requests decoding now.
    pub fn busy(&self) -> usize {
        self.parallel - self.slots.available_permits()
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    pub fn parallel(&self) -> usize {
        self.parallel
    }

    /// Stops every generation now (shutdown after the grace period); refuses new slots.
    pub fn cancel_all(&self) {
        self.slots.close();
        self.batcher.cancel_all();
    }
}
