//! The real default model (SmolLM2-135M-Instruct Q4_1) and the parity fixtures.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use lql_exec::Executor;
use serde_json::Value;

/// The model, from `LQL_TEST_MODEL` or the model cache; `None` (test skipped) when absent.
pub fn model_path() -> Option<PathBuf> {
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

/// An executor over the real model (opened once per test binary).
pub fn executor() -> Option<Executor> {
    static E: OnceLock<Option<Executor>> = OnceLock::new();
    E.get_or_init(|| {
        let path = model_path()?;
        let model = lql_storage::import::open(&path).expect("open SmolLM2");
        Some(Executor::new(Arc::new(model), 2).expect("plan SmolLM2"))
    })
    .clone()
}

/// A parity fixture (see tests/fixtures/parity/compact.py).
pub struct Fixture {
    pub name: String,
    pub ids: Vec<u32>,
    /// Per position: (id, logit) best first.
    pub top: Vec<Vec<(u32, f32)>>,
    pub fixed_ids: Vec<u32>,
    pub fixed: Vec<Vec<f32>>,
    pub greedy: Vec<u32>,
}

pub fn fixture(name: &str) -> Fixture {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/parity")
        .join(format!("{name}.json"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let floats = |v: &Value| -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    Fixture {
        name: name.to_string(),
        ids: ids(&v["ids"]),
        top: v["top"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                row.as_array()
                    .unwrap()
                    .iter()
                    .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap() as f32))
                    .collect()
            })
            .collect(),
        fixed_ids: ids(&v["fixed_ids"]),
        fixed: v["fixed"].as_array().unwrap().iter().map(floats).collect(),
        greedy: ids(&v["greedy"]),
    }
}

/// The SmolLM2 fixtures.
pub const PROMPTS: [&str; 3] = ["france", "columbus", "fib"];

/// Largest |ours − reference| over the fixture's top-20 and fixed ids at every position.
pub fn max_diff(fx: &Fixture, logits: &[lql_exec::Logits]) -> f32 {
    assert_eq!(logits.len(), fx.ids.len(), "{}: positions", fx.name);
    let mut worst = 0.0f32;
    for (p, l) in logits.iter().enumerate() {
        for &(id, want) in &fx.top[p] {
            worst = worst.max((l.values[id as usize] - want).abs());
        }
        for (&id, &want) in fx.fixed_ids.iter().zip(&fx.fixed[p]) {
            worst = worst.max((l.values[id as usize] - want).abs());
        }
    }
    worst
}
