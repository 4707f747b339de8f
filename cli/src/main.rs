//! The `lazaret` command.
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd_config;

/// Lazaret: a rootless gVisor sandbox for AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "lazaret", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check or create the trusted host configuration.
    Config(cmd_config::ConfigArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Config(args) => cmd_config::run(
            &args,
            &lazaret_effects::confined::RealSys,
            &lazaret_effects::process_env::ProcessEnvironment,
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("lazaret: error: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
