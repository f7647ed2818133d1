//! A compiled overlay stored beside the base operands (COMPILE … INTO VINDEX): the
//! per-layer [`LayerOverlay`] as F32 operands, and their reading back at open.
//!
//! ```text
//!  ffn_added_gate / ffn_added_up / ffn_added_down  [hidden, k]   one row per added feature
//!  ffn_added_gate_bias / ffn_added_up_bias          [k]
//!  ffn_gate_scale / ffn_down_scale                  [ffn + k]     (only when a scale is set)
//! ```
//!
//! A model opened with these operands runs the same overlay arithmetic the edited session
//! ran (`OperandSource::ffn_overlay`), so its logits are the session's bit for bit; the
//! base operands are the base's bytes. The operands are checked against each other and the
//! surface before anything is sized by them; an inconsistent overlay is refused by name.

use std::collections::BTreeMap;

use super::LayerOverlay;
use crate::codec;
use crate::dtype::DType;
use crate::error::{Result, StorageError};
use crate::model::{Model, OperandKey, Role};

/// One stored overlay operand: role, shape (ggml order) and F32 values.
pub struct StoredOperand {
    pub key: OperandKey,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

/// The operands that store `layers`' overlays.
pub fn operands(layers: &BTreeMap<usize, LayerOverlay>) -> Vec<StoredOperand> {
    let mut out = Vec::new();
    for (&l, lo) in layers {
        let (d, k) = (lo.hidden, lo.added());
        let mut put = |role, shape: Vec<usize>, values: &[f32]| {
            out.push(StoredOperand {
                key: OperandKey::layer(l, role),
                shape,
                values: values.to_vec(),
            })
        };
        if k > 0 {
            put(Role::FfnAddedGate, vec![d, k], &lo.gate);
            put(Role::FfnAddedUp, vec![d, k], &lo.up);
            put(Role::FfnAddedDown, vec![d, k], &lo.down);
            put(Role::FfnAddedGateBias, vec![k], &lo.gate_bias);
            put(Role::FfnAddedUpBias, vec![k], &lo.up_bias);
        }
        if let Some(s) = &lo.gate_scale {
            put(Role::FfnGateScale, vec![lo.width()], s);
        }
        if let Some(s) = &lo.down_scale {
            put(Role::FfnDownScale, vec![lo.width()], s);
        }
    }
    out
}

/// Builds `model.overlays` from its overlay operands (none: nothing to do).
pub fn attach(model: &mut Model) -> Result<()> {
    let layers: Vec<usize> = model
        .operands
        .keys()
        .filter(|k| k.role.is_overlay())
        .filter_map(|k| k.layer)
        .collect();
    let mut overlays = BTreeMap::new();
    for l in layers {
        if overlays.contains_key(&l) {
            continue;
        }
        overlays.insert(l, layer(model, l)?);
    }
    model.overlays = overlays;
    Ok(())
}

fn bad(model: &Model, key: OperandKey, message: String) -> StorageError {
    StorageError::Tensor {
        path: model.path.clone(),
        tensor: model
            .operand(key)
            .map_or_else(|| key.to_string(), |o| o.source_name.clone()),
        message,
    }
}

/// The values of the overlay operand `key`, which must be F32 of `elems` elements.
fn values(model: &Model, key: OperandKey, elems: usize) -> Result<Option<Vec<f32>>> {
    let Some(op) = model.operand(key) else {
        return Ok(None);
    };
    let n: usize = op.shape.iter().product();
    if op.dtype != DType::F32 || n != elems || op.len != elems * 4 {
        return Err(bad(
            model,
            key,
            format!(
                "overlay operand {key} is {} {:?}; expected F32 of {elems} values",
                op.dtype, op.shape
            ),
        ));
    }
    let mut v = vec![0.0f32; elems];
    codec::decode_row(DType::F32, model.view_of(op).bytes, &mut v)?;
    Ok(Some(v))
}

fn layer(model: &Model, l: usize) -> Result<LayerOverlay> {
    let s = &model.surface;
    let (d, ff) = (s.hidden, s.ffn);
    let key = |r| OperandKey::layer(l, r);
    if s.moe.is_some() {
        return Err(bad(
            model,
            key(Role::FfnAddedGate),
            "not supported yet: a stored overlay on a bank (MoE) FFN".into(),
        ));
    }
    // k from the gate-bias operand's own size, bounded by its bytes (checked in `values`).
    let k = model
        .operand(key(Role::FfnAddedGateBias))
        .map_or(0, |op| op.shape.iter().product::<usize>());
    let mut lo = LayerOverlay {
        hidden: d,
        ffn: ff,
        ..Default::default()
    };
    let need = |r: Role, elems| -> Result<Vec<f32>> {
        values(model, key(r), elems)?.ok_or_else(|| {
            bad(
                model,
                key(r),
                format!(
                    "layer {l}'s stored overlay has {k} added features but no {}",
                    r.name()
                ),
            )
        })
    };
    if k > 0 {
        let dk = d.checked_mul(k).ok_or_else(|| {
            bad(
                model,
                key(Role::FfnAddedGate),
                "overlay size overflows".into(),
            )
        })?;
        lo.gate_bias = need(Role::FfnAddedGateBias, k)?;
        lo.up_bias = need(Role::FfnAddedUpBias, k)?;
        lo.gate = need(Role::FfnAddedGate, dk)?;
        lo.up = need(Role::FfnAddedUp, dk)?;
        lo.down = need(Role::FfnAddedDown, dk)?;
    } else {
        for r in [
            Role::FfnAddedGate,
            Role::FfnAddedUp,
            Role::FfnAddedDown,
            Role::FfnAddedUpBias,
        ] {
            if model.operand(key(r)).is_some() {
                return Err(bad(
                    model,
                    key(r),
                    format!(
                        "layer {l}'s stored overlay has {} without ffn_added_gate_bias",
                        r.name()
                    ),
                ));
            }
        }
    }
    let w = ff + k;
    lo.gate_scale = values(model, key(Role::FfnGateScale), w)?;
    lo.down_scale = values(model, key(Role::FfnDownScale), w)?;
    Ok(lo)
}
