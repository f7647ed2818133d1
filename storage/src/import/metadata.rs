//! Where a family reads its block's settings: a GGUF file's metadata, or a Hugging Face
//! `config.json` translated to the same keys.
//!
//! A family's `block` function ([`super::family::Family::block`]) and the expert reader ask
//! for `{arch}.{key}` by its GGUF name. [`Metadata`] answers for either source, so one
//! function per family decides the block of both formats: the HF importer translates the
//! config's fields to GGUF keys once ([`ConfigMetadata`]), naming the config field in any
//! refusal.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Result, StorageError};
use crate::format::gguf::GgufFile;

/// Typed access to model metadata by GGUF key. `Ok(None)`: absent; an error: present with
/// another type.
pub trait Metadata {
    /// The file the metadata came from (named in refusals).
    fn path(&self) -> &Path;
    fn u64(&self, key: &str) -> Result<Option<u64>>;
    fn f32(&self, key: &str) -> Result<Option<f32>>;
    fn bool(&self, key: &str) -> Result<Option<bool>>;
    fn str(&self, key: &str) -> Result<Option<&str>>;
    /// Whether `key` is present, whatever its type.
    fn has(&self, key: &str) -> bool;
    /// How a refusal names `key`: the field as the source spells it, and its byte offset.
    fn locate(&self, key: &str) -> (String, u64);
    /// Whether the source stores a tensor of this GGUF name.
    fn has_tensor(&self, name: &str) -> bool;
}

impl Metadata for GgufFile {
    fn path(&self) -> &Path {
        GgufFile::path(self)
    }
    fn u64(&self, key: &str) -> Result<Option<u64>> {
        self.get_u64(key)
    }
    fn f32(&self, key: &str) -> Result<Option<f32>> {
        self.get_f32(key)
    }
    fn bool(&self, key: &str) -> Result<Option<bool>> {
        self.get_bool(key)
    }
    fn str(&self, key: &str) -> Result<Option<&str>> {
        self.get_str(key)
    }
    fn has(&self, key: &str) -> bool {
        self.kv(key).is_some()
    }
    fn locate(&self, key: &str) -> (String, u64) {
        (key.to_string(), self.kv(key).map_or(0, |kv| kv.offset))
    }
    fn has_tensor(&self, name: &str) -> bool {
        self.tensor_info(name).is_some()
    }
}

/// A Hugging Face `config.json` read as GGUF metadata: each entry is a GGUF key with the
/// config field it came from and that field's value. A JSON `null` counts as absent.
pub struct ConfigMetadata {
    path: PathBuf,
    entries: BTreeMap<String, (String, Value)>,
    /// GGUF tensors the importer makes from config fields (`rope_freqs.weight` from a Llama 3
    /// `rope_scaling`).
    made: Vec<&'static str>,
}

impl ConfigMetadata {
    pub fn new(path: &Path) -> ConfigMetadata {
        ConfigMetadata {
            path: path.to_path_buf(),
            entries: BTreeMap::new(),
            made: Vec::new(),
        }
    }

    /// Say that the importer makes the GGUF tensor `name` from the config.
    pub fn makes(&mut self, name: &'static str) {
        self.made.push(name);
    }

    /// Set GGUF key `key` to `value`, read from the config field `field`; a `null` is
    /// skipped.
    pub fn set(&mut self, key: String, field: &str, value: Value) {
        if !value.is_null() {
            self.entries.insert(key, (field.to_string(), value));
        }
    }

    fn wrong_type(&self, key: &str, want: &str) -> StorageError {
        let (field, value) = &self.entries[key];
        StorageError::Format {
            path: self.path.clone(),
            offset: 0,
            field: field.clone(),
            message: format!("expected {want}, found {value}"),
        }
    }

    fn typed<'s, T>(
        &'s self,
        key: &str,
        want: &str,
        conv: impl FnOnce(&'s Value) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.entries.get(key) {
            None => Ok(None),
            Some((_, v)) => conv(v).map(Some).ok_or_else(|| self.wrong_type(key, want)),
        }
    }
}

impl Metadata for ConfigMetadata {
    fn path(&self) -> &Path {
        &self.path
    }
    fn u64(&self, key: &str) -> Result<Option<u64>> {
        self.typed(key, "a non-negative integer", Value::as_u64)
    }
    fn f32(&self, key: &str) -> Result<Option<f32>> {
        self.typed(key, "a number", |v| v.as_f64().map(|x| x as f32))
    }
    fn bool(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "a bool", Value::as_bool)
    }
    fn str(&self, key: &str) -> Result<Option<&str>> {
        self.typed(key, "a string", Value::as_str)
    }
    fn has(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }
    fn locate(&self, key: &str) -> (String, u64) {
        match self.entries.get(key) {
            Some((field, _)) => (field.clone(), 0),
            None => (key.to_string(), 0),
        }
    }
    fn has_tensor(&self, name: &str) -> bool {
        // HF folders spell no GGUF tensor names; what those tensors stand for arrives as
        // config fields, and only those the importer makes from them are present.
        self.made.contains(&name)
    }
}

/// A refusal of a required key that is absent.
pub fn missing(file: &dyn Metadata, key: &str) -> StorageError {
    StorageError::Format {
        path: file.path().to_path_buf(),
        offset: 0,
        field: file.locate(key).0,
        message: "required metadata key is missing".into(),
    }
}

/// A required size.
pub fn req_usize(file: &dyn Metadata, key: &str) -> Result<usize> {
    let v = file.u64(key)?.ok_or_else(|| missing(file, key))?;
    usize::try_from(v).map_err(|_| missing(file, key))
}

/// An optional size (`None` when absent or beyond `usize`).
pub fn opt_usize(file: &dyn Metadata, key: &str) -> Result<Option<usize>> {
    Ok(file.u64(key)?.and_then(|v| usize::try_from(v).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_config_field_answers_by_its_gguf_key_and_is_named_by_its_own() {
        let mut m = ConfigMetadata::new(Path::new("/m/config.json"));
        m.set(
            "gemma3.attention.sliding_window".into(),
            "sliding_window",
            json!(512),
        );
        m.set(
            "gemma3.final_logit_softcapping".into(),
            "final_logit_softcapping",
            json!(null),
        );
        m.set(
            "gemma3.rope.scaling.type".into(),
            "rope_scaling.rope_type",
            json!(7),
        );
        assert_eq!(m.u64("gemma3.attention.sliding_window").unwrap(), Some(512));
        assert!(!m.has("gemma3.final_logit_softcapping"), "null is absent");
        let e = m.str("gemma3.rope.scaling.type").unwrap_err().to_string();
        assert!(
            e.contains("rope_scaling.rope_type") && e.contains("a string"),
            "{e}"
        );
        assert_eq!(
            m.locate("gemma3.attention.sliding_window").0,
            "sliding_window"
        );
    }
}
