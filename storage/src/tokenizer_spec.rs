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
    /// `tokenizer.ggml.add_space_prefix`: whether SentencePiece prepends a space to the
    /// text (absent: llama.cpp's default, yes; Gemma's files say no).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_space_prefix: Option<bool>,
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

type Loader = dyn Fn() -> crate::error::Result<TokenizerSpec> + Send + Sync;

/// A model's tokenizer spec, built on first use: decoding a 49k-entry vocabulary and its
/// merges costs milliseconds and megabytes, which opening a model should not pay.
/// Clones share the built value.
#[derive(Clone)]
pub struct TokenizerSlot {
    cell: std::sync::Arc<std::sync::OnceLock<std::sync::Arc<TokenizerSpec>>>,
    loader: Option<std::sync::Arc<Loader>>,
}

impl std::fmt::Debug for TokenizerSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.cell.get() {
            Some(s) => write!(f, "TokenizerSlot(built: {s:?})"),
            None => f.write_str("TokenizerSlot(not built yet)"),
        }
    }
}

impl TokenizerSlot {
    /// A slot holding an already built spec.
    pub fn ready(spec: TokenizerSpec) -> Self {
        let cell = std::sync::OnceLock::new();
        let _ = cell.set(std::sync::Arc::new(spec));
        TokenizerSlot {
            cell: std::sync::Arc::new(cell),
            loader: None,
        }
    }

    /// A slot that runs `loader` the first time the spec is asked for (again after a
    /// failure).
    pub fn lazy(
        loader: impl Fn() -> crate::error::Result<TokenizerSpec> + Send + Sync + 'static,
    ) -> Self {
        TokenizerSlot {
            cell: std::sync::Arc::new(std::sync::OnceLock::new()),
            loader: Some(std::sync::Arc::new(loader)),
        }
    }

    /// The spec, building it if needed.
    pub fn get(&self) -> crate::error::Result<std::sync::Arc<TokenizerSpec>> {
        if let Some(s) = self.cell.get() {
            return Ok(s.clone());
        }
        let spec = match &self.loader {
            Some(l) => l()?,
            None => TokenizerSpec::None,
        };
        Ok(self.cell.get_or_init(|| std::sync::Arc::new(spec)).clone())
    }

    /// True once the spec has been built.
    pub fn is_built(&self) -> bool {
        self.cell.get().is_some()
    }
}

impl TokenizerSpec {
    /// The chat template, if the source carries one.
    pub fn chat_template(&self) -> Option<&str> {
        match self {
            TokenizerSpec::Gguf { chat_template, .. }
            | TokenizerSpec::Json { chat_template, .. } => chat_template.as_deref(),
            TokenizerSpec::None => None,
        }
    }
}
