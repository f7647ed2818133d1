//! The value optimisation's gradients (`grad::DenseTail`) on SmolLM2-135M: the f32 tail
//! reproduces the engine's next-token probabilities, and its gradient with respect to a
//! vector added at one position matches central finite differences, through an overlay's
//! added feature too; with the rows before that position frozen, the same.

mod common;

use std::sync::Arc;

use common::real::model_path;
use common::values;
use lql_exec::edit::{prob, residuals};
use lql_exec::grad::{optimise, optimise_each, DenseTail, Group, Optimise, Segment};
use lql_exec::Executor;
use lql_storage::overlay::{AddedFeature, Edit, EffectiveModel, Patch, PatchOrigin};

#[test]
fn the_tail_matches_the_engine_and_finite_differences() {
    let Some(path) = model_path() else { return };
    let model = Arc::new(lql_storage::import::open(&path).expect("open SmolLM2"));
    let d = Executor::new(model.clone(), 1).unwrap().surface().hidden;
    // An added feature above the tail's first layer, open on ordinary text.
    let f = AddedFeature {
        layer: 20,
        gate: values(d, 1, 0.05),
        gate_bias: 1.0,
        up: values(d, 2, 0.05),
        up_bias: 1.0,
        down: values(d, 3, 0.5),
        edge: None,
    };
    let state = Arc::new(
        EffectiveModel::new(
            model.clone(),
            vec![Patch {
                origin: PatchOrigin::Session,
                edits: vec![Edit::Add(f)],
            }],
        )
        .unwrap(),
    );
    let exec = Executor::new(state.clone(), 2).expect("plan SmolLM2");
    let layer = 6;
    let tail = DenseTail::new(state.as_ref(), exec.plan(), layer + 1).unwrap();
    // "The capital of France is" → " Paris" (7042), and a second prompt.
    let prompts: [(&[u32], usize, u32); 2] = [
        (&[504, 3575, 282, 4649, 314], 3, 7042),
        (&[504, 3575, 282, 4649, 314, 7042, 30, 378], 3, 1463),
    ];
    let mut segs = Vec::new();
    for (ids, pos, target) in prompts {
        let start = residuals(&exec, ids, layer).unwrap();
        let engine = exec.session().prefill(ids).unwrap();
        segs.push(Segment {
            start,
            pos,
            target,
            weight: 1.0,
        });
        let dense = tail
            .evaluate(
                state.as_ref(),
                &segs[segs.len() - 1..],
                &vec![0.0; d],
                false,
            )
            .unwrap();
        let (a, b) = (prob(&engine, target), dense.probs[0]);
        assert!((a - b).abs() < 0.02 + 0.05 * a, "engine {a}, tail {b}");
    }
    let delta = values(d, 7, 0.3);
    let e = tail.evaluate(state.as_ref(), &segs, &delta, true).unwrap();
    // The rows before δ's position, frozen, give the same loss and gradient.
    let frozen = tail.freeze(state.as_ref(), &segs).unwrap();
    let f = tail
        .evaluate_with(state.as_ref(), &segs, Some(&frozen), &delta, true)
        .unwrap();
    assert!((f.loss - e.loss).abs() < 1e-4 * e.loss.abs().max(1.0));
    let diff: f32 = f.grad.iter().zip(&e.grad).map(|(a, b)| (a - b).abs()).sum();
    let size: f32 = e.grad.iter().map(|a| a.abs()).sum();
    assert!(
        diff < 1e-3 * size,
        "frozen gradient differs by {diff} of {size}"
    );
    for seed in 11..14 {
        let u = values(d, seed, 1.0);
        let eps = 0.02f32;
        let at = |s: f32| {
            let x: Vec<f32> = delta.iter().zip(&u).map(|(a, b)| a + s * b).collect();
            tail.evaluate(state.as_ref(), &segs, &x, false)
                .unwrap()
                .loss
        };
        let fd = (at(eps) - at(-eps)) / (2.0 * eps);
        let an: f32 = e.grad.iter().zip(&u).map(|(a, b)| a * b).sum();
        assert!(
            (fd - an).abs() <= 0.03 * an.abs().max(fd.abs()) + 1e-3,
            "direction {seed}: finite differences {fd}, gradient {an}"
        );
    }
}

#[test]
fn values_optimised_together_are_the_values_optimised_alone() {
    let Some(path) = model_path() else { return };
    let model = Arc::new(lql_storage::import::open(&path).expect("open SmolLM2"));
    let exec = Executor::new(model.clone(), 2).expect("plan SmolLM2");
    let layer = 6;
    let tail = DenseTail::new(model.as_ref(), exec.plan(), layer + 1).unwrap();
    // Two values: one on "The capital of France is" (δ at "France"), one on two longer
    // prompts with δ at "Paris" and at "France".
    let seg = |ids: &[u32], pos: usize, target: u32| Segment {
        start: residuals(&exec, ids, layer).unwrap(),
        pos,
        target,
        weight: 1.0,
    };
    let groups = vec![
        Group {
            segs: vec![seg(&[504, 3575, 282, 4649, 314], 3, 7042)],
            norm: 20.0,
        },
        Group {
            segs: vec![
                seg(&[504, 3575, 282, 4649, 314, 7042, 30, 378], 5, 1463),
                seg(&[504, 3575, 282, 4649, 314, 7042], 3, 30),
            ],
            norm: 25.0,
        },
    ];
    let opts = Optimise::default();
    let together = optimise_each(&tail, model.as_ref(), &groups, opts).unwrap();
    for (g, (delta, e)) in groups.iter().zip(&together) {
        let (alone, ea) = optimise(&tail, model.as_ref(), &g.segs, g.norm, opts).unwrap();
        let diff: f32 = delta.iter().zip(&alone).map(|(a, b)| (a - b).powi(2)).sum();
        let size: f32 = alone.iter().map(|a| a * a).sum();
        assert!(
            diff.sqrt() <= 1e-3 * size.sqrt().max(1e-6),
            "δ differs by {} of {}",
            diff.sqrt(),
            size.sqrt()
        );
        assert_eq!(e.steps, ea.steps);
        for (p, q) in e.probs.iter().zip(&ea.probs) {
            assert!((p - q).abs() < 1e-4, "{p} vs {q}");
        }
    }
}
