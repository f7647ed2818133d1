//! `lql bench MODEL`: prefill and decode speed of the CPU backend.

use std::process::ExitCode;

pub fn run(model: &str, threads: Option<usize>, json: bool) -> ExitCode {
    let _ = (model, threads, json);
    eprintln!("unsupported: not supported yet: lql bench");
    ExitCode::FAILURE
}
