//! The throughput benchmark behind `lql bench`: the same work as the llama.cpp peer
//! benchmark (`tools/llamacpp_bench.py`): prefill a fixed 100-token English prompt, then
//! greedy-decode 64 tokens one at a time; medians over repetitions after one warm-up;
//! peak resident memory of the process.

use std::sync::Arc;
use std::time::Instant;

use lql_storage::model::OperandSource;
use serde::Serialize;

use crate::error::{ExecError, Result};
use crate::session::Executor;

/// The benchmark prompt: the first 100 ids of the peer benchmark's PROMPT text, tokenized
/// by llama.cpp (`Llama.tokenize(PROMPT.encode(), add_bos=False)[:100]`, vocab of
/// SmolLM2-135M-Instruct; "The history of the city began long ago, when traders from the
/// north settled along the river …" three times).
pub const PROMPT_IDS: [u32; 100] = [
    504, 1463, 282, 260, 2240, 2585, 986, 3156, 28, 645, 18217, 429, 260, 4081, 9700, 1683, 260,
    4626, 284, 2837, 1165, 10091, 6648, 2141, 260, 913, 30, 3636, 800, 929, 260, 9334, 6679, 618,
    253, 10229, 2342, 3102, 28, 351, 19547, 9417, 8663, 28, 14138, 28, 2698, 284, 18720, 288, 7803,
    429, 9931, 2874, 30, 378, 1463, 282, 260, 2240, 2585, 986, 3156, 28, 645, 18217, 429, 260,
    4081, 9700, 1683, 260, 4626, 284, 2837, 1165, 10091, 6648, 2141, 260, 913, 30, 3636, 800, 929,
    260, 9334, 6679, 618, 253, 10229, 2342, 3102, 28, 351, 19547, 9417, 8663, 28, 14138,
];

/// Greedy tokens decoded per repetition.
pub const DECODE_TOKENS: usize = 64;

/// Benchmark figures.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub threads: usize,
    pub reps: usize,
    pub prompt_tokens: usize,
    /// Median prefill throughput (prompt tokens per second).
    pub prefill_tok_s: f64,
    /// Median decode throughput (generated tokens per second).
    pub decode_tok_s: f64,
    /// Peak resident set size of the process, MiB.
    pub peak_rss_mb: f64,
    /// Greedy ids of the first measured repetition.
    pub generated: Vec<u32>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Peak resident set size of this process in MiB (`VmHWM` from `/proc/self/status`).
pub fn peak_rss_mb() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Run the benchmark: one warm-up, then `reps` measured repetitions.
pub fn run(model: Arc<dyn OperandSource>, threads: usize, reps: usize) -> Result<BenchReport> {
    if reps == 0 {
        return Err(ExecError::InvalidOption("reps must be at least 1".into()));
    }
    let exec = Executor::new(model, threads)?;
    let vocab = exec.surface().vocab;
    if let Some(&bad) = PROMPT_IDS.iter().find(|&&i| i as usize >= vocab) {
        return Err(ExecError::InvalidOption(format!(
            "the benchmark prompt (SmolLM2 vocabulary) has id {bad}, beyond this model's vocabulary of {vocab}"
        )));
    }
    let mut session = exec.session();
    let mut once = || -> Result<(f64, f64, Vec<u32>)> {
        session.reset();
        let t0 = Instant::now();
        let mut logits = session.prefill(&PROMPT_IDS)?;
        let t1 = Instant::now();
        let mut toks = Vec::with_capacity(DECODE_TOKENS);
        for _ in 0..DECODE_TOKENS {
            let next = logits.argmax();
            toks.push(next);
            logits = session.decode(next)?;
        }
        let t2 = Instant::now();
        Ok((
            PROMPT_IDS.len() as f64 / (t1 - t0).as_secs_f64(),
            DECODE_TOKENS as f64 / (t2 - t1).as_secs_f64(),
            toks,
        ))
    };
    once()?;
    let mut runs = Vec::with_capacity(reps);
    for _ in 0..reps {
        runs.push(once()?);
    }
    Ok(BenchReport {
        threads: exec.backend().threads(),
        reps,
        prompt_tokens: PROMPT_IDS.len(),
        prefill_tok_s: median(runs.iter().map(|r| r.0).collect()),
        decode_tok_s: median(runs.iter().map(|r| r.1).collect()),
        peak_rss_mb: peak_rss_mb().unwrap_or(f64::NAN),
        generated: runs.swap_remove(0).2,
    })
}
