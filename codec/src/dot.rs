//! Fused dot products of encoded rows with an f32 vector — the executor's decode hot path.
//!
//! No decoded row is materialised: the quantised kernels work block by block in registers
//! (AVX2 + FMA + F16C when present) or through a one-block stack buffer (scalar fallback and
//! the less common encodings). Results equal "decode, then dot in f32" up to rounding
//! (accumulation order and FMA); the activation vector is never quantised.

use super::block::{self, QK_K};
use super::cpu::Kernels;
use crate::dtype::DType;

/// `row · x` where `row` holds `x.len()` encoded elements of `dtype`.
///
/// Lengths are the caller's contract (`row.len() == dtype.bytes_for(x.len())`, checked by a
/// debug assertion); in release builds a mismatch computes over the common whole blocks and
/// never reads out of bounds. Allocates nothing.
#[inline]
pub fn dot_row(dtype: DType, row: &[u8], x: &[f32]) -> f32 {
    let (be, bb) = (dtype.block_elems(), dtype.block_bytes());
    debug_assert!(
        x.len().is_multiple_of(be) && row.len() == x.len() / be * bb,
        "dot_row: {} bytes of {dtype} against {} values",
        row.len(),
        x.len()
    );
    let nb = (x.len() / be).min(row.len() / bb);
    let n = nb * be;
    #[cfg(target_arch = "x86_64")]
    if super::cpu::has_avx2() {
        return dot_avx2(dtype, &row[..nb * bb], &x[..n]);
    }
    #[cfg(target_arch = "aarch64")]
    if super::cpu::has_neon() {
        if let Some(v) = dot_neon(dtype, &row[..nb * bb], &x[..n]) {
            return v;
        }
    }
    dot_scalar(dtype, &row[..nb * bb], &x[..n])
}

/// The NEON kernel of `dtype`, when there is one (`row`/`x` whole blocks, as sliced by
/// [`dot_row`]).
#[cfg(target_arch = "aarch64")]
fn dot_neon(dtype: DType, row: &[u8], x: &[f32]) -> Option<f32> {
    use super::neon;
    let nb = x.len() / dtype.block_elems();
    // SAFETY: NEON is baseline on aarch64; row holds exactly nb whole blocks and x exactly
    // nb * block_elems values (sliced in dot_row).
    unsafe {
        match dtype {
            DType::Q4_0 => Some(neon::dot_q4_0(row.as_ptr(), x.as_ptr(), nb)),
            DType::Q4_1 => Some(neon::dot_q4_1(row.as_ptr(), x.as_ptr(), nb)),
            DType::Q5_0 => Some(neon::dot_q5_0(row.as_ptr(), x.as_ptr(), nb)),
            DType::Q5_1 => Some(neon::dot_q5_1(row.as_ptr(), x.as_ptr(), nb)),
            DType::Q8_0 => Some(neon::dot_q8_0(row.as_ptr(), x.as_ptr(), nb)),
            DType::Q4_K => Some(neon::dot_q4_k(row.as_ptr(), x.as_ptr(), nb)),
            DType::Q5_K => Some(neon::dot_q5_k(row.as_ptr(), x.as_ptr(), nb)),
            DType::Q6_K => Some(neon::dot_q6_k(row.as_ptr(), x.as_ptr(), nb)),
            DType::F32 => Some(neon::dot_f32(row.as_ptr(), x.as_ptr(), nb)),
            DType::F16 => Some(neon::dot_f16(row.as_ptr(), x.as_ptr(), nb)),
            DType::BF16 => Some(neon::dot_bf16(row.as_ptr(), x.as_ptr(), nb)),
            _ => None,
        }
    }
}

/// `out[i] = row_i · x` for consecutive encoded rows of `row_len` elements in `rows_bytes`
/// (`out.len()` rows). Same contract as [`dot_row`] (`x.len() == row_len`,
/// `rows_bytes.len() == out.len() * row bytes`); runs on the calling thread.
pub fn dot_rows(dtype: DType, rows_bytes: &[u8], row_len: usize, x: &[f32], out: &mut [f32]) {
    dot_rows_using(super::cpu::best(), dtype, rows_bytes, row_len, x, out)
}

/// [`dot_rows`] with the multi-row kernels of at most the family `kernels` (clamped to what
/// this CPU runs, [`super::cpu::best`]); lets tests and benchmarks compare the paths.
pub fn dot_rows_using(
    kernels: Kernels,
    dtype: DType,
    rows_bytes: &[u8],
    row_len: usize,
    x: &[f32],
    out: &mut [f32],
) {
    let rb = row_len / dtype.block_elems() * dtype.block_bytes();
    debug_assert_eq!(x.len(), row_len, "dot_rows: x length");
    debug_assert_eq!(rows_bytes.len(), rb * out.len(), "dot_rows: rows bytes");
    let x = &x[..row_len.min(x.len())];
    let n_rows = out.len().min(rows_bytes.len().checked_div(rb).unwrap_or(0));
    let kernels = kernels.min(super::cpu::best());
    #[cfg(target_arch = "x86_64")]
    let done = if kernels >= Kernels::Avx2
        && row_len > 0
        && row_len.is_multiple_of(32)
        && x.len() == row_len
    {
        dot_rows_x86(kernels, dtype, rows_bytes, rb, x, &mut out[..n_rows])
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for j in done..n_rows {
        let row = &rows_bytes[j * rb..(j + 1) * rb];
        out[j] = if kernels == Kernels::Scalar
            || (kernels == Kernels::Neon && !cfg!(target_arch = "aarch64"))
        {
            let nb = (x.len() / dtype.block_elems()).min(row.len() / dtype.block_bytes());
            dot_scalar(
                dtype,
                &row[..nb * dtype.block_bytes()],
                &x[..nb * dtype.block_elems()],
            )
        } else {
            dot_row(dtype, row, x)
        };
    }
}

/// The multi-row kernels (`out.len()` rows of `rb` bytes, `x.len()` a multiple of 32,
/// `kernels` at least AVX2 and supported by this CPU), in groups of four rows: AVX2
/// [`super::avx2_perm`] for Q4_0, Q5_0, Q4_K, Q6_K and [`super::avx2_rows`] for Q4_1, Q5_1,
/// except Q4_0, Q4_1 and Q5_0 on the AVX-512 path ([`super::avx512`]); Q8_0 row by row, one
/// prefetched stream (AVX-512 where chosen);
/// returns how many leading rows it computed (0 when no kernel here fits `dtype`).
#[cfg(target_arch = "x86_64")]
fn dot_rows_x86(
    kernels: Kernels,
    dtype: DType,
    rows_bytes: &[u8],
    rb: usize,
    x: &[f32],
    out: &mut [f32],
) -> usize {
    use super::avx2_rows as a2;
    let nb = x.len() / 32;
    if dtype == DType::Q8_0 {
        type Dot1 = unsafe fn(*const u8, *const f32, usize) -> f32;
        let dot1: Dot1 = if kernels == Kernels::Avx512 {
            super::avx512::dot1_q8_0
        } else {
            a2::dot1_q8_0
        };
        for (o, row) in out.iter_mut().zip(rows_bytes.chunks_exact(rb)) {
            // SAFETY: the kernel's features are present (`kernels` is clamped to
            // `cpu::best()`); `row` holds rb = nb * 34 bytes (a whole chunk) and x holds
            // nb*32 values.
            *o = unsafe { dot1(row.as_ptr(), x.as_ptr(), nb) };
        }
        return out.len();
    }
    if matches!(dtype, DType::Q4_0 | DType::Q5_0)
        || (matches!(dtype, DType::Q4_K | DType::Q5_K | DType::Q6_K) && x.len().is_multiple_of(256))
    {
        return dot_rows_prepared(kernels, dtype, rows_bytes, rb, x, out);
    }
    type Dot4 = unsafe fn([*const u8; 4], *const f32, *const f32, usize) -> [f32; 4];
    let kernel: Dot4 = match dtype {
        DType::Q4_1 if kernels == Kernels::Avx512 => super::avx512::dot4_q4_1,
        DType::Q4_1 => a2::dot4_q4_1,
        DType::Q5_1 => a2::dot4_q5_1,
        _ => return 0,
    };
    if nb > a2::MAX_BLOCKS {
        return 0;
    }
    // Per-block pairs of x sums, read by the kernel for the folded minimum.
    let mut sums = [0.0f32; 2 * a2::MAX_BLOCKS];
    // SAFETY: AVX2 present; x holds nb*32 values and sums 2*MAX_BLOCKS >= 2*nb floats.
    unsafe { a2::block_sums(x.as_ptr(), nb, sums.as_mut_ptr()) };
    let groups = out.len() / 4;
    for (g, o) in out.chunks_exact_mut(4).take(groups).enumerate() {
        let p = rows_bytes[g * 4 * rb..(g + 1) * 4 * rb].as_ptr();
        // SAFETY: the kernel's CPU features are present (`kernels` is clamped to
        // `cpu::best()` and matched above); the four rows lie within
        // `rows_bytes[4g*rb..4(g+1)*rb]` (sliced, so bounds-checked) and each holds nb
        // blocks; x holds nb blocks of the encoding's elements; sums holds what the kernel
        // reads (a pair per 32-element block, or eight sub-block sums per super-block).
        let r = unsafe {
            kernel(
                [p, p.add(rb), p.add(2 * rb), p.add(3 * rb)],
                x.as_ptr(),
                sums.as_ptr(),
                nb,
            )
        };
        o.copy_from_slice(&r);
    }
    groups * 4
}

/// Q4_0, Q5_0, Q4_K, Q5_K and Q6_K rows through [`super::avx2_perm`]: x prepared once per call
/// into a per-thread scratch vector (reordered for shuffle widening, with the offset or
/// group sums the kernel folds), then four rows at a time; returns the rows computed.
#[cfg(target_arch = "x86_64")]
fn dot_rows_prepared(
    kernels: Kernels,
    dtype: DType,
    rows_bytes: &[u8],
    rb: usize,
    x: &[f32],
    out: &mut [f32],
) -> usize {
    use super::avx2_perm as ap;
    use std::cell::RefCell;
    thread_local! {
        static PREP: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    }
    type Dot4 = unsafe fn([*const u8; 4], *const f32, usize) -> [f32; 4];
    let (kernel, nb, len): (Dot4, usize, usize) = match dtype {
        DType::Q4_0 if kernels == Kernels::Avx512 => (
            super::avx512::dot4_q4_0,
            x.len() / 32,
            x.len() / 32 * ap::PREP_FLOATS,
        ),
        DType::Q4_0 => (ap::dot4_q4_0, x.len() / 32, x.len() / 32 * ap::PREP_FLOATS),
        DType::Q5_0 if kernels == Kernels::Avx512 => (
            super::avx512::dot4_q5_0,
            x.len() / 32,
            x.len() / 32 * ap::PREP_FLOATS,
        ),
        DType::Q5_0 => (ap::dot4_q5_0, x.len() / 32, x.len() / 32 * ap::PREP_FLOATS),
        DType::Q4_K => (
            ap::dot4_q4_k,
            x.len() / 256,
            x.len() / 256 * ap::PREP_K_FLOATS,
        ),
        DType::Q5_K => (
            ap::dot4_q5_k,
            x.len() / 256,
            x.len() / 256 * ap::PREP_K_FLOATS,
        ),
        DType::Q6_K => (
            ap::dot4_q6_k,
            x.len() / 256,
            x.len() / 256 * ap::PREP_K_FLOATS,
        ),
        _ => return 0,
    };
    PREP.with(|cell| {
        let mut prep = cell.borrow_mut();
        // Sized by x, which the caller already holds: no untrusted size here.
        prep.resize(len, 0.0);
        // SAFETY: AVX2/FMA/F16C present (the caller's `kernels` is clamped to
        // `cpu::best()`); x holds nb blocks of the encoding's elements and prep the
        // layout's floats for nb blocks.
        unsafe {
            match dtype {
                DType::Q4_0 => ap::prepare_x_natural(x.as_ptr(), nb, -8.0, prep.as_mut_ptr()),
                DType::Q5_0 if kernels == Kernels::Avx512 => {
                    ap::prepare_x_natural(x.as_ptr(), nb, -16.0, prep.as_mut_ptr())
                }
                DType::Q5_0 => ap::prepare_x(x.as_ptr(), nb, -16.0, prep.as_mut_ptr()),
                _ => ap::prepare_x_k(x.as_ptr(), nb, prep.as_mut_ptr()),
            }
        }
        let groups = out.len() / 4;
        for (g, o) in out.chunks_exact_mut(4).take(groups).enumerate() {
            let p = rows_bytes[g * 4 * rb..(g + 1) * 4 * rb].as_ptr();
            // SAFETY: as above; the four rows lie within `rows_bytes[4g*rb..4(g+1)*rb]`
            // (sliced, so bounds-checked), each holding nb blocks.
            let r = unsafe {
                kernel(
                    [p, p.add(rb), p.add(2 * rb), p.add(3 * rb)],
                    prep.as_ptr(),
                    nb,
                )
            };
            o.copy_from_slice(&r);
        }
        groups * 4
    })
}

#[cfg(target_arch = "x86_64")]
fn dot_avx2(dtype: DType, row: &[u8], x: &[f32]) -> f32 {
    use super::avx2;
    let n = x.len();
    let nb = n / dtype.block_elems();
    // SAFETY: has_avx2() checked by the caller; row holds exactly nb whole blocks and x
    // exactly nb * block_elems values (sliced in dot_row).
    unsafe {
        match dtype {
            DType::F32 => avx2::dot_f32(row.as_ptr() as *const f32, x.as_ptr(), n),
            DType::F16 => avx2::dot_f16(row.as_ptr(), x.as_ptr(), n),
            DType::BF16 => avx2::dot_bf16(row.as_ptr(), x.as_ptr(), n),
            DType::Q4_0 => avx2::dot_q4_0(row.as_ptr(), x.as_ptr(), nb),
            DType::Q4_1 => avx2::dot_q4_1(row.as_ptr(), x.as_ptr(), nb),
            DType::Q8_0 => avx2::dot_q8_0(row.as_ptr(), x.as_ptr(), nb),
            DType::MXFP4 => avx2::dot_mxfp4(row.as_ptr(), x.as_ptr(), nb),
            DType::Q5_0 => avx2::dot_q5_0(row.as_ptr(), x.as_ptr(), nb),
            DType::Q5_1 => avx2::dot_q5_1(row.as_ptr(), x.as_ptr(), nb),
            DType::Q2_K | DType::Q3_K => dot_scalar(dtype, row, x),
            DType::Q4_K => avx2::dot_q4_k(row.as_ptr(), x.as_ptr(), nb),
            DType::Q5_K => avx2::dot_q5_k(row.as_ptr(), x.as_ptr(), nb),
            DType::Q6_K => avx2::dot_q6_k(row.as_ptr(), x.as_ptr(), nb),
        }
    }
}

/// Portable fused dot: decodes one block at a time into a stack buffer.
pub fn dot_scalar(dtype: DType, row: &[u8], x: &[f32]) -> f32 {
    match dtype {
        DType::F32 => {
            let mut acc = [0.0f32; 8];
            let mut chunks = row.chunks_exact(32).zip(x.chunks_exact(8));
            for (c, xs) in &mut chunks {
                for k in 0..8 {
                    let w =
                        f32::from_le_bytes([c[4 * k], c[4 * k + 1], c[4 * k + 2], c[4 * k + 3]]);
                    acc[k] += w * xs[k];
                }
            }
            let done = x.len() / 8 * 8;
            let mut s: f32 = acc.iter().sum();
            for (c, xv) in row[done * 4..].chunks_exact(4).zip(&x[done..]) {
                s += f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * xv;
            }
            s
        }
        DType::F16 | DType::BF16 => {
            let mut buf = [0.0f32; 64];
            let mut s = 0.0f32;
            for (c, xs) in row.chunks(128).zip(x.chunks(64)) {
                let y = &mut buf[..xs.len()];
                super::decode::decode_scalar(dtype, c, y);
                s += plain_dot(y, xs);
            }
            s
        }
        _ => dot_blockwise(dtype, row, x, plain_dot),
    }
}

fn plain_dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (pa, pb) in (&mut ca).zip(&mut cb) {
        for k in 0..8 {
            acc[k] += pa[k] * pb[k];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (p, q) in ca.remainder().iter().zip(cb.remainder()) {
        s += p * q;
    }
    s
}

/// Decodes block by block (exact scalar decoder) into a stack buffer and dots each block.
fn dot_blockwise(dtype: DType, row: &[u8], x: &[f32], dot: impl Fn(&[f32], &[f32]) -> f32) -> f32 {
    let (be, bb) = (dtype.block_elems(), dtype.block_bytes());
    let mut buf = [0.0f32; QK_K];
    let mut s = 0.0f32;
    let y = &mut buf[..be];
    for (b, xs) in row.chunks_exact(bb).zip(x.chunks_exact(be)) {
        match dtype {
            DType::Q4_0 => block::decode_q4_0(b, y),
            DType::Q4_1 => block::decode_q4_1(b, y),
            DType::Q5_0 => block::decode_q5_0(b, y),
            DType::Q5_1 => block::decode_q5_1(b, y),
            DType::Q8_0 => block::decode_q8_0(b, y),
            DType::MXFP4 => block::decode_mxfp4(b, y),
            DType::Q2_K => block::decode_q2_k(b, y),
            DType::Q3_K => block::decode_q3_k(b, y),
            DType::Q4_K => block::decode_q4_k(b, y),
            DType::Q5_K => block::decode_q5_k(b, y),
            DType::Q6_K => block::decode_q6_k(b, y),
            DType::F32 | DType::F16 | DType::BF16 => super::decode::decode_scalar(dtype, b, y),
        }
        s += dot(y, xs);
    }
    s
}
