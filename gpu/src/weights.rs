//! Operands resident on the device: every matrix uploaded once in its stored encoding (the
//! raw block bytes, padded to whole 32-bit words), and the small decoded vectors (norm
//! weights, biases) as f32. A derived executor (an edited state over the same file) shares
//! the buffers of the operands whose bytes it shares.

use std::collections::HashMap;
use std::sync::Arc;

use lql_exec::plan::FfnPlan;
use lql_exec::{DeviceFault, ExecError, Plan};
use lql_storage::model::{OperandKey, OperandSource};
use lql_storage::DType;

use crate::context::{device_error, Gpu};
use crate::shaders;

/// One encoded matrix on the device.
pub(crate) struct Matrix {
    pub buf: wgpu::Buffer,
    pub dtype: DType,
    pub rows: usize,
    pub row_len: usize,
    pub row_bytes: usize,
    /// Where its bytes live on the host (mapped file) and how many: with the encoding,
    /// the identity a derived executor matches to share the buffer.
    host: (usize, usize),
}

impl Matrix {
    /// Upload one encoded tensor (for a single call; models go through [`make_resident`]).
    pub(crate) fn upload(
        gpu: &Gpu,
        label: &str,
        v: &lql_storage::model::TensorView<'_>,
    ) -> Result<Matrix, ExecError> {
        let buf = gpu.guarded(&format!("uploading {label}"), || {
            Ok(upload_bytes(gpu, label, v.bytes, 1))
        })?;
        Ok(Matrix {
            buf,
            dtype: v.dtype,
            rows: v.rows(),
            row_len: v.row_len(),
            row_bytes: v.row_bytes(),
            host: (v.bytes.as_ptr() as usize, v.bytes.len()),
        })
    }
}

/// The decoded vectors of one layer.
pub(crate) struct LayerVectors {
    pub attn_norm: wgpu::Buffer,
    pub ffn_norm: wgpu::Buffer,
    pub q_bias: Option<wgpu::Buffer>,
    pub k_bias: Option<wgpu::Buffer>,
    pub v_bias: Option<wgpu::Buffer>,
}

/// Everything a plan reads, resident.
pub(crate) struct Resident {
    pub matrices: HashMap<OperandKey, Arc<Matrix>>,
    pub layers: Vec<LayerVectors>,
    pub output_norm: Option<wgpu::Buffer>,
    /// Device bytes uploaded for this model (shared buffers counted once per model).
    pub bytes: u64,
}

impl Resident {
    pub fn matrix(&self, key: OperandKey) -> Result<&Matrix, ExecError> {
        self.matrices
            .get(&key)
            .map(|m| m.as_ref())
            .ok_or(ExecError::MissingOperand {
                operand: key.role.name(),
                layer: key.layer,
            })
    }
}

/// The keys of every matrix a plan multiplies by (and embeds from).
fn matrix_keys(plan: &Plan) -> Result<Vec<OperandKey>, ExecError> {
    let block = &plan.surface.block;
    if !block.is_plain() {
        return Err(ExecError::Unsupported(format!(
            "not supported yet: the {} block's {} on the gpu backend; use BACKEND cpu",
            plan.surface.source_architecture,
            block.features().join(", ")
        )));
    }
    let mut keys = Vec::new();
    if plan.stage.input {
        keys.push(plan.embedding);
    }
    for lp in &plan.layers {
        keys.extend([lp.q, lp.k, lp.v, lp.o]);
        match &lp.ffn {
            FfnPlan::Dense { gate, up, down, .. } => keys.extend([*gate, *up, *down]),
            FfnPlan::Mlp { .. } | FfnPlan::Bank(_) => {
                return Err(ExecError::Unsupported(format!(
                "expert banks (mixture of experts, layer {}) on the gpu backend; use BACKEND cpu",
                lp.index
            )))
            }
        }
    }
    if plan.stage.output {
        keys.push(plan.head);
    }
    keys.sort();
    keys.dedup();
    Ok(keys)
}

pub(crate) fn upload_f32(gpu: &Gpu, label: &str, data: &[f32]) -> wgpu::Buffer {
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    upload_bytes(gpu, label, &bytes, 0)
}

/// A storage buffer holding `bytes`, padded with zeros to whole words plus `pad_words`.
pub(crate) fn upload_bytes(gpu: &Gpu, label: &str, bytes: &[u8], pad_words: u64) -> wgpu::Buffer {
    let size = (bytes.len() as u64).div_ceil(4) * 4 + pad_words * 4;
    let buf = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size: size.max(4),
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let whole = bytes.len() / 4 * 4;
    if whole > 0 {
        gpu.queue.write_buffer(&buf, 0, &bytes[..whole]);
    }
    if whole < bytes.len() {
        let mut tail = [0u8; 4];
        tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
        gpu.queue.write_buffer(&buf, whole as u64, &tail);
    }
    buf
}

/// Make `plan`'s operands resident on `gpu`, sharing `previous`'s buffers for operands
/// with the same host bytes.
pub(crate) fn make_resident(
    gpu: &Gpu,
    source: &dyn OperandSource,
    plan: &Plan,
    previous: Option<&Resident>,
) -> Result<Resident, ExecError> {
    for lp in &plan.layers {
        if source.ffn_overlay(lp.index).is_some() {
            return Err(ExecError::Unsupported(format!(
                "an edited FFN (patch overlay on layer {}) on the gpu backend; use BACKEND cpu",
                lp.index
            )));
        }
    }
    let max_binding = gpu.limits.max_storage_buffer_binding_size;
    let mut shared: HashMap<(usize, usize, DType), Arc<Matrix>> = HashMap::new();
    if let Some(p) = previous {
        for m in p.matrices.values() {
            shared.insert((m.host.0, m.host.1, m.dtype), m.clone());
        }
    }
    let mut matrices = HashMap::new();
    let mut bytes = 0u64;
    for key in matrix_keys(plan)? {
        let v = source.view(key).ok_or(ExecError::MissingOperand {
            operand: key.role.name(),
            layer: key.layer,
        })?;
        let name = match key.layer {
            Some(l) => format!("{} of layer {l}", key.role.name()),
            None => key.role.name().to_string(),
        };
        if shaders::matmul_kernel(v.dtype).is_none() {
            return Err(ExecError::Unsupported(format!(
                "encoding {} ({name}) on the gpu backend; use BACKEND cpu",
                v.dtype
            )));
        }
        if !v.row_len().is_multiple_of(32) {
            return Err(ExecError::Unsupported(format!(
                "rows of {} elements ({name}) on the gpu backend: the kernels read whole units of 32",
                v.row_len()
            )));
        }
        let len = v.bytes.len() as u64;
        if len + 8 > max_binding || len + 8 > u32::MAX as u64 {
            return Err(device_error(
                DeviceFault::OutOfMemory,
                &gpu.adapter,
                &format!("uploading {name}"),
                format!(
                    "{len} bytes exceed the adapter's largest storage binding of {max_binding} bytes"
                ),
            ));
        }
        let host = (v.bytes.as_ptr() as usize, v.bytes.len());
        if let Some(m) = shared.get(&(host.0, host.1, v.dtype)) {
            matrices.insert(key, m.clone());
            continue;
        }
        let buf = gpu.guarded(&format!("uploading {name}"), || {
            Ok(upload_bytes(gpu, &name, v.bytes, 1))
        })?;
        bytes += len;
        let m = Arc::new(Matrix {
            buf,
            dtype: v.dtype,
            rows: v.rows(),
            row_len: v.row_len(),
            row_bytes: v.row_bytes(),
            host,
        });
        shared.insert((host.0, host.1, v.dtype), m.clone());
        matrices.insert(key, m);
    }
    let vec = |label: &str, data: &[f32]| upload_f32(gpu, label, data);
    let opt = |label: &str, data: &Option<Vec<f32>>| data.as_ref().map(|d| vec(label, d));
    let layers = gpu.guarded("uploading norm weights and biases", || {
        Ok(plan
            .layers
            .iter()
            .map(|lp| LayerVectors {
                attn_norm: vec("attn_norm", &lp.attn_norm),
                ffn_norm: vec("ffn_norm", &lp.ffn_norm),
                q_bias: opt("q_bias", &lp.q_bias),
                k_bias: opt("k_bias", &lp.k_bias),
                v_bias: opt("v_bias", &lp.v_bias),
            })
            .collect())
    })?;
    let output_norm = plan
        .stage
        .output
        .then(|| vec("output_norm", &plan.output_norm));
    Ok(Resident {
        matrices,
        layers,
        output_norm,
        bytes,
    })
}
