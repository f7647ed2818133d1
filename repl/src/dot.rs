//! Dot-commands: ONE table (name, arguments, help, handler); `.help` is generated from it.
//! A command may be typed by any unique prefix of its name (`.ti on` for `.timer on`).
//! Commands that inspect the model expand to ordinary statements (`.models` → `SHOW
//! MODELS`, `.tables` → `SHOW TABLES`, `.schema` → `DESCRIBE TABLE` of each), so
//! `Connection::execute` never sees a dot-command.

use crate::render::OutputMode;
use crate::shell::{Outcome, Shell};

/// What the shell does after a dot-command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Quit,
    /// It failed and the failure has been reported already (a statement it ran, a nested
    /// script), so no second message is printed.
    Failed,
}

type Handler = fn(&mut Shell, &[String]) -> Result<Flow, String>;

/// One dot-command.
#[derive(Debug)]
pub struct DotCommand {
    pub name: &'static str,
    /// Argument synopsis for `.help`.
    pub args: &'static str,
    pub help: &'static str,
    pub handler: Handler,
}

/// Every dot-command, in `.help` order.
pub const COMMANDS: &[DotCommand] = &[
    DotCommand {
        name: "help",
        args: "[STATEMENT]",
        help: "Show this list of commands, or a statement's grammar (.help EXTRACT)",
        handler: help,
    },
    DotCommand {
        name: "mode",
        args: "table|box|markdown|json|array|jsonl|csv|line",
        help: "Set the output mode (no argument: show it)",
        handler: mode,
    },
    DotCommand {
        name: "headers",
        args: "on|off",
        help: "Print the header row in csv mode",
        handler: headers,
    },
    DotCommand {
        name: "nullvalue",
        args: "TEXT",
        help: "Show NULL as TEXT (no argument: NULL, empty in csv)",
        handler: nullvalue,
    },
    DotCommand {
        name: "width",
        args: "N …",
        help: "Fix the widths of the first columns in grid modes (0: automatic)",
        handler: width,
    },
    DotCommand {
        name: "output",
        args: "[FILE]",
        help: "Write results to FILE (no argument: back to standard output)",
        handler: output,
    },
    DotCommand {
        name: "once",
        args: "FILE",
        help: "Write the next statement's result to FILE",
        handler: once,
    },
    DotCommand {
        name: "echo",
        args: "on|off",
        help: "Print each statement and command before running it",
        handler: echo,
    },
    DotCommand {
        name: "bail",
        args: "on|off",
        help: "Stop a script at the first error or fault",
        handler: bail,
    },
    DotCommand {
        name: "timer",
        args: "on|off",
        help: "Print the run time of each statement",
        handler: timer,
    },
    DotCommand {
        name: "read",
        args: "FILE",
        help: "Run the statements and dot-commands in FILE",
        handler: read,
    },
    DotCommand {
        name: "open",
        args: "PATH|NAME",
        help: "Bind a model: a file or folder path, or a catalogue name",
        handler: open,
    },
    DotCommand {
        name: "models",
        args: "",
        help: "List the catalogue's models (SHOW MODELS)",
        handler: models,
    },
    DotCommand {
        name: "tables",
        args: "",
        help: "List the virtual tables the bound model answers",
        handler: tables,
    },
    DotCommand {
        name: "schema",
        args: "[TABLE]",
        help: "Show the columns of a virtual table (all of them without an argument)",
        handler: schema,
    },
    DotCommand {
        name: "layers",
        args: "",
        help: "List the bound model's layers (SHOW LAYERS)",
        handler: layers,
    },
    DotCommand {
        name: "tensors",
        args: "",
        help: "List the bound model's tensors (SHOW TENSORS)",
        handler: tensors,
    },
    DotCommand {
        name: "stats",
        args: "",
        help: "Facts of the bound model (STATS)",
        handler: stats,
    },
    DotCommand {
        name: "quit",
        args: "",
        help: "Leave lql",
        handler: quit,
    },
    DotCommand {
        name: "exit",
        args: "",
        help: "Leave lql",
        handler: quit,
    },
];

/// Finds a command by its exact name or a unique prefix.
pub fn lookup(name: &str) -> Result<&'static DotCommand, String> {
    if let Some(c) = COMMANDS.iter().find(|c| c.name == name) {
        return Ok(c);
    }
    let matches: Vec<&DotCommand> = COMMANDS
        .iter()
        .filter(|c| c.name.starts_with(name))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(format!("unknown command .{name}; .help lists the commands")),
        many => Err(format!(
            "ambiguous command .{name}: could be {}",
            many.iter()
                .map(|c| format!(".{}", c.name))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// The `.help` text, generated from [`COMMANDS`].
pub fn help_text() -> String {
    let synopsis: Vec<String> = COMMANDS
        .iter()
        .map(|c| {
            if c.args.is_empty() {
                format!(".{}", c.name)
            } else {
                format!(".{} {}", c.name, c.args)
            }
        })
        .collect();
    let w = synopsis.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut s = String::new();
    for (syn, c) in synopsis.iter().zip(COMMANDS) {
        s.push_str(&format!("{syn:<w$}  {}\n", c.help));
    }
    s.push_str("Statements end with ';' and may span lines; HELP <statement> shows one's grammar. Ctrl-C cancels a running statement; Ctrl-D leaves.\n");
    s
}

/// Runs a dot-command line (with its leading `.`).
pub fn run(session: &mut Shell, line: &str) -> Result<Flow, String> {
    let words = split_args(line.trim().trim_start_matches('.'))?;
    let Some((name, args)) = words.split_first() else {
        return Err("empty command; .help lists the commands".into());
    };
    let cmd = lookup(name)?;
    (cmd.handler)(session, args)
}

/// Splits arguments on whitespace; single or double quotes group words.
fn split_args(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in s.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            None => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err("unterminated quote in command".into());
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

fn no_args(args: &[String], name: &str) -> Result<(), String> {
    if args.is_empty() {
        Ok(())
    } else {
        Err(format!(".{name} takes no arguments"))
    }
}

fn one_arg<'a>(args: &'a [String], name: &str, what: &str) -> Result<&'a str, String> {
    match args {
        [one] => Ok(one),
        _ => Err(format!("usage: .{name} {what}")),
    }
}

fn on_off(args: &[String], name: &str) -> Result<bool, String> {
    match one_arg(args, name, "on|off")?.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        other => Err(format!(".{name}: expected on or off, found {other:?}")),
    }
}

fn help(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    if args.is_empty() {
        s.print(&help_text());
    } else {
        s.print(&statement_help(&args.join(" "))?);
    }
    Ok(Flow::Continue)
}

/// A statement's help (`.help X`, `HELP X`), or an error listing the statements.
pub fn statement_help(name: &str) -> Result<String, String> {
    match lql::reference::statement_help(name)? {
        Some(text) => Ok(text),
        None => Err(format!(
            "no statement {name:?}; HELP with no name lists them"
        )),
    }
}

fn mode(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    if args.is_empty() {
        let m = s.mode;
        s.print(&format!("{m}\n"));
        return Ok(Flow::Continue);
    }
    s.mode = one_arg(args, "mode", &OutputMode::names())?.parse::<OutputMode>()?;
    Ok(Flow::Continue)
}

fn headers(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    s.headers = on_off(args, "headers")?;
    Ok(Flow::Continue)
}

fn echo(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    s.echo = on_off(args, "echo")?;
    Ok(Flow::Continue)
}

fn bail(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    s.bail = on_off(args, "bail")?;
    Ok(Flow::Continue)
}

fn nullvalue(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    s.nullvalue = match args {
        [] => None,
        [one] => Some(one.clone()),
        _ => return Err("usage: .nullvalue TEXT".into()),
    };
    Ok(Flow::Continue)
}

fn width(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    s.widths = args
        .iter()
        .map(|a| {
            a.parse::<usize>()
                .ok()
                .filter(|w| *w <= 10_000)
                .ok_or_else(|| format!(".width: expected a width from 0 to 10000, found {a:?}"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Flow::Continue)
}

fn output(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    let path = match args {
        [] => None,
        [one] if one == "stdout" => None,
        [one] => Some(one.as_str()),
        _ => return Err("usage: .output [FILE]".into()),
    };
    s.redirect(path, false)?;
    Ok(Flow::Continue)
}

fn once(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    let path = one_arg(args, "once", "FILE")?;
    s.redirect(Some(path), true)?;
    Ok(Flow::Continue)
}

/// The virtual tables that answer SELECT, from the engine's one schema source (`SHOW TABLES`).
pub(crate) fn table_names(s: &Shell) -> Result<Vec<String>, lql::Error> {
    let rows = s.conn.execute("SHOW TABLES;")?;
    Ok(rows.rows.iter().map(|r| r[0].to_string()).collect())
}

/// The columns of `table` from the engine's one schema source (`DESCRIBE TABLE`), as
/// (name, type) pairs.
pub(crate) fn table_columns(s: &Shell, table: &str) -> Result<Vec<(String, String)>, lql::Error> {
    let rows = s.conn.execute(&format!("DESCRIBE TABLE {table};"))?;
    Ok(rows
        .rows
        .iter()
        .map(|r| (r[0].to_string(), r[1].to_string()))
        .collect())
}

fn require_model(s: &Shell) -> Result<(), String> {
    match s.conn.bound_model() {
        Some(_) => Ok(()),
        None => Err("no model is bound: USE MODEL … or .open one first".into()),
    }
}

fn tables(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    no_args(args, "tables")?;
    require_model(s)?;
    let names = table_names(s).map_err(|e| format!(".tables: {e}"))?;
    let mut text = names.join("  ");
    text.push('\n');
    s.print(&text);
    Ok(Flow::Continue)
}

fn schema(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    require_model(s)?;
    let mut text = String::new();
    match args {
        [] => {
            for t in table_names(s).map_err(|e| format!(".schema: {e}"))? {
                if let Ok(cols) = table_columns(s, &t) {
                    text.push_str(&create_table(&t, &cols));
                }
            }
        }
        [one] => {
            let t = one.to_ascii_lowercase();
            let cols = table_columns(s, &t).map_err(|e| format!(".schema {one}: {e}"))?;
            text.push_str(&create_table(&t, &cols));
        }
        _ => return Err("usage: .schema [TABLE]".into()),
    }
    s.print(&text);
    Ok(Flow::Continue)
}

/// A table's columns written as sqlite3's `.schema` writes them.
fn create_table(name: &str, columns: &[(String, String)]) -> String {
    let cols: Vec<String> = columns
        .iter()
        .map(|(n, ty)| format!("  {n} {}", sql_type(ty)))
        .collect();
    format!("CREATE TABLE {name} (\n{}\n);\n", cols.join(",\n"))
}

/// The SQL spelling of a schema type name (`DESCRIBE TABLE`'s `type` column).
fn sql_type(ty: &str) -> String {
    match ty {
        "bool" => "BOOLEAN".into(),
        "int" => "INTEGER".into(),
        "float" => "REAL".into(),
        other => other.to_ascii_uppercase(),
    }
}

fn timer(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    s.timer = on_off(args, "timer")?;
    Ok(Flow::Continue)
}

fn read(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    let path = one_arg(args, "read", "FILE")?;
    if s.read_depth >= 16 {
        return Err(format!(
            ".read {path}: scripts nested too deeply (16 levels)"
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    s.read_depth += 1;
    let outcome = s.run_script(&text, path);
    s.read_depth -= 1;
    match outcome {
        Outcome::Ok => Ok(Flow::Continue),
        Outcome::Quit => Ok(Flow::Quit),
        // Each error has been reported where it happened, once.
        Outcome::Failed => Ok(Flow::Failed),
    }
}

fn open(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    let target = one_arg(args, "open", "PATH|NAME")?;
    match s.conn.bind(target) {
        Ok(rows) => {
            s.show_bind(&format!(".open {target}"), &rows);
            Ok(Flow::Continue)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Runs a statement the command expands to; its error is reported like a statement's.
fn expand(s: &mut Shell, statement: &str) -> Result<Flow, String> {
    match s.run_script(&format!("{statement};"), statement) {
        Outcome::Failed => Ok(Flow::Failed),
        _ => Ok(Flow::Continue),
    }
}

fn models(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    no_args(args, "models")?;
    expand(s, "SHOW MODELS")
}

fn layers(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    no_args(args, "layers")?;
    expand(s, "SHOW LAYERS")
}

fn tensors(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    no_args(args, "tensors")?;
    expand(s, "SHOW TENSORS")
}

fn stats(s: &mut Shell, args: &[String]) -> Result<Flow, String> {
    no_args(args, "stats")?;
    expand(s, "STATS")
}

fn quit(_: &mut Shell, _: &[String]) -> Result<Flow, String> {
    Ok(Flow::Quit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::test_support::{captured, Buf};

    fn session() -> (Shell, Buf, Buf) {
        captured(OutputMode::Table)
    }

    #[test]
    fn names_are_unique_and_documented() {
        let mut names: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), COMMANDS.len());
        assert!(COMMANDS.iter().all(|c| !c.help.is_empty()));
    }

    #[test]
    fn help_is_generated_from_the_table() {
        let h = help_text();
        for c in COMMANDS {
            assert!(h.contains(&format!(".{}", c.name)), "{h}");
            assert!(h.contains(c.help), "{h}");
        }
        assert!(h.contains(".mode table|box|markdown|json|array|jsonl|csv|line"));
    }

    #[test]
    fn prefixes_resolve_when_unique() {
        assert_eq!(lookup("ti").unwrap().name, "timer");
        assert_eq!(lookup("quit").unwrap().name, "quit");
        assert!(lookup("mo").unwrap_err().contains("ambiguous"));
        assert_eq!(lookup("hea").unwrap().name, "headers");
        assert!(lookup("frob").unwrap_err().contains("unknown command"));
    }

    #[test]
    fn mode_and_timer_change_settings() {
        let (mut s, out, _) = session();
        assert_eq!(run(&mut s, ".mode json"), Ok(Flow::Continue));
        assert_eq!(s.mode, OutputMode::Json);
        assert_eq!(run(&mut s, ".mode"), Ok(Flow::Continue));
        assert_eq!(out.text(), "json\n");
        assert!(run(&mut s, ".mode xml")
            .unwrap_err()
            .contains("unknown mode"));
        assert_eq!(run(&mut s, ".timer on"), Ok(Flow::Continue));
        assert!(s.timer);
        assert!(run(&mut s, ".timer maybe").is_err());
        assert_eq!(run(&mut s, ".exit"), Ok(Flow::Quit));
        assert_eq!(run(&mut s, ".q"), Ok(Flow::Quit));
    }

    #[test]
    fn read_runs_a_file_and_reports_missing_ones() {
        let (mut s, _, _) = session();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.lql");
        std::fs::write(&p, ".mode csv\n.timer on\n").unwrap();
        assert_eq!(
            run(&mut s, &format!(".read '{}'", p.display())),
            Ok(Flow::Continue)
        );
        assert_eq!(s.mode, OutputMode::Csv);
        assert!(s.timer);
        assert!(run(&mut s, ".read /nonexistent/x.lql").is_err());
    }

    #[test]
    fn args_split_with_quotes() {
        assert_eq!(
            split_args("open \"a b\" c").unwrap(),
            vec!["open", "a b", "c"]
        );
        assert!(split_args("open 'x").is_err());
    }
}
