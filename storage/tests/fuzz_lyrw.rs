//! Fuzz target: LYRW v2 bank files (the bank shape's segments). Property: `lyrw::parse`
//! gives a typed result for any bytes; every region it accepts lies inside the file and
//! every segment's bank is found by id. Seeds: `fuzz_corpus/lyrw/`. See `fuzz_support`
//! for the budget (`LQL_FUZZ_SECS`).

mod fuzz_support;
mod vindex3_support;

use std::path::Path;

use lql_storage::format::vindex3::lyrw::parse;

fn check(bytes: Vec<u8>) {
    if let Ok(f) = parse(Path::new("layer.lyrw"), &bytes) {
        for s in &f.segments {
            assert!(f.bank(s.bank_id).is_some());
            for &(o, l) in &s.regions {
                assert!(o + l <= bytes.len() as u64);
            }
        }
    }
}

#[test]
fn fuzz_lyrw() {
    fuzz_support::maybe_write_corpus("lyrw", || {
        vec![
            (
                "dense-2x64.lyrw".into(),
                vindex3_support::lyrw_dense(3, 2, 64),
            ),
            (
                "dense-1x32.lyrw".into(),
                vindex3_support::lyrw_dense(0, 1, 32),
            ),
        ]
    });
    let seeds = fuzz_support::load_corpus("lyrw");
    for s in &seeds {
        parse(Path::new("seed"), s).unwrap();
    }
    fuzz_support::fuzz("lyrw", 5000, fuzz_support::mutated_bytes(seeds), check);
}
