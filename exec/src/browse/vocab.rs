//! `Vocab`: the token texts browse needs to label features and merge DESCRIBE targets.
//!
//! Implemented for the executor's [`Tokenizer`](crate::tokenizer::Tokenizer); tests may
//! implement it over a fixed list.

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

impl Vocab for crate::tokenizer::Tokenizer {
    fn text(&self, id: u32) -> Option<String> {
        self.token_text(id)
    }
    fn is_special(&self, id: u32) -> bool {
        use crate::tokenizer::TokenKind as K;
        matches!(
            self.token_kind(id),
            K::Control | K::Unknown | K::Unused | K::Undefined
        )
    }
    fn len(&self) -> usize {
        self.vocab_size()
    }
}

/// True when a token text carries content: at least two alphanumeric characters (used by
/// DESCRIBE to drop punctuation, whitespace and one-letter glue pieces).
/// Byte pieces that are not text on their own (`<0x82>`) are not content either.
pub fn is_content(text: &str) -> bool {
    !text.contains("<0x") && text.chars().filter(|c| c.is_alphanumeric()).count() >= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_tokens() {
        assert!(is_content(" Paris"));
        assert!(is_content("42"));
        assert!(!is_content(","));
        assert!(!is_content(" "));
        assert!(!is_content("a"));
        assert!(!is_content("<0x82>"));
    }
}
