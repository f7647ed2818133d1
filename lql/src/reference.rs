//! The language reference (`docs/reference.md`) rendered from the one schema source
//! (`lql_planner::schema`: statements, result columns, virtual tables, SHOW targets), the
//! error codes ([`crate::CODES`]) and the grammar's limits. `tests/tests/reference.rs`
//! fails when the committed file differs, and says how to regenerate it.

use std::fmt::Write;

use lql_planner::schema::{show_docs, statement_docs};
use lql_planner::{table_columns, ColumnDef, QUERYABLE_TABLES};

/// The command that rewrites docs/reference.md.
pub const REGENERATE: &str = "LQL_BLESS=1 cargo test --release -p lql-tests --test reference";

fn columns_table(out: &mut String, cols: &[ColumnDef]) {
    out.push_str("| column | type | meaning |\n|---|---|---|\n");
    for c in cols {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            c.name,
            c.ty,
            c.meaning.replace('|', "\\|")
        );
    }
    out.push('\n');
}

/// docs/reference.md, as the code defines it now.
pub fn reference_markdown() -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "# LQL language reference\n\n\
         <!-- Generated from planner/src/schema.rs, lql/src/error.rs and the grammar's limits; \
         do not edit. Regenerate with: {REGENERATE} -->\n\n\
         ## Lexical rules\n\n\
         - Keywords are case-insensitive; statements are separated by `;` (the last one optional).\n\
         - Strings are `'single'` or `\"double\"` quoted. A quote written twice stands for itself \
         (`'it''s'`); backslash escapes: `\\\\ \\' \\\" \\n \\t \\r \\0 \\u{{XXXX}}`.\n\
         - Comments: `-- to the end of the line` and `/* block */`.\n\
         - Parameters of prepared statements: `?`, `?NNN` (1-based), `:name` (at most {} of them); \
         each stands where a literal may.\n\
         - Limits: a WHERE clause has at most {} terms; parentheses nest at most {} deep.\n\n\
         ## Statements\n\n",
        lql_grammar::MAX_PARAMS,
        lql_planner::MAX_WHERE_NODES,
        lql_grammar::MAX_PAREN_DEPTH,
    );
    for s in statement_docs() {
        let _ = write!(
            out,
            "### {}\n\n```\n{}\n```\n\n{}\n\nExample: `{}`\n\n",
            s.name, s.grammar, s.notes, s.example
        );
        if s.columns.is_empty() {
            out.push_str(match s.name {
                "SELECT" => "Result columns: the select list's.\n\n",
                "SHOW" => "Result columns: see [SHOW targets](#show-targets).\n\n",
                "TRACE" => "Result columns: see docs/trace.md (they depend on the clauses).\n\n",
                _ => "Result: a status (no columns).\n\n",
            });
        } else {
            out.push_str("Result columns:\n\n");
            columns_table(&mut out, &s.columns);
        }
    }
    out.push_str("## Virtual tables\n\nThe tables `SELECT` reads (`SHOW TABLES` lists them, `DESCRIBE TABLE` shows one).\n\n");
    for t in QUERYABLE_TABLES {
        let _ = writeln!(out, "### {}\n", t.name());
        if let Some(cols) = table_columns(t) {
            columns_table(&mut out, &cols);
        }
    }
    let unbuilt: Vec<String> = lql_grammar::Table::ALL
        .iter()
        .filter(|t| table_columns(**t).is_none())
        .map(|t| format!("`{}`", t.name()))
        .collect();
    if !unbuilt.is_empty() {
        let _ = writeln!(
            out,
            "Named by the grammar but not answering SELECT yet: {}.\n",
            unbuilt.join(", ")
        );
    }
    out.push_str("## SHOW targets\n\n");
    for (name, cols) in show_docs() {
        let _ = writeln!(out, "### SHOW {name}\n");
        if cols.is_empty() {
            out.push_str("Result: a status (no columns).\n\n");
        } else {
            columns_table(&mut out, &cols);
        }
    }
    out.push_str("## Error codes\n\n| code | meaning |\n|---|---|\n");
    for (code, meaning) in crate::CODES {
        let _ = writeln!(out, "| `{code}` | {meaning} |");
    }
    out
}
