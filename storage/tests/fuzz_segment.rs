//! Fuzz target: the VINDEX3 segment header (`[u64 length][JSON header][payload]`).
//! Property: `parse_header` gives a typed result for any bytes and any claimed file length,
//! and every tensor range it accepts lies inside the payload. Seeds:
//! `fuzz_corpus/segment/`. See `fuzz_support` for the budget (`LQL_FUZZ_SECS`).

mod fuzz_support;
mod vindex3_support;

use std::path::Path;

use lql_storage::format::vindex3::segment::parse_header;
use lql_storage::format::vindex3::{extract, ExtractEncoding};
use proptest::prelude::*;

fn check((bytes, extra): (Vec<u8>, u64)) {
    let p = Path::new("segments/text.embedding.bin");
    // The real length, and a claimed length that disagrees with the buffer.
    for len in [bytes.len() as u64, extra] {
        if let Ok(s) = parse_header(p, &bytes, len) {
            for t in &s.header.tensors {
                let end = s.payload_start + t.offset + t.len;
                assert!(end <= len, "accepted a tensor past the file: {t:?}");
            }
        }
    }
    let _ = parse_header(p, &bytes, bytes.len() as u64);
}

#[test]
fn fuzz_segment_header() {
    fuzz_support::maybe_write_corpus("segment", || {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("c");
        let model = vindex3_support::synthetic(vindex3_support::Geometry {
            layers: 1,
            hidden: 32,
            ffn: 32,
            heads: 2,
            kv_heads: 1,
            vocab: 8,
            tied: false,
            matrix: lql_storage::DType::Q8_0,
        });
        extract(&model, &out, ExtractEncoding::Source, &mut |_| {}).unwrap();
        [
            "text.final_norm.bin",
            "text.output_head.bin",
            "text.decoder_stack.bin",
        ]
        .iter()
        .map(|n| {
            (
                n.to_string(),
                std::fs::read(out.join("segments").join(n)).unwrap(),
            )
        })
        .collect()
    });
    let seeds = fuzz_support::load_corpus("segment");
    for s in &seeds {
        parse_header(Path::new("seed"), s, s.len() as u64).unwrap();
    }
    let strategy = (
        fuzz_support::mutated_bytes(seeds),
        prop::sample::select(&fuzz_support::HOSTILE[..]),
    );
    fuzz_support::fuzz("segment", 3000, strategy, check);
}
