//! The device seam: a backend whose device holds the model runs whole forward passes
//! itself. [`DeviceBackend::prepare`] uploads an executor's operands once (in their stored
//! encoding) into a [`DeviceModel`]; each pass then keeps its activations on the device and
//! appends to a [`DeviceKv`] cache living in the session's [`KvCache`]. Observers get back
//! only what their hooks read. The CPU backend has no device side: its passes run through
//! the host operations of [`super::Backend`].

use std::any::Any;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use lql_storage::model::OperandSource;

use crate::error::Result;
use crate::forward::{LogitsWanted, PassInput};
use crate::kv::KvCache;
use crate::observer::Observer;
use crate::plan::Plan;

/// A backend that runs forward passes on its own device.
pub trait DeviceBackend: Send + Sync {
    /// Check that `plan` can run on the device and make its operands resident (uploaded
    /// once; `previous`, the model of the executor this one derives from, lends the buffers
    /// of operands both share). Refuses with a typed error naming the operand or feature,
    /// or — a backend made to fall back — answers `Ok(None)`: this plan's passes run on the
    /// host through the [`super::Backend`] operations.
    fn prepare(
        &self,
        source: Arc<dyn OperandSource>,
        plan: Arc<Plan>,
        previous: Option<&Arc<dyn DeviceModel>>,
    ) -> Result<Option<Arc<dyn DeviceModel>>>;
}

/// One executor's model resident on a device.
pub trait DeviceModel: Send + Sync {
    /// One forward pass over new positions at `kv.len() ..` (the same contract as the host
    /// pass: on success the cache holds them; on failure it is unchanged).
    fn run(
        &self,
        kv: &mut KvCache,
        input: PassInput<'_>,
        want: LogitsWanted,
        observer: Option<&mut dyn Observer>,
        last_layer: usize,
        cancel: &AtomicBool,
    ) -> Result<Vec<f32>>;

    /// Final norm and head over residual rows `[m × hidden]`: logits `[m × vocab]`.
    fn head(&self, x: &[f32]) -> Result<Vec<f32>>;

    /// For [`DeviceBackend::prepare`] to reach its own type.
    fn as_any(&self) -> &dyn Any;
}

/// A session's key/value rows on a device (the positions counted by its [`KvCache`]).
pub trait DeviceKv: Send + Sync + std::fmt::Debug {
    /// A copy (a forked session).
    fn clone_box(&self) -> Box<dyn DeviceKv>;
    /// Device bytes allocated.
    fn allocated_bytes(&self) -> usize;
    /// For the device model to reach its own type.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl Clone for Box<dyn DeviceKv> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}
