//! The error codes: one non-exhaustive enum, the only registry. A code names one class of
//! failure and never changes meaning; `docs/reference.md`'s table, the Python package's
//! `lql.CODES` and `lql serve`'s HTTP statuses are all read from [`Code::ALL`].

use std::fmt;

use crate::error::ErrorKind;

/// A stable error code (`LQL-E0201`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Code {
    /// The text does not parse.
    Syntax,
    /// The statement means nothing here (the generic semantic code).
    Semantic,
    /// A connection used from inside one of its own callbacks, or while a `RowStream` of
    /// it is open.
    Busy,
    /// `query_row` found no row.
    NoRows,
    /// A read-only connection refused a statement that modifies.
    ReadOnly,
    /// A handler or closure given to the connection panicked.
    Panic,
    /// A result beyond a bound the engine keeps.
    TooLarge,
    /// The statement needs a bound model and none is.
    NoModel,
    /// A column no relation in scope has.
    UnknownColumn,
    /// A table or relation name that names nothing.
    UnknownTable,
    /// A value of the wrong type for where it stands.
    WrongType,
    /// A number outside what its clause allows.
    OutOfRange,
    /// Not built yet, or not available for this model.
    Unsupported,
    /// Reading or writing a file failed.
    Io,
    /// The GPU backend failed.
    Device,
    /// The statement would write over a file the connection reads.
    Protected,
    /// A malformed, hostile or inconsistent file.
    Format,
    /// A model file changed since USE.
    ModelChanged,
    /// The statement was cancelled.
    Interrupted,
    /// Wrong count, name or type of a prepared statement's parameters.
    Parameters,
    /// A computation produced a non-finite value.
    Numeric,
    /// A bug in LQL.
    Internal,
    /// Refused over HTTP by `lql serve`'s gate.
    Refused,
}

impl Code {
    /// Every code, in the order of their numbers.
    pub const ALL: &'static [Code] = &[
        Code::Syntax,
        Code::Semantic,
        Code::Busy,
        Code::NoRows,
        Code::ReadOnly,
        Code::Panic,
        Code::TooLarge,
        Code::NoModel,
        Code::UnknownColumn,
        Code::UnknownTable,
        Code::WrongType,
        Code::OutOfRange,
        Code::Unsupported,
        Code::Io,
        Code::Device,
        Code::Protected,
        Code::Format,
        Code::ModelChanged,
        Code::Interrupted,
        Code::Parameters,
        Code::Numeric,
        Code::Internal,
        Code::Refused,
    ];

    /// The code as written: `LQL-E0201`.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Syntax => "LQL-E0101",
            Code::Semantic => "LQL-E0201",
            Code::Busy => "LQL-E0202",
            Code::NoRows => "LQL-E0203",
            Code::ReadOnly => "LQL-E0204",
            Code::Panic => "LQL-E0205",
            Code::TooLarge => "LQL-E0206",
            Code::NoModel => "LQL-E0207",
            Code::UnknownColumn => "LQL-E0208",
            Code::UnknownTable => "LQL-E0209",
            Code::WrongType => "LQL-E0210",
            Code::OutOfRange => "LQL-E0211",
            Code::Unsupported => "LQL-E0301",
            Code::Io => "LQL-E0401",
            Code::Device => "LQL-E0402",
            Code::Protected => "LQL-E0403",
            Code::Format => "LQL-E0501",
            Code::ModelChanged => "LQL-E0502",
            Code::Interrupted => "LQL-E0601",
            Code::Parameters => "LQL-E0701",
            Code::Numeric => "LQL-E0801",
            Code::Internal => "LQL-E0901",
            Code::Refused => "LQL-E1001",
        }
    }

    /// What the code means, as `docs/reference.md` lists it.
    pub fn meaning(self) -> &'static str {
        match self {
            Code::Syntax => "syntax: the text does not parse",
            Code::Semantic => "semantic: the statement means nothing here (a value it does not allow, a capability the model lacks, …) — the codes below name the common cases",
            Code::Busy => "busy: a connection was used from inside one of its own callbacks (a result, token or progress handler) or while a RowStream of it is open; use another connection of the same Database",
            Code::NoRows => "no rows: query_row found no row to map",
            Code::ReadOnly => "read-only: the connection was opened with OpenFlags::READ_ONLY and the statement writes a file or edits the model state",
            Code::Panic => "panic: a handler or closure given to the connection (token or progress handler, execute_each callback, query_row/query_map closure) panicked; the statement stopped and the connection stays usable",
            Code::TooLarge => "too large: a result beyond a bound the engine keeps (a join of more than 20,000,000 values); narrow the statement",
            Code::NoModel => "no model: the statement needs a bound model and none is; USE one",
            Code::UnknownColumn => "unknown column: a column no table or relation in scope has",
            Code::UnknownTable => "unknown table: a table or relation name that names nothing in scope",
            Code::WrongType => "wrong type: a value of the wrong type for where it stands (a comparison, a function's argument)",
            Code::OutOfRange => "out of range: a number outside what its clause allows (a layer beyond the model, a sampling parameter, a count)",
            Code::Unsupported => "unsupported: not built yet, or not available for this model",
            Code::Io => "io: reading or writing a file failed",
            Code::Device => "device: the GPU backend failed (no adapter, a kernel that did not compile, device lost, out of device memory); the message names the adapter and the operation",
            Code::Protected => "protected: the statement would write over a file the connection reads (the bound model or a file under its folder, an applied patch, a model the statement reads), under any alias",
            Code::Format => "format: a malformed, hostile or inconsistent file",
            Code::ModelChanged => "model file changed since USE: re-bind",
            Code::Interrupted => "interrupted: the statement was cancelled",
            Code::Parameters => "parameters: wrong count, name or type of a prepared statement's parameters",
            Code::Numeric => "numeric: a computation produced a non-finite value",
            Code::Internal => "internal: a bug in LQL",
            Code::Refused => "refused over HTTP: lql serve's gate refused the statement from its declared effects (a file outside --allow-writes, USE, SET, the network, an edit on GET); status 403",
        }
    }

    /// The code an error of `kind` has when nothing more specific is known.
    pub fn of_kind(kind: ErrorKind) -> Code {
        match kind {
            ErrorKind::Syntax => Code::Syntax,
            ErrorKind::Semantic => Code::Semantic,
            ErrorKind::Unsupported => Code::Unsupported,
            ErrorKind::Io => Code::Io,
            ErrorKind::Format => Code::Format,
            ErrorKind::Interrupted => Code::Interrupted,
            ErrorKind::Internal => Code::Internal,
        }
    }

    /// The code written as `text` (`None`: no such code).
    pub fn parse(text: &str) -> Option<Code> {
        Code::ALL.iter().copied().find(|c| c.as_str() == text)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, o: &&str) -> bool {
        self.as_str() == *o
    }
}

impl PartialEq<str> for Code {
    fn eq(&self, o: &str) -> bool {
        self.as_str() == o
    }
}

impl PartialEq<Code> for &str {
    fn eq(&self, o: &Code) -> bool {
        *self == o.as_str()
    }
}

impl serde::Serialize for Code {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_ordered_and_parse_back() {
        let texts: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
        let mut sorted = texts.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(texts, sorted, "codes unique and in order of their numbers");
        for c in Code::ALL {
            assert_eq!(Code::parse(c.as_str()), Some(*c));
            assert!(!c.meaning().is_empty());
        }
    }
}
