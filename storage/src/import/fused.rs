//! Fused tensors: one stored tensor holding several of the block's operands one after the
//! other (Q, K and V rows; the gate rows, then the up rows), split into row ranges read in
//! place. Each importer says which of its names are fused; the split is this one.

use std::path::Path;

use crate::error::{Result, StorageError};
use crate::model::{Operand, OperandKey, Role};

/// What a fused tensor holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusedTensor {
    /// The Q, K and V projections' rows, in order.
    Qkv,
    /// The Q, K and V biases, in order.
    QkvBias,
    /// The gate rows, then the up rows (phi3).
    GateUp,
}

/// How a family's fused tensors split into the block's operands.
pub struct FusedRows {
    /// Rows of the Q, K (= V) projections.
    pub q: usize,
    pub kv: usize,
    pub ffn: usize,
}

impl FusedRows {
    /// The operands fused tensor `stored` of layer `layer` (as its name spells it) holds:
    /// row ranges of it, read in place. A fused tensor whose rows do not add up is refused
    /// by name.
    pub fn split(
        &self,
        path: &Path,
        layer: &str,
        n_layers: usize,
        kind: FusedTensor,
        stored: &Operand,
    ) -> Result<Vec<(OperandKey, Operand)>> {
        let parts: &[(Role, usize, &str)] = match kind {
            FusedTensor::Qkv => &[
                (Role::AttnQ, self.q, "q"),
                (Role::AttnK, self.kv, "k"),
                (Role::AttnV, self.kv, "v"),
            ],
            FusedTensor::QkvBias => &[
                (Role::AttnQBias, self.q, "q"),
                (Role::AttnKBias, self.kv, "k"),
                (Role::AttnVBias, self.kv, "v"),
            ],
            FusedTensor::GateUp => &[
                (Role::FfnGate, self.ffn, "gate"),
                (Role::FfnUp, self.ffn, "up"),
            ],
        };
        let bad = |message: String| StorageError::Tensor {
            path: path.to_path_buf(),
            tensor: stored.source_name.clone(),
            message,
        };
        let layer: usize = match layer.parse() {
            Ok(l) if l < n_layers && layer.len() <= 6 => l,
            _ => {
                return Err(bad(format!(
                    "layer index beyond the {n_layers} layers of the model"
                )))
            }
        };
        let total: usize = parts.iter().map(|p| p.1).sum();
        // A matrix splits by rows (shape[1]); a bias vector by elements (shape[0]).
        let matrix = stored.shape.len() == 2;
        let (unit_elems, count) = match stored.shape.as_slice() {
            [row, rows] => (*row, *rows),
            [n] => (1, *n),
            other => return Err(bad(format!("a fused tensor of shape {other:?}"))),
        };
        if count != total {
            let names: Vec<String> = parts.iter().map(|p| format!("{} {}", p.2, p.1)).collect();
            return Err(bad(format!(
                "{count} {} where the metadata asks for {} ({})",
                if matrix { "rows" } else { "elements" },
                total,
                names.join(" + ")
            )));
        }
        let mut out = Vec::with_capacity(parts.len());
        let mut at = 0usize;
        for &(role, n, label) in parts {
            let bytes_of = |elems: usize| {
                stored
                    .dtype
                    .bytes_for(elems as u64)
                    .and_then(|b| usize::try_from(b).ok())
            };
            let (Some(offset), Some(len)) = (bytes_of(at * unit_elems), bytes_of(n * unit_elems))
            else {
                return Err(bad(format!(
                    "the {label} part does not start on a whole {} block",
                    stored.dtype
                )));
            };
            if offset + len > stored.len {
                return Err(bad(format!(
                    "{} bytes hold less than the {label} part",
                    stored.len
                )));
            }
            let shape = if matrix { vec![unit_elems, n] } else { vec![n] };
            out.push((
                OperandKey::layer(layer, role),
                Operand {
                    source_name: format!("{}#{label}", stored.source_name),
                    dtype: stored.dtype,
                    shape,
                    backing: stored.backing,
                    offset: stored.offset + offset,
                    len,
                },
            ));
            at += n;
        }
        Ok(out)
    }
}
