//! Faults and limits: invalid JSON → 400, a 100 MB body → 413, a wrong API key → 401 (all
//! with the standard error shape), a full queue → 429, a client killed mid-stream frees its
//! slot within a second, a client gone during a long prefill frees it at the next prompt
//! chunk, unknown routes → 404 JSON, /health and /metrics.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

fn assert_standard_error(v: &serde_json::Value) {
    let e = &v["error"];
    assert!(e["message"].is_string(), "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert!(e["code"].is_string(), "{v}");
    assert!(e.get("param").is_some(), "{v}");
}

#[test]
fn invalid_json_is_400_with_the_standard_shape() {
    let s = common::start(common::config());
    let r = common::client()
        .post(format!("{}/v1/completions", s.url()))
        .header("content-type", "application/json")
        .body("{\"prompt\": ")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: serde_json::Value = r.json().unwrap();
    assert_standard_error(&v);
    assert_eq!(v["error"]["code"], "invalid_json");
}

/// Sends headers announcing `len` bytes and part of the body; returns the status line.
fn raw_post_status(addr: std::net::SocketAddr, path: &str, len: usize) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    )
    .unwrap();
    // Part of the body: the server must answer without reading all of it.
    let chunk = vec![b' '; 1 << 20];
    for _ in 0..8 {
        if s.write_all(&chunk).is_err() {
            break;
        }
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text.lines().next().unwrap_or("").to_string();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[test]
fn a_100_mb_body_is_413() {
    let s = common::start(common::config());
    let (status, body) = raw_post_status(s.addr, "/v1/chat/completions", 100 << 20);
    assert!(status.contains(" 413 "), "{status}");
    let v: serde_json::Value = serde_json::from_str(body.trim()).unwrap_or_else(|_| {
        // A chunked body: take the JSON object inside it.
        let start = body.find('{').unwrap();
        let end = body.rfind('}').unwrap();
        serde_json::from_str(&body[start..=end]).unwrap()
    });
    assert_standard_error(&v);
    assert_eq!(v["error"]["code"], "request_too_large");
}

#[test]
fn api_key_is_enforced() {
    let mut c = common::config();
    c.api_key = Some("sekrit".into());
    let s = common::start(c);
    let url = format!("{}/v1/models", s.url());
    let r = common::client().get(&url).send().unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert_standard_error(&r.json().unwrap());
    let r = common::client()
        .get(&url)
        .bearer_auth("wrong")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = common::client()
        .get(&url)
        .bearer_auth("sekrit")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // /health answers without a key (for probes).
    let r = common::client()
        .get(format!("{}/health", s.url()))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

fn health(url: &str) -> serde_json::Value {
    common::get_json(&format!("{url}/health"))
}

/// Starts a long streaming completion and returns its connection once the first token
/// arrived.
fn start_stream(addr: std::net::SocketAddr) -> TcpStream {
    let body = json!({"prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "max_tokens": 2000, "temperature": 0, "stream": true}).to_string();
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("data: {") {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "stream ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    s
}

#[test]
fn full_queue_is_429_and_a_killed_client_frees_its_slot() {
    let mut c = common::config();
    c.parallel = 1;
    c.queue = 0;
    let s = common::start(c);
    let url = s.url();
    let stream = start_stream(s.addr);
    assert_eq!(health(&url)["slots_busy"], 1);
    let (st, v) = common::post(
        &format!("{url}/v1/completions"),
        json!({"prompt": "x", "max_tokens": 1}),
    );
    assert_eq!(st, 429, "{v}");
    assert_standard_error(&v);
    // Kill the client: the slot is free again within a second.
    drop(stream);
    let t = Instant::now();
    while health(&url)["slots_busy"] != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "the slot was not freed within 1 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (st, _) = common::post(
        &format!("{url}/v1/completions"),
        json!({"prompt": "x", "max_tokens": 1}),
    );
    assert_eq!(st, 200);
    let m = common::get_text(&format!("{url}/metrics"));
    assert!(m.contains("lql_rejected_busy_total 1"), "{m}");
    assert!(m.contains("lql_cancelled_total 1"), "{m}");
    assert!(
        m.contains("lql_request_duration_seconds_bucket{route=\"completions\",le=\"+Inf\"}"),
        "{m}"
    );
    assert!(m.contains("# TYPE lql_queue_depth gauge"), "{m}");
}

/// A client that leaves during a long prefill frees its slot at the prompt's next chunk,
/// streamed or not: the prefill stops (the positions run stay far below the prompt's),
/// the request counts as cancelled, and the next request is served.
#[test]
fn a_client_gone_during_a_long_prefill_frees_its_slot_at_the_next_chunk() {
    let mut c = common::config();
    c.parallel = 1;
    let s = common::start(c);
    let url = s.url();
    let doc = "The history of the city begins in antiquity, when traders settled by the river. \
               Over the centuries the town grew into a port, then a capital of arts and science. "
        .repeat(200);
    let tokens = common::post(&format!("{url}/tokenize"), json!({"content": doc})).1["tokens"]
        .as_array()
        .expect("tokens")
        .len() as f64;
    assert!(tokens > 3000.0, "{tokens} tokens");
    for (round, stream) in [false, true].into_iter().enumerate() {
        let before = common::metric(&url, "lql_prefill_positions_total");
        let body = json!({"prompt": doc, "max_tokens": 4, "temperature": 0, "stream": stream,
                          "cache_prompt": false})
        .to_string();
        let mut conn = TcpStream::connect(s.addr).unwrap();
        write!(
            conn,
            "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        // Leave once the prefill has begun.
        let t = Instant::now();
        while common::metric(&url, "lql_prefill_positions_total") == before {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the prefill never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(conn);
        while health(&url)["slots_busy"] != 0 {
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "the slot was never freed"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let ran = common::metric(&url, "lql_prefill_positions_total") - before;
        eprintln!("stream={stream}: {ran} of {tokens} prompt positions prefilled before the slot was freed");
        assert!(
            ran <= tokens / 2.0,
            "stream={stream}: the prefill went on after the client left ({ran} of {tokens} positions)"
        );
        assert_eq!(
            common::metric(&url, "lql_cancelled_total"),
            (round + 1) as f64
        );
    }
    let (st, v) = common::post(
        &format!("{url}/v1/completions"),
        json!({"prompt": "x", "max_tokens": 1}),
    );
    assert_eq!(st, 200, "{v}");
}

#[test]
fn unknown_routes_and_prompts_over_the_limit() {
    let mut c = common::config();
    c.max_prompt_tokens = 8;
    let s = common::start(c);
    let r = common::client()
        .get(format!("{}/v2/nothing", s.url()))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    assert_standard_error(&r.json().unwrap());
    let (st, v) = common::post(
        &format!("{}/v1/completions", s.url()),
        json!({"prompt": "one two three four five six seven eight nine ten eleven twelve"}),
    );
    assert_eq!(st, 400);
    assert_eq!(v["error"]["code"], "context_length_exceeded");
}

/// Reads what the server sends until it closes the connection (or 10 s pass).
fn read_to_close(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Slow clients cannot hold the server: connections over `--max-connections` are
/// answered 503 and closed at once; a client that does not finish its headers within
/// `--header-timeout` is disconnected, and one that does not finish its body within
/// `--body-timeout` is answered 408; then `/health` answers again.
#[test]
fn slow_clients_are_cut_off_and_counted() {
    let mut c = common::config();
    c.max_connections = 4;
    c.header_timeout_s = 1;
    c.body_timeout_s = 1;
    let s = common::start(c);
    // Four clients that start a request and stall mid-headers hold every connection.
    let mut stalled: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut t = TcpStream::connect(s.addr).unwrap();
            t.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .unwrap();
            t
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut fifth = TcpStream::connect(s.addr).unwrap();
    let answer = read_to_close(&mut fifth);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too_many_connections"), "{answer}");
    // The header timeout closes each stalled connection (hyper may say 408 first).
    for t in &mut stalled {
        let answer = read_to_close(t);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
            "{answer:?}"
        );
    }
    // A body that never completes: 408 with the standard error shape.
    let mut slow_body = TcpStream::connect(s.addr).unwrap();
    slow_body
        .write_all(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\"",
        )
        .unwrap();
    let answer = read_to_close(&mut slow_body);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    // The server answers again.
    let r = common::client()
        .get(format!("{}/health", s.url()))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let m = common::get_text(&format!("{}/metrics", s.url()));
    assert!(m.contains("lql_rejected_connections_total 1"), "{m}");
}

/// While in-flight connections drain after a stop, a new connection is answered 503
/// `shutting_down` (not refused at connect).
#[test]
fn new_connections_during_shutdown_are_503() {
    let mut c = common::config();
    c.header_timeout_s = 3;
    let s = common::start(c);
    let addr = s.addr;
    // A connection in the middle of its headers keeps the drain waiting.
    let mut stalled = TcpStream::connect(addr).unwrap();
    stalled.write_all(b"GET /health HTTP/1.1\r\nHo").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let stopping = std::thread::spawn(move || s.stop());
    std::thread::sleep(Duration::from_millis(300));
    let mut late = TcpStream::connect(addr).unwrap();
    let answer = read_to_close(&mut late);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("shutting_down"), "{answer}");
    drop(stalled);
    stopping.join().unwrap().unwrap();
}

/// `--max-memory`: at the bound, a request that would run the model and a new session are
/// answered 503 `memory_limit`; `/health` and `/v1/models` still answer.
#[test]
fn requests_at_the_memory_bound_are_503() {
    let mut c = common::config();
    c.max_memory = Some(1 << 20);
    let s = common::start(c);
    let (st, v) = common::post(
        &format!("{}/v1/completions", s.url()),
        json!({"prompt": "x", "max_tokens": 1}),
    );
    assert_eq!(st, 503, "{v}");
    assert_eq!(v["error"]["code"], "memory_limit", "{v}");
    let r = common::client()
        .post(format!("{}/v1/lql", s.url()))
        .header("X-LQL-Session", "new")
        .header("content-type", "text/plain")
        .body("TOKENIZE 'x'")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(
        common::get_json(&format!("{}/health", s.url()))["status"],
        "ok"
    );
    assert_eq!(
        common::get_json(&format!("{}/v1/models", s.url()))["object"],
        "list"
    );
}
