//! Each family's tiny fixture (`tests/fixtures/families/<family>/model.gguf`) written as the
//! Hugging Face checkpoint its transformers class would save (the class's tensor names,
//! Gemma's norm offsets, GPT-2's `Conv1D` matrices, GPT-NeoX's per-head QKV, Qwen3-MoE's
//! separate experts, the config fields the class reads) opens as the same block and gives
//! the GGUF's logits at every position. The writer here spells the HF side independently
//! of the importer's tables.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::hf_writer::{decode_all, hf_shape, unpermute_rows, write_f32_safetensors};
use lql_exec::Executor;
use lql_storage::format::gguf::GgufFile;
use serde_json::{json, Value};

/// Tensors as written: name, HF shape, F32 values.
type Tensors = Vec<(String, Vec<usize>, Vec<f32>)>;

/// The `general.architecture` of a fixture (`llama3` is a llama file).
fn arch_of(family: &str) -> &str {
    if family == "llama3" {
        "llama"
    } else {
        family
    }
}

fn fixture(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/fixtures/families/{family}"))
}

fn open(path: &Path) -> Executor {
    let model = lql_storage::import::open(path).unwrap();
    Executor::new(Arc::new(model), 2).unwrap()
}

/// The HF name of a GGUF layer tensor (`attn_q.weight`, …) in `family`'s class.
fn layer_name(family: &str, t: &str) -> &'static str {
    let sandwich = matches!(family, "gemma2" | "gemma3" | "olmo2");
    match (family, t) {
        ("gpt2", "attn_norm.weight") => "ln_1.weight",
        ("gpt2", "attn_norm.bias") => "ln_1.bias",
        ("gpt2", "attn_qkv.weight") => "attn.c_attn.weight",
        ("gpt2", "attn_qkv.bias") => "attn.c_attn.bias",
        ("gpt2", "attn_output.weight") => "attn.c_proj.weight",
        ("gpt2", "attn_output.bias") => "attn.c_proj.bias",
        ("gpt2", "ffn_norm.weight") => "ln_2.weight",
        ("gpt2", "ffn_norm.bias") => "ln_2.bias",
        ("gpt2", "ffn_up.weight") => "mlp.c_fc.weight",
        ("gpt2", "ffn_up.bias") => "mlp.c_fc.bias",
        ("gpt2", "ffn_down.weight") => "mlp.c_proj.weight",
        ("gpt2", "ffn_down.bias") => "mlp.c_proj.bias",
        ("gptneox", "attn_norm.weight") => "input_layernorm.weight",
        ("gptneox", "attn_norm.bias") => "input_layernorm.bias",
        ("gptneox", "attn_qkv.weight") => "attention.query_key_value.weight",
        ("gptneox", "attn_qkv.bias") => "attention.query_key_value.bias",
        ("gptneox", "attn_output.weight") => "attention.dense.weight",
        ("gptneox", "attn_output.bias") => "attention.dense.bias",
        ("gptneox", "ffn_norm.weight") => "post_attention_layernorm.weight",
        ("gptneox", "ffn_norm.bias") => "post_attention_layernorm.bias",
        ("gptneox", "ffn_up.weight") => "mlp.dense_h_to_4h.weight",
        ("gptneox", "ffn_up.bias") => "mlp.dense_h_to_4h.bias",
        ("gptneox", "ffn_down.weight") => "mlp.dense_4h_to_h.weight",
        ("gptneox", "ffn_down.bias") => "mlp.dense_4h_to_h.bias",
        ("phi3", "attn_qkv.weight") => "self_attn.qkv_proj.weight",
        ("phi3", "ffn_up.weight") => "mlp.gate_up_proj.weight",
        (_, "post_attention_norm.weight") if sandwich => "post_attention_layernorm.weight",
        (_, "ffn_norm.weight") if sandwich => "pre_feedforward_layernorm.weight",
        (_, "post_ffw_norm.weight") if sandwich => "post_feedforward_layernorm.weight",
        (_, "attn_norm.weight") => "input_layernorm.weight",
        (_, "attn_q.weight") => "self_attn.q_proj.weight",
        (_, "attn_k.weight") => "self_attn.k_proj.weight",
        (_, "attn_v.weight") => "self_attn.v_proj.weight",
        (_, "attn_output.weight") => "self_attn.o_proj.weight",
        (_, "attn_q_norm.weight") => "self_attn.q_norm.weight",
        (_, "attn_k_norm.weight") => "self_attn.k_norm.weight",
        (_, "ffn_norm.weight") => "post_attention_layernorm.weight",
        (_, "ffn_gate.weight") => "mlp.gate_proj.weight",
        (_, "ffn_up.weight") => "mlp.up_proj.weight",
        (_, "ffn_down.weight") => "mlp.down_proj.weight",
        (_, "ffn_gate_inp.weight") => "mlp.gate.weight",
        _ => panic!("no HF name for {family} {t}"),
    }
}

/// The HF name of a global GGUF tensor.
fn global_name(family: &str, t: &str) -> &'static str {
    match (family, t) {
        ("gpt2", "token_embd.weight") => "transformer.wte.weight",
        ("gpt2", "position_embd.weight") => "transformer.wpe.weight",
        ("gpt2", "output_norm.weight") => "transformer.ln_f.weight",
        ("gpt2", "output_norm.bias") => "transformer.ln_f.bias",
        ("gptneox", "token_embd.weight") => "gpt_neox.embed_in.weight",
        ("gptneox", "output_norm.weight") => "gpt_neox.final_layer_norm.weight",
        ("gptneox", "output_norm.bias") => "gpt_neox.final_layer_norm.bias",
        ("gptneox", "output.weight") => "embed_out.weight",
        (_, "token_embd.weight") => "model.embed_tokens.weight",
        (_, "output_norm.weight") => "model.norm.weight",
        (_, "output.weight") => "lm_head.weight",
        _ => panic!("no HF name for {family} {t}"),
    }
}

/// Rows `[j][head][dim]` (GGUF's fused QKV) as `[head][j][dim]` (GPT-NeoX's checkpoint).
fn by_head(v: &[f32], row: usize, heads: usize, head_dim: usize) -> Vec<f32> {
    let mut out = vec![0.0; v.len()];
    for j in 0..3 {
        for h in 0..heads {
            for d in 0..head_dim {
                let from = ((j * heads + h) * head_dim + d) * row;
                let to = ((h * 3 + j) * head_dim + d) * row;
                out[to..to + row].copy_from_slice(&v[from..from + row]);
            }
        }
    }
    out
}

/// A `[rows][row]` matrix as `[row][rows]` (GPT-2's `Conv1D` stores `[in, out]`).
fn transposed(v: &[f32], row: usize) -> Vec<f32> {
    let rows = v.len() / row;
    let mut out = vec![0.0; v.len()];
    for r in 0..rows {
        for c in 0..row {
            out[c * rows + r] = v[r * row + c];
        }
    }
    out
}

/// The tensors of `family`'s fixture as its HF class stores them.
fn hf_tensors(family: &str, file: &GgufFile) -> Tensors {
    let arch = arch_of(family);
    let u = |k: &str| file.get_u64(&format!("{arch}.{k}")).unwrap().unwrap() as usize;
    let heads = u("attention.head_count");
    let head_dim = u("embedding_length") / heads;
    let mut out = Vec::new();
    for t in file.tensors() {
        let mut vals = decode_all(file, t);
        let mut shape = hf_shape(t);
        if family.starts_with("gemma") && t.name.ends_with("norm.weight") {
            // Gemma stores every norm as its offset from 1 (`x·(1+w)`).
            vals.iter_mut().for_each(|x| *x -= 1.0);
        }
        if t.name == "rope_freqs.weight" {
            continue; // Llama 3's divisors: the config's rope_scaling stands for them
        }
        let Some((layer, suffix)) = t.name.strip_prefix("blk.").and_then(|r| r.split_once('.'))
        else {
            out.push((global_name(family, &t.name).to_string(), shape, vals));
            continue;
        };
        if arch == "llama" && matches!(suffix, "attn_q.weight" | "attn_k.weight") {
            // llama's converter permuted the Q/K rows for adjacent RoPE pairs; HF keeps them
            // half-split.
            let heads = if suffix == "attn_q.weight" {
                "attention.head_count"
            } else {
                "attention.head_count_kv"
            };
            let n = file.get_u64(&format!("llama.{heads}")).unwrap().unwrap() as usize;
            vals = unpermute_rows(&vals, t.shape[0], n);
        }
        if family == "gpt2" && t.shape.len() == 2 {
            vals = transposed(&vals, t.shape[0]);
            shape = t.shape.clone();
        }
        if family == "gptneox" && suffix.starts_with("attn_qkv") {
            vals = by_head(
                &vals,
                if t.shape.len() == 2 { t.shape[0] } else { 1 },
                heads,
                head_dim,
            );
        }
        if let Some(proj) = suffix.strip_suffix("_exps.weight") {
            let hf_proj = proj.strip_prefix("ffn_").unwrap();
            let per = t.shape[0] * t.shape[1];
            for (e, chunk) in vals.chunks(per).enumerate() {
                out.push((
                    format!("model.layers.{layer}.mlp.experts.{e}.{hf_proj}_proj.weight"),
                    vec![t.shape[1], t.shape[0]],
                    chunk.to_vec(),
                ));
            }
            continue;
        }
        let prefix = match family {
            "gpt2" => "transformer.h.",
            "gptneox" => "gpt_neox.layers.",
            _ => "model.layers.",
        };
        out.push((
            format!("{prefix}{layer}.{}", layer_name(family, suffix)),
            shape,
            vals,
        ));
    }
    if family == "gpt2" {
        // The causal-mask buffer GPT-2 checkpoints carry: no weights, skipped by name.
        out.push((
            "transformer.h.0.attn.bias".into(),
            vec![1, 1, 4, 4],
            vec![1.0; 16],
        ));
    }
    out
}

/// The `config.json` of `family`'s class, from the fixture's metadata.
fn hf_config(family: &str, file: &GgufFile) -> Value {
    let arch = arch_of(family);
    let k = |s: &str| format!("{arch}.{s}");
    let u = |s: &str| file.get_u64(&k(s)).unwrap();
    let f = |s: &str| file.get_f32(&k(s)).unwrap();
    let heads = u("attention.head_count").unwrap();
    let hidden = u("embedding_length").unwrap();
    let head_dim = u("attention.key_length").unwrap_or(hidden / heads);
    let tied = !file.tensors().iter().any(|t| t.name == "output.weight");
    let mut c = json!({
        "hidden_size": hidden,
        "intermediate_size": u("feed_forward_length"),
        "num_hidden_layers": u("block_count"),
        "num_attention_heads": heads,
        "num_key_value_heads": u("attention.head_count_kv"),
        "head_dim": head_dim,
        "max_position_embeddings": u("context_length"),
        "rope_theta": f("rope.freq_base"),
        "rms_norm_eps": f("attention.layer_norm_rms_epsilon"),
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "torch_dtype": "float32",
    });
    let extra = match family {
        "qwen3" => json!({"architectures": ["Qwen3ForCausalLM"]}),
        // The fixture's divisors: Llama 3's formula, factor 8, low 1, high 4, context 64.
        "llama3" => json!({
            "architectures": ["LlamaForCausalLM"],
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64
            },
        }),
        "qwen3moe" => json!({
            "architectures": ["Qwen3MoeForCausalLM"],
            "num_experts": u("expert_count"),
            "num_experts_per_tok": u("expert_used_count"),
            "moe_intermediate_size": u("expert_feed_forward_length"),
            "norm_topk_prob": true,
            "mlp_only_layers": [],
        }),
        "gemma2" => json!({
            "architectures": ["Gemma2ForCausalLM"],
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_activation": "gelu_pytorch_tanh",
            "sliding_window": u("attention.sliding_window"),
            "attn_logit_softcapping": f("attn_logit_softcapping"),
            "final_logit_softcapping": f("final_logit_softcapping"),
            "query_pre_attn_scalar": head_dim,
        }),
        "gemma3" => {
            let layers = u("block_count").unwrap() as usize;
            let types: Vec<&str> = (0..layers)
                .map(|l| {
                    if (l + 1) % 6 == 0 {
                        "full_attention"
                    } else {
                        "sliding_attention"
                    }
                })
                .collect();
            json!({
                "architectures": ["Gemma3ForCausalLM"],
                "hidden_activation": "gelu_pytorch_tanh",
                "sliding_window": u("attention.sliding_window"),
                "layer_types": types,
                "rope_local_base_freq": f("rope.freq_base_swa").unwrap_or(10_000.0),
                "rope_scaling": {"rope_type": "linear", "factor": f("rope.scaling.factor")},
                "query_pre_attn_scalar": head_dim,
                "final_logit_softcapping": null,
                "attn_logit_softcapping": null,
            })
        }
        "phi3" => json!({
            "architectures": ["Phi3ForCausalLM"],
            "sliding_window": u("attention.sliding_window"),
        }),
        "olmo2" => json!({"architectures": ["Olmo2ForCausalLM"]}),
        "gpt2" => json!({
            "architectures": ["GPT2LMHeadModel"],
            "n_embd": hidden,
            "n_inner": u("feed_forward_length"),
            "n_layer": u("block_count"),
            "n_head": heads,
            "n_positions": u("context_length"),
            "layer_norm_epsilon": f("attention.layer_norm_epsilon"),
            "activation_function": "gelu_new",
        }),
        "gptneox" => json!({
            "architectures": ["GPTNeoXForCausalLM"],
            "rotary_pct": u("rope.dimension_count").unwrap() as f64 / head_dim as f64,
            "rotary_emb_base": f("rope.freq_base"),
            "use_parallel_residual": file.get_bool(&k("use_parallel_residual")).unwrap().unwrap_or(true),
            "layer_norm_eps": f("attention.layer_norm_epsilon"),
            "hidden_act": "gelu",
        }),
        other => panic!("no class for {other}"),
    };
    let obj = c.as_object_mut().unwrap();
    for (key, v) in extra.as_object().unwrap() {
        obj.insert(key.clone(), v.clone());
    }
    match family {
        // GPT-2's config spells its sizes its own way (`n_embd`, …) and has no RoPE.
        "gpt2" => obj.retain(|key, _| {
            let gpt2 = ["n_embd", "n_inner", "n_layer", "n_head", "n_positions"];
            gpt2.contains(&key.as_str())
                || matches!(
                    key.as_str(),
                    "architectures" | "layer_norm_epsilon" | "activation_function" | "torch_dtype"
                )
        }),
        // GPT-NeoX's base and epsilon have their own names.
        "gptneox" => {
            obj.remove("rms_norm_eps");
            obj.remove("rope_theta");
        }
        _ => {}
    }
    c
}

fn check(family: &str) {
    let src = fixture(family).join("model.gguf");
    let file = GgufFile::open(&src).unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_f32_safetensors(dir.path(), &hf_tensors(family, &file));
    let config = hf_config(family, &file);
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture(family).join("golden.json")).unwrap(),
    )
    .unwrap();
    let ids: Vec<u32> = golden["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect();
    let (hf, gguf) = (open(dir.path()), open(&src));
    let (a, b) = (hf.surface(), gguf.surface());
    assert_eq!(a.source_architecture, arch_of(family));
    assert_eq!(a.block, b.block, "{family}: the same block steps");
    assert_eq!(a.moe, b.moe, "{family}: the same banks");
    assert_eq!(
        (
            a.activation,
            a.embedding_scale,
            a.tied_head,
            a.attn_bias,
            a.n_kv_heads,
            a.ffn
        ),
        (
            b.activation,
            b.embedding_scale,
            b.tied_head,
            b.attn_bias,
            b.n_kv_heads,
            b.ffn
        ),
        "{family}"
    );
    assert_eq!(
        (a.rope_theta, a.norm_eps),
        (b.rope_theta, b.norm_eps),
        "{family}"
    );
    let (x, y) = (hf.logits_all(&ids).unwrap(), gguf.logits_all(&ids).unwrap());
    let mut worst = 0f32;
    for (p, q) in x.iter().zip(&y) {
        for (u, v) in p.values.iter().zip(&q.values) {
            worst = worst.max((u - v).abs());
        }
    }
    eprintln!(
        "{family} HF folder: max |Δ| {worst:.2e} vs its GGUF over {} positions",
        ids.len()
    );
    assert!(worst < 1e-4, "{family}: {worst}");
}

#[test]
fn llama3_checkpoint_with_llama3_rope_scaling_matches_its_gguf() {
    check("llama3");
}

#[test]
fn qwen3_checkpoint_matches_its_gguf() {
    check("qwen3");
}

#[test]
fn qwen3moe_checkpoint_with_separate_experts_matches_its_gguf() {
    check("qwen3moe");
}

#[test]
fn gemma2_checkpoint_with_norm_offsets_matches_its_gguf() {
    check("gemma2");
}

#[test]
fn gemma3_checkpoint_with_layer_types_matches_its_gguf() {
    check("gemma3");
}

#[test]
fn phi3_checkpoint_with_fused_projections_matches_its_gguf() {
    check("phi3");
}

#[test]
fn gpt2_checkpoint_with_conv1d_matrices_matches_its_gguf() {
    check("gpt2");
}

#[test]
fn gptneox_checkpoint_with_per_head_qkv_matches_its_gguf() {
    check("gptneox");
}

#[test]
fn olmo2_checkpoint_matches_its_gguf() {
    check("olmo2");
}

/// `family`'s checkpoint with `edit` applied to its config (and tensors), opened.
fn open_edited(
    family: &str,
    edit: impl FnOnce(&mut Value, &mut Tensors),
) -> Result<lql_storage::Model, String> {
    let file = GgufFile::open(&fixture(family).join("model.gguf")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut tensors = hf_tensors(family, &file);
    let mut config = hf_config(family, &file);
    edit(&mut config, &mut tensors);
    write_f32_safetensors(dir.path(), &tensors);
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    lql_storage::import::open(dir.path()).map_err(|e| e.to_string())
}

#[test]
fn what_a_block_cannot_run_is_refused_by_its_config_field_or_tensor() {
    let refused = |family: &str, edit: &dyn Fn(&mut Value, &mut Tensors)| {
        let Err(e) = open_edited(family, |c, t| edit(c, t)) else {
            panic!("{family}: opened")
        };
        eprintln!("{family}: {e}");
        e
    };
    let e = refused("qwen3", &|c, _| {
        c["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0});
    });
    assert!(
        e.contains("not supported yet") && e.contains("config.json: rope_scaling.rope_type)"),
        "{e}"
    );
    let e = refused("gemma3", &|c, _| {
        c["layer_types"] = json!([
            "sliding_attention",
            "full_attention",
            "full_attention",
            "sliding_attention",
            "sliding_attention",
            "full_attention"
        ]);
    });
    assert!(
        e.contains("per-layer sliding-window list") && e.contains("layer_types"),
        "{e}"
    );
    let e = refused("gemma3", &|c, _| c["attn_logit_softcapping"] = json!(50.0));
    assert!(e.contains("attn_logit_softcapping"), "{e}");
    let e = refused("qwen3moe", &|c, _| c["norm_topk_prob"] = json!(false));
    assert!(e.contains("norm_topk_prob"), "{e}");
    let e = refused("qwen3moe", &|_, t| {
        t.retain(|(n, _, _)| n != "model.layers.1.mlp.experts.2.up_proj.weight")
    });
    assert!(e.contains("expert 3 where expert 2 is expected"), "{e}");
    let e = refused("gpt2", &|c, _| c["activation_function"] = json!("relu"));
    assert!(e.contains("activation `relu`"), "{e}");
    let e = refused("gptneox", &|c, _| c["rotary_pct"] = json!(1.5));
    assert!(e.contains("rotary_pct"), "{e}");
    let e = refused("phi3", &|_, t| {
        t.push((
            "model.layers.0.mlp.fc9.weight".into(),
            vec![2],
            vec![0.0; 2],
        ))
    });
    assert!(e.contains("model.layers.0.mlp.fc9.weight"), "{e}");
    // A linear RoPE scaling is read, not refused (the family's own rule).
    let m = open_edited("qwen3", |c, _| {
        c["rope_scaling"] = json!({"type": "linear", "factor": 4.0});
    })
    .unwrap();
    assert_eq!(m.surface.block.rope_freq_scale, 0.25);
}

#[test]
fn gemma3_multimodal_checkpoint_runs_its_language_model() {
    // The same text model as Gemma3ForConditionalGeneration saves it, in both layouts: every
    // name under `language_model.` (transformers before 4.52) or the text model under
    // `model.language_model.` and the head beside it (4.52 on); the text fields under
    // `text_config`; a vision tower and projector that the text model does not read.
    let src = fixture("gemma3").join("model.gguf");
    let file = GgufFile::open(&src).unwrap();
    let gguf = open(&src);
    let older = |n: &str| format!("language_model.{n}");
    let newer = |n: &str| match n.strip_prefix("model.") {
        Some(rest) => format!("model.language_model.{rest}"),
        None => n.to_string(),
    };
    for (layout, rename, parts) in [
        ("language_model.", &older as &dyn Fn(&str) -> String, ""),
        ("model.language_model.", &newer, "model."),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut tensors: Tensors = hf_tensors("gemma3", &file)
            .into_iter()
            .map(|(n, s, v)| (rename(&n), s, v))
            .collect();
        tensors.push((
            format!("{parts}vision_tower.vision_model.embeddings.patch_embedding.weight"),
            vec![4, 3, 2, 2],
            vec![0.5; 48],
        ));
        tensors.push((
            format!("{parts}multi_modal_projector.mm_input_projection_weight"),
            vec![4, 32],
            vec![0.25; 128],
        ));
        write_f32_safetensors(dir.path(), &tensors);
        let text = hf_config("gemma3", &file);
        let config = json!({
            "architectures": ["Gemma3ForConditionalGeneration"],
            "model_type": "gemma3",
            "text_config": text,
            "vision_config": {"hidden_size": 4, "patch_size": 2},
        });
        std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
        let hf = open(dir.path());
        assert_eq!(hf.surface().block, gguf.surface().block, "{layout}");
        let ids = [259u32, 291, 273, 276, 282, 283];
        let (x, y) = (hf.logits_all(&ids).unwrap(), gguf.logits_all(&ids).unwrap());
        let worst = x
            .iter()
            .zip(&y)
            .flat_map(|(p, q)| p.values.iter().zip(&q.values).map(|(u, v)| (u - v).abs()))
            .fold(0f32, f32::max);
        eprintln!("gemma3 multimodal checkpoint under {layout}: max |Δ| {worst:.2e} vs its GGUF");
        assert!(worst < 1e-4, "{layout}: {worst}");
    }
}
