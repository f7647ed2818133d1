//! The GGUF v3 writer: metadata of every value type and tensors laid out in the order
//! added, each at an offset aligned to `general.alignment` (default 32), zero padding
//! between tensors and after the last one (the ggml writer convention, so re-writing what
//! the reader read gives back the same bytes). Files are written under a temporary name,
//! synced and renamed into place.

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

use crate::dtype::DType;
use crate::error::{Result, StorageError};

use super::reader::GgufFile;
use super::value::MetaValue;
use super::{align_up, limits, DEFAULT_ALIGNMENT, MAGIC};

struct PendingTensor<'a> {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    bytes: Cow<'a, [u8]>,
}

/// Builds a GGUF v3 file. Tensor bytes may be borrowed (e.g. from another file's map).
#[derive(Default)]
pub struct GgufWriter<'a> {
    kvs: Vec<(String, MetaValue)>,
    tensors: Vec<PendingTensor<'a>>,
}

impl<'a> GgufWriter<'a> {
    pub fn new() -> Self {
        GgufWriter::default()
    }

    /// A writer holding everything `file` holds (metadata and tensors, in file order), the
    /// tensor bytes borrowed from its map.
    pub fn from_file(file: &'a GgufFile) -> Result<Self> {
        let mut w = GgufWriter::new();
        for kv in file.metadata() {
            w.add_kv(kv.key.clone(), kv.value.clone())?;
        }
        for t in file.tensors() {
            w.add_tensor(&t.name, t.dtype, &t.shape, file.view(t).bytes)?;
        }
        Ok(w)
    }

    /// Add a metadata entry (keys must be unique).
    pub fn add_kv(
        &mut self,
        key: impl Into<String>,
        value: impl Into<MetaValue>,
    ) -> Result<&mut Self> {
        let key = key.into();
        let value = value.into();
        if key.len() as u64 > limits::MAX_KEY {
            return Err(StorageError::Invalid(format!(
                "GGUF key of {} bytes is too long",
                key.len()
            )));
        }
        if self.kvs.iter().any(|(k, _)| *k == key) {
            return Err(StorageError::Invalid(format!(
                "duplicate GGUF metadata key {key}"
            )));
        }
        if key == "general.alignment" {
            match value.as_u64() {
                Some(a) if a.is_power_of_two() && a <= 1 << 30 => {}
                _ => {
                    return Err(StorageError::Invalid(format!(
                        "general.alignment must be a non-zero power of two, got {value:?}"
                    )))
                }
            }
        }
        self.kvs.push((key, value));
        Ok(self)
    }

    /// Set a metadata entry, replacing an existing one in place.
    pub fn set_kv(
        &mut self,
        key: impl Into<String>,
        value: impl Into<MetaValue>,
    ) -> Result<&mut Self> {
        let key = key.into();
        if let Some(i) = self.kvs.iter().position(|(k, _)| *k == key) {
            self.kvs.remove(i);
        }
        self.add_kv(key, value)
    }

    /// Remove the metadata entry `key`; true if it was there.
    pub fn remove_kv(&mut self, key: &str) -> bool {
        let before = self.kvs.len();
        self.kvs.retain(|(k, _)| k != key);
        self.kvs.len() != before
    }

    /// Remove the tensor `name`; true if it was there.
    pub fn remove_tensor(&mut self, name: &str) -> bool {
        let before = self.tensors.len();
        self.tensors.retain(|t| t.name != name);
        self.tensors.len() != before
    }

    /// Names of the tensors added so far, in order.
    pub fn tensor_names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|t| t.name.as_str())
    }

    /// Add a tensor: `shape` in ggml order (`shape[0]` = row length), `bytes` its encoding.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
        bytes: impl Into<Cow<'a, [u8]>>,
    ) -> Result<&mut Self> {
        let bytes = bytes.into();
        let bad = |m: String| StorageError::Invalid(format!("GGUF tensor {name}: {m}"));
        if name.len() as u64 > limits::MAX_TENSOR_NAME {
            return Err(bad(format!(
                "name longer than {} bytes",
                limits::MAX_TENSOR_NAME
            )));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(bad("duplicate tensor name".into()));
        }
        if shape.is_empty() || shape.len() > limits::MAX_DIMS as usize || shape.contains(&0) {
            return Err(bad(format!(
                "shape {shape:?} must have 1 to 4 non-zero dimensions"
            )));
        }
        let elems = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d as u64))
            .ok_or_else(|| bad("element count overflows".into()))?;
        if !shape[0].is_multiple_of(dtype.block_elems()) {
            return Err(bad(format!(
                "row length {} is not a whole number of {dtype} blocks",
                shape[0]
            )));
        }
        let want = dtype
            .bytes_for(elems)
            .ok_or_else(|| bad("byte size overflows".into()))?;
        if want != bytes.len() as u64 {
            return Err(bad(format!(
                "{} bytes given, {dtype} {shape:?} needs {want}",
                bytes.len()
            )));
        }
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            dtype,
            shape: shape.to_vec(),
            bytes,
        });
        Ok(self)
    }

    /// Add an F32 tensor from values.
    pub fn add_f32_tensor(
        &mut self,
        name: &str,
        shape: &[usize],
        values: &[f32],
    ) -> Result<&mut Self> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_tensor(name, DType::F32, shape, bytes)
    }

    fn alignment(&self) -> u64 {
        self.kvs
            .iter()
            .find(|(k, _)| k == "general.alignment")
            .and_then(|(_, v)| v.as_u64())
            .unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// Write the whole file to `out`.
    pub fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        let align = self.alignment();
        let mut head = Vec::new();
        head.extend_from_slice(&MAGIC);
        head.extend_from_slice(&3u32.to_le_bytes());
        head.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, v) in &self.kvs {
            head.extend_from_slice(&(k.len() as u64).to_le_bytes());
            head.extend_from_slice(k.as_bytes());
            head.extend_from_slice(&v.meta_type().id().to_le_bytes());
            v.encode_payload(&mut head);
        }
        let mut offset = 0u64;
        let mut padded = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            head.extend_from_slice(&(t.name.len() as u64).to_le_bytes());
            head.extend_from_slice(t.name.as_bytes());
            head.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for &d in &t.shape {
                head.extend_from_slice(&(d as u64).to_le_bytes());
            }
            head.extend_from_slice(&t.dtype.ggml_id().to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            let n = t.bytes.len() as u64;
            let p = align_up(n, align).expect("sizes were checked");
            padded.push(p - n);
            offset += p;
        }
        let data_start = align_up(head.len() as u64, align).expect("header fits");
        head.resize(data_start as usize, 0);
        out.write_all(&head)?;
        let zeros = vec![0u8; align as usize];
        for (t, pad) in self.tensors.iter().zip(padded) {
            out.write_all(&t.bytes)?;
            out.write_all(&zeros[..pad as usize])?;
        }
        Ok(())
    }

    /// The whole file as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.write_to(&mut v).expect("writing to a Vec cannot fail");
        v
    }

    /// Write the file to `path`: a temporary name in the same folder, fsync, rename.
    pub fn write(&self, path: &Path) -> Result<()> {
        write_atomically(path, |f| self.write_to(f))
    }
}

/// Write `path` through an exclusive temporary sibling, synced and renamed into place
/// (see [`crate::fsutil::AtomicFile`]); the temporary file is removed on failure and a
/// target that is not a regular file is refused.
pub(crate) fn write_atomically(
    path: &Path,
    body: impl FnOnce(&mut std::io::BufWriter<&mut std::fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    crate::fsutil::write_atomic_with(path, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::gguf::{MetaType, MetaValue};
    use crate::model::Backing;
    use std::sync::Arc;

    #[test]
    fn every_value_type_round_trips() {
        let nested = MetaValue::array(
            MetaType::Array,
            &[
                MetaValue::str_array(["x", "yz"]),
                MetaValue::str_array(Vec::<&str>::new()),
            ],
        )
        .unwrap();
        let values = vec![
            MetaValue::U8(7),
            MetaValue::I8(-7),
            MetaValue::U16(65535),
            MetaValue::I16(-300),
            MetaValue::U32(1 << 31),
            MetaValue::I32(-5),
            MetaValue::F32(1.25),
            MetaValue::Bool(true),
            MetaValue::Str("héllo".into()),
            MetaValue::U64(u64::MAX),
            MetaValue::I64(i64::MIN),
            MetaValue::F64(-2.5e300),
            MetaValue::f32_array(&[0.5, -1.0]),
            MetaValue::i32_array(&[1, -2, 3]),
            MetaValue::array(
                MetaType::Bool,
                &[MetaValue::Bool(false), MetaValue::Bool(true)],
            )
            .unwrap(),
            nested.clone(),
        ];
        let mut w = GgufWriter::new();
        for (i, v) in values.iter().enumerate() {
            w.add_kv(format!("t.k{i}"), v.clone()).unwrap();
        }
        w.add_kv("general.alignment", 64u32).unwrap();
        w.add_f32_tensor("a", &[3], &[1.0, 2.0, 3.0]).unwrap();
        w.add_f32_tensor("b", &[2, 2], &[4.0; 4]).unwrap();
        let bytes = w.to_bytes();
        assert_eq!(bytes.len() % 64, 0);
        let f = GgufFile::from_bytes("mem", Backing::Owned(Arc::new(bytes.clone()))).unwrap();
        assert_eq!(f.alignment(), 64);
        for (i, v) in values.iter().enumerate() {
            assert_eq!(f.get(&format!("t.k{i}")), Some(v), "value {i}");
        }
        let inner: Vec<Vec<String>> = f
            .get_array("t.k15")
            .unwrap()
            .unwrap()
            .iter()
            .map(|v| v.as_array().unwrap().to_strings().unwrap())
            .collect();
        assert_eq!(inner, vec![vec!["x".to_string(), "yz".into()], vec![]]);
        let b = f.tensor("b").unwrap();
        assert_eq!(f.tensor_info("b").unwrap().offset, 64);
        assert_eq!(b.bytes, &4.0f32.to_le_bytes().repeat(4)[..]);
        // Re-writing what was read gives the same bytes.
        assert_eq!(GgufWriter::from_file(&f).unwrap().to_bytes(), bytes);
    }

    #[test]
    fn writer_refuses_bad_input() {
        let mut w = GgufWriter::new();
        assert!(w.add_kv("general.alignment", 3u32).is_err());
        assert!(w
            .add_tensor("q", DType::Q4_0, &[33], vec![0u8; 18])
            .is_err());
        assert!(w
            .add_tensor("q", DType::Q4_0, &[32], vec![0u8; 17])
            .is_err());
        assert!(w
            .add_tensor("q", DType::F32, &[1, 1, 1, 1, 1], vec![0u8; 4])
            .is_err());
        w.add_f32_tensor("x", &[1], &[0.0]).unwrap();
        assert!(w.add_f32_tensor("x", &[1], &[0.0]).is_err());
        w.add_kv("k", 1u32).unwrap();
        assert!(w.add_kv("k", 2u32).is_err());
        let dir = std::env::temp_dir().join(format!("lql-writer-{}", std::process::id()));
        // Writing into a missing folder fails and leaves nothing behind.
        assert!(w.write(&dir.join("missing").join("x.gguf")).is_err());
    }
}
