//! Times every feature label of a model computed by the batched path (`compute_all`): wall
//! and on-CPU seconds, the kernel path, the first label.
//!
//! `cargo run -p lql-tests --release --example labels_all [-- MODEL.gguf]`

use std::time::Instant;

/// On-CPU seconds of this process (user + system) from /proc.
fn cpu_seconds() -> f64 {
    let t = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = t
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let tick = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

fn main() {
    let path = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(lql_tests::default_model_path);
    let model = lql_storage::import::open(&path).expect("open model");
    let (t, c) = (Instant::now(), cpu_seconds());
    let (ffn, labels) = lql_exec::browse::labels::compute_all(&model, &|| false).unwrap();
    println!(
        "labels {} features ({} layers × {ffn}): {:.2} s wall, {:.2} s CPU, threads={} kernels={} gemm=faer f32; first={:?}",
        labels.len(),
        model.surface.n_layers,
        t.elapsed().as_secs_f64(),
        cpu_seconds() - c,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        lql_storage::codec::cpu::kernel_name(),
        labels[0].top.first()
    );
}
