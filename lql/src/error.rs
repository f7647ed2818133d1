//! `lql::Error`: every failure an embedder or the REPL sees, as data.
//!
//! Each crate of the workspace has its own error enum; they are gathered here into one
//! [`Error`]: a coarse [`ErrorKind`], a stable [`Error::code`] (`LQL-E0201`; the registry is
//! [`Code`]), a message, the byte span of the statement text that caused it, secondary
//! labels and help lines — the one diagnostic shape that syntax errors (grammar) and plan
//! errors (planner) both convert to — and the lower layer's error as [`std::error::Error::source`].
//! Rendering happens only at the edge: [`Error::render`] draws an ariadne report with a
//! caret under the span, and [`Error::to_json`] gives the machine-readable form of the JSON
//! output contract (with `"code"`).

use std::fmt;
use std::ops::Range;

pub use crate::code::Code;

/// What kind of failure an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The text does not parse (only the grammar produces this kind).
    Syntax,
    /// The statement parses but means nothing here: unknown layer, no model bound, …
    Semantic,
    /// A statement or feature that is not built (yet) or not available for this model.
    Unsupported,
    /// Reading or writing a file failed.
    Io,
    /// A malformed, hostile or inconsistent file.
    Format,
    /// The statement was cancelled through an interrupt handle.
    Interrupted,
    /// A bug in LQL.
    Internal,
}

impl ErrorKind {
    /// The lower-case name used in the JSON contract.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Syntax => "syntax",
            ErrorKind::Semantic => "semantic",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Io => "io",
            ErrorKind::Format => "format",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::Internal => "internal",
        }
    }

    /// The title of a rendered report.
    fn title(self) -> &'static str {
        match self {
            ErrorKind::Syntax => "syntax error",
            ErrorKind::Semantic => "semantic error",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Io => "I/O error",
            ErrorKind::Format => "format error",
            ErrorKind::Interrupted => "interrupted",
            ErrorKind::Internal => "internal error (this is a bug)",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A secondary span with a message ("declared here", "this layer", …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub span: Range<usize>,
    pub message: String,
}

/// An LQL error. `span` is a byte range in the text given to `execute`/`prepare`.
#[derive(Debug, Clone)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub span: Option<Range<usize>>,
    /// Secondary spans with messages. A label on exactly the primary span gives the text
    /// written under its caret (otherwise "here").
    pub labels: Vec<Label>,
    pub help: Vec<String>,
    /// A specific code and the lower layer's error, when there are (boxed: errors travel in
    /// every `Result` and stay small).
    extra: Option<Box<Extra>>,
}

#[derive(Debug, Clone, Default)]
struct Extra {
    /// A code more specific than the kind's default.
    code: Option<Code>,
    /// The lower layer's error, when there is one.
    source: Option<std::sync::Arc<dyn std::error::Error + Send + Sync>>,
    /// What an interrupted statement produced before it stopped (GENERATE's text so far).
    partial: Option<Box<crate::rows::Rows>>,
}

impl PartialEq for Error {
    fn eq(&self, o: &Self) -> bool {
        self.kind == o.kind
            && self.message == o.message
            && self.span == o.span
            && self.labels == o.labels
            && self.help == o.help
            && self.code() == o.code()
    }
}

impl Eq for Error {}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            span: None,
            labels: Vec::new(),
            help: Vec::new(),
            extra: None,
        }
    }

    /// The stable code of this error (`LQL-E0201`, …; every code is in [`Code::ALL`]).
    pub fn code(&self) -> Code {
        self.extra
            .as_ref()
            .and_then(|x| x.code)
            .unwrap_or(Code::of_kind(self.kind))
    }

    /// Sets a code more specific than the kind's default.
    pub fn with_code(mut self, code: Code) -> Self {
        self.extra.get_or_insert_with(Default::default).code = Some(code);
        self
    }

    /// The rows an interrupted statement produced before it stopped: an interrupted
    /// GENERATE keeps its text so far, with `finish_reason = "interrupted"`.
    ///
    /// ```no_run
    /// # fn main() -> lql::Result<()> {
    /// let conn = lql::Connection::open("smollm2-135m-instruct")?;
    /// let stop = conn.interrupt_handle();
    /// std::thread::spawn(move || {
    ///     std::thread::sleep(std::time::Duration::from_millis(500));
    ///     stop.interrupt();
    /// });
    /// match conn.execute("GENERATE 'Once upon a time' MAX 4000") {
    ///     Err(e) if e.kind == lql::ErrorKind::Interrupted => {
    ///         let rows = e.partial_rows().expect("the text so far");
    ///         let reason: String = rows.row(0).unwrap().get("finish_reason")?;
    ///         assert_eq!(reason, "interrupted");
    ///     }
    ///     other => { other?; }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn partial_rows(&self) -> Option<&crate::rows::Rows> {
        self.extra.as_ref().and_then(|x| x.partial.as_deref())
    }

    /// Attaches the rows produced before an interruption.
    pub(crate) fn with_partial_rows(mut self, rows: crate::rows::Rows) -> Self {
        self.extra.get_or_insert_with(Default::default).partial = Some(Box::new(rows));
        self
    }

    /// Keeps `e` as this error's [`std::error::Error::source`].
    pub fn with_source(mut self, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.extra.get_or_insert_with(Default::default).source = Some(std::sync::Arc::new(e));
        self
    }

    pub fn semantic(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Semantic, message)
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unsupported, message)
    }

    /// The error for a statement the engine does not run yet.
    pub fn not_supported_yet(statement: &str) -> Self {
        Error::new(
            ErrorKind::Unsupported,
            format!("not supported yet: {statement}"),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Internal, message)
    }

    pub fn io(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Io, message)
    }

    pub fn interrupted() -> Self {
        Error::new(ErrorKind::Interrupted, "interrupted")
    }

    /// Sets the primary span.
    pub fn with_span(mut self, span: Range<usize>) -> Self {
        self.span = Some(span);
        self
    }

    /// Sets the primary span if none is set yet (used to attach a statement's span to
    /// errors raised without one).
    pub fn or_span(mut self, span: Range<usize>) -> Self {
        if self.span.is_none() {
            self.span = Some(span);
        }
        self
    }

    /// Shifts every span by `offset` bytes (a statement's spans → the script's).
    pub fn offset_spans(mut self, offset: usize) -> Self {
        if let Some(s) = &mut self.span {
            *s = s.start + offset..s.end + offset;
        }
        for l in &mut self.labels {
            l.span = l.span.start + offset..l.span.end + offset;
        }
        self
    }

    /// The text under the caret of the primary span (needs the span set first).
    pub fn with_span_label(mut self, label: impl Into<String>) -> Self {
        if let Some(span) = self.span.clone() {
            self.labels.push(Label {
                span,
                message: label.into(),
            });
        }
        self
    }

    pub fn with_label(mut self, span: Range<usize>, message: impl Into<String>) -> Self {
        self.labels.push(Label {
            span,
            message: message.into(),
        });
        self
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help.push(help.into());
        self
    }

    /// An ariadne report: the kind and message, then the source line(s) with a caret under
    /// the span and each label, then the help lines. Spans outside `source_text` (or not on
    /// character boundaries) are left out rather than drawn wrongly.
    pub fn render(&self, source_name: &str, source_text: &str, color: bool) -> String {
        use ariadne::{Color, Config, IndexType, Label as ALabel, Report, ReportKind, Source};

        let valid = |r: &Range<usize>| {
            r.start <= r.end
                && r.end <= source_text.len()
                && source_text.is_char_boundary(r.start)
                && source_text.is_char_boundary(r.end)
        };
        // A zero-width span at the end of the text still gets a visible caret.
        let widen = |r: &Range<usize>| {
            if r.start == r.end {
                let end = source_text[r.start..]
                    .chars()
                    .next()
                    .map_or(r.end, |c| r.end + c.len_utf8());
                r.start..end
            } else {
                r.clone()
            }
        };
        let name = source_name.to_string();
        let primary = self.span.as_ref().filter(|r| valid(r)).map(widen);
        let anchor = primary.clone().unwrap_or(0..0);
        let mut report = Report::build(ReportKind::Error, (name.clone(), anchor))
            .with_config(
                Config::default()
                    .with_color(color)
                    .with_index_type(IndexType::Byte),
            )
            .with_code(self.code().as_str())
            .with_message(&self.message);
        let primary_text = self
            .labels
            .iter()
            .find(|l| Some(&l.span) == self.span.as_ref())
            .map_or("here", |l| l.message.as_str());
        if let Some(span) = primary {
            report = report.with_label(
                ALabel::new((name.clone(), span))
                    .with_message(primary_text)
                    .with_color(Color::Red),
            );
        }
        let secondary = self
            .labels
            .iter()
            .filter(|l| Some(&l.span) != self.span.as_ref() && valid(&l.span));
        for l in secondary {
            report = report.with_label(
                ALabel::new((name.clone(), widen(&l.span)))
                    .with_message(&l.message)
                    .with_color(Color::Blue),
            );
        }
        for h in &self.help {
            report = report.with_help(h);
        }
        let mut out = Vec::new();
        let written = report
            .finish()
            .write((name, Source::from(source_text)), &mut out);
        match written {
            Ok(()) => String::from_utf8_lossy(&out).into_owned(),
            Err(_) => format!("{}: {}\n", self.kind.title(), self.message),
        }
    }

    /// The JSON form: `{"error": {"kind", "code", "message", "span": [start, end] | null,
    /// "labels": [{"span", "message"}], "help": [...]}}`.
    pub fn to_json(&self) -> serde_json::Value {
        let span = |r: &Range<usize>| serde_json::json!([r.start, r.end]);
        serde_json::json!({
            "error": {
                "kind": self.kind.name(),
                "code": self.code(),
                "message": self.message,
                "span": self.span.as_ref().map(span),
                "labels": self.labels.iter()
                    .map(|l| serde_json::json!({"span": span(&l.span), "message": l.message}))
                    .collect::<Vec<_>>(),
                "help": self.help,
            }
        })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.title(), self.message)?;
        if let Some(s) = &self.span {
            write!(f, " (at bytes {}..{})", s.start, s.end)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.extra
            .as_ref()
            .and_then(|x| x.source.as_deref())
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::io(e.to_string()).with_source(e)
    }
}

/// A diagnostic from the grammar or the planner: the message at its span, the labels at
/// theirs, the help line if any.
fn spanned(
    kind: ErrorKind,
    message: String,
    span: lql_grammar::Span,
    labels: Vec<(lql_grammar::Span, String)>,
    help: Option<String>,
) -> Error {
    Error {
        kind,
        message,
        span: Some(span.range()),
        labels: labels
            .into_iter()
            .map(|(span, message)| Label {
                span: span.range(),
                message,
            })
            .collect(),
        help: help.into_iter().collect(),
        extra: None,
    }
}

impl From<lql_grammar::SyntaxError> for Error {
    fn from(e: lql_grammar::SyntaxError) -> Self {
        // A FROM name that is no table parses as a name: it is an unknown table, not a
        // spelling error of the language.
        if e.unknown == Some("table") {
            return spanned(ErrorKind::Semantic, e.message, e.span, e.labels, e.help)
                .with_code(Code::UnknownTable);
        }
        spanned(ErrorKind::Syntax, e.message, e.span, e.labels, e.help)
    }
}

impl From<lql_planner::PlanError> for Error {
    fn from(e: lql_planner::PlanError) -> Self {
        use lql_planner::PlanErrorCode as P;
        let kind = match e.kind {
            lql_planner::PlanErrorKind::Semantic => ErrorKind::Semantic,
            lql_planner::PlanErrorKind::Unsupported => ErrorKind::Unsupported,
        };
        let code = e.code.map(|c| match c {
            P::NoModel => Code::NoModel,
            P::UnknownColumn => Code::UnknownColumn,
            P::UnknownTable => Code::UnknownTable,
            P::WrongType => Code::WrongType,
            P::OutOfRange => Code::OutOfRange,
            _ => Code::Semantic,
        });
        let err = spanned(kind, e.message, e.span, e.labels, e.help);
        match code {
            Some(c) => err.with_code(c),
            None => err,
        }
    }
}

impl From<lql_storage::StorageError> for Error {
    fn from(e: lql_storage::StorageError) -> Self {
        use lql_storage::StorageError as S;
        if let S::Interrupted { what } = &e {
            let message = format!("interrupted while reading {what}");
            return Error::new(ErrorKind::Interrupted, message).with_source(e);
        }
        let kind = match &e {
            S::Io { .. } => ErrorKind::Io,
            S::Format { .. } | S::Tensor { .. } | S::Invalid(_) => ErrorKind::Format,
            S::Catalogue { .. } | S::Fetch { .. } => ErrorKind::Io,
            S::Unsupported(_) => ErrorKind::Unsupported,
            S::MissingOperand { .. } => ErrorKind::Semantic,
            S::Internal(_) => ErrorKind::Internal,
            _ => ErrorKind::Format,
        };
        let changed = matches!(e, S::Changed { .. });
        let err = Error::new(kind, e.to_string()).with_source(e);
        if changed {
            err.with_code(crate::Code::ModelChanged)
        } else {
            err
        }
    }
}

impl From<lql_exec::ExecError> for Error {
    /// One mapping for everything the executor refuses: running, browsing, tracing and
    /// tokenizing. The kind says whose fault it is: the statement's (semantic: what it asks
    /// does not fit the bound model), the file's (format: the model's own data is
    /// inconsistent), the platform's (io), or what is not built (unsupported).
    fn from(e: lql_exec::ExecError) -> Self {
        use lql_exec::ExecError as X;
        let e = match e {
            X::Storage(s) => return s.into(),
            X::Cancelled => return Error::interrupted(),
            other => other,
        };
        let base = match &e {
            X::MissingOperand { .. }
            | X::EmptyPrompt
            | X::ContextOverflow { .. }
            | X::TokenOutOfRange { .. }
            | X::LayerOutOfRange { .. }
            | X::EmptyLayerRange { .. }
            | X::EmptyInput(_)
            | X::Invalid(_)
            | X::InvalidOption(_)
            | X::Grammar { .. }
            | X::NoTokenizer
            | X::TokenizerLibrary(_) => Error::semantic(e.to_string()),
            X::Shape { .. }
            | X::Surface(_)
            | X::TraceFormat { .. }
            | X::InvalidVocab { .. }
            | X::TokenizerJson(_) => Error::new(ErrorKind::Format, e.to_string()),
            X::Unsupported(_)
            | X::NotExecutable { .. }
            | X::UnknownTokenizerModel(_)
            | X::UnknownPreTokenizer(_) => Error::unsupported(e.to_string()),
            X::Draw { .. } => Error::io(e.to_string()),
            X::Device { .. } => {
                Error::new(ErrorKind::Io, e.to_string()).with_code(crate::Code::Device)
            }
            X::NonFinite { .. } => {
                Error::new(ErrorKind::Format, e.to_string()).with_code(crate::Code::Numeric)
            }
            _ => Error::internal(e.to_string()),
        };
        base.with_source(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_puts_a_caret_under_the_span() {
        let src = "INFER 'x';\nFROB 'y';\n";
        let e = Error::new(ErrorKind::Syntax, "unknown keyword FROB")
            .with_span(11..15)
            .with_span_label("expected a statement")
            .with_help("statements start with INFER, GENERATE, WALK, …");
        let out = e.render("<stdin>", src, false);
        assert!(out.contains("unknown keyword FROB"), "{out}");
        assert!(out.contains("FROB 'y';"), "{out}");
        assert!(out.contains("expected a statement"), "{out}");
        assert!(out.contains('^') || out.contains('─'), "{out}");
        assert!(out.contains("Help"), "{out}");
        // The caret line: underline starts in column 0 of the second source line.
        let lines: Vec<&str> = out.lines().collect();
        let src_line = lines.iter().position(|l| l.contains("FROB 'y'")).unwrap();
        let under = lines[src_line + 1];
        let col_src = lines[src_line].find("FROB").unwrap();
        let col_mark = under.find(['^', '┬', '─']).unwrap();
        assert_eq!(
            under[..col_mark].chars().count(),
            lines[src_line][..col_src].chars().count(),
            "{out}"
        );
    }

    #[test]
    fn render_without_span_and_with_bad_span() {
        let e = Error::semantic("no model bound");
        let out = e.render("<stdin>", "INFER 'x';", false);
        assert!(out.contains("no model bound"), "{out}");
        let e = Error::semantic("bad").with_span(100..200);
        assert!(e.render("x", "short", false).contains("bad"));
    }

    #[test]
    fn json_shape() {
        let e = Error::new(ErrorKind::Syntax, "oops")
            .with_span(3..5)
            .with_help("h");
        let j = e.to_json();
        assert_eq!(j["error"]["kind"], "syntax");
        assert_eq!(j["error"]["span"], serde_json::json!([3, 5]));
        assert_eq!(j["error"]["help"][0], "h");
        assert!(Error::semantic("x").to_json()["error"]["span"].is_null());
    }
}
