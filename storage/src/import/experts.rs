//! Banks of experts: how many, how many a token uses, how they are chosen and how wide,
//! read from `{arch}.expert_*` metadata (a GGUF file's, or an HF config's translated), with
//! the family's routing.

use std::collections::BTreeMap;

use crate::error::{Result, StorageError};
use crate::model::{Operand, OperandKey, Role};
use crate::surface::{ExpertSelection, MoeSurface};

use super::family::Family;
use super::metadata::{missing, opt_usize, req_usize, Metadata};

/// The family's judgement on experts: `None` for a dense model, else the bank's facts from
/// the `{arch}.expert_*` metadata (llama.cpp's keys and defaults).
pub fn experts(
    file: &dyn Metadata,
    family: &Family,
    operands: &BTreeMap<OperandKey, Operand>,
    ffn: usize,
) -> Result<Option<MoeSurface>> {
    let arch = family.name;
    let k = |s: &str| format!("{arch}.{s}");
    let count = opt_usize(file, &k("expert_count"))?.unwrap_or(0);
    let Some(selection) = family.selection else {
        return Ok(None);
    };
    if count == 0 {
        if family.experts_required {
            return Err(missing(file, &k("expert_count")));
        }
        return Ok(None);
    }
    let bad = |key: &str, message: String| StorageError::Format {
        path: file.path().to_path_buf(),
        offset: file.locate(&k(key)).1,
        field: file.locate(&k(key)).0,
        message,
    };
    if count > crate::surface::MAX_EXPERTS {
        return Err(bad(
            "expert_count",
            format!(
                "{count} experts; at most {} are accepted",
                crate::surface::MAX_EXPERTS
            ),
        ));
    }
    let used = req_usize(file, &k("expert_used_count"))?;
    if used == 0 || used > count {
        return Err(bad(
            "expert_used_count",
            format!("{used} experts used per token of {count}"),
        ));
    }
    let selection = match file.u64(&k("expert_gating_func"))? {
        None | Some(1) => selection,
        Some(2) => ExpertSelection::SigmoidTopKNorm,
        Some(g) => {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: expert gating function {g} ({}: {})",
                file.path().display(),
                file.locate(&k("expert_gating_func")).0
            )))
        }
    };
    for key in ["expert_weights_scale", "expert_group_count"] {
        if file.has(&k(key)) {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: {} ({})",
                file.locate(&k(key)).0,
                file.path().display()
            )));
        }
    }
    // As llama.cpp reads them: a qwen2moe expert is `expert_feed_forward_length` wide
    // (default `ffn / used`), its shared expert `expert_shared_feed_forward_length` (default
    // `ffn`); a Mixtral expert is `feed_forward_length` wide.
    let expert_ffn = if family.experts_required {
        opt_usize(file, &k("expert_feed_forward_length"))?.unwrap_or(ffn / used)
    } else {
        ffn
    };
    let has = |role| operands.keys().any(|key| key.role == role);
    let shared_ffn = if has(Role::FfnGateShexp) || has(Role::FfnUpShexp) || has(Role::FfnDownShexp)
    {
        opt_usize(file, &k("expert_shared_feed_forward_length"))?.unwrap_or(ffn)
    } else {
        0
    };
    if expert_ffn == 0 {
        return Err(bad(
            "expert_feed_forward_length",
            "expert FFN width is 0".into(),
        ));
    }
    Ok(Some(MoeSurface {
        n_experts: count,
        n_used: used,
        expert_ffn,
        selection,
        shared_ffn,
        shared_gate: shared_ffn > 0 && has(Role::FfnGateInpShexp),
    }))
}
