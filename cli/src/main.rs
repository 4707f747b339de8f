//! The `lazaret` command.
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd_config;
mod cmd_doctor;
mod cmd_internal_wrapper;
mod cmd_state;

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
    /// Internal: the launch-barrier wrapper every Lazaret-owned child is
    /// spawned through (spec 3.3 step 3). Not for direct use.
    #[command(name = lazaret_effects::broker::wrapper::WRAPPER_SUBCOMMAND, hide = true)]
    InternalWrapper(cmd_internal_wrapper::WrapperCommand),
    /// Check that this host can run Lazaret; print each problem with its fix.
    Doctor,
    /// Show what a Domain holds durably: generations, participants, process
    /// slots, sessions and terminals (read-only; spec 3.9).
    State(cmd_state::StateCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::InternalWrapper(args) => return cmd_internal_wrapper::run(args),
        Command::State(args) => return cmd_state::run(args),
        Command::Doctor => return cmd_doctor::run(&lazaret_effects::doctor::RealDoctorHost),
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
#[allow(clippy::expect_used)] // tests fail by panicking
mod tests {
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }

    /// SR-1: a command acting for a user refuses uid 0, decided through the
    /// kernel-call trait so it holds whoever runs the test.
    #[test]
    fn config_commands_refuse_uid_zero() {
        use clap::Parser;
        use lazaret_effects::confined::{RealSys, RecordingSys, UserIds};
        let env = std::collections::BTreeMap::new();
        for argv in [
            &["lazaret", "config", "check", "dev"][..],
            &["lazaret", "config", "init"][..],
        ] {
            let cli = super::Cli::try_parse_from(argv).expect("parse");
            let super::Command::Config(args) = cli.command else {
                panic!("{argv:?} did not parse as a config command");
            };
            let sys = RecordingSys::new(RealSys);
            sys.impersonate(UserIds {
                uid: 0,
                gid: 0,
                groups: vec![],
            });
            let err = super::cmd_config::run(&args, &sys, &env).expect_err("root");
            assert!(
                matches!(err, super::cmd_config::ConfigCommandError::Root),
                "{err}"
            );
            // Nothing but the identity query happened.
            assert_eq!(sys.calls().len(), 1, "{:?}", sys.calls());
        }
    }
}
