//! `qwen3moe`: qwen3 attention; every FFN a bank of experts (softmax over all experts,
//! top-k, renormalised over the chosen: the same weights as top-k then softmax).

use super::Family;
use crate::surface::ExpertSelection;

pub const FAMILY: Family = Family {
    name: "qwen3moe",
    selection: Some(ExpertSelection::TopKSoftmax),
    experts_required: true,
    nominal: super::qwen3::NOMINAL,
    block: super::qwen3::block,
    ..Family::BASE
};
