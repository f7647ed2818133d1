//! The default model's tokenizer (SmolLM2-135M-Instruct: byte-level BPE, pre `smollm`).
//!
//! The model comes from env `LQL_TEST_MODEL`, else the model cache (`$LQL_HOME/models`,
//! default `~/.cache/lql/models`); without it the tests say so and pass.
//! Expected ids are those of Hugging Face `tokenizers` and llama.cpp on the same file.

mod common;

use std::sync::OnceLock;

use common::real::model_path;
use lql_exec::tokenizer::{TokenKind, Tokenizer};

/// Built the way the engine builds it: importer spec + the surface's special tokens.
fn tokenizer() -> Option<&'static Tokenizer> {
    static T: OnceLock<Option<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| {
        let Some(path) = model_path() else {
            eprintln!("SmolLM2 GGUF not found (set LQL_TEST_MODEL): skipping");
            return None;
        };
        let model = lql_storage::import::open(&path).unwrap();
        let spec = model.tokenizer_spec().unwrap();
        Some(Tokenizer::from_spec_with_special(&spec, &model.surface.special).unwrap())
    })
    .as_ref()
}

#[test]
fn known_prompts() {
    let Some(t) = tokenizer() else { return };
    assert_eq!(t.vocab_size(), 49152);
    assert_eq!(
        t.encode("The capital of France is", true).unwrap(),
        vec![504, 3575, 282, 4649, 314]
    );
    assert_eq!(t.encode("Hello world", true).unwrap(), vec![19556, 905]);
    assert_eq!(t.token_text(7042).as_deref(), Some(" Paris"));
    assert_eq!(t.token_raw(7042), Some("ĠParis"));
    assert_eq!(t.token_id(" Paris"), Some(7042));
    assert_eq!(t.token_id("ĠParis"), Some(7042));
    assert_eq!(t.token_kind(7042), TokenKind::Normal);
    assert_eq!(
        t.decode(&[504, 3575, 282, 4649, 314, 7042]).unwrap(),
        "The capital of France is Paris"
    );
}

#[test]
fn chat_markers_are_single_tokens() {
    let Some(t) = tokenizer() else { return };
    let ids = t.encode("<|im_start|>user\nHi<|im_end|>", true).unwrap();
    assert_eq!(ids, vec![1, 4093, 198, 26843, 2]);
    assert_eq!(t.token_kind(1), TokenKind::Control);
    assert_eq!(t.token_text(1).as_deref(), Some("<|im_start|>"));
    assert_eq!(t.token_id("<|im_end|>"), Some(2));
    assert_eq!(t.eos_id(), Some(2));
    assert!(!t.adds_bos());
    assert_eq!(t.decode(&ids).unwrap(), "<|im_start|>user\nHi<|im_end|>");
}

const TEXTS: &[&str] = &[
    "",
    " ",
    "   leading and trailing   ",
    "tabs\tand\nnewlines\r\n\n\n",
    "Numbers: 3 33 333 3333 1,234,567.89 -42 0x1F",
    "emoji 🦙🚀 😶‍🌫️ 👩🏽‍💻 flags 🇫🇷",
    "中文字符和日本語のテキスト、한국어",
    "combining: e\u{301} a\u{308}\u{323} Z\u{335}\u{31b}",
    "Ünïcödé façade naïve — “quotes” ‘single’ …",
    "code: fn main() { println!(\"{}\", x[0] >= 1 && y != 2); }",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "Привет, мир! Γειά σου κόσμε. مرحبا بالعالم",
    "\u{200b}zero\u{200d}width\u{feff}",
];

#[test]
fn decode_inverts_encode() {
    let Some(t) = tokenizer() else { return };
    for text in TEXTS {
        let ids = t.encode(text, false).unwrap();
        assert_eq!(&t.decode(&ids).unwrap(), text, "ids {ids:?}");
        assert_eq!(t.decode_bytes(&ids).unwrap(), text.as_bytes());
    }
}

#[test]
fn streaming_holds_back_split_characters() {
    let Some(t) = tokenizer() else { return };
    for text in TEXTS {
        let ids = t.encode(text, false).unwrap();
        let mut d = t.stream_decoder();
        let mut out = String::new();
        for &id in &ids {
            let piece = d.push(id).unwrap();
            // Every piece handed out is complete text: never a replacement character.
            assert!(!piece.contains('\u{fffd}'), "{text:?}: {piece:?}");
            out.push_str(&piece);
        }
        out.push_str(&d.flush());
        assert_eq!(&out, text);
    }
    // An emoji is spelled by several byte-level tokens: nothing comes out until the last.
    let ids = t.encode("🦙", false).unwrap();
    assert!(ids.len() > 1, "{ids:?}");
    let mut d = t.stream_decoder();
    for &id in &ids[..ids.len() - 1] {
        assert_eq!(d.push(id).unwrap(), "");
        assert!(d.has_pending());
    }
    assert_eq!(d.push(ids[ids.len() - 1]).unwrap(), "🦙");
    assert_eq!(d.flush(), "");
    // A stream cut in the middle of a character ends with U+FFFD.
    let mut d = t.stream_decoder();
    assert_eq!(d.push(ids[0]).unwrap(), "");
    assert_eq!(d.flush(), "\u{fffd}");
    // The display text of a partial token shows its bytes.
    assert!(t.token_text(ids[0]).unwrap().contains("<0xF0>"));
}

#[test]
fn metadata_reader_agrees_with_importer() {
    let Some(t) = tokenizer() else { return };
    let file = lql_storage::format::gguf::GgufFile::open(&model_path().unwrap()).unwrap();
    let direct = Tokenizer::from_gguf(&file).unwrap();
    for text in TEXTS {
        assert_eq!(
            direct.encode(text, true).unwrap(),
            t.encode(text, true).unwrap()
        );
    }
}

#[test]
fn out_of_range_ids_refuse() {
    let Some(t) = tokenizer() else { return };
    let e = t.decode(&[5, 49152]).unwrap_err().to_string();
    assert!(e.contains("49152") && e.contains("position 1"), "{e}");
    assert_eq!(t.token_text(49152), None);
    assert_eq!(t.token_kind(49152), TokenKind::Undefined);
}

/// Ids from llama.cpp itself on the same file (`fixtures/tokenizer/smollm2_llamacpp.json`,
/// written by llama-cpp-python with `special=True`): chat prompts, whitespace runs, digits,
/// emoji, CJK, combining marks, contractions, control tokens mid-text.
#[test]
fn matches_llama_cpp() {
    let Some(t) = tokenizer() else { return };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tokenizer/smollm2_llamacpp.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() >= 16);
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let want: Vec<u32> = c["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(t.encode(text, true).unwrap(), want, "{text:?}");
        assert_eq!(t.decode(&want).unwrap(), text);
    }
}
