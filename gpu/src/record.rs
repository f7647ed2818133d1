//! Recording device work: one command encoder, the kernel parameters of its dispatches
//! packed into one uniform buffer (written before submission), and one typed method per
//! kernel (matmul, embedding, RMSNorm, LayerNorm, add, scales, RoPE, activations,
//! attention, arg-max) that binds its buffers and sizes its grid.

use std::collections::HashMap;

use lql_exec::backend::AttnRule;
use lql_exec::{DeviceFault, ExecError};
use lql_storage::model::OperandSource;
use lql_storage::DType;

use crate::context::{device_error, Gpu};
use crate::shaders::{self, Pipelines};
use crate::weights::Matrix;

/// Workgroups per grid dimension (WebGPU's guaranteed minimum of the limit).
const MAX_GRID: u32 = 65535;
/// Bytes of one parameter block (the uniform structs are 32 and 48 bytes).
const PARAM_BYTES: u64 = 48;

/// Geometry of an attention dispatch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttnDims {
    pub n: u32,
    pub p0: u32,
    pub n_heads: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
}

struct Dispatch {
    pipeline: wgpu::ComputePipeline,
    /// (binding, buffer) pairs besides the parameters (binding `param_binding`).
    bindings: Vec<(u32, wgpu::Buffer)>,
    param_binding: u32,
    param_offset: u64,
    grid: (u32, u32, u32),
}

/// Device work being recorded.
pub(crate) struct Recorder<'g> {
    gpu: &'g Gpu,
    ops: Pipelines,
    mats: HashMap<DType, Pipelines>,
    params: Vec<u8>,
    stride: u64,
    dispatches: Vec<Dispatch>,
    /// Copies to run after the dispatches recorded before them (in order).
    steps: Vec<Step>,
    /// Where the stored-operand bytes the recorded kernels read are reported (a model's
    /// source, metered by the engine); None: not reported.
    reads_to: Option<&'g dyn OperandSource>,
}

enum Step {
    Dispatch(usize),
    Copy {
        src: wgpu::Buffer,
        src_off: u64,
        dst: wgpu::Buffer,
        dst_off: u64,
        bytes: u64,
    },
}

/// A grid of `wgs` workgroups folded into x and y.
fn fold(wgs: u32) -> (u32, u32) {
    let x = wgs.clamp(1, MAX_GRID);
    (x, wgs.div_ceil(x).max(1))
}

fn words(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

impl<'g> Recorder<'g> {
    pub fn new(gpu: &'g Gpu, ops: Pipelines, mats: HashMap<DType, Pipelines>) -> Self {
        let align = gpu.limits.min_uniform_buffer_offset_alignment.max(1) as u64;
        Recorder {
            gpu,
            ops,
            mats,
            params: Vec::new(),
            stride: PARAM_BYTES.div_ceil(align) * align,
            dispatches: Vec::new(),
            steps: Vec::new(),
            reads_to: None,
        }
    }

    /// Reports the stored-operand bytes its kernels read to `source`
    /// ([`OperandSource::record_read`]): each matrix a matmul reads, each row a gather reads.
    pub fn reporting_reads_to(mut self, source: &'g dyn OperandSource) -> Self {
        self.reads_to = Some(source);
        self
    }

    fn count_read(&self, w: &Matrix, rows: usize) {
        if let (Some(source), true) = (self.reads_to, w.is_operand()) {
            source.record_read(w.dtype, (rows * w.row_bytes) as u64);
        }
    }

    /// A scratch storage buffer of `floats` f32 values.
    pub fn buffer(&self, label: &str, floats: usize) -> wgpu::Buffer {
        self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: (floats.max(1) * 4) as u64,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    fn push_params(&mut self, p: &[u32]) -> u64 {
        let off = self.params.len() as u64;
        let mut bytes = words(p);
        bytes.resize(self.stride as usize, 0);
        self.params.extend_from_slice(&bytes);
        off
    }

    fn op(&self, entry: &str) -> Result<wgpu::ComputePipeline, ExecError> {
        self.ops.get(entry).cloned().ok_or_else(|| {
            ExecError::Internal(format!("the ops kernel has no entry point {entry}"))
        })
    }

    fn mat(&self, dtype: DType, entry: &str) -> Result<wgpu::ComputePipeline, ExecError> {
        self.mats
            .get(&dtype)
            .and_then(|p| p.get(entry))
            .cloned()
            .ok_or_else(|| ExecError::Internal(format!("no {entry} kernel for {dtype}")))
    }

    fn dispatch(
        &mut self,
        pipeline: wgpu::ComputePipeline,
        bindings: Vec<(u32, &wgpu::Buffer)>,
        param_binding: u32,
        params: &[u32],
        grid: (u32, u32, u32),
    ) {
        let param_offset = self.push_params(params);
        let i = self.dispatches.len();
        self.dispatches.push(Dispatch {
            pipeline,
            bindings: bindings.into_iter().map(|(b, x)| (b, x.clone())).collect(),
            param_binding,
            param_offset,
            grid,
        });
        self.steps.push(Step::Dispatch(i));
    }

    /// Copy `floats` values from `src` at float offset `src_off` to `dst` at `dst_off`.
    pub fn copy(
        &mut self,
        src: &wgpu::Buffer,
        src_off: usize,
        dst: &wgpu::Buffer,
        dst_off: usize,
        floats: usize,
    ) {
        if floats > 0 {
            self.steps.push(Step::Copy {
                src: src.clone(),
                src_off: src_off as u64 * 4,
                dst: dst.clone(),
                dst_off: dst_off as u64 * 4,
                bytes: floats as u64 * 4,
            });
        }
    }

    /// `y[t, r] = W.row(r) · x[t]` for `n` rows of `x`.
    pub fn matmul(
        &mut self,
        w: &Matrix,
        x: &wgpu::Buffer,
        n: usize,
        y: &wgpu::Buffer,
    ) -> Result<(), ExecError> {
        let rows = w.rows as u32;
        let (gx, gy) = fold(rows.div_ceil(64));
        let gz = n as u32;
        if gz > MAX_GRID {
            return Err(ExecError::Unsupported(format!(
                "{n} positions in one device pass"
            )));
        }
        let pipeline = self.mat(w.dtype, "matmul")?;
        self.count_read(w, w.rows);
        self.dispatch(
            pipeline,
            vec![(0, &w.buf), (1, x), (2, y)],
            3,
            &[
                rows,
                w.row_len as u32,
                w.row_bytes as u32,
                n as u32,
                gx,
                1.0f32.to_bits(),
                0,
                0,
            ],
            (gx, gy, gz),
        );
        Ok(())
    }

    /// `y[t, :] = W.row(ids[t]) · scale` for the `n` token ids in `ids`.
    pub fn embed(
        &mut self,
        w: &Matrix,
        ids: &wgpu::Buffer,
        n: usize,
        scale: f32,
        y: &wgpu::Buffer,
    ) -> Result<(), ExecError> {
        let pipeline = self.mat(w.dtype, "embed")?;
        self.count_read(w, n);
        self.dispatch(
            pipeline,
            vec![(0, &w.buf), (2, y), (4, ids)],
            3,
            &[
                w.rows as u32,
                w.row_len as u32,
                w.row_bytes as u32,
                n as u32,
                0,
                scale.to_bits(),
                0,
                0,
            ],
            (n as u32, 1, 1),
        );
        Ok(())
    }

    /// The 12 words of an ops parameter block.
    #[allow(clippy::too_many_arguments)]
    fn op_params(
        n: u32,
        len: u32,
        grid_x: u32,
        mode: u32,
        dims: Option<AttnDims>,
        eps: f32,
        scale: f32,
    ) -> [u32; 12] {
        let d = dims.unwrap_or(AttnDims {
            n: 0,
            p0: 0,
            n_heads: 0,
            n_kv_heads: 0,
            head_dim: 0,
        });
        [
            n,
            len,
            grid_x,
            mode,
            d.n_heads,
            d.n_kv_heads,
            d.head_dim,
            d.p0,
            eps.to_bits(),
            scale.to_bits(),
            0,
            0,
        ]
    }

    /// `out[row] = x[row] / rms · weight` over `rows` rows of `len`.
    pub fn rmsnorm(
        &mut self,
        x: &wgpu::Buffer,
        weight: &wgpu::Buffer,
        rows: usize,
        len: usize,
        eps: f32,
        out: &wgpu::Buffer,
    ) -> Result<(), ExecError> {
        let p = Self::op_params(rows as u32, len as u32, 0, 0, None, eps, 0.0);
        let pipeline = self.op("rmsnorm")?;
        if rows as u32 > MAX_GRID {
            return Err(ExecError::Unsupported(format!(
                "{rows} positions in one device pass"
            )));
        }
        self.dispatch(
            pipeline,
            vec![(1, x), (2, weight), (3, out)],
            4,
            &p,
            (rows as u32, 1, 1),
        );
        Ok(())
    }

    /// `a[i] += b[i % len]` for `i < total`.
    pub fn add(
        &mut self,
        a: &wgpu::Buffer,
        b: &wgpu::Buffer,
        total: usize,
        len: usize,
    ) -> Result<(), ExecError> {
        let (gx, gy) = fold((total as u32).div_ceil(64));
        let p = Self::op_params(total as u32, len as u32, gx, 0, None, 0.0, 0.0);
        let pipeline = self.op("add")?;
        self.dispatch(pipeline, vec![(0, a), (1, b)], 4, &p, (gx, gy, 1));
        Ok(())
    }

    /// Rotary embedding of `x = [n × heads × head_dim]` in place over the first `2·half`
    /// dimensions of each head (`cos`, `sin`: `[n × half]`).
    #[allow(clippy::too_many_arguments)]
    pub fn rope(
        &mut self,
        x: &wgpu::Buffer,
        cos: &wgpu::Buffer,
        sin: &wgpu::Buffer,
        n: usize,
        heads: usize,
        head_dim: usize,
        half: usize,
        half_split: bool,
    ) -> Result<(), ExecError> {
        let total = (n * heads * half) as u32;
        let (gx, gy) = fold(total.div_ceil(64));
        let dims = AttnDims {
            n: n as u32,
            p0: 0,
            n_heads: heads as u32,
            n_kv_heads: heads as u32,
            head_dim: head_dim as u32,
        };
        let p = Self::op_params(
            n as u32,
            half as u32,
            gx,
            half_split as u32,
            Some(dims),
            0.0,
            0.0,
        );
        let pipeline = self.op("rope")?;
        self.dispatch(
            pipeline,
            vec![(0, x), (1, cos), (2, sin)],
            4,
            &p,
            (gx, gy, 1),
        );
        Ok(())
    }

    /// `gate[i] = act(gate[i]) · up[i]`; `gelu` picks GELU (tanh form) over SiLU.
    pub fn glu(
        &mut self,
        gate: &wgpu::Buffer,
        up: &wgpu::Buffer,
        total: usize,
        gelu: bool,
    ) -> Result<(), ExecError> {
        let (gx, gy) = fold((total as u32).div_ceil(64));
        let p = Self::op_params(total as u32, 0, gx, gelu as u32, None, 0.0, 0.0);
        let pipeline = self.op("glu")?;
        self.dispatch(pipeline, vec![(0, gate), (1, up)], 4, &p, (gx, gy, 1));
        Ok(())
    }

    /// `x[i] = act(x[i])`; `gelu` picks GELU (tanh form) over SiLU.
    pub fn act(&mut self, x: &wgpu::Buffer, total: usize, gelu: bool) -> Result<(), ExecError> {
        let (gx, gy) = fold((total as u32).div_ceil(64));
        let p = Self::op_params(total as u32, 0, gx, gelu as u32, None, 0.0, 0.0);
        let pipeline = self.op("act")?;
        self.dispatch(pipeline, vec![(0, x)], 4, &p, (gx, gy, 1));
        Ok(())
    }

    /// `a[i] *= scale[i % len]` for `i < total` (every row's columns scaled).
    pub fn mul(
        &mut self,
        a: &wgpu::Buffer,
        scale: &wgpu::Buffer,
        total: usize,
        len: usize,
    ) -> Result<(), ExecError> {
        let (gx, gy) = fold((total as u32).div_ceil(64));
        let p = Self::op_params(total as u32, len as u32, gx, 0, None, 0.0, 0.0);
        let pipeline = self.op("mul")?;
        self.dispatch(pipeline, vec![(0, a), (1, scale)], 4, &p, (gx, gy, 1));
        Ok(())
    }

    /// `a[row] += b[row] · w[row]` over the rows of `len` of `a` and `b` (`total` floats).
    pub fn axpy_rows(
        &mut self,
        a: &wgpu::Buffer,
        b: &wgpu::Buffer,
        w: &wgpu::Buffer,
        total: usize,
        len: usize,
    ) -> Result<(), ExecError> {
        let (gx, gy) = fold((total as u32).div_ceil(64));
        let p = Self::op_params(total as u32, len as u32, gx, 0, None, 0.0, 0.0);
        let pipeline = self.op("axpy_rows")?;
        self.dispatch(pipeline, vec![(0, a), (1, b), (2, w)], 4, &p, (gx, gy, 1));
        Ok(())
    }

    /// `out[row] = (x[row] − mean) / sqrt(var + eps) · weight + bias` over `rows` rows of
    /// `len`.
    #[allow(clippy::too_many_arguments)]
    pub fn layernorm(
        &mut self,
        x: &wgpu::Buffer,
        weight: &wgpu::Buffer,
        bias: &wgpu::Buffer,
        rows: usize,
        len: usize,
        eps: f32,
        out: &wgpu::Buffer,
    ) -> Result<(), ExecError> {
        if rows as u32 > MAX_GRID {
            return Err(ExecError::Unsupported(format!(
                "{rows} positions in one device pass"
            )));
        }
        let p = Self::op_params(rows as u32, len as u32, 0, 0, None, eps, 0.0);
        let pipeline = self.op("layernorm")?;
        self.dispatch(
            pipeline,
            vec![(0, bias), (1, x), (2, weight), (3, out)],
            4,
            &p,
            (rows as u32, 1, 1),
        );
        Ok(())
    }

    /// Causal attention of `q` over the caches under `rule` (scale, sliding window,
    /// softcap); writes `out` and the softmax `weights` `[n × heads × (p0 + n)]`.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &mut self,
        q: &wgpu::Buffer,
        k_cache: &wgpu::Buffer,
        v_cache: &wgpu::Buffer,
        dims: AttnDims,
        rule: AttnRule,
        out: &wgpu::Buffer,
        weights: &wgpu::Buffer,
    ) -> Result<(), ExecError> {
        if dims.n > MAX_GRID || dims.n_heads > MAX_GRID {
            return Err(ExecError::Unsupported(format!(
                "{} positions in one device pass",
                dims.n
            )));
        }
        let p = Self::op_params(
            dims.n,
            rule.window as u32,
            0,
            0,
            Some(dims),
            rule.softcap,
            rule.scale,
        );
        let pipeline = self.op("attention")?;
        self.dispatch(
            pipeline,
            vec![(0, v_cache), (1, q), (2, k_cache), (3, out), (5, weights)],
            4,
            &p,
            (dims.n_heads, dims.n, 1),
        );
        Ok(())
    }

    /// Arg-max and its softmax probability of each of `rows` logits rows of `len`:
    /// `out[row]` (u32 bits) and `out[rows + row]`.
    pub fn argmax(
        &mut self,
        logits: &wgpu::Buffer,
        rows: usize,
        len: usize,
        out: &wgpu::Buffer,
    ) -> Result<(), ExecError> {
        let p = Self::op_params(rows as u32, len as u32, 0, 0, None, 0.0, 0.0);
        let pipeline = self.op("argmax")?;
        self.dispatch(
            pipeline,
            vec![(1, logits), (3, out)],
            4,
            &p,
            (rows as u32, 1, 1),
        );
        Ok(())
    }

    /// Encode and submit everything recorded (under error scopes naming `operation`), and
    /// start afresh.
    pub fn submit(&mut self, operation: &str) -> Result<(), ExecError> {
        if self.steps.is_empty() {
            return Ok(());
        }
        let gpu = self.gpu;
        let dispatches = std::mem::take(&mut self.dispatches);
        let steps = std::mem::take(&mut self.steps);
        let params = std::mem::take(&mut self.params);
        gpu.guarded(operation, || {
            let pbuf = gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("lql params"),
                size: (params.len() as u64).max(self.stride),
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            gpu.queue.write_buffer(&pbuf, 0, &params);
            let groups: Vec<wgpu::BindGroup> = dispatches
                .iter()
                .map(|d| {
                    let mut entries: Vec<wgpu::BindGroupEntry> = d
                        .bindings
                        .iter()
                        .map(|(b, buf)| wgpu::BindGroupEntry {
                            binding: *b,
                            resource: buf.as_entire_binding(),
                        })
                        .collect();
                    entries.push(wgpu::BindGroupEntry {
                        binding: d.param_binding,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &pbuf,
                            offset: d.param_offset,
                            size: wgpu::BufferSize::new(PARAM_BYTES),
                        }),
                    });
                    gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: None,
                        layout: &d.pipeline.get_bind_group_layout(0),
                        entries: &entries,
                    })
                })
                .collect();
            let mut enc = gpu
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
            for s in &steps {
                match s {
                    Step::Dispatch(i) => {
                        let d = &dispatches[*i];
                        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                            label: None,
                            timestamp_writes: None,
                        });
                        pass.set_pipeline(&d.pipeline);
                        pass.set_bind_group(0, &groups[*i], &[]);
                        pass.dispatch_workgroups(d.grid.0, d.grid.1, d.grid.2);
                    }
                    Step::Copy {
                        src,
                        src_off,
                        dst,
                        dst_off,
                        bytes,
                    } => enc.copy_buffer_to_buffer(src, *src_off, dst, *dst_off, *bytes),
                }
            }
            gpu.queue.submit([enc.finish()]);
            Ok(())
        })
    }

    /// Read `floats` values of `buf` from float offset `off` (submitting first).
    pub fn read(
        &mut self,
        buf: &wgpu::Buffer,
        off: usize,
        floats: usize,
        operation: &str,
    ) -> Result<Vec<f32>, ExecError> {
        self.submit(operation)?;
        self.gpu
            .read_back(buf, off as u64 * 4, floats as u64 * 4, operation)
    }
}

/// The compiled matmul pipelines for every encoding in `dtypes`, and the ops pipelines.
pub(crate) fn pipelines_for(
    gpu: &Gpu,
    dtypes: impl IntoIterator<Item = DType>,
) -> Result<(Pipelines, HashMap<DType, Pipelines>), ExecError> {
    let ops = gpu.pipelines(&shaders::ops_kernel())?;
    let mut mats = HashMap::new();
    for d in dtypes {
        if mats.contains_key(&d) {
            continue;
        }
        let k = shaders::matmul_kernel(d).ok_or_else(|| {
            device_error(
                DeviceFault::KernelCompile,
                &gpu.adapter,
                "choosing a kernel",
                format!("no matmul kernel for {d}"),
            )
        })?;
        mats.insert(d, gpu.pipelines(&k)?);
    }
    Ok((ops, mats))
}
