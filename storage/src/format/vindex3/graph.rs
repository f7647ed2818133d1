//! `system_graph.json`: the SystemGraph (seed 002 §5.1, §17) — components with their
//! execution surface and operand table, logical objects `{component}.{kind}` with source
//! bindings and representations, hidden-state edges.
//!
//! Every struct keeps unknown fields in `extra`; the execution surface is kept as raw JSON
//! so fields a later build adds survive a rewrite by this one.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The graph: the semantic authority of a graph-shape container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemGraph {
    pub schema: u32,
    #[serde(default)]
    pub components: Vec<Component>,
    #[serde(default)]
    pub objects: Vec<LogicalObject>,
    #[serde(default)]
    pub edges: Vec<HiddenStateEdge>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A component: one model of the system (the text decoder, a perception tower, a drafter).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Component {
    pub id: String,
    /// `primary_text`, `perception`, `drafter`.
    pub role: String,
    #[serde(default)]
    pub source_artifact: Option<String>,
    pub num_layers: u32,
    pub hidden_size: u32,
    /// One policy per layer: the operator is explicit (no absent-means-softmax default).
    #[serde(default)]
    pub attention: Vec<AttentionLayerPolicy>,
    /// The judged execution facts (`lql_storage::ExecutionSurface`, serialised).
    #[serde(default)]
    pub execution_surface: Value,
    /// (layer, role) → object and tensor: the operand closure of the component.
    #[serde(default)]
    pub operands: Vec<OperandBinding>,
    /// Schema 6: one operation program per layer (`super::program`). Empty in containers
    /// written before the declarations; the reader then recomputes it from the surface.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub program: Vec<super::program::LayerProgram>,
    /// Schema 6: the continuation state each layer's program needs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub continuation: Vec<super::program::LayerState>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// How one layer attends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttentionLayerPolicy {
    pub layer: u32,
    /// `softmax` (the only operator this build executes).
    pub operator: String,
    /// `full` or `sliding` (then `window` positions; `super::program::attention_policy`).
    pub span: String,
    #[serde(default)]
    pub window: Option<u64>,
    /// `{"rope": {"theta": …, "pairing": "adjacent" | "half_split"}}` or `"none"`.
    pub position: Value,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Where one operand of the component lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperandBinding {
    /// Layer index for per-layer roles; absent for global roles.
    #[serde(default)]
    pub layer: Option<u32>,
    /// Role name (`attn_q`, `ffn_down`, …: `lql_storage::Role::name`).
    pub role: String,
    /// Logical object id holding the tensor.
    pub object: String,
    /// Tensor name in the object's segment tensor table.
    pub tensor: String,
    /// The tensor's name in the source checkpoint (provenance only).
    #[serde(default)]
    pub source_name: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A logical object: the stable semantic unit (`text.embedding`, `text.decoder_stack`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogicalObject {
    /// `{component}.{kind}`.
    pub id: String,
    pub component: String,
    pub kind: String,
    #[serde(default)]
    pub source_bindings: Vec<SourceBinding>,
    #[serde(default)]
    pub representations: Vec<ObjectRepresentation>,
    /// Set when the object's operand is another object's (a tied output head is the
    /// embedding): it then has no representation of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tied_to: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Which source tensors an object was encoded from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceBinding {
    pub artifact: String,
    pub tensor_prefix: String,
    pub tensors: u64,
    pub bytes: u64,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A physically present encoding of an object (the index maps `id` to segment bytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObjectRepresentation {
    /// `{object}@{encoding}`, a key of `index.json.representations`.
    pub id: String,
    pub encoding: String,
    pub fidelity: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A hidden-state tap from one component into another (drafters, MTP heads).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HiddenStateEdge {
    pub producer_component: String,
    pub producer_layers: Vec<u32>,
    pub consumer_component: String,
    pub consumer_object: String,
    #[serde(default)]
    pub block_size: Option<u32>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
