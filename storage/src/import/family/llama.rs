//! `llama`: the plain block (the converter permuted the Q/K rows, so RoPE pairs adjacent
//! dimensions). Mixtral-style banks when `llama.expert_count` is set; Llama 3 RoPE scaling
//! as the `rope_freqs.weight` frequency divisors llama.cpp's converter stores; linear RoPE
//! scaling.

use super::{Family, Meta};
use crate::error::Result;
use crate::surface::{BlockSpec, ExpertSelection, RopePairing};

pub const FAMILY: Family = Family {
    name: "llama",
    pairing: RopePairing::Adjacent,
    selection: Some(ExpertSelection::TopKSoftmax),
    nominal: BlockSpec::PLAIN,
    block,
    ..Family::BASE
};

fn block(m: &Meta<'_>) -> Result<BlockSpec> {
    Ok(BlockSpec {
        rope_freq_scale: m.rope_freq_scale()?,
        rope_freq_factors: m.file.has_tensor("rope_freqs.weight"),
        ..BlockSpec::PLAIN
    })
}
