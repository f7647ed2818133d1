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

/// A more specific class of semantic error: the engine gives each its own error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PlanErrorCode {
    /// The statement needs a bound model and none is.
    NoModel,
    /// A column no relation in scope has.
    UnknownColumn,
    /// A table or relation name that names nothing.
    UnknownTable,
    /// A value of the wrong type for where it stands (a comparison, an argument).
    WrongType,
    /// A number outside what its clause allows (a layer, a sampling parameter, a count).
    OutOfRange,
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
    /// A more specific class than the kind, when there is one.
    pub code: Option<PlanErrorCode>,
}

impl PlanError {
    pub fn semantic(message: impl Into<String>, span: Span) -> Self {
        PlanError {
            kind: PlanErrorKind::Semantic,
            message: message.into(),
            span,
            labels: Vec::new(),
            help: None,
            code: None,
        }
    }
    fn coded(code: PlanErrorCode, message: impl Into<String>, span: Span) -> Self {
        PlanError {
            code: Some(code),
            ..PlanError::semantic(message, span)
        }
    }
    pub fn no_model(message: impl Into<String>, span: Span) -> Self {
        Self::coded(PlanErrorCode::NoModel, message, span)
    }
    pub fn unknown_column(message: impl Into<String>, span: Span) -> Self {
        Self::coded(PlanErrorCode::UnknownColumn, message, span)
    }
    pub fn unknown_table(message: impl Into<String>, span: Span) -> Self {
        Self::coded(PlanErrorCode::UnknownTable, message, span)
    }
    pub fn wrong_type(message: impl Into<String>, span: Span) -> Self {
        Self::coded(PlanErrorCode::WrongType, message, span)
    }
    pub fn out_of_range(message: impl Into<String>, span: Span) -> Self {
        Self::coded(PlanErrorCode::OutOfRange, message, span)
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
            code: None,
        }
    }
}
