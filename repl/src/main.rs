//! `lql`: the LQL shell, invoked as sqlite3 and duckdb are: `lql [OPTIONS] [MODEL] [SQL…]`.
//!
//! - A first argument that is a model (a GGUF file, a container or package folder, a
//!   catalogue name) is bound first; each further argument is a script file when such a file
//!   exists, otherwise statements to run. `-c "…"` runs statements too, `-cmd "…"` runs a
//!   statement or dot-command before the rest.
//! - Without statements or scripts: the interactive REPL when stdin is a terminal, else the
//!   statements on stdin.
//! - Errors go to stderr (one JSON line in the JSON modes) and the run goes on; the exit
//!   code is 1 when anything failed or reported a fault (`-bail` stops at the first).
//! - sqlite's single-dash spellings (`-csv`, `-json`, `-header`, `-bail`, …) are accepted
//!   beside the long options (see [`args::normalize`]).
//! - `lql bench MODEL`: decode/prefill speed of the CPU backend.
//! - `lql serve MODEL`: the HTTP server of `lql-serve` (OpenAI-compatible API, LQL over HTTP).

mod args;
mod bench;
mod dot;
mod history;
mod progress;
mod render;
mod repl;
mod shell;
mod sigint;
mod vindex;

use std::io::{IsTerminal, Read};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use render::OutputMode;
use shell::{Outcome, Shell};

#[derive(Parser, Debug)]
#[command(
    name = "lql",
    version,
    about = "LQL: query a language model like a database",
    override_usage = "lql [OPTIONS] [MODEL] [SQL|SCRIPT]...\n       lql bench MODEL\n       lql vindex inspect|describe|representations|profiles|precision|verify PATH [--json]",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,

    /// A model to bind first (a GGUF file, a container or package folder, a catalogue
    /// name), then script files and statements to run in order
    #[arg(value_name = "MODEL|SQL|SCRIPT")]
    args: Vec<String>,

    /// Statements to run (after the positional arguments)
    #[arg(
        short = 'c',
        long = "command",
        value_name = "STATEMENTS",
        allow_hyphen_values = true
    )]
    command: Vec<String>,

    /// Run a statement or dot-command before the others (sqlite's -cmd)
    #[arg(long = "cmd", value_name = "COMMAND", allow_hyphen_values = true)]
    pre: Vec<String>,

    /// Output mode: table, box, markdown, json, array, jsonl, csv, line (also -csv, -json
    /// (array), -jsonl, -line, -box, -markdown, -table)
    #[arg(long, short = 'f', value_name = "MODE", value_parser = parse_mode)]
    format: Option<OutputMode>,

    /// Bind this model before the first statement (a path, or a catalogue name)
    #[arg(long, short = 'm', value_name = "PATH|NAME")]
    model: Option<String>,

    /// Print the header row in csv (the default; -header)
    #[arg(long, overrides_with = "no_header")]
    header: bool,

    /// No header row in csv (-noheader)
    #[arg(long, overrides_with = "header")]
    no_header: bool,

    /// Stop at the first error or fault (-bail)
    #[arg(long)]
    bail: bool,

    /// Print each statement before running it (-echo)
    #[arg(long)]
    echo: bool,

    /// Show NULL as this text (-nullvalue)
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    nullvalue: Option<String>,

    /// Never download: a catalogue model must already be cached (OpenFlags::OFFLINE)
    #[arg(long)]
    offline: bool,

    /// Refuse statements that write files or edit the model (OpenFlags::READ_ONLY)
    #[arg(long)]
    readonly: bool,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Measure prefill and decode speed of a model on the CPU backend
    Bench {
        /// A path, or a catalogue name
        model: String,
        /// Worker threads (default: all cores)
        #[arg(long)]
        threads: Option<usize>,
        /// Measured repetitions (after one warm-up)
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Print the figures as one JSON object
        #[arg(long)]
        json: bool,
    },
    /// Serve a model over HTTP: the OpenAI-compatible API and LQL (docs/serve.md)
    Serve(Box<lql_serve::ServeArgs>),
    /// Read a VINDEX3 container from the artifact alone (no model is bound)
    #[command(subcommand)]
    Vindex(vindex::VindexCmd),
}

fn parse_mode(s: &str) -> Result<OutputMode, String> {
    s.parse()
}

fn main() -> ExitCode {
    // A model file truncated under a running statement: a clear fatal message naming the
    // file instead of a bare SIGBUS (docs/security.md).
    lql_storage::mapped::install_sigbus_reporter();
    let cli = Cli::parse_from(args::normalize(std::env::args_os().collect()));
    if let Some(Cmd::Bench {
        model,
        threads,
        reps,
        json,
    }) = &cli.cmd
    {
        return bench::run(model, *threads, *reps, *json);
    }
    if let Some(Cmd::Vindex(cmd)) = &cli.cmd {
        return vindex::run(cmd);
    }
    if let Some(Cmd::Serve(args)) = &cli.cmd {
        return match lql_serve::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lql serve: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let (positional_model, inputs) = match args::classify(&cli.args) {
        Ok(sorted) => sorted,
        Err(msg) => {
            eprintln!("lql: {msg}");
            return ExitCode::FAILURE;
        }
    };
    let model = match (&cli.model, positional_model) {
        (Some(a), Some(b)) => {
            eprintln!("lql: two models given: --model {a} and {b}");
            return ExitCode::FAILURE;
        }
        (Some(a), None) => Some(a.clone()),
        (None, b) => b,
    };

    let stdin_tty = std::io::stdin().is_terminal();
    let stdout_tty = std::io::stdout().is_terminal();
    let stderr_tty = std::io::stderr().is_terminal();
    let interactive = inputs.is_empty() && cli.command.is_empty() && stdin_tty;

    let mut flags = lql::OpenFlags::NONE;
    if cli.offline {
        flags |= lql::OpenFlags::OFFLINE;
    }
    if cli.readonly {
        flags |= lql::OpenFlags::READ_ONLY;
    }
    let conn = match lql::Connection::open_in_memory_with_flags(flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let mut session = Shell::new(conn, cli.format.unwrap_or(OutputMode::Table));
    // Ctrl-C interrupts the running statement in every mode (scripts and -c too): it reports
    // `interrupted` (JSON on stderr in the JSON modes), cleans its temporaries, and the run
    // stops with a non-zero exit.
    if let Err(e) = sigint::install(session.conn.interrupt_handle()) {
        eprintln!("warning: Ctrl-C handler not installed: {e}");
    }
    session
        .conn
        .set_progress_handler(Some(progress::handler_with(
            session.progress_quiet.clone(),
            session.progress_busy.clone(),
        )));
    session.color = stderr_tty && std::env::var_os("NO_COLOR").is_none();
    session.track_terminal_width = stdout_tty;
    session.width = if stdout_tty {
        comfy_table::Table::new().width()
    } else {
        None
    };
    session.headers = !cli.no_header;
    session.bail = cli.bail;
    session.echo = cli.echo;
    session.nullvalue = cli.nullvalue.clone();
    session.interactive = interactive;

    if let Some(model) = &model {
        session.progress_quiet.store(
            session.mode.json_errors(),
            std::sync::atomic::Ordering::SeqCst,
        );
        if let Err(e) = session.conn.bind(model) {
            session.report_error(&e, "model", model);
            return ExitCode::FAILURE;
        }
    }

    let mut stopped = false;
    for pre in &cli.pre {
        if !keep_going(session.bail, session.run_script(pre, "-cmd")) {
            stopped = true;
            break;
        }
    }

    if interactive && !stopped {
        let editor = repl::run(&mut session);
        let _ = finish(&mut session);
        // A person saw each error as it happened: only a failing editor fails the session.
        return match editor {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                session.report_message(&format!("lql: {e}"));
                ExitCode::FAILURE
            }
        };
    }

    let mut ran_any = false;
    if !stopped {
        for (i, input) in inputs.iter().enumerate() {
            ran_any = true;
            let outcome = match input {
                args::Input::Script(path) => {
                    let name = path.display().to_string();
                    match std::fs::read(path).map(String::from_utf8) {
                        Ok(Ok(text)) => session.run_script(&text, &name),
                        Ok(Err(_)) => {
                            session.report_message(&format!(
                                "{name}: not a UTF-8 text script (a model goes first on the command line)"
                            ));
                            Outcome::Failed
                        }
                        Err(e) => {
                            session.report_message(&format!("{name}: {e}"));
                            Outcome::Failed
                        }
                    }
                }
                args::Input::Sql(text) => {
                    let name = if inputs.len() == 1 {
                        "sql".to_string()
                    } else {
                        format!("argument {}", i + 1)
                    };
                    session.run_script(text, &name)
                }
            };
            if !keep_going(session.bail, outcome) {
                stopped = true;
                break;
            }
        }
    }
    if !stopped {
        for (i, text) in cli.command.iter().enumerate() {
            ran_any = true;
            let name = if cli.command.len() == 1 {
                "-c".to_string()
            } else {
                format!("-c #{}", i + 1)
            };
            if !keep_going(session.bail, session.run_script(text, &name)) {
                stopped = true;
                break;
            }
        }
    }
    if !stopped && !ran_any {
        let mut bytes = Vec::new();
        match std::io::stdin().read_to_end(&mut bytes) {
            Ok(_) => match String::from_utf8(bytes) {
                Ok(text) => {
                    session.run_script(&text, "stdin");
                }
                Err(_) => session.report_message("stdin: not UTF-8 text"),
            },
            Err(e) => session.report_message(&format!("reading stdin: {e}")),
        }
    }
    finish(&mut session)
}

/// Whether the run goes on after `outcome`: not after `.quit`, nor after a failure with
/// `bail` on.
fn keep_going(bail: bool, outcome: Outcome) -> bool {
    match outcome {
        Outcome::Ok => true,
        Outcome::Quit => false,
        Outcome::Failed => !bail,
    }
}

/// Ends any `.output` redirection and turns the session's failures into the exit code.
fn finish(session: &mut Shell) -> ExitCode {
    if let Err(msg) = session.end_redirect() {
        session.report_message(&msg);
    }
    if session.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
