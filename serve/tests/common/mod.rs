//! Shared helpers of the server tests: a server on 127.0.0.1 (any free port) over the
//! default real model, a blocking HTTP client, and the model's reference answers through an
//! in-process connection.

#![allow(dead_code)]

use std::sync::OnceLock;

use lql_serve::{Config, Server};

/// The default model's path (fetched into the cache on first use).
pub fn model() -> String {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| lql_tests::default_model_path().display().to_string())
        .clone()
}

/// A config for tests: port 0, two slots decoding together on two backend threads.
pub fn config() -> Config {
    let mut c = Config::new(model());
    c.port = 0;
    c.parallel = 2;
    c.threads = 2;
    c.shutdown_grace_s = 5;
    c
}

pub fn start(config: Config) -> Server {
    Server::start(config).expect("the server starts")
}

pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(300))
        .build()
        .expect("client")
}

/// POSTs JSON, returns (status, body as JSON).
pub fn post(url: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let r = client().post(url).json(&body).send().expect("request");
    let status = r.status().as_u16();
    let text = r.text().expect("body");
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, v)
}

/// A reference connection on the same model.
pub fn reference() -> lql::Connection {
    lql::Connection::open(model()).expect("open the model")
}

/// `GENERATE prompt MAX n TEMPERATURE 0` through the engine: the text.
pub fn generate_greedy(conn: &lql::Connection, prompt: &str, max: usize) -> String {
    let rows = conn
        .execute(&format!(
            "GENERATE {} MAX {max} TEMPERATURE 0",
            lql::quote(prompt)
        ))
        .expect("GENERATE");
    let row = rows.iter().next().expect("one row");
    row.get::<_, String>("text").expect("text")
}

/// GETs `url` and returns its body as text (any status).
pub fn get_text(url: &str) -> String {
    client()
        .get(url)
        .send()
        .expect("request")
        .text()
        .expect("body")
}

/// GETs `url` and returns its body as JSON (any status).
pub fn get_json(url: &str) -> serde_json::Value {
    client()
        .get(url)
        .send()
        .expect("request")
        .json()
        .expect("JSON")
}

/// The value of the counter or gauge `name` in `/metrics` of the server at `url`.
pub fn metric(url: &str, name: &str) -> f64 {
    let text = get_text(&format!("{url}/metrics"));
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics"))
}
