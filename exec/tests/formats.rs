//! The same network from different sources gives the same answers: the real model
//! re-encoded to F32 and F16 GGUFs (the project's GGUF writer + codecs), as a Hugging Face
//! folder (F32 safetensors, Q/K rows un-permuted, half-split RoPE), and a tiny quantised
//! qwen2-shaped GGUF (biases, untied head) against its committed numpy reference logits.

mod common;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::hf_writer::{decode_all, hf_shape, unpermute_rows, write_f32_safetensors};
use common::real::{fixture, max_diff, model_path};
use lql_exec::Executor;
use lql_storage::codec;
use lql_storage::format::gguf::{GgufFile, GgufWriter};
use lql_storage::surface::RopePairing;
use lql_storage::DType;
use serde_json::Value;

/// Re-encode every tensor of `src`: matrices as `matrix`, vectors as F32.
fn reencode(src: &Path, dst: &Path, matrix: DType) {
    reencode_with(src, dst, |t| {
        Some(if t.shape.len() >= 2 {
            matrix
        } else {
            DType::F32
        })
    });
}

/// Re-encode each tensor of `src` as `dtype_of` says (`None`: keep it as it is).
fn reencode_with(
    src: &Path,
    dst: &Path,
    dtype_of: impl Fn(&lql_storage::format::gguf::GgufTensorInfo) -> Option<DType>,
) {
    let file = GgufFile::open(src).unwrap();
    let mut w = GgufWriter::from_file(&file).unwrap();
    for t in file.tensors() {
        let Some(dtype) = dtype_of(t) else { continue };
        let vals = decode_all(&file, t);
        let mut bytes = Vec::new();
        for row in vals.chunks(t.shape[0]) {
            codec::encode_row(dtype, row, &mut bytes).unwrap();
        }
        w.remove_tensor(&t.name);
        w.add_tensor(&t.name, dtype, &t.shape, Cow::Owned(bytes))
            .unwrap();
    }
    w.write(dst).unwrap();
}

fn open(path: &Path) -> Executor {
    let model = lql_storage::import::open(path).unwrap();
    Executor::new(Arc::new(model), 2).unwrap()
}

#[test]
fn smollm2_as_f32_gguf_matches_reference() {
    let Some(src) = model_path() else { return };
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("smollm2-f32.gguf");
    reencode(&src, &dst, DType::F32);
    let exec = open(&dst);
    for name in ["france", "fib"] {
        let fx = fixture(name);
        let d = max_diff(&fx, &exec.logits_all(&fx.ids).unwrap());
        eprintln!("F32 GGUF {name}: max abs diff {d:.2e}");
        assert!(d < 1e-3, "{name}: {d}");
    }
}

#[test]
fn smollm2_as_f16_gguf_keeps_the_argmax() {
    let Some(src) = model_path() else { return };
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("smollm2-f16.gguf");
    reencode(&src, &dst, DType::F16);
    let exec = open(&dst);
    for name in ["france", "fib"] {
        let fx = fixture(name);
        let logits = exec.logits_all(&fx.ids).unwrap();
        let d = max_diff(&fx, &logits);
        eprintln!("F16 GGUF {name}: max abs diff {d:.2e}");
        // F16 rounds each weight by up to 2^-11 relative: logits move by a few hundredths.
        assert!(d < 0.15, "{name}: {d}");
        assert_eq!(logits.last().unwrap().argmax(), fx.top.last().unwrap()[0].0);
    }
}

fn hf_name(gguf: &str) -> Option<String> {
    let map = |s: &str| -> Option<&'static str> {
        Some(match s {
            "attn_norm.weight" => "input_layernorm.weight",
            "attn_q.weight" => "self_attn.q_proj.weight",
            "attn_k.weight" => "self_attn.k_proj.weight",
            "attn_v.weight" => "self_attn.v_proj.weight",
            "attn_output.weight" => "self_attn.o_proj.weight",
            "ffn_norm.weight" => "post_attention_layernorm.weight",
            "ffn_gate.weight" => "mlp.gate_proj.weight",
            "ffn_up.weight" => "mlp.up_proj.weight",
            "ffn_down.weight" => "mlp.down_proj.weight",
            "attn_q_norm.weight" => "self_attn.q_norm.weight",
            "attn_k_norm.weight" => "self_attn.k_norm.weight",
            _ => return None,
        })
    };
    match gguf {
        "token_embd.weight" => Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => Some("model.norm.weight".into()),
        "output.weight" => Some("lm_head.weight".into()),
        _ => {
            let rest = gguf.strip_prefix("blk.")?;
            let (l, t) = rest.split_once('.')?;
            Some(format!("model.layers.{l}.{}", map(t)?))
        }
    }
}

fn write_hf_folder(src: &Path, dir: &Path) {
    let file = GgufFile::open(src).unwrap();
    let u = |k: &str| file.get_u32(k).unwrap().unwrap() as u64;
    let heads = u("llama.attention.head_count") as usize;
    let kv_heads = u("llama.attention.head_count_kv") as usize;
    let mut tensors: Vec<(String, Vec<usize>, Vec<f32>)> = Vec::new();
    for t in file.tensors() {
        let mut vals = decode_all(&file, t);
        if t.name.ends_with("attn_q.weight") {
            vals = unpermute_rows(&vals, t.shape[0], heads);
        } else if t.name.ends_with("attn_k.weight") {
            vals = unpermute_rows(&vals, t.shape[0], kv_heads);
        }
        tensors.push((hf_name(&t.name).unwrap(), hf_shape(t), vals));
    }
    write_f32_safetensors(dir, &tensors);
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": u("llama.embedding_length"),
        "intermediate_size": u("llama.feed_forward_length"),
        "num_hidden_layers": u("llama.block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": file.get_f32("llama.attention.layer_norm_rms_epsilon").unwrap().unwrap(),
        "rope_theta": file.get_f32("llama.rope.freq_base").unwrap().unwrap(),
        "max_position_embeddings": u("llama.context_length"),
        "vocab_size": 49152,
        "tie_word_embeddings": true,
        "hidden_act": "silu",
        "torch_dtype": "float32",
        "bos_token_id": 1,
        "eos_token_id": 2
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
}

#[test]
fn smollm2_as_hf_folder_matches_reference() {
    let Some(src) = model_path() else { return };
    let dir = tempfile::tempdir().unwrap();
    write_hf_folder(&src, dir.path());
    let exec = open(dir.path());
    assert_eq!(exec.surface().rope_pairing, RopePairing::HalfSplit);
    for name in ["france", "columbus"] {
        let fx = fixture(name);
        let d = max_diff(&fx, &exec.logits_all(&fx.ids).unwrap());
        eprintln!("HF folder {name}: max abs diff {d:.2e}");
        assert!(d < 1e-3, "{name}: {d}");
    }
}

fn tiny_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parity")
}

/// Writes tests/fixtures/parity/tiny_qwen2.gguf (run once; the committed file and its
/// reference logits are what the test reads): the storage crate's tiny qwen2 model with
/// its matrices re-encoded to a mix of block formats.
#[test]
#[ignore = "fixture generator"]
fn write_tiny_qwen2_fixture() {
    use lql_storage::format::gguf::synth::TinyModel;
    let dir = tempfile::tempdir().unwrap();
    let f32_path = dir.path().join("f32.gguf");
    TinyModel {
        vocab: 384,
        ..TinyModel::qwen2()
    }
    .write(&f32_path)
    .unwrap();
    reencode_with(&f32_path, &tiny_dir().join("tiny_qwen2.gguf"), |t| {
        Some(match t.name.as_str() {
            "token_embd.weight" => DType::Q8_0,
            "output.weight" => DType::F16,
            n if n.starts_with("blk.0.") && t.shape.len() == 2 => DType::Q4_0,
            n if n.contains("ffn_") && t.shape.len() == 2 => DType::Q4_1,
            _ if t.shape.len() == 2 => DType::Q8_0,
            _ => return None,
        })
    });
}

#[test]
fn tiny_quantised_qwen2_matches_reference() {
    let exec = open(&tiny_dir().join("tiny_qwen2.gguf"));
    let s = exec.surface();
    assert_eq!(s.rope_pairing, RopePairing::HalfSplit);
    assert!(s.attn_bias && !s.tied_head);
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(tiny_dir().join("tiny_qwen2.json")).unwrap())
            .unwrap();
    let ids: Vec<u32> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let logits = exec.logits_all(&ids).unwrap();
    let mut worst = 0.0f32;
    for (p, row) in v["logits"].as_array().unwrap().iter().enumerate() {
        for (i, want) in row.as_array().unwrap().iter().enumerate() {
            worst = worst.max((logits[p].values[i] - want.as_f64().unwrap() as f32).abs());
        }
    }
    eprintln!("tiny qwen2: max abs diff {worst:.2e}");
    assert!(worst < 1e-4, "{worst}");
    // And token by token through the cache.
    let mut s = exec.session();
    for (p, &id) in ids.iter().enumerate() {
        let l = s.decode(id).unwrap();
        assert!(common::max_abs_diff(&l.values, &logits[p].values) < 1e-4);
    }
    let greedy: Vec<u32> = v["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let g = exec
        .generate(
            &ids,
            &lql_exec::GenerateOptions {
                max_tokens: greedy.len(),
                stop_at_eos: false,
                ..Default::default()
            },
            &mut |_| lql_exec::Control::Continue,
        )
        .unwrap();
    assert_eq!(g.token_ids, greedy);
}
