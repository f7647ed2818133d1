//! Repetition penalties: a chat request's `repeat_penalty`, `frequency_penalty` and
//! `presence_penalty` (window `repeat_last_n`) answer exactly what `GENERATE …
//! REPEAT_PENALTY r FREQUENCY_PENALTY f PRESENCE_PENALTY p` answers for the rendered prompt,
//! change a greedy answer that repeats itself, and bad values are 400s naming the field.

mod common;

use serde_json::json;

const RENDERED: &str = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nList the days of the week, again and again.<|im_end|>\n<|im_start|>assistant\n";

fn generate(conn: &lql::Connection, clause: &str) -> String {
    let rows = conn
        .execute(&format!(
            "GENERATE {} MAX 48 TEMPERATURE 0 {clause}",
            lql::quote(RENDERED)
        ))
        .unwrap();
    rows.row(0).unwrap().get("text").unwrap()
}

#[test]
fn penalties_answer_what_generate_answers_and_change_the_text() {
    let conn = common::reference();
    let plain = generate(&conn, "");
    let penalised = generate(
        &conn,
        "REPEAT_PENALTY 1.3 FREQUENCY_PENALTY 0.4 PRESENCE_PENALTY 0.2",
    );
    assert_ne!(plain, penalised, "the penalties change a repetitive answer");

    let s = common::start(common::config());
    let url = format!("{}/v1/chat/completions", s.url());
    let body = |extra: serde_json::Value| {
        let mut b = json!({
            "messages": [{"role": "user", "content": "List the days of the week, again and again."}],
            "max_tokens": 48, "temperature": 0,
        });
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let (st, v) = common::post(&url, body(json!({})));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], plain);
    let (st, v) = common::post(
        &url,
        body(json!({"repeat_penalty": 1.3, "frequency_penalty": 0.4, "presence_penalty": 0.2})),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], penalised);
    // A window of 0 tokens penalises nothing.
    let (_, v) = common::post(
        &url,
        body(json!({"repeat_penalty": 1.3, "frequency_penalty": 0.4, "repeat_last_n": 0})),
    );
    assert_eq!(v["choices"][0]["message"]["content"], plain);

    for (field, bad) in [
        ("frequency_penalty", json!(2.5)),
        ("presence_penalty", json!(-3)),
        ("repeat_penalty", json!(0)),
        ("repeat_last_n", json!(-2)),
    ] {
        let (st, e) = common::post(&url, body(json!({ field: bad })));
        assert_eq!(st, 400, "{field}: {e}");
        assert_eq!(e["error"]["param"], field, "{e}");
    }
}

#[test]
fn bad_penalty_clauses_are_refused_with_their_span() {
    let conn = common::reference();
    for (clause, what) in [
        ("REPEAT_PENALTY 0", "REPEAT_PENALTY"),
        ("FREQUENCY_PENALTY 2.5", "FREQUENCY_PENALTY"),
        ("PRESENCE_PENALTY -3", "PRESENCE_PENALTY"),
    ] {
        let text = format!("GENERATE 'x' MAX 2 {clause}");
        let e = conn.execute(&text).unwrap_err();
        assert!(e.message.contains(what), "{clause}: {e}");
        let span = e.span.clone().expect("a span");
        assert!(text[span].chars().any(|c| c.is_ascii_digit()), "{clause}");
    }
    // EXPLAIN shows them on the decode loop.
    let plan = conn
        .execute("EXPLAIN PLAN GENERATE 'x' MAX 2 REPEAT_PENALTY 1.1 PRESENCE_PENALTY 0.5")
        .unwrap();
    let text = format!("{:?}", plan.rows);
    assert!(
        text.contains("repeat_penalty=1.1") && text.contains("presence_penalty=0.5"),
        "{text}"
    );
}
