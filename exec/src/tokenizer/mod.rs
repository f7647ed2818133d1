//! Text ⇄ token ids for a model, through the `tokenizers` crate.
//!
//! A [`Tokenizer`] is built from a model's [`TokenizerSpec`]: GGUF metadata
//! (`tokenizer.ggml.*`: byte-level BPE with the llama.cpp pre-tokenizer named by
//! `tokenizer.ggml.pre`, or SentencePiece BPE with scores and byte fallback) or a Hugging
//! Face `tokenizer.json`. Control and user-defined tokens written in the text
//! (`<|im_start|>`) are recognised as single tokens.
//!
//! Decoding works on bytes: every id has the exact bytes it stands for (byte-level
//! characters mapped back, `▁` as a space, `<0x0A>` as one byte), so [`Tokenizer::decode`]
//! is the byte-exact inverse of [`Tokenizer::encode`], and [`StreamDecoder`] can hold back
//! a character whose bytes are split across tokens.
//!
//! - [`gguf`]: building from a GGUF vocabulary (both families).
//! - [`gguf_meta`]: reading the vocabulary straight from a GGUF file's metadata.
//! - [`hf_json`]: building from a `tokenizer.json`.
//! - [`pretokenize`]: llama.cpp pre-tokenizer names → split expressions.
//! - [`byte_level`]: the GPT-2 byte alphabet.
//! - [`stream`]: incremental decoding.

pub mod byte_level;
pub mod gguf;
pub mod gguf_meta;
pub mod hf_json;
pub mod kind;
pub mod pretokenize;
pub mod stream;

use std::collections::HashMap;

use lql_storage::surface::SpecialTokens;
use lql_storage::tokenizer_spec::TokenizerSpec;

pub use crate::error::{ExecError, Result};
pub use kind::TokenKind;
pub use stream::StreamDecoder;

/// Settings that GGUF files keep beside the vocabulary (`tokenizer.ggml.bos_token_id`,
/// `add_bos_token`, `add_space_prefix`, …). `None`/defaults follow llama.cpp per family.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenizerConfig {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    /// Add BOS when encoding with `add_special`; `None`: the family default
    /// (SentencePiece and llama 3: yes, other byte-level BPE: no).
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    /// SentencePiece: prefix each run of text with a space (`None`: yes for `llama`).
    pub add_space_prefix: Option<bool>,
}

impl TokenizerConfig {
    /// The special-token facts an importer judged (the execution surface's copy).
    pub fn from_special(special: &SpecialTokens) -> TokenizerConfig {
        TokenizerConfig {
            bos: special.bos,
            eos: special.eos,
            unk: special.unk,
            add_bos: Some(special.add_bos),
            add_eos: Some(special.add_eos),
            add_space_prefix: None,
        }
    }
}

/// Where a leading space is removed when decoding (the inverse of the SentencePiece space
/// prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StripRule {
    /// Nothing is removed.
    Never,
    /// One space at the start of each run of text that begins the sequence or follows a
    /// verbatim-matched token (exactly where encoding inserted one).
    AfterBoundary,
    /// One space at the very start only (Hugging Face `Strip`/`Metaspace` decoders).
    AtStart,
}

/// How ids are turned back into text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rendering {
    /// From the per-id byte table.
    Pieces,
    /// Through the `tokenizers` decoder (tokenizer.json with a decoder that is neither
    /// byte-level nor SentencePiece-like); pieces are then approximations.
    Library,
}

/// The resolved special-token behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Specials {
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    /// The library's post-processor adds the special tokens itself (tokenizer.json).
    library_adds_special: bool,
}

/// A model's tokenizer. Cheap to share (`Send + Sync`); build once per model.
pub struct Tokenizer {
    hf: tokenizers::Tokenizer,
    /// Vocabulary string of each id, as the source stores it (`ĠParis`, `▁Paris`).
    raw: Vec<String>,
    /// The bytes each id stands for.
    pieces: Vec<Box<[u8]>>,
    kinds: Vec<TokenKind>,
    /// Display bytes → first id with them (for [`Tokenizer::token_id`]).
    by_piece: HashMap<Box<[u8]>, u32>,
    specials: Specials,
    strip: StripRule,
    rendering: Rendering,
    description: String,
    /// Constrained decoding's token trie and parser factory, built on first use
    /// ([`crate::constrain::GrammarCompiler::of`]).
    grammar_compiler: GrammarCompilerCell,
}

type GrammarCompilerCell =
    std::sync::OnceLock<std::result::Result<crate::constrain::GrammarCompiler, String>>;

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("description", &self.description)
            .field("vocab_size", &self.raw.len())
            .field("bos", &self.specials.bos)
            .field("eos", &self.specials.eos)
            .finish()
    }
}

impl Tokenizer {
    /// Build from a model's tokenizer spec, with llama.cpp's per-family defaults for the
    /// settings a spec does not carry (BOS/EOS ids and whether to add them). Prefer
    /// [`Tokenizer::from_spec_with_special`] when the importer's special tokens are known.
    pub fn from_spec(spec: &TokenizerSpec) -> Result<Tokenizer> {
        Self::from_spec_with_config(spec, &TokenizerConfig::default())
    }

    /// Build from a spec and the special tokens the importer judged (the execution
    /// surface's `special`).
    pub fn from_spec_with_special(
        spec: &TokenizerSpec,
        special: &SpecialTokens,
    ) -> Result<Tokenizer> {
        Self::from_spec_with_config(spec, &TokenizerConfig::from_special(special))
    }

    /// Build from a spec with explicit settings.
    pub fn from_spec_with_config(
        spec: &TokenizerSpec,
        config: &TokenizerConfig,
    ) -> Result<Tokenizer> {
        match spec {
            TokenizerSpec::Gguf { vocab, .. } => gguf::build(vocab, config),
            TokenizerSpec::Json { json, .. } => hf_json::build(json, config),
            TokenizerSpec::None => Err(ExecError::NoTokenizer),
        }
    }

    /// Build from a GGUF file's metadata alone (works for vocabulary-only files).
    pub fn from_gguf(file: &lql_storage::format::gguf::GgufFile) -> Result<Tokenizer> {
        let (vocab, config) = gguf_meta::read(file)?;
        gguf::build(&vocab, &config)
    }

    /// Token ids of `text`. Control and user-defined tokens written in the text are
    /// recognised as single tokens. With `add_special`, BOS/EOS are added as the model
    /// asks (`tokenizer.ggml.add_bos_token`, or the tokenizer.json post-processor).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let s = &self.specials;
        if s.library_adds_special {
            let enc = self
                .hf
                .encode_fast(text, add_special)
                .map_err(|e| ExecError::TokenizerLibrary(e.to_string()))?;
            return Ok(enc.get_ids().to_vec());
        }
        let enc = self
            .hf
            .encode_fast(text, false)
            .map_err(|e| ExecError::TokenizerLibrary(e.to_string()))?;
        let body = enc.get_ids();
        let mut ids = Vec::with_capacity(body.len() + 2);
        if add_special && s.add_bos {
            if let Some(b) = s.bos {
                ids.push(b);
            }
        }
        ids.extend_from_slice(body);
        if add_special && s.add_eos {
            if let Some(e) = s.eos {
                ids.push(e);
            }
        }
        Ok(ids)
    }

    /// The text of `ids`: the byte-exact inverse of [`Tokenizer::encode`] (control tokens
    /// are rendered as their text; a SentencePiece space prefix added by encoding is
    /// removed). Bytes that do not form valid UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        if self.rendering == Rendering::Library {
            self.check_ids(ids)?;
            return self
                .hf
                .decode(ids, false)
                .map_err(|e| ExecError::TokenizerLibrary(e.to_string()));
        }
        let bytes = self.decode_bytes(ids)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The exact bytes of `ids` (see [`Tokenizer::decode`]).
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>> {
        self.check_ids(ids)?;
        let mut out = Vec::new();
        let mut boundary = true;
        for (i, &id) in ids.iter().enumerate() {
            let kind = self.kinds[id as usize];
            let mut piece: &[u8] = &self.pieces[id as usize];
            if kind.is_matched_verbatim() {
                boundary = self.strip == StripRule::AfterBoundary;
            } else {
                let strip = match self.strip {
                    StripRule::Never => false,
                    StripRule::AfterBoundary => boundary,
                    StripRule::AtStart => i == 0 || (i == 1 && Some(ids[0]) == self.specials.bos),
                };
                if strip && piece.first() == Some(&b' ') {
                    piece = &piece[1..];
                }
                boundary = false;
            }
            out.extend_from_slice(piece);
        }
        Ok(out)
    }

    /// The text of `ids` as a continuation of earlier text: pieces concatenated, nothing
    /// removed (what [`StreamDecoder`] yields). For generated tokens.
    pub fn decode_continuation(&self, ids: &[u32]) -> Result<String> {
        self.check_ids(ids)?;
        let mut out = Vec::new();
        for &id in ids {
            out.extend_from_slice(&self.pieces[id as usize]);
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// An incremental decoder for generated ids.
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self)
    }

    /// The piece `id` stands for, as displayed: `" Paris"`, `"<|im_start|>"`, `"\n"`.
    /// Bytes that are not valid UTF-8 on their own (half of an emoji) are shown as
    /// `<0xF0>`. `None` outside the vocabulary.
    pub fn token_text(&self, id: u32) -> Option<String> {
        let bytes = self.pieces.get(id as usize)?;
        Some(display_bytes(bytes))
    }

    /// The exact bytes `id` stands for.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.pieces.get(id as usize).map(|b| &b[..])
    }

    /// The vocabulary entry of `id` as the source spells it (`ĠParis`, `▁Paris`, `<0x0A>`).
    pub fn token_raw(&self, id: u32) -> Option<&str> {
        self.raw.get(id as usize).map(String::as_str)
    }

    /// The kind of `id` ([`TokenKind::Undefined`] outside the vocabulary).
    pub fn token_kind(&self, id: u32) -> TokenKind {
        self.kinds
            .get(id as usize)
            .copied()
            .unwrap_or(TokenKind::Undefined)
    }

    /// Number of ids (the embedding's row count for a consistent model).
    pub fn vocab_size(&self) -> usize {
        self.raw.len()
    }

    /// The id of a token given either as the vocabulary spells it (`ĠParis`,
    /// `<|im_end|>`) or as displayed (`" Paris"`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        if let Some(id) = self.hf.token_to_id(text) {
            return Some(id);
        }
        self.by_piece.get(text.as_bytes()).copied()
    }

    pub(crate) fn grammar_compiler_cell(&self) -> &GrammarCompilerCell {
        &self.grammar_compiler
    }

    /// Beginning-of-sequence id, if the model has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.specials.bos
    }

    /// End-of-sequence id, if the model has one.
    pub fn eos_id(&self) -> Option<u32> {
        self.specials.eos
    }

    /// Unknown-token id, if the model has one.
    pub fn unk_id(&self) -> Option<u32> {
        self.specials.unk
    }

    /// Whether `encode(_, true)` adds BOS.
    pub fn adds_bos(&self) -> bool {
        self.specials.add_bos && self.specials.bos.is_some()
    }

    /// A short description: source and family (`gguf gpt2 (pre smollm)`).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The tokenizer as a Hugging Face `tokenizer.json` (normalizer, pre-tokenizer, BPE
    /// model, added tokens, BOS/EOS post-processor and decoder), e.g. to write beside an
    /// exported model. Loading it back gives the same ids.
    pub fn to_tokenizer_json(&self, pretty: bool) -> Result<String> {
        self.hf
            .to_string(pretty)
            .map_err(|e| ExecError::TokenizerLibrary(e.to_string()))
    }

    fn check_ids(&self, ids: &[u32]) -> Result<()> {
        let n = self.raw.len();
        match ids.iter().position(|&id| id as usize >= n) {
            Some(position) => Err(ExecError::TokenOutOfRange {
                id: ids[position],
                position: Some(position),
                vocab: n,
            }),
            None => Ok(()),
        }
    }
}

impl crate::generate::TokenDecoder for Tokenizer {
    fn decode_ids(&self, ids: &[u32]) -> String {
        let n = self.raw.len();
        let mut out = Vec::new();
        for &id in ids.iter().filter(|&&id| (id as usize) < n) {
            out.extend_from_slice(&self.pieces[id as usize]);
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// Valid UTF-8 as text, every other byte as `<0xNN>`.
fn display_bytes(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                break;
            }
            Err(e) => {
                let good = e.valid_up_to();
                out.push_str(std::str::from_utf8(&rest[..good]).unwrap_or_default());
                let bad = e.error_len().unwrap_or(rest.len() - good);
                for b in &rest[good..good + bad] {
                    out.push_str(&format!("<0x{b:02X}>"));
                }
                rest = &rest[good + bad..];
            }
        }
    }
    out
}

/// Parts shared by the builders.
pub(crate) struct Parts {
    pub hf: tokenizers::Tokenizer,
    pub raw: Vec<String>,
    pub pieces: Vec<Box<[u8]>>,
    pub kinds: Vec<TokenKind>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub library_adds_special: bool,
    pub strip_after_boundary: bool,
    pub strip_at_start: bool,
    pub library_rendering: bool,
    pub description: String,
}

impl Parts {
    pub(crate) fn finish(self) -> Tokenizer {
        let mut by_piece: HashMap<Box<[u8]>, u32> = HashMap::with_capacity(self.pieces.len());
        for (id, p) in self.pieces.iter().enumerate() {
            if !p.is_empty() {
                by_piece.entry(p.clone()).or_insert(id as u32);
            }
        }
        let strip = if self.strip_after_boundary {
            StripRule::AfterBoundary
        } else if self.strip_at_start {
            StripRule::AtStart
        } else {
            StripRule::Never
        };
        Tokenizer {
            hf: self.hf,
            raw: self.raw,
            pieces: self.pieces,
            kinds: self.kinds,
            by_piece,
            specials: Specials {
                bos: self.bos,
                eos: self.eos,
                unk: self.unk,
                add_bos: self.add_bos,
                add_eos: self.add_eos,
                library_adds_special: self.library_adds_special,
            },
            strip,
            rendering: if self.library_rendering {
                Rendering::Library
            } else {
                Rendering::Pieces
            },
            description: self.description,
            grammar_compiler: GrammarCompilerCell::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizer_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Tokenizer>();
    }

    #[test]
    fn display_escapes_broken_utf8() {
        assert_eq!(display_bytes(b" Paris"), " Paris");
        assert_eq!(display_bytes(&[0xF0, 0x9F]), "<0xF0><0x9F>");
        assert_eq!(display_bytes(&[b'a', 0xFF, b'b']), "a<0xFF>b");
    }
}
