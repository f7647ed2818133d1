//! Structured output over HTTP: `response_format` (`json_schema`, `json_object`) on chat
//! completions, llama.cpp's `grammar` on completions and `text.format` on responses each
//! answer exactly what `GENERATE … SCHEMA` / `GRAMMAR` answers for the same prompt; a
//! constrained and a plain request decoding in one batch each keep their own answer;
//! streamed constrained text is the same JSON; bad grammars and schemas are 400s naming
//! the field.

mod common;

use serde_json::{json, Value};

const SCHEMA: &str = r#"{"type":"object","properties":{"name":{"type":"string"},"capital":{"type":"string"},"languages":{"type":"array","items":{"type":"string"},"maxItems":4}},"required":["name","capital","languages"]}"#;
const RENDERED: &str = "<|im_start|>system\nAnswer in JSON.<|im_end|>\n<|im_start|>user\nTell me about Canada.<|im_end|>\n<|im_start|>assistant\n";

fn engine(conn: &lql::Connection, prompt: &str, clause: &str, max: usize) -> String {
    let rows = conn
        .execute(&format!(
            "GENERATE {} MAX {max} TEMPERATURE 0 {clause}",
            lql::quote(prompt)
        ))
        .unwrap();
    let text = rows
        .iter()
        .next()
        .unwrap()
        .get::<_, String>("text")
        .unwrap();
    text
}

fn chat_body(extra: Value) -> Value {
    let mut body = json!({
        "messages": [
            {"role": "system", "content": "Answer in JSON."},
            {"role": "user", "content": "Tell me about Canada."}
        ],
        "max_tokens": 96,
        "temperature": 0,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[test]
fn each_route_answers_what_generate_answers_under_the_same_constraint() {
    let conn = common::reference();
    let want_schema = engine(
        &conn,
        RENDERED,
        &format!("SCHEMA {}", lql::quote(SCHEMA)),
        96,
    );
    let parsed: Value = serde_json::from_str(&want_schema).unwrap();
    assert!(parsed["languages"].is_array(), "{want_schema}");
    let want_object = engine(&conn, RENDERED, "SCHEMA '{\"type\": \"object\"}'", 96);
    assert!(serde_json::from_str::<Value>(&want_object)
        .unwrap()
        .is_object());
    let gbnf = "root ::= \"The capital of France is \" (\"Paris\" | \"Lyon\") \".\"";
    let want_gbnf = engine(
        &conn,
        "Q: What is the capital of France?\nA:",
        &format!("GRAMMAR {}", lql::quote(gbnf)),
        32,
    );
    assert!(
        want_gbnf.starts_with("The capital of France is "),
        "{want_gbnf}"
    );

    let s = common::start(common::config());
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let chat = format!("{}/v1/chat/completions", s.url());
    let (st, v) = common::post(
        &chat,
        chat_body(
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "country", "schema": schema, "strict": true}}}),
        ),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], want_schema);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");

    // llama.cpp's spelling: the schema as `json_schema`, or in `response_format.schema`.
    let (st, v) = common::post(&chat, chat_body(json!({"json_schema": schema})));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], want_schema);
    let (st, v) = common::post(
        &chat,
        chat_body(json!({"response_format": {"type": "json_object"}})),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], want_object);

    let (st, v) = common::post(
        &format!("{}/v1/completions", s.url()),
        json!({"prompt": "Q: What is the capital of France?\nA:", "max_tokens": 32, "temperature": 0, "grammar": gbnf}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["text"], want_gbnf);

    let (st, v) = common::post(
        &format!("{}/v1/responses", s.url()),
        json!({"instructions": "Answer in JSON.", "input": "Tell me about Canada.", "max_output_tokens": 96, "temperature": 0,
               "text": {"format": {"type": "json_schema", "name": "country", "schema": schema}}}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["output"][0]["content"][0]["text"], want_schema);

    // Streamed: the deltas add up to the same JSON.
    let text = common::client()
        .post(&chat)
        .json(&chat_body(json!({"stream": true, "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}})))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let mut streamed = String::new();
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(data).unwrap();
        if let Some(d) = chunk["choices"][0]["delta"]["content"].as_str() {
            streamed.push_str(d);
        }
    }
    assert_eq!(streamed, want_schema);
}

#[test]
fn a_constrained_and_a_plain_request_decode_together_each_as_alone() {
    let conn = common::reference();
    let prompt = "Q: Name a colour.\nA:";
    let gbnf = "root ::= \" \" (\"red\" | \"green\" | \"blue\") \".\"";
    let plain = common::generate_greedy(&conn, prompt, 16);
    let constrained = engine(&conn, prompt, &format!("GRAMMAR {}", lql::quote(gbnf)), 16);
    assert_ne!(plain, constrained);
    let s = common::start(common::config());
    let url = format!("{}/v1/completions", s.url());
    let handles: Vec<_> = [true, false]
        .into_iter()
        .map(|grammar| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut body = json!({"prompt": prompt, "max_tokens": 16, "temperature": 0});
                if grammar {
                    body["grammar"] = json!(gbnf);
                }
                let (st, v) = common::post(&url, body);
                assert_eq!(st, 200, "{v}");
                v["choices"][0]["text"].as_str().unwrap().to_string()
            })
        })
        .collect();
    let got: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(got, [constrained, plain]);
}

#[test]
fn bad_constraints_are_refused_naming_the_field() {
    let s = common::start(common::config());
    let chat = format!("{}/v1/chat/completions", s.url());
    let cases = [
        (json!({"grammar": "root ::= \"a\" nope"}), "grammar", "nope"),
        (json!({"grammar": "  "}), "grammar", "empty"),
        (
            json!({"response_format": {"type": "json_schema"}}),
            "response_format",
            "json_schema.schema",
        ),
        (
            json!({"response_format": "json"}),
            "response_format",
            "type",
        ),
        (
            json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "integer", "minimum": 5, "maximum": 1}}}}),
            "response_format",
            "json_schema",
        ),
        (
            json!({"grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}}),
            "grammar",
            "not response_format and grammar",
        ),
    ];
    for (extra, param, words) in cases {
        let (st, e) = common::post(&chat, chat_body(extra.clone()));
        assert_eq!(st, 400, "{extra}: {e}");
        assert_eq!(e["error"]["param"], param, "{extra}: {e}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(msg.contains(words), "{extra}: {msg}");
    }
}
