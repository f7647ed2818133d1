//! The five JSON schemas constrained decoding is measured on (Ollama's structured-output
//! example, nested objects, enums, arrays, numbers), each with a prompt that suits it:
//! shared by `tests/constrained.rs` and the `constrained` example's 100-per-schema run.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::{default_model_path, repo_root, run_with_stdin};

/// SmolLM2-Instruct's chat template around one user message, ready for the answer.
fn chat(user: &str) -> String {
    format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
}

/// Ollama's structured-output example schema (and its example's question), then four more
/// shapes; each with a prompt in the model's chat template.
pub fn schemas() -> Vec<(&'static str, String, Value)> {
    vec![
        (
            "ollama",
            chat("Tell me about Canada."),
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "capital": {"type": "string"},
                    "languages": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["name", "capital", "languages"]
            }),
        ),
        (
            "nested",
            chat("Describe a person and their home address as JSON."),
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 40},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120},
                    "address": {
                        "type": "object",
                        "properties": {
                            "street": {"type": "string", "maxLength": 60},
                            "city": {"type": "string", "maxLength": 40},
                            "country": {"type": "string", "maxLength": 40}
                        },
                        "required": ["street", "city", "country"],
                        "additionalProperties": false
                    }
                },
                "required": ["name", "age", "address"],
                "additionalProperties": false
            }),
        ),
        (
            "enums",
            chat("Review: \"The food was cold and the waiter was rude.\" Classify it as JSON."),
            json!({
                "type": "object",
                "properties": {
                    "sentiment": {"enum": ["positive", "negative", "neutral"]},
                    "confidence": {"type": "string", "enum": ["low", "medium", "high"]},
                    "topics": {
                        "type": "array",
                        "items": {"enum": ["food", "service", "price", "place"]},
                        "maxItems": 4
                    }
                },
                "required": ["sentiment", "confidence", "topics"],
                "additionalProperties": false
            }),
        ),
        (
            "arrays",
            chat("List some fruits and their colours as JSON."),
            json!({
                "type": "object",
                "properties": {
                    "fruits": {
                        "type": "array",
                        "minItems": 2,
                        "maxItems": 5,
                        "items": {
                            "type": "object",
                            "properties": {
                                "fruit": {"type": "string", "maxLength": 24},
                                "colours": {
                                    "type": "array",
                                    "items": {"type": "string", "maxLength": 16},
                                    "minItems": 1,
                                    "maxItems": 3
                                }
                            },
                            "required": ["fruit", "colours"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["fruits"],
                "additionalProperties": false
            }),
        ),
        (
            "numbers",
            chat("Give today's weather in Paris as JSON."),
            json!({
                "type": "object",
                "properties": {
                    "temperature": {"type": "number", "minimum": -60, "maximum": 60},
                    "humidity": {"type": "integer", "minimum": 0, "maximum": 100},
                    "wind_kmh": {"type": "number", "exclusiveMinimum": 0, "maximum": 300},
                    "unit": {"enum": ["C", "F"]}
                },
                "required": ["temperature", "humidity", "wind_kmh", "unit"],
                "additionalProperties": false
            }),
        ),
    ]
}

/// Runs `tests/tools/check_constrained.py` over `cases` (its docstring has the shapes);
/// one result per case: `{"ok": n, "failures": [...]}`.
pub fn check(python: &Path, cases: &Value) -> Vec<Value> {
    let out = run_with_stdin(
        Command::new(python)
            .arg(repo_root().join("tests/tools/check_constrained.py"))
            .arg(default_model_path()),
        cases.to_string().as_bytes(),
    );
    assert!(
        out.status.success(),
        "the checker failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}
