//! The OpenAI-compatible routes against the real default model: greedy completions and
//! chat equal `GENERATE … TEMPERATURE 0` for the same prompt / rendered chat template,
//! logprobs equal INFER's, streaming equals non-streaming, stop strings, n, usage, and the
//! refusals of what is not built (tools, JSON schema output).

mod common;

use serde_json::json;

#[test]
fn models_lists_the_served_model() {
    let s = common::start(common::config());
    let v: serde_json::Value = common::get_json(&format!("{}/v1/models", s.url()));
    assert_eq!(v["object"], "list");
    // The file's stem, never its path (that would tell clients where the server keeps
    // its files); `--alias` names it.
    let stem = std::path::Path::new(&common::model())
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert_eq!(v["data"][0]["id"], stem.as_str());
    assert_eq!(v["data"][0]["object"], "model");
    let health: serde_json::Value = common::get_json(&format!("{}/health", s.url()));
    assert_eq!(health["model"], stem.as_str());
    drop(s);

    let mut c = common::config();
    c.alias = Some("smol".into());
    let s = common::start(c);
    let v: serde_json::Value = common::get_json(&format!("{}/v1/models", s.url()));
    assert_eq!(v["data"][0]["id"], "smol");
}

/// A refused chat request is counted under chat completions, as an error; not as a
/// completion.
#[test]
fn failed_chat_requests_are_counted_as_chat_errors() {
    let s = common::start(common::config());
    let (st, v) = common::post(
        &format!("{}/v1/chat/completions", s.url()),
        json!({"messages": "not a list"}),
    );
    assert_eq!(st, 400, "{v}");
    let m = common::get_text(&format!("{}/metrics", s.url()));
    assert!(
        m.contains("lql_requests_total{route=\"completions\"} 0"),
        "{m}"
    );
    assert!(
        m.contains("lql_request_errors_total{route=\"completions\"} 0"),
        "{m}"
    );
    assert!(
        m.contains("lql_requests_total{route=\"chat_completions\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("lql_request_errors_total{route=\"chat_completions\"} 1"),
        "{m}"
    );
}

#[test]
fn greedy_completion_equals_generate_and_logprobs_equal_infer() {
    let s = common::start(common::config());
    let conn = common::reference();
    let prompt = "The capital of France is";
    let want = common::generate_greedy(&conn, prompt, 12);
    let (st, v) = common::post(
        &format!("{}/v1/completions", s.url()),
        json!({"model": "x", "prompt": prompt, "max_tokens": 12, "temperature": 0, "logprobs": 5}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"], want);
    // usage: prompt tokens as TOKENIZE counts them, completion tokens as generated.
    let ntok = conn
        .execute(&format!("TOKENIZE {}", lql::quote(prompt)))
        .unwrap()
        .len();
    assert_eq!(v["usage"]["prompt_tokens"], ntok);
    let lp = &v["choices"][0]["logprobs"];
    let ntoks = lp["tokens"].as_array().unwrap().len();
    assert_eq!(v["usage"]["completion_tokens"], ntoks);
    assert_eq!(v["usage"]["total_tokens"], ntok + ntoks);
    // The first token's logprob and alternatives are INFER's probabilities.
    let infer = conn
        .execute(&format!("INFER {} TOP 5", lql::quote(prompt)))
        .unwrap();
    let first_lp = lp["token_logprobs"][0].as_f64().unwrap();
    let top = lp["top_logprobs"][0].as_object().unwrap();
    assert_eq!(top.len(), 5);
    for row in infer.iter() {
        let token: String = row.get("token").unwrap();
        let prob: f64 = row.get("prob").unwrap();
        let got = top[&token]
            .as_f64()
            .unwrap_or_else(|| panic!("{token:?} in {top:?}"));
        assert!(
            (got - prob.ln()).abs() < 1e-4,
            "{token:?}: {got} vs ln {prob}"
        );
        let rank: i64 = row.get("rank").unwrap();
        if rank == 1 {
            assert_eq!(lp["tokens"][0], token);
            assert!((first_lp - prob.ln()).abs() < 1e-4);
        }
    }
}

#[test]
fn greedy_chat_equals_generate_on_the_rendered_template_and_streams_the_same() {
    let s = common::start(common::config());
    let conn = common::reference();
    let rendered = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
    let want = common::generate_greedy(&conn, rendered, 16);
    let body = json!({
        "model": "smollm2",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 16, "temperature": 0,
        "logprobs": true, "top_logprobs": 3,
    });
    let (st, v) = common::post(&format!("{}/v1/chat/completions", s.url()), body.clone());
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], want);
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(
        content.len(),
        v["usage"]["completion_tokens"].as_u64().unwrap() as usize
    );
    assert_eq!(content[0]["top_logprobs"].as_array().unwrap().len(), 3);
    // The same request streamed: the deltas concatenate to the same text.
    let mut sbody = body;
    sbody["stream"] = json!(true);
    sbody["stream_options"] = json!({"include_usage": true});
    let text = common::client()
        .post(format!("{}/v1/chat/completions", s.url()))
        .json(&sbody)
        .send()
        .unwrap()
        .text()
        .unwrap();
    let mut joined = String::new();
    let mut finish = None;
    let mut usage = None;
    let mut done = false;
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let c: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(c["object"], "chat.completion.chunk");
        if let Some(ch) = c["choices"].as_array().and_then(|a| a.first()) {
            if let Some(t) = ch["delta"]["content"].as_str() {
                joined.push_str(t);
            }
            if let Some(f) = ch["finish_reason"].as_str() {
                finish = Some(f.to_string());
            }
        }
        if !c["usage"].is_null() {
            usage = Some(c["usage"].clone());
        }
    }
    assert!(done, "{text}");
    assert_eq!(joined, want);
    assert_eq!(finish.as_deref(), v["choices"][0]["finish_reason"].as_str());
    assert_eq!(usage.unwrap(), v["usage"]);
}

#[test]
fn stop_n_seed_and_sampling_params() {
    let s = common::start(common::config());
    let url = format!("{}/v1/completions", s.url());
    let conn = common::reference();
    let prompt = "One, two, three, four,";
    let full = common::generate_greedy(&conn, prompt, 12);
    let stop = full.trim_start().chars().take(2).collect::<String>();
    let cut = full
        .find(&stop)
        .map(|i| &full[..i])
        .unwrap_or(&full)
        .to_string();
    let (st, v) = common::post(
        &url,
        json!({"prompt": prompt, "max_tokens": 12, "temperature": 0, "stop": [stop]}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["text"], cut);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // n choices with a seed: reproducible, indexed, and the engine's sampler.
    let body = json!({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.8, "top_p": 0.95, "top_k": 40, "seed": 7, "n": 2});
    let (_, a) = common::post(&url, body.clone());
    let (_, b) = common::post(&url, body);
    assert_eq!(a["choices"], b["choices"]);
    assert_eq!(a["choices"].as_array().unwrap().len(), 2);
    assert_eq!(a["choices"][1]["index"], 1);
    let rows = conn
        .execute("GENERATE \"Once upon a time\" MAX 8 TEMPERATURE 0.8 TOP_P 0.95 TOP_K 40 SEED 7")
        .unwrap();
    let text: String = rows.iter().next().unwrap().get("text").unwrap();
    assert_eq!(a["choices"][0]["text"], text);
    assert_eq!(a["choices"][0]["finish_reason"], "length");
    // Bad parameters answer 400 with the standard shape.
    let (st, e) = common::post(&url, json!({"prompt": "x", "temperature": 5}));
    assert_eq!(st, 400);
    assert_eq!(e["error"]["param"], "temperature");
    assert_eq!(e["error"]["type"], "invalid_request_error");
}

#[test]
fn unbuilt_features_are_refused_by_name() {
    let s = common::start(common::config());
    let url = format!("{}/v1/chat/completions", s.url());
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let (st, e) = common::post(
        &url,
        json!({"messages": msgs, "tools": [{"type": "function", "function": {"name": "f"}}]}),
    );
    assert_eq!(st, 400);
    assert_eq!(e["error"]["code"], "not_supported");
    assert_eq!(e["error"]["param"], "tools");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("not supported yet: tools"));
    let (st, e) = common::post(
        &url,
        json!({"messages": msgs, "response_format": {"type": "xml"}}),
    );
    assert_eq!(st, 400);
    assert_eq!(e["error"]["param"], "response_format");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("json_schema"));
}

#[test]
fn responses_answer_in_the_responses_shape() {
    let s = common::start(common::config());
    let conn = common::reference();
    let rendered = "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n";
    let want = common::generate_greedy(&conn, rendered, 10);
    let (st, v) = common::post(
        &format!("{}/v1/responses", s.url()),
        json!({"model": "m", "instructions": "Answer briefly.", "input": "Name a colour.", "max_output_tokens": 10, "temperature": 0}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["object"], "response");
    assert_eq!(v["output"][0]["content"][0]["type"], "output_text");
    assert_eq!(v["output"][0]["content"][0]["text"], want);
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

/// Four different prompts at once on four slots: they decode in one batch (the metrics
/// count steps of more than one row), and each answers the text of its own
/// `GENERATE … TEMPERATURE 0`.
#[test]
fn concurrent_greedy_completions_decode_together_and_each_equals_generate() {
    let mut c = common::config();
    c.parallel = 4;
    let s = common::start(c);
    let conn = common::reference();
    let prompts = [
        "The capital of France is",
        "1, 2, 3, 4, 5,",
        "Once upon a time",
        "The best way to learn a language is",
    ];
    let url = format!("{}/v1/completions", s.url());
    let answers: Vec<String> = std::thread::scope(|sc| {
        let hs: Vec<_> = prompts
            .iter()
            .map(|p| {
                let url = url.clone();
                sc.spawn(move || {
                    let (st, v) = common::post(
                        &url,
                        json!({"prompt": p, "max_tokens": 24, "temperature": 0}),
                    );
                    assert_eq!(st, 200, "{v}");
                    v["choices"][0]["text"].as_str().unwrap().to_string()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (p, got) in prompts.iter().zip(&answers) {
        assert_eq!(got, &common::generate_greedy(&conn, p, 24), "{p:?}");
    }
    let m = common::get_text(&format!("{}/metrics", s.url()));
    let counter = |name: &str| -> u64 {
        m.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in {m}"))
    };
    let (steps, rows) = (
        counter("lql_decode_steps_total"),
        counter("lql_decode_rows_total"),
    );
    assert!(
        rows > steps,
        "no step decoded more than one sequence: {rows} rows in {steps} steps"
    );
}
