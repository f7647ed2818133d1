//! `lql-gpu`: the GPU backend. LQL's forward pass on a wgpu device — Metal on macOS,
//! Vulkan on Linux and Windows, DX12 on Windows — with WGSL kernels: dequantising matmul
//! on the stored block encodings (F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K), embedding
//! lookup, RMSNorm, RoPE, causal attention over a key/value cache kept on the device, the
//! gated activation, residual adds and a logits arg-max. Weights are uploaded once per
//! model; activations and the cache stay on the device; observers read back only what
//! their hooks take. See docs/gpu.md.
//!
//! - [`context`]: adapters (`SHOW BACKENDS`), the shared device, typed device errors
//! - [`shaders`]: the WGSL sources, naga validation, compiled pipelines
//! - [`weights`]: operands resident on the device
//! - [`record`]: recording and submitting kernel dispatches
//! - [`model`]: the forward pass on the device
//! - [`kv`]: the device key/value cache
//! - [`backend`]: [`GpuBackend`], the `Backend` the executor runs

pub mod backend;
pub mod context;
pub(crate) mod kv;
pub mod model;
pub(crate) mod record;
pub mod shaders;
pub(crate) mod weights;

pub use backend::GpuBackend;
pub use context::{adapters, AdapterSummary};
