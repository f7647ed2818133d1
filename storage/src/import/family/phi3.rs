//! `phi3`: the plain block with Q/K/V fused in `attn_qkv` and gate/up fused in `ffn_up`
//! (gate rows first), half-split RoPE. `phi3.attention.sliding_window` is ignored, as
//! llama.cpp ignores it (every layer attends to all earlier positions). The long-context
//! variants' per-dimension factors
//! (`rope_factors_long/short`) are refused by name.

use super::{Family, Fused, Meta};
use crate::error::{Result, StorageError};
use crate::surface::BlockSpec;

pub const FAMILY: Family = Family {
    name: "phi3",
    fused: Fused {
        qkv: true,
        gate_up: true,
    },
    nominal: BlockSpec::PLAIN,
    block,
    ..Family::BASE
};

fn block(m: &Meta<'_>) -> Result<BlockSpec> {
    for t in ["rope_factors_long.weight", "rope_factors_short.weight"] {
        if m.file.has_tensor(t) {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: phi3 long-context RoPE factors (tensor {t} in {})",
                m.file.path().display()
            )));
        }
    }
    super::plain(m)
}
