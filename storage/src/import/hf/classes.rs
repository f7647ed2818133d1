//! The Hugging Face architecture classes the importer opens. A class is a GGUF family
//! (`import::family`) whose block it runs, the tensor naming its checkpoints use, how its
//! stored tensors differ from the family's operands ([`Layout`]), and the `config.json`
//! fields that stand for the family's GGUF metadata. The family's own `block` function then
//! reads the block from the translated config, so both formats of one network run the same
//! steps and a family's knowledge stays in its one file.

use std::borrow::Cow;

use serde_json::Value;

use crate::error::{Result, StorageError};
use crate::format::safetensors::HfConfig;
use crate::import::fused::FusedTensor;
use crate::import::metadata::ConfigMetadata;
use crate::model::{OperandKey, Role};

/// How a class's stored tensors differ from its family's operands (each difference is
/// undone once, at open, into owned memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Layout {
    /// Norm weights are stored as offsets from 1 (Gemma's `x · (1 + w)`); the importer
    /// adds the 1, as llama.cpp's converter does.
    pub norm_offset: bool,
    /// Layer matrices are stored `[in, out]` (GPT-2's `Conv1D`): transposed.
    pub transposed: bool,
    /// The fused QKV rows are grouped by head (`[head][q, k, v][dim]`, GPT-NeoX):
    /// regrouped to `[q, k, v][head][dim]`.
    pub qkv_by_head: bool,
    /// Each expert is its own tensor (`mlp.experts.{e}.{gate,up,down}_proj.weight`):
    /// stacked into one bank per layer and projection.
    pub separate_experts: bool,
}

/// A checkpoint's tensor names.
pub struct Naming {
    /// Where layer tensors start (`model.layers.`); the layer number follows.
    pub layer_prefix: &'static str,
    /// The stored name of an operand (for a role the class stores fused, the fused
    /// tensor's name with `#q`, `#k` … after it).
    pub name: fn(OperandKey) -> String,
    /// Layer tensors (after `{layer_prefix}{layer}.`) that hold several operands.
    pub fused: &'static [(&'static str, FusedTensor)],
    /// Layer buffers some checkpoints carry that hold no weights (causal masks, RoPE
    /// tables): skipped by name.
    pub buffers: &'static [&'static str],
    /// Prefixes some checkpoints put before the names, each with what the naming spells
    /// instead (`transformer.` before GPT-2's names; a multimodal Gemma 3's text model under
    /// `language_model.`, or under `model.language_model.` since transformers 4.52): the
    /// first that matches is rewritten.
    pub prefixes: &'static [(&'static str, &'static str)],
    /// Prefixes of the parts of a multimodal checkpoint that are not the language model
    /// (its vision tower and projector): not read, since LQL runs the text model only.
    pub other_parts: &'static [&'static str],
}

impl Naming {
    /// The name as the naming spells it (a checkpoint's prefix rewritten).
    pub fn strip<'n>(&self, name: &'n str) -> Cow<'n, str> {
        self.prefixes
            .iter()
            .find_map(|(from, to)| {
                let rest = name.strip_prefix(from)?;
                Some(if to.is_empty() {
                    Cow::Borrowed(rest)
                } else {
                    Cow::Owned(format!("{to}{rest}"))
                })
            })
            .unwrap_or(Cow::Borrowed(name))
    }

    /// `(layer, rest)` of a layer tensor's name.
    pub fn layer_part<'n>(&self, name: &'n str) -> Option<(&'n str, &'n str)> {
        name.strip_prefix(self.layer_prefix)?.split_once('.')
    }

    /// The fused tensor `name` is, with its layer as spelled.
    pub fn fused_part<'n>(&self, name: &'n str) -> Option<(&'n str, FusedTensor)> {
        let (layer, rest) = self.layer_part(name)?;
        let kind = self.fused.iter().find(|(s, _)| *s == rest)?.1;
        Some((layer, kind))
    }

    /// Whether `name` is a buffer that holds no weights, or a part of a multimodal
    /// checkpoint other than its language model.
    pub fn is_buffer(&self, name: &str) -> bool {
        self.other_parts.iter().any(|p| name.starts_with(p))
            || self
                .layer_part(name)
                .is_some_and(|(_, rest)| self.buffers.contains(&rest))
    }

    /// The operand key of `name` (already stripped).
    pub fn key(&self, name: &str) -> Option<OperandKey> {
        crate::import::operand_table::key_from_name(name, self.layer_prefix, self.name)
    }
}

/// One architecture class.
pub struct HfClass {
    /// `architectures[0]` in `config.json`.
    pub class: &'static str,
    /// The GGUF family whose block the class runs.
    pub family: &'static str,
    /// What the model reports as its architecture: the family, but `mistral` for
    /// Mistral's checkpoints, which run llama's block (llama.cpp reads no window for them
    /// either).
    pub architecture: &'static str,
    pub naming: &'static Naming,
    pub layout: Layout,
    /// The activations the class's config may name (`hidden_activation`, `hidden_act` or
    /// `activation_function`) for the family's one.
    pub activations: &'static [&'static str],
    /// Q/K/V biases when the config does not say `attention_bias`.
    pub attn_bias: bool,
    /// The FFN width in multiples of the hidden size when the config leaves it out (GPT-2's
    /// `n_inner: null`).
    pub ffn_default_multiple: Option<usize>,
    /// Config fields read as the family's GGUF metadata: `(field, key under {family}.)`.
    pub keys: &'static [(&'static str, &'static str)],
    /// Config fields that ask for something the block does not run: refused unless absent,
    /// `null` or equal to the value given.
    pub refused: &'static [(&'static str, Value)],
}

const SILU: &[&str] = &["silu", "swish"];
/// GELU as the GGUF families compute it (the tanh approximation, llama.cpp's `ggml_gelu`);
/// GPT-NeoX's exact `gelu` is read the same way, as llama.cpp runs its GGUF conversions.
const GELU: &[&str] = &["gelu_pytorch_tanh", "gelu_new", "gelu_fast", "gelu"];

const MOE_KEYS: &[(&str, &str)] = &[
    ("num_experts", "expert_count"),
    ("num_experts_per_tok", "expert_used_count"),
    ("moe_intermediate_size", "expert_feed_forward_length"),
    (
        "shared_expert_intermediate_size",
        "expert_shared_feed_forward_length",
    ),
];

/// Gemma 3's text model (`Gemma3ForCausalLM`; the multimodal class reads the same config
/// fields from its `text_config`).
const GEMMA3_TEXT: HfClass = HfClass {
    keys: &[
        ("sliding_window", "attention.sliding_window"),
        ("sliding_window_pattern", "attention.sliding_window_pattern"),
        ("rope_local_base_freq", "rope.freq_base_swa"),
        ("final_logit_softcapping", "final_logit_softcapping"),
    ],
    refused: &[("attn_logit_softcapping", Value::Null)],
    ..HfClass::gemma("Gemma3ForCausalLM", "gemma3")
};

/// Every class, in the order docs/reference.md lists them.
pub const CLASSES: [HfClass; 13] = [
    HfClass::llama("LlamaForCausalLM", "llama"),
    HfClass {
        architecture: "mistral",
        ..HfClass::llama("MistralForCausalLM", "llama")
    },
    HfClass {
        attn_bias: true,
        ..HfClass::llama("Qwen2ForCausalLM", "qwen2")
    },
    HfClass {
        attn_bias: true,
        layout: Layout {
            separate_experts: true,
            ..Layout::NONE
        },
        keys: MOE_KEYS,
        refused: &[
            ("norm_topk_prob", Value::Bool(false)),
            ("mlp_only_layers", Value::Array(Vec::new())),
        ],
        ..HfClass::llama("Qwen2MoeForCausalLM", "qwen2moe")
    },
    HfClass::llama("Qwen3ForCausalLM", "qwen3"),
    HfClass {
        layout: Layout {
            separate_experts: true,
            ..Layout::NONE
        },
        keys: MOE_KEYS,
        refused: &[
            ("norm_topk_prob", Value::Bool(true)),
            ("mlp_only_layers", Value::Array(Vec::new())),
        ],
        ..HfClass::llama("Qwen3MoeForCausalLM", "qwen3moe")
    },
    HfClass {
        keys: &[
            ("sliding_window", "attention.sliding_window"),
            ("attn_logit_softcapping", "attn_logit_softcapping"),
            ("final_logit_softcapping", "final_logit_softcapping"),
        ],
        ..HfClass::gemma("Gemma2ForCausalLM", "gemma2")
    },
    GEMMA3_TEXT,
    HfClass {
        class: "Gemma3ForConditionalGeneration",
        naming: &GEMMA3_MULTIMODAL,
        ..GEMMA3_TEXT
    },
    HfClass {
        naming: &PHI3,
        ..HfClass::llama("Phi3ForCausalLM", "phi3")
    },
    HfClass {
        naming: &GPT2,
        layout: Layout {
            transposed: true,
            ..Layout::NONE
        },
        activations: GELU,
        attn_bias: true,
        ffn_default_multiple: Some(4),
        ..HfClass::llama("GPT2LMHeadModel", "gpt2")
    },
    HfClass {
        naming: &GPTNEOX,
        layout: Layout {
            qkv_by_head: true,
            ..Layout::NONE
        },
        activations: GELU,
        attn_bias: true,
        keys: &[("use_parallel_residual", "use_parallel_residual")],
        ..HfClass::llama("GPTNeoXForCausalLM", "gptneox")
    },
    HfClass {
        naming: &SANDWICH,
        ..HfClass::llama("Olmo2ForCausalLM", "olmo2")
    },
];

impl Layout {
    pub const NONE: Layout = Layout {
        norm_offset: false,
        transposed: false,
        qkv_by_head: false,
        separate_experts: false,
    };
}

impl HfClass {
    /// A llama-shaped class: llama naming, stored as the family computes, SwiGLU.
    const fn llama(class: &'static str, family: &'static str) -> HfClass {
        HfClass {
            class,
            family,
            architecture: family,
            naming: &LLAMA,
            layout: Layout::NONE,
            activations: SILU,
            attn_bias: false,
            ffn_default_multiple: None,
            keys: &[],
            refused: &[],
        }
    }

    /// A Gemma class: the sandwich names, norms stored as offsets from 1, GELU.
    const fn gemma(class: &'static str, family: &'static str) -> HfClass {
        HfClass {
            naming: &SANDWICH,
            layout: Layout {
                norm_offset: true,
                ..Layout::NONE
            },
            activations: GELU,
            ..HfClass::llama(class, family)
        }
    }

    /// Whether the class's family runs per-dimension RoPE divisors (`rope_freqs.weight`).
    fn family_reads_rope_freqs(&self) -> bool {
        self.family == "llama"
    }

    /// The class of `config.json`'s `architectures[0]`.
    pub fn find(class: &str) -> Option<&'static HfClass> {
        CLASSES.iter().find(|c| c.class == class)
    }

    /// The config read as the family's GGUF metadata: the class's fields, RoPE scaling,
    /// partial rotary dimensions and a periodic `layer_types` list. A field the class
    /// refuses is refused here, by name.
    pub fn metadata(
        &self,
        path: &std::path::Path,
        cfg: &HfConfig,
        head_dim: usize,
    ) -> Result<ConfigMetadata> {
        let raw = &cfg.raw;
        let mut m = ConfigMetadata::new(path);
        let key = |k: &str| format!("{}.{k}", self.family);
        for (field, value) in self.refused {
            match raw.get(*field) {
                None | Some(Value::Null) => {}
                Some(v) if v == value => {}
                Some(v) => {
                    return Err(StorageError::Unsupported(format!(
                        "not supported yet: {field} = {v} in a {} ({})",
                        self.class,
                        path.display()
                    )))
                }
            }
        }
        for (field, k) in self.keys {
            if let Some(v) = raw.get(*field) {
                m.set(key(k), field, v.clone());
            }
        }
        if let Some(s) = cfg.rope_scaling.as_ref().filter(|s| s.is_object()) {
            let (field, kind) = match (s.get("rope_type"), s.get("type")) {
                (Some(t), _) => ("rope_scaling.rope_type", t),
                (None, Some(t)) => ("rope_scaling.type", t),
                (None, None) => ("rope_scaling", &Value::Null),
            };
            if kind.as_str() == Some("llama3") && self.family_reads_rope_freqs() {
                // Llama 3's scaling is per-dimension frequency divisors: the importer makes
                // them as llama.cpp's converter does (`hf::rope`), and the block reads them.
                m.makes("rope_freqs.weight");
            } else if kind.as_str() != Some("default") {
                m.set(key("rope.scaling.type"), field, kind.clone());
                if let Some(f) = s.get("factor") {
                    m.set(key("rope.scaling.factor"), "rope_scaling.factor", f.clone());
                }
            }
        }
        for field in ["partial_rotary_factor", "rotary_pct"] {
            if let Some(v) = raw.get(field).filter(|v| !v.is_null()) {
                let dims = v
                    .as_f64()
                    .filter(|f| *f > 0.0 && *f <= 1.0)
                    .map(|f| (f * head_dim as f64).round() as u64)
                    .ok_or_else(|| StorageError::Format {
                        path: path.to_path_buf(),
                        offset: 0,
                        field: field.into(),
                        message: format!("{v} is not a fraction of a head in (0, 1]"),
                    })?;
                m.set(key("rope.dimension_count"), field, Value::from(dims));
            }
        }
        if let Some(types) = raw.get("layer_types").and_then(Value::as_array) {
            // A periodic list is the family's pattern; any other list stays a list, which
            // the family refuses by name.
            let period = window_period(types);
            m.set(
                key("attention.sliding_window_pattern"),
                "layer_types",
                period.map_or_else(|| Value::Array(types.clone()), Value::from),
            );
        }
        Ok(m)
    }
}

/// The period `p` of a `layer_types` list whose layer `l` is global exactly when
/// `(l + 1) % p == 0` (Gemma's pattern: `p - 1` windowed layers, then a global one).
fn window_period(types: &[Value]) -> Option<u64> {
    let global: Vec<bool> = types
        .iter()
        .map(|t| t.as_str() == Some("full_attention"))
        .collect();
    if types.iter().any(|t| {
        !matches!(
            t.as_str(),
            Some("full_attention") | Some("sliding_attention")
        )
    }) {
        return None;
    }
    let p = global.iter().position(|&g| g)? + 1;
    let fits = global
        .iter()
        .enumerate()
        .all(|(l, &g)| g == ((l + 1) % p == 0));
    fits.then_some(p as u64)
}

/// Llama's names (`model.layers.{l}.self_attn.q_proj.weight`, …); the roles llama
/// checkpoints lack are spelled as the transformers classes that have them spell them.
pub fn llama_name(key: OperandKey) -> String {
    let base = match key.role {
        Role::TokenEmbedding => return "model.embed_tokens.weight".into(),
        Role::OutputNorm => return "model.norm.weight".into(),
        Role::Output => return "lm_head.weight".into(),
        Role::PositionEmbedding => return "model.embed_positions.weight".into(),
        Role::OutputNormBias => return "model.norm.bias".into(),
        Role::RopeFreqs => return "model.rope_freqs".into(),
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
        // Mixture-of-experts names (qwen2moe's and qwen3moe's): the banks are stacked from
        // `mlp.experts.{e}.…` at open ([`Layout::separate_experts`]); these name the banks.
        Role::FfnGateInp => "mlp.gate.weight",
        Role::FfnGateExps => "mlp.experts.gate_proj.weight",
        Role::FfnUpExps => "mlp.experts.up_proj.weight",
        Role::FfnDownExps => "mlp.experts.down_proj.weight",
        Role::FfnGateShexp => "mlp.shared_expert.gate_proj.weight",
        Role::FfnUpShexp => "mlp.shared_expert.up_proj.weight",
        Role::FfnDownShexp => "mlp.shared_expert.down_proj.weight",
        Role::FfnGateInpShexp => "mlp.shared_expert_gate.weight",
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

/// Llama's names with some layer roles spelled otherwise.
fn llama_except(key: OperandKey, overrides: &[(Role, &str)]) -> String {
    match overrides.iter().find(|(role, _)| *role == key.role) {
        Some((_, base)) => format!("model.layers.{}.{base}", key.layer.unwrap_or(0)),
        None => llama_name(key),
    }
}

/// The sandwich-norm classes' names (Gemma 2/3, OLMo 2): `post_attention_layernorm` is the
/// norm after attention, `pre_feedforward_layernorm` the one before the FFN.
fn sandwich_name(key: OperandKey) -> String {
    llama_except(
        key,
        &[
            (Role::AttnPostNorm, "post_attention_layernorm.weight"),
            (Role::FfnNorm, "pre_feedforward_layernorm.weight"),
        ],
    )
}

/// Phi-3's names: llama's, with Q/K/V in `qkv_proj` and gate/up in `gate_up_proj`.
fn phi3_name(key: OperandKey) -> String {
    llama_except(
        key,
        &[
            (Role::AttnQ, "self_attn.qkv_proj.weight#q"),
            (Role::AttnK, "self_attn.qkv_proj.weight#k"),
            (Role::AttnV, "self_attn.qkv_proj.weight#v"),
            (Role::FfnGate, "mlp.gate_up_proj.weight#gate"),
            (Role::FfnUp, "mlp.gate_up_proj.weight#up"),
        ],
    )
}

/// GPT-2's names (`h.{l}.attn.c_attn.weight`, …, after an optional `transformer.`).
fn gpt2_name(key: OperandKey) -> String {
    let base = match key.role {
        Role::TokenEmbedding => return "wte.weight".into(),
        Role::PositionEmbedding => return "wpe.weight".into(),
        Role::OutputNorm => return "ln_f.weight".into(),
        Role::OutputNormBias => return "ln_f.bias".into(),
        Role::Output => return "lm_head.weight".into(),
        Role::AttnNorm => "ln_1.weight",
        Role::AttnNormBias => "ln_1.bias",
        Role::AttnQ => "attn.c_attn.weight#q",
        Role::AttnK => "attn.c_attn.weight#k",
        Role::AttnV => "attn.c_attn.weight#v",
        Role::AttnQBias => "attn.c_attn.bias#q",
        Role::AttnKBias => "attn.c_attn.bias#k",
        Role::AttnVBias => "attn.c_attn.bias#v",
        Role::AttnOutput => "attn.c_proj.weight",
        Role::AttnOutputBias => "attn.c_proj.bias",
        Role::FfnNorm => "ln_2.weight",
        Role::FfnNormBias => "ln_2.bias",
        Role::FfnUp => "mlp.c_fc.weight",
        Role::FfnUpBias => "mlp.c_fc.bias",
        Role::FfnDown => "mlp.c_proj.weight",
        Role::FfnDownBias => "mlp.c_proj.bias",
        _ => return absent_name("h.", key),
    };
    format!("h.{}.{base}", key.layer.unwrap_or(0))
}

/// GPT-NeoX's names (`gpt_neox.layers.{l}.attention.query_key_value.weight`, …).
fn gptneox_name(key: OperandKey) -> String {
    let base = match key.role {
        Role::TokenEmbedding => return "gpt_neox.embed_in.weight".into(),
        Role::OutputNorm => return "gpt_neox.final_layer_norm.weight".into(),
        Role::OutputNormBias => return "gpt_neox.final_layer_norm.bias".into(),
        Role::Output => return "embed_out.weight".into(),
        Role::AttnNorm => "input_layernorm.weight",
        Role::AttnNormBias => "input_layernorm.bias",
        Role::AttnQ => "attention.query_key_value.weight#q",
        Role::AttnK => "attention.query_key_value.weight#k",
        Role::AttnV => "attention.query_key_value.weight#v",
        Role::AttnQBias => "attention.query_key_value.bias#q",
        Role::AttnKBias => "attention.query_key_value.bias#k",
        Role::AttnVBias => "attention.query_key_value.bias#v",
        Role::AttnOutput => "attention.dense.weight",
        Role::AttnOutputBias => "attention.dense.bias",
        Role::FfnNorm => "post_attention_layernorm.weight",
        Role::FfnNormBias => "post_attention_layernorm.bias",
        Role::FfnUp => "mlp.dense_h_to_4h.weight",
        Role::FfnUpBias => "mlp.dense_h_to_4h.bias",
        Role::FfnDown => "mlp.dense_4h_to_h.weight",
        Role::FfnDownBias => "mlp.dense_4h_to_h.bias",
        _ => return absent_name("gpt_neox.layers.", key),
    };
    format!("gpt_neox.layers.{}.{base}", key.layer.unwrap_or(0))
}

/// The name of a role a class never stores: its GGUF name in angle brackets, which no
/// checkpoint spells (so no stored tensor maps to it).
fn absent_name(layer_prefix: &str, key: OperandKey) -> String {
    let gguf = crate::import::gguf::tensor_name(key);
    match key.layer {
        Some(l) => format!("{layer_prefix}{l}.<{gguf}>"),
        None => format!("<{gguf}>"),
    }
}

static LLAMA: Naming = LLAMA_FIELDS;

static SANDWICH: Naming = Naming {
    name: sandwich_name,
    ..LLAMA_FIELDS
};

static PHI3: Naming = Naming {
    name: phi3_name,
    fused: &[
        ("self_attn.qkv_proj.weight", FusedTensor::Qkv),
        ("mlp.gate_up_proj.weight", FusedTensor::GateUp),
    ],
    ..LLAMA_FIELDS
};

/// LLAMA's fields, for struct update (a `static` cannot be spread).
const LLAMA_FIELDS: Naming = Naming {
    layer_prefix: "model.layers.",
    name: llama_name,
    fused: &[],
    buffers: &["self_attn.rotary_emb.inv_freq"],
    prefixes: &[],
    other_parts: &[],
};

/// A multimodal Gemma 3's language model (`language_model.model.layers.…`, or
/// `model.language_model.layers.…` as transformers 4.52 and later save it); its vision tower
/// and projector are not read.
static GEMMA3_MULTIMODAL: Naming = Naming {
    name: sandwich_name,
    prefixes: &[("model.language_model.", "model."), ("language_model.", "")],
    other_parts: &[
        "vision_tower.",
        "multi_modal_projector.",
        "model.vision_tower.",
        "model.multi_modal_projector.",
    ],
    ..LLAMA_FIELDS
};

static GPT2: Naming = Naming {
    layer_prefix: "h.",
    name: gpt2_name,
    fused: &[
        ("attn.c_attn.weight", FusedTensor::Qkv),
        ("attn.c_attn.bias", FusedTensor::QkvBias),
    ],
    buffers: &["attn.bias", "attn.masked_bias"],
    prefixes: &[("transformer.", "")],
    other_parts: &[],
};

static GPTNEOX: Naming = Naming {
    layer_prefix: "gpt_neox.layers.",
    name: gptneox_name,
    fused: &[
        ("attention.query_key_value.weight", FusedTensor::Qkv),
        ("attention.query_key_value.bias", FusedTensor::QkvBias),
    ],
    buffers: &[
        "attention.bias",
        "attention.masked_bias",
        "attention.rotary_emb.inv_freq",
    ],
    prefixes: &[],
    other_parts: &[],
};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_naming_maps_back_to_the_key_it_spells() {
        for class in &CLASSES {
            let n = class.naming;
            for role in Role::ALL {
                let key = if Role::GLOBAL.contains(&role) {
                    OperandKey::global(role)
                } else {
                    OperandKey::layer(3, role)
                };
                let name = (n.name)(key);
                if name.contains('#') || name.contains('<') {
                    continue; // fused parts and absent roles are never looked up
                }
                assert_eq!(n.key(&name), Some(key), "{} {name}", class.class);
            }
        }
        assert_eq!(GPT2.strip("transformer.h.0.ln_1.weight"), "h.0.ln_1.weight");
        assert!(GPT2.is_buffer("h.11.attn.bias"));
        assert_eq!(
            GPTNEOX.fused_part("gpt_neox.layers.2.attention.query_key_value.bias"),
            Some(("2", FusedTensor::QkvBias))
        );
    }

    #[test]
    fn a_periodic_layer_types_list_is_its_period() {
        let t = |g: &[bool]| -> Vec<Value> {
            g.iter()
                .map(|&g| {
                    json!(if g {
                        "full_attention"
                    } else {
                        "sliding_attention"
                    })
                })
                .collect()
        };
        let f = false;
        assert_eq!(window_period(&t(&[f, f, f, f, f, true, f, f])), Some(6));
        assert_eq!(window_period(&t(&[f, true, f, true])), Some(2));
        assert_eq!(window_period(&t(&[true, true])), Some(1));
        assert_eq!(window_period(&t(&[f, true, true])), None);
        assert_eq!(window_period(&t(&[f, f])), None);
    }
}
