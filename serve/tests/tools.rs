//! Tool calling in chat completions: with a template that renders tools in the Hermes /
//! Qwen format (`tests/fixtures/hermes_tools.jinja`, given as `--chat-template`), a
//! required or named `tool_choice` makes SmolLM2 call a declared function with arguments
//! valid for its schema, answered in OpenAI's shape, streamed or not, and exactly what
//! `GENERATE` gives under the same grammar for the same rendered prompt; earlier calls and
//! tool results render into the next turn; `tool_choice: "none"` answers in text; the
//! model's own template (no tool format) and bad declarations are refused by field.

mod common;

use lql_serve::template::{ChatTemplate, Message};
use lql_serve::tools::ToolCalling;
use serde_json::{json, Value};

fn template_path() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/hermes_tools.jinja"
    )
    .to_string()
}

fn weather_tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "get_weather",
            "description": "The current weather in a city",
            "parameters": {"type": "object",
                "properties": {"city": {"type": "string", "maxLength": 24},
                               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city", "unit"]}}},
        {"type": "function", "function": {
            "name": "get_time",
            "description": "The local time in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                "required": ["city"]}}}
    ])
}

fn messages() -> Value {
    json!([{"role": "user", "content": "What is the weather like in Paris today?"}])
}

fn server() -> lql_serve::Server {
    let mut c = common::config();
    c.chat_template_file = Some(template_path().into());
    common::start(c)
}

fn chat(s: &lql_serve::Server, body: Value) -> (u16, Value) {
    common::post(&format!("{}/v1/chat/completions", s.url()), body)
}

#[test]
fn required_and_named_choices_call_a_declared_tool_as_generate_would() {
    let s = server();
    let (st, v) = chat(
        &s,
        json!({"messages": messages(), "tools": weather_tools(), "tool_choice": "required",
               "max_tokens": 64, "temperature": 0}),
    );
    assert_eq!(st, 200, "{v}");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
    let calls = choice["message"]["tool_calls"]
        .as_array()
        .expect("tool_calls");
    assert_eq!(calls.len(), 1, "{v}");
    let call = &calls[0];
    assert_eq!(call["type"], "function");
    assert!(call["id"].as_str().unwrap().starts_with("call"));
    let name = call["function"]["name"].as_str().unwrap();
    assert!(name == "get_weather" || name == "get_time", "{v}");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap())
        .expect("arguments are JSON text");
    assert!(args["city"].is_string(), "{args}");
    // No keys beyond the schema's (as structured output decodes a schema).
    let allowed = ["city", "unit"];
    assert!(
        args.as_object()
            .unwrap()
            .keys()
            .all(|k| allowed.contains(&k.as_str())),
        "{args}"
    );
    if name == "get_weather" {
        assert!(["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap()));
    }
    assert!(choice["message"]["content"].is_null(), "{v}");

    // The same prompt and grammar through GENERATE give the same call.
    let tmpl = ChatTemplate::new(
        &std::fs::read_to_string(template_path()).unwrap(),
        String::new(),
        "<|im_end|>".into(),
    )
    .unwrap();
    let tools = weather_tools();
    let calling =
        ToolCalling::from_request(Some(&tools), Some(&json!("required")), tmpl.tool_format)
            .unwrap()
            .unwrap();
    let rendered = tmpl
        .render(
            &[Message::text(
                "user",
                "What is the weather like in Paris today?",
            )],
            Some(&tools),
        )
        .unwrap();
    assert!(rendered.contains("<tools>") && rendered.contains("\"get_weather\""));
    let Some(lql::generation::ConstraintSpec::Lark(lark)) = calling.constraint() else {
        panic!("required constrains");
    };
    let conn = common::reference();
    let rows = conn
        .execute(&format!(
            "GENERATE {} MAX 64 TEMPERATURE 0 GRAMMAR {}",
            lql::quote(&rendered),
            lql::quote(&format!("%llguidance {{}}\n{lark}"))
        ))
        .unwrap();
    let text: String = rows.row(0).unwrap().get("text").unwrap();
    let parsed = calling.parse(&text);
    assert_eq!(parsed.calls.len(), 1, "{text}");
    assert_eq!(parsed.calls[0].name, name);
    assert_eq!(
        parsed.calls[0].arguments,
        call["function"]["arguments"].as_str().unwrap()
    );

    // A named choice calls that function.
    let (st, v) = chat(
        &s,
        json!({"messages": messages(), "tools": weather_tools(),
               "tool_choice": {"type": "function", "function": {"name": "get_time"}},
               "max_tokens": 64, "temperature": 0}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time",
        "{v}"
    );
}

#[test]
fn a_streamed_call_arrives_as_one_tool_call_delta() {
    let s = server();
    let body = json!({"messages": messages(), "tools": weather_tools(), "tool_choice": "required",
                      "max_tokens": 64, "temperature": 0});
    let (_, plain) = chat(&s, body.clone());
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let text = common::client()
        .post(format!("{}/v1/chat/completions", s.url()))
        .json(&streamed)
        .send()
        .unwrap()
        .text()
        .unwrap();
    let chunks: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
        .flatten()
        .collect();
    assert_eq!(calls.len(), 1, "{text}");
    assert_eq!(calls[0]["index"], 0);
    let want = &plain["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(calls[0]["function"]["name"], want["name"]);
    assert_eq!(calls[0]["function"]["arguments"], want["arguments"]);
    let finish: Vec<&Value> = chunks
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, vec![&json!("tool_calls")], "{text}");
}

#[test]
fn a_conversation_with_calls_and_results_renders_and_none_answers_in_text() {
    let s = server();
    let history = json!([
        {"role": "user", "content": "What is the weather like in Paris today?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temperature\": 21, \"sky\": \"sunny\"}"}
    ]);
    let (st, v) = chat(
        &s,
        json!({"messages": history, "tools": weather_tools(), "tool_choice": "none",
               "max_tokens": 24, "temperature": 0}),
    );
    assert_eq!(st, 200, "{v}");
    let m = &v["choices"][0]["message"];
    assert!(
        m["content"].is_string() && m.get("tool_calls").is_none(),
        "{v}"
    );
    // The history (the call and its result) is in the prompt.
    let (_, short) = chat(
        &s,
        json!({"messages": messages(), "tools": weather_tools(), "tool_choice": "none",
               "max_tokens": 1, "temperature": 0}),
    );
    assert!(
        v["usage"]["prompt_tokens"].as_u64().unwrap()
            > short["usage"]["prompt_tokens"].as_u64().unwrap() + 20,
        "{v} {short}"
    );
    // Bad arguments in the history are a 400 naming the message.
    let (st, e) = chat(
        &s,
        json!({"messages": [{"role": "assistant", "tool_calls": [{"type": "function",
            "function": {"name": "get_weather", "arguments": "{nope"}}]}], "max_tokens": 4}),
    );
    assert_eq!(st, 400, "{e}");
    assert_eq!(e["error"]["param"], "messages[0].tool_calls");
}

#[test]
fn templates_without_a_tool_format_and_bad_declarations_are_refused() {
    // SmolLM2's own template renders no tools.
    let plain = common::start(common::config());
    let (st, e) = chat(
        &plain,
        json!({"messages": messages(), "tools": weather_tools(), "max_tokens": 4}),
    );
    assert_eq!(st, 400, "{e}");
    assert_eq!(e["error"]["param"], "tools");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--chat-template"),
        "{e}"
    );

    let s = server();
    for (body, param) in [
        (json!({"tools": [{"type": "retrieval"}]}), "tools"),
        (
            json!({"tools": weather_tools(), "tool_choice": "sometimes"}),
            "tool_choice",
        ),
        (
            json!({"tools": weather_tools(), "tool_choice": {"type": "function", "function": {"name": "rm"}}}),
            "tool_choice",
        ),
        (json!({"tool_choice": "required"}), "tool_choice"),
        (
            json!({"tools": weather_tools(), "tool_choice": "required", "response_format": {"type": "json_object"}}),
            "tool_choice",
        ),
    ] {
        let mut b = json!({"messages": messages(), "max_tokens": 4});
        for (k, v) in body.as_object().unwrap() {
            b[k] = v.clone();
        }
        let (st, e) = chat(&s, b.clone());
        assert_eq!(st, 400, "{b} → {e}");
        assert_eq!(e["error"]["param"], param, "{b} → {e}");
    }
}
