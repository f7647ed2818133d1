//! The effective state as a material source: base + patch stack read tensor by tensor by
//! DIFF and COMPILE (`crate::material::MaterialSource`), with the edits folded into the
//! FFN tensors they change.
//!
//! ```text
//!  feature j scaled:   gate row j ×= gate_scale[j]          (ffn_gate, one row)
//!                      up row j   ×= down_scale[j]          (ffn_up, one row: act(g)·(s·u) = s·(act(g)·u))
//!  k features added:   ffn_gate, ffn_up  + k rows           (the features' gate and up vectors)
//!                      ffn_down          every row + k columns (the features' down vectors)
//!                      ffn_gate_bias, ffn_up_bias [ffn + k] (0 for base features)
//! ```
//!
//! Only the tensors of edited layers are rebuilt ([`EffectiveMaterial::new`]); every other
//! tensor is the base's mapped view. A rebuilt tensor keeps the base's encoding when every
//! row it re-encodes decodes back to exactly the wanted values (untouched rows keep their
//! bytes); otherwise the whole tensor is stored as F32 (exact), and the choice is listed by
//! [`EffectiveMaterial::encodings`].
//!
//! [`MaterialSource::tensors`] is the logical view: per-layer FFN widths, so DIFF lists
//! exactly what the edits touched. [`MaterialSource::as_model`] is the executable view:
//! the executor and llama.cpp take one FFN width, so every layer is padded to the widest
//! edited layer (rounded up to whole blocks of every FFN encoding) with zero features —
//! gate, up and down all zero, biases zero: `act(0)·0 = 0`, exact. Padding a quantised
//! `ffn_down` appends zero blocks to each row, so base bytes are copied, never re-encoded.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::derive::OverlayForm;
use super::patch::{self, PatchFile};
use super::stored;
use super::{EffectiveModel, LayerOverlay, PatchOrigin};
use crate::codec;
use crate::dtype::DType;
use crate::error::{Result, StorageError};
use crate::material::{MaterialSource, MaterialTensor};
use crate::model::{Backing, Model, Operand, OperandKey, OperandSource, Role, TensorView};
use crate::surface::NormPlacement;

/// A tensor the edits rebuilt, in owned memory.
#[derive(Debug, Clone)]
struct Owned {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl Owned {
    fn view(&self) -> TensorView<'_> {
        TensorView {
            dtype: self.dtype,
            shape: &self.shape,
            bytes: &self.bytes,
        }
    }
}

/// How an edited tensor is stored: its base encoding, and the one chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodingChoice {
    pub key: OperandKey,
    /// None for a tensor the base does not have (a bias).
    pub base: Option<DType>,
    pub chosen: DType,
}

/// Base + overlays as a [`MaterialSource`].
#[derive(Debug)]
pub struct EffectiveMaterial {
    state: Arc<EffectiveModel>,
    edited: BTreeMap<OperandKey, Owned>,
    patches: Vec<String>,
    /// `patch::model_identity` of the base (the caller's cached copy).
    base_identity: [u8; 32],
}

impl EffectiveMaterial {
    /// Folds the state's overlays into the tensors of the layers they touch.
    /// `base_identity` is `patch::model_identity` of the base (hashing 100 MB costs a
    /// third of a second, so callers pass the copy they keep).
    pub fn new(state: Arc<EffectiveModel>, base_identity: [u8; 32]) -> Result<EffectiveMaterial> {
        if let Some(why) = unfoldable(state.base(), state.layers()) {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: writing or comparing the tensors of an edited {} model: {why}; its edits are kept as patches (SAVE PATCH)",
                state.base().surface.source_architecture
            )));
        }
        let mut edited = BTreeMap::new();
        for (&layer, lo) in state.layers() {
            fold_layer(state.base(), layer, lo, &mut edited)?;
        }
        let patches = patch_hashes(&state, base_identity);
        Ok(EffectiveMaterial {
            state,
            edited,
            patches,
            base_identity,
        })
    }

    /// The state this material reads.
    pub fn state(&self) -> &Arc<EffectiveModel> {
        &self.state
    }

    /// Every rebuilt tensor with its base encoding and the encoding chosen for it.
    pub fn encodings(&self) -> Vec<EncodingChoice> {
        self.edited
            .iter()
            .map(|(k, o)| EncodingChoice {
                key: *k,
                base: self.state.base().operand(*k).map(|op| op.dtype),
                chosen: o.dtype,
            })
            .collect()
    }

    /// The exact executable model: the base's operands untouched plus the overlay as F32
    /// operands (`super::stored`), attached as the model's overlay.
    fn overlay_model(&self) -> Model {
        let mut model = Model::clone(self.state.base());
        model.operands.retain(|k, _| !k.role.is_overlay());
        for t in stored::operands(self.state.layers()) {
            let o = f32_tensor(crate::import::gguf::tensor_name(t.key), &t.values, t.shape);
            let len = o.bytes.len();
            model.backings.push(Backing::Owned(Arc::new(o.bytes)));
            model.operands.insert(
                t.key,
                Operand {
                    source_name: o.name,
                    dtype: o.dtype,
                    shape: o.shape,
                    backing: model.backings.len() - 1,
                    offset: 0,
                    len,
                },
            );
        }
        model.overlays = self.state.layers().clone();
        model
    }

    /// The merged executable model: every layer padded to one FFN width (see the module doc).
    fn padded_model(&self) -> Result<Model> {
        let base = self.state.base();
        let s = &base.surface;
        let max_added = self
            .state
            .layers()
            .values()
            .map(|l| l.added())
            .max()
            .unwrap_or(0);
        let mut model = Model::clone(base);
        model.operands.retain(|k, _| !k.role.is_overlay());
        model.overlays.clear();
        let own = |model: &mut Model, key: OperandKey, t: Owned| {
            let len = t.bytes.len();
            model.backings.push(Backing::Owned(Arc::new(t.bytes)));
            model.operands.insert(
                key,
                Operand {
                    source_name: t.name,
                    dtype: t.dtype,
                    shape: t.shape,
                    backing: model.backings.len() - 1,
                    offset: 0,
                    len,
                },
            );
        };
        if max_added == 0 {
            for (k, t) in &self.edited {
                own(&mut model, *k, t.clone());
            }
            return Ok(model);
        }
        // One width for every layer: whole blocks of every down encoding in force.
        let mut block = 1usize;
        for l in 0..s.n_layers {
            let key = OperandKey::layer(l, Role::FfnDown);
            let dt = self
                .tensor(key)
                .map(|v| v.dtype)
                .ok_or_else(|| missing(key))?;
            block = lcm(block, dt.block_elems());
        }
        let width = (s.ffn + max_added).div_ceil(block) * block;
        for l in 0..s.n_layers {
            let w = self.state.ffn_width(l);
            for role in [Role::FfnGate, Role::FfnUp] {
                let key = OperandKey::layer(l, role);
                let v = self.tensor(key).ok_or_else(|| missing(key))?;
                let name = self.name_of(key);
                let mut bytes = v.bytes.to_vec();
                bytes.resize(bytes.len() + (width - w) * v.row_bytes(), 0);
                own(
                    &mut model,
                    key,
                    Owned {
                        name,
                        dtype: v.dtype,
                        shape: vec![v.row_len(), width],
                        bytes,
                    },
                );
            }
            let key = OperandKey::layer(l, Role::FfnDown);
            let v = self.tensor(key).ok_or_else(|| missing(key))?;
            let name = self.name_of(key);
            let down = pad_columns(&v, width)?;
            own(&mut model, key, Owned { name, ..down });
            for role in [Role::FfnGateBias, Role::FfnUpBias] {
                let key = OperandKey::layer(l, role);
                if let Some(t) = self.edited.get(&key) {
                    let mut vals = vec![0.0f32; t.bytes.len() / 4];
                    codec::decode_row(DType::F32, &t.bytes, &mut vals)?;
                    vals.resize(width, 0.0);
                    own(
                        &mut model,
                        key,
                        f32_tensor(t.name.clone(), &vals, vec![width]),
                    );
                }
            }
        }
        model.surface.ffn = width;
        Ok(model)
    }

    fn name_of(&self, key: OperandKey) -> String {
        self.edited
            .get(&key)
            .map(|t| t.name.clone())
            .or_else(|| {
                self.state
                    .base()
                    .operand(key)
                    .map(|o| o.source_name.clone())
            })
            .unwrap_or_else(|| key.to_string())
    }
}

impl MaterialSource for EffectiveMaterial {
    fn base(&self) -> &Model {
        self.state.base()
    }

    fn tensors(&self) -> Vec<MaterialTensor> {
        let mut out: BTreeMap<OperandKey, MaterialTensor> = self
            .state
            .base()
            .tensors()
            .into_iter()
            .filter(|t| !t.key.role.is_overlay())
            .map(|t| (t.key, t))
            .collect();
        for (k, t) in &self.edited {
            out.insert(
                *k,
                MaterialTensor {
                    name: t.name.clone(),
                    key: *k,
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                },
            );
        }
        out.into_values().collect()
    }

    fn tensor(&self, key: OperandKey) -> Option<TensorView<'_>> {
        match self.edited.get(&key) {
            Some(t) => Some(t.view()),
            None if key.role.is_overlay() => None,
            None => self.state.base().view(key),
        }
    }

    fn applied_patches(&self) -> Vec<String> {
        self.patches.clone()
    }

    fn source_identity(&self) -> Result<String> {
        let base = self.state.base();
        // One mapped file: its model identity is the file's SHA-256.
        if base.path.is_file() && base.backings.len() == 1 {
            return Ok(crate::fsutil::hex(self.base_identity));
        }
        crate::material::source_identity(base)
    }

    fn as_model(&self) -> Result<Cow<'_, Model>> {
        if self.state.layers().is_empty() {
            return Ok(Cow::Borrowed(self.state.base()));
        }
        Ok(Cow::Owned(self.overlay_model()))
    }

    fn as_merged_model(&self) -> Result<Cow<'_, Model>> {
        if self.edited.is_empty() {
            return Ok(Cow::Borrowed(self.state.base()));
        }
        self.padded_model().map(Cow::Owned)
    }

    fn executable(&self) -> Arc<dyn OperandSource> {
        self.state.clone()
    }

    fn overlay_form(&self) -> OverlayForm<'_> {
        OverlayForm {
            model: self.state.base(),
            layers: self.state.layers(),
            edges: self
                .state
                .added_features()
                .into_iter()
                .filter_map(|(j, a, _)| a.edge.clone().map(|e| ((a.layer, j), e)))
                .collect(),
        }
    }
}

fn missing(key: OperandKey) -> StorageError {
    StorageError::MissingOperand {
        key: key.to_string(),
    }
}

fn lcm(a: usize, b: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    a / gcd(a, b) * b
}

/// SHA-256 (hex) of each patch in the stack: a saved file's own hash, else (the session's,
/// the recording one, an applied file changed in memory) the hash of the bytes `SAVE PATCH`
/// would write for it.
fn patch_hashes(state: &EffectiveModel, identity: [u8; 32]) -> Vec<String> {
    let base = state.base();
    state
        .patches()
        .iter()
        .filter(|p| !p.edits.is_empty())
        .map(|p| match &p.origin {
            PatchOrigin::File { sha256, .. } => crate::fsutil::hex(sha256),
            PatchOrigin::Session | PatchOrigin::Open(_) | PatchOrigin::Edited { .. } => {
                let bytes = patch::encode(&PatchFile {
                    base_sha256: identity,
                    hidden: base.surface.hidden,
                    n_layers: base.surface.n_layers,
                    edits: p.edits.clone(),
                });
                use sha2::{Digest, Sha256};
                crate::fsutil::hex(Sha256::digest(&bytes))
            }
        })
        .collect()
}

fn f32_tensor(name: String, vals: &[f32], shape: Vec<usize>) -> Owned {
    let mut bytes = Vec::with_capacity(vals.len() * 4);
    for v in vals {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    Owned {
        name,
        dtype: DType::F32,
        shape,
        bytes,
    }
}

/// `.weight` → `.bias` in a source name (GGUF and Hugging Face naming alike).
fn bias_name(weight: &str) -> String {
    match weight.strip_suffix(".weight") {
        Some(stem) => format!("{stem}.bias"),
        None => format!("{weight}.bias"),
    }
}

/// Encodes `row` as `dtype` when that is exact (decodes back to the same bits).
fn encode_exact(dtype: DType, row: &[f32]) -> Option<Vec<u8>> {
    if !codec::can_encode(dtype) || !row.len().is_multiple_of(dtype.block_elems()) {
        return None;
    }
    let mut bytes = Vec::new();
    codec::encode_row(dtype, row, &mut bytes).ok()?;
    let mut back = vec![0.0f32; row.len()];
    codec::decode_row(dtype, &bytes, &mut back).ok()?;
    let same = back
        .iter()
        .zip(row)
        .all(|(a, b)| a.to_bits() == b.to_bits() || (*a == 0.0 && *b == 0.0));
    same.then_some(bytes)
}

/// A row-structured tensor (`[row_len, rows]`) with some rows replaced and rows appended:
/// base bytes kept for untouched rows when every new row encodes exactly, else all F32.
fn edit_rows(
    name: String,
    v: &TensorView<'_>,
    replaced: &BTreeMap<usize, Vec<f32>>,
    appended: &[Vec<f32>],
) -> Result<Owned> {
    let (row_len, rows) = (v.row_len(), v.rows());
    let total = rows + appended.len();
    let rb = v.row_bytes();
    let mut bytes = Vec::with_capacity(total * rb);
    let mut exact = true;
    'rows: for i in 0..rows {
        match replaced.get(&i) {
            None => bytes.extend_from_slice(v.row(i)),
            Some(r) => match encode_exact(v.dtype, r) {
                Some(b) => bytes.extend_from_slice(&b),
                None => {
                    exact = false;
                    break 'rows;
                }
            },
        }
    }
    if exact {
        for r in appended {
            match encode_exact(v.dtype, r) {
                Some(b) => bytes.extend_from_slice(&b),
                None => {
                    exact = false;
                    break;
                }
            }
        }
    }
    if exact {
        return Ok(Owned {
            name,
            dtype: v.dtype,
            shape: vec![row_len, total],
            bytes,
        });
    }
    let mut vals = vec![0.0f32; total * row_len];
    codec::decode_rows(v.dtype, v.bytes, row_len, &mut vals[..rows * row_len])?;
    for (i, r) in replaced {
        vals[i * row_len..(i + 1) * row_len].copy_from_slice(r);
    }
    for (j, r) in appended.iter().enumerate() {
        vals[(rows + j) * row_len..(rows + j + 1) * row_len].copy_from_slice(r);
    }
    Ok(f32_tensor(name, &vals, vec![row_len, total]))
}

fn decode_one(v: &TensorView<'_>, i: usize) -> Result<Vec<f32>> {
    let mut r = vec![0.0f32; v.row_len()];
    codec::decode_row(v.dtype, v.row(i), &mut r)?;
    Ok(r)
}

/// Why the overlays `layers` of a model of `base`'s block cannot be folded into its FFN
/// tensors exactly (none: they can). A folded feature is a row of the FFN's gate, up and down
/// tensors, so the FFN must be one dense gated FFN; an added feature must also reach the
/// residual stream as the FFN's output does, which it does not where a norm follows the FFN
/// (it sits after that norm: `lql_exec::program::Step::Added`). Feature scales act inside
/// the FFN, before any such norm, and fold there.
fn unfoldable(base: &Model, layers: &BTreeMap<usize, LayerOverlay>) -> Option<&'static str> {
    let s = &base.surface;
    if layers.is_empty() {
        None
    } else if s.moe.is_some() {
        Some("its FFNs are banks of experts, and the overlay's features are no expert's rows")
    } else if base.operand(OperandKey::layer(0, Role::FfnGate)).is_none() {
        Some("its FFN has no gate, and folded features are rows of the gate")
    } else if matches!(
        s.block.placement,
        NormPlacement::Sandwich | NormPlacement::Post
    ) && layers.values().any(|l| l.added() > 0)
    {
        Some("a norm follows its FFN, and an added feature writes after that norm, where the FFN has no rows")
    } else {
        None
    }
}

/// Folds one layer's overlay into its FFN tensors (see the module doc).
fn fold_layer(
    base: &Model,
    layer: usize,
    lo: &LayerOverlay,
    edited: &mut BTreeMap<OperandKey, Owned>,
) -> Result<()> {
    let (d, ff, k) = (lo.hidden, lo.ffn, lo.added());
    let key = |r| OperandKey::layer(layer, r);
    let get = |r| -> Result<(TensorView<'_>, String)> {
        let op = base.operand(key(r)).ok_or_else(|| missing(key(r)))?;
        Ok((base.view_of(op), op.source_name.clone()))
    };
    let scale = |s: &Option<Vec<f32>>, j: usize| s.as_ref().map_or(1.0, |v| v[j]);
    // ffn_gate: scaled rows, added rows.
    let (gv, gname) = get(Role::FfnGate)?;
    let (uv, uname) = get(Role::FfnUp)?;
    if gv.row_len() != d || gv.rows() != ff || uv.row_len() != d || uv.rows() != ff {
        return Err(StorageError::Invalid(format!(
            "layer {layer}: the overlay's FFN of {ff}×{d} does not match the base's gate/up"
        )));
    }
    for (role, v, name, scales, vecs) in [
        (Role::FfnGate, gv, gname.clone(), &lo.gate_scale, &lo.gate),
        (Role::FfnUp, uv, uname.clone(), &lo.down_scale, &lo.up),
    ] {
        let mut replaced = BTreeMap::new();
        for j in 0..ff {
            let s = scale(scales, j);
            if s != 1.0 {
                let mut r = decode_one(&v, j)?;
                r.iter_mut().for_each(|x| *x *= s);
                replaced.insert(j, r);
            }
        }
        let appended: Vec<Vec<f32>> = (0..k)
            .map(|i| {
                let s = scale(scales, ff + i);
                vecs[i * d..(i + 1) * d].iter().map(|x| x * s).collect()
            })
            .collect();
        if !replaced.is_empty() || !appended.is_empty() {
            edited.insert(key(role), edit_rows(name, &v, &replaced, &appended)?);
        }
    }
    if k == 0 {
        return Ok(());
    }
    // Biases: zero for base features, the added features' (scaled) biases after them.
    let mut gb = vec![0.0f32; ff + k];
    let mut ub = vec![0.0f32; ff + k];
    for i in 0..k {
        gb[ff + i] = lo.gate_bias[i] * scale(&lo.gate_scale, ff + i);
        ub[ff + i] = lo.up_bias[i] * scale(&lo.down_scale, ff + i);
    }
    edited.insert(
        key(Role::FfnGateBias),
        f32_tensor(bias_name(&gname), &gb, vec![ff + k]),
    );
    edited.insert(
        key(Role::FfnUpBias),
        f32_tensor(bias_name(&uname), &ub, vec![ff + k]),
    );
    // ffn_down: every row (one per hidden unit) gains the added features' down values.
    let (dv, dname) = get(Role::FfnDown)?;
    if dv.row_len() != ff || dv.rows() != d {
        return Err(StorageError::Invalid(format!(
            "layer {layer}: the base's ffn_down is {:?}, not [{ff}, {d}]",
            dv.shape
        )));
    }
    let w = ff + k;
    let mut vals = vec![0.0f32; d * w];
    let mut exact_rows = Vec::with_capacity(d * dv.row_bytes());
    let mut exact = true;
    for r in 0..d {
        let row = &mut vals[r * w..(r + 1) * w];
        codec::decode_row(dv.dtype, dv.row(r), &mut row[..ff])?;
        for i in 0..k {
            row[ff + i] = lo.down[i * d + r];
        }
        if exact {
            match encode_exact(dv.dtype, row) {
                Some(b) => exact_rows.extend_from_slice(&b),
                None => exact = false,
            }
        }
    }
    let down = if exact {
        Owned {
            name: dname,
            dtype: dv.dtype,
            shape: vec![w, d],
            bytes: exact_rows,
        }
    } else {
        f32_tensor(dname, &vals, vec![w, d])
    };
    edited.insert(key(Role::FfnDown), down);
    Ok(())
}

/// `v` (`[w, rows]`) with every row widened to `width` by zero columns: zero blocks
/// appended to the encoded rows when both widths are whole blocks, else decoded to F32.
fn pad_columns(v: &TensorView<'_>, width: usize) -> Result<Owned> {
    let (w, rows, be) = (v.row_len(), v.rows(), v.dtype.block_elems());
    if w.is_multiple_of(be) && width.is_multiple_of(be) {
        let rb = v.row_bytes();
        let extra = (width - w) / be * v.dtype.block_bytes();
        // All-zero bytes decode to zero in every encoding (scales are zero).
        let mut bytes = Vec::with_capacity(rows * (rb + extra));
        for i in 0..rows {
            bytes.extend_from_slice(v.row(i));
            bytes.resize(bytes.len() + extra, 0);
        }
        return Ok(Owned {
            name: String::new(),
            dtype: v.dtype,
            shape: vec![width, rows],
            bytes,
        });
    }
    let mut vals = vec![0.0f32; rows * width];
    for i in 0..rows {
        codec::decode_row(v.dtype, v.row(i), &mut vals[i * width..i * width + w])?;
    }
    Ok(f32_tensor(String::new(), &vals, vec![width, rows]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::gguf::synth::TinyModel;
    use crate::overlay::{AddedFeature, Edit, FeatureScale, Patch};

    fn tiny(dir: &std::path::Path) -> Arc<Model> {
        let p = dir.join("tiny.gguf");
        TinyModel::llama().write(&p).unwrap();
        Arc::new(Model::open(&p).unwrap())
    }

    fn state(m: &Arc<Model>) -> Arc<EffectiveModel> {
        let (d, ff) = (m.surface.hidden, m.surface.ffn);
        let edits = vec![
            Edit::Add(AddedFeature {
                layer: 1,
                gate: vec![0.25; d],
                gate_bias: -0.5,
                up: vec![0.0; d],
                up_bias: 2.0,
                down: vec![0.125; d],
                edge: None,
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
        ];
        let p = Patch {
            origin: crate::overlay::PatchOrigin::Session,
            edits,
        };
        Arc::new(EffectiveModel::new(m.clone(), vec![p]).unwrap())
    }

    #[test]
    fn folds_edits_into_the_tensors_they_touch_only() {
        let t = tempfile::tempdir().unwrap();
        let m = tiny(t.path());
        let (d, ff) = (m.surface.hidden, m.surface.ffn);
        let mat = EffectiveMaterial::new(state(&m), [7; 32]).unwrap();
        let keys: Vec<OperandKey> = mat.encodings().iter().map(|e| e.key).collect();
        let l = OperandKey::layer;
        assert_eq!(
            keys,
            vec![
                l(0, Role::FfnUp),
                l(1, Role::FfnGate),
                l(1, Role::FfnUp),
                l(1, Role::FfnDown),
                l(1, Role::FfnGateBias),
                l(1, Role::FfnUpBias),
            ]
        );
        // The ablated feature's up row is zero; every other row keeps its bytes.
        let (base, up) = (
            m.view(l(0, Role::FfnUp)).unwrap(),
            mat.tensor(l(0, Role::FfnUp)).unwrap(),
        );
        for i in 0..ff {
            let mut r = vec![0.0f32; d];
            codec::decode_row(up.dtype, up.row(i), &mut r).unwrap();
            if i == 3 {
                assert!(r.iter().all(|v| *v == 0.0));
            } else {
                assert_eq!(up.row(i), base.row(i));
            }
        }
        // The added feature: gate row scaled by its gate scale, its bias too.
        let mut row = vec![0.0f32; d];
        let g = mat.tensor(l(1, Role::FfnGate)).unwrap();
        assert_eq!(g.rows(), ff + 1);
        mat.decode_rows(l(1, Role::FfnGate), ff, 1, &mut row)
            .unwrap();
        assert!(row.iter().all(|v| *v == 0.5));
        let mut gb = vec![0.0f32; ff + 1];
        mat.decode_rows(l(1, Role::FfnGateBias), 0, 1, &mut gb)
            .unwrap();
        assert_eq!((gb[0], gb[ff]), (0.0, -1.0));
        // Tensors no edit touched are the base's own bytes.
        let n = mat.tensor(l(0, Role::FfnDown)).unwrap();
        assert_eq!(
            n.bytes.as_ptr(),
            m.view(l(0, Role::FfnDown)).unwrap().bytes.as_ptr()
        );
        assert_eq!(mat.applied_patches().len(), 1);
    }

    #[test]
    fn exact_form_round_trips_and_merged_form_pads_every_layer() {
        let t = tempfile::tempdir().unwrap();
        let m = tiny(t.path());
        let st = state(&m);
        let mat = EffectiveMaterial::new(st.clone(), [0; 32]).unwrap();
        // Exact: the overlay as operands, attached again from them.
        let mut exact = mat.as_model().unwrap().into_owned();
        assert_eq!(exact.overlays, *st.layers());
        exact.overlays.clear();
        stored::attach(&mut exact).unwrap();
        assert_eq!(exact.overlays, *st.layers());
        // An inconsistent stored overlay is refused by name.
        let mut bad = exact.clone();
        bad.operands
            .remove(&OperandKey::layer(1, Role::FfnAddedDown));
        let e = stored::attach(&mut bad).unwrap_err().to_string();
        assert!(e.contains("ffn_added_down"), "{e}");
        // Merged: one width for every layer, zero features after the base's.
        let merged = mat.as_merged_model().unwrap();
        let w = merged.surface.ffn;
        assert!(w > m.surface.ffn);
        for layer in 0..m.surface.n_layers {
            let g = merged
                .view(OperandKey::layer(layer, Role::FfnGate))
                .unwrap();
            let down = merged
                .view(OperandKey::layer(layer, Role::FfnDown))
                .unwrap();
            assert_eq!((g.rows(), down.row_len()), (w, w));
        }
        assert!(merged.overlays.is_empty());
    }
}
