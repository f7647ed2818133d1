//! Artifact-only answers (seed 002 §18.12–18.20): INSPECT (the container reconstructed
//! from itself), DESCRIBE OBJECT, PRECISION — from `index.json`, the graph and segment
//! headers, without binding a model or mapping a payload ([`super::meter`] counts what
//! is read). Bits per weight are derived from each tensor's declared encoding and shape
//! (`DType::bytes_for`), never read from a recorded length or field.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::index::{resolve, Authority, ContainerShape};
use super::inspect::{show_components, show_representations, ComponentRow, RepresentationRow};
use super::reader::Container;
use super::segment::read_header;
use super::variants;
use crate::dtype::DType;
use crate::error::{Result, StorageError};

/// One profile with its derived authority.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProfileRow {
    pub profile: String,
    /// object → variant name.
    pub select: BTreeMap<String, String>,
    /// The weakest fidelity of its selections (or the refusal, when it cannot bind).
    pub authority: String,
    pub standard: bool,
}

/// INSPECT: the container as it describes itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inspection {
    pub path: String,
    pub generation: String,
    pub index_version: u32,
    pub shape: String,
    pub graph_schema: Option<u32>,
    pub model: String,
    pub family: String,
    pub authority: String,
    pub derived_from_model: Option<String>,
    pub provenance_chain: Vec<String>,
    pub num_layers: u32,
    pub hidden_size: u32,
    pub components: Vec<ComponentJson>,
    pub representations: Vec<RepresentationJson>,
    pub profiles: Vec<ProfileRow>,
    pub capabilities: Vec<String>,
    /// Segment files the index lists (bank shape: with their declared codec).
    pub segments: BTreeMap<String, Value>,
    /// Stored feature labels (derived browse metadata), when the container carries them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feature_labels: Option<super::labels::FeatureLabelsEntry>,
}

/// A component, for JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComponentJson {
    pub id: String,
    pub role: String,
    pub num_layers: u32,
    pub hidden_size: u32,
    pub objects: String,
    pub operands: usize,
    pub source_artifact: String,
}

impl From<ComponentRow> for ComponentJson {
    fn from(c: ComponentRow) -> Self {
        ComponentJson {
            id: c.id,
            role: c.role,
            num_layers: c.num_layers,
            hidden_size: c.hidden_size,
            objects: c.objects,
            operands: c.operands,
            source_artifact: c.source_artifact,
        }
    }
}

/// A representation, for JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RepresentationJson {
    pub object: String,
    pub representation: String,
    pub encoding: String,
    pub fidelity: String,
    pub segment: String,
    pub tensors: u64,
    pub payload_bytes: u64,
    pub payload_sha256: String,
    pub baseline: bool,
}

impl From<RepresentationRow> for RepresentationJson {
    fn from(r: RepresentationRow) -> Self {
        RepresentationJson {
            object: r.object,
            representation: r.representation,
            encoding: r.encoding,
            fidelity: r.fidelity,
            segment: r.segment,
            tensors: r.tensors,
            payload_bytes: r.payload_bytes,
            payload_sha256: r.payload_sha256,
            baseline: r.selected,
        }
    }
}

/// The profiles of a container with their derived authority.
pub fn profiles(dir: &Path) -> Result<Vec<ProfileRow>> {
    let c = Container::load(dir)?;
    let list = variants::profiles(dir, &c.index)?;
    Ok(list
        .into_iter()
        .map(|p| ProfileRow {
            authority: match c.profile_authority(Some(&p.name)) {
                Ok(a) => a,
                Err(e) => format!("refused: {e}"),
            },
            standard: variants::STANDARD_PROFILES.contains(&p.name.as_str()),
            select: p.select,
            profile: p.name,
        })
        .collect())
}

/// INSPECT "c".
pub fn inspect(dir: &Path) -> Result<Inspection> {
    let c = Container::load(dir)?;
    let graph = c.shape == ContainerShape::Graph;
    let chain = c
        .index
        .extra
        .get("provenance")
        .and_then(|p| p.get("chain"))
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Ok(Inspection {
        path: dir.display().to_string(),
        generation: "VINDEX3".into(),
        index_version: c.index.version,
        shape: c.shape.name().into(),
        graph_schema: c.graph.as_ref().map(|g| g.schema),
        model: c.index.model.clone(),
        family: c.index.family.clone(),
        authority: match c.index.authority {
            Authority::Canonical => "canonical".into(),
            Authority::Derived => "derived".into(),
        },
        derived_from_model: c.index.derived_from_model.clone(),
        provenance_chain: chain,
        num_layers: c.index.num_layers,
        hidden_size: c.index.hidden_size,
        components: if graph {
            show_components(dir)?.into_iter().map(Into::into).collect()
        } else {
            Vec::new()
        },
        representations: if graph {
            show_representations(dir)?
                .into_iter()
                .map(Into::into)
                .collect()
        } else {
            Vec::new()
        },
        profiles: if graph { profiles(dir)? } else { Vec::new() },
        capabilities: c.index.capabilities.keys().cloned().collect(),
        segments: c.index.segments.clone(),
        feature_labels: c.index.feature_labels.clone(),
    })
}

/// One tensor of an object's representation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObjectTensor {
    pub representation: String,
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    pub bytes: u64,
    /// Operands bound to this tensor (`layer.role`, or `role` for global ones).
    pub operands: Vec<String>,
}

/// DESCRIBE OBJECT "c" "obj".
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObjectDescription {
    pub id: String,
    pub component: String,
    pub kind: String,
    pub tied_to: Option<String>,
    pub source_bindings: Vec<Value>,
    pub representations: Vec<RepresentationJson>,
    pub tensors: Vec<ObjectTensor>,
}

/// DESCRIBE OBJECT: an object's bindings, representations and tensor tables (segment
/// headers only).
pub fn describe_object(dir: &Path, object: &str) -> Result<ObjectDescription> {
    let c = Container::load(dir)?;
    let g = c.require_graph("DESCRIBE OBJECT")?;
    let o = g.objects.iter().find(|o| o.id == object).ok_or_else(|| {
        StorageError::Invalid(format!(
            "{}: no object {object:?}; objects: {:?}",
            dir.display(),
            g.objects.iter().map(|o| o.id.as_str()).collect::<Vec<_>>()
        ))
    })?;
    let reps: Vec<RepresentationJson> = show_representations(dir)?
        .into_iter()
        .filter(|r| r.object == object)
        .map(Into::into)
        .collect();
    let mut tensors = Vec::new();
    for r in &reps {
        let e = &c.index.representations[&r.representation];
        let parsed = read_header(&resolve(dir, &e.segment, "representations.segment")?)?;
        for (at, t) in parsed.header.tensors.into_iter().enumerate() {
            crate::interrupt::every(at as u64, || format!("{}: tensors", e.segment))?;
            let operands = g
                .components
                .iter()
                .flat_map(|comp| comp.operands.iter())
                .filter(|b| b.object == object && b.tensor == t.name)
                .map(|b| match b.layer {
                    Some(l) => format!("{l}.{}", b.role),
                    None => b.role.clone(),
                })
                .collect();
            tensors.push(ObjectTensor {
                representation: r.representation.clone(),
                name: t.name,
                dtype: t.dtype,
                shape: t.shape,
                bytes: t.len,
                operands,
            });
        }
    }
    Ok(ObjectDescription {
        id: o.id.clone(),
        component: o.component.clone(),
        kind: o.kind.clone(),
        tied_to: o.tied_to.clone(),
        source_bindings: o
            .source_bindings
            .iter()
            .map(|b| serde_json::to_value(b).unwrap_or(Value::Null))
            .collect(),
        representations: reps,
        tensors,
    })
}

/// One PRECISION row: an object's representation, or the total (`object` = `TOTAL`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrecisionRow {
    pub object: String,
    pub representation: String,
    /// Encodings present, with their weight counts (`Q8_0×12288, F32×64`).
    pub encodings: String,
    pub weights: u64,
    /// Bytes the encodings imply for those weights.
    pub bytes: u64,
    /// `8 * bytes / weights`; `None` when an encoding is unknown to this build.
    pub bits_per_weight: Option<f64>,
    pub baseline: bool,
}

/// PRECISION: bits per weight of every representation, derived from its tensors'
/// encodings and shapes, and the total over the baseline selection.
pub fn precision(dir: &Path) -> Result<Vec<PrecisionRow>> {
    let c = Container::load(dir)?;
    c.require_graph("PRECISION")?;
    let mut rows = Vec::new();
    let (mut total_w, mut total_b, mut total_known) = (0u64, 0u64, true);
    for (id, e) in &c.index.representations {
        let parsed = read_header(&resolve(dir, &e.segment, "representations.segment")?)?;
        let mut by_enc: std::collections::BTreeMap<String, u64> = Default::default();
        let (mut weights, mut bytes, mut known) = (0u64, 0u64, true);
        for (at, t) in parsed.header.tensors.iter().enumerate() {
            crate::interrupt::every(at as u64, || format!("{id}: tensors"))?;
            let n = t
                .shape
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .unwrap_or(u64::MAX);
            weights = weights.saturating_add(n);
            *by_enc.entry(t.dtype.clone()).or_default() += n;
            match DType::from_name(&t.dtype).and_then(|d| d.bytes_for(n)) {
                Some(b) => bytes = bytes.saturating_add(b),
                None => known = false,
            }
        }
        let baseline = c.selected_representation(&e.object).as_deref() == Some(id.as_str());
        if baseline {
            total_w = total_w.saturating_add(weights);
            total_b = total_b.saturating_add(bytes);
            total_known &= known;
        }
        rows.push(PrecisionRow {
            object: e.object.clone(),
            representation: id.clone(),
            encodings: by_enc
                .iter()
                .map(|(k, n)| format!("{k}×{n}"))
                .collect::<Vec<_>>()
                .join(", "),
            weights,
            bytes,
            bits_per_weight: (known && weights > 0).then(|| 8.0 * bytes as f64 / weights as f64),
            baseline,
        });
    }
    rows.push(PrecisionRow {
        object: "TOTAL".into(),
        representation: "(baseline selection)".into(),
        encodings: String::new(),
        weights: total_w,
        bytes: total_b,
        bits_per_weight: (total_known && total_w > 0)
            .then(|| 8.0 * total_b as f64 / total_w as f64),
        baseline: true,
    });
    Ok(rows)
}
