//! Steering per request: `"steering": {"vector": …, "scale": …}` on the OpenAI routes steers
//! that request only — a steered and a plain completion decoding in the same batch each
//! equal the engine's own answer (WITH STEERING … GENERATE, plain GENERATE); `/v1/lql` takes
//! `WITH STEERING`; a vector outside `--allow-writes` or without it is refused.

mod common;

use serde_json::json;

const PROMPT: &str = "The movie was";
const SPEC: &str = "(\"I love this, wonderful\") MINUS (\"I hate this, awful\") AT LAYER 8 SCALE 6";

#[test]
fn a_steered_and_a_plain_request_decode_together_each_as_the_engine_does() {
    let dir = tempfile::tempdir().unwrap();
    let vector = dir.path().join("love.gguf");
    let vq = lql::quote(&vector.display().to_string());
    let reference = common::reference();
    reference
        .execute(&format!(
            "SET STEERING = {SPEC}; SAVE STEERING {vq}; SET STEERING = OFF"
        ))
        .unwrap();
    let plain = common::generate_greedy(&reference, PROMPT, 16);
    let rows = reference
        .execute(&format!(
            "WITH STEERING {vq} GENERATE {} MAX 16 TEMPERATURE 0",
            lql::quote(PROMPT)
        ))
        .unwrap();
    let steered: String = rows.iter().next().unwrap().get("text").unwrap();
    assert_ne!(plain, steered);

    let mut c = common::config();
    c.allow_writes = Some(dir.path().to_path_buf());
    let s = common::start(c);
    let url = format!("{}/v1/completions", s.url());
    let handles: Vec<_> = [true, false]
        .into_iter()
        .map(|steer| {
            let url = url.clone();
            let vector = vector.display().to_string();
            std::thread::spawn(move || {
                let mut body = json!({"prompt": PROMPT, "max_tokens": 16, "temperature": 0});
                if steer {
                    body["steering"] = json!({"vector": vector, "scale": 1.0});
                }
                let (st, v) = common::post(&url, body);
                assert_eq!(st, 200, "{v}");
                v["choices"][0]["text"].as_str().unwrap().to_string()
            })
        })
        .collect();
    let got: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(got[0], steered);
    assert_eq!(got[1], plain);

    // /v1/lql: one statement steered.
    let r = common::client()
        .post(format!("{}/v1/lql", s.url()))
        .header("content-type", "text/plain")
        .body(format!(
            "WITH STEERING {vq} GENERATE {} MAX 16 TEMPERATURE 0",
            lql::quote(PROMPT)
        ))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: serde_json::Value = serde_json::from_str(&r.text().unwrap()).unwrap();
    assert_eq!(
        v["results"][0]["rows"][0][0].as_str(),
        Some(steered.as_str()),
        "{v}"
    );

    // Outside the folder, or a vector that is not one: 400 naming the field.
    let (st, v) = common::post(
        &url,
        json!({"prompt": PROMPT, "max_tokens": 4, "steering": {"vector": "/etc/passwd"}}),
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["param"], "steering");
    let (st, v) = common::post(
        &url,
        json!({"prompt": PROMPT, "max_tokens": 4, "steering": {"vector": vector, "layers": [20, 3]}}),
    );
    assert_eq!(st, 400, "{v}");
}

#[test]
fn steering_needs_allow_writes() {
    let s = common::start(common::config());
    let (st, v) = common::post(
        &format!("{}/v1/completions", s.url()),
        json!({"prompt": PROMPT, "max_tokens": 4, "steering": {"vector": "love.gguf"}}),
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--allow-writes"),
        "{v}"
    );
}
