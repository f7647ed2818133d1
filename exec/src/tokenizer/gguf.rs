//! Building a [`Tokenizer`] from a GGUF vocabulary (`tokenizer.ggml.*`).
//!
//! - `gpt2`: byte-level BPE. The pieces come from the llama.cpp pre-tokenizer named by
//!   `tokenizer.ggml.pre` (a `Split` per expression, then `ByteLevel`), merged by
//!   `tokenizer.ggml.merges` in rank order.
//! - `llama`: SentencePiece BPE as llama.cpp runs it: spaces written `▁`, a `▁` put in
//!   front of each run of text, no pre-splitting, adjacent pieces merged while their
//!   concatenation is a vocabulary entry (highest score first), and characters outside
//!   the vocabulary spelled as `<0xNN>` byte tokens. Expressed as a `tokenizers` BPE
//!   whose merges are every split of every normal entry into two entries, ordered by the
//!   entry's score (the Hugging Face conversion of SentencePiece models).
//!
//! In both, control, user-defined and unknown entries are matched verbatim in the text
//! before the model sees it (llama.cpp's special-token partition).

use lql_storage::tokenizer_spec::GgufVocab;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormSequence};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior};

use super::kind::TokenKind;
use super::{byte_level, pretokenize, Parts, Tokenizer, TokenizerConfig};
use crate::error::{ExecError, Result};

/// Build a tokenizer from a GGUF vocabulary.
pub fn build(vocab: &GgufVocab, config: &TokenizerConfig) -> Result<Tokenizer> {
    let n = vocab.tokens.len();
    if n == 0 {
        return Err(ExecError::vocab(
            "tokenizer.ggml.tokens",
            "the vocabulary is empty",
        ));
    }
    if n > u32::MAX as usize {
        return Err(ExecError::vocab(
            "tokenizer.ggml.tokens",
            format!("{n} entries do not fit 32-bit token ids"),
        ));
    }
    for (key, len) in [
        ("tokenizer.ggml.scores", vocab.scores.len()),
        ("tokenizer.ggml.token_type", vocab.token_types.len()),
    ] {
        if len != 0 && len != n {
            return Err(ExecError::vocab(
                key,
                format!("{len} entries for {n} tokens"),
            ));
        }
    }
    for (key, id) in [
        ("bos_token_id", config.bos),
        ("eos_token_id", config.eos),
        ("unknown_token_id", config.unk),
    ] {
        if let Some(id) = id {
            if id as usize >= n {
                return Err(ExecError::vocab(
                    format!("tokenizer.ggml.{key}"),
                    format!("token id {id} is outside the vocabulary of {n}"),
                ));
            }
        }
    }
    // llama.cpp names empty entries so that every id keeps a distinct text.
    let raw: Vec<String> = vocab
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if t.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                t.clone()
            }
        })
        .collect();
    let kinds: Vec<TokenKind> = if vocab.token_types.is_empty() {
        vec![TokenKind::Normal; n]
    } else {
        vocab
            .token_types
            .iter()
            .map(|&t| TokenKind::from_gguf(t))
            .collect()
    };
    match vocab.model.as_str() {
        "gpt2" => build_bpe(vocab, raw, kinds, config),
        "llama" => build_spm(vocab, raw, kinds, config),
        other => Err(ExecError::UnknownTokenizerModel(other.to_string())),
    }
}

fn vocab_map(raw: &[String]) -> Vocab {
    let mut map = Vocab::default();
    map.reserve(raw.len());
    for (i, t) in raw.iter().enumerate() {
        // Last one wins for duplicated texts, as in llama.cpp.
        map.insert(t.clone(), i as u32);
    }
    map
}

/// Register control, unknown and user-defined entries to be matched verbatim.
fn add_verbatim(hf: &mut tokenizers::Tokenizer, raw: &[String], kinds: &[TokenKind]) -> Result<()> {
    let pick = |user: bool| -> Vec<AddedToken> {
        raw.iter()
            .zip(kinds)
            .filter(|(_, k)| k.is_matched_verbatim() && (**k == TokenKind::UserDefined) == user)
            .map(|(t, _)| AddedToken::from(t.clone(), !user).normalized(false))
            .collect()
    };
    let err = |e: tokenizers::Error| ExecError::TokenizerLibrary(e.to_string());
    hf.add_special_tokens(pick(false)).map_err(err)?;
    hf.add_tokens(pick(true)).map_err(err)?;
    Ok(())
}

/// BOS/EOS as a post-processor, so that an exported tokenizer.json adds them as the GGUF
/// asks (encoding here adds them itself).
fn set_post_processor(
    hf: &mut tokenizers::Tokenizer,
    raw: &[String],
    bos: Option<u32>,
    eos: Option<u32>,
) -> Result<()> {
    if bos.is_none() && eos.is_none() {
        return Ok(());
    }
    let mut single: Vec<String> = Vec::new();
    let mut pair: Vec<String> = Vec::new();
    let mut specials: Vec<(String, u32)> = Vec::new();
    if let Some(b) = bos {
        single.push(raw[b as usize].clone());
        specials.push((raw[b as usize].clone(), b));
    }
    single.push("$A".into());
    pair.extend(single.iter().cloned());
    if let Some(b) = bos {
        pair.push(format!("{}:1", raw[b as usize]));
    }
    pair.push("$B:1".into());
    if let Some(e) = eos {
        single.push(raw[e as usize].clone());
        pair.insert(
            pair.len() - if bos.is_some() { 2 } else { 1 },
            raw[e as usize].clone(),
        );
        pair.push(format!("{}:1", raw[e as usize]));
        if Some(e) != bos {
            specials.push((raw[e as usize].clone(), e));
        }
    }
    let err = |e: String| ExecError::TokenizerLibrary(format!("post-processor: {e}"));
    let tp = TemplateProcessing::builder()
        .try_single(single)
        .map_err(err)?
        .try_pair(pair)
        .map_err(err)?
        .special_tokens(specials)
        .build()
        .map_err(|e| err(e.to_string()))?;
    hf.with_post_processor(Some(tp));
    Ok(())
}

fn library_error(what: &str, e: impl std::fmt::Display) -> ExecError {
    ExecError::vocab(what, e.to_string())
}

fn build_bpe(
    vocab: &GgufVocab,
    raw: Vec<String>,
    kinds: Vec<TokenKind>,
    config: &TokenizerConfig,
) -> Result<Tokenizer> {
    let recipe = pretokenize::recipe(vocab.pre.as_deref())?;
    if vocab.merges.is_empty() {
        return Err(ExecError::vocab(
            "tokenizer.ggml.merges",
            "a gpt2 (byte-level BPE) vocabulary needs merges; none are present",
        ));
    }
    let mut merges = Vec::with_capacity(vocab.merges.len());
    for (i, m) in vocab.merges.iter().enumerate() {
        let Some((a, b)) = m.split_once(' ') else {
            return Err(ExecError::vocab(
                format!("tokenizer.ggml.merges[{i}]"),
                format!("`{m}` is not two tokens separated by a space"),
            ));
        };
        merges.push((a.to_string(), b.to_string()));
    }
    let model = BPE::builder()
        .vocab_and_merges(vocab_map(&raw), merges)
        .ignore_merges(recipe.ignore_merges)
        .build()
        .map_err(|e| library_error("tokenizer.ggml.merges", e))?;

    let mut steps: Vec<PreTokenizerWrapper> = Vec::with_capacity(recipe.regexes.len() + 1);
    for re in recipe.regexes {
        let split = Split::new(
            SplitPattern::Regex(re.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| ExecError::TokenizerLibrary(format!("pre-tokenizer expression {re}: {e}")))?;
        steps.push(split.into());
    }
    steps.push(ByteLevel::new(false, false, false).into());

    let mut hf = tokenizers::Tokenizer::new(model);
    hf.with_pre_tokenizer(Some(PreSequence::new(steps)));
    hf.with_decoder(Some(ByteLevel::new(false, false, false)));
    add_verbatim(&mut hf, &raw, &kinds)?;

    let pieces = token_pieces(&raw, &kinds, |t| {
        byte_level::decode(t).unwrap_or_else(|| t.as_bytes().to_vec())
    });
    let description = format!(
        "gguf gpt2 (pre {}{})",
        vocab.pre.as_deref().unwrap_or("default"),
        if vocab.pre.is_none() { ", absent" } else { "" }
    );
    let add_bos = config.add_bos.unwrap_or(recipe.family == "llama3");
    let add_eos = config.add_eos.unwrap_or(false);
    let (bos, eos) = (config.bos, config.eos);
    set_post_processor(
        &mut hf,
        &raw,
        add_bos.then_some(bos).flatten(),
        add_eos.then_some(eos).flatten(),
    )?;
    Ok(Parts {
        hf,
        raw,
        pieces,
        kinds,
        bos,
        eos,
        unk: config.unk,
        add_bos,
        add_eos,
        library_adds_special: false,
        strip_after_boundary: false,
        strip_at_start: false,
        library_rendering: false,
        description,
    }
    .finish())
}

/// The bytes each token stands for: `normal` renders ordinary tokens; a byte token
/// (`<0xNN>`) is its byte, control, user-defined and unknown tokens are their text, unused
/// ones are nothing.
fn token_pieces(
    raw: &[String],
    kinds: &[TokenKind],
    normal: impl Fn(&str) -> Vec<u8>,
) -> Vec<Box<[u8]>> {
    raw.iter()
        .zip(kinds)
        .map(|(t, k)| match k {
            TokenKind::Normal => normal(t).into_boxed_slice(),
            TokenKind::Byte => spm_byte(t).map_or_else(|| t.as_bytes().into(), |b| [b].into()),
            TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown => t.as_bytes().into(),
            TokenKind::Unused | TokenKind::Undefined => Box::default(),
        })
        .collect()
}

/// `<0x0A>` → 0x0A.
pub(crate) fn spm_byte(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// The SentencePiece space mark.
const SPACE_MARK: char = '\u{2581}';

/// Entries that can take part in a SentencePiece merge (as a part or as the result).
fn mergeable(kind: TokenKind) -> bool {
    !matches!(
        kind,
        TokenKind::Byte | TokenKind::Control | TokenKind::Unknown
    )
}

/// Every split of every normal entry into two entries, highest-scoring result first
/// (ties: lower result id, then lower left id).
fn spm_merges(
    raw: &[String],
    kinds: &[TokenKind],
    scores: &[f32],
    map: &Vocab,
) -> Vec<(String, String)> {
    let score = |id: usize| scores.get(id).copied().unwrap_or(0.0);
    let mut cands: Vec<(f32, u32, u32, usize)> = Vec::new();
    for (id, text) in raw.iter().enumerate() {
        if !mergeable(kinds[id]) || text.chars().nth(1).is_none() {
            continue;
        }
        for (cut, _) in text.char_indices().skip(1) {
            let (l, r) = text.split_at(cut);
            let (Some(&li), Some(&ri)) = (map.get(l), map.get(r)) else {
                continue;
            };
            if mergeable(kinds[li as usize]) && mergeable(kinds[ri as usize]) {
                cands.push((score(id), id as u32, li, cut));
            }
        }
    }
    cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    cands
        .into_iter()
        .map(|(_, id, _, cut)| {
            let (l, r) = raw[id as usize].split_at(cut);
            (l.to_string(), r.to_string())
        })
        .collect()
}

fn build_spm(
    vocab: &GgufVocab,
    raw: Vec<String>,
    kinds: Vec<TokenKind>,
    config: &TokenizerConfig,
) -> Result<Tokenizer> {
    // llama.cpp's SentencePiece defaults.
    let default_id =
        |id: u32, want: TokenKind| (kinds.get(id as usize) == Some(&want)).then_some(id);
    let bos = config.bos.or_else(|| default_id(1, TokenKind::Control));
    let eos = config.eos.or_else(|| default_id(2, TokenKind::Control));
    let unk = config.unk.or_else(|| default_id(0, TokenKind::Unknown));
    let add_space_prefix = config
        .add_space_prefix
        .or(vocab.add_space_prefix)
        .unwrap_or(true);

    let map = vocab_map(&raw);
    let merges = spm_merges(&raw, &kinds, &vocab.scores, &map);
    let mut builder = BPE::builder()
        .vocab_and_merges(map, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(u) = unk {
        builder = builder.unk_token(raw[u as usize].clone());
    }
    let model = builder
        .build()
        .map_err(|e| library_error("tokenizer.ggml.tokens", e))?;

    let mut norms: Vec<NormalizerWrapper> = Vec::new();
    if add_space_prefix {
        norms.push(Prepend::new(SPACE_MARK.to_string()).into());
    }
    norms.push(
        Replace::new(" ", SPACE_MARK.to_string())
            .map_err(|e| ExecError::TokenizerLibrary(e.to_string()))?
            .into(),
    );
    let mut hf = tokenizers::Tokenizer::new(model);
    hf.with_normalizer(Some(NormSequence::new(norms)))
        .map_err(|e| ExecError::TokenizerLibrary(e.to_string()))?;
    let mut decoders: Vec<DecoderWrapper> = vec![
        Replace::new(SPACE_MARK.to_string(), " ")
            .map_err(|e| ExecError::TokenizerLibrary(e.to_string()))?
            .into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if add_space_prefix {
        decoders.push(Strip::new(' ', 1, 0).into());
    }
    hf.with_decoder(Some(DecoderSequence::new(decoders)));
    add_verbatim(&mut hf, &raw, &kinds)?;

    let pieces = token_pieces(&raw, &kinds, |t| t.replace(SPACE_MARK, " ").into_bytes());
    let add_bos = config.add_bos.unwrap_or(true);
    let add_eos = config.add_eos.unwrap_or(false);
    set_post_processor(
        &mut hf,
        &raw,
        add_bos.then_some(bos).flatten(),
        add_eos.then_some(eos).flatten(),
    )?;
    Ok(Parts {
        hf,
        raw,
        pieces,
        kinds,
        bos,
        eos,
        unk,
        add_bos,
        add_eos,
        library_adds_special: false,
        strip_after_boundary: add_space_prefix,
        strip_at_start: false,
        library_rendering: false,
        description: "gguf llama (SentencePiece BPE)".to_string(),
    }
    .finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(model: &str, tokens: &[&str], types: &[i32], merges: &[&str]) -> GgufVocab {
        GgufVocab {
            model: model.into(),
            pre: Some("gpt-2".into()),
            tokens: tokens.iter().map(|s| s.to_string()).collect(),
            scores: Vec::new(),
            token_types: types.to_vec(),
            merges: merges.iter().map(|s| s.to_string()).collect(),
            add_space_prefix: None,
        }
    }

    #[test]
    fn unknown_model_and_bad_merges_refuse_by_name() {
        let v = vocab("bert", &["a"], &[], &[]);
        let e = build(&v, &TokenizerConfig::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("bert"), "{e}");
        let v = vocab("gpt2", &["a", "b"], &[], &["ab"]);
        let e = build(&v, &TokenizerConfig::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("merges[0]"), "{e}");
        let v = vocab("gpt2", &["a", "b"], &[1], &["a b"]);
        let e = build(&v, &TokenizerConfig::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("token_type"), "{e}");
        let mut v = vocab("gpt2", &["a", "b", "ab"], &[], &["a b"]);
        v.pre = Some("nonesuch".into());
        let e = build(&v, &TokenizerConfig::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("nonesuch"), "{e}");
    }

    #[test]
    fn tiny_byte_level_vocab() {
        let v = vocab(
            "gpt2",
            &["a", "b", "ab", "Ġ", "Ġab", "<|end|>"],
            &[1, 1, 1, 1, 1, 3],
            &["a b", "Ġ ab"],
        );
        let t = build(&v, &TokenizerConfig::default()).unwrap();
        assert_eq!(t.encode("ab ab<|end|>", false).unwrap(), vec![2, 4, 5]);
        assert_eq!(t.decode(&[2, 4, 5]).unwrap(), "ab ab<|end|>");
        assert_eq!(t.token_text(4).unwrap(), " ab");
        assert_eq!(t.token_id(" ab"), Some(4));
        assert_eq!(t.token_id("Ġab"), Some(4));
        assert_eq!(t.token_kind(5), TokenKind::Control);
        assert!(t.decode(&[6]).is_err());
    }

    #[test]
    fn tiny_sentencepiece_vocab() {
        let mut tokens = vec!["<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "▁ab", "ab"];
        let bytes: Vec<String> = (0..=255u8).map(|b| format!("<0x{b:02X}>")).collect();
        tokens.extend(bytes.iter().map(String::as_str));
        let mut types = vec![2, 3, 3, 1, 1, 1, 1, 1, 1];
        types.extend(std::iter::repeat_n(6, 256));
        let mut v = vocab("llama", &tokens, &types, &[]);
        v.scores = (0..tokens.len()).map(|i| -(i as f32)).collect();
        let t = build(&v, &TokenizerConfig::default()).unwrap();
        // "▁ab": `▁a` (score -6) merges before `ab` (-8), then `▁a`+`b` → `▁ab` (-7).
        assert_eq!(t.encode("ab", true).unwrap(), vec![1, 7]);
        // "é" is not in the vocabulary: two byte tokens.
        assert_eq!(t.encode("é", false).unwrap(), vec![3, 9 + 0xC3, 9 + 0xA9]);
        assert_eq!(t.decode(&[3, 9 + 0xC3, 9 + 0xA9]).unwrap(), "é");
        assert_eq!(
            t.decode(&t.encode(" ab a", false).unwrap()).unwrap(),
            " ab a"
        );
        assert_eq!(t.token_kind(9), TokenKind::Byte);
    }
}
