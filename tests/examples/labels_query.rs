//! Times `SELECT layer, feature FROM features WHERE top_token = ' Paris'` on a container that
//! stores its labels (first use, which reads and seeds them, then warm), in wall and on-CPU
//! seconds. Extracts the container `WITH LABELS` first when it does not exist.
//!
//! `cargo run -p lql-tests --release --example labels_query -- CONTAINER [MODEL.gguf]`

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
    let mut args = std::env::args().skip(1);
    let out = std::path::PathBuf::from(args.next().expect("CONTAINER path"));
    let model = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(lql_tests::default_model_path);
    let c = lql::Connection::open_in_memory().unwrap();
    if !out.exists() {
        let (t, cpu) = (Instant::now(), cpu_seconds());
        c.execute(&format!(
            "EXTRACT MODEL {:?} INTO {:?} WITH LABELS",
            model.display().to_string(),
            out.display().to_string()
        ))
        .unwrap();
        println!(
            "EXTRACT … WITH LABELS: {:.2} s wall, {:.2} s CPU",
            t.elapsed().as_secs_f64(),
            cpu_seconds() - cpu
        );
    }
    c.execute(&format!("USE {:?}", out.display().to_string()))
        .unwrap();
    let paris = "SELECT layer, feature FROM features WHERE top_token = ' Paris'";
    for run in ["first use", "warm", "warm", "warm"] {
        let (t, cpu) = (Instant::now(), cpu_seconds());
        let r = c.execute(paris).unwrap();
        println!(
            "{paris}: {run}: {} rows, {:.3} s wall, {:.3} s CPU",
            r.rows.len(),
            t.elapsed().as_secs_f64(),
            cpu_seconds() - cpu
        );
    }
}
