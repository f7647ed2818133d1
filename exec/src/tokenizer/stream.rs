//! Incremental decoding: ids in, complete characters out.
//!
//! A character can be split across tokens (byte-level BPE and byte-fallback tokens spell
//! an emoji in two to four pieces). The decoder keeps the bytes of an unfinished character
//! until the rest arrives, so every piece of text it hands out is final. Pieces are
//! concatenated as they are (no space is removed): this is for generated continuations.

use super::Tokenizer;
use crate::error::{ExecError, Result};

/// Turns ids into text one id at a time. Get one from [`Tokenizer::stream_decoder`].
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    pending: Vec<u8>,
    position: usize,
}

impl<'a> StreamDecoder<'a> {
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        StreamDecoder {
            tokenizer,
            pending: Vec::new(),
            position: 0,
        }
    }

    /// Add one id; returns the text completed by it (possibly empty). Bytes that can never
    /// form a character become U+FFFD.
    pub fn push(&mut self, id: u32) -> Result<String> {
        let bytes = self
            .tokenizer
            .token_bytes(id)
            .ok_or(ExecError::TokenOutOfRange {
                id,
                position: Some(self.position),
                vocab: self.tokenizer.vocab_size(),
            })?;
        self.position += 1;
        self.pending.extend_from_slice(bytes);
        Ok(self.take_complete())
    }

    /// Add several ids; returns the text they complete.
    pub fn push_all(&mut self, ids: &[u32]) -> Result<String> {
        let mut out = String::new();
        for &id in ids {
            out.push_str(&self.push(id)?);
        }
        Ok(out)
    }

    /// Whether bytes of an unfinished character are held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The end of the stream: whatever is held back, with U+FFFD for an unfinished
    /// character.
    pub fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut start = 0;
        loop {
            let rest = &self.pending[start..];
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&rest[..good]).unwrap_or_default());
                    match e.error_len() {
                        // Incomplete character at the end: keep it for the next id.
                        None => {
                            start += good;
                            break;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            start += good + bad;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }
}
