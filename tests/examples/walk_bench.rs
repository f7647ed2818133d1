//! Timed loop: WALK EMBEDDING over all layers, TOP 10, warm, gate rows read in place, and
//! the cost of feature labels (cold and cached). Peer: `tests/bench/walk_numpy.py`.
//!
//! `cargo run -p lql-tests --release --example walk_bench [-- MODEL.gguf [ITERS]]`

use std::time::Instant;

use lql_exec::browse::labels::{compute_labels, LabelCache};
use lql_exec::browse::{walk, WalkMode, WalkOptions};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(lql_tests::default_model_path);
    let iters: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    let model = lql_storage::import::open(&path).expect("open model");
    let s = &model.surface;
    let ids = [504u32, 3575, 282, 4649, 314]; // "The capital of France is"
    let opts = WalkOptions {
        top: 10,
        layers: None,
        mode: Some(WalkMode::Embedding),
    };
    for _ in 0..10 {
        walk(&model, None, &ids, &opts).unwrap();
    }
    let mut times = Vec::with_capacity(iters);
    let mut bytes = 0;
    for _ in 0..iters {
        let t = Instant::now();
        let r = walk(&model, None, &ids, &opts).unwrap();
        times.push(t.elapsed().as_secs_f64() * 1e3);
        bytes = r.layers.iter().map(|l| l.bytes_read).sum::<usize>();
    }
    let r = walk(&model, None, &ids, &opts).unwrap();
    println!(
        "walk_embedding  layers={} top=10 encoding={} kernels={} cores={}",
        s.n_layers,
        r.layers[0].encoding,
        lql_storage::codec::cpu::kernel_name(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "walk_embedding  median {:.3} ms over {iters} runs; gate bytes read per walk {bytes} ({:.1} MB); L0 top: {:?}",
        median(times),
        bytes as f64 / 1e6,
        r.layers[0].hits.iter().take(3).map(|h| (h.feature, h.gate)).collect::<Vec<_>>()
    );

    // Labels: one feature, a walk's worth (10 × layers) cold, the same again cached, and one
    // whole layer.
    let keys: Vec<(usize, usize)> = r.hits().map(|h| (h.layer, h.feature)).collect();
    let t = Instant::now();
    compute_labels(&model, 5, &[414]).unwrap();
    println!(
        "labels  1 feature: {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let cache = LabelCache::new();
    let t = Instant::now();
    cache.labels(&model, &keys).unwrap();
    let cold = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    cache.labels(&model, &keys).unwrap();
    let warm = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "labels  {} features (one walk): cold {cold:.1} ms, cached {warm:.3} ms",
        keys.len()
    );
    let all: Vec<usize> = (0..s.ffn).collect();
    let t = Instant::now();
    compute_labels(&model, 5, &all).unwrap();
    let layer_ms = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "labels  whole layer ({} features): {layer_ms:.0} ms → all {} features ≈ {:.0} s",
        s.ffn,
        s.ffn * s.n_layers,
        layer_ms * s.n_layers as f64 / 1e3
    );
}
