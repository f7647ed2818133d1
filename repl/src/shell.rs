//! `Shell`: a connection plus the shell's settings (output mode, headers, NULL text,
//! widths, echo, bail, timer, output redirection), and the script runner shared by the
//! REPL, `.read`, script files, SQL arguments, `-c` and stdin.
//!
//! A script is read line by line: a line starting with `.` where no statement is pending is
//! a dot-command; other lines gather until the statements in them are complete (end with
//! `;`), then run one statement at a time, each result printed as soon as it is ready.
//! After an error the script goes on with the next statement (the error is on stderr and
//! counted for the exit code); with `bail` it stops there. A result that reports a fault
//! (`Rows::has_fault`, or a `status` column holding `FAILED`) counts like an error.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lql::{Connection, Error, Rows};

use crate::dot::{self, Flow};
use crate::progress::Spinner;
use crate::render::{render, OutputMode, RenderOptions};

/// What running some text came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything ran.
    Ok,
    /// Something failed (already reported); with `bail` the text stopped there.
    Failed,
    /// `.quit` / `.exit`.
    Quit,
}

/// `.output FILE` / `.once FILE`: results go to a temporary file beside `target`, which
/// replaces `target` (fsync, rename) when the redirection ends; a run that dies midway
/// leaves no half-written `target`.
struct Redirect {
    file: tempfile::NamedTempFile,
    target: PathBuf,
    /// `.once`: ends after the next statement's result.
    once: bool,
    /// The first write that failed (a full disk): the temporary file is then discarded
    /// and `target` is left as it was.
    failed: Option<String>,
}

pub struct Shell {
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
    /// Header row in csv (`.headers`).
    pub headers: bool,
    /// Text for NULL (`.nullvalue`; `None`: `NULL`, empty in csv).
    pub nullvalue: Option<String>,
    /// Fixed column widths in grid modes (`.width`).
    pub widths: Vec<usize>,
    /// Print each statement and dot-command before running it (`.echo`, `-echo`).
    pub echo: bool,
    /// Stop at the first error or fault (`.bail`, `-bail`).
    pub bail: bool,
    /// A person is typing (the REPL): status results always print; long statements show
    /// a spinner on stderr.
    pub interactive: bool,
    /// Errors reported so far.
    pub errors: usize,
    /// Results that reported a fault so far.
    pub faults: usize,
    /// Statements run so far (jsonl's `stmt` is this count).
    statements: usize,
    pub out: Box<dyn Write + Send>,
    pub err: Box<dyn Write + Send>,
    redirect: Option<Redirect>,
    /// Set by the live token printer (interactive sessions): text has been streamed to
    /// stderr and the line must be ended before the result is printed.
    pub streamed: Option<Arc<AtomicBool>>,
    /// Shared with the progress handler: when set, it prints nothing (JSON modes, where
    /// stderr carries the one-line JSON errors).
    pub progress_quiet: Arc<AtomicBool>,
    /// Shared with the progress handler: set while it draws a bar (the spinner hides).
    pub progress_busy: Arc<AtomicBool>,
    /// Nesting depth of `.read`, to refuse a script that reads itself forever.
    pub(crate) read_depth: usize,
    /// Standard output was closed by its reader (`lql … | head`): the run ends quietly.
    output_closed: bool,
    /// A statement was cancelled (Ctrl-C): the rest of the text it came from is skipped.
    /// The REPL clears it before each line it reads.
    pub cancelled: bool,
}

impl Shell {
    pub fn new(conn: Connection, mode: OutputMode) -> Self {
        Shell {
            conn,
            mode,
            timer: false,
            color: false,
            width: None,
            track_terminal_width: false,
            headers: true,
            nullvalue: None,
            widths: Vec::new(),
            echo: false,
            bail: false,
            interactive: false,
            errors: 0,
            faults: 0,
            statements: 0,
            streamed: None,
            out: Box::new(std::io::stdout()),
            err: Box::new(std::io::stderr()),
            redirect: None,
            progress_quiet: Arc::new(AtomicBool::new(false)),
            progress_busy: Arc::new(AtomicBool::new(false)),
            read_depth: 0,
            output_closed: false,
            cancelled: false,
        }
    }

    /// Whether anything failed or reported a fault (the exit code is then 1).
    pub fn failed(&self) -> bool {
        self.errors > 0 || self.faults > 0
    }

    /// Runs a script (statements and dot-commands). A UTF-8 byte order mark at the start
    /// is skipped. Goes on after a failure unless `bail` is set.
    pub fn run_script(&mut self, text: &str, source_name: &str) -> Outcome {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut result = Outcome::Ok;
        let mut pos = 0usize;
        let mut pending: Option<usize> = None;
        for line in text.split_inclusive('\n') {
            if self.output_closed {
                return Outcome::Quit;
            }
            if self.cancelled {
                return Outcome::Failed;
            }
            let line_start = pos;
            pos += line.len();
            if pending.is_none() {
                let t = line.trim();
                if t.is_empty() || t.starts_with("--") {
                    continue;
                }
                // `HELP [statement]` on a line of its own needs no `;`, as a dot-command.
                if help_request(t).is_some() && !t.contains(';') {
                    let lo = line_start + (line.len() - line.trim_start().len());
                    if self.run_one(text, lo..lo + t.len(), source_name) == Outcome::Failed {
                        if self.bail {
                            return Outcome::Failed;
                        }
                        result = Outcome::Failed;
                    }
                    continue;
                }
                if t.starts_with('.') {
                    if self.echo {
                        self.print(&format!("{t}\n"));
                    }
                    match self.run_dot(t) {
                        Outcome::Ok => {}
                        Outcome::Quit => return Outcome::Quit,
                        Outcome::Failed if self.bail => return Outcome::Failed,
                        Outcome::Failed => result = Outcome::Failed,
                    }
                    continue;
                }
                pending = Some(line_start);
            }
            if let Some(start) = pending {
                if lql::is_complete(&text[start..pos]) {
                    pending = None;
                    if self.run_statements(text, start..pos, source_name) == Outcome::Failed {
                        if self.bail {
                            return Outcome::Failed;
                        }
                        result = Outcome::Failed;
                    }
                }
            }
        }
        if let Some(start) = pending.filter(|_| !self.cancelled) {
            // The last statement may omit its `;`.
            if self.run_statements(text, start..text.len(), source_name) == Outcome::Failed {
                result = Outcome::Failed;
            }
        }
        if self.output_closed {
            return Outcome::Quit;
        }
        result
    }

    /// Runs the statements in `text[range]` one at a time, printing each result; errors
    /// are rendered against the whole `text` so line numbers are the script's.
    fn run_statements(
        &mut self,
        text: &str,
        range: std::ops::Range<usize>,
        source_name: &str,
    ) -> Outcome {
        let mut outcome = Outcome::Ok;
        for piece in lql::split_statements(&text[range.clone()]) {
            if self.output_closed || self.cancelled {
                break;
            }
            let piece = (range.start + piece.start)..(range.start + piece.end);
            if self.run_one(text, piece, source_name) == Outcome::Failed {
                outcome = Outcome::Failed;
                if self.bail {
                    break;
                }
            }
        }
        outcome
    }

    /// Runs one statement, `text[range]`.
    fn run_one(&mut self, text: &str, range: std::ops::Range<usize>, source_name: &str) -> Outcome {
        let stmt = &text[range.clone()];
        // `HELP [statement]` is the shell's, as in psql: the statement's grammar and notes.
        if let Some(rest) = help_request(stmt) {
            return match crate::dot::statement_help(rest) {
                Ok(help) => {
                    self.print(&help);
                    Outcome::Ok
                }
                Err(msg) => {
                    self.report_message(&msg);
                    Outcome::Failed
                }
            };
        }
        self.statements += 1;
        if self.echo {
            self.print(&format!("{};\n", stmt.trim_end().trim_end_matches(';')));
        }
        if self.track_terminal_width {
            if let Some(w) = comfy_table::Table::new().width() {
                self.width = Some(w);
            }
        }
        self.progress_quiet
            .store(self.mode.json_errors(), Ordering::SeqCst);
        let started = Instant::now();
        let cpu_before = cpu_times();
        let result = {
            let _spinner = self.interactive.then(|| {
                let mut quiet = vec![self.progress_busy.clone()];
                quiet.extend(self.streamed.clone());
                Spinner::start(Duration::from_secs(1), quiet)
            });
            self.conn.execute_batch(stmt)
        };
        self.end_stream();
        match result {
            Ok(results) => {
                let faults = self.faults;
                for r in results {
                    self.show(&r.text, &r.rows);
                }
                if self.timer {
                    self.report_time(started, cpu_before);
                }
                if self.faults > faults {
                    Outcome::Failed
                } else {
                    Outcome::Ok
                }
            }
            Err(e) => {
                self.cancelled |= e.kind == lql::ErrorKind::Interrupted;
                // What an interrupted statement made before it stopped (GENERATE's text so
                // far) is shown in every mode, then the error.
                if let Some(rows) = e.partial_rows() {
                    self.show(stmt, rows);
                }
                if self.timer {
                    self.report_time(started, cpu_before);
                }
                let e = e.offset_spans(range.start);
                self.report_error(&e, source_name, text);
                Outcome::Failed
            }
        }
    }

    /// Prints one statement's result (unless it is a status the mode keeps quiet) and
    /// counts a fault it reports.
    fn show(&mut self, stmt: &str, rows: &Rows) {
        if rows.has_fault() || status_failed(rows) {
            self.faults += 1;
        }
        let quiet_status =
            !self.interactive && !self.echo && self.mode.is_machine() && is_use(stmt);
        if !quiet_status {
            let s = render(self.mode, stmt, rows, &self.render_options());
            self.print(&s);
        }
        self.end_once();
    }

    /// Shows the result of `.open` like a `USE`'s.
    pub fn show_bind(&mut self, label: &str, rows: &Rows) {
        self.statements += 1;
        let quiet = !self.interactive && !self.echo && self.mode.is_machine();
        if !quiet {
            let s = render(self.mode, label, rows, &self.render_options());
            self.print(&s);
        }
    }

    fn render_options(&self) -> RenderOptions<'_> {
        RenderOptions {
            width: self.width,
            headers: self.headers,
            nullvalue: self.nullvalue.as_deref(),
            widths: &self.widths,
            index: self.statements,
        }
    }

    /// Ends the live-generation line on stderr, if text was streamed.
    fn end_stream(&mut self) {
        if self
            .streamed
            .as_ref()
            .is_some_and(|f| f.swap(false, Ordering::SeqCst))
        {
            let _ = self.err.write_all(b"\n");
            let _ = self.err.flush();
        }
    }

    /// `.timer`: sqlite3's line, the wall time and the process's user and system CPU time
    /// the statement took (every thread counted), on stderr.
    fn report_time(&mut self, started: Instant, cpu_before: (f64, f64)) {
        let real = started.elapsed().as_secs_f64();
        let (user, sys) = cpu_times();
        let _ = writeln!(
            self.err,
            "Run Time: real {real:.3} user {:.6} sys {:.6}",
            (user - cpu_before.0).max(0.0),
            (sys - cpu_before.1).max(0.0)
        );
    }

    /// Prints an error: one JSON line in the JSON modes, an ariadne report otherwise.
    pub fn report_error(&mut self, e: &Error, source_name: &str, text: &str) {
        self.errors += 1;
        let s = if self.mode.json_errors() {
            format!("{}\n", e.to_json())
        } else {
            // The message may quote text from a file (an edge's text): no escape sequence
            // of its own reaches the terminal.
            let mut shown = e.clone();
            shown.message = crate::render::terminal_safe(&e.message).into_owned();
            shown.render(source_name, text, self.color)
        };
        let _ = self.err.write_all(s.as_bytes());
        let _ = self.err.flush();
    }

    /// Prints a message about a dot-command that went wrong.
    pub fn report_message(&mut self, msg: &str) {
        self.errors += 1;
        let s = if self.mode.json_errors() {
            format!(
                "{}\n",
                serde_json::json!({"error": {"kind": "semantic", "code": lql::Code::Semantic.as_str(), "message": msg, "span": null}})
            )
        } else {
            format!("Error: {}\n", crate::render::terminal_safe(msg))
        };
        let _ = self.err.write_all(s.as_bytes());
        let _ = self.err.flush();
    }

    /// Runs one dot-command line.
    pub fn run_dot(&mut self, line: &str) -> Outcome {
        match dot::run(self, line) {
            Ok(Flow::Continue) => Outcome::Ok,
            Ok(Flow::Quit) => Outcome::Quit,
            // Reported where it happened (a statement or a nested script).
            Ok(Flow::Failed) => Outcome::Failed,
            Err(msg) => {
                self.report_message(&msg);
                Outcome::Failed
            }
        }
    }

    /// Writes text to the output (the redirection file while one is active).
    pub fn print(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        let result = match &mut self.redirect {
            Some(r) if r.failed.is_some() => Ok(()),
            Some(r) => r.file.write_all(s.as_bytes()).inspect_err(|e| {
                r.failed = Some(e.to_string());
            }),
            None => self
                .out
                .write_all(s.as_bytes())
                .and_then(|_| self.out.flush()),
        };
        if let Err(e) = result {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                // A closed pipe (`lql … | head`) ends the run quietly.
                self.output_closed = true;
            } else {
                self.report_message(&format!("writing output: {e}"));
            }
        }
    }

    /// Sends results to `path` (`.output FILE`, or `.once FILE` for the next result only);
    /// `None` returns them to standard output.
    pub fn redirect(&mut self, path: Option<&str>, once: bool) -> Result<(), String> {
        self.end_redirect()?;
        let Some(path) = path else { return Ok(()) };
        let target = PathBuf::from(path);
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = target
            .file_name()
            .ok_or_else(|| format!("{path}: not a file name"))?
            .to_string_lossy()
            .into_owned();
        let prefix = format!(".{name}.");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp");
        // Mode 0666 less the umask, like any new file (not the temporary file's 0600).
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o666));
        }
        let file = builder
            .tempfile_in(&dir)
            .map_err(|e| format!("{path}: cannot create a file in {}: {e}", dir.display()))?;
        self.redirect = Some(Redirect {
            file,
            target,
            once,
            failed: None,
        });
        Ok(())
    }

    /// Ends `.once` after a result.
    fn end_once(&mut self) {
        if self.redirect.as_ref().is_some_and(|r| r.once) {
            if let Err(msg) = self.end_redirect() {
                self.report_message(&msg);
            }
        }
    }

    /// Finishes the active redirection: flush, fsync, rename over the target (unless a
    /// write failed: then the target is left as it was).
    pub fn end_redirect(&mut self) -> Result<(), String> {
        let Some(mut r) = self.redirect.take() else {
            return Ok(());
        };
        let shown = r.target.display().to_string();
        if let Some(e) = &r.failed {
            // Dropping the temporary file removes it; the target keeps its old content.
            return Err(format!("{shown}: not written ({e}); the file is unchanged"));
        }
        r.file
            .flush()
            .and_then(|_| r.file.as_file().sync_all())
            .map_err(|e| format!("{shown}: not written ({e}); the file is unchanged"))?;
        set_output_mode(r.file.as_file(), &r.target);
        r.file
            .persist(&r.target)
            .map_err(|e| format!("{shown}: {}", e.error))?;
        sync_dir(&r.target);
        Ok(())
    }
}

/// An existing target keeps its mode (a new one has 0666 less the umask from creation).
fn set_output_mode(file: &std::fs::File, target: &std::path::Path) {
    if let Ok(m) = std::fs::metadata(target) {
        let _ = file.set_permissions(m.permissions());
    }
}

/// The statement name after a leading `HELP` keyword (`Some("")` for a bare `HELP`).
fn help_request(stmt: &str) -> Option<&str> {
    let t = stmt.trim().trim_end_matches(';').trim_end();
    let head = t.get(..4)?;
    if !head.eq_ignore_ascii_case("HELP") {
        return None;
    }
    let rest = &t[4..];
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then(|| rest.trim())
}

/// The process's (user, system) CPU seconds so far (zeros where they cannot be read).
fn cpu_times() -> (f64, f64) {
    #[cfg(unix)]
    {
        // SAFETY: getrusage writes one rusage struct into the zeroed value given.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } == 0 {
            let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            return (secs(u.ru_utime), secs(u.ru_stime));
        }
    }
    (0.0, 0.0)
}

/// Makes a rename durable by syncing the folder (best effort: not every platform can).
fn sync_dir(target: &Path) {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Whether a statement is a `USE` (its result is a status, not data).
fn is_use(stmt: &str) -> bool {
    stmt.split_whitespace()
        .next()
        .is_some_and(|w| w.eq_ignore_ascii_case("USE"))
}

/// The fallback fault signal: a `status` column holding `FAILED` (VERIFY's rows).
fn status_failed(rows: &Rows) -> bool {
    rows.column_index("status").is_some_and(|i| {
        rows.rows
            .iter()
            .any(|r| r.get(i).and_then(|v| v.as_str()) == Some("FAILED"))
    })
}

/// For the shell's tests: a shell on an in-memory connection whose output and error text
/// can be read back.
#[cfg(test)]
pub(crate) mod test_support {
    use super::{OutputMode, Shell};
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    pub(crate) struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Buf {
        pub(crate) fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// A shell printing in `mode`, with its output and its errors captured.
    pub(crate) fn captured(mode: OutputMode) -> (Shell, Buf, Buf) {
        let conn = lql::Connection::open_in_memory().unwrap();
        let mut s = Shell::new(conn, mode);
        let (out, err) = (Buf::default(), Buf::default());
        s.out = Box::new(out.clone());
        s.err = Box::new(err.clone());
        (s, out, err)
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{captured, Buf};
    use super::*;
    use lql::{Column, Value, ValueType};

    fn session() -> (Shell, Buf, Buf) {
        captured(OutputMode::Csv)
    }

    fn status_rows(status: &str) -> Rows {
        let mut r = Rows::new(vec![Column::new("status", ValueType::Text)]);
        r.push(vec![Value::from(status)]);
        r
    }

    #[test]
    fn faults_count_from_the_flag_or_a_failed_status() {
        let (mut s, out, _) = session();
        s.show("VERIFY", &status_rows("ok"));
        assert!(!s.failed());
        s.show("VERIFY", &status_rows("FAILED"));
        assert_eq!(s.faults, 1);
        let mut flagged = status_rows("ok");
        flagged.fault = true;
        assert!(flagged.has_fault());
        s.show("CHECK", &flagged);
        assert_eq!(s.faults, 2);
        assert!(s.failed());
        assert_eq!(out.text().matches("status\n").count(), 3);
    }

    #[test]
    fn errors_continue_unless_bail() {
        let (mut s, out, err) = session();
        assert_eq!(
            s.run_script("FROB;\n.mode csv\nSHOW MODELS;\nFROB;\n", "t"),
            Outcome::Failed
        );
        assert_eq!(s.errors, 2);
        assert!(out.text().starts_with("name,"), "{}", out.text());
        assert_eq!(err.text().matches("unknown keyword").count(), 2);
        let (mut s, out, _) = session();
        s.bail = true;
        assert_eq!(s.run_script("FROB;\nSHOW MODELS;\n", "t"), Outcome::Failed);
        assert_eq!(s.errors, 1);
        assert_eq!(out.text(), "");
    }

    #[test]
    fn use_is_recognised() {
        assert!(is_use("USE MODEL 'x'"));
        assert!(is_use("use 'x'"));
        assert!(!is_use("USER"));
        assert!(!is_use("STATS"));
    }

    #[test]
    fn output_files_appear_whole_on_rename() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("r.csv");
        let (mut s, out, _) = session();
        s.redirect(Some(target.to_str().unwrap()), false).unwrap();
        s.print("a,b\n");
        // Nothing at the target until the redirection ends.
        assert!(!target.exists());
        s.redirect(None, false).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "a,b\n");
        s.print("back\n");
        assert_eq!(out.text(), "back\n");
        let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(leftovers, 1);
        assert!(s
            .redirect(Some("/nonexistent-dir/x.csv"), true)
            .unwrap_err()
            .contains("/nonexistent-dir"));
    }

    /// A write that fails (a full disk) leaves the existing file as it was, and no
    /// temporary file behind; a written file keeps the target's mode (not the temporary
    /// file's 0600).
    #[cfg(unix)]
    #[test]
    fn a_failed_write_leaves_the_target_unchanged() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("r.csv");
        std::fs::write(&target, "old\n").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (mut s, _, err) = session();
        s.redirect(Some(target.to_str().unwrap()), false).unwrap();
        // The temporary file, reopened read-only: every write fails as on a full disk.
        let r = s.redirect.as_mut().unwrap();
        let (_, path) =
            std::mem::replace(&mut r.file, tempfile::NamedTempFile::new().unwrap()).into_parts();
        let read_only = std::fs::File::open(&path).unwrap();
        r.file = tempfile::NamedTempFile::from_parts(read_only, path);
        s.print("a,b\n");
        assert!(err.text().contains("writing output"), "{}", err.text());
        let e = s.redirect(None, false).unwrap_err();
        assert!(e.contains("unchanged"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "old\n");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        s.redirect(Some(target.to_str().unwrap()), true).unwrap();
        s.print("new\n");
        s.redirect(None, false).unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new\n");
        let mode = std::fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
    }
}
