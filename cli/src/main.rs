//! The `lazaret` command.
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd_model;
mod cmd_trace;

/// Lazaret: a rootless gVisor sandbox for AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "lazaret", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Model traces.
    #[command(subcommand)]
    Trace(cmd_trace::TraceCmd),
    /// The TLA+ models, as generated Rust.
    #[command(subcommand)]
    Model(cmd_model::ModelCmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Trace(c)) => cmd_trace::run(c),
        Some(Command::Model(c)) => cmd_model::run(c),
        None => ExitCode::SUCCESS,
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        super::Cli::command().debug_assert();
    }
}
