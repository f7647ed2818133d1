//! The operand table as every importer builds it: a tensor name mapped to its
//! `(layer, role)` key under the importer's naming (unknown tensors and layers beyond the
//! model refused), and the facts read off the finished table.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Result, StorageError};
use crate::model::{Operand, OperandKey, Role};

/// Roles stored once per model rather than once per layer.
const GLOBAL_ROLES: [Role; 6] = Role::GLOBAL;

/// The inverse of an importer's `tensor_name`: a global operand by its full name, a layer
/// operand as `{layer_prefix}{layer}.{suffix}`. `None` for a name the naming does not have.
pub fn key_from_name(
    name: &str,
    layer_prefix: &str,
    tensor_name: fn(OperandKey) -> String,
) -> Option<OperandKey> {
    if let Some(role) = GLOBAL_ROLES
        .into_iter()
        .find(|&r| tensor_name(OperandKey::global(r)) == name)
    {
        return Some(OperandKey::global(role));
    }
    let rest = name.strip_prefix(layer_prefix)?;
    let (layer, suffix) = rest.split_once('.')?;
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) || layer.len() > 6 {
        return None;
    }
    let layer: usize = layer.parse().ok()?;
    let layer0 = format!("{layer_prefix}0.");
    let role = Role::ALL.into_iter().find(|&r| {
        !GLOBAL_ROLES.contains(&r)
            && tensor_name(OperandKey::layer(0, r)).strip_prefix(layer0.as_str()) == Some(suffix)
    })?;
    Some(OperandKey::layer(layer, role))
}

/// The key of tensor `name` found in `path`, or an error naming it: a tensor the `family`
/// importer does not know, or a layer beyond the model's `n_layers`.
pub fn tensor_key(
    path: &Path,
    name: &str,
    family: &str,
    n_layers: usize,
    key_of: impl Fn(&str) -> Option<OperandKey>,
) -> Result<OperandKey> {
    let key = key_of(name).ok_or_else(|| StorageError::Tensor {
        path: path.to_path_buf(),
        tensor: name.to_string(),
        message: format!("not supported yet: a tensor the {family} importer does not know"),
    })?;
    if key.layer.is_some_and(|l| l >= n_layers) {
        return Err(StorageError::Tensor {
            path: path.to_path_buf(),
            tensor: name.to_string(),
            message: format!("layer index beyond the {n_layers} layers of the model"),
        });
    }
    Ok(key)
}

/// The vocabulary size the token embedding implies (its row count), if it is a matrix.
pub fn embedding_vocab(operands: &BTreeMap<OperandKey, Operand>) -> Option<usize> {
    match operands.get(&OperandKey::global(Role::TokenEmbedding)) {
        Some(op) if op.shape.len() == 2 => Some(op.shape[1]),
        _ => None,
    }
}

/// Whether any Q/K/V bias is in the table.
pub fn has_attn_bias(operands: &BTreeMap<OperandKey, Operand>) -> bool {
    operands
        .keys()
        .any(|k| matches!(k.role, Role::AttnQBias | Role::AttnKBias | Role::AttnVBias))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::{gguf, hf};

    #[test]
    fn key_from_name_inverts_both_namings() {
        for role in Role::ALL {
            for key in [OperandKey::layer(0, role), OperandKey::layer(29, role)] {
                let key = if GLOBAL_ROLES.contains(&role) {
                    OperandKey::global(role)
                } else {
                    key
                };
                assert_eq!(gguf::operand_key(&gguf::tensor_name(key)), Some(key));
                assert_eq!(hf::operand_key(&hf::tensor_name(key)), Some(key));
            }
        }
        for name in [
            "blk.x.attn_q.weight",
            "blk..attn_q.weight",
            "blk.1.attn_q",
            "rope_factors_long.weight",
        ] {
            assert_eq!(gguf::operand_key(name), None, "{name}");
        }
        assert_eq!(gguf::operand_key("blk.1234567.attn_q.weight"), None);
        assert_eq!(hf::operand_key("model.layers.3.mlp.fc9.bias"), None);
    }
}
