//! `lql bench MODEL`: prefill and decode throughput of the CPU backend on a model (a path
//! or a catalogue name), with the kernel path and thread count that produced them, as a
//! short report or one JSON object. (`lql-bench` adds `--prompt-tokens` and the
//! `--peer llama.cpp` side-by-side run.)

use std::process::ExitCode;

pub fn run(model: &str, threads: Option<usize>, reps: usize, json: bool) -> ExitCode {
    let conn = match lql::Connection::open_with_progress(model, crate::progress::handler()) {
        Ok(c) => c,
        Err(e) => return fail(&e, model, json),
    };
    let report = match conn.bench(threads.unwrap_or(0), reps) {
        Ok(r) => r,
        Err(e) => return fail(&e, model, json),
    };
    if json {
        let mut v = serde_json::json!({
            "model": model,
            "kernels": report.kernels,
            "threads": report.threads,
            "reps": report.reps,
            "prompt_tokens": report.prompt_tokens,
            "decode_tokens": report.generated.len(),
            "prefill_tok_s": report.prefill_tok_s,
            "decode_tok_s": report.decode_tok_s,
            "prefill_cpu_s": report.prefill_cpu_s,
            "decode_cpu_s": report.decode_cpu_s,
        });
        if report.peak_rss_mb.is_finite() {
            v["peak_rss_mb"] = serde_json::json!(report.peak_rss_mb);
        }
        println!("{v}");
    } else {
        println!("model     {model}");
        println!("kernels   {}", report.kernels);
        println!("threads   {}", report.threads);
        println!(
            "prefill   {:.1} tok/s ({} prompt tokens, median of {})",
            report.prefill_tok_s, report.prompt_tokens, report.reps
        );
        println!(
            "decode    {:.1} tok/s ({} greedy tokens, median of {})",
            report.decode_tok_s,
            report.generated.len(),
            report.reps
        );
        if report.peak_rss_mb.is_finite() {
            println!("peak RSS  {:.1} MiB", report.peak_rss_mb);
        }
    }
    ExitCode::SUCCESS
}

fn fail(e: &lql::Error, model: &str, json: bool) -> ExitCode {
    if json {
        eprintln!("{}", e.to_json());
    } else {
        eprint!(
            "{}",
            e.render(
                "bench",
                model,
                std::io::IsTerminal::is_terminal(&std::io::stderr())
            )
        );
    }
    ExitCode::FAILURE
}
