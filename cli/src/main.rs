//! The `lazaret` command.
use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod cmd_doctor;

/// Lazaret: a rootless gVisor sandbox for AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "lazaret", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check that this host can run Lazaret; print each problem with its fix.
    Doctor,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Doctor) => cmd_doctor::run(&lazaret_effects::doctor::RealDoctorHost),
        None => ExitCode::SUCCESS,
    }
}
