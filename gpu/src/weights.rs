//! Operands resident on the device: every matrix uploaded once in its stored encoding (the
//! raw block bytes, padded to whole 32-bit words; a bank's experts sliced from its stacked
//! operands), the small decoded vectors (norm weights, biases) as f32, and the effective
//! state's overlay (feature scales, added features as small f32 matrices). A derived
//! executor (an edited state over the same file) shares the buffers of the operands whose
//! bytes it shares.

use std::collections::HashMap;
use std::sync::Arc;

use lql_exec::plan::{expert, FfnPlan};
use lql_exec::{DeviceFault, ExecError, Plan};
use lql_storage::model::{OperandKey, OperandSource, TensorView};
use lql_storage::overlay::LayerOverlay;
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

impl Matrix {
    /// Whether it is a stored operand (a view of the model's bytes), whose reads the read
    /// meter counts; a matrix made from values the plan decoded is not.
    pub(crate) fn is_operand(&self) -> bool {
        self.host.1 != 0
    }

    /// Upload `data` (`[rows × row_len]` f32, row-major) as an F32 matrix.
    pub(crate) fn from_f32(
        gpu: &Gpu,
        label: &str,
        data: &[f32],
        rows: usize,
        row_len: usize,
    ) -> Matrix {
        debug_assert_eq!(data.len(), rows * row_len);
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        Matrix {
            buf: upload_bytes(gpu, label, &bytes, 1),
            dtype: DType::F32,
            rows,
            row_len,
            row_bytes: row_len * 4,
            host: (0, 0),
        }
    }
}

/// The decoded vectors of one layer (`None` where the layer has no such vector).
pub(crate) struct LayerVectors {
    pub attn_norm: wgpu::Buffer,
    pub attn_norm_bias: Option<wgpu::Buffer>,
    pub ffn_norm: wgpu::Buffer,
    pub ffn_norm_bias: Option<wgpu::Buffer>,
    pub q_bias: Option<wgpu::Buffer>,
    pub k_bias: Option<wgpu::Buffer>,
    pub v_bias: Option<wgpu::Buffer>,
    pub q_norm: Option<wgpu::Buffer>,
    pub k_norm: Option<wgpu::Buffer>,
    pub o_bias: Option<wgpu::Buffer>,
    pub attn_post_norm: Option<wgpu::Buffer>,
    pub ffn_post_norm: Option<wgpu::Buffer>,
    /// The FFN's biases: a dense FFN's gate and up, an MLP's up and down.
    pub gate_bias: Option<wgpu::Buffer>,
    pub up_bias: Option<wgpu::Buffer>,
    pub down_bias: Option<wgpu::Buffer>,
    /// A shared expert's scalar gate, `[1 × hidden]`.
    pub shared_gate: Option<Matrix>,
    /// The effective state's overlay of this layer.
    pub overlay: Option<OverlayBuffers>,
}

/// A layer's overlay on the device (see `lql_exec::overlay` for the arithmetic).
pub(crate) struct OverlayBuffers {
    /// The base features' gate and activation scales (`[ffn]` each).
    pub gate_scale: Option<wgpu::Buffer>,
    pub down_scale: Option<wgpu::Buffer>,
    pub added: Option<AddedFeatures>,
}

/// An overlay's added features, padded with zero features to a whole number of 32-element
/// units (a zero feature's gate and up are 0, so it adds nothing).
pub(crate) struct AddedFeatures {
    /// Real added features.
    pub count: usize,
    /// Padded count (the rows of `gate`/`up`, the row length of `down`).
    pub width: usize,
    pub gate: Matrix,
    pub up: Matrix,
    /// `[hidden × width]`: column `i` is feature `i`'s down vector.
    pub down: Matrix,
    pub gate_bias: wgpu::Buffer,
    pub up_bias: wgpu::Buffer,
    pub gate_scale: Option<wgpu::Buffer>,
    pub down_scale: Option<wgpu::Buffer>,
}

/// One expert's three matrices, sliced from the stacked bank operands.
pub(crate) struct ExpertMatrices {
    pub gate: Arc<Matrix>,
    pub up: Arc<Matrix>,
    pub down: Arc<Matrix>,
}

/// Everything a plan reads, resident.
pub(crate) struct Resident {
    pub matrices: HashMap<OperandKey, Arc<Matrix>>,
    /// Per layer, a bank's experts (empty for a dense layer).
    pub experts: Vec<Vec<ExpertMatrices>>,
    pub layers: Vec<LayerVectors>,
    pub output_norm: Option<wgpu::Buffer>,
    pub output_norm_bias: Option<wgpu::Buffer>,
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

/// The keys of every matrix a plan multiplies by (and embeds from); a bank's stacked
/// expert operands are sliced per expert instead ([`make_resident`]).
fn matrix_keys(plan: &Plan) -> Vec<OperandKey> {
    let mut keys = Vec::new();
    if plan.stage.input {
        keys.push(plan.embedding);
        keys.extend(plan.positions);
    }
    for lp in &plan.layers {
        keys.extend([lp.q, lp.k, lp.v, lp.o]);
        match &lp.ffn {
            FfnPlan::Dense { gate, up, down, .. } => keys.extend([*gate, *up, *down]),
            FfnPlan::Mlp { up, down, .. } => keys.extend([*up, *down]),
            FfnPlan::Bank(b) => {
                keys.push(b.router);
                if let Some(sh) = &b.shared {
                    keys.extend([sh.gate, sh.up, sh.down]);
                }
            }
        }
    }
    if plan.stage.output {
        keys.push(plan.head);
    }
    keys.sort();
    keys.dedup();
    keys
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

/// Uploads encoded host matrices once each: a matrix whose host bytes an earlier model
/// (or an earlier key) already uploaded shares that buffer.
struct Uploader<'g> {
    gpu: &'g Gpu,
    shared: HashMap<(usize, usize, DType), Arc<Matrix>>,
    bytes: u64,
}

impl Uploader<'_> {
    fn matrix(&mut self, v: &TensorView<'_>, name: &str) -> Result<Arc<Matrix>, ExecError> {
        let gpu = self.gpu;
        if shaders::matmul_kernel(v.dtype).is_none() {
            return Err(ExecError::Unsupported(format!(
                "encoding {} ({name}) on the gpu backend; use BACKEND cpu",
                v.dtype
            )));
        }
        if !v.row_len().is_multiple_of(4) {
            return Err(ExecError::Unsupported(format!(
                "rows of {} elements ({name}) on the gpu backend: the kernels read whole groups of 4",
                v.row_len()
            )));
        }
        let len = v.bytes.len() as u64;
        let max_binding = gpu.limits.max_storage_buffer_binding_size;
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
        if let Some(m) = self.shared.get(&(host.0, host.1, v.dtype)) {
            return Ok(m.clone());
        }
        let buf = gpu.guarded(&format!("uploading {name}"), || {
            Ok(upload_bytes(gpu, name, v.bytes, 1))
        })?;
        self.bytes += len;
        let m = Arc::new(Matrix {
            buf,
            dtype: v.dtype,
            rows: v.rows(),
            row_len: v.row_len(),
            row_bytes: v.row_bytes(),
            host,
        });
        self.shared.insert((host.0, host.1, v.dtype), m.clone());
        Ok(m)
    }
}

fn operand_name(key: OperandKey) -> String {
    match key.layer {
        Some(l) => format!("{} of layer {l}", key.role.name()),
        None => key.role.name().to_string(),
    }
}

/// Make `plan`'s operands resident on `gpu`, with `source`'s overlay (the effective state's
/// edits), sharing `previous`'s buffers for operands with the same host bytes.
pub(crate) fn make_resident(
    gpu: &Gpu,
    source: &dyn OperandSource,
    plan: &Plan,
    previous: Option<&Resident>,
) -> Result<Resident, ExecError> {
    let mut up = Uploader {
        gpu,
        shared: HashMap::new(),
        bytes: 0,
    };
    if let Some(p) = previous {
        let all = p.matrices.values().chain(
            p.experts
                .iter()
                .flatten()
                .flat_map(|e| [&e.gate, &e.up, &e.down]),
        );
        for m in all {
            up.shared.insert((m.host.0, m.host.1, m.dtype), m.clone());
        }
    }
    let mut matrices = HashMap::new();
    for key in matrix_keys(plan) {
        let v = source.view(key).ok_or(ExecError::MissingOperand {
            operand: key.role.name(),
            layer: key.layer,
        })?;
        matrices.insert(key, up.matrix(&v, &operand_name(key))?);
    }
    let d = plan.surface.hidden;
    let mut experts = Vec::with_capacity(plan.layers.len());
    for lp in &plan.layers {
        let mut list = Vec::new();
        if let FfnPlan::Bank(b) = &lp.ffn {
            let view = |key: OperandKey| {
                source.view(key).ok_or(ExecError::MissingOperand {
                    operand: key.role.name(),
                    layer: key.layer,
                })
            };
            let (wg, wu, wd) = (view(b.gate)?, view(b.up)?, view(b.down)?);
            let (gu_shape, d_shape) = ([d, b.expert_ffn], [b.expert_ffn, d]);
            for e in 0..b.n_experts {
                let name = |key| format!("expert {e} of {}", operand_name(key));
                list.push(ExpertMatrices {
                    gate: up.matrix(&expert(&wg, &gu_shape, e)?, &name(b.gate))?,
                    up: up.matrix(&expert(&wu, &gu_shape, e)?, &name(b.up))?,
                    down: up.matrix(&expert(&wd, &d_shape, e)?, &name(b.down))?,
                });
            }
        }
        experts.push(list);
    }
    let vec = |label: &str, data: &[f32]| upload_f32(gpu, label, data);
    let opt = |label: &str, data: &Option<Vec<f32>>| data.as_ref().map(|d| vec(label, d));
    let layers = gpu.guarded("uploading norm weights, biases and edits", || {
        let mut layers = Vec::with_capacity(plan.layers.len());
        for lp in &plan.layers {
            let e = &lp.extra;
            let (gate_bias, up_bias, down_bias, shared_gate) = match &lp.ffn {
                FfnPlan::Dense {
                    gate_bias, up_bias, ..
                } => (
                    opt("gate_bias", gate_bias),
                    opt("up_bias", up_bias),
                    None,
                    None,
                ),
                FfnPlan::Mlp {
                    up_bias, down_bias, ..
                } => (
                    None,
                    opt("up_bias", up_bias),
                    opt("down_bias", down_bias),
                    None,
                ),
                FfnPlan::Bank(b) => {
                    let g = b.shared.as_ref().and_then(|s| s.gate_inp.as_ref());
                    let m = g.map(|g| Matrix::from_f32(gpu, "shared expert gate", g, 1, g.len()));
                    (None, None, None, m)
                }
            };
            layers.push(LayerVectors {
                attn_norm: vec("attn_norm", &lp.attn_norm),
                attn_norm_bias: opt("attn_norm_bias", &e.attn_norm_bias),
                ffn_norm: vec("ffn_norm", &lp.ffn_norm),
                ffn_norm_bias: opt("ffn_norm_bias", &e.ffn_norm_bias),
                q_bias: opt("q_bias", &lp.q_bias),
                k_bias: opt("k_bias", &lp.k_bias),
                v_bias: opt("v_bias", &lp.v_bias),
                q_norm: opt("q_norm", &e.q_norm),
                k_norm: opt("k_norm", &e.k_norm),
                o_bias: opt("o_bias", &e.o_bias),
                attn_post_norm: opt("attn_post_norm", &e.attn_post_norm),
                ffn_post_norm: opt("ffn_post_norm", &e.ffn_post_norm),
                gate_bias,
                up_bias,
                down_bias,
                shared_gate,
                overlay: source
                    .ffn_overlay(lp.index)
                    .map(|o| overlay_buffers(gpu, o)),
            });
        }
        Ok(layers)
    })?;
    let output_norm = plan
        .stage
        .output
        .then(|| vec("output_norm", &plan.output_norm));
    let output_norm_bias = plan
        .stage
        .output
        .then(|| opt("output_norm_bias", &plan.output_norm_bias))
        .flatten();
    Ok(Resident {
        matrices,
        experts,
        layers,
        output_norm,
        output_norm_bias,
        bytes: up.bytes,
    })
}

/// A layer's overlay on the device: the base features' scales, and the added features
/// padded to a whole number of 32-element units.
fn overlay_buffers(gpu: &Gpu, o: &LayerOverlay) -> OverlayBuffers {
    let (d, ff, k) = (o.hidden, o.ffn, o.added());
    let head = |s: &Option<Vec<f32>>| {
        s.as_ref()
            .map(|s| upload_f32(gpu, "overlay scale", &s[..ff.min(s.len())]))
    };
    let added = (k > 0).then(|| {
        let width = k.div_ceil(32) * 32;
        let padded = |v: &[f32], fill: f32| {
            let mut p = v.to_vec();
            p.resize(width, fill);
            p
        };
        let rows = |m: &[f32]| {
            let mut p = m.to_vec();
            p.resize(width * d, 0.0);
            p
        };
        let mut down_t = vec![0.0f32; d * width];
        for i in 0..k {
            for (j, &v) in o.down[i * d..(i + 1) * d].iter().enumerate() {
                down_t[j * width + i] = v;
            }
        }
        let tail = |s: &Option<Vec<f32>>| {
            s.as_ref()
                .map(|s| upload_f32(gpu, "added scale", &padded(s.get(ff..).unwrap_or(&[]), 1.0)))
        };
        AddedFeatures {
            count: k,
            width,
            gate: Matrix::from_f32(gpu, "added gate", &rows(&o.gate), width, d),
            up: Matrix::from_f32(gpu, "added up", &rows(&o.up), width, d),
            down: Matrix::from_f32(gpu, "added down", &down_t, d, width),
            gate_bias: upload_f32(gpu, "added gate bias", &padded(&o.gate_bias, 0.0)),
            up_bias: upload_f32(gpu, "added up bias", &padded(&o.up_bias, 0.0)),
            gate_scale: tail(&o.gate_scale),
            down_scale: tail(&o.down_scale),
        }
    });
    OverlayBuffers {
        gate_scale: head(&o.gate_scale),
        down_scale: head(&o.down_scale),
        added,
    }
}
