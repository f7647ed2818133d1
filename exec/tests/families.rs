//! Every model family the importer registers, on its tiny random GGUF
//! (`tests/fixtures/families/<family>/`): logits at every position against the f32 numpy
//! reference, top-1 against llama.cpp at every position, the greedy continuation against
//! the reference, cached decoding and the batched step against the whole pass. The goldens
//! come from `tests/tools/family_goldens.py` (both oracles agree with each other there).

use std::path::PathBuf;
use std::sync::Arc;

use lql_exec::sample::argmax;
use lql_exec::{Control, Executor, GenerateOptions};
use serde_json::Value;

/// The oracle of each registered architecture: its family fixture, or the older fixture
/// that covers it (SmolLM2 covers llama too; `tiny_qwen2` and the qwen2moe goldens).
const ORACLES: [(&str, &str); 11] = [
    ("llama", "tests/fixtures/families/llama3/golden.json"),
    ("qwen2", "exec/tests/fixtures/parity/tiny_qwen2.json"),
    ("qwen2moe", "exec/tests/fixtures/moe/qwen2moe_e8_k2_l3.json"),
    ("qwen3", "tests/fixtures/families/qwen3/golden.json"),
    ("qwen3moe", "tests/fixtures/families/qwen3moe/golden.json"),
    ("gemma2", "tests/fixtures/families/gemma2/golden.json"),
    ("gemma3", "tests/fixtures/families/gemma3/golden.json"),
    ("phi3", "tests/fixtures/families/phi3/golden.json"),
    ("gpt2", "tests/fixtures/families/gpt2/golden.json"),
    ("gptneox", "tests/fixtures/families/gptneox/golden.json"),
    ("olmo2", "tests/fixtures/families/olmo2/golden.json"),
];

/// The fixture families run here (folder names under `tests/fixtures/families`).
const FAMILIES: [&str; 9] = [
    "llama3", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3", "gpt2", "gptneox", "olmo2",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

struct Golden {
    arch: String,
    ids: Vec<u32>,
    /// The reference's logits with GELU computed exactly (LQL's arithmetic), else its only
    /// logits.
    logits: Vec<Vec<f32>>,
    llamacpp_top1: Vec<u32>,
    greedy: Vec<u32>,
}

fn golden(family: &str) -> (Executor, Golden) {
    let dir = repo().join("tests/fixtures/families").join(family);
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json")).unwrap()).unwrap();
    let ids = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let logits_key = if v.get("reference_logits_exact_gelu").is_some() {
        "reference_logits_exact_gelu"
    } else {
        "reference_logits"
    };
    let g = Golden {
        arch: v["arch"].as_str().unwrap().to_string(),
        ids: ids(&v["ids"]),
        logits: v[logits_key]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| {
                row.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect()
            })
            .collect(),
        llamacpp_top1: ids(&v["llamacpp_top1"]),
        greedy: ids(&v["reference_greedy"]),
    };
    let model = lql_storage::import::open(&dir.join("model.gguf"))
        .unwrap_or_else(|e| panic!("{family}: open: {e}"));
    assert_eq!(model.surface.source_architecture, g.arch, "{family}");
    let exec = Executor::new(Arc::new(model), 2).unwrap_or_else(|e| panic!("{family}: {e}"));
    (exec, g)
}

#[test]
fn every_registered_family_has_an_oracle() {
    let registered = lql_storage::import::gguf::supported_architectures();
    for (arch, _) in &registered {
        let (_, path) = ORACLES
            .iter()
            .find(|(a, _)| a == arch)
            .unwrap_or_else(|| panic!("family `{arch}` is registered without an oracle"));
        assert!(repo().join(path).is_file(), "{arch}: {path} is missing");
    }
    assert_eq!(registered.len(), ORACLES.len(), "an oracle names no family");
}

#[test]
fn logits_match_the_reference_at_every_position() {
    for family in FAMILIES {
        let (exec, g) = golden(family);
        let got = exec.logits_all(&g.ids).unwrap();
        let mut worst = 0.0f32;
        for (p, (l, want)) in got.iter().zip(&g.logits).enumerate() {
            assert_eq!(l.values.len(), want.len(), "{family}: vocabulary");
            for (a, b) in l.values.iter().zip(want) {
                worst = worst.max((a - b).abs());
            }
            assert_eq!(
                argmax(&l.values),
                g.llamacpp_top1[p],
                "{family}: top-1 at position {p} differs from llama.cpp's"
            );
        }
        // 1e-4 on logits of order 10; f32 sums over larger activations round in
        // proportion (gemma2's logits reach ±27 after a softcap of 44-wide inputs).
        let scale = g
            .logits
            .iter()
            .flatten()
            .fold(0.0f32, |m, v| m.max(v.abs()));
        let tol = 1e-4 * (scale / 10.0).max(1.0);
        eprintln!(
            "{family}: max |Δlogit| {worst:.2e} over {} positions (bound {tol:.1e}, logits to ±{scale:.1})",
            g.ids.len()
        );
        assert!(worst <= tol, "{family}: max |Δlogit| {worst} > {tol}");
    }
}

#[test]
fn greedy_continuation_matches_the_reference() {
    for family in FAMILIES {
        let (exec, g) = golden(family);
        let opts = GenerateOptions {
            max_tokens: g.greedy.len(),
            stop_at_eos: false,
            ..GenerateOptions::default()
        };
        let out = exec
            .generate(&g.ids, &opts, &mut |_| Control::Continue)
            .unwrap();
        assert_eq!(out.token_ids, g.greedy, "{family}");
    }
}

/// The batched step (several sequences at their own positions, one of them a prompt) runs
/// the same block: each sequence's logits equal its own pass's.
#[test]
fn batched_step_equals_single_passes() {
    for family in FAMILIES {
        let (exec, g) = golden(family);
        let (a, b) = g.ids.split_at(7);
        let mut s1 = exec.session();
        let mut s2 = exec.session();
        s1.prefill(a).unwrap();
        let got = exec
            .extend_batch(&mut [&mut s1, &mut s2], &[&b[..1], b])
            .unwrap();
        let one = exec.logits_all(&g.ids[..8]).unwrap();
        let two = exec.logits_all(b).unwrap();
        let d1 = max_diff(&got[0].values, &one[7].values);
        let d2 = max_diff(&got[1].values, &two[b.len() - 1].values);
        assert!(d1 <= 1e-4 && d2 <= 1e-4, "{family}: {d1} {d2}");
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
