//! Tensor element encodings (ggml type ids); their geometry is read from the codec
//! registry ([`crate::formats`]).

use serde::{Deserialize, Serialize};

use crate::formats::{Codec, CODECS};

/// A tensor encoding. Discriminants are the ggml type ids used in GGUF tensor infos.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[allow(non_camel_case_types)]
pub enum DType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    BF16,
    MXFP4,
}

impl DType {
    /// All encodings this engine knows.
    pub const ALL: [DType; 14] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q2_K,
        DType::Q3_K,
        DType::Q4_K,
        DType::Q5_K,
        DType::Q6_K,
        DType::MXFP4,
    ];

    /// The encoding's registry entry (`crate::formats`): its geometry, decoder, encoder and
    /// kernels.
    pub fn codec(self) -> &'static Codec {
        CODECS[self as usize]
    }

    /// The ggml type id written in GGUF tensor infos.
    pub fn ggml_id(self) -> u32 {
        self.codec().ggml_id
    }

    /// The encoding for a ggml type id, if this engine knows it.
    pub fn from_ggml_id(id: u32) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.ggml_id() == id)
    }

    /// Canonical upper-case name (`F32`, `Q4_K`, …).
    pub fn name(self) -> &'static str {
        self.codec().name
    }

    /// Parse a canonical name, case-insensitively.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.name().eq_ignore_ascii_case(name))
    }

    /// Elements per block (1 for scalar types).
    pub fn block_elems(self) -> usize {
        self.codec().block_elems
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.codec().block_bytes
    }

    /// Bytes taken by `elems` elements, or `None` when `elems` is not a whole number of
    /// blocks or the size overflows.
    pub fn bytes_for(self, elems: u64) -> Option<u64> {
        let be = self.block_elems() as u64;
        if !elems.is_multiple_of(be) {
            return None;
        }
        (elems / be).checked_mul(self.block_bytes() as u64)
    }

    /// True for encodings whose rows can be reinterpreted without decoding (f32/f16/bf16).
    pub fn is_scalar(self) -> bool {
        self.block_elems() == 1
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_ggml_id(d.ggml_id()), Some(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_ggml_id(9999), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(DType::Q4_1.bytes_for(576), Some(18 * 20));
        assert_eq!(DType::Q4_1.bytes_for(33), None);
        assert_eq!(DType::F32.bytes_for(u64::MAX), None);
    }
}
