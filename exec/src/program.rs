//! The block programme: the one definition of what a decoder layer computes, in order.
//!
//! A family describes its block ([`lql_storage::surface::BlockSpec`]); [`lower`] turns the
//! description and a layer's operands into a short list of [`Step`]s, once, when the plan
//! is built ([`crate::plan::LayerPlan::steps`]). Every backend runs a layer by running its
//! steps: the host block ([`crate::block`], for prompts, decode steps and the batched
//! step of `lql serve`) and the GPU backend (`lql-gpu`'s model). A backend implements each
//! kind of step once; which steps a layer has, and their order, is decided here alone.
//!
//! ```text
//!  pre (llama, qwen, phi3, gpt2):   Norm(Attn) Project [QkNorm] [Rope] Attend Output Residual(Attn)
//!                                   Norm(Ffn) Ffn Added Residual(Ffn)
//!  sandwich (gemma2/3):             … Output PostNorm(Attn) Residual(Attn) Norm(Ffn) Ffn PostNorm(Ffn) Added Residual(Ffn)
//!  post (olmo2):                    TakeResidual Project … Output PostNorm(Attn) Residual(Attn)
//!                                   TakeResidual Ffn PostNorm(Ffn) Added Residual(Ffn)
//!  parallel (gptneox):              Norm(Attn) Project … Output Norm(Ffn) Ffn Added Residual(Attn) Residual(Ffn)
//! ```
//!
//! The buffers the steps name: `x` the residual stream, `h` the sub-block's input,
//! `q`/`k`/`v` the projections, `att` the attention output, and one delta per sub-block.

use lql_storage::surface::{BlockSpec, NormPlacement};

use crate::plan::LayerPlan;

/// The two sub-blocks of a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    Attn,
    Ffn,
}

/// One operation of a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `h = norm(x)` with the sub-block's norm: LayerNorm with its bias where the layer has
    /// one, else RMSNorm.
    Norm(Sub),
    /// `h = x` (a block with no norm before its sub-blocks).
    TakeResidual,
    /// `q, k, v = h · Wq, Wk, Wv` plus their biases where the layer has them.
    Project,
    /// RMSNorm of the queries and keys (per head, or over the whole projection).
    QkNorm,
    /// Rotary embedding of the queries and keys with the layer's table.
    Rope,
    /// Append `k`, `v` to the cache; `att = attention(q, cache)` under the layer's rule
    /// (scale, sliding window, softcap).
    Attend,
    /// `attn_delta = att · Wo` plus its bias where the layer has one.
    Output,
    /// `delta = rmsnorm(delta) · w` with the sub-block's post-norm.
    PostNorm(Sub),
    /// `ffn_delta = ffn(h)`: the layer's FFN with the effective state's feature scales.
    Ffn,
    /// `ffn_delta += added(h)`: the effective state's added features (knowledge edits),
    /// read from the FFN's input and written where the FFN's output meets the residual
    /// stream, after a post-FFN norm where the block has one (docs/editing.md, "Blocks with
    /// a norm after the FFN").
    Added,
    /// `x += delta` of the sub-block.
    Residual(Sub),
}

/// The steps of layer `lp` of a block described by `block`.
pub fn lower(block: &BlockSpec, lp: &LayerPlan) -> Vec<Step> {
    let e = &lp.extra;
    let input = |sub| {
        if block.placement == NormPlacement::Post {
            Step::TakeResidual
        } else {
            Step::Norm(sub)
        }
    };
    let mut steps = vec![input(Sub::Attn), Step::Project];
    if e.q_norm.is_some() && e.k_norm.is_some() {
        steps.push(Step::QkNorm);
    }
    if block.rope {
        steps.push(Step::Rope);
    }
    steps.extend([Step::Attend, Step::Output]);
    if e.attn_post_norm.is_some() {
        steps.push(Step::PostNorm(Sub::Attn));
    }
    let parallel = block.placement == NormPlacement::Parallel;
    if !parallel {
        steps.push(Step::Residual(Sub::Attn));
    }
    steps.extend([input(Sub::Ffn), Step::Ffn]);
    if e.ffn_post_norm.is_some() {
        steps.push(Step::PostNorm(Sub::Ffn));
    }
    steps.push(Step::Added);
    if parallel {
        steps.push(Step::Residual(Sub::Attn));
    }
    steps.push(Step::Residual(Sub::Ffn));
    steps
}
