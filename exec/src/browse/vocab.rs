//! `Vocab`: the token texts browse needs to label features and merge DESCRIBE targets.
//!
//! The engine implements it over its tokenizer; [`GgufPieces`] implements it over the raw
//! GGUF vocabulary (byte-level BPE pieces are mapped back to text), so browse works on a
//! binding whose tokenizer cannot be built.

use lql_storage::tokenizer_spec::TokenizerSpec;

/// Token id → display text.
pub trait Vocab: Sync {
    /// The text of token `id` as it reads in decoded output (leading space kept), or `None`
    /// for an id outside the vocabulary.
    fn text(&self, id: u32) -> Option<String>;
    /// True for control/special tokens (`<|im_start|>`, `<s>`, …).
    fn is_special(&self, id: u32) -> bool;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The vocabulary of a GGUF tokenizer spec, decoded piece by piece.
#[derive(Debug, Clone)]
pub struct GgufPieces {
    texts: Vec<String>,
    special: Vec<bool>,
}

impl GgufPieces {
    /// `None` when the spec carries no GGUF vocabulary.
    pub fn from_spec(spec: &TokenizerSpec) -> Option<GgufPieces> {
        let TokenizerSpec::Gguf { vocab, .. } = spec else {
            return None;
        };
        let byte_level = vocab.model == "gpt2";
        let texts = vocab
            .tokens
            .iter()
            .map(|t| {
                if byte_level {
                    byte_level_text(t)
                } else {
                    t.replace('\u{2581}', " ")
                }
            })
            .collect();
        // token_type: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
        let special = (0..vocab.tokens.len())
            .map(|i| matches!(vocab.token_types.get(i), Some(2 | 3 | 5)))
            .collect();
        Some(GgufPieces { texts, special })
    }
}

impl Vocab for GgufPieces {
    fn text(&self, id: u32) -> Option<String> {
        self.texts.get(id as usize).cloned()
    }
    fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }
    fn len(&self) -> usize {
        self.texts.len()
    }
}

/// Maps a GPT-2 byte-level piece (`Ġ` for space, …) back to its bytes, lossily as UTF-8.
fn byte_level_text(piece: &str) -> String {
    let mut bytes = Vec::with_capacity(piece.len());
    for c in piece.chars() {
        match unicode_to_byte(c) {
            Some(b) => bytes.push(b),
            None => {
                let mut buf = [0u8; 4];
                bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The inverse of GPT-2's `bytes_to_unicode`.
fn unicode_to_byte(c: char) -> Option<u8> {
    let u = c as u32;
    let direct =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    if u < 256 && direct(u) {
        return Some(u as u8);
    }
    if (256..256 + 68).contains(&u) {
        // Non-printable bytes were assigned 256, 257, … in increasing byte order.
        let mut n = 256;
        for b in 0u32..256 {
            if !direct(b) {
                if n == u {
                    return Some(b as u8);
                }
                n += 1;
            }
        }
    }
    None
}

/// True when a token text carries content: at least two alphanumeric characters (used by
/// DESCRIBE to drop punctuation, whitespace and one-letter glue pieces).
pub fn is_content(text: &str) -> bool {
    text.chars().filter(|c| c.is_alphanumeric()).count() >= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_pieces() {
        assert_eq!(byte_level_text("ĠParis"), " Paris");
        assert_eq!(byte_level_text("Ċ"), "\n");
        assert_eq!(byte_level_text("abc"), "abc");
    }

    #[test]
    fn content_tokens() {
        assert!(is_content(" Paris"));
        assert!(is_content("42"));
        assert!(!is_content(","));
        assert!(!is_content(" "));
        assert!(!is_content("a"));
    }
}
