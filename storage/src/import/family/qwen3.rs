//! `qwen3`: the plain block with a per-head RMSNorm of the queries and keys before RoPE,
//! half-split RoPE, no biases.

use super::{Family, Meta};
use crate::error::Result;
use crate::surface::{BlockSpec, QkNorm};

/// The family's block before a file's metadata is read.
pub const NOMINAL: BlockSpec = BlockSpec {
    qk_norm: QkNorm::PerHead,
    ..BlockSpec::PLAIN
};

pub const FAMILY: Family = Family {
    name: "qwen3",
    nominal: NOMINAL,
    block,
    ..Family::BASE
};

/// The qwen3 block (shared by qwen3moe).
pub fn block(m: &Meta<'_>) -> Result<BlockSpec> {
    Ok(BlockSpec {
        rope_freq_scale: m.rope_freq_scale()?,
        ..NOMINAL
    })
}
