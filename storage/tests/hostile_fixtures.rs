//! Builds the held-out hostile corpus under `tests/fixtures/hostile/` (run by
//! `repl/tests/hostile_corpus.rs` through the `lql` binary) with the project's own writers,
//! and checks the committed copy is present. `LQL_WRITE_HOSTILE_FIXTURES=1` rewrites it. Symlinks and FIFOs are planted by the corpus test at run time (they do not
//! travel through git).

mod vindex3_support;

use std::path::{Path, PathBuf};

use lql_storage::format::gguf::synth::TinyModel;
use lql_storage::format::vindex3::{extract, ExtractEncoding};
use serde_json::{json, Value};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hostile")
}

fn tiny() -> TinyModel {
    TinyModel {
        layers: 1,
        hidden: 32,
        ffn: 32,
        heads: 2,
        kv_heads: 1,
        vocab: 260,
        ..TinyModel::llama()
    }
}

fn set_json(p: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

fn safetensors_file(path: &Path, tensors: &[(&str, Vec<usize>, f32)]) {
    let data: Vec<(String, Vec<u8>, Vec<usize>)> = tensors
        .iter()
        .map(|(n, s, x)| {
            let b = (0..s.iter().product::<usize>())
                .flat_map(|_| x.to_le_bytes())
                .collect();
            (n.to_string(), b, s.clone())
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(n, b, s)| {
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b);
            (n.clone(), v.unwrap())
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn hf(dir: &Path, layers: u64) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&json!({
            "architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
            "num_hidden_layers": layers, "num_attention_heads": 2, "num_key_value_heads": 2,
            "vocab_size": 4, "rms_norm_eps": 1e-5, "max_position_embeddings": 64,
            "tie_word_embeddings": true
        }))
        .unwrap(),
    )
    .unwrap();
    let mut t: Vec<(String, Vec<usize>)> = vec![
        ("model.embed_tokens.weight".into(), vec![4, 8]),
        ("model.norm.weight".into(), vec![8]),
    ];
    for (n, s) in [
        ("input_layernorm.weight", vec![8]),
        ("post_attention_layernorm.weight", vec![8]),
        ("self_attn.q_proj.weight", vec![8, 8]),
        ("self_attn.k_proj.weight", vec![8, 8]),
        ("self_attn.v_proj.weight", vec![8, 8]),
        ("self_attn.o_proj.weight", vec![8, 8]),
        ("mlp.gate_proj.weight", vec![16, 8]),
        ("mlp.up_proj.weight", vec![16, 8]),
        ("mlp.down_proj.weight", vec![8, 16]),
    ] {
        t.push((format!("model.layers.0.{n}"), s));
    }
    let refs: Vec<(&str, Vec<usize>, f32)> = t
        .iter()
        .map(|(n, s)| (n.as_str(), s.clone(), 0.01))
        .collect();
    safetensors_file(&dir.join("model.safetensors"), &refs);
}

/// Every fixture, written under `out`.
fn build(out: &Path) {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).unwrap();
    // Good bases the corpus test plants symlinks and FIFOs into.
    tiny().write(&out.join("tiny.gguf")).unwrap();
    hf(&out.join("hf-small"), 1);
    let model = lql_storage::Model::open(&out.join("tiny.gguf")).unwrap();
    extract(
        &model,
        &out.join("small.vindex"),
        ExtractEncoding::Source,
        &mut |_| {},
    )
    .unwrap();
    // Layer counts of 1e9.
    let mut w = tiny().writer().unwrap();
    w.set_kv("llama.block_count", 1_000_000_000u32).unwrap();
    w.write(&out.join("layers-1e9.gguf")).unwrap();
    hf(&out.join("hf-layers-1e9"), 1_000_000_000);
    extract(
        &model,
        &out.join("layers-1e9.vindex"),
        ExtractEncoding::Source,
        &mut |_| {},
    )
    .unwrap();
    set_json(&out.join("layers-1e9.vindex/system_graph.json"), |g| {
        g["components"][0]["num_layers"] = json!(1_000_000_000u32);
        g["components"][0]["execution_surface"]["n_layers"] = json!(1_000_000_000u32);
    });
    // Huge claimed counts and lengths in headers.
    let mut g = std::fs::read(out.join("tiny.gguf")).unwrap();
    g[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    std::fs::write(out.join("tensor-count-2e40.gguf"), &g).unwrap();
    let mut g = std::fs::read(out.join("tiny.gguf")).unwrap();
    g[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(out.join("kv-count-max.gguf"), &g).unwrap();
    extract(
        &model,
        &out.join("huge-segment-header.vindex"),
        ExtractEncoding::Source,
        &mut |_| {},
    )
    .unwrap();
    let seg = out.join("huge-segment-header.vindex/segments/text.embedding.bin");
    let mut s = std::fs::read(&seg).unwrap();
    s[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&seg, &s).unwrap();
    // A repeated key in index.json.
    extract(
        &model,
        &out.join("duplicate-key.vindex"),
        ExtractEncoding::Source,
        &mut |_| {},
    )
    .unwrap();
    let idx = out.join("duplicate-key.vindex/index.json");
    let text = std::fs::read_to_string(&idx).unwrap();
    let text = text.replacen("{", "{\n  \"version\": 4,", 1);
    std::fs::write(&idx, text).unwrap();
}

#[test]
fn hostile_fixtures_are_current() {
    if std::env::var_os("LQL_WRITE_HOSTILE_FIXTURES").is_some() {
        build(&root());
    }
    // The committed fixtures exist (the corpus test reads them).
    for f in [
        "tiny.gguf",
        "hf-small/config.json",
        "small.vindex/index.json",
        "layers-1e9.gguf",
        "hf-layers-1e9/config.json",
        "layers-1e9.vindex/index.json",
        "tensor-count-2e40.gguf",
        "kv-count-max.gguf",
        "huge-segment-header.vindex/index.json",
        "duplicate-key.vindex/index.json",
    ] {
        assert!(root().join(f).is_file(), "missing fixture {f}");
    }
}
