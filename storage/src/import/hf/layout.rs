//! Undoing a class's [`Layout`]: the stored tensors whose arrangement differs from the
//! family's operands are rewritten once, at open, into owned memory (every other tensor is
//! read in place from the map). Only the float encodings safetensors holds (F32, F16,
//! BF16) are rearranged; anything else is refused by name.
//!
//! [`Layout`]: super::classes::Layout

use std::path::Path;

use crate::codec;
use crate::error::{Result, StorageError};
use crate::format::safetensors::StTensor;
use crate::model::{Backing, Operand};
use crate::DType;

/// The folder's mapped files and the owned buffers made from them, indexed as one list
/// (the model's backings).
pub struct Backings {
    pub list: Vec<Backing>,
}

impl Backings {
    /// A stored tensor as an operand, read in place.
    pub fn in_place(t: &StTensor) -> Operand {
        Operand {
            source_name: t.name.clone(),
            dtype: t.dtype,
            shape: t.shape.clone(),
            backing: t.file,
            offset: t.offset,
            len: t.len,
        }
    }

    /// The stored bytes of `op`.
    pub fn bytes(&self, op: &Operand) -> &[u8] {
        &self.list[op.backing].bytes()[op.offset..op.offset + op.len]
    }

    /// An operand over `bytes`, now owned.
    fn own(
        &mut self,
        source_name: String,
        dtype: DType,
        shape: Vec<usize>,
        bytes: Vec<u8>,
    ) -> Operand {
        let len = bytes.len();
        self.list.push(Backing::Owned(std::sync::Arc::new(bytes)));
        Operand {
            source_name,
            dtype,
            shape,
            backing: self.list.len() - 1,
            offset: 0,
            len,
        }
    }

    /// An F32 vector made at open (not stored in the folder), named `source_name`.
    pub fn made_f32(&mut self, source_name: String, values: &[f32]) -> Operand {
        let bytes = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.own(source_name, DType::F32, vec![values.len()], bytes)
    }

    /// `op` with 1 added to every element, as F32 (Gemma's norm weights).
    pub fn plus_one(&mut self, dir: &Path, op: &Operand) -> Result<Operand> {
        element_size(dir, op)?;
        let n: usize = op.shape.iter().product();
        let mut v = vec![0f32; n];
        codec::decode_row(op.dtype, self.bytes(op), &mut v).map_err(|e| StorageError::Tensor {
            path: dir.to_path_buf(),
            tensor: op.source_name.clone(),
            message: e.to_string(),
        })?;
        let bytes = v.iter().flat_map(|x| (x + 1.0).to_le_bytes()).collect();
        Ok(self.own(op.source_name.clone(), DType::F32, op.shape.clone(), bytes))
    }

    /// `op` (ggml shape `[a, b]`) transposed to `[b, a]`, in its encoding.
    pub fn transpose(&mut self, dir: &Path, op: &Operand) -> Result<Operand> {
        let es = element_size(dir, op)?;
        let (a, b) = match op.shape.as_slice() {
            [a, b] => (*a, *b),
            other => return Err(shape_error(dir, op, other, "a matrix")),
        };
        let src = self.bytes(op);
        let mut out = vec![0u8; src.len()];
        for r in 0..b {
            for c in 0..a {
                let from = (r * a + c) * es;
                let to = (c * b + r) * es;
                out[to..to + es].copy_from_slice(&src[from..from + es]);
            }
        }
        Ok(self.own(op.source_name.clone(), op.dtype, vec![b, a], out))
    }

    /// A fused QKV tensor whose rows (or, for a bias, elements) run `[head][q, k, v][dim]`
    /// regrouped to `[q, k, v][head][dim]`.
    pub fn regroup_qkv(
        &mut self,
        dir: &Path,
        op: &Operand,
        heads: usize,
        head_dim: usize,
    ) -> Result<Operand> {
        let es = element_size(dir, op)?;
        let (row_elems, rows) = match op.shape.as_slice() {
            [row, rows] => (*row, *rows),
            [n] => (1, *n),
            other => return Err(shape_error(dir, op, other, "a matrix or a vector")),
        };
        if rows != 3 * heads * head_dim {
            return Err(StorageError::Tensor {
                path: dir.to_path_buf(),
                tensor: op.source_name.clone(),
                message: format!(
                    "{rows} rows where {heads} heads of Q, K and V ({head_dim} wide) need {}",
                    3 * heads * head_dim
                ),
            });
        }
        let row = row_elems * es;
        let src = self.bytes(op);
        let mut out = vec![0u8; src.len()];
        for h in 0..heads {
            for j in 0..3 {
                for d in 0..head_dim {
                    let from = ((h * 3 + j) * head_dim + d) * row;
                    let to = ((j * heads + h) * head_dim + d) * row;
                    out[to..to + row].copy_from_slice(&src[from..from + row]);
                }
            }
        }
        Ok(self.own(op.source_name.clone(), op.dtype, op.shape.clone(), out))
    }

    /// One bank from the experts' matrices, in expert order (ggml shape `[in, out, n]`).
    /// Every expert must share the first one's encoding and shape.
    pub fn stack(&mut self, dir: &Path, name: String, experts: &[Operand]) -> Result<Operand> {
        let first = &experts[0];
        if let Some(odd) = experts
            .iter()
            .find(|e| e.dtype != first.dtype || e.shape != first.shape)
        {
            return Err(StorageError::Tensor {
                path: dir.to_path_buf(),
                tensor: odd.source_name.clone(),
                message: format!(
                    "an expert of {} {:?} beside {} of {} {:?}",
                    odd.dtype, odd.shape, first.source_name, first.dtype, first.shape
                ),
            });
        }
        let mut out = Vec::with_capacity(first.len * experts.len());
        for e in experts {
            out.extend_from_slice(self.bytes(e));
        }
        let mut shape = first.shape.clone();
        shape.push(experts.len());
        Ok(self.own(name, first.dtype, shape, out))
    }
}

/// The bytes of one element of `op`'s encoding (a one-element-block encoding: F32, F16,
/// BF16), or a refusal of a block-quantised one, which the importer does not rearrange.
fn element_size(dir: &Path, op: &Operand) -> Result<usize> {
    if op.dtype.is_scalar() {
        return Ok(op.dtype.block_bytes());
    }
    Err(StorageError::Tensor {
        path: dir.to_path_buf(),
        tensor: op.source_name.clone(),
        message: format!("not supported yet: rearranging a {} tensor", op.dtype),
    })
}

fn shape_error(dir: &Path, op: &Operand, shape: &[usize], want: &str) -> StorageError {
    StorageError::Tensor {
        path: dir.to_path_buf(),
        tensor: op.source_name.clone(),
        message: format!("shape {shape:?} where {want} is expected"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_op(b: &mut Backings, shape: Vec<usize>, v: &[f32]) -> Operand {
        let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        b.own("t".into(), DType::F32, shape, bytes)
    }

    fn values(b: &Backings, op: &Operand) -> Vec<f32> {
        b.bytes(op)
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn rearrangements_move_each_element_where_the_family_reads_it() {
        let dir = Path::new("/m");
        let mut b = Backings { list: Vec::new() };
        // Rows [0 1 2] and [3 4 5] (ggml [3, 2]) → rows [0 3], [1 4], [2 5].
        let m = f32_op(&mut b, vec![3, 2], &[0., 1., 2., 3., 4., 5.]);
        let t = b.transpose(dir, &m).unwrap();
        assert_eq!(t.shape, vec![2, 3]);
        assert_eq!(values(&b, &t), [0., 3., 1., 4., 2., 5.]);
        // 2 heads of 1 dim: [h0q h0k h0v h1q h1k h1v] → [h0q h1q h0k h1k h0v h1v].
        let qkv = f32_op(&mut b, vec![6], &[1., 2., 3., 4., 5., 6.]);
        let r = b.regroup_qkv(dir, &qkv, 2, 1).unwrap();
        assert_eq!(values(&b, &r), [1., 4., 2., 5., 3., 6.]);
        assert!(b.regroup_qkv(dir, &qkv, 3, 1).is_err(), "rows must add up");
        let n = b.plus_one(dir, &qkv).unwrap();
        assert_eq!(values(&b, &n), [2., 3., 4., 5., 6., 7.]);
        let e0 = f32_op(&mut b, vec![1, 2], &[1., 2.]);
        let e1 = f32_op(&mut b, vec![1, 2], &[3., 4.]);
        let bank = b.stack(dir, "bank".into(), &[e0.clone(), e1]).unwrap();
        assert_eq!(bank.shape, vec![1, 2, 2]);
        assert_eq!(values(&b, &bank), [1., 2., 3., 4.]);
        let odd = f32_op(&mut b, vec![2, 1], &[1., 2.]);
        assert!(b.stack(dir, "bank".into(), &[e0, odd]).is_err());
    }
}
