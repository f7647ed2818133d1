//! Constrained decoding, measured on SmolLM2-135M:
//!
//! 1. 100 generations per JSON schema (Ollama's example and four more, `lql_tests::
//!    constrained`): one greedy, 99 sampled at temperature 0.8 with seeds 1–99, at most 256
//!    tokens each, each validated by the `jsonschema` Python package
//!    (`tests/tools/check_constrained.py`).
//! 2. Decode overhead: the same number of tokens decoded after the same prompt with and
//!    without the schema (`Executor::generate`, the end-of-sequence stop off for the plain
//!    run so both decode exactly as many tokens), best of five, as the ratio of the two
//!    times; and the share of the constrained run spent computing masks.
//!
//! `cargo run --release -p lql-tests --example constrained [-- validity [N] | overhead]`
//! (N generations per schema, default 100; `validity N name` runs one schema; `--ollama`
//! samples as Ollama does by default: top-k 40, top-p 0.9, repeat penalty 1.1; both parts
//! without an argument).

use std::sync::Arc;
use std::time::Instant;

use lql::Connection;
use lql_exec::constrain::{ConstraintSpec, Grammar};
use lql_exec::tokenizer::Tokenizer;
use lql_exec::{Control, Executor, GenerateOptions, Sampling};
use lql_storage::model::OperandSource;
use lql_tests::constrained::{check, schemas};
use lql_tests::{connect_default, default_model_path, python_with};
use serde_json::{json, Value};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let part = args.first().map(String::as_str);
    if part != Some("overhead") {
        let per_schema: usize = args
            .get(1)
            .map_or(100, |a| a.parse().expect("N: generations per schema"));
        let python = python_with("jsonschema, llama_cpp").expect("the checker's Python");
        let only = args
            .get(2)
            .map(String::as_str)
            .filter(|a| !a.starts_with("--"));
        // `--ollama`: Ollama's default sampler (top-k 40, top-p 0.9, repeat penalty 1.1 over
        // the last 64 tokens) around the temperature of each run.
        let extra = if args.iter().any(|a| a == "--ollama") {
            "REPEAT_PENALTY 1.1"
        } else {
            ""
        };
        let sampled_extra = if extra.is_empty() {
            ""
        } else {
            "TOP_K 40 TOP_P 0.9"
        };
        validity(
            &connect_default(),
            &python,
            per_schema,
            only,
            extra,
            sampled_extra,
        );
    }
    if part != Some("validity") {
        overhead();
    }
}

fn validity(
    c: &Connection,
    python: &std::path::Path,
    n: usize,
    only: Option<&str>,
    extra: &str,
    sampled_extra: &str,
) {
    let mut cases = Vec::new();
    let chosen: Vec<_> = schemas()
        .into_iter()
        .filter(|(name, ..)| only.is_none_or(|o| o == *name))
        .collect();
    for (name, prompt, schema) in chosen.clone() {
        let t = Instant::now();
        let mut outputs = Vec::new();
        let mut tokens = 0usize;
        let mut ended = 0usize;
        for i in 0..n {
            let sampling = if i == 0 {
                format!("TEMPERATURE 0 {extra}")
            } else {
                format!("TEMPERATURE 0.8 SEED {i} {sampled_extra} {extra}")
            };
            let rows = c
                .execute(&format!(
                    "GENERATE {} MAX 256 {sampling} SCHEMA {}",
                    lql::quote(&prompt),
                    lql::quote(&schema.to_string())
                ))
                .unwrap();
            let row = rows.iter().next().unwrap();
            let text: String = row.get("text").unwrap();
            let ids: Vec<i64> = row.get("token_ids").unwrap();
            let finish: String = row.get("finish_reason").unwrap();
            tokens += ids.len();
            ended += usize::from(finish == "eos");
            outputs.push(json!({"text": text}));
        }
        println!(
            "{name}: {n} generations, {ended} ended by the grammar, {:.1} tokens each, {:.1} s",
            tokens as f64 / n as f64,
            t.elapsed().as_secs_f64()
        );
        cases.push(json!({"kind": "schema", "schema": schema, "outputs": outputs}));
    }
    let results = check(python, &Value::Array(cases));
    for ((name, ..), r) in chosen.iter().zip(&results) {
        println!("{name}: {}/{n} valid by jsonschema", r["ok"]);
        for f in r["failures"].as_array().unwrap().iter().take(3) {
            println!("  {f}");
        }
    }
}

fn overhead() {
    let model = Arc::new(lql_storage::import::open(&default_model_path()).unwrap());
    let tok =
        Tokenizer::from_spec_with_special(&model.tokenizer_spec().unwrap(), &model.surface.special)
            .unwrap();
    let src: Arc<dyn OperandSource> = model.clone();
    let exec = Executor::new(src, 0).unwrap();
    let (mut plain_s, mut constrained_s, mut mask_s, mut tokens) = (0.0, 0.0, 0.0, 0usize);
    for (name, prompt, schema) in schemas() {
        let ids = tok.encode(&prompt, true).unwrap();
        let grammar = Grammar::compile(&ConstraintSpec::JsonSchema(schema), &tok).unwrap();
        let constrained = GenerateOptions {
            max_tokens: 256,
            sampling: Sampling::greedy(),
            grammar: Some(grammar.clone()),
            ..GenerateOptions::default()
        };
        let g = exec
            .generate(&ids, &constrained, &mut |_| Control::Continue)
            .unwrap();
        let n = g.generated_tokens;
        let plain = GenerateOptions {
            max_tokens: n,
            sampling: Sampling::greedy(),
            stop_at_eos: false,
            ..GenerateOptions::default()
        };
        let best = |opts: &GenerateOptions| {
            (0..5)
                .map(|_| {
                    let t = Instant::now();
                    let g = exec
                        .generate(&ids, opts, &mut |_| Control::Continue)
                        .unwrap();
                    assert_eq!(g.generated_tokens, n);
                    t.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        };
        let p = best(&plain);
        let c = best(&constrained);
        // The masks alone: replay the generated tokens through a fresh constraint.
        let t = Instant::now();
        let mut cons = grammar.start();
        let mut logits = vec![0f32; tok.vocab_size()];
        let end_ids: Vec<u32> = model.surface.special.eos.into_iter().collect();
        for &id in &g.token_ids {
            cons.mask(&mut logits, &end_ids, false).unwrap();
            cons.commit(id, &end_ids).unwrap();
        }
        let m = t.elapsed().as_secs_f64();
        println!(
            "{name}: {n} tokens; plain {:.3} s, constrained {:.3} s ({:+.1}%), masks {:.2} ms/token",
            p,
            c,
            (c / p - 1.0) * 100.0,
            m * 1e3 / n as f64
        );
        plain_s += p;
        constrained_s += c;
        mask_s += m;
        tokens += n;
    }
    println!(
        "all: {tokens} tokens; constrained/plain = {:.3} ({:+.1}% decode overhead); masks {:.2} ms/token = {:.1}% of the plain decode time",
        constrained_s / plain_s,
        (constrained_s / plain_s - 1.0) * 100.0,
        mask_s * 1e3 / tokens as f64,
        mask_s / plain_s * 100.0
    );
}
