//! Concurrency bench: one `Database`, 4 threads with a `Connection` each running 50 mixed
//! statements (INFER, WALK, SELECT, TRACE), against the same 200 statements on one
//! connection. Prints both wall times and their ratio, and the cores each phase kept busy
//! (on-CPU seconds of the process over wall seconds): with C cores, a phase that already keeps
//! B cores busy on one connection cannot go below a ratio of B / C. Checks the results are
//! identical.
//!
//! `cargo run --release -p lql-engine --example concurrency [-- THREADS PER_THREAD]`

use std::time::Instant;

use lql::Database;

const MIX: [&str; 4] = [
    "INFER 'The capital of France is' TOP 3",
    "WALK 'The capital of France is' TOP 2 LAYERS 27-29",
    "SELECT layer, feature, top_token FROM features WHERE layer = 3 AND feature < 4",
    "TRACE 'The capital of France is' FOR ' Paris' LAYERS 28-29",
];

fn main() -> lql::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let threads = args.first().copied().unwrap_or(4);
    let per = args.get(1).copied().unwrap_or(50);
    let db = Database::open("smollm2-135m-instruct")?;
    let warm = db.connect()?;
    let want: Vec<lql::Rows> = MIX
        .iter()
        .map(|s| warm.execute(s))
        .collect::<lql::Result<_>>()?;

    let (t0, c0) = (Instant::now(), cpu_seconds());
    let one = db.connect()?;
    for i in 0..threads * per {
        let k = i % MIX.len();
        assert_eq!(one.execute(MIX[k])?, want[k]);
    }
    let serial = t0.elapsed().as_secs_f64();
    let serial_cores = (cpu_seconds() - c0) / serial;

    let (t0, c0) = (Instant::now(), cpu_seconds());
    std::thread::scope(|s| -> lql::Result<()> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let db = db.clone();
                let want = &want;
                s.spawn(move || -> lql::Result<()> {
                    let conn = db.connect()?;
                    for i in 0..per {
                        let k = (i + t) % MIX.len();
                        assert_eq!(conn.execute(MIX[k])?, want[k]);
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("worker panicked")?;
        }
        Ok(())
    })?;
    let parallel = t0.elapsed().as_secs_f64();
    let parallel_cores = (cpu_seconds() - c0) / parallel;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "{} statements: one connection {serial:.2} s ({serial_cores:.2} cores busy), {threads} connections {parallel:.2} s ({parallel_cores:.2} cores busy), ratio {:.2}; floor on {cores} cores: {:.2}",
        threads * per,
        parallel / serial,
        serial_cores / cores.max(1) as f64
    );
    Ok(())
}

/// On-CPU seconds of this process so far (user + system, all threads), from
/// `/proc/self/stat` (clock ticks of 1/100 s); 0 where that file is absent.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start at state (field 3).
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
