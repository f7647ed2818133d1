//! Hugging Face folder importer: the checkpoints of the classes in [`classes::CLASSES`]
//! (Llama, Mistral, Qwen2/2-MoE/3/3-MoE, Gemma 2/3, Phi-3, GPT-2, GPT-NeoX, OLMo 2) in
//! safetensors → [`Model`]. A class runs its GGUF family's block (`import::family`), read by
//! the family's own `block` function from the config translated to GGUF keys, so both
//! formats of one network run the same steps.
//!
//! HF checkpoints are not row-permuted, so RoPE pairs dimensions half-split. Matrices are
//! stored `[out, in]` row-major, which is ggml shape `[in, out]`: rows are output units and
//! `shape[0]` is the input size, as the executor expects. Where a class stores a tensor
//! otherwise (Gemma's norm offsets, GPT-2's transposed matrices, GPT-NeoX's per-head QKV,
//! separate experts), [`layout`] rewrites it once at open.

mod classes;
mod layout;
mod rope;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::error::{Result, StorageError};
use crate::format::safetensors::{HfConfig, HfFolder};
use crate::model::{Model, Operand, OperandKey, Role, SourceKind};
use crate::surface::{ExecutionSurface, RopePairing, SpecialTokens};
use crate::tokenizer_spec::{TokenizerSlot, TokenizerSpec};

use super::family::{self, Meta};
use super::fused::FusedRows;
use super::{operand_table, validate};
use classes::{HfClass, CLASSES};
use layout::Backings;

/// The Hugging Face `config.json` architecture classes the importer accepts, with the
/// architecture each model reports (docs/reference.md lists them).
pub fn supported_architectures() -> Vec<(&'static str, &'static str)> {
    CLASSES.iter().map(|c| (c.class, c.architecture)).collect()
}

/// The HF name of an operand in llama naming.
pub fn tensor_name(key: OperandKey) -> String {
    classes::llama_name(key)
}

/// The operand key of an HF tensor name in llama naming, if the importer knows it.
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
    let class_name = cfg.architectures.first().cloned().unwrap_or_default();
    let class = HfClass::find(&class_name).ok_or_else(|| {
        StorageError::Unsupported(format!(
            "not supported yet: architecture `{}` ({}); supported: {}",
            if class_name.is_empty() {
                cfg.model_type.as_deref().unwrap_or("unknown")
            } else {
                &class_name
            },
            dir.display(),
            CLASSES.map(|c| c.class).join(", ")
        ))
    })?;
    let family = family::find(class.family).ok_or_else(|| {
        StorageError::Unsupported(format!("not supported yet: the {} family", class.family))
    })?;
    if let Some(act) = &cfg.hidden_act {
        if !class.activations.contains(&act.as_str()) {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: activation `{act}` in a {} ({}); the block computes {}",
                class.class,
                cfg_path.display(),
                class.activations[0]
            )));
        }
    }
    let us = |v: Option<u64>, key: &str| -> Result<usize> {
        need(&cfg_path, v.and_then(|x| usize::try_from(x).ok()), key)
    };
    let n_layers = us(cfg.num_hidden_layers, "num_hidden_layers")?;
    let hidden = us(cfg.hidden_size, "hidden_size")?;
    let ffn = match (cfg.intermediate_size, class.ffn_default_multiple) {
        (None, Some(m)) => hidden.saturating_mul(m),
        (v, _) => us(v, "intermediate_size")?,
    };
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

    let metadata = class.metadata(&cfg_path, cfg, head_dim)?;
    let meta = Meta {
        file: &metadata,
        arch: class.family,
        n_layers,
        hidden,
        n_heads,
        head_dim,
    };
    let mut block = meta.block_of(family)?;
    if let Some(scale) = query_scale(&cfg_path, &cfg.raw, head_dim)? {
        block.attn_scale = scale;
    }

    let sizes = Sizes {
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn,
    };
    let Stored {
        table: mut operands,
        mut experts,
        mut backings,
    } = stored(&folder, class, &sizes)?;
    stack_experts(dir, &mut experts, &mut operands, &mut backings)?;
    if block.rope_freq_factors {
        let theta = cfg.rope_theta.unwrap_or(10_000.0);
        let dims = if block.rotary_dims == 0 {
            head_dim
        } else {
            block.rotary_dims
        };
        let divisors = rope::llama3_divisors(&cfg_path, cfg, theta, dims)?;
        let made = backings.made_f32("config.json rope_scaling (llama3)".into(), &divisors);
        operands.insert(OperandKey::global(Role::RopeFreqs), made);
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
            tensor: (class.naming.name)(OperandKey::global(Role::Output)),
            message: "config.json says tie_word_embeddings: false, but the output head is missing"
                .into(),
        });
    }
    let attn_bias = family.bias_required
        || cfg.attention_bias.unwrap_or(class.attn_bias)
        || operand_table::has_attn_bias(&operands);
    let moe = super::experts::experts(&metadata, family, &operands, ffn)?;
    let ffn = moe.as_ref().map_or(ffn, |m| m.expert_ffn);

    let (special, slot) = tokenizer(dir, cfg, vocab)?;
    let surface = ExecutionSurface {
        source_architecture: class.architecture.to_string(),
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
        norm_eps: cfg.norm_eps.unwrap_or(1e-6) as f32,
        activation: family.activation,
        tied_head,
        attn_bias,
        embedding_scale: (family.embedding_scale)(hidden),
        moe,
        block,
        special,
    };
    validate::check_surface(dir, &surface)?;
    validate::check_layer_count(
        &cfg_path,
        "num_hidden_layers",
        &surface,
        folder.tensors.len(),
    )?;
    validate::check_operands(dir, &surface, &operands, class.naming.name)?;
    let mut model = Model {
        path: dir.to_path_buf(),
        kind: SourceKind::Safetensors,
        surface,
        tokenizer: slot,
        operands,
        backings: backings.list,
        absent: Default::default(),
        overlays: Default::default(),
        uninterpreted: None,
    };
    crate::overlay::stored::attach(&mut model)?;
    Ok(model)
}

/// The query scale `query_pre_attn_scalar` asks for (Gemma: `1/sqrt(q)`), `Some(0)` for
/// the default when it equals the head width, `None` when the config leaves it out.
fn query_scale(cfg_path: &Path, raw: &Value, head_dim: usize) -> Result<Option<f32>> {
    let Some(v) = raw.get("query_pre_attn_scalar").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match v.as_f64() {
        Some(q) if q == head_dim as f64 => Ok(Some(0.0)),
        Some(q) if q.is_finite() && q > 0.0 => Ok(Some((1.0 / q.sqrt()) as f32)),
        _ => Err(StorageError::Format {
            path: cfg_path.to_path_buf(),
            offset: 0,
            field: "query_pre_attn_scalar".into(),
            message: format!("{v} is not a positive number"),
        }),
    }
}

/// The per-expert matrices of a checkpoint that stores experts apart, keyed by
/// `(layer, bank role)`, each list `(expert, operand)`.
type ExpertParts = BTreeMap<(usize, Role), Vec<(usize, Operand)>>;

/// The sizes the layout and the fused splits need.
#[derive(Clone, Copy)]
struct Sizes {
    n_layers: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    ffn: usize,
}

/// The folder's tensors as operands, with the class's layout undone.
struct Stored {
    table: BTreeMap<OperandKey, Operand>,
    /// Separately stored experts, still to stack.
    experts: ExpertParts,
    /// The folder's maps and the owned rewrites.
    backings: Backings,
}

/// Every stored tensor as the operands it holds.
fn stored(folder: &HfFolder, class: &HfClass, sizes: &Sizes) -> Result<Stored> {
    let Sizes {
        n_layers,
        n_heads,
        n_kv_heads,
        head_dim,
        ffn,
    } = *sizes;
    let naming = class.naming;
    let layout = class.layout;
    let mut backings = Backings {
        list: folder.backings.clone(),
    };
    let fused = FusedRows {
        q: n_heads * head_dim,
        kv: n_kv_heads * head_dim,
        ffn,
    };
    let mut table = BTreeMap::new();
    let mut experts = ExpertParts::new();
    for t in &folder.tensors {
        // Refusals name the safetensors file the tensor is in.
        let file = folder.files[t.file].as_path();
        let name = naming.strip(&t.name);
        let name = name.as_ref();
        if naming.is_buffer(name) {
            continue;
        }
        let mut op = Backings::in_place(t);
        if layout.separate_experts {
            if let Some((layer, expert, role)) = expert_part(naming, name) {
                let layer = layer_index(file, &t.name, layer, n_layers)?;
                experts.entry((layer, role)).or_default().push((expert, op));
                continue;
            }
        }
        let layer_tensor = naming.layer_part(name).is_some();
        if layout.transposed && layer_tensor && op.shape.len() == 2 {
            op = backings.transpose(file, &op)?;
        }
        if layout.norm_offset && name.ends_with("norm.weight") {
            op = backings.plus_one(file, &op)?;
        }
        if let Some((layer, kind)) = naming.fused_part(name) {
            if layout.qkv_by_head {
                op = backings.regroup_qkv(file, &op, n_heads, head_dim)?;
            }
            for (key, piece) in fused.split(file, layer, n_layers, kind, &op)? {
                table.insert(key, piece);
            }
            continue;
        }
        let key =
            operand_table::tensor_key(file, &t.name, class.family, n_layers, |_| naming.key(name))?;
        table.insert(key, op);
    }
    Ok(Stored {
        table,
        experts,
        backings,
    })
}

/// `(layer as spelled, expert, bank role)` of `{layer}.mlp.experts.{e}.{proj}.weight`.
fn expert_part<'n>(naming: &classes::Naming, name: &'n str) -> Option<(&'n str, usize, Role)> {
    let (layer, rest) = naming.layer_part(name)?;
    let (expert, proj) = rest.strip_prefix("mlp.experts.")?.split_once('.')?;
    if expert.is_empty() || expert.len() > 6 || !expert.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let role = match proj {
        "gate_proj.weight" => Role::FfnGateExps,
        "up_proj.weight" => Role::FfnUpExps,
        "down_proj.weight" => Role::FfnDownExps,
        _ => return None,
    };
    Some((layer, expert.parse().ok()?, role))
}

fn layer_index(dir: &Path, tensor: &str, layer: &str, n_layers: usize) -> Result<usize> {
    match layer.parse::<usize>() {
        Ok(l) if l < n_layers && layer.len() <= 6 => Ok(l),
        _ => Err(StorageError::Tensor {
            path: dir.to_path_buf(),
            tensor: tensor.to_string(),
            message: format!("layer index beyond the {n_layers} layers of the model"),
        }),
    }
}

/// Each layer's separately stored experts stacked into its banks. The experts of a bank
/// must be numbered 0, 1, … without a gap.
fn stack_experts(
    dir: &Path,
    parts: &mut ExpertParts,
    table: &mut BTreeMap<OperandKey, Operand>,
    backings: &mut Backings,
) -> Result<()> {
    for ((layer, role), mut list) in std::mem::take(parts) {
        list.sort_by_key(|(e, _)| *e);
        if let Some((i, (e, op))) = list.iter().enumerate().find(|(i, (e, _))| i != e) {
            return Err(StorageError::Tensor {
                path: dir.to_path_buf(),
                tensor: op.source_name.clone(),
                message: format!("expert {e} where expert {i} is expected (experts are numbered from 0 without gaps)"),
            });
        }
        let ops: Vec<Operand> = list.into_iter().map(|(_, op)| op).collect();
        let key = OperandKey::layer(layer, role);
        let name = classes::llama_name(key);
        let bank = backings.stack(dir, name, &ops)?;
        table.insert(key, bank);
    }
    Ok(())
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
