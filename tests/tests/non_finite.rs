//! A model whose weights produce NaN is refused with the first layer and block where the
//! forward pass stops being finite — never a `null` probability or an empty "eos" text.

use std::io::{Seek, SeekFrom, Write};

use lql::Connection;
use lql_tests::default_model_path;

/// A copy of the default model with one layer's FFN norm set to NaN.
fn poisoned(dir: &std::path::Path, layer: usize) -> std::path::PathBuf {
    let src = default_model_path();
    let out = dir.join("nan.gguf");
    std::fs::copy(&src, &out).unwrap();
    let (offset, nbytes) = {
        let g = lql_storage::format::gguf::GgufFile::open(&src).unwrap();
        let name = format!("blk.{layer}.ffn_norm.weight");
        let t = g.tensors().iter().find(|t| t.name == name).unwrap();
        (g.data_start() + t.offset, t.nbytes)
    };
    let mut f = std::fs::OpenOptions::new().write(true).open(&out).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let nan = f32::NAN.to_le_bytes();
    for _ in 0..nbytes / 4 {
        f.write_all(&nan).unwrap();
    }
    out
}

#[test]
fn nan_weights_are_refused_naming_the_layer() {
    let dir = tempfile::tempdir().unwrap();
    let path = poisoned(dir.path(), 5);
    let conn = Connection::open(path.to_str().unwrap()).unwrap();
    for stmt in [
        "INFER 'The capital of France is' TOP 3",
        "GENERATE 'The capital of France is' MAX 4",
        "WALK 'The capital of France is' TOP 2 LAYERS 6-7 MODE RESIDUAL",
        "TRACE 'The capital of France is'",
    ] {
        let e = conn.execute(stmt).unwrap_err();
        assert_eq!(e.code(), "LQL-E0801", "{stmt}: {e}");
        assert!(e.message.contains("finite"), "{stmt}: {e}");
    }
    let e = conn
        .execute("INFER 'The capital of France is'")
        .unwrap_err();
    assert!(e.message.contains("layer 5 FFN"), "{e}");
    // Layers before the poisoned one still browse.
    assert!(conn
        .execute("WALK 'The capital of France is' TOP 2 LAYERS 2-3 MODE RESIDUAL")
        .is_ok());
}
