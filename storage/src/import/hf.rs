//! Hugging Face folder importer: llama-family checkpoints (`LlamaForCausalLM`,
//! `MistralForCausalLM`, `Qwen2ForCausalLM`, `Qwen3ForCausalLM`) in safetensors →
//! [`Model`]. A class's block is its GGUF family's nominal block (`import::family`: Qwen3's
//! per-head Q/K RMSNorm), so both formats of one network run the same steps.
//!
//! HF checkpoints are not row-permuted, so RoPE pairs dimensions half-split. Matrices are
//! stored `[out, in]` row-major, which is ggml shape `[in, out]`: rows are output units and
//! `shape[0]` is the input size, as the executor expects.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::error::{Result, StorageError};
use crate::format::safetensors::{HfConfig, HfFolder};
use crate::model::{Model, Operand, OperandKey, Role, SourceKind};
use crate::surface::{Activation, BlockSpec, ExecutionSurface, RopePairing, SpecialTokens};
use crate::tokenizer_spec::{TokenizerSlot, TokenizerSpec};

use super::{operand_table, validate};

/// (architecture class, family name, biases on Q/K/V)
const FAMILIES: [(&str, &str, bool); 4] = [
    ("LlamaForCausalLM", "llama", false),
    ("MistralForCausalLM", "mistral", false),
    ("Qwen2ForCausalLM", "qwen2", true),
    ("Qwen3ForCausalLM", "qwen3", false),
];

/// The Hugging Face `config.json` architecture classes the importer accepts, with the
/// family each is read as (docs/reference.md lists them).
pub fn supported_architectures() -> Vec<(&'static str, &'static str)> {
    FAMILIES
        .iter()
        .map(|&(class, family, _)| (class, family))
        .collect()
}

/// The HF name of an operand.
pub fn tensor_name(key: OperandKey) -> String {
    let base = match key.role {
        Role::TokenEmbedding => return "model.embed_tokens.weight".into(),
        Role::OutputNorm => return "model.norm.weight".into(),
        Role::Output => return "lm_head.weight".into(),
        Role::AttnNorm => "input_layernorm.weight",
        Role::AttnQ => "self_attn.q_proj.weight",
        Role::AttnK => "self_attn.k_proj.weight",
        Role::AttnV => "self_attn.v_proj.weight",
        Role::AttnOutput => "self_attn.o_proj.weight",
        Role::AttnQBias => "self_attn.q_proj.bias",
        Role::AttnKBias => "self_attn.k_proj.bias",
        Role::AttnVBias => "self_attn.v_proj.bias",
        Role::FfnNorm => "post_attention_layernorm.weight",
        Role::FfnGate => "mlp.gate_proj.weight",
        Role::FfnUp => "mlp.up_proj.weight",
        Role::FfnDown => "mlp.down_proj.weight",
        Role::FfnGateBias => "mlp.gate_proj.bias",
        Role::FfnUpBias => "mlp.up_proj.bias",
        Role::FfnAddedGate => "mlp.added_gate.weight",
        Role::FfnAddedUp => "mlp.added_up.weight",
        Role::FfnAddedDown => "mlp.added_down.weight",
        Role::FfnAddedGateBias => "mlp.added_gate.bias",
        Role::FfnAddedUpBias => "mlp.added_up.bias",
        Role::FfnGateScale => "mlp.gate_scale",
        Role::FfnDownScale => "mlp.down_scale",
        // Mixture-of-experts names (qwen2moe's): HF folders store each expert on its own,
        // so the stacked names below never occur and MoE folders are refused at open.
        Role::FfnGateInp => "mlp.gate.weight",
        Role::FfnGateExps => "mlp.experts.gate_proj.weight",
        Role::FfnUpExps => "mlp.experts.up_proj.weight",
        Role::FfnDownExps => "mlp.experts.down_proj.weight",
        Role::FfnGateShexp => "mlp.shared_expert.gate_proj.weight",
        Role::FfnUpShexp => "mlp.shared_expert.up_proj.weight",
        Role::FfnDownShexp => "mlp.shared_expert.down_proj.weight",
        Role::FfnGateInpShexp => "mlp.shared_expert_gate.weight",
        // The roles of the newer block features, in the spelling of the transformers
        // classes that have them (Qwen3's Q/K norms; the other classes are not opened yet).
        Role::PositionEmbedding => return "model.embed_positions.weight".into(),
        Role::OutputNormBias => return "model.norm.bias".into(),
        Role::RopeFreqs => return "model.rope_freqs".into(),
        Role::AttnNormBias => "input_layernorm.bias",
        Role::FfnNormBias => "post_attention_layernorm.bias",
        Role::AttnQNorm => "self_attn.q_norm.weight",
        Role::AttnKNorm => "self_attn.k_norm.weight",
        Role::AttnOutputBias => "self_attn.o_proj.bias",
        Role::AttnPostNorm => "post_self_attn_layernorm.weight",
        Role::FfnPostNorm => "post_feedforward_layernorm.weight",
        Role::FfnDownBias => "mlp.down_proj.bias",
    };
    format!("model.layers.{}.{base}", key.layer.unwrap_or(0))
}

/// The operand key of an HF tensor name, if the importer knows it.
pub fn operand_key(name: &str) -> Option<OperandKey> {
    operand_table::key_from_name(name, "model.layers.", tensor_name)
}

fn need<T>(cfg_path: &Path, v: Option<T>, key: &str) -> Result<T> {
    v.ok_or_else(|| StorageError::Format {
        path: cfg_path.to_path_buf(),
        offset: 0,
        field: key.to_string(),
        message: "required field is missing or not a number".into(),
    })
}

/// Open a Hugging Face folder as a model.
pub fn open(dir: &Path) -> Result<Model> {
    let folder = HfFolder::open(dir)?;
    let cfg = &folder.config;
    let cfg_path = dir.join("config.json");
    let class = cfg.architectures.first().cloned().unwrap_or_default();
    let (_, family, bias_default) = FAMILIES
        .iter()
        .find(|(c, _, _)| *c == class)
        .copied()
        .ok_or_else(|| {
            StorageError::Unsupported(format!(
                "not supported yet: architecture `{}` ({}); supported: {}",
                if class.is_empty() {
                    cfg.model_type.as_deref().unwrap_or("unknown")
                } else {
                    &class
                },
                dir.display(),
                FAMILIES.map(|f| f.0).join(", ")
            ))
        })?;
    if let Some(s) = &cfg.rope_scaling {
        return Err(StorageError::Unsupported(format!(
            "not supported yet: RoPE scaling `{s}` ({})",
            cfg_path.display()
        )));
    }
    if let Some(act) = &cfg.hidden_act {
        if act != "silu" {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: hidden_act `{act}` ({})",
                cfg_path.display()
            )));
        }
    }
    let us = |v: Option<u64>, key: &str| -> Result<usize> {
        need(&cfg_path, v.and_then(|x| usize::try_from(x).ok()), key)
    };
    let n_layers = us(cfg.num_hidden_layers, "num_hidden_layers")?;
    let hidden = us(cfg.hidden_size, "hidden_size")?;
    let ffn = us(cfg.intermediate_size, "intermediate_size")?;
    let n_heads = us(cfg.num_attention_heads, "num_attention_heads")?;
    if n_heads == 0 {
        return Err(need::<()>(&cfg_path, None, "num_attention_heads").unwrap_err());
    }
    let n_kv_heads = cfg
        .num_key_value_heads
        .and_then(|x| usize::try_from(x).ok())
        .unwrap_or(n_heads);
    let head_dim = cfg
        .head_dim
        .and_then(|x| usize::try_from(x).ok())
        .unwrap_or(hidden / n_heads);

    let mut operands = BTreeMap::new();
    for t in &folder.tensors {
        let key = operand_table::tensor_key(
            &folder.files[t.file],
            &t.name,
            family,
            n_layers,
            operand_key,
        )?;
        operands.insert(
            key,
            Operand {
                source_name: t.name.clone(),
                dtype: t.dtype,
                shape: t.shape.clone(),
                backing: t.file,
                offset: t.offset,
                len: t.len,
            },
        );
    }
    let vocab = operand_table::embedding_vocab(&operands).unwrap_or_else(|| {
        cfg.vocab_size
            .and_then(|x| usize::try_from(x).ok())
            .unwrap_or(0)
    });
    let has_head = operands.contains_key(&OperandKey::global(Role::Output));
    let tied_head = !has_head;
    if tied_head && cfg.tie_word_embeddings == Some(false) {
        return Err(StorageError::Tensor {
            path: dir.to_path_buf(),
            tensor: "lm_head.weight".into(),
            message: "config.json says tie_word_embeddings: false, but the output head is missing"
                .into(),
        });
    }
    let attn_bias =
        cfg.attention_bias.unwrap_or(bias_default) || operand_table::has_attn_bias(&operands);

    let (special, slot) = tokenizer(dir, cfg, vocab)?;
    let surface = ExecutionSurface {
        source_architecture: family.to_string(),
        n_layers,
        hidden,
        ffn,
        n_heads,
        n_kv_heads,
        head_dim,
        vocab,
        context_length: cfg
            .max_position_embeddings
            .and_then(|x| usize::try_from(x).ok())
            .unwrap_or(2048),
        rope_theta: cfg.rope_theta.unwrap_or(10_000.0) as f32,
        rope_pairing: RopePairing::HalfSplit,
        norm_eps: cfg.rms_norm_eps.unwrap_or(1e-6) as f32,
        activation: Activation::Silu,
        tied_head,
        attn_bias,
        embedding_scale: 1.0,
        moe: None,
        block: super::family::find(family).map_or(BlockSpec::PLAIN, |f| f.nominal.clone()),
        special,
    };
    validate::check_surface(dir, &surface)?;
    validate::check_layer_count(
        &cfg_path,
        "num_hidden_layers",
        &surface,
        folder.tensors.len(),
    )?;
    validate::check_operands(dir, &surface, &operands, tensor_name)?;
    let mut model = Model {
        path: dir.to_path_buf(),
        kind: SourceKind::Safetensors,
        surface,
        tokenizer: slot,
        operands,
        backings: folder.backings,
        absent: Default::default(),
        overlays: Default::default(),
        uninterpreted: None,
    };
    crate::overlay::stored::attach(&mut model)?;
    Ok(model)
}

/// Special tokens from config.json, tokenizer_config.json and tokenizer.json; the spec is
/// tokenizer.json verbatim (read now: HF folders are not on the fast-open path).
fn tokenizer(dir: &Path, cfg: &HfConfig, vocab: usize) -> Result<(SpecialTokens, TokenizerSlot)> {
    use crate::fsutil::{limits, read_optional_inside};
    let tc_path = dir.join("tokenizer_config.json");
    let tc: Option<Value> =
        match read_optional_inside(dir, "tokenizer_config.json", limits::TOKENIZER_CONFIG_JSON)? {
            Some(t) => Some(serde_json::from_str(&t).map_err(|e| StorageError::Format {
                path: tc_path.clone(),
                offset: 0,
                field: "tokenizer_config.json".into(),
                message: e.to_string(),
            })?),
            None => None,
        };
    let tj_path = dir.join("tokenizer.json");
    let json = read_optional_inside(dir, "tokenizer.json", limits::TOKENIZER_JSON)?;
    let added: Vec<(u32, String)> = match &json {
        Some(text) => {
            let v: Value = serde_json::from_str(text).map_err(|e| StorageError::Format {
                path: tj_path.clone(),
                offset: 0,
                field: "tokenizer.json".into(),
                message: e.to_string(),
            })?;
            v.get("added_tokens")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|t| {
                            let id = u32::try_from(t.get("id")?.as_u64()?).ok()?;
                            Some((id, t.get("content")?.as_str()?.to_string()))
                        })
                        .collect()
                })
                .unwrap_or_default()
        }
        None => Vec::new(),
    };
    let by_text = |field: &str| -> Option<u32> {
        let t = tc.as_ref()?.get(field)?;
        let text = t.as_str().or_else(|| t.get("content")?.as_str())?;
        added.iter().find(|(_, c)| c == text).map(|(i, _)| *i)
    };
    let in_vocab = |v: Option<u32>| v.filter(|&i| (i as usize) < vocab);
    let bos = in_vocab(cfg.bos_token_id.or_else(|| by_text("bos_token")));
    let mut eos_all: Vec<u32> = cfg.eos_token_ids.clone();
    if eos_all.is_empty() {
        eos_all.extend(by_text("eos_token"));
    }
    let eos = in_vocab(eos_all.first().copied());
    let mut eot: Vec<u32> = Vec::new();
    for &i in eos_all.iter().skip(1) {
        if !eot.contains(&i) && (i as usize) < vocab {
            eot.push(i);
        }
    }
    for (i, c) in &added {
        if validate::END_OF_TURN_TEXTS.contains(&c.as_str())
            && Some(*i) != eos
            && !eot.contains(i)
            && (*i as usize) < vocab
        {
            eot.push(*i);
        }
    }
    let flag = |f: &str| tc.as_ref().and_then(|v| v.get(f)).and_then(Value::as_bool);
    let special = SpecialTokens {
        bos,
        eos,
        pad: in_vocab(cfg.pad_token_id.or_else(|| by_text("pad_token"))),
        unk: in_vocab(by_text("unk_token")),
        eot,
        add_bos: flag("add_bos_token").unwrap_or(false),
        add_eos: flag("add_eos_token").unwrap_or(false),
    };
    let chat_template = tc
        .as_ref()
        .and_then(|v| v.get("chat_template"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let chat_template = match chat_template {
        Some(t) => Some(t),
        None => read_optional_inside(dir, "chat_template.jinja", limits::CHAT_TEMPLATE)?,
    };
    let spec = match json {
        Some(json) => TokenizerSpec::Json {
            json,
            chat_template,
        },
        None => TokenizerSpec::None,
    };
    Ok((special, TokenizerSlot::ready(spec)))
}
