//! `qwen2`: the plain block with Q/K/V biases and half-split RoPE.

use super::Family;

pub const FAMILY: Family = Family {
    name: "qwen2",
    bias_required: true,
    ..Family::BASE
};
