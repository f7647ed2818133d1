//! COMPILE … INTO GGUF: a GGUF file of a [`MaterialSource`]'s state that llama.cpp loads.
//!
//! The metadata (architecture hyperparameters, tokenizer, chat template) is the source
//! GGUF's, in its order, plus three provenance keys: `lql.authority` = `derived`,
//! `lql.derived_from_model` (SHA-256 of the source file) and `lql.applied_patches`
//! (patch hashes, in order). The state is written in its executable form
//! ([`MaterialSource::as_model`]): with edits, every layer's FFN at one width (zero features
//! pad the narrower layers, `feed_forward_length` says the width) and the added features'
//! biases as `blk.N.ffn_gate.bias` / `blk.N.ffn_up.bias` (llama.cpp's optional MLP biases),
//! written after the source's tensors. Tensors keep the source file's order and names; each one the
//! state holds is written from the state (byte-identical to the source when unedited),
//! and any tensor the importer does not read (none for the supported families) is carried
//! from the source byte for byte. Sources other than GGUF carry no GGUF metadata and are
//! refused as not supported yet.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::reader::GgufFile;
use super::value::MetaValue;
use super::writer::GgufWriter;
use crate::error::{Result, StorageError};
use crate::material::MaterialSource;
use crate::model::{Model, Role, SourceKind};

/// What an export wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufExportReport {
    pub path: PathBuf,
    pub tensors: usize,
    /// Tensors carried from the source file (not read by the importer).
    pub carried: usize,
    pub bytes: u64,
    pub seconds: f64,
}

/// Writes `src` as a GGUF at `out` (temporary name, fsync, rename), stamping
/// `derived_from` (the source's SHA-256) and the applied patches.
pub fn export_gguf(
    src: &dyn MaterialSource,
    out: &Path,
    derived_from: &str,
) -> Result<GgufExportReport> {
    let started = Instant::now();
    let base = src.base();
    if base.kind != SourceKind::Gguf {
        return Err(StorageError::Unsupported(format!(
            "not supported yet: COMPILE … INTO GGUF from a {:?} source ({} keeps no GGUF metadata to carry)",
            base.kind,
            base.path.display()
        )));
    }
    if same_file(&base.path, out) {
        return Err(StorageError::Invalid(format!(
            "{}: COMPILE would overwrite the model it reads; write to another path",
            out.display()
        )));
    }
    let file = GgufFile::open(&base.path)?;
    // The executable form: edits folded in, every layer at one FFN width.
    let model = src.as_merged_model()?;
    let model: &Model = &model;
    let mut w = GgufWriter::new();
    for kv in file.metadata() {
        if kv.key.starts_with("lql.") {
            continue;
        }
        if kv.key.ends_with(".feed_forward_length") && model.surface.ffn != base.surface.ffn {
            let ffn = u32::try_from(model.surface.ffn).map_err(|_| {
                StorageError::Invalid(format!("FFN width {} does not fit u32", model.surface.ffn))
            })?;
            w.add_kv(kv.key.clone(), MetaValue::U32(ffn))?;
            continue;
        }
        w.add_kv(kv.key.clone(), kv.value.clone())?;
    }
    let patches = src.applied_patches();
    w.add_kv("lql.authority", "derived")?;
    w.add_kv("lql.derived_from_model", derived_from)?;
    w.add_kv("lql.applied_patches", MetaValue::str_array(&patches))?;

    let tensors = model.tensors();
    // A tied head reads the embedding's tensor: several keys may share one stored name.
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, t) in tensors.iter().enumerate() {
        by_name.entry(t.name.as_str()).or_default().push(i);
    }
    let mut used = vec![false; tensors.len()];
    let mut carried = 0;
    for info in file.tensors() {
        let Some(ids) = by_name.get(info.name.as_str()) else {
            carried += 1;
            w.add_tensor(&info.name, info.dtype, &info.shape, file.view(info).bytes)?;
            continue;
        };
        let mut chosen = None;
        for &i in ids {
            used[i] = true;
            let t = &tensors[i];
            let view = model
                .tensor(t.key)
                .ok_or_else(|| StorageError::MissingOperand {
                    key: t.key.to_string(),
                })?;
            match chosen {
                None => chosen = Some(view),
                Some(c) if c.bytes == view.bytes && c.dtype == view.dtype => {}
                Some(_) => {
                    return Err(StorageError::Unsupported(format!(
                        "not supported yet: {} is shared by several operands whose states differ",
                        info.name
                    )))
                }
            }
        }
        let view = chosen.expect("a name maps to at least one tensor");
        w.add_tensor(&info.name, view.dtype, view.shape, view.bytes)?;
    }
    // Tensors the state adds (a compiled edit's FFN biases), after the source's.
    let mut added = 0;
    for (i, t) in tensors.iter().enumerate() {
        if used[i] {
            continue;
        }
        if !matches!(t.key.role, Role::FfnGateBias | Role::FfnUpBias) {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: a tensor the source file does not hold ({}, {})",
                t.name, t.key
            )));
        }
        let view = model
            .tensor(t.key)
            .ok_or_else(|| StorageError::MissingOperand {
                key: t.key.to_string(),
            })?;
        w.add_tensor(&t.name, view.dtype, view.shape, view.bytes)?;
        added += 1;
    }
    w.write(out)?;
    let bytes = std::fs::metadata(out)
        .map_err(|e| StorageError::io(out, e))?
        .len();
    Ok(GgufExportReport {
        path: out.to_path_buf(),
        tensors: file.tensors().len() + added,
        carried,
        bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// True when `a` and `b` name the same existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}
