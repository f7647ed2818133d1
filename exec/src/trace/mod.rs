//! Trace: watch the model think — capture what each layer did, then read it back.
//!
//! ```text
//!  ids ──Executor::observe(TraceCapture)──▶ Trace (per layer, per kept position:
//!                                           residual, attn Δ, ffn Δ, normed FFN input,
//!                                           optional gate/activation and attention)
//!      ──lens──▶ logit lens (top-1 per layer), answer trajectory (rank, prob, direct
//!                logit contributions of each Δ), decomposition (norms, attention share)
//!      ──file──▶ `.trace` (header + JSON array table + raw little-endian f32), load back
//!      ──svg───▶ logit-lens heatmap (layers × positions)
//! ```
//!
//! Only the positions asked for are kept ([`Positions::Last`] copies one row per layer);
//! with no observer attached the forward pass does no trace work at all. The formulas are
//! documented in `docs/trace.md`.

pub mod capture;
pub mod file;
pub mod heads;
pub mod lens;
pub mod svg;

pub use crate::error::{ExecError, Result};
pub use capture::{run_trace, CaptureOptions, LayerCapture, Positions, Trace, TraceCapture};
pub use file::{ArrayInfo, TraceDims, TraceFile};
pub use lens::{
    decompose, logit_lens, target_trajectory, who, Decomposition, LensCell, LogitLens, TargetStep,
    Trajectory,
};
pub use svg::{write_heatmap_svg, write_svg, HeatCell, Heatmap};
