//! # lql-exec: runs a model — operation plan, CPU backend, sampling, observers.
//!
//! ```text
//!  OperandSource ──Plan::build (validate)──▶ Plan ──Executor──▶ Session (KV cache)
//!                                                 │                 │ prefill / decode
//!                                              Backend (CPU)     Logits ──▶ Sampler
//! ```
//!
//! - [`plan`]: the validated operation plan, from the execution surface only.
//! - [`backend`]: the `Backend` trait and the CPU backend (codec dot kernels, faer GEMM).
//! - [`program`]: the block programme, the one definition of a layer's steps.
//! - [`forward`]: one forward pass over new positions; `ffn`: its FFN block.
//! - [`session`]: `Executor`, `Session`, `Logits`, INFER.
//! - [`batch`]: one decode step over several sequences (`Executor::decode_batch`).
//! - [`generate`]: GENERATE with stop conditions and streaming.
//! - [`constrain`]: constrained decoding (JSON schema, GBNF, Lark) through token masks.
//! - [`sample`]: greedy / temperature / top-k / top-p sampling with a seeded PRNG.
//! - [`observer`]: hooks for TRACE, EXPLAIN INFER, WALK RESIDUAL.
//! - [`kv`]: the key/value cache.
//! - [`bench`]: the throughput benchmark behind `lql bench`.

pub mod activation_patch;
pub mod attribution_patch;
pub mod backend;
pub mod batch;
pub mod bench;
pub mod block;
pub mod browse;
pub mod constrain;
pub mod edit;
pub mod embedding;
pub mod error;
mod ffn;
pub mod forward;
pub mod generate;
pub mod grad;
pub mod kernels;
pub mod kv;
pub mod observer;
pub mod overlay;
pub mod plan;
pub mod program;
pub mod sample;
pub mod session;
pub mod stage;
pub mod steer;
pub mod tokenizer;
pub mod trace;

pub use backend::cpu::CpuBackend;
pub use backend::Backend;
pub use error::{DeviceFault, ExecError, Result};
pub use ffn::select as select_experts;
pub use forward::{LogitsWanted, PassInput};
pub use generate::{Control, FinishReason, GenerateOptions, Generation, TokenDecoder};
pub use observer::{LayerRecord, Observer, Route, Site};
pub use plan::{Plan, StageRange};
pub use sample::{Sampler, Sampling};
pub use session::{Executor, Logits, Session, TopToken};
