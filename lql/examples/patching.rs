//! Activation-patching bench: the IOI grid of docs/interpretability.md — SmolLM2-135M, a
//! 12-token prompt pair, 30 layers × 12 positions of the residual stream (362 forward
//! passes) — timed end to end through `PATCH`, a few times; prints each wall time, the
//! median and the time per pass. Then the same grid `BY ATTRIBUTION` (one backward pass)
//! and `BY ATTRIBUTION STEPS 8`, timed in the same process, as ratios of the exact grid's
//! median, with their Pearson correlation with it. The kernel path is the CPU's (AVX-512,
//! AVX2 or NEON; `LQL_CODEC_NO_AVX512=1` forces AVX2).
//!
//! `cargo run --release -p lql-engine --example patching [-- REPEATS]`

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
    let exact = patched(&conn.execute(GRID)?)?;
    for method in ["BY ATTRIBUTION", "BY ATTRIBUTION STEPS 8"] {
        let mut secs = Vec::new();
        let mut r = 0.0;
        for _ in 0..repeats {
            let t = Instant::now();
            let rows = conn.execute(&format!("{GRID} {method}"))?;
            secs.push(t.elapsed().as_secs_f64());
            r = pearson(&patched(&rows)?, &exact);
        }
        secs.sort_by(f64::total_cmp);
        let m = secs[secs.len() / 2];
        println!(
            "{method}: median {m:.3} s ({:.3}× the exact grid's time), Pearson r = {r:.4} with it",
            m / median
        );
    }
    Ok(())
}

fn patched(rows: &lql::Rows) -> lql::Result<Vec<f64>> {
    rows.iter().map(|r| r.get::<_, f64>("patched")).collect()
}

fn pearson(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}
