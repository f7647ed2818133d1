//! `/v1/embeddings`, `/tokenize`, `/detokenize`: the official `openai` client gets unit
//! vectors of the model's width, the same twice, equal in float and base64, ranking
//! paraphrases above unrelated sentences (`tests/python/openai_embeddings_check.py`); the
//! vector equals the engine's own mean pooling; tokenize/detokenize round-trip in
//! llama.cpp's shapes; bad input is a 400 naming the field. The client half skips with a
//! note without `python3 -c 'import openai'` (as the openai client test does).

mod common;

use std::process::Command;

use serde_json::json;

#[test]
fn embeddings_are_the_engines_mean_pooling() {
    let s = common::start(common::config());
    let (st, v) = common::post(
        &format!("{}/v1/embeddings", s.url()),
        json!({"model": "x", "input": "The capital of France is Paris."}),
    );
    assert_eq!(st, 200, "{v}");
    let got: Vec<f32> = v["data"][0]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    let db = lql::Database::open(common::model()).unwrap();
    let engine = lql::generation::GenerationModel::open(&db, 2).unwrap();
    let conn = common::reference();
    let ids: Vec<u32> = conn
        .execute("TOKENIZE \"The capital of France is Paris.\"")
        .unwrap()
        .iter()
        .map(|r| r.get::<_, i64>("token_id").unwrap() as u32)
        .collect();
    let want = engine.embed(&ids).unwrap();
    assert_eq!(got.len(), 576);
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-6, "differs from the engine's pooling by {worst}");
    assert_eq!(v["usage"]["prompt_tokens"], ids.len());

    // Token ids as input, and the errors.
    let (st, v2) = common::post(&format!("{}/v1/embeddings", s.url()), json!({"input": ids}));
    assert_eq!(st, 200, "{v2}");
    assert_eq!(v2["data"][0]["embedding"], v["data"][0]["embedding"]);
    for (body, param) in [
        (json!({"input": []}), "input"),
        (json!({"input": [10_000_000]}), "input"),
        (
            json!({"input": "x", "encoding_format": "hex"}),
            "encoding_format",
        ),
        (json!({"input": "x", "dimensions": 12}), "dimensions"),
    ] {
        let (st, e) = common::post(&format!("{}/v1/embeddings", s.url()), body);
        assert_eq!(st, 400, "{e}");
        assert_eq!(e["error"]["param"], param, "{e}");
    }

    // llama.cpp's /tokenize and /detokenize.
    let (st, t) = common::post(
        &format!("{}/tokenize", s.url()),
        json!({"content": "Hello world", "with_pieces": true}),
    );
    assert_eq!(st, 200, "{t}");
    assert_eq!(t["tokens"][1]["piece"], " world");
    let ids: Vec<i64> = t["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_i64().unwrap())
        .collect();
    let (st, d) = common::post(&format!("{}/detokenize", s.url()), json!({"tokens": ids}));
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["content"], "Hello world");
    let (st, e) = common::post(&format!("{}/detokenize", s.url()), json!({"tokens": [-1]}));
    assert_eq!(st, 400, "{e}");
}

#[test]
fn the_official_openai_client_reads_the_embeddings() {
    let have = Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("note: SKIPPED the openai embeddings test: `python3 -c 'import openai'` fails (pip install openai)");
        return;
    }
    let s = common::start(common::config());
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/openai_embeddings_check.py"
    );
    let out = Command::new("python3")
        .args([script, &s.url(), "576"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the openai embeddings check failed");
    assert!(stdout.contains(" passed, 0 failed"));
}
