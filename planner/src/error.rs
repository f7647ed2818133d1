//! Planning errors as data: like `SyntaxError` (message, span, labels, help) plus a kind.

use lql_grammar::{Span, SyntaxError};

/// Whether the statement is wrong for this model/session, or valid but not built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanErrorKind {
    /// The statement cannot run here: no model bound, layer out of range, missing operands…
    Semantic,
    /// Valid LQL that this engine does not support (yet).
    Unsupported,
}

/// A planning error; `span` points at the clause (or statement) that caused it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PlanError {
    pub kind: PlanErrorKind,
    pub message: String,
    pub span: Span,
    pub labels: Vec<(Span, String)>,
    pub help: Option<String>,
}

impl PlanError {
    pub fn semantic(message: impl Into<String>, span: Span) -> Self {
        PlanError {
            kind: PlanErrorKind::Semantic,
            message: message.into(),
            span,
            labels: Vec::new(),
            help: None,
        }
    }
    pub fn unsupported(message: impl Into<String>, span: Span) -> Self {
        PlanError {
            kind: PlanErrorKind::Unsupported,
            ..PlanError::semantic(message, span)
        }
    }
    pub fn with_label(mut self, span: Span, text: impl Into<String>) -> Self {
        self.labels.push((span, text.into()));
        self
    }
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

impl From<SyntaxError> for PlanError {
    fn from(e: SyntaxError) -> Self {
        PlanError {
            kind: PlanErrorKind::Semantic,
            message: e.message,
            span: e.span,
            labels: e.labels,
            help: e.help,
        }
    }
}
