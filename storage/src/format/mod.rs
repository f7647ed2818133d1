//! File formats.

pub mod gguf;
pub mod safetensors;
pub mod vindex3;
