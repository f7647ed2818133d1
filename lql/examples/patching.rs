//! Activation-patching bench: the IOI grid of docs/interpretability.md — SmolLM2-135M, a
//! 12-token prompt pair, 30 layers × 12 positions of the residual stream (362 forward
//! passes) — timed end to end through `PATCH`, a few times; prints each wall time, the
//! median and the time per pass. The kernel path is the CPU's (AVX-512, AVX2 or NEON;
//! `LQL_CODEC_NO_AVX512=1` forces AVX2).
//!
//! `cargo run --release -p lql --example patching [-- REPEATS]`

use std::time::Instant;

use lql::Connection;

const GRID: &str = "PATCH \"After Mary and John went out, Mary gave a drink to\" \
    FROM \"After Mary and John went out, John gave a drink to\" \
    METRIC LOGIT_DIFF(\" Mary\", \" John\")";

fn main() -> lql::Result<()> {
    let repeats: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    let conn = Connection::open("smollm2-135m-instruct")?;
    // Warm: the model's pages and the tokenizer.
    conn.execute("INFER \"warm\" TOP 1")?;
    let mut secs = Vec::new();
    let mut cells = 0;
    for i in 0..repeats {
        let t = Instant::now();
        let rows = conn.execute(GRID)?;
        let s = t.elapsed().as_secs_f64();
        cells = rows.len();
        println!("run {}: {cells} cells in {s:.2} s", i + 1);
        secs.push(s);
    }
    secs.sort_by(f64::total_cmp);
    let median = secs[secs.len() / 2];
    println!(
        "median {median:.2} s for {cells} cells ({} passes, {:.1} ms per pass)",
        cells + 2,
        median * 1e3 / (cells + 2) as f64
    );
    Ok(())
}
