//! llama.cpp's control-vector files: a GGUF whose `general.architecture` is
//! `controlvector`, with `controlvector.model_hint` (the family it was made for),
//! `controlvector.layer_count`, and one F32 tensor `direction.N` of the model's width per
//! steered layer. llama.cpp adds `direction.N` to the residual stream leaving layer N
//! (0-based; it never steers layer 0), so a file made for it steers LQL the same way
//! (`--control-vector`, `llama_set_adapter_cvec`). Read with every check llama.cpp makes
//! and more (a NaN, a layer past any model, a width that disagrees); written atomically.

use std::collections::BTreeMap;
use std::path::Path;

use super::gguf::{GgufFile, GgufWriter, MetaValue};
use crate::dtype::DType;
use crate::error::{Result, StorageError};

/// The architecture name a control-vector GGUF declares.
pub const ARCHITECTURE: &str = "controlvector";

/// Most layers a control vector may name (no model has more).
pub const MAX_LAYERS: usize = 4096;

/// A control vector: per layer, the vector added to the residual stream leaving it.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlVector {
    /// The family it was made for (`controlvector.model_hint`), when the file says.
    pub model_hint: Option<String>,
    /// Layer → direction, every one `width` long.
    pub directions: BTreeMap<usize, Vec<f32>>,
    pub width: usize,
}

fn format_err(path: &Path, offset: u64, field: &str, message: String) -> StorageError {
    StorageError::Format {
        path: path.to_path_buf(),
        offset,
        field: field.to_string(),
        message,
    }
}

impl ControlVector {
    /// Reads and checks a control-vector GGUF.
    pub fn read(path: &Path) -> Result<ControlVector> {
        let f = GgufFile::open(path)?;
        match f.get_str("general.architecture")? {
            Some(ARCHITECTURE) => {}
            Some(other) => {
                let at = f.kv("general.architecture").map_or(0, |k| k.offset);
                return Err(format_err(
                    path,
                    at,
                    "general.architecture",
                    format!(
                        "{other:?} is a model, not a control vector (a control vector's \
                         architecture is {ARCHITECTURE:?})"
                    ),
                ));
            }
            None => {
                return Err(format_err(
                    path,
                    0,
                    "general.architecture",
                    format!("missing: a control vector declares {ARCHITECTURE:?}"),
                ))
            }
        }
        let model_hint = f
            .get_str(&format!("{ARCHITECTURE}.model_hint"))?
            .map(str::to_string);
        let mut directions = BTreeMap::new();
        let mut width = None;
        for t in f.tensors() {
            let bad = |message: String| StorageError::Tensor {
                path: path.to_path_buf(),
                tensor: t.name.clone(),
                message,
            };
            let layer: usize = t
                .name
                .strip_prefix("direction.")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| bad("not a direction (direction.N, N a layer)".into()))?;
            if layer == 0 || layer > MAX_LAYERS {
                return Err(bad(format!(
                    "layer {layer}: a control vector steers layers 1-{MAX_LAYERS} (llama.cpp \
                     never steers layer 0)"
                )));
            }
            if t.dtype != DType::F32 {
                return Err(bad(format!(
                    "{} values; directions are F32",
                    t.dtype.name()
                )));
            }
            if t.shape.len() != 1 || t.shape[0] == 0 {
                return Err(bad(format!(
                    "shape {:?}; a direction is one row of the model's width",
                    t.shape
                )));
            }
            let w = t.shape[0];
            match width {
                None => width = Some(w),
                Some(prev) if prev != w => {
                    return Err(bad(format!(
                        "{w} values, but the file's other directions have {prev}"
                    )))
                }
                _ => {}
            }
            let bytes = f.view(t).bytes;
            let values: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            if let Some(i) = values.iter().position(|v| !v.is_finite()) {
                return Err(bad(format!("value {i} is {} (not finite)", values[i])));
            }
            if directions.insert(layer, values).is_some() {
                return Err(bad("given twice".into()));
            }
        }
        let width = width.ok_or_else(|| {
            format_err(
                path,
                0,
                "tensors",
                "no direction.N tensors: the control vector steers nothing".into(),
            )
        })?;
        Ok(ControlVector {
            model_hint,
            directions,
            width,
        })
    }

    /// Writes the vector as llama.cpp reads it (temporary name, rename last).
    pub fn write(&self, path: &Path) -> Result<()> {
        if self.directions.is_empty() {
            return Err(StorageError::Invalid(
                "a control vector needs at least one layer's direction".into(),
            ));
        }
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", MetaValue::Str(ARCHITECTURE.into()))?;
        if let Some(h) = &self.model_hint {
            w.add_kv(
                format!("{ARCHITECTURE}.model_hint"),
                MetaValue::Str(h.clone()),
            )?;
        }
        w.add_kv(
            format!("{ARCHITECTURE}.layer_count"),
            MetaValue::I32(self.directions.len() as i32),
        )?;
        for (layer, v) in &self.directions {
            if *layer == 0 || v.len() != self.width {
                return Err(StorageError::Invalid(format!(
                    "direction {layer} cannot be written ({} values, width {})",
                    v.len(),
                    self.width
                )));
            }
            w.add_f32_tensor(&format!("direction.{layer}"), &[self.width], v)?;
        }
        w.write(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("lql-cvec-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn round_trips_and_refuses_bad_files() {
        let d = dir();
        let cv = ControlVector {
            model_hint: Some("llama".into()),
            directions: BTreeMap::from([(1, vec![0.5, -1.0]), (3, vec![2.0, 0.0])]),
            width: 2,
        };
        let p = d.join("ok.gguf");
        cv.write(&p).unwrap();
        assert_eq!(ControlVector::read(&p).unwrap(), cv);

        let write = |name: &str, f: &dyn Fn(&mut GgufWriter)| {
            let mut w = GgufWriter::new();
            f(&mut w);
            let p = d.join(name);
            w.write(&p).unwrap();
            ControlVector::read(&p).unwrap_err().to_string()
        };
        let arch = |w: &mut GgufWriter| {
            w.add_kv("general.architecture", MetaValue::Str(ARCHITECTURE.into()))
                .unwrap();
        };
        let e = write("nan.gguf", &|w| {
            arch(w);
            w.add_f32_tensor("direction.1", &[2], &[1.0, f32::NAN])
                .unwrap();
        });
        assert!(e.contains("value 1 is NaN"), "{e}");
        let e = write("zero.gguf", &|w| {
            arch(w);
            w.add_f32_tensor("direction.0", &[2], &[1.0, 1.0]).unwrap();
        });
        assert!(e.contains("never steers layer 0"), "{e}");
        let e = write("widths.gguf", &|w| {
            arch(w);
            w.add_f32_tensor("direction.1", &[2], &[1.0, 1.0]).unwrap();
            w.add_f32_tensor("direction.2", &[3], &[1.0, 1.0, 1.0])
                .unwrap();
        });
        assert!(e.contains("other directions have 2"), "{e}");
        let e = write("model.gguf", &|w| {
            w.add_kv("general.architecture", MetaValue::Str("llama".into()))
                .unwrap();
        });
        assert!(e.contains("is a model, not a control vector"), "{e}");
        let e = write("empty.gguf", &|w| arch(w));
        assert!(e.contains("steers nothing"), "{e}");
        let e = write("name.gguf", &|w| {
            arch(w);
            w.add_f32_tensor("steer.1", &[2], &[1.0, 1.0]).unwrap();
        });
        assert!(e.contains("not a direction"), "{e}");
        let e = write("type.gguf", &|w| {
            arch(w);
            w.add_tensor("direction.1", DType::F16, &[2], vec![0; 4])
                .unwrap();
        });
        assert!(e.contains("directions are F32"), "{e}");
        std::fs::remove_dir_all(&d).ok();
    }
}
