//! `lql`: the LQL shell.
//!
//! - `lql` on a terminal: the interactive REPL.
//! - `lql FILE.lql …`: runs scripts; `lql -c "…"`: runs statements; statements on stdin are
//!   read when stdin is not a terminal. The first error stops the run with exit code 1 and
//!   the rendered error on stderr (one JSON line with `--format json`).
//! - `lql bench MODEL`: decode/prefill speed of the CPU backend.
//! - `lql serve MODEL`: the HTTP server of `lql-serve` (OpenAI-compatible API, LQL over HTTP).

mod bench;
mod dot;
mod history;
mod progress;
mod render;
mod repl;
mod session;
mod sigint;

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use render::OutputMode;
use session::{Outcome, Session};

#[derive(Parser, Debug)]
#[command(
    name = "lql",
    version,
    about = "LQL: query a language model like a database",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,

    /// Script files to run in order (statements and dot-commands)
    files: Vec<PathBuf>,

    /// Statements to run (after any script files)
    #[arg(short = 'c', long = "command", value_name = "STATEMENTS")]
    command: Vec<String>,

    /// Output format
    #[arg(long, short = 'f', value_name = "table|json|jsonl|csv|line", value_parser = parse_mode)]
    format: Option<OutputMode>,

    /// Bind this model before the first statement (a path, or a catalogue name)
    #[arg(long, short = 'm', value_name = "PATH|NAME")]
    model: Option<String>,
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
    Serve(lql_serve::ServeArgs),
}

fn parse_mode(s: &str) -> Result<OutputMode, String> {
    s.parse()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Cmd::Bench {
        model,
        threads,
        reps,
        json,
    }) = &cli.cmd
    {
        return bench::run(model, *threads, *reps, *json);
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

    let stdin_tty = std::io::stdin().is_terminal();
    let stdout_tty = std::io::stdout().is_terminal();
    let stderr_tty = std::io::stderr().is_terminal();
    let interactive = cli.files.is_empty() && cli.command.is_empty() && stdin_tty;

    let conn = match lql::Connection::open_in_memory() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    conn.set_progress_handler(Some(progress::handler()));
    let mut session = Session::new(conn, cli.format.unwrap_or(OutputMode::Table));
    session.color = stderr_tty && std::env::var_os("NO_COLOR").is_none();
    session.track_terminal_width = stdout_tty;
    session.width = if stdout_tty {
        comfy_table::Table::new().width()
    } else {
        None
    };

    if let Some(model) = &cli.model {
        if let Err(e) = session.conn.bind(model) {
            session.report_error(&e, "--model", model);
            return ExitCode::FAILURE;
        }
    }

    if interactive {
        return match repl::run(&mut session) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lql: {e}");
                ExitCode::FAILURE
            }
        };
    }

    let mut outcome = Outcome::Ok;
    for file in &cli.files {
        let name = file.display().to_string();
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => {
                session.report_error(&lql::Error::io(format!("{name}: {e}")), &name, "");
                return ExitCode::FAILURE;
            }
        };
        outcome = session.run_script(&text, &name);
        if outcome != Outcome::Ok {
            break;
        }
    }
    if outcome == Outcome::Ok {
        for (i, text) in cli.command.iter().enumerate() {
            let name = if cli.command.len() == 1 {
                "-c".to_string()
            } else {
                format!("-c #{}", i + 1)
            };
            outcome = session.run_script(text, &name);
            if outcome != Outcome::Ok {
                break;
            }
        }
    }
    if outcome == Outcome::Ok && cli.files.is_empty() && cli.command.is_empty() {
        let mut text = String::new();
        if let Err(e) = std::io::stdin().read_to_string(&mut text) {
            session.report_error(&lql::Error::io(format!("reading stdin: {e}")), "stdin", "");
            return ExitCode::FAILURE;
        }
        outcome = session.run_script(&text, "stdin");
    }
    match outcome {
        Outcome::Failed => ExitCode::FAILURE,
        Outcome::Ok | Outcome::Quit => ExitCode::SUCCESS,
    }
}
