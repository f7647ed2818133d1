//! Continuation state: the key/value cache, per layer `[positions × kv_heads × head_dim]`.
//!
//! Grown on demand (never the whole context up front) and bounded by the model's context
//! length. On a device backend the rows live on the device (`device`), and this struct
//! keeps only the count and the limit. A pipeline stage's cache holds only the stage's layers: slot `i` is the stage's
//! `i`-th layer (the forward pass subtracts the stage's first layer).

use crate::backend::device::DeviceKv;
use crate::error::{ExecError, Result};

/// Positions allocated at least, once anything is cached.
const MIN_POSITIONS: usize = 64;

/// Key/value rows of every layer for the positions seen so far.
#[derive(Debug, Clone)]
pub struct KvCache {
    kv_dim: usize,
    limit: usize,
    len: usize,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    /// The rows on a device, for a device backend's passes (made by its first pass).
    device: Option<Box<dyn DeviceKv>>,
}

impl KvCache {
    /// An empty cache for `n_layers` layers of `kv_dim` floats per position, holding at
    /// most `limit` positions.
    pub fn new(n_layers: usize, kv_dim: usize, limit: usize) -> KvCache {
        KvCache {
            kv_dim,
            limit,
            len: 0,
            k: vec![Vec::new(); n_layers],
            v: vec![Vec::new(); n_layers],
            device: None,
        }
    }

    /// Committed positions.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most positions this cache may hold (the model's context length).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes currently allocated.
    pub fn allocated_bytes(&self) -> usize {
        let host: usize = self.k.iter().chain(&self.v).map(|b| b.capacity() * 4).sum();
        host + self.device.as_ref().map_or(0, |d| d.allocated_bytes())
    }

    /// The device rows (a device backend's pass makes them, and grows them itself).
    pub fn device_mut(&mut self) -> &mut Option<Box<dyn DeviceKv>> {
        &mut self.device
    }

    /// Make room for `add` more positions, or refuse past the context limit.
    pub fn reserve(&mut self, add: usize) -> Result<()> {
        let needed = self.len.saturating_add(add);
        if needed > self.limit {
            return Err(ExecError::ContextOverflow {
                needed,
                limit: self.limit,
            });
        }
        let have = self
            .k
            .first()
            .map_or(0, |b| b.capacity() / self.kv_dim.max(1));
        if needed <= have || self.device.is_some() {
            return Ok(());
        }
        let target = needed.max(have * 2).max(MIN_POSITIONS).min(self.limit);
        for b in self.k.iter_mut().chain(self.v.iter_mut()) {
            b.reserve_exact(target * self.kv_dim - b.len());
        }
        Ok(())
    }

    /// Append the key and value rows of new positions to `layer` (not yet committed).
    pub fn append(&mut self, layer: usize, k: &[f32], v: &[f32]) {
        self.k[layer].extend_from_slice(k);
        self.v[layer].extend_from_slice(v);
    }

    /// Keys and values of `layer`, including appended, uncommitted positions.
    pub fn layer(&self, layer: usize) -> (&[f32], &[f32]) {
        (&self.k[layer], &self.v[layer])
    }

    /// Count `n` appended positions as committed (after every layer appended them).
    pub fn commit(&mut self, n: usize) {
        self.len += n;
    }

    /// Forget everything after `len` committed positions (and any uncommitted rows).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
        let keep = self.len * self.kv_dim;
        for b in self.k.iter_mut().chain(self.v.iter_mut()) {
            b.truncate(keep);
        }
    }

    /// Forget everything.
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// A copy of the first `len` committed positions, allocated for exactly those; `None`
    /// when the rows live on a device (they cannot be copied from here).
    pub fn prefix(&self, len: usize) -> Option<KvCache> {
        if self.device.is_some() {
            return None;
        }
        let len = len.min(self.len);
        let keep = len * self.kv_dim;
        let copy = |bufs: &[Vec<f32>]| bufs.iter().map(|b| b[..keep].to_vec()).collect();
        Some(KvCache {
            kv_dim: self.kv_dim,
            limit: self.limit,
            len,
            k: copy(&self.k),
            v: copy(&self.v),
            device: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_lazily_and_enforces_the_limit() {
        let mut kv = KvCache::new(2, 4, 100);
        assert_eq!(kv.allocated_bytes(), 0);
        kv.reserve(3).unwrap();
        assert!(kv.allocated_bytes() <= 2 * 2 * 64 * 4 * 4);
        for l in 0..2 {
            kv.append(l, &[1.0; 12], &[2.0; 12]);
        }
        kv.commit(3);
        assert_eq!(kv.len(), 3);
        assert!(matches!(
            kv.reserve(98),
            Err(ExecError::ContextOverflow {
                needed: 101,
                limit: 100
            })
        ));
        kv.reserve(97).unwrap();
        kv.truncate(1);
        assert_eq!(kv.layer(1).0.len(), 4);
    }
}
