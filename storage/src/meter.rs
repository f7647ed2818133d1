//! Bytes of operands read, per encoding, counted at the operand seam: where an operator
//! takes an operand from its [`OperandSource`]. [`Metered`] wraps a source and counts each
//! view it hands out (the whole tensor: a dense kernel reads every row); an expert bank is
//! counted per expert actually used, by the operator that routes, and an embedding table
//! per row gathered (or whole, when it is the tied output head)
//! ([`OperandSource::record_read`]). EXPLAIN ANALYZE reads the [`ReadMeter`] around each
//! node, so its `read=` is what the node's kernels were given to read, not the size of the
//! layers it names.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::model::{OperandKey, OperandSource, Role, TensorView};
use crate::overlay::LayerOverlay;
use crate::surface::ExecutionSurface;

/// Bytes read per encoding (`Q4_1`, `F32`, …).
#[derive(Debug, Default)]
pub struct ReadMeter {
    bytes: Mutex<BTreeMap<&'static str, u64>>,
    paused: AtomicBool,
}

impl ReadMeter {
    /// Adds `bytes` read in `encoding` (nothing while paused).
    pub fn add(&self, encoding: &'static str, bytes: u64) {
        if bytes == 0 || self.paused.load(Ordering::Relaxed) {
            return;
        }
        let mut m = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(encoding).or_default() += bytes;
    }

    /// Runs `f` without counting: views taken to check shapes (an executor's plan being
    /// built) read no payload.
    pub fn paused<T>(&self, f: impl FnOnce() -> T) -> T {
        let was = self.paused.swap(true, Ordering::Relaxed);
        let out = f();
        self.paused.store(was, Ordering::Relaxed);
        out
    }

    /// The counts so far.
    pub fn snapshot(&self) -> BTreeMap<&'static str, u64> {
        self.bytes.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// What was read since `before` (a snapshot), per encoding.
    pub fn since(&self, before: &BTreeMap<&'static str, u64>) -> BTreeMap<&'static str, u64> {
        self.snapshot()
            .into_iter()
            .map(|(e, n)| (e, n - before.get(e).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

/// Whether an operand is read in parts — an expert bank one expert at a time, an
/// embedding table a row per token — so the operator records what it reads instead of the
/// view counting the whole tensor.
fn read_in_parts(role: Role) -> bool {
    matches!(
        role,
        Role::FfnGateExps
            | Role::FfnUpExps
            | Role::FfnDownExps
            | Role::TokenEmbedding
            | Role::PositionEmbedding
    )
}

/// A source that counts what is read from it into a [`ReadMeter`].
pub struct Metered {
    inner: Arc<dyn OperandSource>,
    meter: Arc<ReadMeter>,
}

impl Metered {
    pub fn new(inner: Arc<dyn OperandSource>, meter: Arc<ReadMeter>) -> Metered {
        Metered { inner, meter }
    }
}

impl OperandSource for Metered {
    fn surface(&self) -> &ExecutionSurface {
        self.inner.surface()
    }

    fn view(&self, key: OperandKey) -> Option<TensorView<'_>> {
        let v = self.inner.view(key)?;
        if !read_in_parts(key.role) {
            self.meter.add(v.dtype.name(), v.bytes.len() as u64);
        }
        Some(v)
    }

    fn ffn_overlay(&self, layer: usize) -> Option<&LayerOverlay> {
        self.inner.ffn_overlay(layer)
    }

    fn record_read(&self, dtype: crate::DType, bytes: u64) {
        self.meter.add(dtype.name(), bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::gguf::synth::TinyModel;
    use crate::model::Model;

    #[test]
    fn views_are_counted_per_encoding_and_banks_by_record() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tiny.gguf");
        TinyModel::llama().write(&p).unwrap();
        let model: Arc<dyn OperandSource> = Arc::new(Model::open(&p).unwrap());
        let meter = Arc::new(ReadMeter::default());
        let m = Metered::new(model.clone(), meter.clone());
        let key = OperandKey::layer(0, Role::AttnQ);
        let v = model.view(key).unwrap();
        let (enc, len) = (v.dtype.name(), v.bytes.len() as u64);
        let before = meter.snapshot();
        m.view(key).unwrap();
        m.view(key).unwrap();
        assert_eq!(meter.since(&before).get(enc), Some(&(2 * len)));
        m.record_read(v.dtype, 10);
        assert_eq!(meter.since(&before).get(enc), Some(&(2 * len + 10)));
        // Absent operands count nothing; nor does anything while paused.
        m.view(OperandKey::layer(999, Role::AttnQ));
        meter.paused(|| m.view(key));
        assert_eq!(meter.since(&before).values().sum::<u64>(), 2 * len + 10);
        // A table read per row is not counted whole by its view.
        m.view(OperandKey::global(Role::TokenEmbedding)).unwrap();
        assert_eq!(meter.since(&before).values().sum::<u64>(), 2 * len + 10);
    }
}
