//! The execution surface: every fact the executor needs, judged once by an importer.
//!
//! Importers (GGUF, Hugging Face folders, VINDEX3 containers) fill this in; after that no
//! architecture name or source file is consulted (seed 002 §17, the deletion invariant).
//! It is stored verbatim in a VINDEX3 `system_graph.json`. The surface also says which
//! operands a forward pass needs and the shape of each: the one list importers, the
//! VINDEX3 reader, the executor and the engine check against.

use serde::{Deserialize, Serialize};

use crate::model::{OperandKey, Role};

/// How RoPE pairs the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopePairing {
    /// Dimensions (2i, 2i+1) rotate together: llama GGUFs, whose Q/K rows were permuted
    /// by the converter.
    Adjacent,
    /// Dimensions (i, i + head_dim/2) rotate together ("NEOX"): qwen2 GGUFs and
    /// Hugging Face checkpoints.
    HalfSplit,
}

/// The FFN gate activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// silu(gate) * up (SwiGLU).
    Silu,
    /// gelu_tanh(gate) * up (GeGLU).
    Gelu,
}

/// Token ids with a special meaning.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub pad: Option<u32>,
    pub unk: Option<u32>,
    /// Extra end-of-turn ids that also stop generation (e.g. `<|im_end|>`).
    #[serde(default)]
    pub eot: Vec<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
}

/// How a bank FFN turns router logits into the experts a token uses and their weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpertSelection {
    /// The k largest router logits, weighted by a softmax over those k (Mixtral; the same
    /// as a softmax over all experts renormalised over the k chosen).
    TopKSoftmax,
    /// A softmax over all experts, then the k largest probabilities, not renormalised
    /// (qwen2moe).
    SoftmaxTopK,
    /// A sigmoid of each router logit, then the k largest, renormalised to sum 1.
    SigmoidTopKNorm,
}

impl ExpertSelection {
    /// The short name shown in plans and SHOW output.
    pub fn name(self) -> &'static str {
        match self {
            ExpertSelection::TopKSoftmax => "top-k then softmax",
            ExpertSelection::SoftmaxTopK => "softmax then top-k",
            ExpertSelection::SigmoidTopKNorm => "sigmoid, top-k, renormalised",
        }
    }
}

/// The mixture-of-experts facts of a model whose every layer's FFN is a bank: a router,
/// `n_experts` routed experts of which each token uses `n_used`, and optionally one shared
/// expert every token uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoeSurface {
    pub n_experts: usize,
    pub n_used: usize,
    /// FFN width of each routed expert.
    pub expert_ffn: usize,
    pub selection: ExpertSelection,
    /// FFN width of the shared expert; 0 when there is none.
    pub shared_ffn: usize,
    /// The shared expert's output is scaled by `sigmoid(g · h)` with its own gate vector.
    pub shared_gate: bool,
}

/// The most routed experts a bank may declare (the router's logits are sized by it).
pub const MAX_EXPERTS: usize = 4096;

/// Every execution-relevant fact of a decoder-only transformer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionSurface {
    /// Family name as the source called it (informational only; never branched on).
    pub source_architecture: String,
    pub n_layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub context_length: usize,
    pub rope_theta: f32,
    pub rope_pairing: RopePairing,
    pub norm_eps: f32,
    pub activation: Activation,
    /// The output head is the token embedding (no separate `output` operand).
    pub tied_head: bool,
    /// Q/K/V projections carry biases.
    pub attn_bias: bool,
    /// Multiplier applied to embedding rows (1.0 for llama and qwen2).
    pub embedding_scale: f32,
    pub special: SpecialTokens,
    /// Present when every layer's FFN is a bank of experts (then `ffn` is the expert
    /// width and the dense FFN roles are absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<MoeSurface>,
}

impl ExecutionSurface {
    /// Global roles a forward pass needs: the embedding, the final norm, and the output
    /// head unless it is tied to the embedding.
    pub fn required_global_roles(&self) -> Vec<Role> {
        let mut roles = vec![Role::TokenEmbedding, Role::OutputNorm];
        if !self.tied_head {
            roles.push(Role::Output);
        }
        roles
    }

    /// Roles a forward pass needs in every layer (the Q/K/V biases only when the surface
    /// has them).
    pub fn required_layer_roles(&self) -> Vec<Role> {
        let mut roles = vec![
            Role::AttnNorm,
            Role::AttnQ,
            Role::AttnK,
            Role::AttnV,
            Role::AttnOutput,
            Role::FfnNorm,
        ];
        match &self.moe {
            None => roles.extend([Role::FfnGate, Role::FfnUp, Role::FfnDown]),
            Some(m) => {
                roles.extend([
                    Role::FfnGateInp,
                    Role::FfnGateExps,
                    Role::FfnUpExps,
                    Role::FfnDownExps,
                ]);
                if m.shared_ffn > 0 {
                    roles.extend([Role::FfnGateShexp, Role::FfnUpShexp, Role::FfnDownShexp]);
                    if m.shared_gate {
                        roles.push(Role::FfnGateInpShexp);
                    }
                }
            }
        }
        if self.attn_bias {
            roles.extend([Role::AttnQBias, Role::AttnKBias, Role::AttnVBias]);
        }
        roles
    }

    /// Every operand a forward pass needs: the global ones, then layer by layer.
    pub fn required_keys(&self) -> Vec<OperandKey> {
        let layer_roles = self.required_layer_roles();
        let mut keys: Vec<OperandKey> = self
            .required_global_roles()
            .into_iter()
            .map(OperandKey::global)
            .collect();
        for l in 0..self.n_layers {
            keys.extend(layer_roles.iter().map(|&r| OperandKey::layer(l, r)));
        }
        keys
    }

    /// The shape (ggml order) an operand of `role` must have.
    pub fn operand_shape(&self, role: Role) -> Vec<usize> {
        let q = self.n_heads * self.head_dim;
        let kv = self.n_kv_heads * self.head_dim;
        let (e, ef, sf) = self
            .moe
            .as_ref()
            .map_or((0, 0, 0), |m| (m.n_experts, m.expert_ffn, m.shared_ffn));
        match role {
            Role::TokenEmbedding | Role::Output => vec![self.hidden, self.vocab],
            Role::AttnNorm | Role::FfnNorm | Role::OutputNorm => vec![self.hidden],
            Role::AttnQ => vec![self.hidden, q],
            Role::AttnK | Role::AttnV => vec![self.hidden, kv],
            Role::AttnOutput => vec![q, self.hidden],
            Role::AttnQBias => vec![q],
            Role::AttnKBias | Role::AttnVBias => vec![kv],
            Role::FfnGate | Role::FfnUp => vec![self.hidden, self.ffn],
            Role::FfnDown => vec![self.ffn, self.hidden],
            Role::FfnGateBias | Role::FfnUpBias => vec![self.ffn],
            // An overlay's width is its own (checked when it is attached); the row length
            // is the hidden size.
            Role::FfnAddedGate | Role::FfnAddedUp | Role::FfnAddedDown => vec![self.hidden],
            Role::FfnAddedGateBias
            | Role::FfnAddedUpBias
            | Role::FfnGateScale
            | Role::FfnDownScale => vec![],
            Role::FfnGateInp => vec![self.hidden, e],
            Role::FfnGateExps | Role::FfnUpExps => vec![self.hidden, ef, e],
            Role::FfnDownExps => vec![ef, self.hidden, e],
            Role::FfnGateShexp | Role::FfnUpShexp => vec![self.hidden, sf],
            Role::FfnDownShexp => vec![sf, self.hidden],
            Role::FfnGateInpShexp => vec![self.hidden],
        }
    }
}
