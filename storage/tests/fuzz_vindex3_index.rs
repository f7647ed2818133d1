//! Fuzz target: a VINDEX3 container's `index.json` and `system_graph.json` (with real
//! segments beside them). Property: opening, VERIFY, STATS and the SHOW listings give a
//! typed result for any edit of either file: never a panic, an abort, a hang or a read
//! outside the container. Seeds: `fuzz_corpus/vindex3_index/` (`index*.json`,
//! `system_graph*.json`). See `fuzz_support` for the budget (`LQL_FUZZ_SECS`).

mod fuzz_support;
mod vindex3_support;

use lql_storage::format::vindex3::{
    extract, open_model, show_components, show_representations, show_tensors, stats, verify,
    ExtractEncoding,
};
use proptest::prelude::*;

fn small() -> lql_storage::Model {
    vindex3_support::synthetic(vindex3_support::Geometry {
        layers: 1,
        hidden: 32,
        ffn: 32,
        heads: 2,
        kv_heads: 1,
        vocab: 8,
        tied: false,
        matrix: lql_storage::DType::Q8_0,
    })
}

#[test]
fn fuzz_index_and_graph() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("c");
    extract(&small(), &c, ExtractEncoding::Source, &mut |_| {}).unwrap();
    fuzz_support::maybe_write_corpus("vindex3_index", || {
        vec![
            (
                "index.json".into(),
                std::fs::read(c.join("index.json")).unwrap(),
            ),
            (
                "system_graph.json".into(),
                std::fs::read(c.join("system_graph.json")).unwrap(),
            ),
        ]
    });
    let all = fuzz_support::load_corpus("vindex3_index");
    let (index, graph) = (vec![all[0].clone()], vec![all[1].clone()]);
    std::fs::write(c.join("index.json"), &index[0]).unwrap();
    std::fs::write(c.join("system_graph.json"), &graph[0]).unwrap();
    open_model(&c).expect("the seed opens");
    // A file outside the container that no edit may reach.
    std::fs::write(dir.path().join("outside.bin"), b"OUTSIDE").unwrap();
    let strategy = prop_oneof![
        (
            fuzz_support::mutated_json(index.clone()),
            Just(graph[0].clone())
        ),
        (
            Just(index[0].clone()),
            fuzz_support::mutated_json(graph.clone())
        ),
    ];
    fuzz_support::fuzz("vindex3_index", 300, strategy, move |(i, g)| {
        std::fs::write(c.join("index.json"), &i).unwrap();
        std::fs::write(c.join("system_graph.json"), &g).unwrap();
        if let Ok(m) = open_model(&c) {
            let _ = m.tokenizer_spec();
        }
        if let Ok(rows) = verify(&c) {
            for r in rows {
                assert!(!r.detail.contains("OUTSIDE"), "{r:?}");
            }
        }
        let _ = stats(&c);
        let _ = show_tensors(&c);
        let _ = show_components(&c);
        let _ = show_representations(&c);
    });
}
