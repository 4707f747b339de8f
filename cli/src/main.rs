//! The `lazaret` command.
mod cmd_internal_wrapper;
mod cmd_state;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Lazaret: a rootless gVisor sandbox for AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "lazaret", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Internal: the launch-barrier wrapper every Lazaret-owned child is
    /// spawned through (spec 3.3 step 3). Not for direct use.
    #[command(name = lazaret_effects::broker::wrapper::WRAPPER_SUBCOMMAND, hide = true)]
    InternalWrapper(cmd_internal_wrapper::WrapperCommand),
    /// Show what a Domain holds durably: generations, participants, process
    /// slots, sessions and terminals (read-only; spec 3.9).
    State(cmd_state::StateCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::InternalWrapper(args)) => cmd_internal_wrapper::run(args),
        Some(Command::State(args)) => cmd_state::run(args),
        None => ExitCode::SUCCESS,
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
