//! The codec registry: one [`Codec`] entry per encoding, each in its own file beside this
//! one, holding everything the engine knows of the encoding: its ggml type id, block
//! geometry, exact scalar decoder (bit-identical to gguf-py's `dequantize`), encoder where
//! LQL writes it, and the SIMD kernels that compute with it (which live in the kernel
//! modules, `avx2`, `avx2_perm`, `avx2_rows`, `avx512`, `neon`, grouped by instruction
//! set, and in `wgsl/` for the GPU backend). [`DType`]'s geometry, [`crate::decode`], [`crate::dot`] and [`crate::encode_row`]
//! read the entry; none of them matches on an encoding.
//!
//! A new encoding is a [`DType`] variant, one file here with its `CODEC`, its line in
//! [`CODECS`] and whatever kernels it has (`docs/architecture` → "A new encoding").

mod bf16;
mod f16;
mod f32;
mod mxfp4;
mod q2_k;
mod q3_k;
mod q4_0;
mod q4_1;
mod q4_k;
mod q5_0;
mod q5_1;
mod q5_k;
mod q6_k;
mod q8_0;

use crate::dtype::DType;

/// `row · x` over `n` blocks (for one-element encodings, `n` elements), from pointers the
/// caller has bounds-checked.
pub type Dot1 = unsafe fn(*const u8, *const f32, usize) -> f32;
/// Decodes `n` blocks from the first pointer into the second.
pub type DecodeSimd = unsafe fn(*const u8, *mut f32, usize);
/// Four rows at once over x and its per-block sums ([`crate::avx2_rows::block_sums`]).
pub type Dot4Summed = unsafe fn([*const u8; 4], *const f32, *const f32, usize) -> [f32; 4];
/// Four rows at once over x as [`Prepared::prepare`] laid it out.
pub type Dot4Prepared = unsafe fn([*const u8; 4], *const f32, usize) -> [f32; 4];
/// Lays out `n` blocks of x for a [`Dot4Prepared`] kernel.
pub type Prepare = unsafe fn(*const f32, usize, *mut f32);
/// Encodes whole blocks of values, appending their bytes.
pub type Encode = fn(&[f32], &mut Vec<u8>);
/// `row · x` over whole blocks, portable.
pub type DotPortable = fn(&[u8], &[f32]) -> f32;

/// Everything the engine knows of one encoding.
pub struct Codec {
    pub dtype: DType,
    /// Canonical upper-case name (`Q4_K`).
    pub name: &'static str,
    /// The ggml type id GGUF tensor infos carry.
    pub ggml_id: u32,
    /// Elements per block (1 for one-element encodings).
    pub block_elems: usize,
    pub block_bytes: usize,
    /// The exact scalar decoder of one block (of a one-element encoding: of any run).
    pub decode_block: fn(&[u8], &mut [f32]),
    /// The encoder of whole blocks, byte-exact with gguf-py's `quantize`; `None` where LQL
    /// does not write the encoding.
    pub encode: Option<Encode>,
    /// The GPU backend's WGSL kernels of the encoding (`wgsl/<name>.wgsl`: `decode32` and
    /// `dot32` of one 32-element unit, over the byte helpers of `lql-gpu`'s `bytes.wgsl`);
    /// `None` where the device kernels do not compute with it.
    pub wgsl_decoder: Option<&'static str>,
    /// A portable dot product better than "decode a chunk, then dot" (F32's: no decode).
    pub dot_portable: Option<DotPortable>,
    #[cfg(target_arch = "x86_64")]
    pub x86: X86,
    /// The NEON one-row dot kernel.
    #[cfg(target_arch = "aarch64")]
    pub neon_dot: Option<Dot1>,
}

/// An encoding's x86 kernels (AVX2 + FMA + F16C unless named AVX-512).
#[cfg(target_arch = "x86_64")]
pub struct X86 {
    /// One row.
    pub dot: Option<Dot1>,
    /// Decoding whole blocks.
    pub decode: Option<DecodeSimd>,
    /// Matrix-vector products, several rows per call.
    pub rows: Rows,
}

/// How an encoding's rows are multiplied several at a time (x86).
#[cfg(target_arch = "x86_64")]
pub enum Rows {
    /// No multi-row kernel: row by row through the one-row kernel.
    None,
    /// Row by row through a kernel that prefetches its single stream far ahead (Q8_0).
    Single { avx2: Dot1, avx512: Option<Dot1> },
    /// Four rows at a time, reading per-block sums of x computed once per call.
    Summed {
        avx2: Dot4Summed,
        avx512: Option<Dot4Summed>,
    },
    /// Four rows at a time over x laid out once per call.
    Prepared {
        avx2: Prepared,
        avx512: Option<Prepared>,
    },
}

/// A four-row kernel with the layout of x it reads.
#[cfg(target_arch = "x86_64")]
pub struct Prepared {
    pub prepare: Prepare,
    pub dot4: Dot4Prepared,
    /// Floats of prepared x per block.
    pub floats_per_block: usize,
}

/// Every encoding, indexed by the [`DType`] discriminant (declaration order).
pub static CODECS: [&Codec; 14] = [
    &f32::CODEC,
    &f16::CODEC,
    &q4_0::CODEC,
    &q4_1::CODEC,
    &q5_0::CODEC,
    &q5_1::CODEC,
    &q8_0::CODEC,
    &q2_k::CODEC,
    &q3_k::CODEC,
    &q4_k::CODEC,
    &q5_k::CODEC,
    &q6_k::CODEC,
    &bf16::CODEC,
    &mxfp4::CODEC,
];

impl Codec {
    /// An encoding with its geometry and reference decoder only: no encoder, no kernels
    /// (entries spell out what they add, `..Codec::base(…)`).
    pub const fn base(
        dtype: DType,
        name: &'static str,
        ggml_id: u32,
        block_elems: usize,
        block_bytes: usize,
        decode_block: fn(&[u8], &mut [f32]),
    ) -> Codec {
        Codec {
            dtype,
            name,
            ggml_id,
            block_elems,
            block_bytes,
            decode_block,
            encode: None,
            wgsl_decoder: None,
            dot_portable: None,
            #[cfg(target_arch = "x86_64")]
            x86: X86 {
                dot: None,
                decode: None,
                rows: Rows::None,
            },
            #[cfg(target_arch = "aarch64")]
            neon_dot: None,
        }
    }

    /// Decodes whole blocks of `src` (exactly `out.len()` values' bytes) with the scalar
    /// reference decoder.
    pub fn decode(&self, src: &[u8], out: &mut [f32]) {
        if self.block_elems == 1 {
            return (self.decode_block)(src, out);
        }
        for (b, y) in src
            .chunks_exact(self.block_bytes)
            .zip(out.chunks_exact_mut(self.block_elems))
        {
            (self.decode_block)(b, y);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_is_indexed_by_the_encoding_and_covers_every_one() {
        for (i, c) in CODECS.iter().enumerate() {
            assert_eq!(c.dtype as usize, i, "{}", c.name);
        }
        for d in DType::ALL {
            assert_eq!(d.codec().dtype, d);
            assert_eq!(DType::from_ggml_id(d.ggml_id()), Some(d));
        }
        assert_eq!(CODECS.len(), DType::ALL.len());
    }
}
