//! What is needed to build a tokenizer, as found in the source (the capability snapshot).
//!
//! The `exec` crate turns this into a working tokenizer; storage only carries it.

use serde::{Deserialize, Serialize};

/// Tokenizer description taken from GGUF metadata (`tokenizer.ggml.*`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: `gpt2` (byte-level BPE) or `llama` (SentencePiece).
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer name (`smollm`, `llama-bpe`, `gpt-2`, …).
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    pub scores: Vec<f32>,
    pub token_types: Vec<i32>,
    pub merges: Vec<String>,
}

/// The tokenizer source of a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TokenizerSpec {
    Gguf {
        vocab: GgufVocab,
        chat_template: Option<String>,
    },
    /// A Hugging Face `tokenizer.json`, verbatim.
    Json {
        json: String,
        chat_template: Option<String>,
    },
    /// The model carries no tokenizer.
    None,
}
