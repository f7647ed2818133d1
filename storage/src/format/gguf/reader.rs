//! The GGUF reader: parses header, metadata and tensor infos of an mmapped (or owned)
//! buffer, checking every count, length, offset and size against hard limits and the
//! buffer length with checked arithmetic. Tensor data is never copied: [`GgufFile::view`]
//! borrows it from the backing buffer.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{Result, StorageError};
use crate::model::{Backing, TensorView};

use super::value::{MetaArray, MetaType, MetaValue};
use super::{align_up, ggml_type_name, limits, DEFAULT_ALIGNMENT, MAGIC};

/// One metadata entry, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufKv {
    pub key: String,
    pub value: MetaValue,
    /// Byte offset of the entry's key in the file (for error messages).
    pub offset: u64,
}

/// One tensor info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorInfo {
    pub name: String,
    pub dtype: DType,
    /// ggml order: `shape[0]` is the row length.
    pub shape: Vec<usize>,
    /// Offset of the tensor's bytes relative to the data section.
    pub offset: u64,
    /// Encoded size in bytes.
    pub nbytes: u64,
    /// Byte offset of the tensor info in the file (for error messages).
    pub info_offset: u64,
}

impl GgufTensorInfo {
    /// Number of elements.
    pub fn elems(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A parsed GGUF file.
#[derive(Debug, Clone)]
pub struct GgufFile {
    path: PathBuf,
    backing: Backing,
    version: u32,
    alignment: u64,
    kvs: Vec<GgufKv>,
    tensors: Vec<GgufTensorInfo>,
    data_start: u64,
}

impl GgufFile {
    /// Map and parse a GGUF file.
    pub fn open(path: &Path) -> Result<GgufFile> {
        // Regular files only, fingerprinted and registered (see `crate::mapped`).
        let map = crate::mapped::map_file(path, "model file")?;
        GgufFile::from_bytes(path, Backing::Mmap(map))
    }

    /// Parse a GGUF held in `backing`; `path` is only used in error messages.
    pub fn from_bytes(path: impl Into<PathBuf>, backing: Backing) -> Result<GgufFile> {
        let path = path.into();
        let (version, alignment, kvs, tensors, data_start) = {
            let mut p = Parser {
                path: &path,
                bytes: backing.bytes(),
                pos: 0,
                backing: &backing,
            };
            p.parse()?
        };
        Ok(GgufFile {
            path,
            backing,
            version,
            alignment,
            kvs,
            tensors,
            data_start,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    /// Format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }
    /// Data alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }
    /// Metadata in file order.
    pub fn metadata(&self) -> &[GgufKv] {
        &self.kvs
    }
    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }
    /// The buffer the file lives in.
    pub fn backing(&self) -> &Backing {
        &self.backing
    }
    /// Absolute byte offset of the data section.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.kv(key).map(|kv| &kv.value)
    }

    /// The entry of `key`.
    pub fn kv(&self, key: &str) -> Option<&GgufKv> {
        self.kvs.iter().find(|kv| kv.key == key)
    }

    fn wrong_type(&self, key: &str, want: &str) -> StorageError {
        let kv = self.kv(key).expect("caller checked presence");
        StorageError::Format {
            path: self.path.clone(),
            offset: kv.offset,
            field: key.to_string(),
            message: format!("expected {want}, found {}", describe(&kv.value)),
        }
    }

    /// `key`'s value through `conv`: `Ok(None)` when absent, an error saying `want` when
    /// present but `conv` refuses it.
    fn typed<'s, T>(
        &'s self,
        key: &str,
        want: &str,
        conv: impl FnOnce(&'s MetaValue) -> Option<T>,
    ) -> Result<Option<T>> {
        self.get(key)
            .map(|v| conv(v).ok_or_else(|| self.wrong_type(key, want)))
            .transpose()
    }

    /// `key`'s array decoded by `conv`, as [`Self::typed`].
    fn typed_array<T>(
        &self,
        key: &str,
        want: &str,
        conv: impl FnOnce(&MetaArray) -> Option<T>,
    ) -> Result<Option<T>> {
        self.get_array(key)?
            .map(|a| conv(a).ok_or_else(|| self.wrong_type(key, want)))
            .transpose()
    }

    /// A non-negative integer of any width; `Ok(None)` when absent, an error when present
    /// with another type.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>> {
        self.typed(key, "a non-negative integer", MetaValue::as_u64)
    }

    /// A non-negative integer that fits in u32.
    pub fn get_u32(&self, key: &str) -> Result<Option<u32>> {
        self.get_u64(key)?
            .map(|v| {
                u32::try_from(v).map_err(|_| self.wrong_type(key, "an integer that fits in u32"))
            })
            .transpose()
    }

    /// An f32 (or f64, narrowed).
    pub fn get_f32(&self, key: &str) -> Result<Option<f32>> {
        self.typed(key, "a float", MetaValue::as_f32)
    }

    pub fn get_bool(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "a bool", MetaValue::as_bool)
    }

    pub fn get_str(&self, key: &str) -> Result<Option<&str>> {
        self.typed(key, "a string", MetaValue::as_str)
    }

    /// An array (still encoded).
    pub fn get_array(&self, key: &str) -> Result<Option<&MetaArray>> {
        self.typed(key, "an array", MetaValue::as_array)
    }

    /// An array of strings, decoded.
    pub fn get_str_array(&self, key: &str) -> Result<Option<Vec<String>>> {
        self.typed_array(key, "an array of strings", MetaArray::to_strings)
    }

    /// An array of floats, decoded.
    pub fn get_f32_array(&self, key: &str) -> Result<Option<Vec<f32>>> {
        self.typed_array(key, "an array of floats", MetaArray::to_f32)
    }

    /// An array of integers, decoded.
    pub fn get_i64_array(&self, key: &str) -> Result<Option<Vec<i64>>> {
        self.typed_array(key, "an array of integers", MetaArray::to_i64)
    }

    /// Info of the tensor called `name`.
    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Absolute byte range of a tensor's data in the backing buffer.
    pub fn byte_range(&self, info: &GgufTensorInfo) -> std::ops::Range<usize> {
        // Checked against the buffer length at open.
        let start = (self.data_start + info.offset) as usize;
        start..start + info.nbytes as usize
    }

    /// Zero-copy view of a tensor of this file.
    pub fn view<'a>(&'a self, info: &'a GgufTensorInfo) -> TensorView<'a> {
        TensorView {
            dtype: info.dtype,
            shape: &info.shape,
            bytes: &self.backing.bytes()[self.byte_range(info)],
        }
    }

    /// Zero-copy view of the tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        self.tensor_info(name).map(|i| self.view(i))
    }
}

fn describe(v: &MetaValue) -> String {
    match v {
        MetaValue::Array(a) => format!("array of {} {}", a.len(), a.elem_type().name()),
        other => other.meta_type().name().to_string(),
    }
}

type Parsed = (u32, u64, Vec<GgufKv>, Vec<GgufTensorInfo>, u64);

struct Parser<'a> {
    path: &'a Path,
    bytes: &'a [u8],
    pos: usize,
    backing: &'a Backing,
}

impl<'a> Parser<'a> {
    fn err(
        &self,
        offset: usize,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> StorageError {
        StorageError::Format {
            path: self.path.to_path_buf(),
            offset: offset as u64,
            field: field.into(),
            message: message.into(),
        }
    }

    fn left(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize, field: &str) -> Result<&'a [u8]> {
        if n > self.left() {
            return Err(self.err(
                self.pos,
                field,
                format!(
                    "truncated: needs {n} bytes, {} left in the file",
                    self.left()
                ),
            ));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u32(&mut self, field: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, field)?.try_into().unwrap()))
    }
    fn u64(&mut self, field: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, field)?.try_into().unwrap()))
    }

    /// A count: must read as a non-negative i64 and be within `max`.
    fn count(&mut self, field: &str, max: u64) -> Result<u64> {
        let at = self.pos;
        let n = self.u64(field)?;
        if n > i64::MAX as u64 {
            return Err(self.err(at, field, format!("count {n} is negative as i64")));
        }
        if n > max {
            return Err(self.err(at, field, format!("count {n} exceeds the limit of {max}")));
        }
        Ok(n)
    }

    /// A length-prefixed UTF-8 string of at most `max` bytes, borrowed.
    fn str(&mut self, field: &str, max: u64) -> Result<&'a str> {
        let at = self.pos;
        let n = self.u64(field)?;
        if n > max {
            return Err(self.err(
                at,
                field,
                format!("string length {n} exceeds the limit of {max}"),
            ));
        }
        if n > self.left() as u64 {
            return Err(self.err(
                at,
                field,
                format!(
                    "string length {n} runs past the end of the file ({} bytes left)",
                    self.left()
                ),
            ));
        }
        let raw = self.take(n as usize, field)?;
        std::str::from_utf8(raw).map_err(|e| self.err(at + 8, field, format!("invalid UTF-8: {e}")))
    }

    fn meta_type(&mut self, field: &str) -> Result<MetaType> {
        let at = self.pos;
        let id = self.u32(field)?;
        MetaType::from_id(id)
            .ok_or_else(|| self.err(at, field, format!("unknown metadata value type {id}")))
    }

    /// Parse (and validate) one value of type `t`; arrays stay encoded.
    fn value(&mut self, t: MetaType, field: &str, depth: usize) -> Result<MetaValue> {
        let v = match t {
            MetaType::U8 => MetaValue::U8(self.take(1, field)?[0]),
            MetaType::I8 => MetaValue::I8(self.take(1, field)?[0] as i8),
            MetaType::U16 => {
                MetaValue::U16(u16::from_le_bytes(self.take(2, field)?.try_into().unwrap()))
            }
            MetaType::I16 => {
                MetaValue::I16(i16::from_le_bytes(self.take(2, field)?.try_into().unwrap()))
            }
            MetaType::U32 => MetaValue::U32(self.u32(field)?),
            MetaType::I32 => MetaValue::I32(self.u32(field)? as i32),
            MetaType::F32 => MetaValue::F32(f32::from_bits(self.u32(field)?)),
            MetaType::Bool => {
                let at = self.pos;
                match self.take(1, field)?[0] {
                    0 => MetaValue::Bool(false),
                    1 => MetaValue::Bool(true),
                    b => return Err(self.err(at, field, format!("bool byte is {b}, not 0 or 1"))),
                }
            }
            MetaType::U64 => MetaValue::U64(self.u64(field)?),
            MetaType::I64 => MetaValue::I64(self.u64(field)? as i64),
            MetaType::F64 => MetaValue::F64(f64::from_bits(self.u64(field)?)),
            MetaType::Str => MetaValue::Str(self.str(field, limits::MAX_STRING)?.to_string()),
            MetaType::Array => {
                let (elem, len, start, end) = self.array(field, depth + 1)?;
                MetaValue::Array(MetaArray::from_backing(
                    elem,
                    len,
                    self.backing.clone(),
                    start,
                    end,
                ))
            }
        };
        Ok(v)
    }

    /// Validate an array header and its elements without materialising them; returns
    /// (element type, count, start, end) of the encoded elements.
    fn array(&mut self, field: &str, depth: usize) -> Result<(MetaType, u64, usize, usize)> {
        if depth > limits::MAX_DEPTH {
            return Err(self.err(
                self.pos,
                field,
                format!("arrays nested deeper than {}", limits::MAX_DEPTH),
            ));
        }
        let elem = self.meta_type(field)?;
        let len = self.count(field, limits::MAX_ARRAY)?;
        let start = self.pos;
        if let Some(sz) = elem.fixed_size() {
            // len ≤ MAX_ARRAY and sz ≤ 8: no overflow.
            let n = len as usize * sz;
            if n > self.left() {
                return Err(self.err(
                    start,
                    field,
                    format!(
                        "array of {len} {} runs past the end of the file",
                        elem.name()
                    ),
                ));
            }
            if elem == MetaType::Bool {
                if let Some(i) = self.bytes[start..start + n].iter().position(|&b| b > 1) {
                    return Err(self.err(start + i, field, "bool byte is not 0 or 1"));
                }
            }
            self.pos += n;
        } else {
            match elem {
                MetaType::Str => self.string_elements(field, len)?,
                _ => {
                    for _ in 0..len {
                        self.array(field, depth + 1)?;
                    }
                }
            }
        }
        Ok((elem, len, start, self.pos))
    }

    /// Walk `len` string elements: lengths checked against the limit and the bytes left,
    /// contents checked as UTF-8.
    ///
    /// Fast path for large vocabularies: when every byte of a length prefix is ASCII
    /// (lengths whose bytes are all < 0x80), the prefix cannot complete or start a
    /// multi-byte sequence, so a run of such elements is valid UTF-8 as a whole exactly
    /// when each string is. Runs are validated in one call; other strings one by one.
    fn string_elements(&mut self, field: &str, len: u64) -> Result<()> {
        let bytes = self.bytes;
        let mut run_start = self.pos;
        for i in 0..len {
            crate::interrupt::every(i, || format!("{}: {field}", self.path.display()))?;
            let at = self.pos;
            let n = self.u64(field)?;
            if n > limits::MAX_STRING {
                return Err(self.err(
                    at,
                    field,
                    format!(
                        "string length {n} exceeds the limit of {}",
                        limits::MAX_STRING
                    ),
                ));
            }
            if n > self.left() as u64 {
                return Err(self.err(
                    at,
                    field,
                    format!(
                        "string length {n} runs past the end of the file ({} bytes left)",
                        self.left()
                    ),
                ));
            }
            let n = n as usize;
            if n as u64 & 0x8080_8080_8080_8080 != 0 {
                self.check_utf8_run(field, run_start, at)?;
                let s = &bytes[at + 8..at + 8 + n];
                if let Err(e) = std::str::from_utf8(s) {
                    return Err(self.err(at + 8, field, format!("invalid UTF-8: {e}")));
                }
                run_start = at + 8 + n;
            }
            self.pos = at + 8 + n;
        }
        self.check_utf8_run(field, run_start, self.pos)
    }

    /// Validate a run of ASCII-prefixed string elements `[start, end)`; on failure, find
    /// the offending element for the error.
    fn check_utf8_run(&self, field: &str, start: usize, end: usize) -> Result<()> {
        if std::str::from_utf8(&self.bytes[start..end]).is_ok() {
            return Ok(());
        }
        let mut p = start;
        while p < end {
            let n = u64::from_le_bytes(self.bytes[p..p + 8].try_into().unwrap()) as usize;
            if let Err(e) = std::str::from_utf8(&self.bytes[p + 8..p + 8 + n]) {
                return Err(self.err(p + 8, field, format!("invalid UTF-8: {e}")));
            }
            p += 8 + n;
        }
        Err(self.err(start, field, "invalid UTF-8"))
    }

    fn parse(&mut self) -> Result<Parsed> {
        let magic = self.take(4, "magic")?;
        if magic != MAGIC {
            return Err(self.err(
                0,
                "magic",
                "not a GGUF file (its first 4 bytes are not \"GGUF\")".to_string(),
            ));
        }
        let version = self.u32("version")?;
        match version {
            2 | 3 => {}
            0x0300_0000 | 0x0200_0000 => {
                return Err(self.err(4, "version", "big-endian GGUF files are not supported"))
            }
            1 => {
                return Err(self.err(4, "version", "GGUF version 1 is obsolete and not supported"))
            }
            v => return Err(self.err(4, "version", format!("unsupported GGUF version {v}"))),
        }
        let n_tensors = self.count("tensor_count", limits::MAX_TENSORS)?;
        let n_kv = self.count("kv_count", limits::MAX_KV)?;

        // Metadata. Vectors grow as entries are actually parsed, never by the claimed count.
        let mut kvs: Vec<GgufKv> = Vec::new();
        let mut keys: HashSet<&'a str> = HashSet::new();
        for i in 0..n_kv {
            crate::interrupt::every(i, || format!("{}: metadata", self.path.display()))?;
            let at = self.pos;
            let key = self.str(&format!("metadata key #{i}"), limits::MAX_KEY)?;
            if !keys.insert(key) {
                return Err(self.err(at, key, "duplicate metadata key"));
            }
            let t = self.meta_type(key)?;
            let value = self.value(t, key, 0)?;
            kvs.push(GgufKv {
                key: key.to_string(),
                value,
                offset: at as u64,
            });
        }

        let mut alignment = DEFAULT_ALIGNMENT;
        if let Some(kv) = kvs.iter().find(|kv| kv.key == "general.alignment") {
            let a = kv.value.as_u64().ok_or_else(|| {
                self.err(
                    kv.offset as usize,
                    "general.alignment",
                    "alignment must be an integer",
                )
            })?;
            if a == 0 || !a.is_power_of_two() || a > 1 << 30 {
                return Err(self.err(
                    kv.offset as usize,
                    "general.alignment",
                    format!("alignment {a} is not a non-zero power of two (at most 2^30)"),
                ));
            }
            alignment = a;
        }

        // Tensor infos.
        let mut tensors: Vec<GgufTensorInfo> = Vec::new();
        let mut names: HashSet<&'a str> = HashSet::new();
        for i in 0..n_tensors {
            crate::interrupt::every(i, || format!("{}: tensor table", self.path.display()))?;
            let at = self.pos;
            let name = self.str(&format!("tensor info #{i} name"), limits::MAX_STRING)?;
            if name.len() as u64 > limits::MAX_TENSOR_NAME {
                return Err(self.err(
                    at,
                    format!("tensor info #{i} name"),
                    format!(
                        "tensor name of {} bytes exceeds {} bytes",
                        name.len(),
                        limits::MAX_TENSOR_NAME
                    ),
                ));
            }
            if !names.insert(name) {
                return Err(self.err(at, format!("tensor {name}"), "duplicate tensor name"));
            }
            let field = format!("tensor {name}");
            let dims_at = self.pos;
            let n_dims = self.u32(&field)?;
            if n_dims == 0 || n_dims > limits::MAX_DIMS {
                return Err(self.err(
                    dims_at,
                    format!("tensor {name} n_dims"),
                    format!("{n_dims} dimensions; 1 to {} are allowed", limits::MAX_DIMS),
                ));
            }
            let mut shape = Vec::with_capacity(n_dims as usize);
            let mut elems: u64 = 1;
            for d in 0..n_dims {
                let dat = self.pos;
                let ne = self.u64(&field)?;
                if ne == 0 || ne > i64::MAX as u64 {
                    return Err(self.err(
                        dat,
                        format!("tensor {name} shape"),
                        format!("dimension {d} is {ne}"),
                    ));
                }
                elems = elems.checked_mul(ne).ok_or_else(|| {
                    self.err(
                        dat,
                        format!("tensor {name} shape"),
                        "element count overflows u64",
                    )
                })?;
                shape.push(usize::try_from(ne).map_err(|_| {
                    self.err(
                        dat,
                        format!("tensor {name} shape"),
                        "dimension does not fit in usize",
                    )
                })?);
            }
            let type_at = self.pos;
            let type_id = self.u32(&field)?;
            let dtype = match DType::from_ggml_id(type_id) {
                Some(d) => d,
                None => {
                    return Err(match ggml_type_name(type_id) {
                        Some(tn) => StorageError::Unsupported(format!(
                        "not supported yet: tensor {name} in {} has ggml type {tn} (id {type_id})",
                        self.path.display()
                    )),
                        None => self.err(
                            type_at,
                            format!("tensor {name} type"),
                            format!("unknown ggml type id {type_id}"),
                        ),
                    })
                }
            };
            if !shape[0].is_multiple_of(dtype.block_elems()) {
                return Err(self.err(
                    dims_at,
                    format!("tensor {name} shape"),
                    format!(
                        "row length {} is not a whole number of {} blocks of {}",
                        shape[0],
                        dtype.name(),
                        dtype.block_elems()
                    ),
                ));
            }
            let nbytes = dtype.bytes_for(elems).ok_or_else(|| {
                self.err(
                    dims_at,
                    format!("tensor {name} shape"),
                    "byte size overflows u64",
                )
            })?;
            let off_at = self.pos;
            let offset = self.u64(&field)?;
            if !offset.is_multiple_of(alignment) {
                return Err(self.err(
                    off_at,
                    format!("tensor {name} offset"),
                    format!("offset {offset} is not a multiple of the alignment {alignment}"),
                ));
            }
            tensors.push(GgufTensorInfo {
                name: name.to_string(),
                dtype,
                shape,
                offset,
                nbytes,
                info_offset: at as u64,
            });
        }

        let data_start = align_up(self.pos as u64, alignment)
            .ok_or_else(|| self.err(self.pos, "data section", "offset overflows"))?;
        let file_len = self.bytes.len() as u64;
        // Extents: inside the file, and not overlapping one another.
        let mut extents: Vec<(u64, u64, usize)> = Vec::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            let end = data_start
                .checked_add(t.offset)
                .and_then(|s| s.checked_add(t.nbytes));
            match end {
                Some(end) if end <= file_len => extents.push((t.offset, t.offset + t.nbytes, i)),
                _ => {
                    return Err(self.err(
                        t.info_offset as usize,
                        format!("tensor {} offset", t.name),
                        format!(
                            "data [{} + {}, +{} bytes) runs past the end of the file ({file_len} bytes)",
                            data_start, t.offset, t.nbytes
                        ),
                    ))
                }
            }
        }
        extents.sort_unstable();
        for w in extents.windows(2) {
            if w[1].0 < w[0].1 {
                let (a, b) = (&tensors[w[0].2], &tensors[w[1].2]);
                return Err(self.err(
                    b.info_offset as usize,
                    format!("tensor {} offset", b.name),
                    format!("data overlaps tensor {}", a.name),
                ));
            }
        }
        Ok((version, alignment, kvs, tensors, data_start))
    }
}
