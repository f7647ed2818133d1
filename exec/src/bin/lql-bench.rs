//! `lql-bench MODEL [--threads N] [--reps R] [--json]`: prefill and decode throughput and
//! peak memory of the CPU executor, the same work as the llama.cpp peer benchmark
//! (`tools/llamacpp_bench.py`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

fn usage() -> ExitCode {
    eprintln!("usage: lql-bench MODEL [--threads N] [--reps R] [--json]");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut model, mut threads, mut reps, mut json) = (None, 2usize, 3usize, false);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> Option<usize> {
            let v = args.next().and_then(|v| v.parse().ok());
            if v.is_none() {
                eprintln!("{name} needs a number");
            }
            v
        };
        match a.as_str() {
            "--threads" => match num("--threads") {
                Some(n) => threads = n,
                None => return usage(),
            },
            "--reps" => match num("--reps") {
                Some(n) => reps = n,
                None => return usage(),
            },
            "--json" => json = true,
            "-h" | "--help" => return usage(),
            _ if model.is_none() && !a.starts_with('-') => model = Some(PathBuf::from(a)),
            _ => return usage(),
        }
    }
    let Some(path) = model else { return usage() };
    let model = match lql_storage::import::open(&path) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match lql_exec::bench::run(Arc::new(model), threads, reps) {
        Ok(r) if json => {
            println!("{}", serde_json::to_string(&r).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(r) => {
            println!(
                "prefill {:.1} tok/s  decode {:.1} tok/s  peak RSS {:.0} MB  ({} threads, median of {})",
                r.prefill_tok_s, r.decode_tok_s, r.peak_rss_mb, r.threads, r.reps
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
