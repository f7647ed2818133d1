//! Codec throughput: decode (encoded bytes/s) and fused dot products (encoded bytes/s) for
//! every encoding, on a cache-resident matrix and on a head-sized one that streams from RAM.
//!
//! Run: `cargo bench -p lql-storage --bench codec`. Elements/s = bytes/s × block_elems /
//! block_bytes (printed at the start for each format).
//!
//! Time is the benchmark thread's on-CPU time (Linux `CLOCK_THREAD_CPUTIME_ID`), so the
//! figures stay meaningful on a machine shared with other work; set `LQL_BENCH_WALL=1` (or run
//! on another OS) for wall-clock time. With the real model present
//! (`LQL_TEST_MODEL` or `~/.cache/lql/models/smollm2-135m-instruct.gguf`), `codec_model`
//! dots every matrix of it once — the matrix-vector work of one decoded token on one thread.

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use lql_storage::codec::{self, decode_rows, dot_rows};
use lql_storage::DType;

/// On-CPU time of the calling thread in ns, or wall time where that is unavailable.
struct CpuTime {
    wall: WallTime,
    use_wall: bool,
}

impl CpuTime {
    fn new() -> Self {
        let use_wall = std::env::var_os("LQL_BENCH_WALL").is_some() || Self::on_cpu_ns().is_none();
        CpuTime {
            wall: WallTime,
            use_wall,
        }
    }
    /// `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`: the calling thread's on-CPU time, in ns.
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    fn on_cpu_ns() -> Option<u64> {
        #[repr(C)]
        struct Timespec {
            tv_sec: i64,
            tv_nsec: i64,
        }
        extern "C" {
            fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
        }
        const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
        let mut ts = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid out-pointer to a timespec of the platform's layout.
        let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }
    #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
    fn on_cpu_ns() -> Option<u64> {
        None
    }
    fn now(&self, epoch: &std::time::Instant) -> u64 {
        if self.use_wall {
            epoch.elapsed().as_nanos() as u64
        } else {
            Self::on_cpu_ns().unwrap_or(0)
        }
    }
}

thread_local! {
    static EPOCH: std::time::Instant = std::time::Instant::now();
}

impl Measurement for CpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        EPOCH.with(|e| self.now(e))
    }
    fn end(&self, i: u64) -> u64 {
        EPOCH.with(|e| self.now(e)).saturating_sub(i)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self.wall.formatter()
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// A valid encoded matrix of `rows` × `row_len` with random codes and moderate scales.
fn matrix(dt: DType, rows: usize, row_len: usize, rng: &mut Rng) -> Vec<u8> {
    let vals: Vec<f32> = (0..rows * row_len).map(|_| rng.unit()).collect();
    if codec::can_encode(dt) {
        let mut out = Vec::new();
        codec::encode_row(dt, &vals, &mut out).unwrap();
        return out;
    }
    let f16 = |v: f32| half::f16::from_f32(v).to_bits().to_le_bytes();
    let bb = dt.block_bytes();
    let n_blocks = rows * row_len / dt.block_elems();
    let mut out: Vec<u8> = (0..n_blocks * bb).map(|_| rng.next() as u8).collect();
    for blk in out.chunks_exact_mut(bb) {
        match dt {
            DType::Q5_0 => blk[0..2].copy_from_slice(&f16(0.01)),
            DType::Q5_1 | DType::Q4_K | DType::Q5_K => {
                blk[0..2].copy_from_slice(&f16(0.01));
                blk[2..4].copy_from_slice(&f16(-0.02));
            }
            DType::Q6_K => blk[208..210].copy_from_slice(&f16(0.001)),
            DType::Q2_K => blk[80..84].copy_from_slice(&[f16(0.01), f16(-0.02)].concat()),
            DType::Q3_K => blk[108..110].copy_from_slice(&f16(0.001)),
            DType::MXFP4 => blk[0] = 120,
            _ => {}
        }
    }
    out
}

fn bench_formats(c: &mut Criterion<CpuTime>) {
    eprintln!("codec kernels: {}", codec::cpu::kernel_name());
    let (rows, row_len) = (512usize, 1536usize);
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let x: Vec<f32> = (0..row_len).map(|_| rng.unit()).collect();
    let mut out = vec![0.0f32; rows];
    let mut decoded = vec![0.0f32; rows * row_len];
    for dt in DType::ALL {
        let m = matrix(dt, rows, row_len, &mut rng);
        eprintln!(
            "{dt}: {} bytes per {} elements ({:.3} elements/byte)",
            m.len(),
            rows * row_len,
            (rows * row_len) as f64 / m.len() as f64
        );
        let mut g = c.benchmark_group(format!("codec/{dt}"));
        g.throughput(Throughput::Bytes(m.len() as u64));
        g.bench_function("decode_rows", |b| {
            b.iter(|| decode_rows(dt, black_box(&m), row_len, &mut decoded).unwrap())
        });
        g.bench_function("dot_rows", |b| {
            b.iter(|| dot_rows(dt, black_box(&m), row_len, black_box(&x), &mut out))
        });
        g.finish();
    }
}

/// The default model's hot matrices at full size: the tied Q8_0 head (49152 × 576, 30 MB)
/// and a Q4_1 matrix of the same shape (17.7 MB), both larger than the caches.
fn bench_streaming(c: &mut Criterion<CpuTime>) {
    let (rows, row_len) = (49152usize, 576usize);
    let mut rng = Rng(77);
    let x: Vec<f32> = (0..row_len).map(|_| rng.unit()).collect();
    let mut out = vec![0.0f32; rows];
    for dt in [DType::Q8_0, DType::Q4_1, DType::F16] {
        let m = matrix(dt, rows, row_len, &mut rng);
        let mut g = c.benchmark_group(format!("codec_stream/{dt}"));
        g.throughput(Throughput::Bytes(m.len() as u64));
        g.bench_function("dot_rows_49152x576", |b| {
            b.iter(|| dot_rows(dt, black_box(&m), row_len, black_box(&x), &mut out))
        });
        g.finish();
    }
}

fn model_path() -> Option<std::path::PathBuf> {
    let p = match std::env::var_os("LQL_TEST_MODEL") {
        Some(p) => std::path::PathBuf::from(p),
        None => std::path::PathBuf::from(std::env::var_os("HOME")?)
            .join(".cache/lql/models/smollm2-135m-instruct.gguf"),
    };
    p.exists().then_some(p)
}

/// Every matrix of the real model dotted with a vector once (1 thread): the weight-streaming
/// cost of one decoded token, in encoded bytes/s.
fn bench_model(c: &mut Criterion<CpuTime>) {
    use lql_storage::format::gguf::GgufFile;
    let Some(path) = model_path() else {
        eprintln!("note: real model not found; skipping codec_model");
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let views: Vec<_> = file
        .tensors()
        .iter()
        .map(|i| file.view(i))
        .filter(|v| v.shape.len() == 2)
        .collect();
    let total: usize = views.iter().map(|v| v.bytes.len()).sum();
    let max_rows = views.iter().map(|v| v.rows()).max().unwrap_or(0);
    let max_len = views.iter().map(|v| v.row_len()).max().unwrap_or(0);
    let mut rng = Rng(5);
    let x: Vec<f32> = (0..max_len).map(|_| rng.unit()).collect();
    let mut out = vec![0.0f32; max_rows];
    let mut g = c.benchmark_group("codec_model");
    g.throughput(Throughput::Bytes(total as u64));
    g.bench_function("all_matrices_dot_rows", |b| {
        b.iter(|| {
            for v in &views {
                let n = v.row_len();
                dot_rows(v.dtype, v.bytes, n, &x[..n], &mut out[..v.rows()]);
            }
            black_box(&out);
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(CpuTime::new())
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = bench_formats, bench_streaming, bench_model
}
criterion_main!(benches);
