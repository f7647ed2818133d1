//! Reading a tokenizer straight from a GGUF file's metadata.
//!
//! The model importer hands the vocabulary over as a `TokenizerSpec`; this reader serves
//! files it does not import, such as llama.cpp's vocabulary-only test files (no tensors),
//! and also picks up `tokenizer.ggml.add_space_prefix`, which the spec does not carry.

use lql_storage::format::gguf::GgufFile;
use lql_storage::tokenizer_spec::GgufVocab;

use super::TokenizerConfig;
use crate::error::{ExecError, Result};

/// The vocabulary and settings stored in `file`.
pub fn read(file: &GgufFile) -> Result<(GgufVocab, TokenizerConfig)> {
    let Some(model) = file.get_str("tokenizer.ggml.model")? else {
        return Err(ExecError::NoTokenizer);
    };
    let tokens = file
        .get_str_array("tokenizer.ggml.tokens")?
        .ok_or_else(|| {
            ExecError::vocab(
                format!("{}: tokenizer.ggml.tokens", file.path().display()),
                "absent",
            )
        })?;
    let token_types = file
        .get_i64_array("tokenizer.ggml.token_type")?
        .unwrap_or_default()
        .into_iter()
        .map(|t| i32::try_from(t).unwrap_or(0))
        .collect();
    let vocab = GgufVocab {
        model: model.to_string(),
        pre: file.get_str("tokenizer.ggml.pre")?.map(str::to_string),
        tokens,
        scores: file
            .get_f32_array("tokenizer.ggml.scores")?
            .unwrap_or_default(),
        token_types,
        merges: file
            .get_str_array("tokenizer.ggml.merges")?
            .unwrap_or_default(),
        add_space_prefix: file.get_bool("tokenizer.ggml.add_space_prefix")?,
    };
    let config = TokenizerConfig {
        bos: file.get_u32("tokenizer.ggml.bos_token_id")?,
        eos: file.get_u32("tokenizer.ggml.eos_token_id")?,
        unk: file.get_u32("tokenizer.ggml.unknown_token_id")?,
        add_bos: file.get_bool("tokenizer.ggml.add_bos_token")?,
        add_eos: file.get_bool("tokenizer.ggml.add_eos_token")?,
        add_space_prefix: file.get_bool("tokenizer.ggml.add_space_prefix")?,
    };
    Ok((vocab, config))
}
