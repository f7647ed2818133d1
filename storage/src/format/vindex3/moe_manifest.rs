//! `moe_manifest.json` of a bank container (seed 002 §8): what the regions of the LYRW v2
//! files mean. The manifest is the only binding of a bank to its programme (§6.2, §8.4):
//! per layer one `moe_layer` (router, selection, transforms, routed and shared banks,
//! reduction, combine), plus the `model` section this build needs to execute the bank
//! shape without a system graph (the judged execution surface and the spine's operand
//! table: embeddings, norms, attention, routers and the head, stored in one plain
//! tensor-table segment).
//!
//! Also the programme registry (§8.4: ids, names, required roles) and the capability
//! ladder (§10: representable → reference → grouped → dispatched → production) this build
//! reports per (programme, formats, grouping).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::dtype::DType;
use crate::surface::ExpertSelection;

/// The manifest schema this build writes and reads (§12: "MoE manifest schema 1").
pub const MANIFEST_SCHEMA: u32 = 1;
/// Largest `moe_manifest.json` accepted.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// The whole manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoeManifest {
    pub schema: u32,
    pub model: ManifestModel,
    /// One entry per layer, in layer order.
    pub layers: Vec<LayerEntry>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What a bank container needs beside its banks to run: the judged surface and the spine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestModel {
    /// The execution surface, verbatim (as a graph container stores it).
    pub execution_surface: Value,
    /// Container-relative path of the spine segment (plain tensor table).
    pub spine: String,
    /// Every non-bank operand: which spine tensor holds it.
    pub operands: Vec<SpineOperand>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One operand stored in the spine segment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpineOperand {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<u32>,
    pub role: String,
    /// Tensor name in the spine's table (the source's name).
    pub tensor: String,
}

/// `{"moe_layer": {...}}` (§8.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerEntry {
    pub moe_layer: MoeLayer,
}

/// One layer's programme description (§8.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MoeLayer {
    pub layer: u32,
    pub input_space: String,
    pub router: Router,
    /// `null` for a conventional MoE (pre/post transforms are not executed by this build).
    #[serde(default)]
    pub transforms: Option<Value>,
    pub routed_bank: BankRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_bank: Option<BankRef>,
    pub reduction: String,
    #[serde(default)]
    pub routed_output_norm: Option<Value>,
    pub combine: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The router: its score matrix (a spine tensor), selection and normalisation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Router {
    pub scores: String,
    pub selection: Selection,
    pub normalisation: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `{"kind": "top_k", "k": 2}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    pub kind: String,
    pub k: u32,
}

/// A bank the layer uses: which LYRW file and bank id, its programme and geometry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BankRef {
    pub bank_id: u16,
    pub experts: u32,
    pub programme: String,
    /// Container-relative path of the LYRW v2 file holding the bank.
    pub storage: String,
    pub expert_dims: ExpertDims,
    /// Experts per group extent (§7); the extent is the unit of read alignment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_width: Option<u32>,
    /// The shared expert's scalar gate (a spine tensor): output × sigmoid(gate · h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `{"input": d, "intermediate": f, "output": d}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpertDims {
    pub input: u32,
    pub intermediate: u32,
    pub output: u32,
}

/// The normalisation name a selection is written as.
pub fn normalisation_name(s: ExpertSelection) -> &'static str {
    match s {
        ExpertSelection::TopKSoftmax => "softmax_over_top_k",
        ExpertSelection::SoftmaxTopK => "softmax_then_top_k",
        ExpertSelection::SigmoidTopKNorm => "sigmoid_top_k_renormalised",
    }
}

/// The selection a normalisation name stands for.
pub fn selection_from_name(name: &str) -> Option<ExpertSelection> {
    [
        ExpertSelection::TopKSoftmax,
        ExpertSelection::SoftmaxTopK,
        ExpertSelection::SigmoidTopKNorm,
    ]
    .into_iter()
    .find(|&s| normalisation_name(s) == name)
}

/// A registered expert programme (§8.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Programme {
    pub id: u16,
    pub name: &'static str,
    /// Region role sets any one of which the programme runs on (LYRW role tags).
    pub required: &'static [&'static [u16]],
    /// Whether this build's executor runs it.
    pub executed: bool,
}

/// The programme registry of §8.4.
pub const PROGRAMMES: [Programme; 5] = [
    Programme {
        id: 0,
        name: "gated-mlp-v1",
        required: &[&[0, 1, 3]],
        executed: true,
    },
    Programme {
        id: 1,
        name: "gated-mlp-fused-fc1-v1",
        required: &[&[2, 3]],
        executed: false,
    },
    Programme {
        id: 2,
        name: "gpt-oss-expert-v1",
        required: &[&[0, 1, 3], &[2, 3]],
        executed: false,
    },
    Programme {
        id: 3,
        name: "shared-routed-mlp-v1",
        required: &[&[0, 1, 3]],
        executed: false,
    },
    Programme {
        id: 4,
        name: "latent-moe-v1",
        required: &[&[0, 1, 3, 6, 7]],
        executed: false,
    },
];

/// The programme registered under `name`.
pub fn programme(name: &str) -> Option<&'static Programme> {
    PROGRAMMES.iter().find(|p| p.name == name)
}

/// LYRW format tag (§6.4) of an encoding; `None` for encodings the registry has no tag for.
pub fn format_tag(d: DType) -> Option<u16> {
    Some(match d {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::Q4_0 => 3,
        DType::Q4_K => 4,
        DType::Q6_K => 5,
        DType::Q8_0 => 6,
        DType::MXFP4 => 8,
        DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q2_K | DType::Q3_K | DType::Q5_K => {
            return None
        }
    })
}

/// The encoding a LYRW format tag stands for, when this build knows it.
pub fn format_dtype(tag: u16) -> Option<DType> {
    [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_K,
        DType::Q6_K,
        DType::Q8_0,
        DType::MXFP4,
    ]
    .into_iter()
    .find(|&d| format_tag(d) == Some(tag))
}

/// A rung of the maturity ladder (§10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Maturity {
    /// The format describes it; no kernel of this build runs it.
    Representable,
    /// A generic reference executor runs it.
    Reference,
    /// A grouped kernel runs a whole group extent per dispatch.
    Grouped,
    /// The native kernels run it on the stored encoding, no repacking at decode time.
    Dispatched,
    /// Benchmarked and served in production.
    Production,
}

impl Maturity {
    pub fn name(self) -> &'static str {
        match self {
            Maturity::Representable => "representable",
            Maturity::Reference => "reference",
            Maturity::Grouped => "grouped",
            Maturity::Dispatched => "dispatched",
            Maturity::Production => "production",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_tags_round_trip() {
        for d in DType::ALL {
            if let Some(t) = format_tag(d) {
                assert_eq!(format_dtype(t), Some(d));
            }
        }
        assert_eq!(format_dtype(7), None);
    }

    #[test]
    fn selections_round_trip() {
        for s in [
            ExpertSelection::TopKSoftmax,
            ExpertSelection::SoftmaxTopK,
            ExpertSelection::SigmoidTopKNorm,
        ] {
            assert_eq!(selection_from_name(normalisation_name(s)), Some(s));
        }
    }
}
