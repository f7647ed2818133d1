//! The interactive shell: rustyline with history, multi-line statements (each line until
//! the statements end with `;` is read under the continuation prompt ` ..> `), a banner
//! naming the bound model, keyword, dot-command, column-name and file-path completion,
//! `HELP <statement>`, Ctrl-C to clear the statement (or cancel a running one), Ctrl-D to
//! leave.

use std::borrow::Cow;

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::Validator;
use rustyline::{CompletionType, Config, Context, Editor, Helper};

use crate::dot::COMMANDS;
use crate::shell::{Outcome, Shell};

const PROMPT: &str = "lql> ";
/// The prompt of each further line of a statement not yet ended by `;` (sqlite3's
/// `   ...> `, aligned with [`PROMPT`]).
const CONTINUE: &str = " ..> ";

/// Completion for the editor: keywords, the tables' names and columns, dot-commands,
/// and file paths inside a string.
struct LqlHelper {
    /// Table and column names, sorted, without repeats.
    names: Vec<String>,
    files: rustyline::completion::FilenameCompleter,
}

impl LqlHelper {
    fn new(session: &Shell) -> LqlHelper {
        let mut names = crate::dot::table_names(session).unwrap_or_default();
        for t in names.clone() {
            if let Ok(cols) = crate::dot::table_columns(session, &t) {
                names.extend(cols.into_iter().map(|(c, _)| c));
            }
        }
        names.sort();
        names.dedup();
        LqlHelper {
            names,
            files: rustyline::completion::FilenameCompleter::new(),
        }
    }
}

impl Completer for LqlHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = &line[..pos];
        // Inside a string: a file path (USE "…", APPLY PATCH "…", EXTRACT … INTO "…").
        if !before.trim_start().starts_with('.')
            && lql::split_statements(before)
                .last()
                .is_some_and(|p| in_string(&before[p.range()]))
        {
            return self.files.complete(line, pos, ctx);
        }
        let start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .map_or(0, |i| i + 1);
        let word = &before[start..];
        if word.is_empty() {
            return Ok((pos, Vec::new()));
        }
        // Dot-commands at the start of the line.
        if let Some(rest) = word.strip_prefix('.') {
            if before[..start].trim().is_empty() {
                let pairs = COMMANDS
                    .iter()
                    .filter(|c| c.name.starts_with(rest))
                    .map(|c| Pair {
                        display: format!(".{}", c.name),
                        replacement: format!(".{} ", c.name),
                    })
                    .collect();
                return Ok((start, pairs));
            }
            return Ok((pos, Vec::new()));
        }
        let upper = word.to_ascii_uppercase();
        let lower_typed = word.chars().all(|c| !c.is_ascii_uppercase());
        let pairs = lql::KEYWORDS
            .iter()
            .filter(|k| k.starts_with(&upper))
            .map(|k| {
                let text = if lower_typed {
                    k.to_ascii_lowercase()
                } else {
                    k.to_string()
                };
                Pair {
                    display: text.clone(),
                    replacement: format!("{text} "),
                }
            })
            .chain(
                self.names
                    .iter()
                    .filter(|n| n.starts_with(&word.to_ascii_lowercase()))
                    .filter(|n| !lql::KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(n)))
                    .map(|n| Pair {
                        display: n.clone(),
                        replacement: n.clone(),
                    }),
            )
            .collect();
        Ok((start, pairs))
    }
}

/// Whether the statement text ends inside an open string.
fn in_string(s: &str) -> bool {
    let mut quote: Option<char> = None;
    let mut escape = false;
    for c in s.chars() {
        match quote {
            Some(_) if escape => escape = false,
            Some(_) if c == '\\' => escape = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None => {}
        }
    }
    quote.is_some()
}

impl Hinter for LqlHelper {
    type Hint = String;
}

impl Highlighter for LqlHelper {
    fn highlight_prompt<'b, 's: 'b, 'p: 'b>(
        &'s self,
        prompt: &'p str,
        _default: bool,
    ) -> Cow<'b, str> {
        Cow::Borrowed(prompt)
    }
}

// Statements are gathered line by line (each further line under the continuation
// prompt), so the editor itself submits every line as typed.
impl Validator for LqlHelper {}

impl Helper for LqlHelper {}

/// Runs the shell until `.quit` or Ctrl-D.
pub fn run(session: &mut Shell) -> rustyline::Result<()> {
    let config = Config::builder()
        .auto_add_history(false)
        .history_ignore_dups(true)?
        .completion_type(CompletionType::List)
        .max_history_size(10_000)?
        .build();
    let mut rl: Editor<LqlHelper, DefaultHistory> = Editor::with_config(config)?;
    rl.set_helper(Some(LqlHelper::new(session)));
    // After the editor exists: creating it installs rustyline's own SIGINT handler (which
    // it restores only when dropped). While a line is read, the terminal is in raw mode and
    // Ctrl-C arrives as a key, so this handler only sees Ctrl-C while a statement runs.
    if let Err(e) = crate::sigint::install(session.conn.interrupt_handle()) {
        session.report_message(&format!("Ctrl-C will not cancel statements: {e}"));
    }
    // GENERATE's text appears live on stderr while it runs.
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        session
            .conn
            .set_token_handler(Some(crate::progress::token_printer(
                flag.clone(),
                session.color,
            )));
        session.streamed = Some(flag);
    }
    let history = crate::history::path();
    if let Some(p) = &history {
        // A missing history file is normal on first use.
        let _ = rl.load_history(p);
    }
    let bound = match session.conn.bound_model() {
        Some(m) => format!("connected to {m}"),
        None => "no model bound (USE \"file\" or USE MODEL \"name\")".to_string(),
    };
    session.print(&format!(
        "lql {} — {bound}\nEnter .help for commands, HELP <statement> for a statement; statements end with ';'\n",
        env!("CARGO_PKG_VERSION")
    ));
    // The statement being typed, over as many lines as it takes.
    let mut pending = String::new();
    loop {
        let prompt = if pending.is_empty() { PROMPT } else { CONTINUE };
        match rl.readline(prompt) {
            Ok(line) => {
                if pending.is_empty() {
                    if line.trim().is_empty() {
                        continue;
                    }
                } else {
                    pending.push('\n');
                }
                pending.push_str(&line);
                if !submits(&pending) {
                    continue;
                }
                let input = std::mem::take(&mut pending);
                let _ = rl.add_history_entry(input.as_str());
                if let Some(p) = &history {
                    save_history(&mut rl, p);
                }
                session.cancelled = false;
                if session.run_script(&input, "input") == Outcome::Quit {
                    break;
                }
            }
            // Ctrl-C drops the line and any statement begun on earlier lines.
            Err(ReadlineError::Interrupted) => pending.clear(),
            Err(ReadlineError::Eof) if pending.trim().is_empty() => break,
            // Ctrl-D inside a statement: it is incomplete, as sqlite3 says.
            Err(ReadlineError::Eof) => {
                session.report_message(&format!(
                    "incomplete statement (no ';' before the end of input): {}",
                    pending.trim()
                ));
                break;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether the lines typed so far are submitted: a dot-command, a comment-only text, or
/// statements ended by `;` (outside strings and comments).
fn submits(input: &str) -> bool {
    input.trim_start().starts_with('.')
        || lql::split_statements(input).is_empty()
        || lql::is_complete(input)
        || help_line(input)
}

/// `HELP [statement]` is the shell's: it needs no `;`.
fn help_line(input: &str) -> bool {
    let t = input.trim_start();
    t.get(..4).is_some_and(|h| h.eq_ignore_ascii_case("HELP"))
        && t[4..].chars().next().is_none_or(char::is_whitespace)
        && !t.contains('\n')
}

fn save_history(rl: &mut Editor<LqlHelper, DefaultHistory>, path: &std::path::Path) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = rl.save_history(path);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_gathered_until_the_statement_ends() {
        assert!(!submits("SHOW LAYERS"));
        assert!(submits("SHOW LAYERS\n  LIKE '1_';"));
        assert!(!submits("INFER 'a;"));
        assert!(submits(".mode csv"));
        assert!(submits("-- a comment"));
        assert!(submits("HELP extract"));
        assert!(submits("help"));
        assert!(!submits("HELPFUL"));
    }

    #[test]
    fn open_strings_are_detected() {
        assert!(in_string("INFER 'abc"));
        assert!(!in_string("INFER 'abc'"));
        assert!(in_string("INFER 'a\\'b"));
    }
}
