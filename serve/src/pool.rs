//! Decoding slots and back-pressure: `parallel` slots, each with its own executor (its own
//! backend threads and cancel flag) over the one shared, mapped model; requests beyond the
//! slots wait in a queue bounded by `queue`, and one more is refused with 429.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lql_exec::{CpuBackend, Executor};
use lql_storage::Model;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// The slots and the queue.
pub struct Pool {
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    queue: usize,
    parallel: usize,
    executors: Mutex<Vec<Executor>>,
    /// Every slot's cancel flag (set all at once at shutdown).
    flags: Vec<Arc<AtomicBool>>,
}

/// A held slot: its executor returns to the pool when dropped.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    exec: Option<Executor>,
    pool: Arc<Pool>,
}

impl Slot {
    pub fn executor(&self) -> Option<&Executor> {
        self.exec.as_ref()
    }

    /// The flag that stops this slot's generation.
    pub fn cancel_flag(&self) -> Option<Arc<AtomicBool>> {
        self.exec.as_ref().map(|e| e.cancel_flag())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(e) = self.exec.take() {
            e.cancel_flag().store(false, Ordering::SeqCst);
            if let Ok(mut v) = self.pool.executors.lock() {
                v.push(e);
            }
        }
    }
}

/// Counts a waiting request while it waits (also when its future is dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Pool {
    /// `parallel` executors over `model`, `threads` backend threads each.
    pub fn new(
        model: Arc<Model>,
        parallel: usize,
        queue: usize,
        threads: usize,
    ) -> Result<Pool, String> {
        let parallel = parallel.max(1);
        let mut executors = Vec::with_capacity(parallel);
        let mut flags = Vec::with_capacity(parallel);
        for _ in 0..parallel {
            let source: Arc<dyn lql_storage::OperandSource> = model.clone();
            let backend = Arc::new(CpuBackend::new(threads).map_err(|e| e.to_string())?);
            let flag = Arc::new(AtomicBool::new(false));
            let exec = Executor::with_backend(source, backend)
                .map_err(|e| e.to_string())?
                .with_cancel_flag(flag.clone());
            flags.push(flag);
            executors.push(exec);
        }
        Ok(Pool {
            slots: Arc::new(Semaphore::new(parallel)),
            waiting: AtomicUsize::new(0),
            queue,
            parallel,
            executors: Mutex::new(executors),
            flags,
        })
    }

    /// A slot, waiting in the queue if every slot is busy; 429 when the queue is full.
    pub async fn acquire(self: &Arc<Self>) -> Result<Slot, ApiError> {
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
        let exec = self
            .executors
            .lock()
            .map_err(|_| ApiError::internal("executor pool poisoned"))?
            .pop();
        if let Some(e) = &exec {
            e.cancel_flag().store(false, Ordering::SeqCst);
        }
        Ok(Slot {
            _permit: permit,
            exec,
            pool: self.clone(),
        })
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
        for f in &self.flags {
            f.store(true, Ordering::SeqCst);
        }
    }
}
