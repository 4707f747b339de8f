//! The `lazaret` command.
use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd_config;
mod cmd_doctor;
mod cmd_image;
mod cmd_internal_roles;
mod cmd_internal_wrapper;
mod cmd_launch;
mod cmd_model;
mod cmd_state;
mod cmd_trace;
mod report;

use lazaret_effects::broker::wrapper::WRAPPER_SUBCOMMAND;
use report::errln;

/// Lazaret: a rootless gVisor sandbox for AI coding agents.
///
/// `lazaret <profile> [--workspace DIR] [--config FILE] [-- cmd args...]`
/// runs cmd (default /bin/bash) in the profile's sandbox on the workspace.
#[derive(Debug, Parser)]
#[command(
    name = "lazaret",
    version,
    after_help = "A profile named like a command (config, doctor, help, model, run, state, \
                  trace) is launched with `lazaret run NAME` or `lazaret run --profile NAME`; \
                  `lazaret config check NAME` warns about it."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check or create the trusted host configuration.
    Config(cmd_config::ConfigArgs),
    /// Check that this host can run Lazaret; print each problem with its fix.
    /// With `--network PROFILE`: probe the profile's `readiness` targets
    /// from inside its sandbox.
    Doctor(cmd_doctor::DoctorArgs),
    /// Run a command in a profile's sandbox (same as `lazaret <profile>`;
    /// the form for a profile named like a command).
    Run(cmd_launch::RunCommand),
    /// Images: pull one into the blob store (`lazaret image pull REF`).
    Image(cmd_image::ImageArgs),
    /// Check or replay model traces (`lazaret trace replay FILE`).
    #[command(subcommand)]
    Trace(cmd_trace::TraceCmd),
    /// The TLA+ models as generated Rust: check, simulate.
    #[command(subcommand)]
    Model(cmd_model::ModelCmd),
    /// Show what a Domain holds durably: generations, participants, process
    /// slots, sessions and terminals (read-only; spec 3.9).
    State(cmd_state::StateCommand),
    /// Internal: the Domain's Host Coordinator.
    #[command(name = lazaret_effects::coordinator::COORDINATOR_SUBCOMMAND, hide = true)]
    InternalCoordinator(cmd_internal_roles::CoordinatorCommand),
    /// Internal: the generation's Runtime Supervisor.
    #[command(name = lazaret_effects::coordinator::SUPERVISOR_SUBCOMMAND, hide = true)]
    InternalSupervisor(cmd_internal_roles::SupervisorCommand),
    /// Internal: a routed Domain's routing daemon.
    #[command(name = lazaret_effects::coordinator::git_routing::GIT_ROUTING_SUBCOMMAND, hide = true)]
    InternalGitRouting(cmd_internal_roles::GitRoutingCommand),
    /// Internal: an exec client entering the supervisor's namespaces.
    #[command(name = lazaret_effects::coordinator::ENTER_SUBCOMMAND, hide = true)]
    InternalEnter(cmd_internal_roles::EnterCommand),
    /// Internal: the supervisor an escalation host command runs under.
    #[command(name = lazaret_effects::escalation::subreaper::HOST_COMMAND_SUBCOMMAND, hide = true)]
    InternalHostProcess(cmd_internal_roles::HostCommandCommand),
    /// Internal: the removal worker of `lazaret state reset` and `gc`.
    #[command(name = lazaret_effects::tree_removal::REMOVE_SUBCOMMAND, hide = true)]
    InternalRemoveTree(cmd_internal_roles::RemoveTreeCommand),
    /// Internal: the mount-point worker of a preparation.
    #[command(name = lazaret_effects::prepare::mount_points::MOUNT_POINTS_SUBCOMMAND, hide = true)]
    InternalMountPoints(cmd_internal_roles::MountPointsCommand),
    /// `lazaret <profile> ...`
    #[command(external_subcommand)]
    Profile(Vec<OsString>),
}

/// The first words that are Lazaret's own commands (`help` included), so
/// `lazaret NAME` never launches a profile of that name (spec README decision
/// "Command names and profile names").
pub(crate) fn command_names() -> Vec<String> {
    use clap::CommandFactory;
    let mut names: Vec<String> = Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "profile")
        .map(|c| c.get_name().to_owned())
        .collect();
    names.push("help".to_owned());
    names.sort();
    names.dedup();
    names
}

fn launch(args: &cmd_launch::RunArgs) -> ExitCode {
    match cmd_launch::run(
        args,
        &cmd_launch::RealHostFacts,
        &lazaret_effects::confined::RealSys,
        &lazaret_effects::process_env::ProcessEnvironment,
    ) {
        Ok(code) => code,
        Err(error) => {
            errln!("lazaret: error: {error}");
            // Distinct from any command status the sandbox can report.
            ExitCode::from(125)
        }
    }
}

fn main() -> ExitCode {
    // The launch-barrier wrapper (spec 3.3 step 3) starts on every session
    // start's critical path, and its arguments have a grammar of their own
    // (`WrapperArgs`): the whole command line's parser is not built for it.
    let mut argv = std::env::args_os();
    if argv.nth(1).as_deref() == Some(std::ffi::OsStr::new(WRAPPER_SUBCOMMAND)) {
        return cmd_internal_wrapper::run(&argv.collect::<Vec<_>>());
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::State(args) => return cmd_state::run(args),
        Command::Trace(c) => return cmd_trace::run(c),
        Command::Model(c) => return cmd_model::run(c),
        Command::InternalCoordinator(args) => return cmd_internal_roles::coordinator(args),
        Command::InternalSupervisor(args) => return cmd_internal_roles::supervisor(args),
        Command::InternalEnter(args) => return cmd_internal_roles::enter(args),
        Command::InternalHostProcess(args) => return cmd_internal_roles::host_command(args),
        Command::InternalGitRouting(args) => return cmd_internal_roles::git_routing(args),
        Command::InternalRemoveTree(args) => return cmd_internal_roles::remove_tree(args),
        Command::InternalMountPoints(args) => return cmd_internal_roles::mount_points(args),
        Command::Doctor(args) => {
            return match &args.network {
                Some(profile) => cmd_doctor::network(
                    profile,
                    &args,
                    &lazaret_effects::confined::RealSys,
                    &lazaret_effects::process_env::ProcessEnvironment,
                ),
                None => cmd_doctor::run(&lazaret_effects::doctor::RealDoctorHost),
            }
        }
        Command::Run(args) => return launch(&args.into_args()),
        Command::Profile(argv) => match cmd_launch::RunArgs::from_profile_form(&argv) {
            Ok(args) => return launch(&args),
            Err(e) => e.exit(),
        },
        Command::Image(args) => {
            return match cmd_image::run(&args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    errln!("lazaret: error: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Config(args) => cmd_config::run(
            &args,
            &lazaret_effects::confined::RealSys,
            &lazaret_effects::process_env::ProcessEnvironment,
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            errln!("lazaret: error: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)] // tests fail by panicking
mod tests {
    use clap::CommandFactory;

    /// Spec 3.2: `state` is the maintenance command; a profile named
    /// `state` is launched through the explicit form.
    #[test]
    fn state_is_the_maintenance_command_and_run_launches_a_state_profile() {
        use clap::Parser;
        let cli = super::Cli::try_parse_from(["lazaret", "state", "--domain-root", "/x"])
            .expect("state parses");
        assert!(matches!(cli.command, super::Command::State(_)));
        // Spec 3.9: `state reset` names one persistent path or --all, not
        // both; a profile named `reset` is shown after `--`.
        for argv in [
            &["lazaret", "state", "reset", "dev", "/usr", "--yes"][..],
            &["lazaret", "state", "reset", "dev", "--all"][..],
            &["lazaret", "state", "--", "reset"][..],
        ] {
            let cli = super::Cli::try_parse_from(argv).expect("state parses");
            assert!(matches!(cli.command, super::Command::State(_)), "{argv:?}");
        }
        for argv in [
            &["lazaret", "state", "reset", "dev"][..],
            &["lazaret", "state", "reset", "dev", "/usr", "--all"][..],
            &["lazaret", "state", "reset", "--yes"][..],
        ] {
            assert!(super::Cli::try_parse_from(argv).is_err(), "{argv:?}");
        }
        for argv in [
            &["lazaret", "run", "--profile", "state"][..],
            &["lazaret", "run", "state"][..],
        ] {
            let cli = super::Cli::try_parse_from(argv).expect("run parses");
            let super::Command::Run(args) = cli.command else {
                panic!("{argv:?} did not parse as a launch");
            };
            assert_eq!(args.into_args().profile, "state");
        }
        let cli = super::Cli::try_parse_from(["lazaret", "run", "doctor", "--", "sh", "-c", "x"])
            .expect("run parses");
        let super::Command::Run(args) = cli.command else {
            panic!("`run doctor -- ...` did not parse as a launch");
        };
        let args = args.into_args();
        assert_eq!((args.profile.as_str(), args.command.len()), ("doctor", 3));
        // Exactly one form: neither, or both, is refused.
        assert!(super::Cli::try_parse_from(["lazaret", "run"]).is_err());
        assert!(super::Cli::try_parse_from(["lazaret", "run", "a", "--profile", "b"]).is_err());
    }

    /// The shadowed names are every visible command and `help`, never a
    /// hidden internal role.
    #[test]
    fn command_names_are_the_visible_commands_and_help() {
        assert_eq!(
            super::command_names(),
            ["config", "doctor", "help", "image", "model", "run", "state", "trace"]
        );
    }

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
