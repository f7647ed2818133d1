//! File formats.

pub mod control_vector;
pub mod feature_stats;
pub mod gguf;
pub mod package;
pub mod safetensors;
pub mod vindex3;
