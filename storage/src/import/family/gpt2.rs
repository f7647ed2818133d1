//! `gpt2`: learned position embeddings; LayerNorm with biases before attention and FFN;
//! Q/K/V fused in `attn_qkv` with its bias; no RoPE; biased output projection; a GELU MLP
//! with biases.

use super::{Family, Fused, Meta};
use crate::error::Result;
use crate::surface::{Activation, BlockSpec, FfnShape, NormKind};

/// The family's block before a file's metadata is read.
const NOMINAL: BlockSpec = BlockSpec {
    norm: NormKind::Layer,
    rope: false,
    ffn: FfnShape::Mlp,
    attn_out_bias: true,
    ffn_bias: true,
    learned_positions: true,
    ..BlockSpec::PLAIN
};

pub const FAMILY: Family = Family {
    name: "gpt2",
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

fn block(_: &Meta<'_>) -> Result<BlockSpec> {
    Ok(NOMINAL)
}
