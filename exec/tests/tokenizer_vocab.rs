//! llama.cpp's tokenizer test cases: the vocabulary-only GGUFs `ggml-vocab-*.gguf` with
//! their `.gguf.inp` (inputs separated by `\n__ggml_vocab_test__\n`) and `.gguf.out`
//! (expected ids, one line per input), encoded without BOS as llama.cpp's
//! `test-tokenizer-0` does. Every case must match, and decoding must give the input back.
//!
//! The gpt-2, llama-bpe and llama-spm files are committed under `fixtures/tokenizer/`
//! (from the llama-cpp-python 0.3.36 source archive, `vendor/llama.cpp/models/`). Set
//! `LQL_VOCAB_DIR` to a folder with more of them to run those too.

use std::path::{Path, PathBuf};

use lql_exec::tokenizer::Tokenizer;
use lql_storage::format::gguf::GgufFile;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer")
}

fn cases(gguf: &Path) -> Vec<(String, Vec<u32>)> {
    let inp = std::fs::read_to_string(gguf.with_extension("gguf.inp")).unwrap();
    let out = std::fs::read_to_string(gguf.with_extension("gguf.out")).unwrap();
    let mut texts: Vec<String> = inp
        .split("\n__ggml_vocab_test__\n")
        .map(str::to_string)
        .collect();
    if texts.last().is_some_and(|t| t.is_empty()) {
        texts.pop();
    }
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(
        texts.len(),
        ids.len(),
        "{}: inputs vs outputs",
        gguf.display()
    );
    texts.into_iter().zip(ids).collect()
}

/// Runs every case of one vocabulary; returns (passed, total, failure report).
fn run(gguf: &Path) -> (usize, usize, String) {
    let file = GgufFile::open(gguf).unwrap();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    let cases = cases(gguf);
    let mut report = String::new();
    let mut passed = 0;
    for (text, want) in &cases {
        let got = tok.encode(text, false).unwrap();
        let back = tok.decode(&got).unwrap();
        if &got == want && &back == text {
            passed += 1;
        } else {
            report.push_str(&format!(
                "  {text:?}\n    want {want:?}\n    got  {got:?}\n    decoded {back:?}\n"
            ));
        }
    }
    (passed, cases.len(), report)
}

fn check(name: &str) {
    let path = fixtures().join(format!("ggml-vocab-{name}.gguf"));
    let (passed, total, report) = run(&path);
    eprintln!("{name}: {passed}/{total} llama.cpp vocab cases pass");
    assert_eq!(passed, total, "{name}: failures:\n{report}");
}

#[test]
fn gpt2_vocab_cases() {
    check("gpt-2");
}

#[test]
fn llama_bpe_vocab_cases() {
    check("llama-bpe");
}

#[test]
fn llama_spm_vocab_cases() {
    check("llama-spm");
}

#[test]
fn llama_spm_adds_bos_and_prefix_space() {
    let file = GgufFile::open(&fixtures().join("ggml-vocab-llama-spm.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    assert_eq!(tok.bos_id(), Some(1));
    let ids = tok.encode("Hello world", true).unwrap();
    assert_eq!(ids, vec![1, 15043, 3186]);
    // Control tokens written in the text are single tokens; a prefix space follows them.
    let ids = tok.encode("<s>Hello</s>", false).unwrap();
    assert_eq!(ids, vec![1, 15043, 2]);
    assert_eq!(tok.decode(&ids).unwrap(), "<s>Hello</s>");
    assert_eq!(tok.token_text(15043).unwrap(), " Hello");
    assert_eq!(tok.token_raw(15043).unwrap(), "▁Hello");
    assert_eq!(tok.token_text(13).unwrap(), "\n");
    assert_eq!(tok.token_kind(13), lql_exec::tokenizer::TokenKind::Byte);
}

/// Any further vocabularies in `LQL_VOCAB_DIR` (not committed: several MB each).
#[test]
fn extra_vocab_cases_from_env() {
    let Ok(dir) = std::env::var("LQL_VOCAB_DIR") else {
        eprintln!("LQL_VOCAB_DIR not set: no extra vocabularies");
        return;
    };
    let mut failures = String::new();
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".gguf") || !path.with_extension("gguf.out").exists() {
            continue;
        }
        let file = GgufFile::open(&path).unwrap();
        match Tokenizer::from_gguf(&file) {
            Err(e) => eprintln!("{name}: refused: {e}"),
            Ok(_) => {
                let (passed, total, report) = run(&path);
                eprintln!("{name}: {passed}/{total}");
                if passed != total {
                    failures.push_str(&format!("{name}:\n{report}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures}");
}

/// The tokenizer.json path: export each GGUF-built tokenizer as a Hugging Face
/// `tokenizer.json`, load it back through `TokenizerSpec::Json`, and run the same cases.
#[test]
fn tokenizer_json_round_trip_passes_the_same_cases() {
    use lql_storage::tokenizer_spec::TokenizerSpec;
    for name in ["gpt-2", "llama-bpe", "llama-spm"] {
        let path = fixtures().join(format!("ggml-vocab-{name}.gguf"));
        let from_gguf = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
        let json = from_gguf.to_tokenizer_json(false).unwrap();
        let spec = TokenizerSpec::Json {
            json,
            chat_template: None,
        };
        let t = Tokenizer::from_spec(&spec).unwrap();
        assert_eq!(t.vocab_size(), from_gguf.vocab_size(), "{name}");
        let mut passed = 0;
        let cases = cases(&path);
        for (text, want) in &cases {
            let got = t.encode(text, false).unwrap();
            assert_eq!(&got, want, "{name}: {text:?}");
            assert_eq!(&t.decode(&got).unwrap(), text, "{name}: {text:?}");
            passed += 1;
        }
        // The post-processor adds BOS as the GGUF asked.
        assert_eq!(
            t.encode("Hello", true).unwrap(),
            from_gguf.encode("Hello", true).unwrap(),
            "{name}"
        );
        for id in [0u32, 13, 300, (t.vocab_size() - 1) as u32] {
            assert_eq!(t.token_kind(id), from_gguf.token_kind(id), "{name} id {id}");
            assert_eq!(
                t.token_bytes(id),
                from_gguf.token_bytes(id),
                "{name} id {id}"
            );
        }
        eprintln!(
            "{name} via tokenizer.json: {passed}/{} cases pass",
            cases.len()
        );
    }
}

#[test]
fn missing_tokenizer_refuses() {
    let e = Tokenizer::from_spec(&lql_storage::tokenizer_spec::TokenizerSpec::None).unwrap_err();
    assert!(e.to_string().contains("no tokenizer"), "{e}");
    let e = Tokenizer::from_spec(&lql_storage::tokenizer_spec::TokenizerSpec::Json {
        json: "{not json".into(),
        chat_template: None,
    })
    .unwrap_err();
    assert!(e.to_string().contains("tokenizer.json"), "{e}");
}
