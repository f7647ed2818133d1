//! The WGSL kernels: their sources (one ops module, one matmul/embedding module per
//! encoding, assembled from `wgsl/`), their validation by naga (a kernel that does not
//! validate is a typed "kernel compile failure"), and the compiled pipelines, made once per
//! device and kernel.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lql_exec::{DeviceFault, ExecError};
use lql_storage::DType;

use crate::context::{device_error, Gpu};

const BYTES: &str = include_str!("wgsl/bytes.wgsl");
const MATMUL: &str = include_str!("wgsl/matmul.wgsl");
const OPS: &str = include_str!("wgsl/ops.wgsl");

/// The encodings the device kernels decode: those whose registry entry has a WGSL decoder
/// (`lql_codec::formats`).
pub fn encodings() -> impl Iterator<Item = DType> {
    DType::ALL
        .into_iter()
        .filter(|d| d.codec().wgsl_decoder.is_some())
}

/// One kernel module: a name and its WGSL source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    pub name: String,
    pub source: String,
    /// The compute entry points the module has.
    pub entry_points: &'static [&'static str],
}

/// The entry points of the ops module.
pub const OP_ENTRIES: &[&str] = &[
    "rmsnorm",
    "layernorm",
    "add",
    "mul",
    "axpy_rows",
    "rope",
    "glu",
    "act",
    "attention",
    "argmax",
];
/// The entry points of a matmul module.
pub const MATMUL_ENTRIES: &[&str] = &["matmul", "embed"];

fn decoder(dtype: DType) -> Option<&'static str> {
    dtype.codec().wgsl_decoder
}

/// The matmul/embedding module for rows of `dtype`, or `None` for an encoding the device
/// kernels do not decode yet.
pub fn matmul_kernel(dtype: DType) -> Option<Kernel> {
    let dec = decoder(dtype)?;
    Some(Kernel {
        name: format!("matmul_{dtype}").to_lowercase(),
        source: format!("{BYTES}\n{dec}\n{MATMUL}"),
        entry_points: MATMUL_ENTRIES,
    })
}

/// The ops module.
pub fn ops_kernel() -> Kernel {
    Kernel {
        name: "ops".into(),
        source: OPS.to_string(),
        entry_points: OP_ENTRIES,
    }
}

/// Every kernel module (for validation and translation tests).
pub fn all_kernels() -> Vec<Kernel> {
    let mut v = vec![ops_kernel()];
    v.extend(encodings().filter_map(matmul_kernel));
    v
}

/// Parse and validate a kernel with naga: its IR and validation info, or the message.
pub fn validate(k: &Kernel) -> Result<(naga::Module, naga::valid::ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(&k.source)
        .map_err(|e| e.emit_to_string_with_path(&k.source, &format!("{}.wgsl", k.name)))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::default(),
    )
    .validate(&module)
    .map_err(|e| e.emit_to_string_with_path(&k.source, &format!("{}.wgsl", k.name)))?;
    Ok((module, info))
}

/// The compiled pipelines of one module, by entry point.
pub(crate) type Pipelines = Arc<HashMap<&'static str, wgpu::ComputePipeline>>;

/// Compiled modules by kernel name, per device.
#[derive(Default)]
pub(crate) struct PipelineCache {
    modules: Mutex<HashMap<String, Pipelines>>,
}

impl Gpu {
    /// The pipelines of `k`, compiled on first use: validated by naga first (a failure is
    /// a kernel compile error naming the kernel), then built under an error scope.
    pub(crate) fn pipelines(&self, k: &Kernel) -> Result<Pipelines, ExecError> {
        let mut cache = self
            .pipelines
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(p) = cache.get(&k.name) {
            return Ok(p.clone());
        }
        let op = format!("compiling kernel {}", k.name);
        validate(k).map_err(|m| device_error(DeviceFault::KernelCompile, &self.adapter, &op, m))?;
        let built = self
            .guarded(&op, || {
                let module = self
                    .device
                    .create_shader_module(wgpu::ShaderModuleDescriptor {
                        label: Some(&k.name),
                        source: wgpu::ShaderSource::Wgsl(k.source.as_str().into()),
                    });
                let mut map = HashMap::new();
                for &e in k.entry_points {
                    let p = self
                        .device
                        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                            label: Some(e),
                            layout: None,
                            module: &module,
                            entry_point: Some(e),
                            compilation_options: Default::default(),
                            cache: None,
                        });
                    map.insert(e, p);
                }
                Ok(map)
            })
            .map_err(|e| match e {
                ExecError::Device {
                    kind: DeviceFault::Other,
                    adapter,
                    operation,
                    message,
                } => ExecError::Device {
                    kind: DeviceFault::KernelCompile,
                    adapter,
                    operation,
                    message,
                },
                other => other,
            })?;
        let p: Pipelines = Arc::new(built);
        cache.insert(k.name.clone(), p.clone());
        Ok(p)
    }
}
