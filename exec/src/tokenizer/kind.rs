//! Token kinds: what a vocabulary entry is (GGUF `tokenizer.ggml.token_type`).

/// The kind of a vocabulary entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// An ordinary piece of text.
    Normal,
    /// The unknown token (`<unk>`).
    Unknown,
    /// A control token (`<s>`, `<|im_start|>`): recognised in prompts, not text.
    Control,
    /// A user-defined token: matched verbatim in text, rendered verbatim.
    UserDefined,
    /// A reserved, unused slot.
    Unused,
    /// A byte-fallback token (`<0x0A>`): one raw byte.
    Byte,
    /// Type 0 in GGUF, or an id outside the vocabulary.
    Undefined,
}

impl TokenKind {
    /// From the GGUF `tokenizer.ggml.token_type` code (unknown codes are `Undefined`, as in
    /// llama.cpp).
    pub fn from_gguf(code: i32) -> TokenKind {
        match code {
            1 => TokenKind::Normal,
            2 => TokenKind::Unknown,
            3 => TokenKind::Control,
            4 => TokenKind::UserDefined,
            5 => TokenKind::Unused,
            6 => TokenKind::Byte,
            _ => TokenKind::Undefined,
        }
    }

    /// Lower-case name, as shown in result rows.
    pub fn name(self) -> &'static str {
        match self {
            TokenKind::Normal => "normal",
            TokenKind::Unknown => "unknown",
            TokenKind::Control => "control",
            TokenKind::UserDefined => "user_defined",
            TokenKind::Unused => "unused",
            TokenKind::Byte => "byte",
            TokenKind::Undefined => "undefined",
        }
    }

    /// Tokens matched as a whole in input text before the model splits it (llama.cpp's
    /// special-token partition: control, user-defined and unknown).
    pub fn is_matched_verbatim(self) -> bool {
        matches!(
            self,
            TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown
        )
    }
}

impl std::fmt::Display for TokenKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
