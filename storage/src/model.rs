//! `Model`: an execution surface plus operands, each a zero-copy view into a backing buffer.
//!
//! Operands are looked up by (layer, role). The executor reads them through the
//! [`OperandSource`] trait — the effective-state seam: a base `Model`, or base plus overlays
//! ([`crate::overlay::EffectiveModel`]) once edits exist, without the executor changing.
//! [`missing_for_execution`] says, in words, what a source lacks to run a forward pass.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::StorageError;
use crate::surface::ExecutionSurface;
use crate::tokenizer_spec::{TokenizerSlot, TokenizerSpec};

/// What an operand is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    TokenEmbedding,
    AttnNorm,
    AttnQ,
    AttnK,
    AttnV,
    AttnOutput,
    AttnQBias,
    AttnKBias,
    AttnVBias,
    FfnNorm,
    FfnGate,
    FfnUp,
    FfnDown,
    /// A dense FFN's gate bias, `[ffn]` (optional; compiled knowledge edits carry one).
    FfnGateBias,
    /// A dense FFN's up bias, `[ffn]` (optional; compiled knowledge edits carry one).
    FfnUpBias,
    /// A compiled overlay's added features (`crate::overlay::stored`): gate vectors,
    /// `[hidden, k]` (one row per added feature).
    FfnAddedGate,
    /// Added features' up vectors, `[hidden, k]`.
    FfnAddedUp,
    /// Added features' down vectors, `[hidden, k]`.
    FfnAddedDown,
    /// Added features' gate biases, `[k]`.
    FfnAddedGateBias,
    /// Added features' up biases, `[k]`.
    FfnAddedUpBias,
    /// A compiled overlay's per-feature gate scales, `[ffn + k]`.
    FfnGateScale,
    /// A compiled overlay's per-feature activation scales, `[ffn + k]`.
    FfnDownScale,
    OutputNorm,
    Output,
    /// The router of a bank FFN: one row of logits per expert, `[hidden, n_experts]`.
    FfnGateInp,
    /// Routed experts' gate matrices stacked, `[hidden, expert_ffn, n_experts]`.
    FfnGateExps,
    /// Routed experts' up matrices stacked, `[hidden, expert_ffn, n_experts]`.
    FfnUpExps,
    /// Routed experts' down matrices stacked, `[expert_ffn, hidden, n_experts]`.
    FfnDownExps,
    /// The shared expert's gate matrix, `[hidden, shared_ffn]`.
    FfnGateShexp,
    /// The shared expert's up matrix, `[hidden, shared_ffn]`.
    FfnUpShexp,
    /// The shared expert's down matrix, `[shared_ffn, hidden]`.
    FfnDownShexp,
    /// The shared expert's scalar gate, `[hidden]` (its output × sigmoid(gate · h)).
    FfnGateInpShexp,
    /// Learned position embeddings, `[hidden, context_length]` (gpt2).
    PositionEmbedding,
    /// The final LayerNorm's bias, `[hidden]`.
    OutputNormBias,
    /// Per-dimension RoPE frequency divisors, `[rotary_dims / 2]` (Llama 3 scaling).
    RopeFreqs,
    /// The attention LayerNorm's bias, `[hidden]`.
    AttnNormBias,
    /// The FFN LayerNorm's bias, `[hidden]`.
    FfnNormBias,
    /// The query norm's weights, `[head_dim]` per head or `[n_heads × head_dim]` whole.
    AttnQNorm,
    /// The key norm's weights, `[head_dim]` per head or `[n_kv_heads × head_dim]` whole.
    AttnKNorm,
    /// The attention output projection's bias, `[hidden]`.
    AttnOutputBias,
    /// The norm after attention, `[hidden]` (gemma2/3, olmo2).
    AttnPostNorm,
    /// The norm after the FFN, `[hidden]` (gemma2/3, olmo2).
    FfnPostNorm,
    /// An MLP FFN's down projection bias, `[hidden]`.
    FfnDownBias,
}

impl Role {
    pub const ALL: [Role; 43] = [
        Role::TokenEmbedding,
        Role::AttnNorm,
        Role::AttnQ,
        Role::AttnK,
        Role::AttnV,
        Role::AttnOutput,
        Role::AttnQBias,
        Role::AttnKBias,
        Role::AttnVBias,
        Role::FfnNorm,
        Role::FfnGate,
        Role::FfnUp,
        Role::FfnDown,
        Role::FfnGateBias,
        Role::FfnUpBias,
        Role::FfnAddedGate,
        Role::FfnAddedUp,
        Role::FfnAddedDown,
        Role::FfnAddedGateBias,
        Role::FfnAddedUpBias,
        Role::FfnGateScale,
        Role::FfnDownScale,
        Role::OutputNorm,
        Role::Output,
        Role::FfnGateInp,
        Role::FfnGateExps,
        Role::FfnUpExps,
        Role::FfnDownExps,
        Role::FfnGateShexp,
        Role::FfnUpShexp,
        Role::FfnDownShexp,
        Role::FfnGateInpShexp,
        Role::PositionEmbedding,
        Role::OutputNormBias,
        Role::RopeFreqs,
        Role::AttnNormBias,
        Role::FfnNormBias,
        Role::AttnQNorm,
        Role::AttnKNorm,
        Role::AttnOutputBias,
        Role::AttnPostNorm,
        Role::FfnPostNorm,
        Role::FfnDownBias,
    ];

    /// Roles stored once per model rather than once per layer.
    pub const GLOBAL: [Role; 6] = [
        Role::TokenEmbedding,
        Role::OutputNorm,
        Role::Output,
        Role::PositionEmbedding,
        Role::OutputNormBias,
        Role::RopeFreqs,
    ];

    /// snake_case name, as written in containers and shown to users.
    pub fn name(self) -> &'static str {
        match self {
            Role::TokenEmbedding => "token_embedding",
            Role::AttnNorm => "attn_norm",
            Role::AttnQ => "attn_q",
            Role::AttnK => "attn_k",
            Role::AttnV => "attn_v",
            Role::AttnOutput => "attn_output",
            Role::AttnQBias => "attn_q_bias",
            Role::AttnKBias => "attn_k_bias",
            Role::AttnVBias => "attn_v_bias",
            Role::FfnNorm => "ffn_norm",
            Role::FfnGate => "ffn_gate",
            Role::FfnUp => "ffn_up",
            Role::FfnDown => "ffn_down",
            Role::FfnGateBias => "ffn_gate_bias",
            Role::FfnUpBias => "ffn_up_bias",
            Role::FfnAddedGate => "ffn_added_gate",
            Role::FfnAddedUp => "ffn_added_up",
            Role::FfnAddedDown => "ffn_added_down",
            Role::FfnAddedGateBias => "ffn_added_gate_bias",
            Role::FfnAddedUpBias => "ffn_added_up_bias",
            Role::FfnGateScale => "ffn_gate_scale",
            Role::FfnDownScale => "ffn_down_scale",
            Role::OutputNorm => "output_norm",
            Role::Output => "output",
            Role::FfnGateInp => "ffn_gate_inp",
            Role::FfnGateExps => "ffn_gate_exps",
            Role::FfnUpExps => "ffn_up_exps",
            Role::FfnDownExps => "ffn_down_exps",
            Role::FfnGateShexp => "ffn_gate_shexp",
            Role::FfnUpShexp => "ffn_up_shexp",
            Role::FfnDownShexp => "ffn_down_shexp",
            Role::FfnGateInpShexp => "ffn_gate_inp_shexp",
            Role::PositionEmbedding => "position_embedding",
            Role::OutputNormBias => "output_norm_bias",
            Role::RopeFreqs => "rope_freqs",
            Role::AttnNormBias => "attn_norm_bias",
            Role::FfnNormBias => "ffn_norm_bias",
            Role::AttnQNorm => "attn_q_norm",
            Role::AttnKNorm => "attn_k_norm",
            Role::AttnOutputBias => "attn_output_bias",
            Role::AttnPostNorm => "attn_post_norm",
            Role::FfnPostNorm => "ffn_post_norm",
            Role::FfnDownBias => "ffn_down_bias",
        }
    }

    /// Roles of a compiled overlay (`crate::overlay::stored`): never required, their
    /// shapes checked against each other when the overlay is attached.
    pub fn is_overlay(self) -> bool {
        matches!(
            self,
            Role::FfnAddedGate
                | Role::FfnAddedUp
                | Role::FfnAddedDown
                | Role::FfnAddedGateBias
                | Role::FfnAddedUpBias
                | Role::FfnGateScale
                | Role::FfnDownScale
        )
    }

    /// Optional roles a dense layer may carry beside the required ones.
    pub fn is_optional(self) -> bool {
        self.is_overlay() || matches!(self, Role::FfnGateBias | Role::FfnUpBias)
    }

    /// The logical object (seed 002 §5.3: `{component}.{kind}`) an operand of this role
    /// belongs to.
    pub fn object(self) -> &'static str {
        match self {
            Role::TokenEmbedding | Role::PositionEmbedding => "text.embedding",
            Role::OutputNorm | Role::OutputNormBias => "text.final_norm",
            Role::Output => "text.output_head",
            _ => "text.decoder_stack",
        }
    }
}

/// Identifies one operand: a role, in a layer for per-layer roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OperandKey {
    pub layer: Option<usize>,
    pub role: Role,
}

impl OperandKey {
    pub fn global(role: Role) -> Self {
        OperandKey { layer: None, role }
    }
    pub fn layer(layer: usize, role: Role) -> Self {
        OperandKey {
            layer: Some(layer),
            role,
        }
    }
}

impl std::fmt::Display for OperandKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.layer {
            Some(l) => write!(f, "{} of layer {l}", self.role.name()),
            None => f.write_str(self.role.name()),
        }
    }
}

/// A borrowed tensor: encoding, shape in ggml order (`shape[0]` = elements per row) and the
/// encoded bytes, borrowed from the backing buffer.
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    pub dtype: DType,
    pub shape: &'a [usize],
    pub bytes: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// Elements per row (`shape[0]`).
    pub fn row_len(&self) -> usize {
        self.shape.first().copied().unwrap_or(1)
    }
    /// Number of rows (product of `shape[1..]`).
    pub fn rows(&self) -> usize {
        self.shape.iter().skip(1).product()
    }
    /// Encoded bytes of one row.
    pub fn row_bytes(&self) -> usize {
        // Shapes are validated at open: every row is a whole number of blocks.
        self.row_len() / self.dtype.block_elems() * self.dtype.block_bytes()
    }
    /// The encoded bytes of row `i`.
    pub fn row(&self, i: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.bytes[i * rb..(i + 1) * rb]
    }
}

/// Memory an operand's bytes live in.
#[derive(Debug, Clone)]
pub enum Backing {
    Mmap(Arc<memmap2::Mmap>),
    Owned(Arc<Vec<u8>>),
}

impl Backing {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// Where an operand lives: which backing, at which byte range, and its source name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operand {
    /// The tensor's name in its source (e.g. `blk.0.attn_q.weight`).
    pub source_name: String,
    pub dtype: DType,
    /// ggml order: `shape[0]` is the row length.
    pub shape: Vec<usize>,
    pub backing: usize,
    pub offset: usize,
    pub len: usize,
}

/// What kind of artifact a model was opened from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    Gguf,
    Safetensors,
    Vindex3,
}

/// A model file whose architecture LQL cannot run yet, opened for inspection: its tensor
/// table as stored. Statements that need the forward pass or the FFN gates refuse it,
/// naming the architecture and the supported ones; SHOW TENSORS, SELECT FROM tensors and
/// STATS read its tensors.
#[derive(Debug, Clone)]
pub struct Uninterpreted {
    /// `general.architecture` as the file states it.
    pub architecture: String,
    /// Why it cannot run, with the supported architectures.
    pub reason: String,
    /// Every tensor as stored (no role: LQL does not know what this family's names mean).
    pub tensors: Vec<Operand>,
}

/// A model ready to execute or browse: surface, tokenizer, operands.
#[derive(Debug, Clone)]
pub struct Model {
    pub path: PathBuf,
    pub kind: SourceKind,
    pub surface: ExecutionSurface,
    /// The tokenizer spec, built on first use: call [`Model::tokenizer_spec`].
    pub tokenizer: TokenizerSlot,
    pub operands: BTreeMap<OperandKey, Operand>,
    pub backings: Vec<Backing>,
    /// Operands the source declares but this binding leaves out, with the reason (a bank
    /// container's region a programme requires and the bank lacks, an encoding not
    /// supported yet, …): naming layer, bank, role and segment. Empty for most sources.
    pub absent: BTreeMap<OperandKey, String>,
    /// A compiled overlay stored with the model (per layer; empty for a plain model),
    /// built from its overlay operands at open (`crate::overlay::stored::attach`).
    pub overlays: BTreeMap<usize, crate::overlay::LayerOverlay>,
    /// Set for a file of an architecture LQL cannot run: then `operands` is empty and
    /// `surface` holds only what the metadata states (zeros where it states nothing).
    pub uninterpreted: Option<Uninterpreted>,
}

/// The effective-state seam: anything the executor can read operands from.
pub trait OperandSource: Send + Sync {
    fn surface(&self) -> &ExecutionSurface;
    fn view(&self, key: OperandKey) -> Option<TensorView<'_>>;

    /// The operand, or an error naming what is missing.
    fn require(&self, key: OperandKey) -> Result<TensorView<'_>, StorageError> {
        self.view(key).ok_or_else(|| StorageError::MissingOperand {
            key: key.to_string(),
        })
    }

    /// The overlay edits put on `layer`'s FFN (added features, feature scales), if any.
    /// A base model has none.
    fn ffn_overlay(&self, _layer: usize) -> Option<&crate::overlay::LayerOverlay> {
        None
    }

    /// Records that an operator read `bytes` in `dtype` of an operand it took in parts (the
    /// experts of a bank it routed to, the rows of a table it gathered). A metered source
    /// counts them (`meter::Metered`); others ignore them.
    fn record_read(&self, _dtype: crate::DType, _bytes: u64) {}
}

/// The operands `src` lacks to run a forward pass, grouped per role ("attn_q of layers
/// 0-29"), the global ones first. Empty when it can run.
pub fn missing_for_execution(src: &dyn OperandSource) -> Vec<String> {
    let s = src.surface();
    let mut out = Vec::new();
    for role in s.required_global_roles() {
        if src.view(OperandKey::global(role)).is_none() {
            out.push(role.name().to_string());
        }
    }
    for role in s.required_layer_roles() {
        let absent: Vec<usize> = (0..s.n_layers)
            .filter(|&l| src.view(OperandKey::layer(l, role)).is_none())
            .collect();
        if !absent.is_empty() {
            out.push(format!("{} of {}", role.name(), layer_list(&absent)));
        }
    }
    out
}

/// "layer 3", "layers 0-29", "layers 0-3, 7".
pub fn layer_list(layers: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < layers.len() {
        let mut j = i;
        while j + 1 < layers.len() && layers[j + 1] == layers[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            layers[i].to_string()
        } else {
            format!("{}-{}", layers[i], layers[j])
        });
        i = j + 1;
    }
    let word = if layers.len() == 1 { "layer" } else { "layers" };
    format!("{word} {}", parts.join(", "))
}

impl Model {
    /// Open any supported source (GGUF file, Hugging Face folder, VINDEX3 container):
    /// shorthand for [`crate::import::open`].
    pub fn open(path: &std::path::Path) -> Result<Model, StorageError> {
        crate::import::open(path)
    }

    /// Refuse when a file this model maps changed (size, mtime or inode) since it was
    /// opened: "model file changed since USE: re-bind", naming the file. Call it before
    /// each statement that reads operands.
    pub fn check_unchanged(&self) -> Result<(), StorageError> {
        crate::mapped::check_backings(&self.backings)
    }

    /// The tokenizer spec (decoded from the source on first call, then shared).
    pub fn tokenizer_spec(&self) -> Result<Arc<TokenizerSpec>, StorageError> {
        self.tokenizer.get()
    }

    /// The operand stored under `key`, with its source name and location.
    pub fn operand(&self, key: OperandKey) -> Option<&Operand> {
        self.operands.get(&key)
    }

    /// The view of an operand that exists in this model.
    pub fn view_of<'a>(&'a self, op: &'a Operand) -> TensorView<'a> {
        TensorView {
            dtype: op.dtype,
            shape: &op.shape,
            bytes: &self.backings[op.backing].bytes()[op.offset..op.offset + op.len],
        }
    }
}

impl OperandSource for Model {
    fn surface(&self) -> &ExecutionSurface {
        &self.surface
    }
    fn view(&self, key: OperandKey) -> Option<TensorView<'_>> {
        self.operands.get(&key).map(|op| self.view_of(op))
    }
    /// An operand the binding left out says why (an encoding this build cannot decode, a
    /// bank region absent) rather than only that it is missing.
    fn require(&self, key: OperandKey) -> Result<TensorView<'_>, StorageError> {
        if let Some(op) = self.operands.get(&key) {
            return Ok(self.view_of(op));
        }
        Err(match self.absent.get(&key) {
            Some(why) => StorageError::Unsupported(why.clone()),
            None => StorageError::MissingOperand {
                key: key.to_string(),
            },
        })
    }
    fn ffn_overlay(&self, layer: usize) -> Option<&crate::overlay::LayerOverlay> {
        self.overlays.get(&layer)
    }
}

#[cfg(test)]
mod tests {
    use super::layer_list;

    #[test]
    fn layer_lists() {
        assert_eq!(layer_list(&[3]), "layer 3");
        assert_eq!(layer_list(&[0, 1, 2, 5, 7, 8]), "layers 0-2, 5, 7-8");
    }
}
