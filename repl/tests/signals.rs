//! Ctrl-C in batch mode (`-c`, scripts): the running statement stops and reports
//! `interrupted` (a JSON error line in the JSON modes), the run exits non-zero, and an
//! interrupted EXTRACT leaves no temporary folder behind.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MODEL: &str = "smollm2-135m-instruct";

/// Runs `lql` with `args`, sends SIGINT after `delay`, and returns
/// (exit code, stderr).
fn interrupt_after(args: &[&str], delay: Duration) -> (Option<i32>, String) {
    let (code, _, err) = interrupt_after_with_stdout(args, delay);
    (code, err)
}

/// [`interrupt_after`], with stdout too: (exit code, stdout, stderr).
fn interrupt_after_with_stdout(args: &[&str], delay: Duration) -> (Option<i32>, String, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_lql"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lql");
    std::thread::sleep(delay);
    // SAFETY: sending a signal to our own child process.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let t0 = Instant::now();
    let out = child.wait_with_output().expect("wait for lql");
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "lql stopped promptly"
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An interrupted GENERATE prints the text it made before the error, in every mode (csv
/// here: its row, with `interrupted` as the finish reason).
#[test]
fn an_interrupted_generate_prints_its_partial_rows() {
    let script = format!("USE MODEL '{MODEL}'; GENERATE 'Once upon a time' MAX 4000;");
    let (code, out, err) =
        interrupt_after_with_stdout(&["--format", "csv", "-c", &script], Duration::from_secs(4));
    assert_eq!(code, Some(1), "stderr: {err}");
    assert!(err.contains("interrupted"), "{err}");
    assert!(out.contains("interrupted"), "the partial row: {out:?}");
}

#[test]
fn sigint_in_batch_json_mode_reports_interrupted() {
    let script = format!("USE MODEL '{MODEL}'; GENERATE 'Once upon a time' MAX 4000; STATS;");
    let (code, err) = interrupt_after(&["--format", "json", "-c", &script], Duration::from_secs(4));
    assert_eq!(code, Some(1), "stderr: {err}");
    let last = err
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|_| panic!("{err}"));
    assert_eq!(v["error"]["kind"], "interrupted", "{err}");
    assert_eq!(v["error"]["code"], "LQL-E0601");
}

#[test]
fn an_interrupted_extract_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c.vindex");
    let script = format!(
        "EXTRACT MODEL '{MODEL}' INTO '{}' ENCODING F32;",
        out.display()
    );
    let (code, err) = interrupt_after(&["-c", &script], Duration::from_millis(1500));
    if code == Some(0) {
        // It finished before the signal: then it must be whole.
        assert!(out.join("index.json").exists(), "stderr: {err}");
        return;
    }
    assert!(err.contains("interrupted"), "stderr: {err}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty() || (left.len() == 1 && out.join("index.json").exists()),
        "only a complete container may remain: {left:?}; stderr: {err}"
    );
}
