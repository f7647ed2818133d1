//! `gptneox` (Pythia): LayerNorm with biases; Q/K/V fused in `attn_qkv` with its bias;
//! half-split RoPE over the first `gptneox.rope.dimension_count` dimensions of each head;
//! biased output projection; a GELU MLP with biases; attention and FFN side by side on
//! one residual step when `gptneox.use_parallel_residual` (the default).

use super::{Family, Fused, Meta};
use crate::error::Result;
use crate::surface::{Activation, BlockSpec, FfnShape, NormKind, NormPlacement};

/// The family's block before a file's metadata is read.
const NOMINAL: BlockSpec = BlockSpec {
    norm: NormKind::Layer,
    placement: NormPlacement::Parallel,
    ffn: FfnShape::Mlp,
    attn_out_bias: true,
    ffn_bias: true,
    ..BlockSpec::PLAIN
};

pub const FAMILY: Family = Family {
    name: "gptneox",
    activation: Activation::Gelu,
    bias_required: true,
    fused: Fused {
        qkv: true,
        gate_up: false,
    },
    eps_key: "attention.layer_norm_epsilon",
    nominal: NOMINAL,
    block,
    ..Family::BASE
};

fn block(m: &Meta<'_>) -> Result<BlockSpec> {
    let parallel = m.bool("use_parallel_residual")?.unwrap_or(true);
    Ok(BlockSpec {
        placement: if parallel {
            NormPlacement::Parallel
        } else {
            NormPlacement::Pre
        },
        rope_freq_scale: m.rope_freq_scale()?,
        ..NOMINAL
    })
}
