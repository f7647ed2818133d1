//! `qwen2moe`: qwen2 attention; every FFN a bank (softmax over all experts, then top-k,
//! not renormalised) with an optional shared expert and its sigmoid gate.

use super::Family;
use crate::surface::ExpertSelection;

pub const FAMILY: Family = Family {
    name: "qwen2moe",
    bias_required: true,
    selection: Some(ExpertSelection::SoftmaxTopK),
    experts_required: true,
    ..Family::BASE
};
