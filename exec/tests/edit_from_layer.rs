//! The strength search's shortcut (`edit::PromptFromLayer`): a prompt run once up to the
//! edit's layer, then each trial state from that layer on, gives the logits of the whole
//! pass over that state bit for bit (SmolLM2-135M, one added feature at a middle layer
//! and at layer 0, where the whole pass is run).

mod common;

use std::sync::Arc;

use common::real::model_path;
use common::values;
use lql_exec::edit::PromptFromLayer;
use lql_exec::Executor;
use lql_storage::overlay::{AddedFeature, Edit, EffectiveModel, Patch, PatchOrigin};

/// Deterministic floats in [-scale, scale], different for each seed.
#[test]
fn trials_from_the_edit_layer_equal_the_whole_pass() {
    let Some(path) = model_path() else { return };
    let model = Arc::new(lql_storage::import::open(&path).expect("open SmolLM2"));
    let exec = Executor::new(model.clone(), 2).expect("plan SmolLM2");
    let d = exec.surface().hidden;
    // "The capital of France is" and a longer prompt (the batched GEMM path).
    let prompts: [&[u32]; 2] = [
        &[504, 3575, 282, 4649, 314],
        &[
            504, 3575, 282, 4649, 314, 7042, 30, 378, 1463, 282, 260, 2240,
        ],
    ];
    for layer in [0usize, 18] {
        for ids in prompts {
            let from = PromptFromLayer::new(&exec, ids, layer).unwrap();
            let base = exec.session().prefill(ids).unwrap();
            // Over the state it was run on, the shortcut is the whole pass too.
            assert_eq!(
                from.logits(&exec, model.clone()).unwrap().values,
                base.values
            );
            for seed in 1..3 {
                let f = AddedFeature {
                    layer,
                    gate: values(d, seed, 0.1),
                    gate_bias: 0.5,
                    up: values(d, seed + 10, 0.1),
                    up_bias: 1.0,
                    down: values(d, seed + 20, 2.0),
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
                let whole = exec
                    .with_source(state.clone())
                    .unwrap()
                    .session()
                    .prefill(ids)
                    .unwrap();
                assert_ne!(whole.values, base.values, "the feature changes the pass");
                let short = from.logits(&exec, state).unwrap();
                assert_eq!(
                    short.values,
                    whole.values,
                    "layer {layer}, {} ids",
                    ids.len()
                );
            }
        }
    }
}
