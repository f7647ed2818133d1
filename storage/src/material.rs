//! The material seam: what DIFF and COMPILE read from a model's state, tensor by tensor.
//!
//! A [`MaterialSource`] lists its tensors (stored name, `(layer, role)`, encoding, shape)
//! and hands out one tensor's encoded bytes at a time; decoding is the codec's. A [`Model`]
//! as bound implements it (its state is its base), and so does the effective state of an
//! edited session (`crate::overlay::material::EffectiveMaterial`): a tensor an overlay
//! touched is served from owned bytes (re-encoded in the tensor's encoding where exact,
//! else F32), every other tensor from the base map; `applied_patches` names the patches by
//! hash, and [`MaterialSource::as_model`] gives writers that take a `Model` (the VINDEX3
//! and GGUF writers) an executable model whose edited operands live in owned backings.

use crate::codec;
use crate::dtype::DType;
use crate::error::{Result, StorageError};
use crate::model::{Model, OperandKey, OperandSource, TensorView};
use crate::overlay::derive::OverlayForm;
use std::borrow::Cow;
use std::sync::Arc;

/// One tensor of a source, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaterialTensor {
    /// The tensor's name in its source (e.g. `blk.0.attn_q.weight`).
    pub name: String,
    pub key: OperandKey,
    pub dtype: DType,
    /// ggml order: `shape[0]` is the row length.
    pub shape: Vec<usize>,
}

impl MaterialTensor {
    pub fn row_len(&self) -> usize {
        self.shape.first().copied().unwrap_or(1)
    }
    pub fn rows(&self) -> usize {
        self.shape.iter().skip(1).product()
    }
    pub fn elems(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A model state DIFF and COMPILE can read: the bound model today, base + overlays once
/// edits exist.
pub trait MaterialSource: Send + Sync {
    /// The base model (surface, tokenizer, source path and kind).
    fn base(&self) -> &Model;

    /// Every tensor, ordered by `(layer, role)` (global tensors first).
    fn tensors(&self) -> Vec<MaterialTensor>;

    /// The encoded bytes of the tensor under `key`.
    fn tensor(&self, key: OperandKey) -> Option<TensorView<'_>>;

    /// SHA-256 (hex) of the applied patches, in application order; empty for a base.
    fn applied_patches(&self) -> Vec<String> {
        Vec::new()
    }

    /// The identity of the state's base source ([`source_identity`] of the base).
    fn source_identity(&self) -> Result<String> {
        source_identity(self.base())
    }

    /// The state as one `Model`, for writers that take a model: borrowed when nothing is
    /// edited, else a model whose edited operands live in owned backings.
    fn as_model(&self) -> Result<Cow<'_, Model>>;

    /// The state as one `Model` in the plain form other tools read (GGUF for llama.cpp):
    /// edits folded into the FFN tensors, every layer at one FFN width. The same as
    /// [`MaterialSource::as_model`] when nothing is edited.
    fn as_merged_model(&self) -> Result<Cow<'_, Model>> {
        self.as_model()
    }

    /// The state as the executor reads it (base + overlays), for equivalence checks.
    fn executable(&self) -> Arc<dyn OperandSource>;

    /// The state as plain operands + the overlays in force, with the edges of added
    /// features (what `DIFF … INTO PATCH` compares: `crate::overlay::derive`).
    fn overlay_form(&self) -> OverlayForm<'_>;

    /// Decodes `n` rows of the tensor under `key` from row `start` into `out`
    /// (`out.len()` = `n` × row length).
    fn decode_rows(&self, key: OperandKey, start: usize, n: usize, out: &mut [f32]) -> Result<()> {
        let view = self
            .tensor(key)
            .ok_or_else(|| StorageError::MissingOperand {
                key: key.to_string(),
            })?;
        if start.checked_add(n).is_none_or(|end| end > view.rows()) {
            return Err(StorageError::Invalid(format!(
                "{key}: rows {start}..{} outside its {} rows",
                start.saturating_add(n),
                view.rows()
            )));
        }
        let rb = view.row_bytes();
        Ok(codec::decode_rows(
            view.dtype,
            &view.bytes[start * rb..(start + n) * rb],
            view.row_len(),
            out,
        )?)
    }
}

impl MaterialSource for Model {
    fn base(&self) -> &Model {
        self
    }

    fn tensors(&self) -> Vec<MaterialTensor> {
        self.operands
            .iter()
            .map(|(k, op)| MaterialTensor {
                name: op.source_name.clone(),
                key: *k,
                dtype: op.dtype,
                shape: op.shape.clone(),
            })
            .collect()
    }

    fn tensor(&self, key: OperandKey) -> Option<TensorView<'_>> {
        self.view(key)
    }

    fn as_model(&self) -> Result<Cow<'_, Model>> {
        Ok(Cow::Borrowed(self))
    }

    fn as_merged_model(&self) -> Result<Cow<'_, Model>> {
        if !self.overlays.is_empty() {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: the plain (merged) form of {}, which stores a compiled overlay; USE it and COMPILE CURRENT instead",
                self.path.display()
            )));
        }
        Ok(Cow::Borrowed(self))
    }

    fn executable(&self) -> Arc<dyn OperandSource> {
        Arc::new(self.clone())
    }

    fn overlay_form(&self) -> OverlayForm<'_> {
        OverlayForm {
            model: self,
            layers: &self.overlays,
            edges: Default::default(),
        }
    }
}

/// The identity of a model's source artifact: SHA-256 (hex) of a single file (GGUF), of
/// `index.json` for a VINDEX3 container (it names every segment by hash), or of the
/// sorted `(name, sha256)` list of a folder's weight files.
pub fn source_identity(model: &Model) -> Result<String> {
    use sha2::{Digest, Sha256};
    let path = &model.path;
    if path.is_file() {
        return crate::format::package::integrity::sha256_file(path);
    }
    let index = path.join("index.json");
    if index.is_file() {
        return crate::format::package::integrity::sha256_file(&index);
    }
    let mut names: Vec<_> = std::fs::read_dir(path)
        .map_err(|e| StorageError::io(path, e))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "safetensors" || x == "json")
        })
        .collect();
    names.sort();
    let mut h = Sha256::new();
    for p in names {
        h.update(p.file_name().unwrap_or_default().as_encoded_bytes());
        h.update(crate::format::package::integrity::sha256_file(&p)?.as_bytes());
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}
