//! Checks shared by all importers: the surface is coherent, every required operand is
//! present, and every operand's shape matches the surface. Errors name the tensor as the
//! source calls it.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Result, StorageError};
use crate::model::{Operand, OperandKey};
use crate::surface::ExecutionSurface;

/// Refuse a surface whose numbers cannot describe a model.
pub fn check_surface(path: &Path, s: &ExecutionSurface) -> Result<()> {
    let bad = |m: String| {
        Err(StorageError::Invalid(format!(
            "{}: {} model: {m}",
            path.display(),
            s.source_architecture
        )))
    };
    for (name, v) in [
        ("layer count", s.n_layers),
        ("hidden size", s.hidden),
        ("FFN size", s.ffn),
        ("head count", s.n_heads),
        ("KV head count", s.n_kv_heads),
        ("head dimension", s.head_dim),
        ("vocabulary size", s.vocab),
        ("context length", s.context_length),
    ] {
        if v == 0 {
            return bad(format!("{name} is 0"));
        }
    }
    if !s.n_heads.is_multiple_of(s.n_kv_heads) {
        return bad(format!(
            "{} heads are not a multiple of {} KV heads",
            s.n_heads, s.n_kv_heads
        ));
    }
    if !s.head_dim.is_multiple_of(2) {
        return bad(format!("head dimension {} is odd", s.head_dim));
    }
    if !(s.norm_eps.is_finite() && s.norm_eps > 0.0) {
        return bad(format!(
            "norm epsilon {} is not a positive number",
            s.norm_eps
        ));
    }
    if !(s.rope_theta.is_finite() && s.rope_theta > 0.0) {
        return bad(format!(
            "RoPE base {} is not a positive number",
            s.rope_theta
        ));
    }
    if s.n_heads.checked_mul(s.head_dim).is_none() || s.hidden.checked_mul(s.vocab).is_none() {
        return bad("sizes overflow".into());
    }
    Ok(())
}

/// Refuse a layer count the file cannot hold, before anything is sized by it: every layer
/// needs tensors of its own, so `n_layers` may not exceed the `n_tensors` entries of the
/// tensor table. (A count within that bound but short of a few tensors gets the precise
/// "missing" error of [`check_operands`], which then allocates at most
/// `required_layer_roles().len()` keys per table entry.) `field` names where the count was
/// read (`llama.block_count`, `num_hidden_layers`, …).
pub fn check_layer_count(
    path: &Path,
    field: &str,
    s: &ExecutionSurface,
    n_tensors: usize,
) -> Result<()> {
    if s.n_layers <= n_tensors {
        return Ok(());
    }
    let per_layer = s.required_layer_roles().len();
    Err(StorageError::Format {
        path: path.to_path_buf(),
        offset: 0,
        field: field.to_string(),
        message: format!(
            "{} layers (each needs {per_layer} tensors), but the file holds only {n_tensors} tensors",
            s.n_layers
        ),
    })
}

/// Every required operand present (`name_of` gives the source name of a missing one),
/// every operand shaped as the surface says, nothing extra.
pub fn check_operands(
    path: &Path,
    s: &ExecutionSurface,
    operands: &BTreeMap<OperandKey, Operand>,
    name_of: impl Fn(OperandKey) -> String,
) -> Result<()> {
    // Nothing is sized by the declared layer count before it is checked against the table.
    check_layer_count(path, "layer count", s, operands.len())?;
    check_operands_where(path, s, operands, name_of, |_| true)
}

/// [`check_operands`] over the required operands `wanted` keeps (a pipeline stage holds
/// only its layers and boundaries); an operand outside them is still refused. The caller
/// has bounded the surface's layer count (a stage: by its validated manifest).
pub fn check_operands_where(
    path: &Path,
    s: &ExecutionSurface,
    operands: &BTreeMap<OperandKey, Operand>,
    name_of: impl Fn(OperandKey) -> String,
    wanted: impl Fn(&OperandKey) -> bool,
) -> Result<()> {
    let required: Vec<OperandKey> = s
        .required_keys()
        .into_iter()
        .filter(|k| wanted(k))
        .collect();
    for key in &required {
        if !operands.contains_key(key) {
            return Err(StorageError::Tensor {
                path: path.to_path_buf(),
                tensor: name_of(*key),
                message: format!(
                    "required by the {} architecture but missing",
                    s.source_architecture
                ),
            });
        }
    }
    let required_set: std::collections::BTreeSet<OperandKey> = required.into_iter().collect();
    for (key, op) in operands {
        let optional = key.layer.is_some() && key.role.is_optional();
        if !(required_set.contains(key) || optional) {
            return Err(StorageError::Tensor {
                path: path.to_path_buf(),
                tensor: op.source_name.clone(),
                message: format!("unexpected {key} for this {} model", s.source_architecture),
            });
        }
        let want = s.operand_shape(key.role);
        // Overlay operands are checked against each other when attached.
        if op.shape != want && !key.role.is_overlay() {
            return Err(StorageError::Tensor {
                path: path.to_path_buf(),
                tensor: op.source_name.clone(),
                message: format!(
                    "shape {:?} (ggml order) but {key} must be {want:?} for hidden {}, {} heads × {} dims, {} KV heads, FFN {}, vocab {}",
                    op.shape, s.hidden, s.n_heads, s.head_dim, s.n_kv_heads, s.ffn, s.vocab
                ),
            });
        }
        if !op.shape[0].is_multiple_of(op.dtype.block_elems()) {
            return Err(StorageError::Tensor {
                path: path.to_path_buf(),
                tensor: op.source_name.clone(),
                message: format!(
                    "row length {} is not a whole number of {} blocks",
                    op.shape[0], op.dtype
                ),
            });
        }
    }
    Ok(())
}

/// Token texts that end a turn in common chat formats; found in a vocabulary they join
/// the stop set.
pub const END_OF_TURN_TEXTS: [&str; 6] = [
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
];
