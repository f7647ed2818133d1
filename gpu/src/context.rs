//! The device: adapter discovery (`SHOW BACKENDS`), one shared device and queue per
//! adapter for the process, and the mapping of wgpu's failures (no adapter, validation,
//! out of memory, device lost) into typed [`ExecError::Device`] errors that name the
//! adapter and the operation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use lql_exec::{DeviceFault, ExecError};

/// One adapter as `SHOW BACKENDS` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterSummary {
    /// The adapter's name (`llvmpipe (LLVM 15.0.6, 256 bits)`, `Apple M2`, …).
    pub name: String,
    /// The graphics API wgpu drives it through (`vulkan`, `metal`, `dx12`).
    pub api: String,
    /// `discrete`, `integrated`, `virtual`, `cpu` (software) or `other`.
    pub kind: String,
    /// The driver and its version, as reported.
    pub driver: String,
}

fn instance() -> &'static wgpu::Instance {
    static I: OnceLock<wgpu::Instance> = OnceLock::new();
    I.get_or_init(|| {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12;
        wgpu::Instance::new(desc)
    })
}

fn summary(info: &wgpu::AdapterInfo) -> AdapterSummary {
    let kind = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => "discrete",
        wgpu::DeviceType::IntegratedGpu => "integrated",
        wgpu::DeviceType::VirtualGpu => "virtual",
        wgpu::DeviceType::Cpu => "cpu",
        wgpu::DeviceType::Other => "other",
    };
    AdapterSummary {
        name: info.name.clone(),
        api: info.backend.to_str().to_string(),
        kind: kind.to_string(),
        driver: format!("{} {}", info.driver, info.driver_info)
            .trim()
            .to_string(),
    }
}

/// Every adapter wgpu finds (Vulkan, Metal, DX12), best first: discrete, integrated,
/// virtual, then software.
pub fn adapters() -> Vec<AdapterSummary> {
    let mut v: Vec<AdapterSummary> =
        pollster::block_on(instance().enumerate_adapters(
            wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12,
        ))
        .iter()
        .map(|a| summary(&a.get_info()))
        .collect();
    v.sort_by_key(|a| rank(&a.kind));
    v
}

fn rank(kind: &str) -> u8 {
    match kind {
        "discrete" => 0,
        "integrated" => 1,
        "virtual" => 2,
        "cpu" => 3,
        _ => 4,
    }
}

/// A device and its queue on one adapter, shared by every backend on that adapter.
pub struct Gpu {
    pub(crate) adapter: String,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) limits: wgpu::Limits,
    lost: Arc<AtomicBool>,
    lost_reason: Arc<Mutex<String>>,
    pub(crate) pipelines: crate::shaders::PipelineCache,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("adapter", &self.adapter)
            .finish_non_exhaustive()
    }
}

/// A typed device error.
pub(crate) fn device_error(
    kind: DeviceFault,
    adapter: &str,
    operation: &str,
    message: impl Into<String>,
) -> ExecError {
    ExecError::Device {
        kind,
        adapter: adapter.to_string(),
        operation: operation.to_string(),
        message: message.into(),
    }
}

impl Gpu {
    /// The shared device on the best adapter, or on the first whose name contains `want`
    /// (case-insensitive). Opened once per process and adapter.
    pub fn open(want: Option<&str>) -> Result<Arc<Gpu>, ExecError> {
        static OPEN: OnceLock<Mutex<HashMap<String, Arc<Gpu>>>> = OnceLock::new();
        let found = adapters();
        let pick = match want {
            None => found.first(),
            Some(w) => {
                let w = w.to_lowercase();
                found.iter().find(|a| a.name.to_lowercase().contains(&w))
            }
        };
        let Some(pick) = pick else {
            let listed = if found.is_empty() {
                "no Vulkan, Metal or DX12 adapter is present".to_string()
            } else {
                format!(
                    "adapters present: {}",
                    found
                        .iter()
                        .map(|a| a.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(device_error(
                DeviceFault::NoAdapter,
                want.unwrap_or("any adapter"),
                "opening the device",
                listed,
            ));
        };
        let mut open = OPEN
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(g) = open.get(&pick.name) {
            if !g.is_lost() {
                return Ok(g.clone());
            }
        }
        let gpu = Arc::new(Gpu::create(&pick.name)?);
        open.insert(pick.name.clone(), gpu.clone());
        Ok(gpu)
    }

    fn create(name: &str) -> Result<Gpu, ExecError> {
        let adapter = pollster::block_on(instance().enumerate_adapters(
            wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12,
        ))
        .into_iter()
        .find(|a| a.get_info().name == name)
        .ok_or_else(|| {
            device_error(
                DeviceFault::NoAdapter,
                name,
                "opening the device",
                "the adapter went away",
            )
        })?;
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("lql"),
            required_features: wgpu::Features::empty(),
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| {
            device_error(
                DeviceFault::Other,
                name,
                "opening the device",
                e.to_string(),
            )
        })?;
        let lost = Arc::new(AtomicBool::new(false));
        let lost_reason = Arc::new(Mutex::new(String::new()));
        {
            let (lost, reason) = (lost.clone(), lost_reason.clone());
            device.set_device_lost_callback(move |why, msg| {
                if let Ok(mut r) = reason.lock() {
                    *r = format!("{why:?}: {msg}");
                }
                lost.store(true, Ordering::SeqCst);
            });
        }
        Ok(Gpu {
            adapter: name.to_string(),
            device,
            queue,
            limits,
            lost,
            lost_reason,
            pipelines: Default::default(),
        })
    }

    /// The adapter's name.
    pub fn adapter(&self) -> &str {
        &self.adapter
    }

    /// Whether the device was lost.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// A device-lost error for `operation`, if the device was lost.
    pub(crate) fn check_lost(&self, operation: &str) -> Result<(), ExecError> {
        if self.is_lost() {
            let why = self
                .lost_reason
                .lock()
                .map(|r| r.clone())
                .unwrap_or_default();
            return Err(device_error(
                DeviceFault::DeviceLost,
                &self.adapter,
                operation,
                why,
            ));
        }
        Ok(())
    }

    /// Run `f` (which records and submits device work) inside error scopes, wait for the
    /// device, and turn what went wrong into a typed error naming `operation`.
    pub(crate) fn guarded<T>(
        &self,
        operation: &str,
        f: impl FnOnce() -> Result<T, ExecError>,
    ) -> Result<T, ExecError> {
        self.check_lost(operation)?;
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let out = f();
        let val_err = pollster::block_on(val.pop());
        let oom_err = pollster::block_on(oom.pop());
        self.check_lost(operation)?;
        if let Some(e) = oom_err {
            return Err(device_error(
                DeviceFault::OutOfMemory,
                &self.adapter,
                operation,
                e.to_string(),
            ));
        }
        if let Some(e) = val_err {
            return Err(device_error(
                DeviceFault::Other,
                &self.adapter,
                operation,
                e.to_string(),
            ));
        }
        out
    }

    /// Wait until the queue is idle.
    pub(crate) fn wait(&self, operation: &str) -> Result<(), ExecError> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| {
                let kind = if self.is_lost() {
                    DeviceFault::DeviceLost
                } else {
                    DeviceFault::Other
                };
                device_error(kind, &self.adapter, operation, e.to_string())
            })?;
        self.check_lost(operation)
    }

    /// Copy `bytes` bytes of `src` from `offset` back to the host (after the work already
    /// submitted), as f32 values.
    pub(crate) fn read_back(
        &self,
        src: &wgpu::Buffer,
        offset: u64,
        bytes: u64,
        operation: &str,
    ) -> Result<Vec<f32>, ExecError> {
        if bytes == 0 {
            return Ok(Vec::new());
        }
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("lql read-back"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        enc.copy_buffer_to_buffer(src, offset, &staging, 0, bytes);
        self.queue.submit([enc.finish()]);
        self.map_read(&staging, operation)
    }

    /// Map a `MAP_READ` buffer and copy it out as f32 values.
    pub(crate) fn map_read(
        &self,
        staging: &wgpu::Buffer,
        operation: &str,
    ) -> Result<Vec<f32>, ExecError> {
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.wait(operation)?;
        let mapped = rx.recv().map_err(|_| {
            device_error(
                DeviceFault::Other,
                &self.adapter,
                operation,
                "the read-back was dropped",
            )
        })?;
        mapped.map_err(|e| {
            device_error(DeviceFault::Other, &self.adapter, operation, e.to_string())
        })?;
        let out = {
            let view = staging.get_mapped_range(..).map_err(|e| {
                device_error(DeviceFault::Other, &self.adapter, operation, e.to_string())
            })?;
            view.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        staging.unmap();
        Ok(out)
    }
}
