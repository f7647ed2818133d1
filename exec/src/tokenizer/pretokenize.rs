//! Byte-level BPE pre-tokenizers, chosen by GGUF `tokenizer.ggml.pre`.
//!
//! The names and regular expressions follow llama.cpp (`llama-vocab.cpp`): each
//! expression splits every piece the previous one produced, keeping both the matches and
//! the text between them (the `tokenizers` `Split` pre-tokenizer with `Isolated`), and the
//! pieces are then spelled in the byte-level alphabet. Where llama.cpp rewrote a
//! tokenizer.json expression for `std::regex` (case-insensitive contractions), the
//! rewritten form is used: it matches the same text.

use crate::error::{ExecError, Result};

/// How a byte-level BPE vocabulary splits text before merging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreTokenizerRecipe {
    /// The canonical llama.cpp name of the pre-tokenizer family.
    pub family: &'static str,
    /// Split expressions, applied in order.
    pub regexes: &'static [&'static str],
    /// A piece that is itself a vocabulary entry is emitted whole, without merging
    /// (llama 3, tekken).
    pub ignore_merges: bool,
}

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The recipe for `pre`, or a refusal naming it. A GGUF without `tokenizer.ggml.pre`
/// gets `default`, as in llama.cpp (files converted before the key existed).
pub fn recipe(pre: Option<&str>) -> Result<PreTokenizerRecipe> {
    let pre = pre.unwrap_or("default");
    let r = |family, regexes, ignore_merges| PreTokenizerRecipe {
        family,
        regexes,
        ignore_merges,
    };
    Ok(match pre {
        "default" => r(
            "default",
            &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
            false,
        ),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => r("llama3", &[LLAMA3], true),
        "dbrx" | "smaug-bpe" => r("llama3", &[LLAMA3], false),
        "chatglm-bpe" => r("chatglm4", &[LLAMA3], false),
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" | "mpt" | "olmo" | "jais" | "trillion"
        | "granite-docling" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe" => {
            r("gpt2", &[GPT2], false)
        }
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b"
        | "mellum2" => r("starcoder", &[r"\p{N}", GPT2], false),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "stablelm2" => {
            r("qwen2", &[QWEN2], false)
        }
        "qwen35" => r("qwen35", &[QWEN35], false),
        "falcon" => r(
            "falcon",
            &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
            false,
        ),
        "deepseek-llm" => r(
            "deepseek-llm",
            &[
                "[\r\n]",
                r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
                r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
                r"\s+$",
                r"[一-龥ࠀ-一가-퟿]+",
                r"\p{N}+",
            ],
            false,
        ),
        "deepseek-coder" => r(
            "deepseek-coder",
            &[
                "[\r\n]",
                r"\s?\p{L}+",
                r"\s?\p{P}+",
                "[一-龥ࠀ-一가-퟿]+",
                r"\p{N}",
            ],
            false,
        ),
        "deepseek-v3" => r(
            "deepseek-v3",
            &[
                r"\p{N}{1,3}",
                "[一-龥぀-ゟ゠-ヿ]+",
                r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
            ],
            false,
        ),
        "tekken" => r("tekken", &[TEKKEN], true),
        "gpt-4o" | "llama4" | "kanana2" | "talkie" => r("gpt-4o", &[GPT4O], false),
        other => return Err(ExecError::UnknownPreTokenizer(other.to_string())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_and_unknown_refuses() {
        assert_eq!(recipe(Some("smollm")).unwrap().family, "starcoder");
        assert!(recipe(Some("llama-bpe")).unwrap().ignore_merges);
        assert_eq!(recipe(None).unwrap().family, "default");
        let e = recipe(Some("klingon")).unwrap_err().to_string();
        assert!(e.contains("klingon"), "{e}");
    }

    #[test]
    fn every_expression_compiles() {
        for name in [
            "default",
            "llama-bpe",
            "dbrx",
            "gpt-2",
            "smollm",
            "qwen2",
            "qwen35",
            "falcon",
            "deepseek-llm",
            "deepseek-coder",
            "deepseek-v3",
            "tekken",
            "gpt-4o",
        ] {
            for re in recipe(Some(name)).unwrap().regexes {
                tokenizers::pre_tokenizers::split::Split::new(
                    tokenizers::pre_tokenizers::split::SplitPattern::Regex(re.to_string()),
                    tokenizers::SplitDelimiterBehavior::Isolated,
                    false,
                )
                .unwrap_or_else(|e| panic!("{name}: {re}: {e}"));
            }
        }
    }
}
