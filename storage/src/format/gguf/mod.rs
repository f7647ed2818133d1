//! GGUF v3 (and v2 read-only): mmap reader with hostile-input limits, and writer.
//!
//! - [`reader`]: [`GgufFile`] — header, metadata, tensor infos, zero-copy tensor views.
//! - [`value`]: [`MetaValue`] and lazily decoded [`MetaArray`]s.
//! - [`writer`]: [`GgufWriter`] — metadata and tensors with alignment, temp name + rename.
//! - [`export`]: COMPILE … INTO GGUF of a [`crate::material::MaterialSource`]; [`synth`]: tiny test models.

pub mod export;
pub mod reader;
pub mod synth;
pub mod value;
pub mod writer;

pub use reader::{GgufFile, GgufKv, GgufTensorInfo};
pub use value::{MetaArray, MetaType, MetaValue};
pub use writer::GgufWriter;

/// The four magic bytes at the start of every GGUF file.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment used when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// Limits applied to untrusted files (see `reference/gguf-and-quants.md` §8).
pub mod limits {
    /// Longest string value or key, in bytes.
    pub const MAX_STRING: u64 = 1_000_000;
    /// Longest key, in bytes.
    pub const MAX_KEY: u64 = 65_535;
    /// Most elements in one array.
    pub const MAX_ARRAY: u64 = 4_000_000;
    /// Deepest array nesting.
    pub const MAX_DEPTH: usize = 64;
    /// Most metadata key/value pairs.
    pub const MAX_KV: u64 = 1_000_000;
    /// Most tensors.
    pub const MAX_TENSORS: u64 = 1_000_000;
    /// Most dimensions of a tensor (`GGML_MAX_DIMS`).
    pub const MAX_DIMS: u32 = 4;
    /// Longest tensor name, in bytes (ggml keeps names in a 64-byte buffer with a NUL).
    pub const MAX_TENSOR_NAME: u64 = 63;
}

/// Name of a ggml type id, including the ones this engine cannot decode.
pub fn ggml_type_name(id: u32) -> Option<&'static str> {
    Some(match id {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        6 => "Q5_0",
        7 => "Q5_1",
        8 => "Q8_0",
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        12 => "Q4_K",
        13 => "Q5_K",
        14 => "Q6_K",
        15 => "Q8_K",
        16 => "IQ2_XXS",
        17 => "IQ2_XS",
        18 => "IQ3_XXS",
        19 => "IQ1_S",
        20 => "IQ4_NL",
        21 => "IQ3_S",
        22 => "IQ2_S",
        23 => "IQ4_XS",
        24 => "I8",
        25 => "I16",
        26 => "I32",
        27 => "I64",
        28 => "F64",
        29 => "IQ1_M",
        30 => "BF16",
        34 => "TQ1_0",
        35 => "TQ2_0",
        39 => "MXFP4",
        _ => return None,
    })
}

/// `v` rounded up to a multiple of `align` (a power of two), or `None` on overflow.
pub fn align_up(v: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    v.checked_add(align - 1).map(|x| x & !(align - 1))
}
