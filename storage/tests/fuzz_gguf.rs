//! Fuzz target: the GGUF header reader and the GGUF importer. Property: any byte buffer
//! is parsed to a typed result (never a panic, an abort or an allocation sized by a
//! claimed count); a file that parses is judged by the importer the same way, and its
//! metadata arrays decode without panicking. Seeds: `fuzz_corpus/gguf/`. See
//! `fuzz_support` for the budget (`LQL_FUZZ_SECS`).

mod fuzz_support;

use std::sync::Arc;

use lql_storage::format::gguf::synth::TinyModel;
use lql_storage::format::gguf::GgufFile;
use lql_storage::import;
use lql_storage::model::Backing;

fn tiny(arch: &str) -> TinyModel {
    let base = if arch == "qwen2" {
        TinyModel::qwen2()
    } else {
        TinyModel::llama()
    };
    TinyModel {
        layers: 1,
        hidden: 8,
        ffn: 16,
        heads: 2,
        kv_heads: 1,
        vocab: 260,
        ..base
    }
}

fn check(bytes: Vec<u8>) {
    let Ok(file) = GgufFile::from_bytes("fuzz.gguf", Backing::Owned(Arc::new(bytes))) else {
        return;
    };
    for kv in file.metadata() {
        if let Some(a) = kv.value.as_array() {
            let _ = a.to_strings();
            let _ = a.to_f32();
            let _ = a.to_i64();
        }
    }
    for t in file.tensors() {
        let _ = file.view(t);
    }
    if let Ok(model) = import::gguf::from_gguf(file) {
        let _ = model.tokenizer_spec();
    }
}

#[test]
fn fuzz_gguf_header() {
    fuzz_support::maybe_write_corpus("gguf", || {
        let llama = tiny("llama").to_bytes().unwrap();
        let qwen = tiny("qwen2").to_bytes().unwrap();
        // The header alone (metadata and tensor table, no data).
        let cut = llama.len() - 8 * 16 * 4;
        vec![
            ("llama.gguf".into(), llama.clone()),
            ("qwen2.gguf".into(), qwen),
            ("llama-header.gguf".into(), llama[..cut].to_vec()),
        ]
    });
    let seeds = fuzz_support::load_corpus("gguf");
    // The whole-file seeds open as models (the header-only one does not).
    let opened = seeds
        .iter()
        .filter(|s| {
            GgufFile::from_bytes("seed", Backing::Owned(Arc::new(s.to_vec())))
                .ok()
                .and_then(|f| import::gguf::from_gguf(f).ok())
                .is_some()
        })
        .count();
    assert_eq!(opened, 2);
    fuzz_support::fuzz("gguf", 3000, fuzz_support::mutated_bytes(seeds), check);
}
