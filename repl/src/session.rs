//! `Session`: a connection plus the shell's settings (output mode, timer), and the script
//! runner shared by the REPL, `.read`, script files, `-c` and stdin.
//!
//! A script is read line by line: a line starting with `.` where no statement is pending is
//! a dot-command; other lines gather until the statements in them are complete (end with
//! `;`), then run one at a time, each result printed as soon as it is ready.

use std::io::Write;
use std::time::Instant;

use lql::{Connection, Error};

use crate::dot::{self, Flow};
use crate::render::{render, OutputMode};

/// What running some text came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything ran.
    Ok,
    /// A statement or dot-command failed (the error has been printed).
    Failed,
    /// `.quit` / `.exit`.
    Quit,
}

pub struct Session {
    pub conn: Connection,
    pub mode: OutputMode,
    pub timer: bool,
    /// Colour in rendered errors.
    pub color: bool,
    /// Table width (`None`: no fitting).
    pub width: Option<u16>,
    /// Re-read the terminal's width before each statement (stdout is a terminal), so
    /// tables follow a resized window.
    pub track_terminal_width: bool,
    pub out: Box<dyn Write + Send>,
    pub err: Box<dyn Write + Send>,
    /// Set by the live token printer (interactive sessions): text has been streamed to
    /// stderr and the line must be ended before the result is printed.
    pub streamed: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Nesting depth of `.read`, to refuse a script that reads itself forever.
    pub(crate) read_depth: usize,
}

impl Session {
    pub fn new(conn: Connection, mode: OutputMode) -> Self {
        Session {
            conn,
            mode,
            timer: false,
            color: false,
            width: None,
            track_terminal_width: false,
            streamed: None,
            out: Box::new(std::io::stdout()),
            err: Box::new(std::io::stderr()),
            read_depth: 0,
        }
    }

    /// Runs a script (statements and dot-commands); stops at the first failure.
    pub fn run_script(&mut self, text: &str, source_name: &str) -> Outcome {
        let mut pos = 0usize;
        let mut pending: Option<usize> = None;
        for line in text.split_inclusive('\n') {
            let line_start = pos;
            pos += line.len();
            if pending.is_none() {
                let t = line.trim();
                if t.is_empty() || t.starts_with("--") {
                    continue;
                }
                if t.starts_with('.') {
                    match self.run_dot(t) {
                        Outcome::Ok => continue,
                        other => return other,
                    }
                }
                pending = Some(line_start);
            }
            if let Some(start) = pending {
                if lql::is_complete(&text[start..pos]) {
                    pending = None;
                    if self.run_statements(text, start..pos, source_name) == Outcome::Failed {
                        return Outcome::Failed;
                    }
                }
            }
        }
        if let Some(start) = pending {
            // The last statement may omit its `;`.
            return self.run_statements(text, start..text.len(), source_name);
        }
        Outcome::Ok
    }

    /// Runs the statements in `text[range]`, printing each result; errors are rendered
    /// against the whole `text` so line numbers are the script's.
    fn run_statements(
        &mut self,
        text: &str,
        range: std::ops::Range<usize>,
        source_name: &str,
    ) -> Outcome {
        let chunk = &text[range.clone()];
        let mode = self.mode;
        if self.track_terminal_width {
            if let Some(w) = comfy_table::Table::new().width() {
                self.width = Some(w);
            }
        }
        let width = self.width;
        let timer = self.timer;
        let out = &mut self.out;
        let err = &mut self.err;
        let streamed = self.streamed.clone();
        let end_stream = move |err: &mut Box<dyn Write + Send>| {
            if streamed
                .as_ref()
                .is_some_and(|f| f.swap(false, std::sync::atomic::Ordering::SeqCst))
            {
                let _ = err.write_all(b"\n");
                let _ = err.flush();
            }
        };
        let mut started = Instant::now();
        let result = self.conn.execute_each(chunk, |r| {
            end_stream(err);
            let s = render(mode, &r.text, &r.rows, width);
            // A closed pipe (`lql … | head`) ends output quietly.
            out.write_all(s.as_bytes())
                .and_then(|_| out.flush())
                .map_err(|e| Error::io(format!("writing output: {e}")))?;
            if timer {
                let _ = writeln!(err, "Run Time: {:.3}s", started.elapsed().as_secs_f64());
                started = Instant::now();
            }
            Ok(())
        });
        match result {
            Ok(()) => Outcome::Ok,
            Err(e) => {
                end_stream(&mut self.err);
                let e = e.offset_spans(range.start);
                self.report_error(&e, source_name, text);
                Outcome::Failed
            }
        }
    }

    /// Prints an error: one JSON line in the JSON modes, an ariadne report otherwise.
    pub fn report_error(&mut self, e: &Error, source_name: &str, text: &str) {
        let s = if self.mode.json_errors() {
            format!("{}\n", e.to_json())
        } else {
            e.render(source_name, text, self.color)
        };
        let _ = self.err.write_all(s.as_bytes());
        let _ = self.err.flush();
    }

    /// Prints a message about a dot-command that went wrong.
    pub fn report_message(&mut self, msg: &str) {
        let s = if self.mode.json_errors() {
            format!(
                "{}\n",
                serde_json::json!({"error": {"kind": "semantic", "code": "LQL-E0201", "message": msg, "span": null}})
            )
        } else {
            format!("Error: {msg}\n")
        };
        let _ = self.err.write_all(s.as_bytes());
        let _ = self.err.flush();
    }

    /// Runs one dot-command line.
    pub fn run_dot(&mut self, line: &str) -> Outcome {
        match dot::run(self, line) {
            Ok(Flow::Continue) => Outcome::Ok,
            Ok(Flow::Quit) => Outcome::Quit,
            Err(msg) => {
                self.report_message(&msg);
                Outcome::Failed
            }
        }
    }

    /// Writes text to the output.
    pub fn print(&mut self, s: &str) {
        let _ = self.out.write_all(s.as_bytes());
        let _ = self.out.flush();
    }
}
