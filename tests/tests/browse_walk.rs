//! WALK acceptance on SmolLM2: the per-layer top-10 features of RESIDUAL and EMBEDDING walks
//! equal numpy's (fixtures from `tests/fixtures/browse/gen_walk_fixtures.py`), scores within
//! 1e-3; labels agree with numpy's unembedding · down column.

use std::path::PathBuf;
use std::sync::Arc;

use lql_exec::browse::{labels, walk, WalkMode, WalkOptions};
use lql_exec::Executor;
use lql_storage::model::OperandSource;
use serde_json::Value as Json;

fn model_path() -> PathBuf {
    lql_tests::default_model_path()
}

fn fixture() -> Json {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/browse/walk_smollm2.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Our top-10 equals numpy's, allowing a swap at the boundary only where numpy's 10th and
/// 11th magnitudes are within `tol`; each of our scores is within `tol` of numpy's.
fn check_layer(what: &str, ours: &[(usize, f32)], want: &[Json], tol: f32) {
    let want: Vec<(usize, f32)> = want
        .iter()
        .map(|r| {
            (
                r[0].as_u64().unwrap() as usize,
                r[1].as_f64().unwrap() as f32,
            )
        })
        .collect();
    assert_eq!(ours.len(), 10, "{what}: 10 hits");
    let boundary = want[9].1.abs();
    for &(f, s) in ours {
        match want.iter().find(|w| w.0 == f) {
            Some(&(_, ws)) => assert!(
                (s - ws).abs() <= tol,
                "{what}: feature {f} score {s} vs numpy {ws}"
            ),
            None => panic!("{what}: feature {f} ({s}) is not in numpy's top 12 {want:?}"),
        }
    }
    for &(f, ws) in &want[..10] {
        if !ours.iter().any(|o| o.0 == f) {
            assert!(
                (ws.abs() - boundary).abs() <= tol,
                "{what}: numpy's feature {f} ({ws}) missing from ours {ours:?}"
            );
        }
    }
}

#[test]
fn walk_matches_numpy_on_smollm2() {
    let path = model_path();
    let model = Arc::new(lql_storage::import::open(&path).expect("open model"));
    let src: Arc<dyn OperandSource> = model.clone();
    let exec = Executor::new(src.clone(), 0).expect("executor");
    let fx = fixture();
    for p in fx["prompts"].as_array().unwrap() {
        let prompt = p["prompt"].as_str().unwrap();
        let ids: Vec<u32> = p["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        for mode in [WalkMode::Residual, WalkMode::Embedding] {
            let opts = WalkOptions {
                top: 10,
                layers: None,
                mode: Some(mode),
            };
            let r = walk(src.as_ref(), Some(&exec), &ids, &opts).expect("walk");
            assert_eq!(r.layers.len(), 30);
            let key = if mode == WalkMode::Residual {
                "residual"
            } else {
                "embedding"
            };
            for l in &r.layers {
                let ours: Vec<(usize, f32)> = l.hits.iter().map(|h| (h.feature, h.gate)).collect();
                let want = p[key][l.layer].as_array().unwrap();
                check_layer(&format!("{prompt:?} {key} L{}", l.layer), &ours, want, 1e-3);
                if mode == WalkMode::Residual {
                    for h in &l.hits {
                        let w = want
                            .iter()
                            .find(|w| w[0].as_u64() == Some(h.feature as u64))
                            .unwrap();
                        let act = h.activation.expect("activation in RESIDUAL");
                        let wa = w[2].as_f64().unwrap() as f32;
                        assert!(
                            (act - wa).abs() <= 1e-3 * (1.0 + wa.abs()),
                            "{prompt:?} L{} F{} activation {act} vs {wa}",
                            l.layer,
                            h.feature
                        );
                    }
                } else {
                    assert!(l.hits.iter().all(|h| h.activation.is_none()));
                }
            }
        }
        // Labels: numpy's top-5 tokens of unembedding · down column.
        for lab in p["labels"].as_array().unwrap() {
            let layer = lab["layer"].as_u64().unwrap() as usize;
            let feature = lab["feature"].as_u64().unwrap() as usize;
            let got = &labels::compute_labels(src.as_ref(), layer, &[feature]).unwrap()[0];
            let want: Vec<(u32, f32)> = lab["top"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| (t[0].as_u64().unwrap() as u32, t[1].as_f64().unwrap() as f32))
                .collect();
            assert_eq!(got.top[0].0, want[0].0, "L{layer} F{feature} top token");
            for (g, w) in got.top.iter().zip(&want) {
                assert!(
                    (g.1 - w.1).abs() < 1e-3,
                    "L{layer} F{feature}: {g:?} vs {w:?}"
                );
            }
        }
    }
}

#[test]
fn browse_only_binding_defaults_to_embedding_and_refuses_residual() {
    let path = model_path();
    let mut model = lql_storage::import::open(&path).expect("open model");
    // A browse slice: drop attention (what a gate-only container lacks).
    model
        .operands
        .retain(|k, _| !matches!(k.role, lql_storage::Role::AttnQ | lql_storage::Role::AttnK));
    let r = walk(
        &model,
        None,
        &[504, 3575, 282, 4649, 314],
        &WalkOptions::default(),
    )
    .unwrap();
    assert_eq!(r.mode, WalkMode::Embedding);
    assert!(r.mode_defaulted);
    assert!(
        r.note.as_deref().unwrap().contains("attn_q of layers 0-29"),
        "{:?}",
        r.note
    );
    let err = walk(
        &model,
        None,
        &[314],
        &WalkOptions {
            mode: Some(WalkMode::Residual),
            ..WalkOptions::default()
        },
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("attn_q of layers 0-29") && msg.contains("attn_k of layers 0-29"),
        "{msg}"
    );
}
