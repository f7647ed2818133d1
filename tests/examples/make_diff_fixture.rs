//! Writes the DIFF fixture pair under `tests/fixtures/diff/`: a tiny synthetic llama model in
//! F32 (`tiny_f32.gguf`) and the same model with every matrix quantised to Q4_1 by LQL's
//! encoder (`tiny_q4_1.gguf`; norms stay F32). `expected.py` then computes the expected DIFF
//! figures with numpy alone. Run once: `cargo run --release -p lql-tests --example
//! make_diff_fixture`.

use lql_storage::codec::encode_row;
use lql_storage::format::gguf::synth::TinyModel;
use lql_storage::format::gguf::{GgufFile, GgufWriter};
use lql_storage::DType;

fn main() {
    let dir = lql_tests::repo_root().join("tests/fixtures/diff");
    let tiny = TinyModel {
        hidden: 32,
        ffn: 64,
        heads: 2,
        kv_heads: 1,
        seed: 12,
        ..TinyModel::llama()
    };
    let f32_path = dir.join("tiny_f32.gguf");
    tiny.write(&f32_path).unwrap();
    let src = GgufFile::open(&f32_path).unwrap();
    let mut w = GgufWriter::new();
    for kv in src.metadata() {
        w.add_kv(kv.key.clone(), kv.value.clone()).unwrap();
    }
    for t in src.tensors() {
        let v = src.view(t);
        if t.shape.len() == 2 {
            let vals: Vec<f32> = v
                .bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let mut out = Vec::new();
            encode_row(DType::Q4_1, &vals, &mut out).unwrap();
            w.add_tensor(&t.name, DType::Q4_1, &t.shape, out).unwrap();
        } else {
            w.add_tensor(&t.name, t.dtype, &t.shape, v.bytes.to_vec())
                .unwrap();
        }
    }
    w.write(&dir.join("tiny_q4_1.gguf")).unwrap();
    println!("wrote {}", dir.display());
}
