//! Tiled causal attention for the CPU backend (no weights asked for): the queries of a
//! block of positions that share a key/value head meet the keys in blocks of [`KB`], with
//! an online softmax (running maximum and sum per query), so memory stays
//! `O(block × head_dim)` whatever the prompt length, and the inner loops are
//! vectorisable runs over keys (scores) and over head dimensions (values). Decoding over a
//! long cache splits the keys into runs of [`KEY_SPLIT`] (flash-decoding: one task per kv
//! head and run, partial states merged exactly), prefetches each block's key and value rows
//! a block ahead, and scores eight keys at a time as direct dot products.
//!
//! Arithmetic: scores, exponentials ([`kernels::exp`]) and sums in f32; the result equals
//! the two-pass softmax up to rounding (the running rescale). When the softmax weights
//! themselves are wanted (TRACE, observers) the backend uses its per-query path instead.

use rayon::prelude::*;

use super::{AttnGeometry, AttnStep};
use crate::kernels;

/// Keys per block (scores of one block stay in L1).
pub const KB: usize = 64;
/// Query positions per task (times the query heads sharing one key/value head).
pub const QB: usize = 16;

/// Below this many query rows per task, scores are direct dot products (no transpose).
const DIRECT_ROWS: usize = 12;

/// Keys per task when few query rows meet a long cache (decoding after a long prompt): the
/// key range is split so every thread has work (one task per kv head would leave a thread
/// idle), and the partial softmax states merge exactly ([`merge`]). Shorter caches keep one
/// task per kv head, so their arithmetic is unchanged.
const KEY_SPLIT: usize = 512;

/// `acc += Σ_j p[j] · v_j` for `H`-wide value rows `stride` apart, the accumulator held
/// in registers across the keys.
#[inline(always)]
fn accumulate<const H: usize, F: MulAdd>(acc: &mut [f32], p: &[f32], v: &[f32], stride: usize) {
    let mut a = [0.0f32; H];
    a.copy_from_slice(&acc[..H]);
    for (j, &pj) in p.iter().enumerate() {
        let vj: &[f32; H] = v[j * stride..j * stride + H].try_into().expect("H values");
        for d in 0..H {
            a[d] = F::mul_add(pj, vj[d], a[d]);
        }
    }
    acc[..H].copy_from_slice(&a);
}

/// One task's output: `(first position, kv head, rows [positions × group × head_dim])`.
type Piece = (usize, usize, Vec<f32>);

/// Causal attention of `step` into `out = [n × n_heads × head_dim]`, tasks spread over
/// the current rayon pool when `parallel`.
pub fn attend_tiled(step: &AttnStep<'_>, out: &mut [f32], parallel: bool) {
    let g = step.geom;
    let keys = step.p0 + step.n;
    if step.n * (g.n_heads / g.n_kv_heads) < DIRECT_ROWS && step.n <= QB && keys > KEY_SPLIT {
        return attend_split(step, out, parallel);
    }
    let tasks: Vec<(usize, usize)> = (0..step.n)
        .step_by(QB)
        .flat_map(|i0| (0..g.n_kv_heads).map(move |kh| (i0, kh)))
        .collect();
    let run = |&(i0, kh): &(usize, usize)| -> Piece {
        let i1 = (i0 + QB).min(step.n);
        let hd = step.geom.head_dim;
        (
            i0,
            kh,
            block(step, kh, i0, i1, 0..usize::MAX).normalised(hd),
        )
    };
    for (i0, kh, rows) in map_tasks(&tasks, parallel, run) {
        place_rows(out, g, i0, kh, &rows);
    }
}

/// `run` over every task, on the current rayon pool when `parallel`, results in task order.
fn map_tasks<T: Sync, R: Send>(
    tasks: &[T],
    parallel: bool,
    run: impl Fn(&T) -> R + Sync + Send,
) -> Vec<R> {
    if parallel {
        tasks.par_iter().map(run).collect()
    } else {
        tasks.iter().map(run).collect()
    }
}

/// Writes a block's rows (positions from `i0`, the query heads of kv head `kh`,
/// position-major) into `out = [n × n_heads × head_dim]`.
fn place_rows(out: &mut [f32], g: AttnGeometry, i0: usize, kh: usize, rows: &[f32]) {
    let (hd, nh) = (g.head_dim, g.n_heads);
    let group = nh / g.n_kv_heads;
    for (r, row) in rows.chunks_exact(hd).enumerate() {
        let (i, h) = (i0 + r / group, kh * group + r % group);
        out[(i * nh + h) * hd..(i * nh + h + 1) * hd].copy_from_slice(row);
    }
}

/// [`attend_tiled`] for a few query rows over a long cache: tasks are (kv head, run of
/// [`KEY_SPLIT`] keys), each an unnormalised softmax state, merged per kv head.
fn attend_split(step: &AttnStep<'_>, out: &mut [f32], parallel: bool) {
    let g = step.geom;
    let keys = step.p0 + step.n;
    let tasks: Vec<(usize, usize)> = (0..g.n_kv_heads)
        .flat_map(|kh| (0..keys).step_by(KEY_SPLIT).map(move |k0| (kh, k0)))
        .collect();
    let run = |&(kh, k0): &(usize, usize)| -> State {
        block(step, kh, 0, step.n, k0..(k0 + KEY_SPLIT).min(keys))
    };
    let states = map_tasks(&tasks, parallel, run);
    for (kh, parts) in states.chunks(keys.div_ceil(KEY_SPLIT)).enumerate() {
        place_rows(out, g, 0, kh, &merge(parts, g.head_dim));
    }
}

/// Normalised rows of the softmax states of one block's queries over disjoint key runs:
/// each state's sum and accumulator rescaled to the largest running maximum.
fn merge(parts: &[State], hd: usize) -> Vec<f32> {
    let rows = parts[0].m.len();
    let mut out = vec![0.0f32; rows * hd];
    for r in 0..rows {
        let m = parts
            .iter()
            .map(|p| p.m[r])
            .fold(f32::NEG_INFINITY, f32::max);
        let mut l = 0.0f32;
        let o = &mut out[r * hd..(r + 1) * hd];
        for p in parts {
            let c = kernels::exp(p.m[r] - m);
            l += p.l[r] * c;
            for (a, v) in o.iter_mut().zip(&p.acc[r * hd..(r + 1) * hd]) {
                *a += v * c;
            }
        }
        let inv = 1.0 / l;
        o.iter_mut().for_each(|a| *a *= inv);
    }
    out
}

/// The online-softmax state of a block's query rows after some keys: the running maximum
/// `m` and sum `l` per row, and the unnormalised accumulator `[rows × head_dim]`.
struct State {
    acc: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
}

impl State {
    /// The normalised rows (`acc / l`).
    fn normalised(mut self, hd: usize) -> Vec<f32> {
        for (ar, &lr) in self.acc.chunks_exact_mut(hd).zip(&self.l) {
            let inv = 1.0 / lr;
            ar.iter_mut().for_each(|a| *a *= inv);
        }
        self.acc
    }
}

/// Positions `i0 .. i1`, the query heads of kv head `kh`, over the keys of `span` (clipped
/// to what each row may see).
fn block(
    step: &AttnStep<'_>,
    kh: usize,
    i0: usize,
    i1: usize,
    span: std::ops::Range<usize>,
) -> State {
    #[cfg(target_arch = "x86_64")]
    if lql_storage::codec::cpu::has_avx2() {
        // SAFETY: AVX2 and FMA are present (checked at run time).
        return unsafe { block_avx2(step, kh, i0, i1, span) };
    }
    // aarch64 has fused multiply-add in every core; elsewhere keep to plain arithmetic
    // (`mul_add` without hardware support is a slow library call).
    if cfg!(target_arch = "aarch64") {
        block_body::<Fused>(step, kh, i0, i1, span)
    } else {
        block_body::<Plain>(step, kh, i0, i1, span)
    }
}

/// Prefetches the `len` floats of `buf` from `at` (a hint; never reads past `buf`'s
/// allocation as a load would, and does nothing off x86).
#[inline(always)]
fn prefetch_row(buf: &[f32], at: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if at < buf.len() {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = buf[at..].as_ptr() as *const i8;
        let mut off = 0;
        while off < len * 4 {
            // SAFETY: a prefetch is a hint and never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off)) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (buf, at, len);
}

/// How the kernel multiplies and adds: fused where the hardware does it in one step.
trait MulAdd: Sized {
    /// `a * b + c`.
    fn mul_add(a: f32, b: f32, c: f32) -> f32;

    /// [`accumulate`] over 64-wide value rows.
    #[inline(always)]
    fn accumulate64(acc: &mut [f32], p: &[f32], v: &[f32], stride: usize) {
        accumulate::<64, Self>(acc, p, v, stride)
    }

    /// One query row's scores against `s.len()` 64-wide key rows `stride` apart (decoding:
    /// too few rows to pay for a transpose): `s[j] = q · k[j·stride ..][..64]`.
    ///
    /// Eight lanes per key (lane `l` sums dimensions `l, l + 8, …` in order, the first a
    /// product), then `((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))`: the order of
    /// the AVX2 kernel's horizontal-add tree.
    #[inline(always)]
    fn direct_scores64(s: &mut [f32], q: &[f32], k: &[f32], stride: usize) {
        let q: &[f32; 64] = q[..64].try_into().expect("a 64-wide query");
        for (j, sj) in s.iter_mut().enumerate() {
            let kj: &[f32; 64] = k[j * stride..][..64].try_into().expect("a 64-wide key");
            let mut a: [f32; 8] = std::array::from_fn(|l| q[l] * kj[l]);
            for c in 1..8 {
                for (l, al) in a.iter_mut().enumerate() {
                    *al = Self::mul_add(q[8 * c + l], kj[8 * c + l], *al);
                }
            }
            *sj = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        }
    }

    /// One query row's scores against a block of transposed keys: `s[j] = Σ_d q[d] ·
    /// kt[d·KB + j]`, summed over `d` in order from zero.
    #[inline(always)]
    fn scores(s: &mut [f32; KB], q: &[f32], kt: &[f32]) {
        s.fill(0.0);
        for (d, &qd) in q.iter().enumerate() {
            let kr = &kt[d * KB..d * KB + KB];
            for (sj, kj) in s.iter_mut().zip(kr) {
                *sj = Self::mul_add(qd, *kj, *sj);
            }
        }
    }
}

/// Fused, with the 64-wide value accumulation in eight AVX2 registers: the generic loop
/// kept its accumulator on the stack (a store and a reload per key). Same operations in
/// the same order as [`Fused`], so the same bits.
#[cfg(target_arch = "x86_64")]
struct FusedAvx2;
#[cfg(target_arch = "x86_64")]
impl MulAdd for FusedAvx2 {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }

    #[inline(always)]
    fn accumulate64(acc: &mut [f32], p: &[f32], v: &[f32], stride: usize) {
        // SAFETY: only [`block_avx2`] uses this type, and it runs only where AVX2 and FMA
        // are present (checked at run time).
        unsafe { accumulate64_avx2(acc, p, v, stride) }
    }

    #[inline(always)]
    fn direct_scores64(s: &mut [f32], q: &[f32], k: &[f32], stride: usize) {
        // SAFETY: as above.
        unsafe { direct_scores64_avx2(s, q, k, stride) }
    }

    #[inline(always)]
    fn scores(s: &mut [f32; KB], q: &[f32], kt: &[f32]) {
        // SAFETY: as above.
        unsafe { scores_avx2(s, q, kt) }
    }
}

/// [`MulAdd::scores`] with the 64 scores in eight AVX2 registers (the generic loop kept
/// them on the stack: a load, a store and a store-to-load wait per head dimension); the
/// same fused operations in the same order, so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn scores_avx2(s: &mut [f32; KB], q: &[f32], kt: &[f32]) {
    use std::arch::x86_64::*;
    const { assert!(KB == 64, "eight registers of eight scores") };
    assert!(
        kt.len() >= q.len() * KB,
        "a transposed key block per dimension"
    );
    // SAFETY: every row `d < q.len()` of `kt` read here lies within it (asserted), and `s`
    // holds 64 floats.
    unsafe {
        let mut r = [_mm256_setzero_ps(); 8];
        for (d, &qd) in q.iter().enumerate() {
            let qv = _mm256_set1_ps(qd);
            let kr = kt.as_ptr().add(d * KB);
            for (i, ri) in r.iter_mut().enumerate() {
                *ri = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kr.add(8 * i)), *ri);
            }
        }
        for (i, ri) in r.iter().enumerate() {
            _mm256_storeu_ps(s.as_mut_ptr().add(8 * i), *ri);
        }
    }
}

/// [`MulAdd::direct_scores64`] eight keys at a time: eight independent chains of eight
/// FMAs (the one-key dot was a single dependent chain, its latency paid per key), the
/// eight lane sums reduced together by a tree of horizontal adds; leftover keys one by one
/// with the same lane order and tree.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn direct_scores64_avx2(s: &mut [f32], q: &[f32], k: &[f32], stride: usize) {
    use std::arch::x86_64::*;
    let n = s.len();
    assert!(q.len() >= 64, "a 64-wide query");
    if let Some(last) = n.checked_sub(1) {
        assert!(k.len() >= last * stride + 64, "key rows within the cache");
    }
    // Lane j of the result: the sum of the eight lanes of a[j].
    #[inline(always)]
    unsafe fn reduce8(a: &[__m256; 8]) -> __m256 {
        let t0 = _mm256_hadd_ps(a[0], a[1]);
        let t1 = _mm256_hadd_ps(a[2], a[3]);
        let t2 = _mm256_hadd_ps(a[4], a[5]);
        let t3 = _mm256_hadd_ps(a[6], a[7]);
        let u0 = _mm256_hadd_ps(t0, t1);
        let u1 = _mm256_hadd_ps(t2, t3);
        _mm256_add_ps(
            _mm256_permute2f128_ps::<0x20>(u0, u1),
            _mm256_permute2f128_ps::<0x31>(u0, u1),
        )
    }
    // SAFETY: `q` holds 64 floats and every key row read lies within `k` (asserted); `s`
    // is written within its length.
    unsafe {
        let qp = q.as_ptr();
        let qv: [__m256; 8] = std::array::from_fn(|c| _mm256_loadu_ps(qp.add(8 * c)));
        let dot = |kj: *const f32| {
            let mut a = _mm256_mul_ps(qv[0], _mm256_loadu_ps(kj));
            for (c, qc) in qv.iter().enumerate().skip(1) {
                a = _mm256_fmadd_ps(*qc, _mm256_loadu_ps(kj.add(8 * c)), a);
            }
            a
        };
        let mut j = 0;
        while j + 8 <= n {
            let a: [__m256; 8] = std::array::from_fn(|i| dot(k.as_ptr().add((j + i) * stride)));
            _mm256_storeu_ps(s.as_mut_ptr().add(j), reduce8(&a));
            j += 8;
        }
        if j < n {
            let mut a = [_mm256_setzero_ps(); 8];
            for (i, ai) in a.iter_mut().enumerate().take(n - j) {
                *ai = dot(k.as_ptr().add((j + i) * stride));
            }
            let mut tail = [0.0f32; 8];
            _mm256_storeu_ps(tail.as_mut_ptr(), reduce8(&a));
            s[j..].copy_from_slice(&tail[..n - j]);
        }
    }
}

/// `acc[..64] += Σ_j p[j] · v[j·stride ..][..64]`, one FMA per lane and key, keys in order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn accumulate64_avx2(acc: &mut [f32], p: &[f32], v: &[f32], stride: usize) {
    use std::arch::x86_64::*;
    let acc = &mut acc[..64];
    if let Some(last) = p.len().checked_sub(1) {
        assert!(v.len() >= last * stride + 64, "value rows within the cache");
    }
    let a = acc.as_mut_ptr();
    // SAFETY: `acc` holds 64 floats and every value row read lies within `v` (asserted).
    unsafe {
        let mut r = [_mm256_setzero_ps(); 8];
        for (i, ri) in r.iter_mut().enumerate() {
            *ri = _mm256_loadu_ps(a.add(8 * i));
        }
        for (j, &pj) in p.iter().enumerate() {
            let pv = _mm256_set1_ps(pj);
            let vj = v.as_ptr().add(j * stride);
            for (i, ri) in r.iter_mut().enumerate() {
                *ri = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vj.add(8 * i)), *ri);
            }
        }
        for (i, ri) in r.iter().enumerate() {
            _mm256_storeu_ps(a.add(8 * i), *ri);
        }
    }
}

/// One rounding (`f32::mul_add`), for builds with fused multiply-add enabled.
struct Fused;
impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

/// Multiply, then add.
struct Plain;
impl MulAdd for Plain {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_avx2(
    step: &AttnStep<'_>,
    kh: usize,
    i0: usize,
    i1: usize,
    span: std::ops::Range<usize>,
) -> State {
    block_body::<FusedAvx2>(step, kh, i0, i1, span)
}

/// Positions `i0 .. i1` of the step, the query heads of kv head `kh`, over the keys of
/// `span`: rows ordered position-major, `[(i1 − i0) × group × head_dim]`, unnormalised.
#[inline(always)]
fn block_body<F: MulAdd>(
    step: &AttnStep<'_>,
    kh: usize,
    i0: usize,
    i1: usize,
    span: std::ops::Range<usize>,
) -> State {
    let g = step.geom;
    let (hd, nh) = (g.head_dim, g.n_heads);
    let group = nh / g.n_kv_heads;
    let kv_dim = g.n_kv_heads * hd;
    let rows = (i1 - i0) * group;
    let rule = step.rule;
    let scale = rule.scale;
    // Queries, pre-scaled; the first and last visible key of each row.
    let mut q = vec![0.0f32; rows * hd];
    let mut last = vec![0usize; rows];
    let mut first = vec![0usize; rows];
    for r in 0..rows {
        let (i, h) = (i0 + r / group, kh * group + r % group);
        let src = &step.q[(i * nh + h) * hd..(i * nh + h + 1) * hd];
        for (d, s) in q[r * hd..(r + 1) * hd].iter_mut().zip(src) {
            *d = s * scale;
        }
        last[r] = step.p0 + i;
        first[r] = rule.first_key(step.p0 + i);
    }
    let mut acc = vec![0.0f32; rows * hd];
    let mut m = vec![f32::NEG_INFINITY; rows];
    let mut l = vec![0.0f32; rows];
    let mut kt = vec![0.0f32; hd * KB];
    let mut s = [0.0f32; KB];
    let keys = (step.p0 + i1).min(span.end);
    // Keys before every row's window are never read.
    let mut j0 = span.start.max(first.iter().copied().min().unwrap_or(0));
    while j0 < keys {
        let jn = KB.min(keys - j0);
        // Few rows (decoding): scores as direct dot products; many rows (prefill): keys
        // of the block transposed once, kt[d][j], and scores as runs over keys.
        let direct = rows < DIRECT_ROWS;
        if direct {
            // A long cache streams from memory once per token: this kv head's key and
            // value rows of the next block are fetched while this one is worked on.
            let ahead = if j0 == span.start {
                j0..j0 + 2 * KB
            } else {
                j0 + KB..j0 + 2 * KB
            };
            for j in ahead.take_while(|&j| j < keys) {
                prefetch_row(step.k_cache, j * kv_dim + kh * hd, hd);
                prefetch_row(step.v_cache, j * kv_dim + kh * hd, hd);
            }
        } else {
            for j in 0..jn {
                let k = &step.k_cache[(j0 + j) * kv_dim + kh * hd..][..hd];
                for (d, kv) in k.iter().enumerate() {
                    kt[d * KB + j] = *kv;
                }
            }
        }
        for r in 0..rows {
            if last[r] < j0 || first[r] >= j0 + jn {
                continue;
            }
            let visible = (last[r] + 1 - j0).min(jn);
            // Keys of this block before the row's window (none without a window).
            let hidden_before = first[r].saturating_sub(j0);
            let qr = &q[r * hd..(r + 1) * hd];
            if direct {
                let base = j0 * kv_dim + kh * hd;
                if hd == 64 {
                    F::direct_scores64(&mut s[..visible], qr, &step.k_cache[base..], kv_dim);
                } else {
                    for (j, sj) in s[..visible].iter_mut().enumerate() {
                        let k = &step.k_cache[base + j * kv_dim..][..hd];
                        *sj = kernels::dot(qr, k);
                    }
                }
            } else {
                F::scores(&mut s, qr, &kt);
            }
            if rule.softcap > 0.0 {
                kernels::softcap(&mut s[..visible], rule.softcap);
            }
            // Whole-block passes (fixed length, eight lanes): hidden keys score −∞ → 0.
            s[visible..].fill(f32::NEG_INFINITY);
            s[..hidden_before].fill(f32::NEG_INFINITY);
            let mut lanes = [f32::NEG_INFINITY; 8];
            for c in s.chunks_exact(8) {
                for (m8, v) in lanes.iter_mut().zip(c) {
                    *m8 = m8.max(*v);
                }
            }
            let bmax = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let m_new = m[r].max(bmax);
            let corr = kernels::exp(m[r] - m_new);
            for sj in s.iter_mut() {
                *sj = kernels::exp(*sj - m_new);
            }
            let mut lanes = [0.0f32; 8];
            for c in s.chunks_exact(8) {
                for (a, v) in lanes.iter_mut().zip(c) {
                    *a += v;
                }
            }
            let sum = (lanes[0] + lanes[4])
                + (lanes[1] + lanes[5])
                + (lanes[2] + lanes[6])
                + (lanes[3] + lanes[7]);
            l[r] = l[r] * corr + sum;
            m[r] = m_new;
            let ar = &mut acc[r * hd..(r + 1) * hd];
            if corr != 1.0 {
                ar.iter_mut().for_each(|a| *a *= corr);
            }
            let base = j0 * kv_dim + kh * hd;
            if hd == 64 {
                F::accumulate64(ar, &s[..visible], &step.v_cache[base..], kv_dim);
            } else {
                for (j, &p) in s[..visible].iter().enumerate() {
                    let v = &step.v_cache[base + j * kv_dim..][..hd];
                    for (a, vv) in ar.iter_mut().zip(v) {
                        *a = F::mul_add(p, *vv, *a);
                    }
                }
            }
        }
        j0 += jn;
    }
    State { acc, m, l }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::AttnGeometry;

    /// Two-pass softmax attention in f64, the reference.
    fn naive(step: &AttnStep<'_>) -> Vec<f32> {
        let g = step.geom;
        let (hd, nh) = (g.head_dim, g.n_heads);
        let kv_dim = g.n_kv_heads * hd;
        let mut out = vec![0.0f32; step.n * nh * hd];
        for i in 0..step.n {
            for h in 0..nh {
                let kh = h / (nh / g.n_kv_heads);
                let q = &step.q[(i * nh + h) * hd..][..hd];
                let len = step.p0 + i + 1;
                let sc: Vec<f64> = (0..len)
                    .map(|j| {
                        let k = &step.k_cache[j * kv_dim + kh * hd..][..hd];
                        q.iter()
                            .zip(k)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let mx = sc.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = sc.iter().map(|v| (v - mx).exp()).collect();
                let z: f64 = e.iter().sum();
                for d in 0..hd {
                    let v: f64 = (0..len)
                        .map(|j| e[j] * step.v_cache[j * kv_dim + kh * hd + d] as f64)
                        .sum();
                    out[(i * nh + h) * hd + d] = (v / z) as f32;
                }
            }
        }
        out
    }

    /// Deterministic queries `[n × heads × head_dim]` and key/value caches
    /// `[(p0 + n) × kv_dim]` for a step of `n` positions after `p0`.
    fn inputs(geom: AttnGeometry, p0: usize, n: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let kv_dim = geom.n_kv_heads * geom.head_dim;
        let val = |i: usize| ((i as f32 * 0.618).fract() - 0.5) * 4.0;
        let total = p0 + n;
        (
            (0..n * geom.n_heads * geom.head_dim).map(val).collect(),
            (0..total * kv_dim).map(|i| val(i + 7)).collect(),
            (0..total * kv_dim).map(|i| val(i + 13)).collect(),
        )
    }

    #[test]
    fn tiled_equals_two_pass_softmax() {
        let geom = AttnGeometry {
            n_heads: 6,
            n_kv_heads: 2,
            head_dim: 16,
        };
        for (p0, n) in [
            (0usize, 1usize),
            (0, 5),
            (3, 1),
            (70, 1),
            (0, 150),
            (37, 40),
            // Long caches, few rows: the key range split over tasks and merged.
            (511, 1),
            (1000, 1),
            (1100, 3),
        ] {
            let (q, k, v) = inputs(geom, p0, n);
            let step = AttnStep {
                q: &q,
                k_cache: &k,
                v_cache: &v,
                p0,
                n,
                geom,
                rule: crate::backend::AttnRule::standard(geom.head_dim),
            };
            let want = naive(&step);
            for parallel in [false, true] {
                let mut got = vec![f32::NAN; want.len()];
                attend_tiled(&step, &mut got, parallel);
                for (a, b) in got.iter().zip(&want) {
                    assert!((a - b).abs() <= 1e-5, "p0 {p0} n {n}: {a} vs {b}");
                }
            }
        }
    }

    /// 64-wide heads take the fixed-width accumulation, and prefill blocks the
    /// register-resident scores (AVX2 registers on x86): the same bits as the generic fused
    /// loop, and the reference within rounding.
    #[test]
    fn head_dim_64_accumulates_like_the_generic_loop() {
        let geom = AttnGeometry {
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 64,
        };
        for (p0, n) in [(0usize, 1usize), (0, 40), (90, 3), (600, 1)] {
            let (q, k, v) = inputs(geom, p0, n);
            let step = AttnStep {
                q: &q,
                k_cache: &k,
                v_cache: &v,
                p0,
                n,
                geom,
                rule: crate::backend::AttnRule::standard(geom.head_dim),
            };
            let want = naive(&step);
            let mut got = vec![f32::NAN; want.len()];
            attend_tiled(&step, &mut got, true);
            for (a, b) in got.iter().zip(&want) {
                assert!((a - b).abs() <= 1e-5, "p0 {p0} n {n}: {a} vs {b}");
            }
            #[cfg(target_arch = "x86_64")]
            if lql_storage::codec::cpu::has_avx2() {
                for kh in 0..geom.n_kv_heads {
                    // SAFETY: AVX2 and FMA are present (checked above).
                    let fast = unsafe { block_avx2(&step, kh, 0, n, 0..usize::MAX) };
                    let generic = block_body::<Fused>(&step, kh, 0, n, 0..usize::MAX);
                    assert_eq!(fast.acc, generic.acc, "p0 {p0} n {n} kv head {kh}");
                    assert_eq!(fast.m, generic.m, "p0 {p0} n {n} kv head {kh}");
                    assert_eq!(fast.l, generic.l, "p0 {p0} n {n} kv head {kh}");
                }
            }
        }
    }
}
