//! GGUF importer: a GGUF file of one of the [`family::FAMILIES`] → [`Model`].
//!
//! Each family (`super::family`, one file each) says what its block computes; this file
//! reads the sizes every family shares, splits fused tensors (`attn_qkv`, phi3's gate+up
//! `ffn_up`) into row ranges read in place, and checks every operand against the surface.
//! A file with `{arch}.expert_count` has banks of experts where its family allows them; in
//! any family `{arch}.expert_gating_func` = 2 asks for sigmoid routing (renormalised over
//! the chosen experts), as llama.cpp's metadata spells it.
//!
//! All store `output.weight` unless the head is tied to `token_embd.weight`. The tokenizer
//! (`tokenizer.ggml.*`) is validated at open but decoded only when first asked for.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Result, StorageError};
use crate::format::gguf::{GgufFile, MetaArray};
use crate::model::{Model, Operand, OperandKey, Role, SourceKind};
use crate::surface::{ExecutionSurface, SpecialTokens};
use crate::tokenizer_spec::{GgufVocab, TokenizerSlot, TokenizerSpec};

use super::family::{self, Family, Meta, FAMILIES};
use super::fused::{FusedRows, FusedTensor};
use super::metadata::{missing, opt_usize, req_usize};
use super::{operand_table, validate};

/// The GGUF architectures (`general.architecture`) the importer accepts, each with
/// whether its FFNs may be banks of experts (docs/reference.md lists them).
pub fn supported_architectures() -> Vec<(&'static str, bool)> {
    FAMILIES
        .iter()
        .map(|f| (f.name, f.selection.is_some()))
        .collect()
}

/// Open a GGUF file as a model.
pub fn open(path: &Path) -> Result<Model> {
    let file = GgufFile::open(path)?;
    from_gguf(file)
}

/// The source name of an operand in llama/qwen2 GGUF naming.
pub fn tensor_name(key: OperandKey) -> String {
    let base = match key.role {
        Role::TokenEmbedding => return "token_embd.weight".into(),
        Role::OutputNorm => return "output_norm.weight".into(),
        Role::Output => return "output.weight".into(),
        Role::AttnNorm => "attn_norm.weight",
        Role::AttnQ => "attn_q.weight",
        Role::AttnK => "attn_k.weight",
        Role::AttnV => "attn_v.weight",
        Role::AttnOutput => "attn_output.weight",
        Role::AttnQBias => "attn_q.bias",
        Role::AttnKBias => "attn_k.bias",
        Role::AttnVBias => "attn_v.bias",
        Role::FfnNorm => "ffn_norm.weight",
        Role::FfnGate => "ffn_gate.weight",
        Role::FfnUp => "ffn_up.weight",
        Role::FfnDown => "ffn_down.weight",
        Role::FfnGateBias => "ffn_gate.bias",
        Role::FfnUpBias => "ffn_up.bias",
        Role::FfnAddedGate => "ffn_added_gate.weight",
        Role::FfnAddedUp => "ffn_added_up.weight",
        Role::FfnAddedDown => "ffn_added_down.weight",
        Role::FfnAddedGateBias => "ffn_added_gate.bias",
        Role::FfnAddedUpBias => "ffn_added_up.bias",
        Role::FfnGateScale => "ffn_gate_scale.weight",
        Role::FfnDownScale => "ffn_down_scale.weight",
        Role::FfnGateInp => "ffn_gate_inp.weight",
        Role::FfnGateExps => "ffn_gate_exps.weight",
        Role::FfnUpExps => "ffn_up_exps.weight",
        Role::FfnDownExps => "ffn_down_exps.weight",
        Role::FfnGateShexp => "ffn_gate_shexp.weight",
        Role::FfnUpShexp => "ffn_up_shexp.weight",
        Role::FfnDownShexp => "ffn_down_shexp.weight",
        Role::FfnGateInpShexp => "ffn_gate_inp_shexp.weight",
        Role::PositionEmbedding => return "position_embd.weight".into(),
        Role::OutputNormBias => return "output_norm.bias".into(),
        Role::RopeFreqs => return "rope_freqs.weight".into(),
        Role::AttnNormBias => "attn_norm.bias",
        Role::FfnNormBias => "ffn_norm.bias",
        Role::AttnQNorm => "attn_q_norm.weight",
        Role::AttnKNorm => "attn_k_norm.weight",
        Role::AttnOutputBias => "attn_output.bias",
        Role::AttnPostNorm => "post_attention_norm.weight",
        Role::FfnPostNorm => "post_ffw_norm.weight",
        Role::FfnDownBias => "ffn_down.bias",
    };
    format!("blk.{}.{base}", key.layer.unwrap_or(0))
}

/// The operand key of a GGUF tensor name, if it is one the importer knows.
pub fn operand_key(name: &str) -> Option<OperandKey> {
    operand_table::key_from_name(name, "blk.", tensor_name)
}

/// Judge a parsed GGUF file and build the model.
pub fn from_gguf(file: GgufFile) -> Result<Model> {
    let path = file.path().to_path_buf();
    from_parts(&file, std::slice::from_ref(&file), path, None)
}

/// The layers and boundaries a partial model (one pipeline stage of a layer package) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartialSpan {
    /// First and last layer held (inclusive).
    pub first: usize,
    pub last: usize,
    /// Whether the token embedding is held.
    pub embeddings: bool,
    /// Whether the final norm and head are held.
    pub output: bool,
    /// The layer count the (validated) package manifest declares; the fragments' block
    /// count must equal it before anything is sized by it.
    pub declared_layers: usize,
}

/// Judge a model whose metadata is `meta` and whose tensors are spread over `parts` (one
/// backing each, in order; a name already taken by an earlier part is skipped, as the
/// reference merges package parts). With `span`, only the operands of those layers and
/// boundaries are required (a stage of a layer package); without, every operand is.
pub fn from_parts(
    file: &GgufFile,
    parts: &[GgufFile],
    path: std::path::PathBuf,
    span: Option<PartialSpan>,
) -> Result<Model> {
    let arch = file
        .get_str("general.architecture")?
        .ok_or_else(|| missing(file, "general.architecture"))?
        .to_string();
    let Some(family) = family::find(&arch) else {
        let reason = format!(
            "not supported yet: running architecture `{arch}` ({}); supported GGUF architectures: {}",
            path.display(),
            family::names()
        );
        // A whole file opens for inspection (its tensor table, metadata and tokenizer);
        // a package stage must be runnable.
        return match span {
            None => uninterpreted(file, parts, path, &arch, reason),
            Some(_) => Err(StorageError::Unsupported(reason)),
        };
    };
    let k = |s: &str| format!("{arch}.{s}");

    if let Some(n) = file.get_u64("split.count")? {
        if n > 1 {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: split GGUF files ({} is one of {n} shards)",
                path.display()
            )));
        }
    }

    let n_layers = req_usize(file, &k("block_count"))?;
    let hidden = req_usize(file, &k("embedding_length"))?;
    let ffn = req_usize(file, &k("feed_forward_length"))?;
    let n_heads = req_usize(file, &k("attention.head_count"))?;
    let n_kv_heads = opt_usize(file, &k("attention.head_count_kv"))?.unwrap_or(n_heads);
    let field_err = |key: &str, message: String| StorageError::Format {
        path: path.clone(),
        offset: file.kv(&k(key)).map_or(0, |kv| kv.offset),
        field: k(key),
        message,
    };
    if n_heads == 0 {
        return Err(field_err("attention.head_count", "head count is 0".into()));
    }
    let head_dim = match opt_usize(file, &k("attention.key_length"))? {
        Some(h) => h,
        None if hidden % n_heads != 0 => {
            return Err(field_err(
                "attention.head_count",
                format!("{n_heads} heads do not divide the width {hidden}"),
            ))
        }
        None => hidden / n_heads,
    };
    if let Some(vl) = opt_usize(file, &k("attention.value_length"))? {
        if vl != head_dim {
            return Err(StorageError::Unsupported(format!(
                "not supported yet: value head size {vl} differs from key head size {head_dim} ({})",
                path.display()
            )));
        }
    }
    let context_length = req_usize(file, &k("context_length"))?;
    let norm_eps = file
        .get_f32(&k(family.eps_key))?
        .ok_or_else(|| missing(file, &k(family.eps_key)))?;
    let rope_theta = file.get_f32(&k("rope.freq_base"))?.unwrap_or(10_000.0);
    let meta = Meta {
        file,
        arch: &arch,
        n_layers,
        hidden,
        n_heads,
        head_dim,
    };
    let block = meta.block_of(family)?;
    if !block.rope_freq_factors
        && parts
            .iter()
            .any(|p| p.tensor_info("rope_freqs.weight").is_some())
    {
        return Err(StorageError::Unsupported(format!(
            "not supported yet: per-dimension RoPE frequencies in a {arch} file (tensor rope_freqs.weight in {})",
            path.display()
        )));
    }
    let fused = FusedRows {
        q: n_heads * head_dim,
        kv: n_kv_heads * head_dim,
        ffn,
    };

    // Operands.
    let mut operands = BTreeMap::new();
    for stored in stored_tensors(parts) {
        if let Some((layer, kind)) = fused_part(family, &stored.source_name) {
            for (key, op) in fused.split(&path, &layer, n_layers, kind, &stored)? {
                operands.entry(key).or_insert(op);
            }
            continue;
        }
        let key =
            operand_table::tensor_key(&path, &stored.source_name, &arch, n_layers, operand_key)?;
        operands.entry(key).or_insert(stored);
    }
    let vocab = match operand_table::embedding_vocab(&operands) {
        Some(v) => v,
        None => match opt_usize(file, &k("vocab_size"))? {
            Some(v) => v,
            // A stage without the embedding: one row per token of the vocabulary.
            None if span.is_some() => file
                .get_array("tokenizer.ggml.tokens")?
                .map_or(0, |a| a.len()),
            None => 0,
        },
    };
    // A stage that does not hold the output boundary cannot tell; it never runs the head.
    let tied_head =
        !operands.contains_key(&OperandKey::global(Role::Output)) && span.is_none_or(|s| s.output);
    let attn_bias = family.bias_required || operand_table::has_attn_bias(&operands);
    let moe = super::experts::experts(file, family, &operands, ffn)?;
    // A bank's FFN width is its experts' width.
    let ffn = moe.as_ref().map_or(ffn, |m| m.expert_ffn);

    let (special, slot) = tokenizer(file, vocab)?;
    let surface = ExecutionSurface {
        source_architecture: arch.clone(),
        n_layers,
        hidden,
        ffn,
        n_heads,
        n_kv_heads,
        head_dim,
        vocab,
        context_length,
        rope_theta,
        rope_pairing: family.pairing,
        norm_eps,
        activation: family.activation,
        tied_head,
        attn_bias,
        embedding_scale: (family.embedding_scale)(hidden),
        special,
        moe,
        block,
    };
    validate::check_surface(&path, &surface)?;
    match span {
        None => validate::check_layer_count(&path, &k("block_count"), &surface, operands.len())?,
        Some(sp) if surface.n_layers != sp.declared_layers => {
            return Err(StorageError::Format {
                path: path.clone(),
                offset: 0,
                field: k("block_count"),
                message: format!(
                    "{} layers, but the package manifest declares {}",
                    surface.n_layers, sp.declared_layers
                ),
            })
        }
        Some(_) => {}
    }
    match span {
        None => validate::check_operands(&path, &surface, &operands, tensor_name)?,
        Some(sp) => validate::check_operands_where(
            &path,
            &surface,
            &operands,
            tensor_name,
            |key| match key.layer {
                Some(l) => (sp.first..=sp.last).contains(&l),
                None => match key.role {
                    Role::TokenEmbedding => sp.embeddings,
                    _ => sp.output,
                },
            },
        )?,
    }

    let mut model = Model {
        path,
        kind: SourceKind::Gguf,
        surface,
        tokenizer: slot,
        operands,
        backings: parts.iter().map(|p| p.backing().clone()).collect(),
        absent: Default::default(),
        overlays: Default::default(),
        uninterpreted: None,
    };
    crate::overlay::stored::attach(&mut model)?;
    Ok(model)
}

/// Every tensor of `parts` as stored, in order (backing `i` is part `i`).
fn stored_tensors(parts: &[GgufFile]) -> impl Iterator<Item = Operand> + '_ {
    parts.iter().enumerate().flat_map(|(backing, part)| {
        part.tensors().iter().map(move |t| {
            let range = part.byte_range(t);
            Operand {
                source_name: t.name.clone(),
                dtype: t.dtype,
                shape: t.shape.clone(),
                backing,
                offset: range.start,
                len: range.len(),
            }
        })
    })
}

/// A file of an architecture LQL cannot run, opened for inspection: every tensor as stored
/// (no roles), the sizes its metadata states (zeros where it states none) and its
/// tokenizer when it carries a usable one.
fn uninterpreted(
    file: &GgufFile,
    parts: &[GgufFile],
    path: std::path::PathBuf,
    arch: &str,
    reason: String,
) -> Result<Model> {
    let k = |s: &str| format!("{arch}.{s}");
    // Sizes as stated; a key of another type (an array per layer) reads as absent.
    let size = |key: &str| opt_usize(file, &k(key)).ok().flatten().unwrap_or(0);
    let n_heads = size("attention.head_count");
    let hidden = size("embedding_length");
    let tensors: Vec<Operand> = stored_tensors(parts).collect();
    let vocab = file
        .get_array("tokenizer.ggml.tokens")
        .ok()
        .flatten()
        .map_or(0, |a| a.len());
    // A tokenizer the file states badly is left out (TOKENIZE then names the reason).
    let (special, slot) = tokenizer(file, vocab).unwrap_or_else(|_| {
        (
            SpecialTokens::default(),
            TokenizerSlot::ready(TokenizerSpec::None),
        )
    });
    let surface = ExecutionSurface {
        source_architecture: arch.to_string(),
        n_layers: size("block_count"),
        hidden,
        ffn: size("feed_forward_length"),
        n_heads,
        n_kv_heads: size("attention.head_count_kv"),
        head_dim: hidden.checked_div(n_heads).unwrap_or(0),
        vocab,
        context_length: size("context_length"),
        rope_theta: file
            .get_f32(&k("rope.freq_base"))
            .ok()
            .flatten()
            .unwrap_or(0.0),
        rope_pairing: crate::surface::RopePairing::Adjacent,
        norm_eps: 0.0,
        activation: crate::surface::Activation::Silu,
        tied_head: false,
        attn_bias: false,
        embedding_scale: 1.0,
        special,
        moe: None,
        block: Default::default(),
    };
    Ok(Model {
        path,
        kind: SourceKind::Gguf,
        surface,
        tokenizer: slot,
        operands: BTreeMap::new(),
        backings: parts.iter().map(|p| p.backing().clone()).collect(),
        absent: Default::default(),
        overlays: Default::default(),
        uninterpreted: Some(crate::model::Uninterpreted {
            architecture: arch.to_string(),
            reason,
            tensors,
        }),
    })
}

/// The fused tensor a GGUF name stands for in `family` (`blk.{layer}.attn_qkv.weight`, …).
fn fused_part(family: &Family, name: &str) -> Option<(String, FusedTensor)> {
    let (layer, suffix) = name.strip_prefix("blk.")?.split_once('.')?;
    let kind = match suffix {
        "attn_qkv.weight" if family.fused.qkv => FusedTensor::Qkv,
        "attn_qkv.bias" if family.fused.qkv => FusedTensor::QkvBias,
        "ffn_up.weight" if family.fused.gate_up => FusedTensor::GateUp,
        _ => return None,
    };
    Some((layer.to_string(), kind))
}

/// Special tokens (read now) and the tokenizer spec (decoded on first use).
fn tokenizer(file: &GgufFile, vocab: usize) -> Result<(SpecialTokens, TokenizerSlot)> {
    let model = file.get_str("tokenizer.ggml.model")?.map(str::to_string);
    let tokens = file.get_array("tokenizer.ggml.tokens")?.cloned();
    if let Some(t) = &tokens {
        if t.iter_str().is_none() {
            return Err(wrong(file, "tokenizer.ggml.tokens", "an array of strings"));
        }
        if vocab > 0 && t.len() != vocab {
            return Err(wrong(
                file,
                "tokenizer.ggml.tokens",
                &format!(
                    "one token per embedding row ({vocab}), found {} tokens",
                    t.len()
                ),
            ));
        }
    }
    let id = |key: &str| -> Result<Option<u32>> {
        let v = file.get_u32(key)?;
        if let Some(v) = v {
            if vocab > 0 && v as usize >= vocab {
                return Err(StorageError::Format {
                    path: file.path().to_path_buf(),
                    offset: file.kv(key).map_or(0, |kv| kv.offset),
                    field: key.to_string(),
                    message: format!("token id {v} is outside the vocabulary of {vocab}"),
                });
            }
        }
        Ok(v)
    };
    let bos = id("tokenizer.ggml.bos_token_id")?;
    let eos = id("tokenizer.ggml.eos_token_id")?;
    let mut eot: Vec<u32> = Vec::new();
    for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
        if let Some(v) = id(key)? {
            if Some(v) != eos && !eot.contains(&v) {
                eot.push(v);
            }
        }
    }
    if let Some(t) = &tokens {
        for (i, s) in t.iter_bytes().into_iter().flatten().enumerate() {
            if s.len() >= 5
                && s[0] == b'<'
                && validate::END_OF_TURN_TEXTS
                    .iter()
                    .any(|e| e.as_bytes() == s)
            {
                let i = i as u32;
                if Some(i) != eos && !eot.contains(&i) {
                    eot.push(i);
                }
            }
        }
    }
    let spm = model.as_deref() == Some("llama");
    let special = SpecialTokens {
        bos,
        eos,
        pad: id("tokenizer.ggml.padding_token_id")?,
        unk: id("tokenizer.ggml.unknown_token_id")?,
        eot,
        add_bos: file
            .get_bool("tokenizer.ggml.add_bos_token")?
            .unwrap_or(spm),
        add_eos: file
            .get_bool("tokenizer.ggml.add_eos_token")?
            .unwrap_or(false),
    };

    let Some(model) = model else {
        return Ok((special, TokenizerSlot::ready(TokenizerSpec::None)));
    };
    let Some(tokens) = tokens else {
        return Err(missing(file, "tokenizer.ggml.tokens"));
    };
    let pre = file.get_str("tokenizer.ggml.pre")?.map(str::to_string);
    let scores = file.get_array("tokenizer.ggml.scores")?.cloned();
    let types = file.get_array("tokenizer.ggml.token_type")?.cloned();
    let merges = file.get_array("tokenizer.ggml.merges")?.cloned();
    let chat_template = file.get_str("tokenizer.chat_template")?.map(str::to_string);
    let add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix")?;
    // Type-check now so that building later cannot fail on a well-formed open.
    let n = tokens.len();
    let check = |a: &Option<MetaArray>, key: &str, ok: bool, want: &str| -> Result<()> {
        match a {
            Some(arr) if !ok || arr.len() != n => Err(wrong(
                file,
                key,
                &format!(
                    "{want} with one entry per token ({n}), found {} entries",
                    arr.len()
                ),
            )),
            _ => Ok(()),
        }
    };
    use crate::format::gguf::MetaType as T;
    let float = |a: &MetaArray| matches!(a.elem_type(), T::F32 | T::F64);
    let int = |a: &MetaArray| {
        matches!(
            a.elem_type(),
            T::U8 | T::I8 | T::U16 | T::I16 | T::U32 | T::I32 | T::U64 | T::I64
        )
    };
    check(
        &scores,
        "tokenizer.ggml.scores",
        scores.as_ref().is_none_or(float),
        "an array of floats",
    )?;
    check(
        &types,
        "tokenizer.ggml.token_type",
        types.as_ref().is_none_or(int),
        "an array of integers",
    )?;
    if let Some(m) = &merges {
        if m.iter_str().is_none() {
            return Err(wrong(file, "tokenizer.ggml.merges", "an array of strings"));
        }
    }
    let slot = TokenizerSlot::lazy(move || {
        let vocab = GgufVocab {
            model: model.clone(),
            pre: pre.clone(),
            tokens: tokens.to_strings().unwrap_or_default(),
            scores: scores
                .as_ref()
                .and_then(MetaArray::to_f32)
                .unwrap_or_default(),
            token_types: types
                .as_ref()
                .and_then(MetaArray::to_i64)
                .map(|v| v.into_iter().map(|x| x as i32).collect())
                .unwrap_or_default(),
            merges: merges
                .as_ref()
                .and_then(MetaArray::to_strings)
                .unwrap_or_default(),
            add_space_prefix,
        };
        Ok(TokenizerSpec::Gguf {
            vocab,
            chat_template: chat_template.clone(),
        })
    });
    Ok((special, slot))
}

fn wrong(file: &GgufFile, key: &str, want: &str) -> StorageError {
    StorageError::Format {
        path: file.path().to_path_buf(),
        offset: file.kv(key).map_or(0, |kv| kv.offset),
        field: key.to_string(),
        message: format!("expected {want}"),
    }
}
