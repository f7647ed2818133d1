//! The interactive shell: rustyline with history, multi-line statements (Enter inserts a
//! line break until the statements end with `;`), keyword and dot-command completion,
//! Ctrl-C to clear the line (or cancel a running statement), Ctrl-D to leave.

use std::borrow::Cow;

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{CompletionType, Config, Context, Editor, Helper};

use crate::dot::COMMANDS;
use crate::session::{Outcome, Session};

const PROMPT: &str = "lql> ";

/// Completion and multi-line validation for the editor.
struct LqlHelper;

impl Completer for LqlHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = &line[..pos];
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
        // Inside a string nothing is completed.
        if lql::split_statements(before)
            .last()
            .is_some_and(|p| in_string(&before[p.range()]))
        {
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

impl Validator for LqlHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        let input = ctx.input();
        let t = input.trim_start();
        // Dot-commands, empty input and comment-only input submit at once.
        if t.starts_with('.') || lql::split_statements(input).is_empty() || lql::is_complete(input)
        {
            Ok(ValidationResult::Valid(None))
        } else {
            Ok(ValidationResult::Incomplete)
        }
    }
}

impl Helper for LqlHelper {}

/// Runs the shell until `.quit` or Ctrl-D.
pub fn run(session: &mut Session) -> rustyline::Result<()> {
    let config = Config::builder()
        .auto_add_history(false)
        .history_ignore_dups(true)?
        .completion_type(CompletionType::List)
        .max_history_size(10_000)?
        .build();
    let mut rl: Editor<LqlHelper, DefaultHistory> = Editor::with_config(config)?;
    rl.set_helper(Some(LqlHelper));
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
    session.print(&format!(
        "lql {} — enter .help for commands, statements end with ';'\n",
        env!("CARGO_PKG_VERSION")
    ));
    loop {
        match rl.readline(PROMPT) {
            Ok(line) => {
                if line.trim().is_empty() {
                    continue;
                }
                let _ = rl.add_history_entry(line.as_str());
                if let Some(p) = &history {
                    save_history(&mut rl, p);
                }
                session.cancelled = false;
                if session.run_script(&line, "input") == Outcome::Quit {
                    break;
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
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
    fn open_strings_are_detected() {
        assert!(in_string("INFER 'abc"));
        assert!(!in_string("INFER 'abc'"));
        assert!(in_string("INFER 'a\\'b"));
    }
}
