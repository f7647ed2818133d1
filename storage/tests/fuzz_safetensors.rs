//! Fuzz target: the safetensors header of a Hugging Face folder and the HF importer.
//! Property: a folder whose `model.safetensors` holds any bytes (and whose `config.json`
//! is a seed with structural edits) opens to a typed result: never a panic, an abort or a
//! hang. Seeds: `fuzz_corpus/safetensors/` (`*.safetensors` weights, `*.json` configs).
//! See `fuzz_support` for the budget (`LQL_FUZZ_SECS`).

mod fuzz_support;

use lql_storage::format::safetensors::HfFolder;
use lql_storage::import;

/// One f32 tensor per operand of a 1-layer llama with hidden 8, FFN 16, vocab 4.
fn seed_weights() -> Vec<u8> {
    let shapes: Vec<(&str, Vec<usize>)> = vec![
        ("model.embed_tokens.weight", vec![4, 8]),
        ("model.norm.weight", vec![8]),
        ("model.layers.0.input_layernorm.weight", vec![8]),
        ("model.layers.0.post_attention_layernorm.weight", vec![8]),
        ("model.layers.0.self_attn.q_proj.weight", vec![8, 8]),
        ("model.layers.0.self_attn.k_proj.weight", vec![8, 8]),
        ("model.layers.0.self_attn.v_proj.weight", vec![8, 8]),
        ("model.layers.0.self_attn.o_proj.weight", vec![8, 8]),
        ("model.layers.0.mlp.gate_proj.weight", vec![16, 8]),
        ("model.layers.0.mlp.up_proj.weight", vec![16, 8]),
        ("model.layers.0.mlp.down_proj.weight", vec![8, 16]),
    ];
    let data: Vec<(String, Vec<u8>, Vec<usize>)> = shapes
        .into_iter()
        .map(|(n, s)| {
            let bytes = (0..s.iter().product::<usize>())
                .flat_map(|i| (i as f32 * 0.01).to_le_bytes())
                .collect();
            (n.to_string(), bytes, s)
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(n, b, s)| {
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, s.clone(), b);
            (n.clone(), v.unwrap())
        })
        .collect();
    safetensors::serialize(views, None).unwrap()
}

const CONFIG: &str = r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 8,
 "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
 "num_key_value_heads": 2, "vocab_size": 4, "rms_norm_eps": 1e-5,
 "max_position_embeddings": 64, "tie_word_embeddings": true}"#;

#[test]
fn fuzz_safetensors_header() {
    fuzz_support::maybe_write_corpus("safetensors", || {
        vec![
            ("llama-1layer.safetensors".into(), seed_weights()),
            ("config.json".into(), CONFIG.as_bytes().to_vec()),
        ]
    });
    let all = fuzz_support::load_corpus("safetensors");
    // Sorted by name: config.json first, then the weights.
    let (configs, weights) = (vec![all[0].clone()], all[1..].to_vec());
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    std::fs::write(d.join("config.json"), &configs[0]).unwrap();
    std::fs::write(d.join("model.safetensors"), &weights[0]).unwrap();
    import::hf::open(&d).expect("the seed opens");
    let strategy = (
        fuzz_support::mutated_bytes(weights),
        fuzz_support::mutated_json(configs),
    );
    fuzz_support::fuzz("safetensors", 600, strategy, move |(w, c)| {
        std::fs::write(d.join("config.json"), &c).unwrap();
        std::fs::write(d.join("model.safetensors"), &w).unwrap();
        if let Ok(f) = HfFolder::open(&d) {
            for t in &f.tensors {
                let _ = f.view(t);
            }
        }
        let _ = import::hf::open(&d);
    });
}
