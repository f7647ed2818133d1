//! Importers on synthetic sources: tiny llama/qwen2 GGUFs and Hugging Face folders, and
//! the refusals (unknown architecture, missing or misshapen tensors, unknown tensors).

use std::path::Path;

use lql_storage::format::gguf::synth::TinyModel;
use lql_storage::format::gguf::{GgufFile, GgufWriter};
use lql_storage::import::{self, SourceFormat};
use lql_storage::model::{OperandKey, Role, SourceKind};
use lql_storage::surface::RopePairing;
use lql_storage::tokenizer_spec::TokenizerSpec;
use lql_storage::{DType, OperandSource, StorageError};

fn write_tiny(dir: &Path, m: &TinyModel) -> std::path::PathBuf {
    let p = dir.join(format!("{}.gguf", m.arch));
    m.write(&p).unwrap();
    p
}

/// Rewrite a GGUF through `edit`.
fn edited(src: &Path, dst: &Path, edit: impl FnOnce(&mut GgufWriter)) {
    let f = GgufFile::open(src).unwrap();
    let mut w = GgufWriter::from_file(&f).unwrap();
    edit(&mut w);
    w.write(dst).unwrap();
}

#[track_caller]
fn tensor_err(r: lql_storage::Result<lql_storage::Model>, tensor: &str) -> String {
    match r {
        Err(StorageError::Tensor {
            tensor: t, message, ..
        }) => {
            assert_eq!(t, tensor, "{message}");
            message
        }
        Err(e) => panic!("expected a Tensor error for {tensor}, got {e:?}"),
        Ok(_) => panic!("expected a Tensor error for {tensor}, opened fine"),
    }
}

#[test]
fn tiny_llama_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_tiny(dir.path(), &TinyModel::llama());
    assert_eq!(import::detect(&p).unwrap(), SourceFormat::Gguf);
    let m = import::open(&p).unwrap();
    let s = &m.surface;
    assert_eq!(m.kind, SourceKind::Gguf);
    assert_eq!(s.rope_pairing, RopePairing::Adjacent);
    assert_eq!((s.n_layers, s.hidden, s.ffn), (2, 64, 128));
    assert_eq!(
        (s.n_heads, s.n_kv_heads, s.head_dim, s.vocab),
        (4, 2, 16, 320)
    );
    assert!(s.tied_head && !s.attn_bias);
    assert_eq!(s.special.bos, Some(257));
    assert_eq!(s.special.eos, Some(258));
    assert_eq!(s.special.eot, vec![256], "<|endoftext|> joins the stop set");
    let v = m.require(OperandKey::layer(1, Role::FfnDown)).unwrap();
    assert_eq!((v.dtype, v.shape), (DType::F32, &[128usize, 64][..]));
    assert_eq!(v.bytes.len(), 128 * 64 * 4);
    match &*m.tokenizer_spec().unwrap() {
        TokenizerSpec::Gguf { vocab, .. } => {
            assert_eq!(vocab.tokens.len(), 320);
            assert_eq!(vocab.tokens[32], "Ġ");
            assert_eq!(vocab.token_types[257], 3);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn tiny_qwen2_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_tiny(dir.path(), &TinyModel::qwen2());
    let m = import::open(&p).unwrap();
    let s = &m.surface;
    assert_eq!(s.source_architecture, "qwen2");
    assert_eq!(s.rope_pairing, RopePairing::HalfSplit);
    assert!(s.attn_bias && !s.tied_head);
    assert_eq!(s.rope_theta, 1_000_000.0);
    let b = m.require(OperandKey::layer(0, Role::AttnKBias)).unwrap();
    assert_eq!(b.shape, &[32]);
    let o = m.require(OperandKey::global(Role::Output)).unwrap();
    assert_eq!(o.shape, &[64, 320]);
    assert_eq!(m.operands.len(), 2 + 1 + 2 * 12);
}

/// An unknown architecture opens for inspection only: every tensor as stored, no
/// operands, and the reason naming it and the supported architectures.
#[test]
fn unknown_architecture_opens_for_inspection_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_tiny(dir.path(), &TinyModel::llama());
    let dst = dir.path().join("g.gguf");
    edited(&src, &dst, |w| {
        w.set_kv("general.architecture", "mamba").unwrap();
    });
    let m = import::open(&dst).unwrap();
    let u = m.uninterpreted.as_ref().expect("opened for inspection");
    assert_eq!(u.architecture, "mamba");
    assert!(
        u.reason.contains("`mamba`") && u.reason.contains("gemma3"),
        "{}",
        u.reason
    );
    let n = lql_storage::format::gguf::GgufFile::open(&dst)
        .unwrap()
        .tensors()
        .len();
    assert_eq!(u.tensors.len(), n);
    assert!(m.operands.is_empty());
}

#[test]
fn missing_tensor_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_tiny(dir.path(), &TinyModel::llama());
    let dst = dir.path().join("m.gguf");
    edited(&src, &dst, |w| {
        assert!(w.remove_tensor("blk.1.ffn_up.weight"))
    });
    let m = tensor_err(import::open(&dst), "blk.1.ffn_up.weight");
    assert!(m.contains("missing"), "{m}");
}

#[test]
fn qwen2_without_biases_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_tiny(dir.path(), &TinyModel::qwen2());
    let dst = dir.path().join("m.gguf");
    edited(&src, &dst, |w| {
        w.remove_tensor("blk.0.attn_q.bias");
    });
    tensor_err(import::open(&dst), "blk.0.attn_q.bias");
}

#[test]
fn misshapen_tensor_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_tiny(dir.path(), &TinyModel::llama());
    let dst = dir.path().join("s.gguf");
    edited(&src, &dst, |w| {
        w.remove_tensor("blk.0.attn_q.weight");
        w.add_f32_tensor("blk.0.attn_q.weight", &[64, 48], &[0.0; 64 * 48])
            .unwrap();
    });
    let m = tensor_err(import::open(&dst), "blk.0.attn_q.weight");
    assert!(m.contains("[64, 64]"), "{m}");
}

#[test]
fn unknown_tensor_and_out_of_range_layer_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_tiny(dir.path(), &TinyModel::llama());
    let dst = dir.path().join("u.gguf");
    edited(&src, &dst, |w| {
        w.add_f32_tensor("blk.0.attn_q_norm.weight", &[16], &[1.0; 16])
            .unwrap();
    });
    tensor_err(import::open(&dst), "blk.0.attn_q_norm.weight");
    edited(&src, &dst, |w| {
        w.add_f32_tensor("blk.7.ffn_norm.weight", &[64], &[1.0; 64])
            .unwrap();
    });
    tensor_err(import::open(&dst), "blk.7.ffn_norm.weight");
}

#[test]
fn vocabulary_and_embedding_must_agree() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_tiny(dir.path(), &TinyModel::llama());
    let dst = dir.path().join("v.gguf");
    edited(&src, &dst, |w| {
        let toks = lql_storage::format::gguf::synth::byte_level_vocab(300);
        w.set_kv(
            "tokenizer.ggml.tokens",
            lql_storage::format::gguf::MetaValue::str_array(&toks),
        )
        .unwrap();
    });
    match import::open(&dst) {
        Err(StorageError::Format { field, message, .. }) => {
            assert_eq!(field, "tokenizer.ggml.tokens");
            assert!(
                message.contains("320") && message.contains("300"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn split_gguf_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_tiny(dir.path(), &TinyModel::llama());
    let dst = dir.path().join("s.gguf");
    edited(&src, &dst, |w| {
        w.add_kv("split.count", lql_storage::format::gguf::MetaValue::U16(3))
            .unwrap();
    });
    match import::open(&dst) {
        Err(StorageError::Unsupported(m)) => assert!(m.contains("split"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_hyperparameter_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_tiny(dir.path(), &TinyModel::llama());
    let dst = dir.path().join("h.gguf");
    edited(&src, &dst, |w| {
        w.remove_kv("llama.block_count");
    });
    match import::open(&dst) {
        Err(StorageError::Format { field, .. }) => assert_eq!(field, "llama.block_count"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn detection_refuses_what_it_cannot_open() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, b"PK\x03\x04junk").unwrap();
    assert!(matches!(
        import::open(&junk),
        Err(StorageError::Format { ref field, .. }) if field == "magic"
    ));
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(matches!(
        import::open(&empty),
        Err(StorageError::Unsupported(_))
    ));
    let v = dir.path().join("v");
    std::fs::create_dir(&v).unwrap();
    std::fs::write(v.join("index.json"), "{}").unwrap();
    assert_eq!(import::detect(&v).unwrap(), SourceFormat::Vindex3);
    // Handed to the VINDEX3 reader, which refuses an index without a schema.
    assert!(import::open(&v).is_err());
    // An empty file is not a model either.
    let e = dir.path().join("empty.gguf");
    std::fs::write(&e, b"").unwrap();
    assert!(matches!(import::open(&e), Err(StorageError::Format { .. })));
    assert!(matches!(
        GgufFile::open(&e),
        Err(StorageError::Format { ref field, .. }) if field == "magic"
    ));
}

// ---- Hugging Face folders ------------------------------------------------------------

struct HfTensor {
    name: String,
    dtype: safetensors::Dtype,
    /// HF order ([out, in]).
    shape: Vec<usize>,
    data: Vec<u8>,
}

fn hf_tensor(name: String, shape: &[usize], dtype: safetensors::Dtype, seed: u32) -> HfTensor {
    let n: usize = shape.iter().product();
    let data: Vec<u8> = (0..n)
        .flat_map(|i| {
            let v = ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 1000.0
                - 0.5;
            match dtype {
                safetensors::Dtype::F32 => v.to_le_bytes().to_vec(),
                safetensors::Dtype::F16 => half::f16::from_f32(v).to_le_bytes().to_vec(),
                _ => half::bf16::from_f32(v).to_le_bytes().to_vec(),
            }
        })
        .collect();
    HfTensor {
        name,
        dtype,
        shape: shape.to_vec(),
        data,
    }
}

/// A tiny HF llama folder: 2 layers, hidden 32, FFN 64, 4 heads / 2 KV heads, vocab 300,
/// sharded in two files with an index.
fn hf_llama(dir: &Path, config: &str, lm_head: bool, bias: bool) {
    use safetensors::Dtype::{BF16, F16, F32};
    let (h, f, kv, v) = (32, 64, 16, 300);
    let mut ts = vec![
        hf_tensor("model.embed_tokens.weight".into(), &[v, h], BF16, 1),
        hf_tensor("model.norm.weight".into(), &[h], F32, 2),
    ];
    if lm_head {
        ts.push(hf_tensor("lm_head.weight".into(), &[v, h], F16, 3));
    }
    for l in 0..2 {
        let n = |s: &str| format!("model.layers.{l}.{s}");
        ts.push(hf_tensor(n("input_layernorm.weight"), &[h], F32, 4));
        ts.push(hf_tensor(n("self_attn.q_proj.weight"), &[h, h], F16, 5));
        ts.push(hf_tensor(n("self_attn.k_proj.weight"), &[kv, h], F16, 6));
        ts.push(hf_tensor(n("self_attn.v_proj.weight"), &[kv, h], F32, 7));
        if bias {
            ts.push(hf_tensor(n("self_attn.q_proj.bias"), &[h], F32, 5));
            ts.push(hf_tensor(n("self_attn.k_proj.bias"), &[kv], F32, 6));
            ts.push(hf_tensor(n("self_attn.v_proj.bias"), &[kv], F32, 7));
        }
        ts.push(hf_tensor(n("self_attn.o_proj.weight"), &[h, h], BF16, 8));
        ts.push(hf_tensor(
            n("post_attention_layernorm.weight"),
            &[h],
            F32,
            9,
        ));
        ts.push(hf_tensor(n("mlp.gate_proj.weight"), &[f, h], BF16, 10));
        ts.push(hf_tensor(n("mlp.up_proj.weight"), &[f, h], BF16, 11));
        ts.push(hf_tensor(n("mlp.down_proj.weight"), &[h, f], BF16, 12));
    }
    let (a, b) = ts.split_at(ts.len() / 2);
    let mut map = serde_json::Map::new();
    for (file, part) in [
        ("model-00001-of-00002.safetensors", a),
        ("model-00002-of-00002.safetensors", b),
    ] {
        let views: Vec<(String, safetensors::tensor::TensorView)> = part
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    safetensors::tensor::TensorView::new(t.dtype, t.shape.clone(), &t.data)
                        .unwrap(),
                )
            })
            .collect();
        std::fs::write(dir.join(file), safetensors::serialize(views, None).unwrap()).unwrap();
        for t in part {
            map.insert(t.name.clone(), file.into());
        }
    }
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    std::fs::write(dir.join("config.json"), config).unwrap();
    let tok = serde_json::json!({
        "version": "1.0",
        "added_tokens": [
            {"id": 0, "content": "<|endoftext|>", "special": true},
            {"id": 1, "content": "<|im_start|>", "special": true},
            {"id": 2, "content": "<|im_end|>", "special": true}
        ],
        "model": {"type": "BPE", "vocab": {}, "merges": []}
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"add_bos_token": false, "chat_template": "{{ messages }}", "eos_token": "<|im_end|>"}"#,
    )
    .unwrap();
}

const CONFIG_NEW: &str = r#"{
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
  "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"},
  "dtype": "bfloat16", "max_position_embeddings": 8192, "vocab_size": 300,
  "tie_word_embeddings": true, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2
}"#;

const CONFIG_CLASSIC: &str = r#"{
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
  "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
  "rope_theta": 1000000.0, "torch_dtype": "float32", "max_position_embeddings": 4096,
  "vocab_size": 300, "tie_word_embeddings": false, "hidden_act": "silu",
  "rope_scaling": null, "bos_token_id": 0, "eos_token_id": [2, 0]
}"#;

#[test]
fn hf_llama_folder_new_spelling() {
    let dir = tempfile::tempdir().unwrap();
    hf_llama(dir.path(), CONFIG_NEW, false, false);
    assert_eq!(import::detect(dir.path()).unwrap(), SourceFormat::HfFolder);
    let m = import::open(dir.path()).unwrap();
    assert_eq!(m.kind, SourceKind::Safetensors);
    assert_eq!(m.backings.len(), 2);
    let s = &m.surface;
    assert_eq!(s.rope_pairing, RopePairing::HalfSplit);
    assert_eq!(s.rope_theta, 100000.0);
    assert_eq!(s.context_length, 8192);
    assert_eq!(
        (
            s.hidden,
            s.ffn,
            s.n_heads,
            s.n_kv_heads,
            s.head_dim,
            s.vocab
        ),
        (32, 64, 4, 2, 8, 300)
    );
    assert!(s.tied_head && !s.attn_bias);
    assert_eq!((s.special.bos, s.special.eos), (Some(1), Some(2)));
    assert_eq!(s.special.eot, vec![0]);
    // HF [out, in] = ggml [in, out].
    let k = m.require(OperandKey::layer(1, Role::AttnK)).unwrap();
    assert_eq!((k.dtype, k.shape), (DType::F16, &[32usize, 16][..]));
    let d = m.require(OperandKey::layer(0, Role::FfnDown)).unwrap();
    assert_eq!((d.dtype, d.shape), (DType::BF16, &[64usize, 32][..]));
    let e = m.require(OperandKey::global(Role::TokenEmbedding)).unwrap();
    assert_eq!(e.shape, &[32, 300]);
    assert_eq!(
        e.bytes,
        &hf_tensor(String::new(), &[300, 32], safetensors::Dtype::BF16, 1).data[..]
    );
    match &*m.tokenizer_spec().unwrap() {
        TokenizerSpec::Json {
            json,
            chat_template,
        } => {
            assert!(json.contains("<|im_end|>"));
            assert_eq!(chat_template.as_deref(), Some("{{ messages }}"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn hf_qwen2_folder_classic_spelling() {
    let dir = tempfile::tempdir().unwrap();
    hf_llama(dir.path(), CONFIG_CLASSIC, true, true);
    let m = import::open(dir.path()).unwrap();
    let s = &m.surface;
    assert_eq!(s.source_architecture, "qwen2");
    assert_eq!(s.rope_theta, 1_000_000.0);
    assert!(!s.tied_head && s.attn_bias);
    assert_eq!(s.special.eos, Some(2));
    assert_eq!(s.special.eot, vec![0]);
    assert!(m.view(OperandKey::global(Role::Output)).is_some());
    assert!(m.view(OperandKey::layer(1, Role::AttnVBias)).is_some());
}

#[test]
fn hf_folder_refusals() {
    let dir = tempfile::tempdir().unwrap();
    hf_llama(
        dir.path(),
        &CONFIG_NEW.replace("LlamaForCausalLM", "GemmaForCausalLM"),
        false,
        false,
    );
    match import::open(dir.path()) {
        Err(StorageError::Unsupported(m)) => assert!(m.contains("GemmaForCausalLM"), "{m}"),
        other => panic!("{other:?}"),
    }
    let dir = tempfile::tempdir().unwrap();
    hf_llama(
        dir.path(),
        &CONFIG_NEW.replace("\"intermediate_size\": 64", "\"intermediate_size\": 96"),
        false,
        false,
    );
    tensor_err(
        import::open(dir.path()),
        "model.layers.0.mlp.gate_proj.weight",
    );
    let dir = tempfile::tempdir().unwrap();
    hf_llama(
        dir.path(),
        &CONFIG_NEW.replace(
            "\"tie_word_embeddings\": true",
            "\"tie_word_embeddings\": false",
        ),
        false,
        false,
    );
    tensor_err(import::open(dir.path()), "lm_head.weight");
    let dir = tempfile::tempdir().unwrap();
    hf_llama(dir.path(), CONFIG_NEW, false, false);
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        r#"{"weight_map": {"x": "../etc/passwd"}}"#,
    )
    .unwrap();
    match import::open(dir.path()) {
        Err(StorageError::Format { field, .. }) => assert_eq!(field, "weight_map.x"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn hf_folder_with_corrupt_files() {
    let dir = tempfile::tempdir().unwrap();
    hf_llama(dir.path(), CONFIG_NEW, false, false);
    std::fs::write(dir.path().join("config.json"), "{\"hidden_size\": 32,").unwrap();
    match import::open(dir.path()) {
        Err(StorageError::Format { field, .. }) => assert_eq!(field, "config.json"),
        other => panic!("{other:?}"),
    }
    let dir = tempfile::tempdir().unwrap();
    hf_llama(dir.path(), CONFIG_NEW, false, false);
    std::fs::remove_file(dir.path().join("model.safetensors.index.json")).unwrap();
    // A header length far past the end of the file.
    let mut junk = (1u64 << 40).to_le_bytes().to_vec();
    junk.extend_from_slice(b"{}");
    std::fs::write(dir.path().join("model-00001-of-00002.safetensors"), junk).unwrap();
    match import::open(dir.path()) {
        Err(StorageError::Format { path, field, .. }) => {
            assert_eq!(field, "safetensors header");
            assert!(path.ends_with("model-00001-of-00002.safetensors"));
        }
        other => panic!("{other:?}"),
    }
}
