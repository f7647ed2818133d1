//! A session's key/value cache on the device: per layer one key and one value buffer of
//! `capacity × kv_dim` floats, grown (doubling, bounded by the context length) by copying
//! on the device. The session's [`lql_exec::kv::KvCache`] counts the positions held.

use std::any::Any;
use std::sync::Arc;

use lql_exec::backend::device::DeviceKv;

use crate::context::Gpu;
use crate::record::Recorder;

/// Positions allocated at least.
const MIN_POSITIONS: usize = 64;

pub(crate) struct GpuKv {
    gpu: Arc<Gpu>,
    pub kv_dim: usize,
    pub capacity: usize,
    pub k: Vec<wgpu::Buffer>,
    pub v: Vec<wgpu::Buffer>,
}

impl std::fmt::Debug for GpuKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuKv")
            .field("adapter", &self.gpu.adapter())
            .field("layers", &self.k.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl GpuKv {
    pub fn new(gpu: Arc<Gpu>, layers: usize, kv_dim: usize) -> GpuKv {
        let mut kv = GpuKv {
            gpu,
            kv_dim,
            capacity: 0,
            k: Vec::new(),
            v: Vec::new(),
        };
        kv.k = (0..layers).map(|_| kv.alloc(0)).collect();
        kv.v = (0..layers).map(|_| kv.alloc(0)).collect();
        kv
    }

    fn alloc(&self, positions: usize) -> wgpu::Buffer {
        self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("lql kv"),
            size: ((positions * self.kv_dim).max(1) * 4) as u64,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    /// Make room for `needed` positions (at most `limit`), keeping the first `keep`.
    pub fn ensure(&mut self, rec: &mut Recorder<'_>, needed: usize, keep: usize, limit: usize) {
        if needed <= self.capacity {
            return;
        }
        let cap = needed
            .max(self.capacity * 2)
            .max(MIN_POSITIONS)
            .min(limit.max(needed));
        for i in 0..self.k.len() {
            let (nk, nv) = (self.alloc(cap), self.alloc(cap));
            rec.copy(&self.k[i], 0, &nk, 0, keep * self.kv_dim);
            rec.copy(&self.v[i], 0, &nv, 0, keep * self.kv_dim);
            self.k[i] = nk;
            self.v[i] = nv;
        }
        self.capacity = cap;
    }
}

impl DeviceKv for GpuKv {
    fn clone_box(&self) -> Box<dyn DeviceKv> {
        let mut copy = GpuKv {
            gpu: self.gpu.clone(),
            kv_dim: self.kv_dim,
            capacity: self.capacity,
            k: Vec::new(),
            v: Vec::new(),
        };
        let mut enc = self
            .gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        for (src_k, src_v) in self.k.iter().zip(&self.v) {
            let (nk, nv) = (copy.alloc(self.capacity), copy.alloc(self.capacity));
            enc.copy_buffer_to_buffer(src_k, 0, &nk, 0, src_k.size());
            enc.copy_buffer_to_buffer(src_v, 0, &nv, 0, src_v.size());
            copy.k.push(nk);
            copy.v.push(nv);
        }
        self.gpu.queue.submit([enc.finish()]);
        Box::new(copy)
    }

    fn allocated_bytes(&self) -> usize {
        self.k
            .iter()
            .chain(&self.v)
            .map(|b| b.size() as usize)
            .sum()
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
