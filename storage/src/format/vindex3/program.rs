//! The schema-6 declarations of a component (seed 002 §17.4, lifts 1 and 2): per layer,
//! the attention policy (an explicit operator, span and position), the operation program
//! (ordered typed operations, each naming the operand roles it consumes) and the
//! continuation state the program needs (typed regions; softmax attention declares KV rows).
//!
//! One derivation from the execution surface serves the writer, which records it, and the
//! reader, which recomputes it and requires the recorded one to agree. The reader also
//! checks closure both ways: every role an operation names is bound in the operand table
//! (the required ones are, by `reader::check_closure`), and every role bound in a layer is
//! consumed by an operation of that layer — surfaces present exactly when the program runs
//! them.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::graph::{AttentionLayerPolicy, OperandBinding};
use crate::model::Role;
use crate::surface::{ExecutionSurface, NormPlacement, RopePairing};

/// One layer's operation program.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerProgram {
    pub layer: u32,
    /// How the residual stream combines the sublayers: `sequential` (attention, then the
    /// FFN on its result) or `parallel` (both read the same input; gptneox).
    pub residual: String,
    pub ops: Vec<Operation>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One typed operation: `norm`, `attention`, `ffn` or `moe`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    pub op: String,
    /// The operand roles it consumes (`lql_storage::Role::name`), in the layer.
    pub roles: Vec<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The continuation state one layer needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerState {
    pub layer: u32,
    /// Empty for a stateless layer.
    pub regions: Vec<StateRegion>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A typed state region (`kv` rows: one key and one value row per position and KV head).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateRegion {
    /// `kv` (this build's only species; `latent-kv`, `recurrent`, `convolution` are the
    /// seed's others).
    pub role: String,
    /// `sequence` (every position is kept) or `window` (the last `window` positions).
    pub rows: String,
    #[serde(default)]
    pub window: Option<u64>,
    pub kv_heads: u64,
    pub head_dim: u64,
    /// `append`: each position adds its row.
    pub update: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Whether layer `l` attends through a sliding window, and the window.
fn window_of(s: &ExecutionSurface, l: usize) -> Option<u64> {
    s.block
        .sliding
        .filter(|w| w.covers(l))
        .map(|w| w.window as u64)
}

/// Layer `l`'s attention policy: softmax, its span, and the position it applies.
pub fn attention_policy(s: &ExecutionSurface, l: usize) -> AttentionLayerPolicy {
    let window = window_of(s, l);
    let position = if s.block.rope {
        let theta = match (window, s.block.sliding.and_then(|w| w.rope_theta)) {
            (Some(_), Some(t)) => t,
            _ => s.rope_theta,
        };
        let pairing = match s.rope_pairing {
            RopePairing::Adjacent => "adjacent",
            RopePairing::HalfSplit => "half_split",
        };
        json!({"rope": {"theta": theta, "pairing": pairing}})
    } else {
        json!("none")
    };
    AttentionLayerPolicy {
        layer: l as u32,
        operator: "softmax".into(),
        span: if window.is_some() { "sliding" } else { "full" }.into(),
        window,
        position,
        extra: Map::new(),
    }
}

/// The operation a per-layer role belongs to (`None`: a role that is not per-layer).
fn op_of(role: Role) -> Option<(&'static str, &'static str)> {
    use Role::*;
    Some(match role {
        AttnNorm | AttnNormBias => ("norm", "attn_norm"),
        AttnQ | AttnK | AttnV | AttnOutput | AttnQBias | AttnKBias | AttnVBias | AttnQNorm
        | AttnKNorm | AttnOutputBias => ("attention", "attention"),
        AttnPostNorm => ("norm", "attn_post_norm"),
        FfnNorm | FfnNormBias => ("norm", "ffn_norm"),
        FfnGate | FfnUp | FfnDown | FfnGateBias | FfnUpBias | FfnDownBias | FfnAddedGate
        | FfnAddedUp | FfnAddedDown | FfnAddedGateBias | FfnAddedUpBias | FfnGateScale
        | FfnDownScale => ("ffn", "ffn"),
        FfnGateInp | FfnGateExps | FfnUpExps | FfnDownExps | FfnGateShexp | FfnUpShexp
        | FfnDownShexp | FfnGateInpShexp => ("moe", "moe"),
        FfnPostNorm => ("norm", "ffn_post_norm"),
        TokenEmbedding | PositionEmbedding | OutputNorm | OutputNormBias | Output | RopeFreqs => {
            return None
        }
    })
}

/// Layer `l`'s program: the surface's required roles plus the optional roles `bound` in
/// that layer (compiled edits), grouped into operations in execution order.
pub fn layer_program(s: &ExecutionSurface, l: usize, bound: &BTreeSet<Role>) -> LayerProgram {
    let mut roles: Vec<Role> = s.required_layer_roles();
    let optional: Vec<Role> = bound
        .iter()
        .copied()
        .filter(|r| r.is_optional() && !roles.contains(r))
        .collect();
    roles.extend(optional);
    // Execution order of the operations, by placement.
    let order: &[&str] = match s.block.placement {
        NormPlacement::Pre | NormPlacement::Parallel => &["attn_norm", "attention", "ffn_norm"],
        NormPlacement::Sandwich => &["attn_norm", "attention", "attn_post_norm", "ffn_norm"],
        NormPlacement::Post => &["attention", "attn_post_norm"],
    };
    let tail: &[&str] = match s.block.placement {
        NormPlacement::Sandwich | NormPlacement::Post => &["ffn", "moe", "ffn_post_norm"],
        _ => &["ffn", "moe"],
    };
    let ops = order
        .iter()
        .chain(tail)
        .filter_map(|id| {
            let mine: Vec<Role> = roles
                .iter()
                .copied()
                .filter(|r| op_of(*r).is_some_and(|(_, i)| i == *id))
                .collect();
            // The operation's kind is its roles' (absent when the layer has none of them).
            let (kind, _) = op_of(*mine.first()?)?;
            Some(Operation {
                op: kind.to_string(),
                roles: mine.iter().map(|r| r.name().to_string()).collect(),
                extra: Map::new(),
            })
        })
        .collect();
    LayerProgram {
        layer: l as u32,
        residual: if s.block.placement == NormPlacement::Parallel {
            "parallel"
        } else {
            "sequential"
        }
        .into(),
        ops,
        extra: Map::new(),
    }
}

/// Layer `l`'s continuation state: the KV rows its softmax attention appends.
pub fn layer_state(s: &ExecutionSurface, l: usize) -> LayerState {
    let window = window_of(s, l);
    LayerState {
        layer: l as u32,
        regions: vec![StateRegion {
            role: "kv".into(),
            rows: if window.is_some() {
                "window"
            } else {
                "sequence"
            }
            .into(),
            window,
            kv_heads: s.n_kv_heads as u64,
            head_dim: s.head_dim as u64,
            update: "append".into(),
            extra: Map::new(),
        }],
        extra: Map::new(),
    }
}

/// The per-layer roles each of `n` layers binds in an operand table (rows of other layers
/// and global roles are not counted).
pub fn bound_roles(operands: &[OperandBinding], n: usize) -> Vec<BTreeSet<Role>> {
    let mut bound = vec![BTreeSet::new(); n];
    for b in operands {
        if let (Some(l), Some(r)) = (b.layer, layer_role(&b.role)) {
            if let Some(set) = bound.get_mut(l as usize) {
                set.insert(r);
            }
        }
    }
    bound
}

/// The per-layer role a bound operand name stands for, if it is one.
pub fn layer_role(name: &str) -> Option<Role> {
    Role::ALL
        .iter()
        .copied()
        .find(|r| r.name() == name && op_of(*r).is_some())
}
