//! Running the `lql` binary from tests: arguments, optional stdin, captured output.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const MODEL: &str = "smollm2-135m-instruct";

/// Runs `lql` with `args` (stdin empty) in `dir` (or here).
pub fn lql_in(dir: Option<&Path>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lql"));
    c.args(args).env("NO_COLOR", "1").stdin(Stdio::null());
    if let Some(d) = dir {
        c.current_dir(d);
    }
    c.output().expect("run lql")
}

pub fn lql(args: &[&str]) -> Output {
    lql_in(None, args)
}

/// Runs `lql` with `input` on stdin.
pub fn lql_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lql"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lql");
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().expect("wait for lql")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The cached default model file (the catalogue's cache: `$LQL_HOME/models` or
/// `~/.cache/lql/models`); the tests that need it run `lql` by name first, which fetches it.
pub fn model_file() -> PathBuf {
    let home = std::env::var_os("LQL_HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/lql")
        });
    let p = home.join("models").join(format!("{MODEL}.gguf"));
    if !p.is_file() {
        let o = lql(&["-c", &format!("USE MODEL '{MODEL}';")]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    p
}

/// A recursive copy of a folder (a container or model fixture a test may change).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}
