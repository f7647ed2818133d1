//! Shared helpers of the GPU tests: the backend (or a printed reason to skip; with
//! `LQL_REQUIRE_GPU=1`, as CI sets, a missing adapter fails instead), the models and the
//! parity fixtures of `exec/tests/fixtures/parity`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use lql_exec::{Backend, Executor};
use lql_gpu::GpuBackend;
use serde_json::Value;

/// The GPU backend, or `None` (the test skips with a printed reason).
pub fn gpu() -> Option<Arc<GpuBackend>> {
    static G: OnceLock<Option<Arc<GpuBackend>>> = OnceLock::new();
    G.get_or_init(|| match GpuBackend::new(None, 2) {
        Ok(b) => {
            eprintln!("GPU adapter: {}", b.adapter());
            Some(Arc::new(b))
        }
        Err(e) => {
            if std::env::var("LQL_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                panic!("LQL_REQUIRE_GPU=1 but no GPU backend: {e}");
            }
            eprintln!("skipping: no GPU backend ({e})");
            None
        }
    })
    .clone()
}

pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../exec/tests/fixtures/parity")
}

/// SmolLM2 (from `LQL_TEST_MODEL` or the model cache), or `None` with a printed reason.
pub fn smollm2_path() -> Option<PathBuf> {
    let p = match std::env::var_os("LQL_TEST_MODEL") {
        Some(p) => PathBuf::from(p),
        None => {
            let home = std::env::var_os("LQL_HOME")
                .map(PathBuf::from)
                .or_else(|| Some(PathBuf::from(std::env::var_os("HOME")?).join(".cache/lql")))?;
            home.join("models/smollm2-135m-instruct.gguf")
        }
    };
    if p.is_file() {
        Some(p)
    } else {
        eprintln!("SmolLM2 GGUF not found (set LQL_TEST_MODEL): skipping");
        None
    }
}

/// The same model on the GPU and on the CPU.
pub fn pair(path: &std::path::Path) -> Option<(Executor, Executor)> {
    let gpu = gpu()?;
    let model = Arc::new(lql_storage::import::open(path).expect("open the model"));
    let g = Executor::with_backend(model.clone(), gpu as Arc<dyn Backend>).expect("plan on gpu");
    let c = Executor::new(model, 2).expect("plan on cpu");
    Some((g, c))
}

pub fn json(path: PathBuf) -> Value {
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Largest |ours − reference| over a SmolLM2 fixture's top-20 and fixed ids at every
/// position (the f32 numpy reference, see exec/tests/fixtures/parity/compact.py).
pub fn smollm2_max_diff(fx: &Value, logits: &[lql_exec::Logits]) -> f32 {
    let top = fx["top"].as_array().unwrap();
    assert_eq!(logits.len(), top.len());
    let fixed_ids = ids(&fx["fixed_ids"]);
    let fixed = fx["fixed"].as_array().unwrap();
    let mut worst = 0.0f32;
    for (p, l) in logits.iter().enumerate() {
        for pair in top[p].as_array().unwrap() {
            let id = pair[0].as_u64().unwrap() as usize;
            let want = pair[1].as_f64().unwrap() as f32;
            worst = worst.max((l.values[id] - want).abs());
        }
        for (i, &id) in fixed_ids.iter().enumerate() {
            let want = fixed[p][i].as_f64().unwrap() as f32;
            worst = worst.max((l.values[id as usize] - want).abs());
        }
    }
    worst
}
