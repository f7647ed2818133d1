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

/// How a block normalises its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// `x / rms(x) · w` (llama, qwen, gemma, phi3, olmo2).
    #[default]
    Rms,
    /// `(x − mean) / std · w + b`: every norm carries a bias (gpt2, gptneox).
    Layer,
}

/// Where a block's norms sit around its attention and FFN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormPlacement {
    /// `x += attn(norm(x)); x += ffn(norm(x))`.
    #[default]
    Pre,
    /// Pre and post: `x += post(attn(pre(x))); x += post(ffn(pre(x)))` (gemma2, gemma3).
    Sandwich,
    /// Post only: `x += post(attn(x)); x += post(ffn(x))` (olmo2).
    Post,
    /// One residual step for both: `x += attn(norm₁(x)) + ffn(norm₂(x))` (gptneox).
    Parallel,
}

/// A norm applied to the queries and keys before RoPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QkNorm {
    #[default]
    None,
    /// RMSNorm of each head, weights `[head_dim]` (qwen3, gemma3).
    PerHead,
    /// RMSNorm of the whole projection, weights `[n_heads × head_dim]` (olmo2).
    Whole,
}

/// The FFN's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FfnShape {
    /// `down · (act(gate · h) ∘ (up · h))`.
    #[default]
    Glu,
    /// `down · act(up · h + b_up) + b_down` (gpt2, gptneox): no gate.
    Mlp,
}

/// Layers whose attention sees only the last `window` positions (the query's own
/// included: a key at distance `d` is visible when `d < window`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SlidingWindow {
    pub window: usize,
    /// Layer `l` is windowed when `l % period < period − 1`; a period of 0 windows every
    /// layer (llama.cpp's `set_swa_pattern`).
    pub period: usize,
    /// The RoPE base of windowed layers, when it differs from the model's (gemma3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f32>,
}

impl SlidingWindow {
    /// Whether layer `l` is windowed.
    pub fn covers(&self, l: usize) -> bool {
        self.period == 0 || l % self.period < self.period - 1
    }
}

/// What the decoder block of a family computes, beyond the sizes: the one description
/// every execution path lowers (docs/families.md). Its default is the llama block:
/// pre-RMSNorm, separate Q/K/V, full RoPE, gated FFN, no softcaps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BlockSpec {
    pub norm: NormKind,
    pub placement: NormPlacement,
    pub qk_norm: QkNorm,
    /// Queries and keys are rotated (RoPE); without it positions come only from learned
    /// position embeddings.
    pub rope: bool,
    /// Dimensions of each head that RoPE rotates (the first ones); 0 = all.
    pub rotary_dims: usize,
    /// RoPE positions are multiplied by this (linear scaling: 1 / factor).
    pub rope_freq_scale: f32,
    /// Per-dimension RoPE frequency divisors are stored as an operand (`rope_freqs`,
    /// Llama 3 scaling as llama.cpp encodes it).
    pub rope_freq_factors: bool,
    /// Whether the linear scale and factors apply to windowed layers too (gemma3 keeps
    /// its local layers unscaled).
    pub rope_scale_windowed: bool,
    pub sliding: Option<SlidingWindow>,
    /// The query scale; 0 = `1 / sqrt(head_dim)`.
    pub attn_scale: f32,
    /// `cap · tanh(score / cap)` on attention scores; 0 = none.
    pub attn_softcap: f32,
    /// `cap · tanh(logit / cap)` on the output logits; 0 = none.
    pub final_softcap: f32,
    pub ffn: FfnShape,
    /// The attention output projection carries a bias.
    pub attn_out_bias: bool,
    /// An MLP FFN's up and down projections carry biases.
    pub ffn_bias: bool,
    /// Learned position embeddings are added to the token embedding (gpt2).
    pub learned_positions: bool,
}

impl Default for BlockSpec {
    fn default() -> Self {
        BlockSpec::PLAIN
    }
}

impl BlockSpec {
    /// The llama block: pre-RMSNorm, separate Q/K/V, full RoPE, gated FFN, no softcaps.
    pub const PLAIN: BlockSpec = BlockSpec {
        norm: NormKind::Rms,
        placement: NormPlacement::Pre,
        qk_norm: QkNorm::None,
        rope: true,
        rotary_dims: 0,
        rope_freq_scale: 1.0,
        rope_freq_factors: false,
        rope_scale_windowed: true,
        sliding: None,
        attn_scale: 0.0,
        attn_softcap: 0.0,
        final_softcap: 0.0,
        ffn: FfnShape::Glu,
        attn_out_bias: false,
        ffn_bias: false,
        learned_positions: false,
    };

    /// Whether this is the plain llama block.
    pub fn is_plain(&self) -> bool {
        *self == BlockSpec::default()
    }

    /// The features of this block that differ from the plain llama block, by name (for
    /// refusals and `SHOW ARCHITECTURES`).
    pub fn features(&self) -> Vec<&'static str> {
        let d = BlockSpec::default();
        let mut f = Vec::new();
        if self.norm == NormKind::Layer {
            f.push("LayerNorm");
        }
        match self.placement {
            NormPlacement::Pre => {}
            NormPlacement::Sandwich => f.push("pre+post norms"),
            NormPlacement::Post => f.push("post norms"),
            NormPlacement::Parallel => f.push("parallel residual"),
        }
        if self.qk_norm != QkNorm::None {
            f.push("Q/K norm");
        }
        if !self.rope {
            f.push("no RoPE");
        }
        if self.rotary_dims != d.rotary_dims {
            f.push("partial rotary");
        }
        if self.rope_freq_scale != 1.0 || self.rope_freq_factors {
            f.push("RoPE scaling");
        }
        if self.sliding.is_some() {
            f.push("sliding window");
        }
        if self.attn_scale != 0.0 {
            f.push("query scale");
        }
        if self.attn_softcap != 0.0 || self.final_softcap != 0.0 {
            f.push("softcap");
        }
        if self.ffn == FfnShape::Mlp {
            f.push("MLP FFN");
        }
        if self.attn_out_bias || self.ffn_bias {
            f.push("output biases");
        }
        if self.learned_positions {
            f.push("learned positions");
        }
        f
    }
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
    /// What the block computes beyond the sizes (the llama block when absent).
    #[serde(default, skip_serializing_if = "BlockSpec::is_plain")]
    pub block: BlockSpec,
}

impl ExecutionSurface {
    /// Global roles a forward pass needs: the embedding (and learned positions), the
    /// final norm (and its bias), the output head unless it is tied to the embedding, and
    /// the RoPE frequency factors when the block stores them.
    pub fn required_global_roles(&self) -> Vec<Role> {
        let b = &self.block;
        let mut roles = vec![Role::TokenEmbedding];
        if b.learned_positions {
            roles.push(Role::PositionEmbedding);
        }
        roles.push(Role::OutputNorm);
        if b.norm == NormKind::Layer {
            roles.push(Role::OutputNormBias);
        }
        if !self.tied_head {
            roles.push(Role::Output);
        }
        if b.rope_freq_factors {
            roles.push(Role::RopeFreqs);
        }
        roles
    }

    /// Roles a forward pass needs in every layer, as the block says (the Q/K/V biases
    /// only when the surface has them).
    pub fn required_layer_roles(&self) -> Vec<Role> {
        let b = &self.block;
        let pre = b.placement != NormPlacement::Post;
        let post = matches!(b.placement, NormPlacement::Sandwich | NormPlacement::Post);
        let layer_norm = b.norm == NormKind::Layer;
        let mut roles = Vec::new();
        if pre {
            roles.push(Role::AttnNorm);
            if layer_norm {
                roles.push(Role::AttnNormBias);
            }
        }
        roles.extend([Role::AttnQ, Role::AttnK, Role::AttnV, Role::AttnOutput]);
        if b.qk_norm != QkNorm::None {
            roles.extend([Role::AttnQNorm, Role::AttnKNorm]);
        }
        if b.attn_out_bias {
            roles.push(Role::AttnOutputBias);
        }
        if post {
            roles.push(Role::AttnPostNorm);
        }
        if pre {
            roles.push(Role::FfnNorm);
            if layer_norm {
                roles.push(Role::FfnNormBias);
            }
        }
        match &self.moe {
            None if b.ffn == FfnShape::Mlp => {
                roles.extend([Role::FfnUp, Role::FfnDown]);
                if b.ffn_bias {
                    roles.extend([Role::FfnUpBias, Role::FfnDownBias]);
                }
            }
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
        if post {
            roles.push(Role::FfnPostNorm);
        }
        if self.attn_bias {
            roles.extend([Role::AttnQBias, Role::AttnKBias, Role::AttnVBias]);
        }
        roles
    }

    /// The role whose rows are a dense layer's feature keys, the rows browsing scans: the
    /// gate of a gated FFN, the up projection of an MLP.
    pub fn feature_key_role(&self) -> Role {
        match self.block.ffn {
            FfnShape::Glu => Role::FfnGate,
            FfnShape::Mlp => Role::FfnUp,
        }
    }

    /// Dimensions of each head that RoPE rotates.
    pub fn rotary_dims(&self) -> usize {
        match self.block.rotary_dims {
            0 => self.head_dim,
            r => r,
        }
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
            Role::PositionEmbedding => vec![self.hidden, self.context_length],
            Role::OutputNormBias
            | Role::AttnNormBias
            | Role::FfnNormBias
            | Role::AttnOutputBias
            | Role::AttnPostNorm
            | Role::FfnPostNorm
            | Role::FfnDownBias => vec![self.hidden],
            Role::RopeFreqs => vec![self.rotary_dims() / 2],
            Role::AttnQNorm => match self.block.qk_norm {
                QkNorm::Whole => vec![q],
                _ => vec![self.head_dim],
            },
            Role::AttnKNorm => match self.block.qk_norm {
                QkNorm::Whole => vec![kv],
                _ => vec![self.head_dim],
            },
        }
    }
}
