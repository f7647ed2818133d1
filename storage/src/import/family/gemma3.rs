//! `gemma3` (text): gemma2's sandwich block without softcaps, with a per-head RMSNorm of
//! queries and keys; when the file has a sliding window, five windowed layers to one
//! global (`l % 6 < 5` windowed), the windowed layers on `gemma3.rope.freq_base_swa`
//! (10,000 when absent) without scaling, the global ones on `gemma3.rope.freq_base` with the
//! file's linear scaling; a final softcap only when the file gives one.

use super::gemma2::{query_scale, sqrt_hidden};
use super::{Family, Meta};
use crate::error::Result;
use crate::surface::{Activation, BlockSpec, NormPlacement, QkNorm};

/// The family's block before a file's metadata is read.
const NOMINAL: BlockSpec = BlockSpec {
    placement: NormPlacement::Sandwich,
    qk_norm: QkNorm::PerHead,
    rope_scale_windowed: false,
    ..BlockSpec::PLAIN
};

pub const FAMILY: Family = Family {
    name: "gemma3",
    activation: Activation::Gelu,
    embedding_scale: sqrt_hidden,
    nominal: NOMINAL,
    block,
    ..Family::BASE
};

fn block(m: &Meta<'_>) -> Result<BlockSpec> {
    Ok(BlockSpec {
        sliding: m.sliding(None, 6, Some(10_000.0))?,
        attn_scale: query_scale(m, 62),
        final_softcap: m.softcap("final_logit_softcapping", 0.0)?,
        rope_freq_scale: m.rope_freq_scale()?,
        ..NOMINAL
    })
}
