//! GGUF metadata values: the thirteen value types, scalar values, and arrays that stay
//! encoded (a byte range of the file or of an owned buffer) until someone iterates them.
//!
//! Keeping arrays encoded is what makes opening a model cheap: a 49,152-entry token list
//! is validated once at open (lengths, UTF-8, nesting) but not materialised into 49,152
//! `String`s until the tokenizer is built.

use std::sync::Arc;

use crate::error::{Result, StorageError};
use crate::model::Backing;

use super::limits;

/// A GGUF metadata value type (`value_type` id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    Str,
    Array,
    U64,
    I64,
    F64,
}

impl MetaType {
    /// The type for a GGUF value-type id.
    pub fn from_id(id: u32) -> Option<MetaType> {
        Some(match id {
            0 => MetaType::U8,
            1 => MetaType::I8,
            2 => MetaType::U16,
            3 => MetaType::I16,
            4 => MetaType::U32,
            5 => MetaType::I32,
            6 => MetaType::F32,
            7 => MetaType::Bool,
            8 => MetaType::Str,
            9 => MetaType::Array,
            10 => MetaType::U64,
            11 => MetaType::I64,
            12 => MetaType::F64,
            _ => return None,
        })
    }

    /// The GGUF value-type id.
    pub fn id(self) -> u32 {
        match self {
            MetaType::U8 => 0,
            MetaType::I8 => 1,
            MetaType::U16 => 2,
            MetaType::I16 => 3,
            MetaType::U32 => 4,
            MetaType::I32 => 5,
            MetaType::F32 => 6,
            MetaType::Bool => 7,
            MetaType::Str => 8,
            MetaType::Array => 9,
            MetaType::U64 => 10,
            MetaType::I64 => 11,
            MetaType::F64 => 12,
        }
    }

    /// Encoded size of fixed-size types; `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<usize> {
        match self {
            MetaType::U8 | MetaType::I8 | MetaType::Bool => Some(1),
            MetaType::U16 | MetaType::I16 => Some(2),
            MetaType::U32 | MetaType::I32 | MetaType::F32 => Some(4),
            MetaType::U64 | MetaType::I64 | MetaType::F64 => Some(8),
            MetaType::Str | MetaType::Array => None,
        }
    }

    /// Lower-case name as used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            MetaType::U8 => "u8",
            MetaType::I8 => "i8",
            MetaType::U16 => "u16",
            MetaType::I16 => "i16",
            MetaType::U32 => "u32",
            MetaType::I32 => "i32",
            MetaType::F32 => "f32",
            MetaType::Bool => "bool",
            MetaType::Str => "string",
            MetaType::Array => "array",
            MetaType::U64 => "u64",
            MetaType::I64 => "i64",
            MetaType::F64 => "f64",
        }
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    Array(MetaArray),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl MetaValue {
    pub fn meta_type(&self) -> MetaType {
        match self {
            MetaValue::U8(_) => MetaType::U8,
            MetaValue::I8(_) => MetaType::I8,
            MetaValue::U16(_) => MetaType::U16,
            MetaValue::I16(_) => MetaType::I16,
            MetaValue::U32(_) => MetaType::U32,
            MetaValue::I32(_) => MetaType::I32,
            MetaValue::F32(_) => MetaType::F32,
            MetaValue::Bool(_) => MetaType::Bool,
            MetaValue::Str(_) => MetaType::Str,
            MetaValue::Array(_) => MetaType::Array,
            MetaValue::U64(_) => MetaType::U64,
            MetaValue::I64(_) => MetaType::I64,
            MetaValue::F64(_) => MetaType::F64,
        }
    }

    /// Any integer type whose value is non-negative, as u64.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer type, as i64 (u64 above `i64::MAX` gives `None`).
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            MetaValue::U64(v) => i64::try_from(v).ok(),
            MetaValue::I8(v) => Some(v.into()),
            MetaValue::I16(v) => Some(v.into()),
            MetaValue::I32(v) => Some(v.into()),
            MetaValue::I64(v) => Some(v),
            _ => self.as_u64().map(|v| v as i64),
        }
    }

    /// F32 or F64 (narrowed) as f32.
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            MetaValue::F32(v) => Some(v),
            MetaValue::F64(v) => Some(v as f32),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&MetaArray> {
        match self {
            MetaValue::Array(a) => Some(a),
            _ => None,
        }
    }

    /// An array of strings.
    pub fn str_array<I, S>(items: I) -> MetaValue
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut buf = Vec::new();
        let mut n = 0u64;
        for s in items {
            let s = s.as_ref().as_bytes();
            buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
            buf.extend_from_slice(s);
            n += 1;
        }
        MetaValue::Array(MetaArray::from_encoded(MetaType::Str, n, buf))
    }

    /// An array of f32.
    pub fn f32_array(items: &[f32]) -> MetaValue {
        let buf = items.iter().flat_map(|v| v.to_le_bytes()).collect();
        MetaValue::Array(MetaArray::from_encoded(
            MetaType::F32,
            items.len() as u64,
            buf,
        ))
    }

    /// An array of i32.
    pub fn i32_array(items: &[i32]) -> MetaValue {
        let buf = items.iter().flat_map(|v| v.to_le_bytes()).collect();
        MetaValue::Array(MetaArray::from_encoded(
            MetaType::I32,
            items.len() as u64,
            buf,
        ))
    }

    /// An array of arbitrary values, which must all have type `elem`.
    pub fn array(elem: MetaType, items: &[MetaValue]) -> Result<MetaValue> {
        let mut buf = Vec::new();
        for (i, v) in items.iter().enumerate() {
            if v.meta_type() != elem {
                return Err(StorageError::Invalid(format!(
                    "GGUF array element {i} is {} but the array holds {}",
                    v.meta_type().name(),
                    elem.name()
                )));
            }
            v.encode_payload(&mut buf);
        }
        Ok(MetaValue::Array(MetaArray::from_encoded(
            elem,
            items.len() as u64,
            buf,
        )))
    }

    /// Append the value's encoding without its type id (the array element encoding).
    pub fn encode_payload(&self, out: &mut Vec<u8>) {
        match self {
            MetaValue::U8(v) => out.push(*v),
            MetaValue::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::Bool(v) => out.push(u8::from(*v)),
            MetaValue::Str(s) => {
                out.extend_from_slice(&(s.len() as u64).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            MetaValue::Array(a) => {
                out.extend_from_slice(&a.elem.id().to_le_bytes());
                out.extend_from_slice(&a.len.to_le_bytes());
                out.extend_from_slice(a.encoded());
            }
            MetaValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            MetaValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
}

impl From<&str> for MetaValue {
    fn from(v: &str) -> Self {
        MetaValue::Str(v.to_string())
    }
}
impl From<String> for MetaValue {
    fn from(v: String) -> Self {
        MetaValue::Str(v)
    }
}
impl From<u32> for MetaValue {
    fn from(v: u32) -> Self {
        MetaValue::U32(v)
    }
}
impl From<i32> for MetaValue {
    fn from(v: i32) -> Self {
        MetaValue::I32(v)
    }
}
impl From<u64> for MetaValue {
    fn from(v: u64) -> Self {
        MetaValue::U64(v)
    }
}
impl From<f32> for MetaValue {
    fn from(v: f32) -> Self {
        MetaValue::F32(v)
    }
}
impl From<bool> for MetaValue {
    fn from(v: bool) -> Self {
        MetaValue::Bool(v)
    }
}

/// An array value kept in its encoded form: element type, element count and the encoded
/// elements (validated when the file was opened). Iterate with [`MetaArray::iter`] or use
/// the typed decoders.
#[derive(Clone)]
pub struct MetaArray {
    elem: MetaType,
    len: u64,
    backing: Backing,
    start: usize,
    end: usize,
}

impl std::fmt::Debug for MetaArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MetaArray<{}>[{}] ({} bytes)",
            self.elem.name(),
            self.len,
            self.end - self.start
        )
    }
}

impl PartialEq for MetaArray {
    fn eq(&self, other: &Self) -> bool {
        self.elem == other.elem && self.len == other.len && self.encoded() == other.encoded()
    }
}

impl MetaArray {
    /// An array from already-encoded elements. The encoding is trusted: use the
    /// constructors on [`MetaValue`] to build arrays from values.
    pub(crate) fn from_encoded(elem: MetaType, len: u64, bytes: Vec<u8>) -> MetaArray {
        let end = bytes.len();
        MetaArray {
            elem,
            len,
            backing: Backing::Owned(Arc::new(bytes)),
            start: 0,
            end,
        }
    }

    /// A view of `backing[start..end]`, which the reader has validated.
    pub(crate) fn from_backing(
        elem: MetaType,
        len: u64,
        backing: Backing,
        start: usize,
        end: usize,
    ) -> MetaArray {
        MetaArray {
            elem,
            len,
            backing,
            start,
            end,
        }
    }

    /// Element type.
    pub fn elem_type(&self) -> MetaType {
        self.elem
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The encoded elements.
    pub fn encoded(&self) -> &[u8] {
        &self.backing.bytes()[self.start..self.end]
    }

    /// Iterate over the elements, decoding each on demand.
    pub fn iter(&self) -> MetaArrayIter<'_> {
        MetaArrayIter {
            array: self,
            pos: self.start,
            left: self.len,
        }
    }

    /// Iterate over string elements without allocating (`None` if not a string array).
    pub fn iter_str(&self) -> Option<impl Iterator<Item = &str> + '_> {
        if self.elem != MetaType::Str {
            return None;
        }
        let bytes = self.backing.bytes();
        let mut pos = self.start;
        let mut left = self.len;
        Some(std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            let n = u64::from_le_bytes(bytes[pos..pos + 8].try_into().ok()?) as usize;
            let s = &bytes[pos + 8..pos + 8 + n];
            pos += 8 + n;
            // Validated as UTF-8 when the file was opened.
            std::str::from_utf8(s).ok()
        }))
    }

    /// Iterate over string elements as raw bytes (no UTF-8 check; `None` if not a string
    /// array). The fastest way to search a vocabulary.
    pub fn iter_bytes(&self) -> Option<impl Iterator<Item = &[u8]> + '_> {
        if self.elem != MetaType::Str {
            return None;
        }
        let bytes = &self.backing.bytes()[..self.end];
        let mut pos = self.start;
        let mut left = self.len;
        Some(std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left -= 1;
            let n = u64::from_le_bytes(bytes.get(pos..pos + 8)?.try_into().ok()?) as usize;
            let s = bytes.get(pos + 8..(pos + 8).checked_add(n)?)?;
            pos += 8 + n;
            Some(s)
        }))
    }

    /// All elements as owned strings (`None` if not a string array).
    pub fn to_strings(&self) -> Option<Vec<String>> {
        let mut out = Vec::with_capacity(self.len());
        for s in self.iter_str()? {
            out.push(s.to_string());
        }
        Some(out)
    }

    /// All elements as f32 (`None` unless the elements are f32 or f64).
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        if !matches!(self.elem, MetaType::F32 | MetaType::F64) {
            return None;
        }
        self.iter().map(|v| v.as_f32()).collect()
    }

    /// All elements as i64 (`None` unless the elements are integers that fit).
    pub fn to_i64(&self) -> Option<Vec<i64>> {
        self.iter().map(|v| v.as_i64()).collect()
    }
}

/// Decoding iterator over a [`MetaArray`].
pub struct MetaArrayIter<'a> {
    array: &'a MetaArray,
    pos: usize,
    left: u64,
}

impl Iterator for MetaArrayIter<'_> {
    type Item = MetaValue;
    fn next(&mut self) -> Option<MetaValue> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let bytes = &self.array.backing.bytes()[..self.array.end];
        // The range was validated at open; a failure here would be a reader bug, and ends
        // the iteration rather than panicking.
        let (v, next) = decode_trusted(self.array.elem, bytes, self.pos, &self.array.backing)?;
        self.pos = next;
        Some(v)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

fn take<const N: usize>(bytes: &[u8], pos: usize) -> Option<[u8; N]> {
    bytes.get(pos..pos.checked_add(N)?)?.try_into().ok()
}

/// Decode one value of type `t` at `pos` of already validated bytes; returns the value
/// and the position after it.
fn decode_trusted(
    t: MetaType,
    bytes: &[u8],
    pos: usize,
    backing: &Backing,
) -> Option<(MetaValue, usize)> {
    let v = match t {
        MetaType::U8 => MetaValue::U8(take::<1>(bytes, pos)?[0]),
        MetaType::I8 => MetaValue::I8(i8::from_le_bytes(take(bytes, pos)?)),
        MetaType::U16 => MetaValue::U16(u16::from_le_bytes(take(bytes, pos)?)),
        MetaType::I16 => MetaValue::I16(i16::from_le_bytes(take(bytes, pos)?)),
        MetaType::U32 => MetaValue::U32(u32::from_le_bytes(take(bytes, pos)?)),
        MetaType::I32 => MetaValue::I32(i32::from_le_bytes(take(bytes, pos)?)),
        MetaType::F32 => MetaValue::F32(f32::from_le_bytes(take(bytes, pos)?)),
        MetaType::Bool => MetaValue::Bool(take::<1>(bytes, pos)?[0] != 0),
        MetaType::U64 => MetaValue::U64(u64::from_le_bytes(take(bytes, pos)?)),
        MetaType::I64 => MetaValue::I64(i64::from_le_bytes(take(bytes, pos)?)),
        MetaType::F64 => MetaValue::F64(f64::from_le_bytes(take(bytes, pos)?)),
        MetaType::Str => {
            let n = usize::try_from(u64::from_le_bytes(take(bytes, pos)?)).ok()?;
            let s = bytes.get(pos + 8..(pos + 8).checked_add(n)?)?;
            let s = std::str::from_utf8(s).ok()?.to_string();
            return Some((MetaValue::Str(s), pos + 8 + n));
        }
        MetaType::Array => {
            let elem = MetaType::from_id(u32::from_le_bytes(take(bytes, pos)?))?;
            let len = u64::from_le_bytes(take(bytes, pos + 4)?);
            let start = pos + 12;
            let end = skip_trusted(elem, len, bytes, start)?;
            let a = MetaArray::from_backing(elem, len, backing.clone(), start, end);
            return Some((MetaValue::Array(a), end));
        }
    };
    Some((v, pos + t.fixed_size()?))
}

/// End position of `len` validated elements of type `elem` starting at `pos`.
fn skip_trusted(elem: MetaType, len: u64, bytes: &[u8], mut pos: usize) -> Option<usize> {
    if let Some(sz) = elem.fixed_size() {
        return pos.checked_add(usize::try_from(len).ok()?.checked_mul(sz)?);
    }
    for _ in 0..len {
        match elem {
            MetaType::Str => {
                let n = usize::try_from(u64::from_le_bytes(take(bytes, pos)?)).ok()?;
                pos = pos.checked_add(8)?.checked_add(n)?;
            }
            _ => {
                let e = MetaType::from_id(u32::from_le_bytes(take(bytes, pos)?))?;
                let n = u64::from_le_bytes(take(bytes, pos + 4)?);
                pos = skip_trusted(e, n, bytes, pos + 12)?;
            }
        }
    }
    Some(pos)
}

/// Guard against limits drift: the nesting limit must allow the arrays the writer builds.
const _: () = assert!(limits::MAX_DEPTH >= 2);
