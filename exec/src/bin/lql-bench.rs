//! `lql-bench MODEL [--threads N] [--reps R] [--prompt-tokens P] [--peer llama.cpp] [--json]`:
//! prefill and decode throughput, on-CPU seconds and peak memory of the CPU executor, the
//! same work as the llama.cpp peer benchmark (`tools/llamacpp_bench.py`); with `--peer
//! llama.cpp` also llama.cpp's figures on the same file, ids and threads (a child process
//! running llama-cpp-python), as one JSON object or a small table.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use lql_exec::bench::{BenchReport, PeerReport};

fn usage() -> ExitCode {
    eprintln!(
        "usage: lql-bench MODEL [--threads N] [--reps R] [--prompt-tokens P] [--peer llama.cpp] [--json]"
    );
    ExitCode::from(2)
}

struct Args {
    model: PathBuf,
    threads: usize,
    reps: usize,
    prompt_tokens: usize,
    peer: bool,
    json: bool,
}

fn parse() -> Option<Args> {
    let mut args = std::env::args().skip(1);
    let mut a = Args {
        model: PathBuf::new(),
        threads: 2,
        reps: 3,
        prompt_tokens: 100,
        peer: false,
        json: false,
    };
    let mut model = None;
    while let Some(arg) = args.next() {
        let mut num = |name: &str| -> Option<usize> {
            let v = args.next().and_then(|v| v.parse().ok());
            if v.is_none() {
                eprintln!("{name} needs a number");
            }
            v
        };
        match arg.as_str() {
            "--threads" => a.threads = num("--threads")?,
            "--reps" => a.reps = num("--reps")?,
            "--prompt-tokens" => a.prompt_tokens = num("--prompt-tokens")?,
            "--peer" => match args.next().as_deref() {
                Some("llama.cpp") => a.peer = true,
                other => {
                    eprintln!("--peer: only llama.cpp is supported, not {other:?}");
                    return None;
                }
            },
            "--json" => a.json = true,
            _ if model.is_none() && !arg.starts_with('-') => model = Some(PathBuf::from(arg)),
            _ => return None,
        }
    }
    a.model = model?;
    Some(a)
}

fn main() -> ExitCode {
    let Some(a) = parse() else { return usage() };
    let model = match lql_storage::import::open(&a.model) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = match lql_exec::bench::run_with(Arc::new(model), a.threads, a.reps, a.prompt_tokens) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let peer = if a.peer {
        match lql_exec::bench::run_peer(&a.model, r.threads, a.reps, a.prompt_tokens) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    if a.json {
        let v = serde_json::json!({
            "model": a.model,
            "lql": r,
            "peer": peer,
        });
        println!("{v}");
    } else {
        print_table(&a.model, &r, peer.as_ref());
    }
    ExitCode::SUCCESS
}

fn print_table(model: &std::path::Path, r: &BenchReport, peer: Option<&PeerReport>) {
    println!(
        "{} · {} threads · {}-token prompt · {} decoded · median of {}",
        model.display(),
        r.threads,
        r.prompt_tokens,
        r.generated.len(),
        r.reps
    );
    println!(
        "{:<28} {:>12} {:>12} {:>10} {:>10} {:>10}",
        "engine (kernel path)", "prefill t/s", "decode t/s", "pre cpu s", "dec cpu s", "RSS MiB"
    );
    let row = |name: &str, pf: f64, dc: f64, pc: f64, dcpu: f64, rss: f64| {
        println!("{name:<28} {pf:>12.1} {dc:>12.1} {pc:>10.3} {dcpu:>10.3} {rss:>10.1}");
    };
    row(
        &format!("lql ({})", r.kernels),
        r.prefill_tok_s,
        r.decode_tok_s,
        r.prefill_cpu_s,
        r.decode_cpu_s,
        r.peak_rss_mb,
    );
    if let Some(p) = peer {
        row(
            &p.peer,
            p.prefill_tok_s,
            p.decode_tok_s,
            p.prefill_cpu_s,
            p.decode_cpu_s,
            p.peak_rss_mb,
        );
        println!(
            "{:<28} {:>11.2}× {:>11.2}× {:>21} {:>9.2}×",
            "lql / peer",
            r.prefill_tok_s / p.prefill_tok_s,
            r.decode_tok_s / p.decode_tok_s,
            "",
            r.peak_rss_mb / p.peak_rss_mb
        );
    }
}
