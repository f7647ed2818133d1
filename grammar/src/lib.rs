//! # lql-grammar: LQL text → AST (every node carries a byte span) → syntax diagnostics.
//!
//! ```text
//!  text ──scan (strings, escapes, nesting)──▶ pest (lql.pest) ──build──▶ Vec<Statement>
//!                                                   │ error
//!                                                   ▼
//!                                   SyntaxError { message, span, labels, help }
//! ```
//!
//! **Architecture invariant:** the parser checks syntax only. Semantic checks (layer in
//! range, model bound, capabilities) belong to `lql-planner`. Only the `parser` module sees pest's
//! pairs; everything public is owned data. Printing an AST (`Display`) gives back
//! equivalent LQL: `parse(&stmt.to_string())` equals `stmt` ignoring spans. AST types derive
//! `serde::Serialize` for JSON dumps.
//!
//! ```
//! let stmts = lql_grammar::parse("WALK 'France' TOP 5; STATS").unwrap();
//! assert_eq!(stmts.len(), 2);
//! assert_eq!(stmts[0].to_string(), "WALK \"France\" TOP 5");
//! assert!(lql_grammar::is_complete("STATS;"));
//! ```

pub mod ast;
pub mod error;
mod keywords;
mod params;
mod parser;
mod print;
mod scan;

pub use ast::*;
pub use error::{edit_distance, suggest, SyntaxError};
pub use keywords::{KEYWORDS, STATEMENT_KEYWORDS};
pub use params::{placeholders, Placeholder, MAX_PARAMS};
pub use parser::{
    parse, parse_statement, parse_with_placeholders, PLACEHOLDER_INT, PLACEHOLDER_TEXT,
};
pub use print::{print_script, quote};
pub use scan::{is_complete, split_statements, MAX_PAREN_DEPTH};
