//! Fuzz target: `.lqlpatch` files (the edit overlay's patch format). Property: `decode`
//! gives a typed result for any bytes, never a panic or an allocation sized by a hostile
//! count; what it accepts re-encodes to the same bytes. Half the cases re-seal the trailing
//! sha256 after mutating, so the parser's inner checks (counts, layers, text lengths,
//! vector sizes) are reached, not only the checksum. Seeds: `fuzz_corpus/patch/`. See
//! `fuzz_support` for the budget (`LQL_FUZZ_SECS`).

mod fuzz_support;

use std::path::Path;

use lql_storage::overlay::patch::{decode, encode, PatchFile};
use lql_storage::overlay::{AddedFeature, Edge, Edit, FeatureScale};
use proptest::prelude::*;
use sha2::{Digest, Sha256};

fn seed(hidden: usize, with_edge: bool) -> PatchFile {
    PatchFile {
        base_sha256: [7; 32],
        hidden,
        n_layers: 3,
        edits: vec![
            Edit::Add(AddedFeature {
                layer: 1,
                gate: (0..hidden).map(|i| i as f32 * 0.5).collect(),
                gate_bias: -0.5,
                up: vec![0.25; hidden],
                up_bias: 1.0,
                down: vec![-1.0; hidden],
                edge: with_edge.then(|| Edge {
                    entity: "France".into(),
                    relation: "capital".into(),
                    target: "Rome".into(),
                    prompt: "The capital of France is".into(),
                }),
            }),
            Edit::Scale(FeatureScale {
                layer: 2,
                feature: 5,
                gate_scale: Some(0.5),
                down_scale: None,
            }),
        ],
    }
}

/// Replace the trailing sha256 with the digest of what precedes it.
fn reseal(mut b: Vec<u8>) -> Vec<u8> {
    if b.len() >= 32 {
        let n = b.len() - 32;
        let sum: [u8; 32] = Sha256::digest(&b[..n]).into();
        b[n..].copy_from_slice(&sum);
    }
    b
}

#[test]
fn fuzz_patch() {
    fuzz_support::maybe_write_corpus("patch", || {
        vec![
            ("edge-h8.lqlpatch".into(), encode(&seed(8, true))),
            ("scale-h4.lqlpatch".into(), encode(&seed(4, false))),
        ]
    });
    let seeds = fuzz_support::load_corpus("patch");
    for s in &seeds {
        decode(Path::new("seed.lqlpatch"), s).expect("the seed decodes");
    }
    let strategy = (fuzz_support::mutated_bytes(seeds), any::<bool>()).prop_map(|(b, seal)| {
        if seal {
            reseal(b)
        } else {
            b
        }
    });
    fuzz_support::fuzz("patch", 3000, strategy, |bytes| {
        if let Ok(p) = decode(Path::new("f.lqlpatch"), &bytes) {
            assert_eq!(
                encode(&p),
                bytes,
                "an accepted patch re-encodes to its bytes"
            );
        }
    });
}
