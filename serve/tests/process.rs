//! The server as a process (`lql-serve`, the same code as `lql serve`): it prints its
//! address, and SIGTERM during streaming load exits 0 after the in-flight requests end.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[cfg(unix)]
#[test]
fn sigterm_during_load_exits_0() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lql-serve"))
        .args([
            &common::model(),
            "--port",
            "0",
            "--parallel",
            "2",
            "--threads",
            "1",
            "--shutdown-grace",
            "2",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().strip_prefix("http://").unwrap().to_string();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    // Four streaming clients, two decoding and two queued.
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let body = r#"{"prompt": "1, 2, 3, 4,", "max_tokens": 4000, "temperature": 0, "stream": true}"#;
                let mut s = TcpStream::connect(&addr).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                write!(s, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
                let mut out = Vec::new();
                let _ = s.read_to_end(&mut out);
                String::from_utf8_lossy(&out).to_string()
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the server did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    for c in clients {
        let out = c.join().unwrap();
        // Each client got a complete answer: a finished stream, or 503 while shutting down.
        assert!(
            out.contains("data: [DONE]") || out.contains(" 503 "),
            "{}",
            &out[..out.len().min(400)]
        );
    }
}

/// `--offline` never downloads: a catalogue name missing from the cache (an empty
/// `LQL_HOME`) stops the server at start with the library's offline code.
#[test]
fn offline_refuses_an_uncached_catalogue_model() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lql-serve"))
        .args(["smollm2-135m-instruct", "--offline", "--port", "0"])
        .env("LQL_HOME", home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("LQL-E0401") || err.contains("offline"),
        "{err}"
    );
    assert!(!home
        .path()
        .join("models")
        .join("smollm2-135m-instruct.gguf")
        .exists());
}
