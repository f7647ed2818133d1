//! The added features of edits (`overlay::add_features`), the work INFER adds per edited
//! layer: SmolLM2's hidden size (576), as many features as 300 and 3,000 INSERTs add to
//! their first layer (five per edge), for a decode step (1 position) and a short prefill
//! (8 positions). Synthetic weights; run with `--threads` set by `RAYON_NUM_THREADS`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use lql_exec::overlay::add_features;
use lql_storage::overlay::LayerOverlay;
use lql_storage::surface::Activation;

const HIDDEN: usize = 576;

/// Deterministic values in [-0.5, 0.5).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

fn overlay(k: usize) -> LayerOverlay {
    LayerOverlay {
        hidden: HIDDEN,
        ffn: 1536,
        gate: values(k * HIDDEN, 1),
        gate_bias: values(k, 2),
        up: values(k * HIDDEN, 3),
        up_bias: values(k, 4),
        down: values(k * HIDDEN, 5),
        gate_scale: None,
        down_scale: None,
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("add_features");
    for k in [1500, 15000] {
        let ov = overlay(k);
        for n in [1, 8] {
            let x = values(n * HIDDEN, 6);
            let mut delta = vec![0.0f32; n * HIDDEN];
            g.bench_with_input(
                BenchmarkId::new(format!("k{k}"), format!("n{n}")),
                &n,
                |b, _| b.iter(|| add_features(Some(&ov), Activation::Silu, &x, &mut delta)),
            );
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
