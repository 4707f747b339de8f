//! The `lazaret` command.
use clap::Parser;

/// Lazaret: a rootless gVisor sandbox for AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "lazaret", version)]
struct Cli {}

fn main() {
    let _cli = Cli::parse();
}
