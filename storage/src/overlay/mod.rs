//! The effective model state: a base [`Model`] plus an ordered stack of patches, read by the
//! executor through [`OperandSource`] exactly like the base (docs/editing.md).
//!
//! ```text
//!  EffectiveModel { base: Arc<Model>, patches: [Patch…] (oldest first), version }
//!        │ view(key)         → the base operand, untouched (base files are never written)
//!        │ ffn_overlay(layer) → LayerOverlay: added gated features + per-feature scales
//! ```
//!
//! An edit is one of [`Edit::Add`] (a new gated FFN feature computed beside the base FFN:
//! gate row, up row, down column, two biases) or [`Edit::Scale`] (a feature's gate
//! pre-activation and/or its activation multiplied by a factor; 0 ablates it). Added features
//! are numbered after the base features of their layer (`ffn + i`, in stack order).
//! Every `EffectiveModel` gets a fresh [`EffectiveModel::version`], so caches keyed on it
//! never serve a value computed from another state. Readers for DIFF/COMPILE:
//! [`EffectiveModel::layers`], [`EffectiveModel::patches`].

pub mod derive;
pub mod material;
pub mod patch;
pub mod stored;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::model::{Model, OperandKey, OperandSource, TensorView};
use crate::surface::ExecutionSurface;

/// The largest magnitude of a feature's gate or down scale, alone or composed over a
/// patch stack (`UPDATE` refuses more; docs/security.md).
pub const MAX_SCALE: f32 = 1e6;
/// The largest magnitude of a value in an added feature's vectors and biases as a patch
/// file holds them (edits write values many orders below; f32 overflows near 3.4e38).
pub const MAX_VALUE: f32 = 1e9;

/// The knowledge edge an added feature was inserted for (what `SELECT FROM edges` lists).
#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub entity: String,
    pub relation: String,
    pub target: String,
    /// The prompt the feature was keyed and scaled on.
    pub prompt: String,
}

/// A gated FFN feature added beside a layer's base FFN:
/// `ffn_delta += act(gate·x + gate_bias) · (up·x + up_bias) · down`, `x` the normed FFN input.
#[derive(Debug, Clone, PartialEq)]
pub struct AddedFeature {
    pub layer: usize,
    pub gate: Vec<f32>,
    pub gate_bias: f32,
    pub up: Vec<f32>,
    pub up_bias: f32,
    pub down: Vec<f32>,
    pub edge: Option<Edge>,
}

/// Multiplies feature `feature` of `layer`: its gate pre-activation by `gate_scale` (before
/// the activation function) and its activation by `down_scale` (before the down projection).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FeatureScale {
    pub layer: usize,
    pub feature: usize,
    pub gate_scale: Option<f32>,
    pub down_scale: Option<f32>,
}

/// One edit in a patch.
#[derive(Debug, Clone, PartialEq)]
pub enum Edit {
    Add(AddedFeature),
    Scale(FeatureScale),
}

impl Edit {
    pub fn layer(&self) -> usize {
        match self {
            Edit::Add(a) => a.layer,
            Edit::Scale(s) => s.layer,
        }
    }
}

/// Where a patch came from.
#[derive(Debug, Clone, PartialEq)]
pub enum PatchOrigin {
    /// The connection's unsaved session patch.
    Session,
    /// Being recorded after `BEGIN PATCH path`, not yet saved.
    Open(String),
    /// Read from or saved to a file; `sha256` of the file's bytes.
    File { path: String, sha256: [u8; 32] },
    /// An applied file changed in memory (DELETE or UPDATE FROM edges took edges out of
    /// it): its `version`th state, 2 after the first change, derived from the file whose
    /// bytes hash to `from_sha256`. The file is left as it was, so its hash is not this
    /// state's.
    Edited {
        path: String,
        from_sha256: [u8; 32],
        version: u32,
    },
}

/// An ordered list of edits with its origin.
#[derive(Debug, Clone, PartialEq)]
pub struct Patch {
    pub origin: PatchOrigin,
    pub edits: Vec<Edit>,
}

impl Patch {
    /// The name `SHOW PATCHES` and `SELECT FROM edges` give it.
    pub fn name(&self) -> String {
        match &self.origin {
            PatchOrigin::Session => "(session)".to_string(),
            PatchOrigin::Open(p) => p.clone(),
            PatchOrigin::File { path, .. } | PatchOrigin::Edited { path, .. } => path.clone(),
        }
    }
}

/// One layer's overlay, compiled from the patch stack for the forward pass: added features as
/// row-major `[k × hidden]` matrices and the scales as dense per-feature factors (`1.0` =
/// untouched; indices `ffn..` address added features).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LayerOverlay {
    pub hidden: usize,
    /// Base FFN width of the layer.
    pub ffn: usize,
    pub gate: Vec<f32>,
    pub gate_bias: Vec<f32>,
    pub up: Vec<f32>,
    pub up_bias: Vec<f32>,
    pub down: Vec<f32>,
    /// `None` when no feature's gate is scaled.
    pub gate_scale: Option<Vec<f32>>,
    /// `None` when no feature's activation is scaled.
    pub down_scale: Option<Vec<f32>>,
}

impl LayerOverlay {
    /// Added features in this layer.
    pub fn added(&self) -> usize {
        self.gate_bias.len()
    }
    /// Features in this layer, base and added.
    pub fn width(&self) -> usize {
        self.ffn + self.added()
    }
}

static NEXT_VERSION: AtomicU64 = AtomicU64::new(1);

/// Base model + patch stack: what every statement reads once an edit exists.
#[derive(Debug, Clone)]
pub struct EffectiveModel {
    base: Arc<Model>,
    patches: Vec<Patch>,
    layers: BTreeMap<usize, LayerOverlay>,
    version: u64,
}

impl EffectiveModel {
    /// Builds the state for `patches` (oldest first) over `base`. A feature's composed
    /// scale beyond ±[`MAX_SCALE`] is refused. Edits naming a layer or a
    /// feature the model does not have, or vectors of the wrong length, are refused.
    pub fn new(base: Arc<Model>, patches: Vec<Patch>) -> Result<EffectiveModel, String> {
        let s = &base.surface;
        let (d, ff) = (s.hidden, s.ffn);
        // A compiled overlay stored with the base comes first; patches build on it.
        let mut layers: BTreeMap<usize, LayerOverlay> = base.overlays.clone();
        let new_layer = || LayerOverlay {
            hidden: d,
            ffn: ff,
            ..Default::default()
        };
        // Added features first (their indices must exist before a scale can address them).
        for e in patches.iter().flat_map(|p| &p.edits) {
            if let Edit::Add(a) = e {
                if a.layer >= s.n_layers {
                    return Err(format!(
                        "an added feature names layer {} of a {}-layer model",
                        a.layer, s.n_layers
                    ));
                }
                if a.gate.len() != d || a.up.len() != d || a.down.len() != d {
                    return Err(format!(
                        "an added feature at layer {} has vectors of {}/{}/{} values; the model's hidden size is {d}",
                        a.layer,
                        a.gate.len(),
                        a.up.len(),
                        a.down.len()
                    ));
                }
                let lo = layers.entry(a.layer).or_insert_with(new_layer);
                lo.gate.extend_from_slice(&a.gate);
                lo.gate_bias.push(a.gate_bias);
                lo.up.extend_from_slice(&a.up);
                lo.up_bias.push(a.up_bias);
                lo.down.extend_from_slice(&a.down);
                let w = lo.width();
                for s in [&mut lo.gate_scale, &mut lo.down_scale]
                    .into_iter()
                    .flatten()
                {
                    s.resize(w, 1.0);
                }
            }
        }
        for e in patches.iter().flat_map(|p| &p.edits) {
            if let Edit::Scale(sc) = e {
                if sc.layer >= s.n_layers {
                    return Err(format!(
                        "a feature scale names layer {} of a {}-layer model",
                        sc.layer, s.n_layers
                    ));
                }
                let lo = layers.entry(sc.layer).or_insert_with(new_layer);
                let w = lo.width();
                if sc.feature >= w {
                    return Err(format!(
                        "a feature scale names feature {} of layer {}, which has {w}",
                        sc.feature, sc.layer
                    ));
                }
                for (name, given, scales) in [
                    ("gate_scale", sc.gate_scale, &mut lo.gate_scale),
                    ("down_scale", sc.down_scale, &mut lo.down_scale),
                ] {
                    let Some(g) = given else { continue };
                    let v = &mut scales.get_or_insert_with(|| vec![1.0; w])[sc.feature];
                    *v *= g;
                    // Scales compose by product: a stack of in-range scales may still leave
                    // the range a forward pass can carry without overflowing.
                    if !(v.is_finite() && v.abs() <= MAX_SCALE) {
                        return Err(format!(
                            "feature {}:{}'s {name} composes to {v}, beyond ±{MAX_SCALE:e}",
                            sc.layer, sc.feature
                        ));
                    }
                }
            }
        }
        Ok(EffectiveModel {
            base,
            patches,
            layers,
            version: NEXT_VERSION.fetch_add(1, Ordering::Relaxed),
        })
    }

    pub fn base(&self) -> &Arc<Model> {
        &self.base
    }
    /// The patch stack, oldest first (origins carry the sha256 of saved patch files).
    pub fn patches(&self) -> &[Patch] {
        &self.patches
    }
    /// Per-layer overlays, by layer.
    pub fn layers(&self) -> &BTreeMap<usize, LayerOverlay> {
        &self.layers
    }
    /// Unique to this state within the process.
    pub fn version(&self) -> u64 {
        self.version
    }
    /// Whether any edit is in force.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
    /// FFN width of `layer` in the effective state (base + added features).
    pub fn ffn_width(&self, layer: usize) -> usize {
        self.layers
            .get(&layer)
            .map_or(self.base.surface.ffn, |l| l.width())
    }
    /// The added features in force, in stack order, with their feature index in their layer
    /// and the name of the patch holding them.
    pub fn added_features(&self) -> Vec<(usize, &AddedFeature, String)> {
        let ff = self.base.surface.ffn;
        // Features a stored overlay of the base added come before the patches'.
        let mut next: BTreeMap<usize, usize> = self
            .base
            .overlays
            .iter()
            .map(|(l, o)| (*l, o.width()))
            .collect();
        let mut out = Vec::new();
        for p in &self.patches {
            for e in &p.edits {
                if let Edit::Add(a) = e {
                    let n = next.entry(a.layer).or_insert(ff);
                    out.push((*n, a, p.name()));
                    *n += 1;
                }
            }
        }
        out
    }
}

impl OperandSource for EffectiveModel {
    fn surface(&self) -> &ExecutionSurface {
        &self.base.surface
    }
    fn view(&self, key: OperandKey) -> Option<TensorView<'_>> {
        self.base.view(key)
    }
    fn ffn_overlay(&self, layer: usize) -> Option<&LayerOverlay> {
        self.layers.get(&layer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::gguf::synth::TinyModel;

    fn tiny() -> Arc<Model> {
        // The mapping outlives the folder: the file is unlinked when `dir` drops.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tiny.gguf");
        TinyModel::llama().write(&p).unwrap();
        Arc::new(Model::open(&p).unwrap())
    }

    fn add(layer: usize, d: usize) -> Edit {
        Edit::Add(AddedFeature {
            layer,
            gate: vec![1.0; d],
            gate_bias: 0.0,
            up: vec![0.0; d],
            up_bias: 1.0,
            down: vec![0.5; d],
            edge: None,
        })
    }

    #[test]
    fn states_number_added_features_and_refuse_what_the_model_lacks() {
        let m = tiny();
        let (d, ff, n) = (m.surface.hidden, m.surface.ffn, m.surface.n_layers);
        let patch = |edits| Patch {
            origin: PatchOrigin::Session,
            edits,
        };
        let scale = |feature| {
            Edit::Scale(FeatureScale {
                layer: 0,
                feature,
                gate_scale: None,
                down_scale: Some(0.0),
            })
        };
        let s = EffectiveModel::new(m.clone(), vec![patch(vec![add(0, d), scale(ff)])]).unwrap();
        assert_eq!(s.ffn_width(0), ff + 1);
        assert_eq!(s.added_features()[0].0, ff);
        assert_eq!(s.layers()[&0].down_scale.as_ref().unwrap()[ff], 0.0);
        let t = EffectiveModel::new(m.clone(), Vec::new()).unwrap();
        assert!(t.is_empty() && t.version() != s.version());
        assert!(EffectiveModel::new(m.clone(), vec![patch(vec![add(n, d)])]).is_err());
        assert!(EffectiveModel::new(m.clone(), vec![patch(vec![add(0, d + 1)])]).is_err());
        assert!(EffectiveModel::new(m, vec![patch(vec![scale(ff)])]).is_err());
    }
}
