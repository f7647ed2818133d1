//! The gradient tail (`grad::DenseTail`) on every dense family fixture
//! (`tests/fixtures/families/<family>/`): each layer runs by its step programme, so the
//! tail must give the engine's own next-token probabilities, and its gradients must match
//! central finite differences — with δ at an early position of several prompts (attention
//! over several positions, sliding windows included), a tail starting inside the model,
//! the rows before δ frozen, and an overlay (added feature, feature scales) in force.
//! Banks of experts too: the qwen3moe fixture and synthetic qwen2moe and Mixtral-style
//! banks, one per selection (top-k then softmax, softmax then top-k, sigmoid normalised),
//! with and without a gated shared expert; their overlay is an added feature alone (the
//! engine scales no expert feature).

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::values;
use lql_exec::edit::{prob, residuals};
use lql_exec::grad::{DenseTail, Segment};
use lql_exec::sample::argmax;
use lql_exec::Executor;
use lql_storage::format::gguf::synth::{TinyModel, TinyMoe};
use lql_storage::overlay::{AddedFeature, Edit, EffectiveModel, FeatureScale, Patch, PatchOrigin};
use lql_storage::OperandSource;

/// The dense families and the layer their tail starts at.
const DENSE: [(&str, usize); 8] = [
    ("llama3", 1),
    ("qwen3", 1),
    ("gemma2", 1),
    ("gemma3", 3),
    ("phi3", 1),
    ("gpt2", 1),
    ("gptneox", 1),
    ("olmo2", 1),
];

/// `The quick brown fox jumps over the lazy dog.` in the fixtures' tokenizer.
const IDS: [u32; 12] = [259, 291, 273, 276, 282, 283, 268, 258, 286, 121, 279, 46];

fn fixture(family: &str) -> Arc<lql_storage::Model> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/families")
        .join(family)
        .join("model.gguf");
    Arc::new(lql_storage::import::open(&path).unwrap_or_else(|e| panic!("{family}: open: {e}")))
}

fn rms(v: &[f32]) -> f32 {
    (v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32).sqrt()
}

/// An overlay on layer `layer`: one added feature, open on ordinary rows, and (`scales`)
/// the gate and down scales of two base features.
fn overlaid(model: &Arc<lql_storage::Model>, layer: usize, scales: bool) -> Arc<EffectiveModel> {
    let d = model.surface.hidden;
    let f = AddedFeature {
        layer,
        gate: values(d, 1, 0.3),
        gate_bias: 0.5,
        up: values(d, 2, 0.3),
        up_bias: 1.0,
        down: values(d, 3, 0.5),
        edge: None,
    };
    let scale = |feature, gate, down| {
        Edit::Scale(FeatureScale {
            layer,
            feature,
            gate_scale: Some(gate),
            down_scale: Some(down),
        })
    };
    Arc::new(
        EffectiveModel::new(
            model.clone(),
            vec![Patch {
                origin: PatchOrigin::Session,
                edits: if scales {
                    vec![Edit::Add(f), scale(3, 1.7, 0.4), scale(10, 0.3, 2.5)]
                } else {
                    vec![Edit::Add(f)]
                },
            }],
        )
        .unwrap(),
    )
}

/// The tail from `first` against the engine over `state`, and its gradient against finite
/// differences.
fn check(family: &str, what: &str, state: Arc<dyn OperandSource>, first: usize) {
    let exec = Executor::new(state.clone(), 2).unwrap_or_else(|e| panic!("{family}: {e}"));
    let d = exec.surface().hidden;
    let tail = DenseTail::new(state.as_ref(), exec.plan(), first)
        .unwrap_or_else(|e| panic!("{family}: tail: {e}"));
    // Three prompts of 8, 12 and 6 tokens, δ at positions 2, 4 and 1: later queries reach
    // past a 4-wide window, and the rows before δ are what `freeze` keeps.
    let mut segs = Vec::new();
    // The largest relative differences seen: probabilities, then finite differences.
    let (mut worst_p, mut worst_fd) = (0.0f32, 0.0f64);
    for (len, pos) in [(8usize, 2usize), (12, 4), (6, 1)] {
        let ids = &IDS[..len];
        let engine = exec.session().prefill(ids).unwrap();
        let target = argmax(&engine.values);
        let seg = Segment {
            start: residuals(&exec, ids, first - 1).unwrap(),
            pos,
            target,
            weight: 1.0,
        };
        let dense = tail
            .evaluate(
                state.as_ref(),
                std::slice::from_ref(&seg),
                &vec![0.0; d],
                false,
            )
            .unwrap();
        let (a, b) = (prob(&engine, target), dense.probs[0]);
        worst_p = worst_p.max((a - b).abs() / a.max(b));
        assert!(
            (a - b).abs() <= 1e-4 * a.max(b),
            "{family}{what}: engine p = {a}, tail p = {b} (prompt of {len})"
        );
        // A second target, less likely.
        let mut other = engine.values.clone();
        other[target as usize] = f32::NEG_INFINITY;
        let second = argmax(&other);
        let b2 = tail
            .evaluate(
                state.as_ref(),
                &[Segment {
                    target: second,
                    ..seg.clone()
                }],
                &vec![0.0; d],
                false,
            )
            .unwrap()
            .probs[0];
        let a2 = prob(&engine, second);
        worst_p = worst_p.max((a2 - b2).abs() / a2.max(b2));
        assert!(
            (a2 - b2).abs() <= 1e-4 * a2.max(b2),
            "{family}{what}: engine p = {a2}, tail p = {b2} (prompt of {len}, second token)"
        );
        segs.push(Segment {
            target: second,
            ..seg
        });
    }
    let scale = segs
        .iter()
        .map(|s| rms(&s.start[s.pos * d..(s.pos + 1) * d]))
        .fold(0.0f32, f32::max);
    let delta = values(d, 7, 0.3 * scale);
    let e = tail.evaluate(state.as_ref(), &segs, &delta, true).unwrap();
    let size = e.grad.iter().map(|g| g * g).sum::<f32>().sqrt();
    assert!(
        size > 0.0 && size.is_finite(),
        "{family}{what}: gradient {size}"
    );
    // The rows before δ's position, frozen, give the same loss and gradient.
    let frozen = tail.freeze(state.as_ref(), &segs).unwrap();
    let f = tail
        .evaluate_with(state.as_ref(), &segs, Some(&frozen), &delta, true)
        .unwrap();
    assert!(
        (f.loss - e.loss).abs() <= 1e-5 * e.loss.abs().max(1.0),
        "{family}{what}: frozen loss {} vs {}",
        f.loss,
        e.loss
    );
    let diff = f
        .grad
        .iter()
        .zip(&e.grad)
        .map(|(a, b)| (a - b) * (a - b))
        .sum::<f32>()
        .sqrt();
    assert!(
        diff <= 1e-4 * size,
        "{family}{what}: frozen gradient differs by {diff} of {size}"
    );
    // Central differences along random directions and the steepest coordinate, in f64
    // around f32 losses: the step is small against the residual, large against rounding.
    let loss_at = |dir: &[f32], s: f32| {
        let x: Vec<f32> = delta.iter().zip(dir).map(|(a, b)| a + s * b).collect();
        tail.evaluate(state.as_ref(), &segs, &x, false)
            .unwrap()
            .loss as f64
    };
    let steepest = (0..d)
        .max_by(|&a, &b| e.grad[a].abs().total_cmp(&e.grad[b].abs()))
        .unwrap();
    let mut dirs: Vec<Vec<f32>> = (11..14).map(|seed| values(d, seed, 1.0)).collect();
    let mut unit = vec![0.0f32; d];
    unit[steepest] = 1.0;
    dirs.push(unit);
    for (k, dir) in dirs.iter().enumerate() {
        let len = dir.iter().map(|x| x * x).sum::<f32>().sqrt();
        let h = 5e-2 * scale / len;
        let fd = (loss_at(dir, h) - loss_at(dir, -h)) / (2.0 * h as f64);
        let an: f64 = e.grad.iter().zip(dir).map(|(a, b)| (a * b) as f64).sum();
        let tol = 5e-3 * an.abs().max(fd.abs()) + 3e-4 * size as f64 * len as f64;
        worst_fd = worst_fd.max((fd - an).abs() / an.abs().max(fd.abs()));
        assert!(
            (fd - an).abs() <= tol,
            "{family}{what}: direction {k}: finite differences {fd}, gradient {an} (tolerance {tol})"
        );
    }
    // The site gradients of the metric log p(target) of one prompt: resid_pre of the first
    // layer is ∂metric/∂start (finite differences), and each layer's resid_post is the
    // next layer's resid_pre.
    let seg = &segs[1];
    let target = seg.target as usize;
    let dmetric = |l: &[f32]| -> Vec<f32> {
        let max = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = l.iter().map(|&v| ((v - max) as f64).exp()).sum();
        let mut g: Vec<f32> = l
            .iter()
            .map(|&v| -((((v - max) as f64).exp() / sum) as f32))
            .collect();
        g[target] += 1.0;
        g
    };
    let grads = tail
        .site_gradients(state.as_ref(), &seg.start, &dmetric)
        .unwrap();
    assert_eq!(grads.len(), exec.surface().n_layers - first);
    for w in grads.windows(2) {
        assert_eq!(w[0].resid_post, w[1].resid_pre, "{family}{what}");
    }
    for g in &grads {
        let sizes = [g.resid_pre.len(), g.resid_mid.len(), g.resid_post.len()];
        assert_eq!(sizes, [seg.start.len(); 3], "{family}{what}");
        assert_eq!(g.head_outputs.len(), IDS.len() * exec.plan().q_dim);
    }
    let metric = |s: f32, dir: &[f32]| {
        let x: Vec<f32> = seg.start.iter().zip(dir).map(|(a, b)| a + s * b).collect();
        let t = Segment {
            start: x,
            pos: 0,
            target: seg.target,
            weight: 1.0,
        };
        -(tail
            .evaluate(state.as_ref(), &[t], &vec![0.0; d], false)
            .unwrap()
            .loss as f64)
    };
    let dir = values(seg.start.len(), 5, 1.0);
    let len = dir.iter().map(|x| x * x).sum::<f32>().sqrt();
    let h = 1e-2 * scale * (IDS.len() as f32).sqrt() / len;
    let fd = (metric(h, &dir) - metric(-h, &dir)) / (2.0 * h as f64);
    let g0 = &grads[0].resid_pre;
    let an: f64 = g0.iter().zip(&dir).map(|(a, b)| (a * b) as f64).sum();
    let gsize = g0.iter().map(|g| g * g).sum::<f32>().sqrt() as f64;
    let tol = 5e-3 * an.abs().max(fd.abs()) + 3e-4 * gsize * len as f64;
    worst_fd = worst_fd.max((fd - an).abs() / an.abs().max(fd.abs()));
    assert!(
        (fd - an).abs() <= tol,
        "{family}{what}: site gradient: finite differences {fd}, gradient {an} (tolerance {tol})"
    );
    eprintln!(
        "{family}{what}: tail from layer {first}: p within {worst_p:.1e} (relative) of the engine's, \
         gradients within {worst_fd:.1e} of finite differences (|∂loss/∂δ| {size:.2e})"
    );
}

#[test]
fn the_tail_follows_every_dense_family_and_its_gradients_match_finite_differences() {
    for (family, first) in DENSE {
        let model = fixture(family);
        check(family, "", model.clone(), first);
        let last = model.surface.n_layers - 1;
        check(family, " (overlay)", overlaid(&model, last, true), first);
    }
}

/// A bank model: the tail with no overlay, and with an added feature on its last layer.
fn check_bank(name: &str, model: Arc<lql_storage::Model>, first: usize) {
    assert!(model.surface.moe.is_some(), "{name}: not a bank model");
    check(name, "", model.clone(), first);
    let last = model.surface.n_layers - 1;
    check(name, " (overlay)", overlaid(&model, last, false), first);
}

#[test]
fn the_tail_follows_banks_of_experts_and_their_gradients_match_finite_differences() {
    check_bank("qwen3moe", fixture("qwen3moe"), 1);
    let moe = |experts, used, expert_ffn, shared_ffn, shared_gate, sigmoid| TinyMoe {
        experts,
        used,
        expert_ffn,
        shared_ffn,
        shared_gate,
        sigmoid,
    };
    let dir = tempfile::tempdir().unwrap();
    let synthetic = [
        // Softmax then top-k (not renormalised), with a gated shared expert.
        (
            "qwen2moe_e8_k2_l3",
            TinyModel {
                layers: 3,
                seed: 5,
                moe: Some(moe(8, 2, 48, 64, true, false)),
                ..TinyModel::qwen2moe()
            },
        ),
        // Sigmoid, top-k, renormalised, with an ungated shared expert.
        (
            "qwen2moe_sigmoid",
            TinyModel {
                seed: 6,
                moe: Some(moe(8, 3, 32, 64, false, true)),
                ..TinyModel::qwen2moe()
            },
        ),
        // Top-k then softmax (Mixtral), no shared expert.
        (
            "mixtral_e8_k2_l3",
            TinyModel {
                layers: 3,
                seed: 3,
                moe: Some(moe(8, 2, 96, 0, false, false)),
                ..TinyModel::llama()
            },
        ),
    ];
    for (name, tiny) in synthetic {
        let path = dir.path().join(format!("{name}.gguf"));
        tiny.write(&path).unwrap();
        let model = lql_storage::import::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_bank(name, Arc::new(model), 1);
    }
}
