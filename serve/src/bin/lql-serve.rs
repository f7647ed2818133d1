//! `lql-serve MODEL [flags]`: the same server as `lql serve`, as its own binary (the
//! crate's process-level tests and the load script start it).

use std::process::ExitCode;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "lql-serve",
    about = "Serve a model over HTTP (OpenAI-compatible API and LQL)"
)]
struct Cli {
    #[command(flatten)]
    args: lql_serve::ServeArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match lql_serve::run(&cli.args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lql serve: {e}");
            ExitCode::FAILURE
        }
    }
}
