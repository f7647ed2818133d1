//! Building a [`Tokenizer`] from a Hugging Face `tokenizer.json`.
//!
//! The `tokenizers` library runs the file as written (normalizer, pre-tokenizer, model,
//! post-processor, added tokens). For decoding, the file's decoder is recognised as
//! byte-level (GPT-2 alphabet) or SentencePiece-like (`▁`, byte fallback), which both give
//! exact per-id bytes; any other decoder is run by the library itself.

use serde_json::Value;

use super::gguf::spm_byte;
use super::kind::TokenKind;
use super::{byte_level, Parts, Tokenizer, TokenizerConfig};
use crate::error::{ExecError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    ByteLevel,
    SentencePiece { strip_first_space: bool },
    Other,
}

/// The decoder's type names, flattened through `Sequence`.
fn decoder_steps(decoder: &Value, out: &mut Vec<Value>) {
    match decoder.get("type").and_then(Value::as_str) {
        Some("Sequence") => {
            for d in decoder
                .get("decoders")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                decoder_steps(d, out);
            }
        }
        Some(_) => out.push(decoder.clone()),
        None => {}
    }
}

fn style(root: &Value) -> Style {
    let mut steps = Vec::new();
    if let Some(d) = root.get("decoder") {
        decoder_steps(d, &mut steps);
    }
    let ty = |v: &Value| {
        v.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    if steps.iter().any(|s| ty(s) == "ByteLevel") {
        return Style::ByteLevel;
    }
    let spm = steps.iter().any(|s| {
        matches!(ty(s).as_str(), "ByteFallback" | "Metaspace")
            || (ty(s) == "Replace" && s.to_string().contains('\u{2581}'))
    });
    if spm {
        let strip_first_space = steps.iter().any(|s| match ty(s).as_str() {
            "Strip" => s.get("start").and_then(Value::as_u64).unwrap_or(0) > 0,
            "Metaspace" => {
                s.get("prepend_scheme").and_then(Value::as_str) != Some("never")
                    && s.get("add_prefix_space").and_then(Value::as_bool) != Some(false)
            }
            _ => false,
        });
        return Style::SentencePiece { strip_first_space };
    }
    Style::Other
}

/// Build a tokenizer from the text of a `tokenizer.json`.
pub fn build(json: &str, config: &TokenizerConfig) -> Result<Tokenizer> {
    let root: Value =
        serde_json::from_str(json).map_err(|e| ExecError::TokenizerJson(e.to_string()))?;
    let hf: tokenizers::Tokenizer = json
        .parse()
        .map_err(|e: tokenizers::Error| ExecError::TokenizerJson(e.to_string()))?;
    let style = style(&root);

    let vocab = hf.get_vocab(true);
    let n = vocab.values().map(|&id| id as usize + 1).max().unwrap_or(0);
    if n == 0 {
        return Err(ExecError::vocab(
            "tokenizer.json",
            "the vocabulary is empty",
        ));
    }
    let mut raw = vec![String::new(); n];
    let mut kinds = vec![TokenKind::Undefined; n];
    for (text, &id) in &vocab {
        raw[id as usize] = text.clone();
        kinds[id as usize] = TokenKind::Normal;
    }
    let unk_text = root
        .pointer("/model/unk_token")
        .and_then(Value::as_str)
        .map(str::to_string);
    let byte_fallback = root
        .pointer("/model/byte_fallback")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    for (id, text) in raw.iter().enumerate() {
        if Some(text) == unk_text.as_ref() {
            kinds[id] = TokenKind::Unknown;
        } else if byte_fallback && spm_byte(text).is_some() {
            kinds[id] = TokenKind::Byte;
        }
    }
    let added = hf.get_added_tokens_decoder();
    for (&id, tok) in &added {
        if let Some(k) = kinds.get_mut(id as usize) {
            *k = if *k == TokenKind::Unknown {
                TokenKind::Unknown
            } else if tok.special {
                TokenKind::Control
            } else {
                TokenKind::UserDefined
            };
        }
    }

    let pieces: Vec<Box<[u8]>> = raw
        .iter()
        .enumerate()
        .map(|(id, t)| -> Box<[u8]> {
            let kind = kinds[id];
            if kind.is_matched_verbatim() && added.contains_key(&(id as u32)) {
                return t.as_bytes().into();
            }
            match (style, kind) {
                (_, TokenKind::Undefined) => Box::default(),
                (Style::ByteLevel, _) => byte_level::decode(t)
                    .unwrap_or_else(|| t.as_bytes().to_vec())
                    .into(),
                (Style::SentencePiece { .. }, TokenKind::Byte) => {
                    spm_byte(t).map_or_else(|| t.as_bytes().into(), |b| [b].into())
                }
                (Style::SentencePiece { .. }, _) => t.replace('\u{2581}', " ").into_bytes().into(),
                (Style::Other, _) => hf
                    .decode(&[id as u32], false)
                    .unwrap_or_default()
                    .into_bytes()
                    .into(),
            }
        })
        .collect();

    // tokenizer.json does not say which ids are BOS/EOS (config.json does): take them
    // from the importer.
    let bos = config.bos;
    let eos = config.eos;
    let unk = config
        .unk
        .or_else(|| unk_text.as_deref().and_then(|t| hf.token_to_id(t)));
    let (strip_at_start, library_rendering) = match style {
        Style::SentencePiece { strip_first_space } => (strip_first_space, false),
        Style::ByteLevel => (false, false),
        Style::Other => (false, true),
    };
    let description = format!(
        "tokenizer.json {}",
        root.pointer("/model/type")
            .and_then(Value::as_str)
            .unwrap_or("model")
    );
    Ok(Parts {
        hf,
        raw,
        pieces,
        kinds,
        bos,
        eos,
        unk,
        add_bos: false,
        add_eos: false,
        library_adds_special: true,
        strip_after_boundary: false,
        strip_at_start,
        library_rendering,
        description,
    }
    .finish())
}
