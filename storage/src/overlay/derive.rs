//! `DIFF … INTO PATCH`: the edits that turn one model state into another, where the change
//! is expressible as a patch, else a refusal naming the object, layer, role and why.
//!
//! Both states are read in their overlay form ([`OverlayForm`]): plain operands (a base
//! model's tensors as stored) plus the per-layer overlays in force (a compiled overlay
//! stored with the model, the edits of a session). A patch can express:
//!
//! ```text
//!  added features   b's overlay of a layer = a's added features, then more   → Edit::Add
//!  feature scales   b's gate/down scale of feature j ≠ a's                    → Edit::Scale
//!                   b's plain ffn_gate / ffn_up row j = p × a's row j          → gate / down scale p
//!                   (act(g)·(p·u) = p·act(g)·u; DELETE's zeroed up row is p = 0)
//! ```
//!
//! Everything else is refused before anything is written: a different architecture or
//! shape, a changed encoding, a tensor added or removed, values changed otherwise than by a
//! per-feature factor, an added feature changed or removed, a scale a multiplicative patch
//! cannot reach (a feature ablated in `a` and live in `b`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{AddedFeature, Edge, Edit, FeatureScale, LayerOverlay};
use crate::codec;
use crate::error::{Result, StorageError};
use crate::model::{Model, OperandKey, OperandSource, Role};

/// A state as plain operands plus the overlays in force.
pub struct OverlayForm<'a> {
    /// The plain operands (overlay-role operands are ignored; `overlays` holds them).
    pub model: &'a Model,
    /// Per-layer overlays in force, by layer.
    pub layers: &'a BTreeMap<usize, LayerOverlay>,
    /// The edge each added feature was inserted for, by `(layer, feature index)`.
    pub edges: BTreeMap<(usize, usize), Edge>,
}

/// Why a change cannot be written as a patch, naming where.
fn refuse(key: Option<OperandKey>, why: impl std::fmt::Display) -> StorageError {
    let at = match key {
        Some(k) => format!(
            "{} layer {} {}",
            k.role.object(),
            k.layer.map_or("-".to_string(), |l| l.to_string()),
            k.role.name()
        ),
        None => "the model".to_string(),
    };
    StorageError::Unsupported(format!(
        "DIFF … INTO PATCH: the change is not expressible as a patch at {at}: {why}; nothing was written"
    ))
}

/// The edits that turn `a` into `b` (added features, then feature scales, layer by layer).
pub fn derive(a: &OverlayForm<'_>, b: &OverlayForm<'_>, cancel: &AtomicBool) -> Result<Vec<Edit>> {
    check_surfaces(a.model, b.model)?;
    let (d, ff) = (a.model.surface.hidden, a.model.surface.ffn);
    // Per-feature factors read off the plain gate/up rows: (layer, feature) → factor.
    let mut plain_gate: BTreeMap<(usize, usize), f32> = BTreeMap::new();
    let mut plain_up: BTreeMap<(usize, usize), f32> = BTreeMap::new();
    let keys = |m: &Model| -> Vec<OperandKey> {
        m.operands
            .keys()
            .copied()
            .filter(|k| !k.role.is_overlay())
            .collect()
    };
    let (ka, kb) = (keys(a.model), keys(b.model));
    if let Some(k) = kb.iter().find(|k| a.model.operand(**k).is_none()) {
        return Err(refuse(
            Some(*k),
            "the tensor is added (only FFN features can be added)",
        ));
    }
    for key in ka {
        if cancel.load(Ordering::Relaxed) {
            return Err(StorageError::Interrupted {
                what: "DIFF … INTO PATCH".into(),
            });
        }
        let va = a.model.view(key).ok_or_else(|| missing(key))?;
        let Some(vb) = b.model.view(key) else {
            return Err(refuse(Some(key), "the tensor is removed"));
        };
        if va.dtype != vb.dtype {
            return Err(refuse(
                Some(key),
                format!(
                    "its encoding changed ({} → {}); a patch holds no tensor data",
                    va.dtype, vb.dtype
                ),
            ));
        }
        if va.shape != vb.shape {
            return Err(refuse(
                Some(key),
                format!("its shape changed ({:?} → {:?})", va.shape, vb.shape),
            ));
        }
        if va.bytes == vb.bytes {
            continue;
        }
        let into = match key.role {
            Role::FfnGate => &mut plain_gate,
            Role::FfnUp => &mut plain_up,
            _ => {
                return Err(refuse(
                    Some(key),
                    "its values changed (a patch expresses added FFN features and per-feature gate/down scales)",
                ))
            }
        };
        let layer = key.layer.unwrap_or(0);
        let (mut ra, mut rb) = (vec![0.0f32; va.row_len()], vec![0.0f32; va.row_len()]);
        for j in 0..va.rows() {
            if va.row(j) == vb.row(j) {
                continue;
            }
            codec::decode_row(va.dtype, va.row(j), &mut ra)?;
            codec::decode_row(vb.dtype, vb.row(j), &mut rb)?;
            let p = row_factor(&ra, &rb).ok_or_else(|| {
                refuse(
                    Some(key),
                    format!(
                        "row {j} changed in values that are not a multiple of the original row"
                    ),
                )
            })?;
            if p != 1.0 {
                into.insert((layer, j), p);
            }
        }
    }
    let mut adds = Vec::new();
    let mut scales = Vec::new();
    let layers: std::collections::BTreeSet<usize> = a
        .layers
        .keys()
        .chain(b.layers.keys())
        .copied()
        .chain(plain_gate.keys().chain(plain_up.keys()).map(|(l, _)| *l))
        .collect();
    for layer in layers {
        let blank = LayerOverlay {
            hidden: d,
            ffn: ff,
            ..Default::default()
        };
        let ao = a.layers.get(&layer).unwrap_or(&blank);
        let bo = b.layers.get(&layer).unwrap_or(&blank);
        let key = |r| Some(OperandKey::layer(layer, r));
        let (kx, ky) = (ao.added(), bo.added());
        if ky < kx {
            return Err(refuse(
                key(Role::FfnAddedGate),
                format!(
                    "added feature {} is removed ({kx} → {ky} added features); a patch only adds features",
                    ff + ky
                ),
            ));
        }
        for i in 0..kx {
            let r = i * d..(i + 1) * d;
            if !same(&ao.gate[r.clone()], &bo.gate[r.clone()])
                || !same(&ao.up[r.clone()], &bo.up[r.clone()])
                || !same(&ao.down[r.clone()], &bo.down[r])
                || ao.gate_bias[i].to_bits() != bo.gate_bias[i].to_bits()
                || ao.up_bias[i].to_bits() != bo.up_bias[i].to_bits()
            {
                return Err(refuse(
                    key(Role::FfnAddedGate),
                    format!("added feature {} changed its vectors", ff + i),
                ));
            }
        }
        for i in kx..ky {
            let r = i * d..(i + 1) * d;
            adds.push(Edit::Add(AddedFeature {
                layer,
                gate: bo.gate[r.clone()].to_vec(),
                gate_bias: bo.gate_bias[i],
                up: bo.up[r.clone()].to_vec(),
                up_bias: bo.up_bias[i],
                down: bo.down[r].to_vec(),
                edge: b.edges.get(&(layer, ff + i)).cloned(),
            }));
        }
        let at = |s: &Option<Vec<f32>>, j: usize| s.as_ref().and_then(|v| v.get(j)).copied();
        for j in 0..ff + ky {
            let factor = |plain: &BTreeMap<(usize, usize), f32>,
                          sa: &Option<Vec<f32>>,
                          sb: &Option<Vec<f32>>,
                          role: Role|
             -> Result<Option<f32>> {
                let p = plain.get(&(layer, j)).copied().unwrap_or(1.0);
                let want = p * at(sb, j).unwrap_or(1.0);
                let have = at(sa, j).unwrap_or(1.0);
                if want.to_bits() == have.to_bits() {
                    return Ok(None);
                }
                if have == 0.0 {
                    return Err(refuse(
                        key(role),
                        format!(
                            "feature {j} is ablated in the first model and not in the second (a scale cannot undo a zero)"
                        ),
                    ));
                }
                Ok(Some(want / have))
            };
            let g = factor(&plain_gate, &ao.gate_scale, &bo.gate_scale, Role::FfnGate)?;
            let u = factor(&plain_up, &ao.down_scale, &bo.down_scale, Role::FfnUp)?;
            if g.is_some() || u.is_some() {
                scales.push(Edit::Scale(FeatureScale {
                    layer,
                    feature: j,
                    gate_scale: g,
                    down_scale: u,
                }));
            }
        }
    }
    adds.extend(scales);
    Ok(adds)
}

/// Whether two f32 slices hold the same bit patterns.
fn same(x: &[f32], y: &[f32]) -> bool {
    x.len() == y.len() && x.iter().zip(y).all(|(a, b)| a.to_bits() == b.to_bits())
}

/// `p` with `b[i] = p · a[i]` for every element (exact f32 products; zeros of either sign
/// agree), if there is one.
fn row_factor(a: &[f32], b: &[f32]) -> Option<f32> {
    let pivot = a
        .iter()
        .enumerate()
        .max_by(|x, y| x.1.abs().total_cmp(&y.1.abs()))
        .map(|(i, _)| i)?;
    if a[pivot] == 0.0 {
        return b.iter().all(|y| *y == 0.0).then_some(1.0);
    }
    let p = b[pivot] / a[pivot];
    let fits = a.iter().zip(b).all(|(x, y)| {
        let z = x * p;
        z.to_bits() == y.to_bits() || (z == 0.0 && *y == 0.0)
    });
    fits.then_some(p)
}

fn missing(key: OperandKey) -> StorageError {
    StorageError::MissingOperand {
        key: key.to_string(),
    }
}

/// The two models must run the same architecture at the same sizes.
fn check_surfaces(a: &Model, b: &Model) -> Result<()> {
    let (sa, sb) = (&a.surface, &b.surface);
    if sa.moe.is_some() || sb.moe.is_some() {
        return Err(StorageError::Unsupported(
            "not supported yet: DIFF … INTO PATCH of a bank (MoE) model (patches edit dense FFN layers)"
                .into(),
        ));
    }
    let facts = |s: &crate::surface::ExecutionSurface| -> Result<serde_json::Value> {
        let mut v = serde_json::to_value(s)
            .map_err(|e| StorageError::Internal(format!("surface as JSON: {e}")))?;
        if let Some(o) = v.as_object_mut() {
            // Informational only (never branched on).
            o.remove("source_architecture");
        }
        Ok(v)
    };
    let (ja, jb) = (facts(sa)?, facts(sb)?);
    if ja != jb {
        let field = ja
            .as_object()
            .zip(jb.as_object())
            .and_then(|(x, y)| {
                x.iter().find(|(k, v)| y.get(*k) != Some(*v)).map(|(k, v)| {
                    format!(
                        "{k}: {v} → {}",
                        y.get(k).unwrap_or(&serde_json::Value::Null)
                    )
                })
            })
            .unwrap_or_else(|| "execution surface".into());
        return Err(refuse(
            None,
            format!("the models differ in architecture or size ({field})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::gguf::synth::TinyModel;
    use crate::material::MaterialSource;
    use crate::overlay::material::EffectiveMaterial;
    use crate::overlay::{EffectiveModel, Patch, PatchOrigin};
    use std::sync::Arc;

    fn edits(d: usize, ff: usize) -> Vec<Edit> {
        vec![
            Edit::Add(AddedFeature {
                layer: 1,
                gate: vec![0.25; d],
                gate_bias: -0.5,
                up: vec![0.0; d],
                up_bias: 2.0,
                down: vec![0.125; d],
                edge: Some(Edge {
                    entity: "e".into(),
                    relation: "r".into(),
                    target: "t".into(),
                    prompt: "p".into(),
                }),
            }),
            Edit::Scale(FeatureScale {
                layer: 0,
                feature: 3,
                gate_scale: None,
                down_scale: Some(0.0),
            }),
            Edit::Scale(FeatureScale {
                layer: 1,
                feature: ff,
                gate_scale: Some(2.0),
                down_scale: None,
            }),
        ]
    }

    #[test]
    fn a_state_against_its_base_gives_back_its_edits_and_the_reverse_refuses() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("tiny.gguf");
        TinyModel::llama().write(&p).unwrap();
        let m = Arc::new(Model::open(&p).unwrap());
        let (d, ff) = (m.surface.hidden, m.surface.ffn);
        let patch = Patch {
            origin: PatchOrigin::Session,
            edits: edits(d, ff),
        };
        let st = Arc::new(EffectiveModel::new(m.clone(), vec![patch]).unwrap());
        let mat = EffectiveMaterial::new(st, [0; 32]).unwrap();
        let no = AtomicBool::new(false);
        let got = derive(&m.overlay_form(), &mat.overlay_form(), &no).unwrap();
        // Adds first, then scales in (layer, feature) order.
        let want = edits(d, ff);
        assert_eq!(got, vec![want[0].clone(), want[1].clone(), want[2].clone()]);
        // Undoing an ablation is not a patch (layer 0 is checked first)…
        let e = derive(&mat.overlay_form(), &m.overlay_form(), &no)
            .unwrap_err()
            .to_string();
        assert!(e.contains("layer 0 ffn_up") && e.contains("ablated"), "{e}");
        // …nor is removing an added feature.
        let add = Patch {
            origin: PatchOrigin::Session,
            edits: edits(d, ff)[..1].to_vec(),
        };
        let st = Arc::new(EffectiveModel::new(m.clone(), vec![add]).unwrap());
        let added = EffectiveMaterial::new(st, [0; 32]).unwrap();
        let e = derive(&added.overlay_form(), &m.overlay_form(), &no)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("layer 1 ffn_added_gate") && e.contains("removed"),
            "{e}"
        );
        // Equal states: no edits.
        assert!(derive(&m.overlay_form(), &m.overlay_form(), &no)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn scaled_plain_rows_read_as_feature_scales() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("tiny.gguf");
        TinyModel::llama().write(&p).unwrap();
        let m = Arc::new(Model::open(&p).unwrap());
        let scales = vec![
            Edit::Scale(FeatureScale {
                layer: 0,
                feature: 5,
                gate_scale: Some(0.5),
                down_scale: Some(0.0),
            }),
            Edit::Scale(FeatureScale {
                layer: 1,
                feature: 9,
                gate_scale: None,
                down_scale: Some(2.0),
            }),
        ];
        let patch = Patch {
            origin: PatchOrigin::Session,
            edits: scales.clone(),
        };
        let st = Arc::new(EffectiveModel::new(m.clone(), vec![patch]).unwrap());
        let mat = EffectiveMaterial::new(st, [0; 32]).unwrap();
        // The merged form folds the scales into the F32 gate/up rows (no overlay left).
        let merged = mat.as_merged_model().unwrap().into_owned();
        assert!(merged.overlays.is_empty());
        let no = AtomicBool::new(false);
        let got = derive(&m.overlay_form(), &merged.overlay_form(), &no).unwrap();
        assert_eq!(got, scales);
    }

    #[test]
    fn row_factors_are_exact_or_absent() {
        let a = [1.0f32, -2.0, 0.5, 0.0];
        assert_eq!(row_factor(&a, &[0.0, -0.0, 0.0, 0.0]), Some(0.0));
        assert_eq!(row_factor(&a, &[2.0, -4.0, 1.0, 0.0]), Some(2.0));
        assert_eq!(row_factor(&a, &[2.0, -4.0, 1.1, 0.0]), None);
        assert_eq!(row_factor(&[0.0; 3], &[0.0; 3]), Some(1.0));
        assert_eq!(row_factor(&[0.0; 3], &[0.0, 1.0, 0.0]), None);
    }
}
