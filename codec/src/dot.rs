//! Fused dot products of encoded rows with an f32 vector — the executor's decode hot path.
//!
//! No decoded row is materialised: the quantised kernels work block by block in registers
//! (AVX2 + FMA + F16C when present) or through a one-block stack buffer (scalar fallback and
//! the less common encodings). Results equal "decode, then dot in f32" up to rounding
//! (accumulation order and FMA); the activation vector is never quantised.

use super::block::QK_K;
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
    let kernel = dtype.codec().neon_dot?;
    let nb = x.len() / dtype.block_elems();
    // SAFETY: NEON is baseline on aarch64; row holds exactly nb whole blocks and x exactly
    // nb * block_elems values (sliced in dot_row).
    Some(unsafe { kernel(row.as_ptr(), x.as_ptr(), nb) })
}

/// `y += a · x` over the shorter length: each element one product, then one sum, rounded
/// as scalar code rounds them (no fused multiply-add), so every kernel path gives the same
/// bits.
pub fn axpy_f32(a: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    #[cfg(target_arch = "x86_64")]
    if super::cpu::has_avx2() {
        // SAFETY: AVX2 is present (`has_avx2`); both slices hold `n` values.
        unsafe { crate::avx2::axpy_f32(a, x.as_ptr(), y.as_mut_ptr(), n) };
        return;
    }
    for (yi, xi) in y[..n].iter_mut().zip(&x[..n]) {
        *yi += a * xi;
    }
}

/// `a · x` over f32 values in memory (the F32 codec's kernels, without the bytes): AVX2 + FMA
/// where present, NEON on aarch64, else eight running sums. Over the common length.
#[inline]
pub fn dot_f32(a: &[f32], x: &[f32]) -> f32 {
    let n = a.len().min(x.len());
    #[cfg(target_arch = "x86_64")]
    if super::cpu::has_avx2() {
        // SAFETY: AVX2, FMA and F16C are present (`has_avx2`); both slices hold `n` values.
        return unsafe { crate::avx2::dot_f32(a.as_ptr(), x.as_ptr(), n) };
    }
    #[cfg(target_arch = "aarch64")]
    if super::cpu::has_neon() {
        // SAFETY: NEON is baseline on aarch64; both slices hold `n` values.
        return unsafe { crate::neon::dot_f32(a.as_ptr() as *const u8, x.as_ptr(), n) };
    }
    let mut acc = [0.0f32; 8];
    let (ca, cx) = (a[..n].chunks_exact(8), x[..n].chunks_exact(8));
    let (ra, rx) = (ca.remainder(), cx.remainder());
    for (p, q) in ca.zip(cx) {
        for k in 0..8 {
            acc[k] += p[k] * q[k];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (p, q) in ra.iter().zip(rx) {
        s += p * q;
    }
    s
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
/// `kernels` at least AVX2 and supported by this CPU), as the encoding's registry entry
/// gives them ([`crate::formats::Rows`]), the AVX-512 one where chosen and present;
/// returns how many leading rows it computed (0 when the encoding has none that fits).
#[cfg(target_arch = "x86_64")]
fn dot_rows_x86(
    kernels: Kernels,
    dtype: DType,
    rows_bytes: &[u8],
    rb: usize,
    x: &[f32],
    out: &mut [f32],
) -> usize {
    use crate::formats::Rows;
    let codec = dtype.codec();
    if !x.len().is_multiple_of(codec.block_elems) {
        return 0;
    }
    let nb = x.len() / codec.block_elems;
    let wide = kernels == Kernels::Avx512;
    match &codec.x86.rows {
        Rows::None => 0,
        Rows::Single { avx2, avx512 } => {
            let dot1 = avx512.filter(|_| wide).unwrap_or(*avx2);
            for (o, row) in out.iter_mut().zip(rows_bytes.chunks_exact(rb)) {
                // SAFETY: the kernel's features are present (`kernels` is clamped to
                // `cpu::best()`); `row` holds rb = nb blocks (a whole chunk) and x holds nb
                // blocks of values.
                *o = unsafe { dot1(row.as_ptr(), x.as_ptr(), nb) };
            }
            out.len()
        }
        Rows::Summed { avx2, avx512 } => dot_rows_summed(
            avx512.filter(|_| wide).unwrap_or(*avx2),
            rows_bytes,
            rb,
            x,
            out,
        ),
        Rows::Prepared { avx2, avx512 } => {
            let p = avx512.as_ref().filter(|_| wide).unwrap_or(avx2);
            dot_rows_prepared(p, nb, rows_bytes, rb, x, out)
        }
    }
}

/// Four rows at a time through a kernel that reads per-block pairs of x sums (Q4_1,
/// Q5_1: the folded minimum); returns the rows computed.
#[cfg(target_arch = "x86_64")]
fn dot_rows_summed(
    kernel: crate::formats::Dot4Summed,
    rows_bytes: &[u8],
    rb: usize,
    x: &[f32],
    out: &mut [f32],
) -> usize {
    use super::avx2_rows as a2;
    let nb = x.len() / 32;
    if nb > a2::MAX_BLOCKS {
        return 0;
    }
    let mut sums = [0.0f32; 2 * a2::MAX_BLOCKS];
    // SAFETY: AVX2 present; x holds nb*32 values and sums 2*MAX_BLOCKS >= 2*nb floats.
    unsafe { a2::block_sums(x.as_ptr(), nb, sums.as_mut_ptr()) };
    let groups = out.len() / 4;
    for (g, o) in out.chunks_exact_mut(4).take(groups).enumerate() {
        let p = rows_bytes[g * 4 * rb..(g + 1) * 4 * rb].as_ptr();
        // SAFETY: the kernel's CPU features are present (`kernels` is clamped to
        // `cpu::best()`); the four rows lie within `rows_bytes[4g*rb..4(g+1)*rb]` (sliced,
        // so bounds-checked) and each holds nb blocks; x holds nb blocks of the encoding's
        // elements; sums holds a pair per 32-element block.
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

/// Four rows at a time over x laid out once per call into a per-thread scratch vector
/// (reordered for shuffle widening, with the offset or group sums the kernel folds);
/// returns the rows computed.
#[cfg(target_arch = "x86_64")]
fn dot_rows_prepared(
    kernel: &crate::formats::Prepared,
    nb: usize,
    rows_bytes: &[u8],
    rb: usize,
    x: &[f32],
    out: &mut [f32],
) -> usize {
    use std::cell::RefCell;
    thread_local! {
        static PREP: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    }
    PREP.with(|cell| {
        let mut prep = cell.borrow_mut();
        // Sized by x, which the caller already holds: no untrusted size here.
        prep.resize(nb * kernel.floats_per_block, 0.0);
        // SAFETY: AVX2/FMA/F16C present (the caller's `kernels` is clamped to
        // `cpu::best()`); x holds nb blocks of the encoding's elements and prep the
        // layout's floats for nb blocks.
        unsafe { (kernel.prepare)(x.as_ptr(), nb, prep.as_mut_ptr()) };
        let groups = out.len() / 4;
        for (g, o) in out.chunks_exact_mut(4).take(groups).enumerate() {
            let p = rows_bytes[g * 4 * rb..(g + 1) * 4 * rb].as_ptr();
            // SAFETY: as above; the four rows lie within `rows_bytes[4g*rb..4(g+1)*rb]`
            // (sliced, so bounds-checked), each holding nb blocks.
            let r = unsafe {
                (kernel.dot4)(
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
    let Some(kernel) = dtype.codec().x86.dot else {
        return dot_scalar(dtype, row, x);
    };
    let nb = x.len() / dtype.block_elems();
    // SAFETY: has_avx2() checked by the caller; row holds exactly nb whole blocks and x
    // exactly nb * block_elems values (sliced in dot_row).
    unsafe { kernel(row.as_ptr(), x.as_ptr(), nb) }
}

/// Portable fused dot: the encoding's own portable kernel, else one block (64 values of a
/// one-element encoding) at a time decoded into a stack buffer.
pub fn dot_scalar(dtype: DType, row: &[u8], x: &[f32]) -> f32 {
    let codec = dtype.codec();
    match codec.dot_portable {
        Some(dot) => dot(row, x),
        None => dot_blockwise(dtype, row, x, plain_dot),
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

/// Decodes block by block (exact scalar decoder; 64 values at a time for one-element
/// encodings) into a stack buffer and dots each block.
fn dot_blockwise(dtype: DType, row: &[u8], x: &[f32], dot: impl Fn(&[f32], &[f32]) -> f32) -> f32 {
    let codec = dtype.codec();
    let be = if codec.block_elems == 1 {
        64
    } else {
        codec.block_elems
    };
    let bb = be / codec.block_elems * codec.block_bytes;
    let mut buf = [0.0f32; QK_K];
    let mut s = 0.0f32;
    for (b, xs) in row.chunks(bb).zip(x.chunks(be)) {
        let y = &mut buf[..xs.len()];
        codec.decode(b, y);
        s += dot(y, xs);
    }
    s
}

#[cfg(test)]
mod tests {
    /// Every length from empty through several SIMD widths and a tail, against f64.
    #[test]
    fn dot_f32_matches_the_sum() {
        for n in 0..80usize {
            let a: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.25)
                .collect();
            let x: Vec<f32> = (0..n).map(|i| ((i * 13 % 7) as f32 - 3.0) * 0.5).collect();
            let want: f64 = a.iter().zip(&x).map(|(p, q)| *p as f64 * *q as f64).sum();
            let got = super::dot_f32(&a, &x) as f64;
            assert!((got - want).abs() < 1e-4, "n={n}: {got} vs {want}");
        }
        // The common length of unequal slices.
        assert_eq!(super::dot_f32(&[1.0, 2.0, 3.0], &[4.0, 5.0]), 14.0);
    }

    /// Every length through several SIMD widths and a tail: the bits of `y + a * x`
    /// computed one element at a time (a product, then a sum).
    #[test]
    fn axpy_f32_has_the_bits_of_the_scalar_loop() {
        for n in 0..80usize {
            let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 1.7).collect();
            let y0: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos() * 0.3).collect();
            let a = 0.318_309_87_f32;
            let mut got = y0.clone();
            super::axpy_f32(a, &x, &mut got);
            let want: Vec<f32> = y0.iter().zip(&x).map(|(y, x)| y + a * x).collect();
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "n={n}"
            );
        }
        // The common length of unequal slices; the rest of `y` is untouched.
        let mut y = [1.0f32, 1.0, 1.0];
        super::axpy_f32(2.0, &[1.0, 2.0], &mut y);
        assert_eq!(y, [3.0, 5.0, 1.0]);
    }
}
