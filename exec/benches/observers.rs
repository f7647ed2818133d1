//! Observer overhead: INFER with nothing attached vs the same pass with observers attached.
//!
//! Runs on the real default model (env `LQL_TEST_MODEL`, else
//! `$LQL_HOME/models` or `~/.cache/lql/models`, `smollm2-135m-instruct.gguf`; skipped when
//! absent), found as the tests find it (`tests/common/real.rs`).
//! Variants, all on the 5-token prompt "The capital of France is", from an empty cache:
//!
//! - `exec_infer`: `Executor::infer` (what the engine's INFER calls);
//! - `extend_none`: `Session::extend(ids, Last, None)` — the observed entry point with no
//!   observer attached (must equal `exec_infer` within noise);
//! - `observe_noop`: an observer that does nothing (the hook's own cost: one copy of the
//!   gate pre-activations per layer);
//! - `trace_last`: `trace::run_trace` keeping the last position (TRACE's default);
//! - `trace_all_attn`: every position, attention weights, gate and activations (SAVE).
//!
//! Before criterion's runs, an interleaved A/B loop (variants alternated round by round, so
//! a drifting machine load hits them alike) prints medians and quartiles.

use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, Criterion};
use lql_exec::trace::{self, CaptureOptions, Positions};
use lql_exec::{Executor, LogitsWanted, Observer};
use lql_storage::model::OperandSource;

#[allow(dead_code)]
#[path = "../tests/common/real.rs"]
mod real;

use real::model_path;

const IDS: [u32; 5] = [504, 3575, 282, 4649, 314];

fn executor() -> Option<Executor> {
    let path = model_path()?;
    let model = lql_storage::import::open(&path).ok()?;
    let src: Arc<dyn OperandSource> = Arc::new(model);
    Executor::new(src, 0).ok()
}

struct Noop;
impl Observer for Noop {}

type Variant = (&'static str, Box<dyn Fn(&Executor)>);

fn variants() -> Vec<Variant> {
    vec![
        (
            "exec_infer",
            Box::new(|e: &Executor| {
                std::hint::black_box(e.infer(&IDS, 5).unwrap());
            }),
        ),
        (
            "extend_none",
            Box::new(|e: &Executor| {
                let l = e.session().extend(&IDS, LogitsWanted::Last, None).unwrap();
                std::hint::black_box(l[0].top(5));
            }),
        ),
        (
            "observe_noop",
            Box::new(|e: &Executor| {
                let l = e.observe(&IDS, LogitsWanted::Last, &mut Noop).unwrap();
                std::hint::black_box(l[0].top(5));
            }),
        ),
        (
            "trace_last",
            Box::new(|e: &Executor| {
                std::hint::black_box(trace::run_trace(e, &IDS, CaptureOptions::default()).unwrap());
            }),
        ),
        (
            "trace_all_attn",
            Box::new(|e: &Executor| {
                let o = CaptureOptions {
                    positions: Positions::All,
                    attention: true,
                    ffn_activity: true,
                };
                std::hint::black_box(trace::run_trace(e, &IDS, o).unwrap());
            }),
        ),
    ]
}

/// CPU time of the whole process (every thread), in ms.
fn process_cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// Alternates the variants for `rounds` rounds; prints wall and process-CPU medians and
/// quartiles of each (CPU time is less disturbed by other processes on a shared machine).
fn interleaved(exec: &Executor, rounds: usize) {
    let vs = variants();
    let mut wall: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); vs.len()];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); vs.len()];
    for (_, f) in &vs {
        for _ in 0..3 {
            f(exec);
        }
    }
    for r in 0..rounds {
        for k in 0..vs.len() {
            // Rotate the order each round so no variant always runs first.
            let i = (k + r) % vs.len();
            let (t0, c0) = (Instant::now(), process_cpu_ms());
            (vs[i].1)(exec);
            cpu[i].push(process_cpu_ms() - c0);
            wall[i].push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    for (what, times) in [("wall", &mut wall), ("process CPU", &mut cpu)] {
        let base = median(&mut times[0].clone());
        println!(
            "interleaved A/B, {rounds} rounds, 5-token prompt, {what} ms: p25 / median / p75, median vs exec_infer"
        );
        for ((name, _), t) in vs.iter().zip(times.iter_mut()) {
            t.sort_by(f64::total_cmp);
            let q = |p: f64| t[((t.len() - 1) as f64 * p).round() as usize];
            println!(
                "  {name:<15} {:7.3} / {:7.3} / {:7.3}   {:+.2}%",
                q(0.25),
                q(0.5),
                q(0.75),
                (q(0.5) / base - 1.0) * 100.0
            );
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench(c: &mut Criterion) {
    let Some(exec) = executor() else {
        eprintln!("observers bench: no model (set LQL_TEST_MODEL); skipped");
        return;
    };
    let rounds = std::env::var("LQL_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    interleaved(&exec, rounds);
    let mut g = c.benchmark_group("observers_5tok");
    g.sample_size(30);
    for (name, f) in variants() {
        g.bench_function(name, |b| b.iter(|| f(&exec)));
    }
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
