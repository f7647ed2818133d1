//! File formats.

pub mod gguf;
pub mod package;
pub mod safetensors;
pub mod vindex3;
