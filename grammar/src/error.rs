//! Syntax errors as plain data (message, primary span, labels, help). Rendering (ariadne)
//! happens at the edge, in the `lql` and `repl` crates.

use crate::ast::Span;

/// A syntax error. `span` is the primary location; `labels` add secondary notes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SyntaxError {
    pub message: String,
    pub span: Span,
    pub labels: Vec<(Span, String)>,
    pub help: Option<String>,
    /// A name outside a closed list the text otherwise parses around — `table` for a FROM
    /// name that is no table — which callers report as an unknown name rather than a
    /// spelling error of the language.
    pub unknown: Option<&'static str>,
}

impl SyntaxError {
    pub fn new(message: impl Into<String>, span: Span) -> Self {
        SyntaxError {
            message: message.into(),
            span,
            labels: Vec::new(),
            help: None,
            unknown: None,
        }
    }
    /// Marks the error as an unknown name of kind `what`.
    pub fn unknown_name(mut self, what: &'static str) -> Self {
        self.unknown = Some(what);
        self
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

/// Levenshtein distance (ASCII case-insensitive), for "did you mean" suggestions.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<char> = b.chars().map(|c| c.to_ascii_lowercase()).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The closest candidate within a distance that scales with the word's length.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    if word.len() > 40 {
        return None;
    }
    let limit = match word.chars().count() {
        0..=2 => 0,
        3..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit && *d > 0)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}
