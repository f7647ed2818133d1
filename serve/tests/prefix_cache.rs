//! The prompt-prefix cache: a second request sharing a long prefix with the first starts
//! from the cached state, and its logits are bit-identical to the same request run cold
//! (`cache_prompt: false`: prefilled from scratch, in the same chunks); time to first token
//! of both is printed (the figure in docs/serve.md comes from this test's output, not from
//! an assertion). A cache too small for the prefix keeps nothing, and answers the same.

mod common;

use std::time::Instant;

use serde_json::{json, Value};

/// A document of well over 1,024 tokens, then a question.
fn prompt(question: &str) -> String {
    let doc = "The history of the city begins in antiquity, when traders settled by the river. \
               Over the centuries the town grew into a port, then a capital of arts and science. "
        .repeat(40);
    format!("{doc}\nQuestion: {question}\nAnswer:")
}

/// (first-token seconds, the whole answer) of a streamed completion.
fn streamed(url: &str, body: Value) -> (f64, Value) {
    let t = Instant::now();
    let mut body = body;
    body["stream"] = json!(true);
    let resp = common::client().post(url).json(&body).send().unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().unwrap();
    let secs = t.elapsed().as_secs_f64();
    let mut chunks = Vec::new();
    for line in text.lines() {
        if let Some(d) = line.strip_prefix("data: ") {
            if d != "[DONE]" {
                chunks.push(serde_json::from_str::<Value>(d).unwrap());
            }
        }
    }
    (secs, Value::Array(chunks))
}

#[test]
fn a_shared_prefix_is_reused_and_answers_bit_for_bit_as_cold() {
    let s = common::start(common::config());
    let url = format!("{}/v1/completions", s.url());
    let ask = |question: &str, cache: bool| {
        let t = Instant::now();
        let (st, v) = common::post(
            &url,
            json!({"prompt": prompt(question), "max_tokens": 8, "temperature": 0,
                   "logprobs": 5, "cache_prompt": cache}),
        );
        assert_eq!(st, 200, "{v}");
        (t.elapsed().as_secs_f64(), v)
    };
    // Cold, and filling the cache.
    let (cold_s, _) = ask("Where did the traders settle?", true);
    let before = common::metric(&s.url(), "lql_prompt_cache_tokens_total");
    assert_eq!(before, 0.0);
    // Warm: the document comes from the cache.
    let (warm_s, warm) = ask("What did the town grow into?", true);
    let reused = common::metric(&s.url(), "lql_prompt_cache_tokens_total");
    assert!(reused >= 1024.0, "reused {reused} positions");
    // The same request cold: prefilled from scratch in the same chunks.
    let (again_s, cold) = ask("What did the town grow into?", false);
    assert_eq!(
        common::metric(&s.url(), "lql_prompt_cache_tokens_total"),
        reused
    );
    assert_eq!(warm["choices"][0]["text"], cold["choices"][0]["text"]);
    assert_eq!(
        warm["choices"][0]["logprobs"], cold["choices"][0]["logprobs"],
        "the warm request's log-probabilities equal the cold one's bit for bit"
    );
    eprintln!(
        "reused {reused} positions; whole request: cold {cold_s:.3} s, warm {warm_s:.3} s, cold again {again_s:.3} s"
    );
    // Time to first token, streamed: cold (no cache) against warm.
    let body = |q: &str, cache: bool| json!({"prompt": prompt(q), "max_tokens": 1, "temperature": 0, "cache_prompt": cache});
    let mut cold_t = f64::INFINITY;
    let mut warm_t = f64::INFINITY;
    for _ in 0..3 {
        cold_t = cold_t.min(streamed(&url, body("Who settled first?", false)).0);
        warm_t = warm_t.min(streamed(&url, body("Who settled first?", true)).0);
    }
    eprintln!(
        "time to first token (best of 3): cold {cold_t:.3} s, warm {warm_t:.3} s = {:.1}% of cold",
        warm_t / cold_t * 100.0
    );
}

#[test]
fn a_cache_too_small_keeps_nothing_and_answers_the_same() {
    let mut c = common::config();
    c.prompt_cache_bytes = 1 << 20;
    let s = common::start(c);
    let url = format!("{}/v1/completions", s.url());
    let mut texts = Vec::new();
    for _ in 0..2 {
        let (st, v) = common::post(
            &url,
            json!({"prompt": prompt("Where did the traders settle?"), "max_tokens": 6, "temperature": 0}),
        );
        assert_eq!(st, 200, "{v}");
        texts.push(v["choices"][0]["text"].clone());
    }
    assert_eq!(texts[0], texts[1]);
    assert_eq!(common::metric(&s.url(), "lql_prompt_cache_hits_total"), 0.0);
}
