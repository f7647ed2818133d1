//! Query vectors for browse in EMBEDDING mode: token embedding rows × embedding_scale.
//!
//! WALK uses the last token's row; DESCRIBE of a multi-token entity uses the mean of its rows.

use lql_storage::codec;
use lql_storage::model::{OperandKey, OperandSource, Role};

use super::gate_scan::check_matrix;
use crate::error::{ExecError, Result};

/// The embedding row of `id`, times the surface's `embedding_scale`.
pub fn embedding_row(src: &dyn OperandSource, id: u32) -> Result<Vec<f32>> {
    let s = src.surface();
    let view =
        src.view(OperandKey::global(Role::TokenEmbedding))
            .ok_or(ExecError::MissingOperand {
                operand: "token_embedding",
                layer: None,
            })?;
    check_matrix(&view, "token_embedding", None, s.hidden, None)?;
    let vocab = view.rows();
    if id as usize >= vocab {
        return Err(ExecError::TokenOutOfRange {
            id,
            position: None,
            vocab,
        });
    }
    let mut out = vec![0.0f32; s.hidden];
    codec::decode_row(view.dtype, view.row(id as usize), &mut out)?;
    if s.embedding_scale != 1.0 {
        for v in &mut out {
            *v *= s.embedding_scale;
        }
    }
    Ok(out)
}

/// The mean of the scaled embedding rows of `ids` (one id: its row).
pub fn mean_embedding(src: &dyn OperandSource, ids: &[u32]) -> Result<Vec<f32>> {
    let (first, rest) = ids
        .split_first()
        .ok_or_else(|| ExecError::EmptyInput("the entity".into()))?;
    let mut acc = embedding_row(src, *first)?;
    for &id in rest {
        for (a, v) in acc.iter_mut().zip(embedding_row(src, id)?) {
            *a += v;
        }
    }
    let n = ids.len() as f32;
    if ids.len() > 1 {
        for a in &mut acc {
            *a /= n;
        }
    }
    Ok(acc)
}
