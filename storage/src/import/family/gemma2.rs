//! `gemma2`: embeddings × sqrt(hidden); RMSNorm before and after attention and FFN (the
//! converter stored the norm weights with Gemma's +1 already added); GeGLU; half-split
//! RoPE; every other layer (the even ones) sees a sliding window (4096 unless the file
//! says), on `gemma2.rope.freq_base_swa` when given; attention scores and final logits
//! soft-capped (50 and 30 unless the file says); the query scale `1/sqrt(head_dim)`, or `1/sqrt(hidden /
//! heads)` for the 46-layer 27B model as llama.cpp sets it.

use super::{Family, Meta};
use crate::error::Result;
use crate::surface::{Activation, BlockSpec, NormPlacement};

/// The family's block before a file's metadata is read.
const NOMINAL: BlockSpec = BlockSpec {
    placement: NormPlacement::Sandwich,
    attn_softcap: 50.0,
    final_softcap: 30.0,
    ..BlockSpec::PLAIN
};

pub const FAMILY: Family = Family {
    name: "gemma2",
    activation: Activation::Gelu,
    embedding_scale: sqrt_hidden,
    nominal: NOMINAL,
    block,
    ..Family::BASE
};

/// Gemma's embedding scale.
pub fn sqrt_hidden(hidden: usize) -> f32 {
    (hidden as f32).sqrt()
}

/// llama.cpp's query scale of the 27B models (`n_layers` 46 for gemma2, 62 for gemma3).
pub fn query_scale(m: &Meta<'_>, layers_27b: usize) -> f32 {
    if m.n_layers == layers_27b {
        1.0 / ((m.hidden / m.n_heads) as f32).sqrt()
    } else {
        0.0
    }
}

fn block(m: &Meta<'_>) -> Result<BlockSpec> {
    Ok(BlockSpec {
        sliding: m.sliding(Some(4096), 2, None)?,
        attn_scale: query_scale(m, 46),
        attn_softcap: m.softcap("attn_logit_softcapping", NOMINAL.attn_softcap)?,
        final_softcap: m.softcap("final_logit_softcapping", NOMINAL.final_softcap)?,
        rope_freq_scale: m.rope_freq_scale()?,
        ..NOMINAL
    })
}
