//! The CPU backend: fused dot products on encoded rows for single tokens, decoded tiles
//! times the activation block (faer GEMM, written in place) for batches, rayon across rows
//! and heads; attention tiled with an online softmax (`attention`) unless its weights are
//! wanted.

use std::cell::RefCell;

use faer::linalg::matmul::matmul as gemm;
use faer::{Accum, MatMut, MatRef, Par};
use lql_storage::model::TensorView;
use rayon::prelude::*;

use super::{encoded, AttnStep, Backend};
use crate::error::{ExecError, Result};
use crate::kernels;

/// Below this many inputs a batch is run as repeated matrix-vector products.
const MIN_GEMM_BATCH: usize = 3;
/// Most rows decoded per tile in the batched path: larger tiles amortise the GEMM's packing
/// of the activation block over more rows (docs/performance.md: 64 → 192 rows, Q4_0
/// prefill +14 % on the AVX2 path, +2 % on AVX-512; 256 and 384 no better).
const TILE_ROWS: usize = 192;

thread_local! {
    static TILE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The CPU backend, with its own thread pool.
pub struct CpuBackend {
    pool: rayon::ThreadPool,
    threads: usize,
    /// Batches of at least this many inputs use decoded tiles and GEMM.
    gemm_min_batch: usize,
}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBackend")
            .field("threads", &self.threads)
            .finish()
    }
}

fn codec_err(w: &TensorView<'_>, m: String) -> ExecError {
    ExecError::Internal(format!("{} tensor of shape {:?}: {m}", w.dtype, w.shape))
}

impl CpuBackend {
    /// A backend on `threads` worker threads (0: one per available core).
    pub fn new(threads: usize) -> Result<CpuBackend> {
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            threads
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("lql-cpu-{i}"))
            .build()
            .map_err(|e| ExecError::Internal(format!("cannot start the thread pool: {e}")))?;
        Ok(CpuBackend {
            pool,
            threads,
            gemm_min_batch: MIN_GEMM_BATCH,
        })
    }

    /// Run batches as repeated matrix-vector products with the fused dot kernels instead
    /// of decoded tiles and GEMM (slower; every position then goes through exactly the
    /// arithmetic of single-token decoding).
    pub fn without_batched_gemm(mut self) -> CpuBackend {
        self.gemm_min_batch = usize::MAX;
        self
    }

    /// Rows per parallel task: a few tasks per thread, each a decent amount of work.
    fn rows_per_task(&self, rows: usize) -> usize {
        let tasks = self.threads * 4;
        rows.div_ceil(tasks).next_multiple_of(8).max(16)
    }

    /// Whole rows of `row_len` floats per task for element-wise work over `len` floats
    /// (a few tasks per thread), or `None` when it is too small to split.
    fn rows_per_chunk(&self, len: usize, row_len: usize) -> Option<usize> {
        if self.threads < 2 || len < MIN_PARALLEL_ELEMENTS || row_len == 0 {
            return None;
        }
        let rows = len / row_len;
        (rows >= 2).then(|| rows.div_ceil(self.threads * 2))
    }

    fn check(w: &TensorView<'_>, x_len: usize, n: usize, out_len: usize) -> Result<()> {
        if x_len != n * w.row_len() || out_len != n * w.rows() {
            return Err(ExecError::Internal(format!(
                "matmul of {:?} with {n} inputs: input {x_len} / output {out_len} floats",
                w.shape
            )));
        }
        Ok(())
    }

    /// Rows per decoded tile: a few tiles per thread over all the matrices of one
    /// dispatch, between 16 and [`TILE_ROWS`], a whole number of the GEMM microkernel's
    /// rows ([`gemm_block_rows`]) so no tile ends in a part-filled register block.
    fn tile_rows(&self, total_rows: usize) -> usize {
        let block = gemm_block_rows();
        let rows = (total_rows / (self.threads * 4)).clamp(16, TILE_ROWS);
        (rows / block * block).max(block)
    }

    /// Batched products on decoded tiles, all matrices in one parallel dispatch: each task
    /// decodes `tr` rows of one matrix once and multiplies the whole activation block by
    /// them (faer GEMM), writing its columns of the output in place
    /// (`out[t, r0..r0 + nr] = x[t] · tile`), so no transposed copy is made.
    fn matmul_tiles(
        &self,
        ws: &[TensorView<'_>],
        x: &[f32],
        n: usize,
        outs: &mut [&mut [f32]],
    ) -> Result<()> {
        let total: usize = ws.iter().map(|w| w.rows()).sum();
        let tr = self.tile_rows(total);
        let targets: Vec<OutPtr> = outs
            .iter_mut()
            .map(|o| OutPtr(o.as_mut_ptr(), o.len()))
            .collect();
        let mut tasks: Vec<(usize, usize, usize)> = Vec::new();
        for (wi, w) in ws.iter().enumerate() {
            for r0 in (0..w.rows()).step_by(tr) {
                tasks.push((wi, r0, tr.min(w.rows() - r0)));
            }
        }
        self.pool.install(|| {
            tasks.into_par_iter().try_for_each(|(wi, r0, nr)| {
                let w = &ws[wi];
                let (rl, rb, rows) = (w.row_len(), w.row_bytes(), w.rows());
                let target = &targets[wi];
                assert!(
                    r0 + nr <= rows && target.1 == n * rows,
                    "tile within its output"
                );
                TILE.with(|tile| {
                    let mut tile = tile.borrow_mut();
                    tile.resize(nr * rl, 0.0);
                    encoded::decode_rows(w.dtype, &w.bytes[r0 * rb..(r0 + nr) * rb], rl, &mut tile)
                        .map_err(|m| codec_err(w, m))?;
                    let a = MatRef::from_row_major_slice(x, n, rl);
                    let b = MatRef::from_row_major_slice(&tile[..], nr, rl).transpose();
                    // SAFETY: `target` is the output of matrix `wi`, `n * rows` floats (checked
                    // above); this view covers elements t * rows + r0 + c for t < n, c < nr,
                    // all within it, and the tasks of one matrix cover disjoint column ranges
                    // r0 .. r0 + nr, so no two tasks write the same element and nothing reads
                    // the outputs until the dispatch is over.
                    let c = unsafe {
                        MatMut::from_raw_parts_mut(target.0.add(r0), n, nr, rows as isize, 1)
                    };
                    tile_product(c, a, b);
                    Ok::<(), ExecError>(())
                })
            })
        })
    }
}

/// Output rows the tile GEMM's microkernel fills per call (faer's x86 GEMM computes the
/// transposed product, so a tile's rows are its `m`): 6 × 16 lanes with AVX-512, 3 × 8
/// with AVX2; elsewhere any multiple of 8.
fn gemm_block_rows() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use lql_storage::codec::cpu;
        if cpu::has_avx512() {
            return 96;
        }
        if cpu::has_avx2() {
            return 24;
        }
    }
    8
}

/// `c = a · b` (f32, one thread) on the instruction set of LQL's kernel path: faer's x86
/// GEMM with AVX-512 or AVX2 as `lql_storage::codec::cpu` chose (so `LQL_CODEC_NO_AVX512=1`
/// runs the prefill on AVX2 too, as on a machine without AVX-512), faer's portable GEMM
/// elsewhere.
fn tile_product(c: MatMut<'_, f32>, a: MatRef<'_, f32>, b: MatRef<'_, f32>) {
    #[cfg(target_arch = "x86_64")]
    {
        use lql_storage::codec::cpu;
        use private_gemm_x86 as x86;
        let set = if cpu::has_avx512() {
            Some(x86::InstrSet::Avx512)
        } else if cpu::has_avx2() {
            Some(x86::InstrSet::Avx256)
        } else {
            None
        };
        if let Some(set) = set {
            let (m, n, k) = (c.nrows(), c.ncols(), a.ncols());
            let alpha = 1.0f32;
            // SAFETY: the instruction set is present (checked at run time by `cpu`); the
            // pointers and strides are those of `c` (m × n, written), `a` (m × k) and `b`
            // (k × n), valid views of f32 elements for the whole call.
            unsafe {
                x86::gemm(
                    x86::DType::F32,
                    x86::IType::U64,
                    set,
                    m,
                    n,
                    k,
                    c.as_ptr_mut() as *mut (),
                    c.row_stride(),
                    c.col_stride(),
                    std::ptr::null(),
                    std::ptr::null(),
                    x86::DstKind::Full,
                    x86::Accum::Replace,
                    a.as_ptr() as *const (),
                    a.row_stride(),
                    a.col_stride(),
                    false,
                    std::ptr::null(),
                    0,
                    b.as_ptr() as *const (),
                    b.row_stride(),
                    b.col_stride(),
                    false,
                    &raw const alpha as *const (),
                    1,
                )
            };
            return;
        }
    }
    gemm(c, Accum::Replace, a, b, 1.0f32, Par::Seq);
}

/// An output buffer shared by the tasks of one dispatch (each writes its own columns).
struct OutPtr(*mut f32, usize);
// SAFETY: the pointer is only written through disjoint views (see `matmul_tiles`) while
// the `&mut` it came from is held by the dispatching call.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

/// Element-wise work below this many floats runs on the calling thread (one decoded
/// token's vectors: the hand-off would cost more than it saves).
const MIN_PARALLEL_ELEMENTS: usize = 1 << 14;

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    // Row-parallel versions of the element-wise steps: each row (each run of 64 floats for
    // the GLU) goes through exactly the serial kernel's arithmetic, so results are
    // bit-identical to the trait's serial defaults.

    fn rmsnorm(&self, x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
        let d = weight.len();
        match self.rows_per_chunk(x.len(), d) {
            Some(rows) => self.pool.install(|| {
                out.par_chunks_mut(rows * d)
                    .zip(x.par_chunks(rows * d))
                    .for_each(|(o, x)| kernels::rmsnorm_rows(x, weight, eps, o))
            }),
            None => kernels::rmsnorm_rows(x, weight, eps, out),
        }
    }

    fn rope(
        &self,
        x: &mut [f32],
        n_heads: usize,
        head_dim: usize,
        table: &kernels::RopeTable,
        pairing: lql_storage::surface::RopePairing,
    ) {
        let w = n_heads * head_dim;
        match self.rows_per_chunk(x.len(), w) {
            Some(rows) => self.pool.install(|| {
                x.par_chunks_mut(rows * w).enumerate().for_each(|(i, x)| {
                    kernels::rope_from(x, i * rows, n_heads, head_dim, table, pairing)
                })
            }),
            None => kernels::rope(x, n_heads, head_dim, table, pairing),
        }
    }

    fn glu(&self, act: lql_storage::surface::Activation, gate: &mut [f32], up: &[f32]) {
        // Runs of a multiple of 64 floats: every float but the serial kernel's final
        // remainder takes the same vector lanes as in one serial call.
        match self.rows_per_chunk(gate.len(), 64) {
            Some(runs) => self.pool.install(|| {
                gate.par_chunks_mut(runs * 64)
                    .zip(up.par_chunks(runs * 64))
                    .for_each(|(g, u)| kernels::glu(act, g, u))
            }),
            None => kernels::glu(act, gate, up),
        }
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn scope(&self, f: &mut (dyn FnMut() + Send)) {
        self.pool.install(f)
    }

    fn matvec(&self, w: &TensorView<'_>, x: &[f32], out: &mut [f32]) -> Result<()> {
        Self::check(w, x.len(), 1, out.len())?;
        let (rl, rb) = (w.row_len(), w.row_bytes());
        let chunk = self.rows_per_task(w.rows());
        self.pool.install(|| {
            out.par_chunks_mut(chunk)
                .enumerate()
                .try_for_each(|(ci, o)| {
                    let r0 = ci * chunk;
                    encoded::dot_rows(w.dtype, &w.bytes[r0 * rb..(r0 + o.len()) * rb], rl, x, o)
                        .map_err(|m| codec_err(w, m))
                })
        })
    }

    fn matmul(&self, w: &TensorView<'_>, x: &[f32], n: usize, out: &mut [f32]) -> Result<()> {
        Self::check(w, x.len(), n, out.len())?;
        if n >= self.gemm_min_batch {
            return self.matmul_tiles(std::slice::from_ref(w), x, n, &mut [out]);
        }
        let (rl, rows) = (w.row_len(), w.rows());
        for t in 0..n {
            self.matvec(
                w,
                &x[t * rl..(t + 1) * rl],
                &mut out[t * rows..(t + 1) * rows],
            )?;
        }
        Ok(())
    }

    fn matmul_group(
        &self,
        ws: &[TensorView<'_>],
        x: &[f32],
        n: usize,
        outs: &mut [&mut [f32]],
    ) -> Result<()> {
        if ws.len() != outs.len() {
            return Err(ExecError::Internal(format!(
                "{} matrices, {} outputs",
                ws.len(),
                outs.len()
            )));
        }
        for (w, out) in ws.iter().zip(outs.iter()) {
            Self::check(w, x.len(), n, out.len())?;
        }
        if n >= self.gemm_min_batch {
            return self.matmul_tiles(ws, x, n, outs);
        }
        if n != 1 {
            for (w, out) in ws.iter().zip(outs.iter_mut()) {
                self.matmul(w, x, n, out)?;
            }
            return Ok(());
        }
        // One parallel dispatch for all matrices: tasks are (matrix, row range, output).
        let mut tasks: Vec<(&TensorView<'_>, usize, &mut [f32])> = Vec::new();
        for (w, out) in ws.iter().zip(outs.iter_mut()) {
            let chunk = self.rows_per_task(w.rows());
            for (ci, o) in out.chunks_mut(chunk).enumerate() {
                tasks.push((w, ci * chunk, o));
            }
        }
        self.pool.install(|| {
            tasks.into_par_iter().try_for_each(|(w, r0, o)| {
                let (rl, rb) = (w.row_len(), w.row_bytes());
                encoded::dot_rows(w.dtype, &w.bytes[r0 * rb..(r0 + o.len()) * rb], rl, x, o)
                    .map_err(|m| codec_err(w, m))
            })
        })
    }

    fn attention(&self, step: &AttnStep<'_>, out: &mut [f32], weights: Option<&mut [f32]>) {
        let g = step.geom;
        let hd = g.head_dim;
        let total = step.p0 + step.n;
        let work = step.n * g.n_heads * total * hd;
        let parallel = work >= 1 << 16;
        // The output always comes from the tiled kernel, so observing the weights never
        // changes a result; the weights come from the per-query path (task `idx` = query
        // position i, head h, writing weights row `idx` and a scratch output chunk).
        if let Some(wts) = weights {
            let mut scratch = vec![0.0f32; out.len()];
            if parallel {
                self.pool.install(|| {
                    scratch
                        .par_chunks_mut(hd)
                        .zip(wts.par_chunks_mut(total))
                        .enumerate()
                        .for_each_init(Vec::new, |s, (idx, (o, w))| {
                            attend(step, idx, o, Some(w), s)
                        })
                });
            } else {
                let mut s = Vec::with_capacity(total);
                for (idx, (o, w)) in scratch
                    .chunks_mut(hd)
                    .zip(wts.chunks_mut(total))
                    .enumerate()
                {
                    attend(step, idx, o, Some(w), &mut s);
                }
            }
        }
        if parallel {
            self.pool
                .install(|| super::attention::attend_tiled(step, out, true));
        } else {
            super::attention::attend_tiled(step, out, false);
        }
    }
}

/// One query head at one position when its softmax weights are wanted too: scores against
/// every visible key, softmax, weighted sum of values. Compiled twice: with AVX2 + FMA where the CPU has them, and portable.
fn attend(
    step: &AttnStep<'_>,
    idx: usize,
    o: &mut [f32],
    w: Option<&mut [f32]>,
    scores: &mut Vec<f32>,
) {
    #[cfg(target_arch = "x86_64")]
    if lql_storage::codec::cpu::has_avx2() {
        // SAFETY: AVX2 and FMA are present (checked at run time).
        unsafe { attend_avx2(step, idx, o, w, scores) };
        return;
    }
    attend_body(step, idx, o, w, scores)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_avx2(
    step: &AttnStep<'_>,
    idx: usize,
    o: &mut [f32],
    w: Option<&mut [f32]>,
    scores: &mut Vec<f32>,
) {
    attend_body(step, idx, o, w, scores)
}

#[inline(always)]
fn attend_body(
    step: &AttnStep<'_>,
    idx: usize,
    o: &mut [f32],
    w: Option<&mut [f32]>,
    scores: &mut Vec<f32>,
) {
    let g = step.geom;
    let hd = g.head_dim;
    let (i, h) = (idx / g.n_heads, idx % g.n_heads);
    let kvh = h / (g.n_heads / g.n_kv_heads);
    let kv_dim = g.n_kv_heads * hd;
    let rule = step.rule;
    let q = &step.q[idx * hd..(idx + 1) * hd];
    let len = step.p0 + i + 1;
    let first = rule.first_key(step.p0 + i);
    scores.clear();
    for (j, k) in step.k_cache.chunks_exact(kv_dim).take(len).enumerate() {
        let mut s = kernels::dot(q, &k[kvh * hd..(kvh + 1) * hd]) * rule.scale;
        if rule.softcap > 0.0 {
            s = rule.softcap * (s / rule.softcap).tanh();
        }
        scores.push(if j < first { f32::NEG_INFINITY } else { s });
    }
    kernels::softmax(scores);
    o.fill(0.0);
    for (v, &p) in step.v_cache.chunks_exact(kv_dim).zip(scores.iter()) {
        kernels::axpy(p, &v[kvh * hd..(kvh + 1) * hd], o);
    }
    if let Some(w) = w {
        w[..len].copy_from_slice(scores);
        w[len..].fill(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::RopeTable;
    use lql_storage::surface::{Activation, RopePairing};

    /// Deterministic floats in about [-4, 4).
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 8000) as f32 / 1000.0 - 4.0
            })
            .collect()
    }

    /// The row-parallel element-wise steps give the serial kernels' bits, including a last
    /// chunk shorter than the others and a GLU length that is not a multiple of 64.
    #[test]
    fn parallel_elementwise_steps_equal_the_serial_kernels() {
        let be = CpuBackend::new(3).expect("pool");
        let (n, d) = (37, 576);
        let x = values(n * d, 1);
        let w = values(d, 2);
        let mut par = vec![0.0f32; n * d];
        let mut ser = vec![0.0f32; n * d];
        be.rmsnorm(&x, &w, 1e-5, &mut par);
        kernels::rmsnorm_rows(&x, &w, 1e-5, &mut ser);
        assert_eq!(par, ser);

        let (heads, hd) = (9, 64);
        let table = RopeTable::new(5, n, hd, 10000.0);
        for pairing in [RopePairing::Adjacent, RopePairing::HalfSplit] {
            let mut par = values(n * heads * hd, 3);
            let mut ser = par.clone();
            be.rope(&mut par, heads, hd, &table, pairing);
            kernels::rope(&mut ser, heads, hd, &table, pairing);
            assert_eq!(par, ser);
        }

        for len in [n * 1536, n * 1536 + 13] {
            let up = values(len, 4);
            for act in [Activation::Silu, Activation::Gelu] {
                let mut par = values(len, 5);
                let mut ser = par.clone();
                be.glu(act, &mut par, &up);
                kernels::glu(act, &mut ser, &up);
                assert_eq!(par, ser);
            }
        }
    }
}
