//! A model whose weights produce NaN is refused with the first layer and block where the
//! forward pass stops being finite — never a `null` probability or an empty "eos" text.

use std::io::{Seek, SeekFrom, Write};

use lql::Connection;
use lql_tests::default_model_path;

/// A copy of the default model with one layer's FFN norm set to NaN.
fn poisoned(dir: &std::path::Path, layer: usize) -> std::path::PathBuf {
    poisoned_with(dir, layer, f32::NAN)
}

/// A copy of the default model with one layer's FFN norm weights all `value`.
fn poisoned_with(dir: &std::path::Path, layer: usize, value: f32) -> std::path::PathBuf {
    let src = default_model_path();
    let out = dir.join(format!("poisoned-{value}.gguf"));
    std::fs::copy(&src, &out).unwrap();
    let (offset, nbytes) = {
        let g = lql_storage::format::gguf::GgufFile::open(&src).unwrap();
        let name = format!("blk.{layer}.ffn_norm.weight");
        let t = g.tensors().iter().find(|t| t.name == name).unwrap();
        (g.data_start() + t.offset, t.nbytes)
    };
    let mut f = std::fs::OpenOptions::new().write(true).open(&out).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    let v = value.to_le_bytes();
    for _ in 0..nbytes / 4 {
        f.write_all(&v).unwrap();
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

/// Large but finite weights (a norm weight of 1e12) overflow a later norm's mean square:
/// the answer is an error naming a layer, never a uniform distribution over the vocabulary
/// (every logit 0) or an empty "eos" generation.
#[test]
fn overflowing_finite_weights_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = poisoned_with(dir.path(), 5, 1e12);
    let conn = Connection::open(path.to_str().unwrap()).unwrap();
    for stmt in [
        "INFER 'The capital of France is' TOP 3",
        "GENERATE 'The capital of France is' MAX 4",
    ] {
        let e = conn.execute(stmt).unwrap_err();
        assert_eq!(e.code(), "LQL-E0801", "{stmt}: {e}");
        assert!(e.message.contains("layer"), "{stmt}: {e}");
    }
}

/// Scales compose by product: six `UPDATE … down_scale = 1e6` would make 1e36. The
/// second is refused (the composed scale leaves ±1e6) and the state stays as it was.
#[test]
fn composed_scales_beyond_the_range_are_refused() {
    let conn = Connection::open(default_model_path().to_str().unwrap()).unwrap();
    let before = conn
        .execute("INFER 'The capital of France is' TOP 1")
        .unwrap();
    let update = "UPDATE features SET down_scale = 1000000 WHERE layer = 20 AND feature = 7";
    conn.execute(update).unwrap();
    let e = conn.execute(update).unwrap_err();
    assert!(e.message.contains("composes to"), "{e}");
    // Only the first stands: undoing it restores the model's answer.
    conn.execute("UPDATE features SET down_scale = 0.000001 WHERE layer = 20 AND feature = 7")
        .unwrap();
    let after = conn
        .execute("INFER 'The capital of France is' TOP 1")
        .unwrap();
    let token = |r: &lql::Rows| r.row(0).unwrap().get::<_, String>("token").unwrap();
    assert_eq!(token(&before), token(&after));
}
