//! Runs the official `openai` Python client (PyPI) against the server
//! (`tests/python/openai_client_check.py`): completions, chat (streaming and not) and
//! responses, with greedy text and logprobs checked against the engine's own GENERATE and
//! INFER. Skips with a visible note when `python3` or the `openai` package is missing
//! (`.ci/run` installs it with pip).

mod common;

use std::process::Command;

#[test]
fn the_official_openai_client_works_and_agrees_with_the_engine() {
    let have = Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("note: SKIPPED the openai client test: `python3 -c 'import openai'` fails (pip install openai)");
        return;
    }
    let conn = common::reference();
    let prompt = "The capital of France is";
    let question = "What is the capital of France?";
    let rendered = format!("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n");
    let infer: Vec<(String, f64)> = conn
        .execute(&format!("INFER {} TOP 5", lql::quote(prompt)))
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.get::<_, String>("token").unwrap(),
                r.get::<_, f64>("prob").unwrap(),
            )
        })
        .collect();
    let expect = serde_json::json!({
        "prompt": prompt,
        "completion": common::generate_greedy(&conn, prompt, 12),
        "question": question,
        "chat": common::generate_greedy(&conn, &rendered, 16),
        "infer": infer,
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("expect.json");
    std::fs::write(&path, expect.to_string()).unwrap();
    let s = common::start(common::config());
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/openai_client_check.py"
    );
    let out = Command::new("python3")
        .args([script, &s.url(), &path.display().to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the openai client check failed");
    assert!(stdout.contains(" passed, 0 failed"));
}
