//! Codec throughput: decode (encoded bytes/s) and fused dot products (encoded bytes/s) for
//! every encoding, on a cache-resident matrix and on a head-sized one that streams from RAM.
//!
//! Run: `cargo bench -p lql-storage --bench codec`. Elements/s = bytes/s × block_elems /
//! block_bytes (printed at the start for each format).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use lql_storage::codec::{self, decode_rows, dot_rows};
use lql_storage::DType;

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
            DType::Q5_1 | DType::Q4_K => {
                blk[0..2].copy_from_slice(&f16(0.01));
                blk[2..4].copy_from_slice(&f16(-0.02));
            }
            DType::Q6_K => blk[208..210].copy_from_slice(&f16(0.001)),
            DType::MXFP4 => blk[0] = 120,
            _ => {}
        }
    }
    out
}

fn bench_formats(c: &mut Criterion) {
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
fn bench_streaming(c: &mut Criterion) {
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

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = bench_formats, bench_streaming
}
criterion_main!(benches);
