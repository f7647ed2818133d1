//! Concurrency bench: one `Database`, 4 threads with a `Connection` each running 50 mixed
//! statements (INFER, WALK, SELECT, TRACE), against the same 200 statements on one
//! connection. Prints both wall times and their ratio; checks the results are identical.
//!
//! `cargo run --release -p lql --example concurrency [-- THREADS PER_THREAD]`

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

    let t0 = Instant::now();
    let one = db.connect()?;
    for i in 0..threads * per {
        let k = i % MIX.len();
        assert_eq!(one.execute(MIX[k])?, want[k]);
    }
    let serial = t0.elapsed().as_secs_f64();

    let t0 = Instant::now();
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
    println!(
        "{} statements: one connection {serial:.2} s, {threads} connections {parallel:.2} s, ratio {:.2} (cores: {})",
        threads * per,
        parallel / serial,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    Ok(())
}
