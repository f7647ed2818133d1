//! `olmo2`: RMSNorm after attention and after the FFN only (no pre-norms); an RMSNorm of
//! the whole query and key projections before RoPE; half-split RoPE; SwiGLU. With
//! `olmo2.attention.sliding_window` (Olmo 3), three windowed layers to one global, the
//! windowed ones unscaled on `olmo2.rope.freq_base_swa` (else the model's base).

use super::{Family, Meta};
use crate::error::Result;
use crate::surface::{BlockSpec, NormPlacement, QkNorm};

/// The family's block before a file's metadata is read.
const NOMINAL: BlockSpec = BlockSpec {
    placement: NormPlacement::Post,
    qk_norm: QkNorm::Whole,
    rope_scale_windowed: false,
    ..BlockSpec::PLAIN
};

pub const FAMILY: Family = Family {
    name: "olmo2",
    nominal: NOMINAL,
    block,
    ..Family::BASE
};

fn block(m: &Meta<'_>) -> Result<BlockSpec> {
    Ok(BlockSpec {
        sliding: m.sliding(None, 4, None)?,
        rope_freq_scale: m.rope_freq_scale()?,
        ..NOMINAL
    })
}
