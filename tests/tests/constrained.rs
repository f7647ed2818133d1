//! Constrained decoding on SmolLM2: `GENERATE … SCHEMA` output validates against five JSON
//! schemas (Ollama's structured-output example, nested objects, enums, arrays, numbers)
//! by the `jsonschema` Python package, greedy and sampled; every grammar in llama.cpp's
//! `grammars/` folder compiles, and what GENERATE … GRAMMAR produces under it is replayed
//! token by token through llama.cpp's own grammar sampler (llama-cpp-python), which allows
//! every token and, where the generation ended itself, the end of text. Bad schemas and
//! grammars get a clear error; a generation without a constraint is unchanged.
//!
//! The checker (`tests/tools/check_constrained.py`) needs a Python with `jsonschema` and
//! `llama_cpp`, and the grammars come from llama.cpp's source (`LQL_LLAMA_GRAMMARS`, else
//! `~/.cache/lql-tools/llama-grammars`, where `.ci/run` puts them). Without them the test
//! says why and skips, unless `CI=true` or `LQL_REQUIRE_LLAMACPP=1` makes that a failure.

use std::path::PathBuf;

use lql::Connection;
use lql_tests::constrained::{check, schemas};
use lql_tests::{connect_default, python_with};
use serde_json::{json, Value};

fn required() -> bool {
    std::env::var("LQL_REQUIRE_LLAMACPP").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| v == "true")
}

fn checker_python() -> Option<PathBuf> {
    match python_with("jsonschema, llama_cpp") {
        Ok(p) => Some(p),
        Err(why) if required() => panic!("the constrained-output checker cannot run: {why}"),
        Err(why) => {
            eprintln!("skipping: {why}");
            None
        }
    }
}

fn grammars_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("LQL_LLAMA_GRAMMARS")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/lql-tools/llama-grammars"))
        })?;
    if dir.join("json.gbnf").is_file() {
        return Some(dir);
    }
    let why = format!("llama.cpp's grammars are not at {}", dir.display());
    if required() {
        panic!("{why} (.ci/run fetches them)");
    }
    eprintln!("skipping: {why}");
    None
}

/// One generation: (text, token ids, finish reason).
fn generate(
    c: &Connection,
    prompt: &str,
    clause: &str,
    sampling: &str,
    max: usize,
) -> (String, Vec<u32>, String) {
    let rows = c
        .execute(&format!(
            "GENERATE {} MAX {max} {sampling} {clause}",
            lql::quote(prompt)
        ))
        .unwrap_or_else(|e| panic!("GENERATE … {clause}: {e}"));
    let row = rows.iter().next().unwrap();
    let text: String = row.get("text").unwrap();
    let ids: Vec<i64> = row.get("token_ids").unwrap();
    let finish: String = row.get("finish_reason").unwrap();
    (text, ids.into_iter().map(|i| i as u32).collect(), finish)
}

const SAMPLINGS: [&str; 4] = [
    "TEMPERATURE 0",
    "TEMPERATURE 0.8 SEED 1",
    "TEMPERATURE 0.8 SEED 2",
    "TEMPERATURE 0.8 SEED 3",
];

#[test]
fn generations_validate_against_five_json_schemas() {
    let Some(python) = checker_python() else {
        return;
    };
    let c = connect_default();
    let mut cases = Vec::new();
    for (name, prompt, schema) in schemas() {
        let clause = format!("SCHEMA {}", lql::quote(&schema.to_string()));
        let mut outputs = Vec::new();
        for s in SAMPLINGS {
            let (text, ids, finish) = generate(&c, &prompt, &clause, s, 200);
            eprintln!("{name} [{s}] {finish}: {text}");
            assert_eq!(
                finish, "eos",
                "{name} [{s}] did not finish its JSON: {text}"
            );
            outputs.push(json!({"text": text, "tokens": ids}));
        }
        cases.push(json!({"kind": "schema", "schema": schema, "outputs": outputs}));
    }
    let results = check(&python, &Value::Array(cases));
    for ((name, ..), r) in schemas().iter().zip(&results) {
        assert_eq!(r["failures"], json!([]), "{name}: {r}");
        assert_eq!(r["ok"], json!(SAMPLINGS.len()), "{name}: {r}");
    }
}

/// A prompt that suits each of llama.cpp's grammars.
fn grammar_prompt(file: &str) -> &'static str {
    match file {
        "arithmetic.gbnf" => "Write some arithmetic:\n",
        "c.gbnf" => "Write a small C function:\n",
        "chess.gbnf" => "The moves of a chess game:\n",
        "english.gbnf" => "Write a sentence in English:\n",
        "japanese.gbnf" => "日本語で書いてください:\n",
        "list.gbnf" => "A shopping list:\n",
        _ => "Answer in JSON:\n",
    }
}

#[test]
fn every_llama_cpp_grammar_compiles_and_constrains_as_llama_cpp_checks_it() {
    let Some(dir) = grammars_dir() else { return };
    let Some(python) = checker_python() else {
        return;
    };
    let c = connect_default();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gbnf"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 8,
        "only {} grammars in {}",
        files.len(),
        dir.display()
    );
    let mut cases = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let grammar = std::fs::read_to_string(f).unwrap();
        let clause = format!("GRAMMAR {}", lql::quote(&grammar));
        let mut outputs = Vec::new();
        for s in &SAMPLINGS[..2] {
            let (text, ids, finish) = generate(&c, grammar_prompt(&name), &clause, s, 48);
            eprintln!("{name} [{s}] {finish}: {text:?}");
            assert!(!ids.is_empty(), "{name}: nothing generated");
            assert!(
                finish == "eos" || finish == "length",
                "{name} ended with {finish}"
            );
            outputs.push(json!({"text": text, "tokens": ids, "complete": finish == "eos"}));
        }
        cases.push(json!({"kind": "gbnf", "grammar": grammar, "outputs": outputs}));
    }
    let results = check(&python, &Value::Array(cases));
    for (f, r) in files.iter().zip(&results) {
        assert_eq!(r["failures"], json!([]), "{}: {r}", f.display());
    }
}

#[test]
fn a_constraint_changes_only_the_generation_it_is_given() {
    let c = connect_default();
    let plain = generate(&c, "The capital of France is", "", "TEMPERATURE 0", 12);
    let (text, _, finish) = generate(
        &c,
        "The capital of France is",
        "GRAMMAR 'root ::= \" Paris\" | \" Lyon\"'",
        "TEMPERATURE 0",
        12,
    );
    assert_eq!((text.as_str(), finish.as_str()), (" Paris", "eos"));
    let again = generate(&c, "The capital of France is", "", "TEMPERATURE 0", 12);
    assert_eq!(plain, again);
}

#[test]
fn bad_schemas_and_grammars_are_refused_with_where_and_why() {
    let c = connect_default();
    let err = |sql: &str| c.execute(sql).unwrap_err().to_string();
    let e = err("GENERATE 'x' SCHEMA '{\"type\": '");
    assert!(e.contains("SCHEMA") && e.contains("JSON"), "{e}");
    let e = err("GENERATE 'x' GRAMMAR 'root ::= \"a\" missing'");
    assert!(
        e.contains("line 1, column 14") && e.contains("missing"),
        "{e}"
    );
    let e = err("GENERATE 'x' GRAMMAR 'start ::= \"a\"'");
    assert!(e.contains("root"), "{e}");
    let e = err("GENERATE 'x' SCHEMA '{\"type\": \"object\"}' GRAMMAR 'root ::= \"a\"'");
    assert!(e.contains("SCHEMA") && e.contains("GRAMMAR"), "{e}");
    let e = err("GENERATE 'x' SCHEMA '{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 1}'");
    assert!(e.to_lowercase().contains("schema"), "{e}");
    let e = err("GENERATE 'x' SCHEMA '[1, 2]'");
    assert!(e.contains("object"), "{e}");
}

/// Closing under budget: seeds whose text ran on inside a string or an array until
/// `max_tokens` (Ollama's schema leaves both unbounded) now close in the budget's last
/// eighth, and the text is JSON with every required key.
#[test]
fn json_closes_before_the_token_budget_ends() {
    let c = connect_default();
    let (_, prompt, schema) = schemas()
        .into_iter()
        .find(|(name, ..)| *name == "ollama")
        .unwrap();
    for seed in [9, 28, 33, 54] {
        let (text, ids, finish) = generate(
            &c,
            &prompt,
            &format!("SCHEMA {}", lql::quote(&schema.to_string())),
            &format!("TEMPERATURE 0.8 SEED {seed}"),
            256,
        );
        assert_eq!(finish, "eos", "seed {seed}: {text}");
        assert!(ids.len() <= 256);
        let v: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("seed {seed}: {e}: {text}"));
        for key in ["name", "capital", "languages"] {
            assert!(v.get(key).is_some(), "seed {seed}: {text}");
        }
    }
}
