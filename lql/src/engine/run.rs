//! INFER and GENERATE: run the bound model on a raw prompt (no chat template; BOS as the
//! tokenizer's `add_bos` says).

use lql_planner::{GeneratePlan, InferPlan};

use super::Cx;
use crate::error::{Error, Result};
use crate::rows::Rows;

/// `INFER "prompt" [TOP n]` → (rank, token, token_id, prob, logit).
pub(crate) fn infer(cx: &mut Cx<'_>, plan: &InferPlan) -> Result<Rows> {
    let _ = (cx.bound()?, plan);
    Err(Error::not_supported_yet("INFER"))
}

/// `GENERATE "prompt" …` → (text, token_ids, finish_reason, prompt_tokens, generated_tokens).
pub(crate) fn generate(cx: &mut Cx<'_>, plan: &GeneratePlan) -> Result<Rows> {
    let _ = (cx.bound()?, plan);
    Err(Error::not_supported_yet("GENERATE"))
}
