//! The throughput benchmark behind `lql bench` and `lql-bench`: the same work as the
//! llama.cpp peer benchmark (`tools/llamacpp_bench.py`): prefill a fixed English prompt
//! (100 tokens by default, or the same ids repeated to 512 / 2048 tokens), then
//! greedy-decode 64 tokens one at a time; medians over repetitions after one warm-up;
//! on-CPU seconds of each phase (robust on a shared machine); peak resident memory of the
//! process; the kernel path that produced the figures. [`run_peer`] runs the same ids
//! through llama.cpp (llama-cpp-python) in a child process for a side-by-side figure.

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
    /// The codec kernel family in use (`lql_storage::codec::cpu::kernel_name`).
    pub kernels: String,
    pub threads: usize,
    pub reps: usize,
    pub prompt_tokens: usize,
    /// Median prefill throughput (prompt tokens per second).
    pub prefill_tok_s: f64,
    /// Median decode throughput (generated tokens per second).
    pub decode_tok_s: f64,
    /// Median on-CPU seconds of the process (all threads) during the prefill.
    pub prefill_cpu_s: f64,
    /// Median on-CPU seconds of the process (all threads) during the decode.
    pub decode_cpu_s: f64,
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

/// On-CPU seconds of this process so far, all threads (`getrusage`), where available.
fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) : utime is the 14th field,
    // stime the 15th, in clock ticks (100 per second on Linux).
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// The benchmark prompt of `n` tokens: [`PROMPT_IDS`] repeated (the text is itself a
/// repeated paragraph) and cut to `n`.
pub fn prompt_ids(n: usize) -> Vec<u32> {
    PROMPT_IDS.iter().copied().cycle().take(n).collect()
}

/// Run the benchmark: one warm-up, then `reps` measured repetitions, with the default
/// 100-token prompt.
pub fn run(model: Arc<dyn OperandSource>, threads: usize, reps: usize) -> Result<BenchReport> {
    run_with(model, threads, reps, PROMPT_IDS.len())
}

/// [`run`] with a prompt of `prompt_tokens` tokens ([`prompt_ids`]).
pub fn run_with(
    model: Arc<dyn OperandSource>,
    threads: usize,
    reps: usize,
    prompt_tokens: usize,
) -> Result<BenchReport> {
    if reps == 0 {
        return Err(ExecError::InvalidOption("reps must be at least 1".into()));
    }
    if prompt_tokens == 0 || prompt_tokens > MAX_PROMPT_TOKENS {
        return Err(ExecError::InvalidOption(format!(
            "prompt tokens must be between 1 and {MAX_PROMPT_TOKENS}, not {prompt_tokens}"
        )));
    }
    let ids = prompt_ids(prompt_tokens);
    let exec = Executor::new(model, threads)?;
    let vocab = exec.surface().vocab;
    if let Some(&bad) = PROMPT_IDS.iter().find(|&&i| i as usize >= vocab) {
        return Err(ExecError::InvalidOption(format!(
            "the benchmark prompt (SmolLM2 vocabulary) has id {bad}, beyond this model's vocabulary of {vocab}"
        )));
    }
    let mut session = exec.session();
    let mut once = || -> Result<Run> {
        session.reset();
        let (c0, t0) = (cpu_seconds(), Instant::now());
        let mut logits = session.prefill(&ids)?;
        let (c1, t1) = (cpu_seconds(), Instant::now());
        let mut toks = Vec::with_capacity(DECODE_TOKENS);
        for _ in 0..DECODE_TOKENS {
            let next = logits.argmax();
            toks.push(next);
            logits = session.decode(next)?;
        }
        let (c2, t2) = (cpu_seconds(), Instant::now());
        Ok(Run {
            prefill_tok_s: ids.len() as f64 / (t1 - t0).as_secs_f64(),
            decode_tok_s: DECODE_TOKENS as f64 / (t2 - t1).as_secs_f64(),
            prefill_cpu_s: c1 - c0,
            decode_cpu_s: c2 - c1,
            toks,
        })
    };
    once()?;
    let mut runs = Vec::with_capacity(reps);
    for _ in 0..reps {
        runs.push(once()?);
    }
    Ok(BenchReport {
        kernels: lql_storage::codec::cpu::kernel_name().to_string(),
        threads: exec.backend().threads(),
        reps,
        prompt_tokens: ids.len(),
        prefill_tok_s: median(runs.iter().map(|r| r.prefill_tok_s).collect()),
        decode_tok_s: median(runs.iter().map(|r| r.decode_tok_s).collect()),
        prefill_cpu_s: median(runs.iter().map(|r| r.prefill_cpu_s).collect()),
        decode_cpu_s: median(runs.iter().map(|r| r.decode_cpu_s).collect()),
        peak_rss_mb: peak_rss_mb().unwrap_or(f64::NAN),
        generated: runs.swap_remove(0).toks,
    })
}

/// Longest benchmark prompt.
pub const MAX_PROMPT_TOKENS: usize = 8192;

struct Run {
    prefill_tok_s: f64,
    decode_tok_s: f64,
    prefill_cpu_s: f64,
    decode_cpu_s: f64,
    toks: Vec<u32>,
}

/// The peer's figures (llama.cpp through llama-cpp-python), same ids, threads and reps.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct PeerReport {
    pub peer: String,
    pub threads: usize,
    pub prompt_tokens: usize,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    pub prefill_cpu_s: f64,
    pub decode_cpu_s: f64,
    pub peak_rss_mb: f64,
    pub generated: Vec<u32>,
}

/// The peer benchmark, run by `python3 -c` (same measurement as `tools/llamacpp_bench.py`,
/// but on the ids given, with on-CPU seconds per phase).
const PEER_SCRIPT: &str = r#"
import json, resource, statistics, sys, time
import llama_cpp, numpy as np
from llama_cpp import Llama
model, ids, threads, reps, ndec = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
llm = Llama(model_path=model, n_ctx=len(ids) + ndec + 16, n_batch=512, n_threads=threads,
            n_threads_batch=threads, verbose=False, seed=0)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
def run():
    llm.reset()
    c0, t0 = cpu(), time.perf_counter(); llm.eval(ids); c1, t1 = cpu(), time.perf_counter()
    toks = []
    for _ in range(ndec):
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        nxt = int(np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).argmax())
        toks.append(nxt); llm.eval([nxt])
    c2, t2 = cpu(), time.perf_counter()
    return len(ids) / (t1 - t0), ndec / (t2 - t1), c1 - c0, c2 - c1, toks
run()
res = [run() for _ in range(reps)]
med = lambda k: statistics.median(r[k] for r in res)
print(json.dumps(dict(peer="llama.cpp " + llama_cpp.__version__, threads=threads, prompt_tokens=len(ids),
    prefill_tok_s=med(0), decode_tok_s=med(1), prefill_cpu_s=med(2), decode_cpu_s=med(3),
    peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, generated=res[0][4])))
"#;

/// The Python that has llama-cpp-python: `LQL_PEER_PYTHON`, else the tools' venv
/// (`~/.cache/lql-tools/venv/bin/python`, made by `tools/pyenv.sh --llamacpp`).
pub fn peer_python() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("LQL_PEER_PYTHON") {
        return p.into();
    }
    let home = std::env::var_os("HOME").unwrap_or_default();
    std::path::Path::new(&home).join(".cache/lql-tools/venv/bin/python")
}

/// Runs llama.cpp on `model_path` with the same prompt ids, threads and repetitions as
/// [`run_with`] (a child process, so its memory is its own).
pub fn run_peer(
    model_path: &std::path::Path,
    threads: usize,
    reps: usize,
    prompt_tokens: usize,
) -> Result<PeerReport> {
    let py = peer_python();
    let ids = serde_json::to_string(&prompt_ids(prompt_tokens))
        .map_err(|e| ExecError::Internal(format!("prompt ids: {e}")))?;
    let out = std::process::Command::new(&py)
        .arg("-c")
        .arg(PEER_SCRIPT)
        .arg(model_path)
        .arg(ids)
        .arg(threads.max(1).to_string())
        .arg(reps.max(1).to_string())
        .arg(DECODE_TOKENS.to_string())
        .output()
        .map_err(|e| {
            ExecError::InvalidOption(format!(
                "cannot run the llama.cpp peer with {} ({e}); make it with tools/pyenv.sh --llamacpp or set LQL_PEER_PYTHON",
                py.display()
            ))
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: String = err.lines().rev().take(3).collect::<Vec<_>>().join(" / ");
        return Err(ExecError::InvalidOption(format!(
            "the llama.cpp peer failed ({}): {tail}",
            out.status
        )));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        ExecError::Internal(format!(
            "the llama.cpp peer printed no report ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        ))
    })
}
