//! `lazaret <profile> [-- cmd args...]` and `lazaret run --profile P [-- ...]`
//! (DX-1, spec 3.2): load the configuration, find or start the Domain's
//! Host Coordinator, run the command in the sandbox and exit with its status
//! (128+N when it was killed by signal N).
//!
//! When stdin and stdout are terminals the session is interactive (spec 3.4,
//! FR-14, FR-15, DX-5): the local terminal goes raw (restored on every exit
//! path), the Host Coordinator gives the command a PTY, and window changes
//! are sent as resizes. Ctrl-C, Ctrl-\ and Ctrl-Z typed locally are plain
//! bytes to the CLI; the Host Coordinator turns one into a signal for the
//! guest terminal's foreground group only when that terminal's settings
//! (`ISIG`, `VINTR`/`VQUIT`/`VSUSP`) say so (`lazaret_runtime::terminal::keys`).
//! Otherwise the session's stdio is piped (stdout and stderr kept separate
//! and streamed). Without a command the session runs `/bin/bash`.
use crate::report::errln;
use clap::{Args, Parser};
use lazaret_effects::config_resolve::{load_configuration, LoadError, LoadRequest};
use lazaret_effects::confined::ConfinedSys;
use lazaret_effects::coordinator::client::{
    fresh_session_id, run_session, ClientError, ClientTimings, JoinPlan, SessionAnchor, TerminalIo,
};
use lazaret_effects::coordinator::paths::DomainPaths;
use lazaret_effects::coordinator::COORDINATOR_SUBCOMMAND;
use lazaret_effects::terminal_mode::{RawModeGuard, RealTerm, TermSys, TerminalModeError};
use lazaret_runtime::config::{HostEnvironment, SandboxLayoutV1};
use lazaret_runtime::coordinator::messages::{InteractiveTerminal, SessionRequest, TerminalSize};
use lazaret_runtime::terminal::protocol::MAX_TERM_BYTES;
use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::Instant;

/// Host options of every launch form.
#[derive(Debug, Clone, Args)]
pub struct HostOptions {
    /// Agent Workspace directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Configuration file (default: $XDG_CONFIG_HOME/lazaret/config.toml,
    /// else ~/.config/lazaret/config.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<String>,
    /// Print per-phase launch timings to stderr.
    #[arg(long)]
    pub timings: bool,
    /// Show no image pull or unpack progress (shown only on a terminal).
    #[arg(long, short)]
    pub quiet: bool,
}

/// `lazaret run PROFILE [...]` or `lazaret run --profile PROFILE [...]`: the
/// explicit launch form, which also reaches a profile named like one of
/// Lazaret's commands (spec README decision "Command names and profile
/// names").
#[derive(Debug, Args)]
pub struct RunCommand {
    /// The profile to launch (required; never inferred).
    #[arg(
        value_name = "PROFILE",
        required_unless_present = "profile_option",
        conflicts_with = "profile_option"
    )]
    profile: Option<String>,
    /// The profile to launch, as an option.
    #[arg(long = "profile", value_name = "PROFILE")]
    profile_option: Option<String>,
    #[command(flatten)]
    host: HostOptions,
    /// The command to run in the sandbox (default: /bin/bash).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

impl RunCommand {
    /// The launch it asks for (clap guarantees exactly one profile form).
    pub fn into_args(self) -> RunArgs {
        RunArgs {
            profile: self.profile.or(self.profile_option).unwrap_or_default(),
            host: self.host,
            command: self.command,
        }
    }
}

/// One launch: the profile, host options and the exact argv.
#[derive(Debug)]
pub struct RunArgs {
    pub profile: String,
    pub host: HostOptions,
    pub command: Vec<String>,
}

/// `lazaret <profile> [host options] [-- cmd...]`, parsed after clap hands
/// over an unknown first word.
#[derive(Debug, Parser)]
#[command(name = "lazaret", no_binary_name = true)]
struct ProfileForm {
    /// The profile to launch.
    profile: String,
    #[command(flatten)]
    host: HostOptions,
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

impl RunArgs {
    /// Parses the external-subcommand form (`lazaret default -- true`).
    pub fn from_profile_form(argv: &[OsString]) -> Result<Self, clap::Error> {
        let form = ProfileForm::try_parse_from(argv)?;
        Ok(Self {
            profile: form.profile,
            host: form.host,
            command: form.command,
        })
    }
}

/// What this host is (behind a trait so the refusals are tested for any
/// host, youki style).
pub trait HostFacts {
    fn uid(&self) -> u32;
    fn arch(&self) -> String;
    fn kernel_release(&self) -> String;
}

#[derive(Debug)]
pub struct RealHostFacts;

impl HostFacts for RealHostFacts {
    fn uid(&self) -> u32 {
        rustix::process::getuid().as_raw()
    }
    fn arch(&self) -> String {
        std::env::consts::ARCH.to_owned()
    }
    fn kernel_release(&self) -> String {
        rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("lazaret refuses to run as root (uid 0); run it as the user it acts for (spec SR-1)")]
    Root,
    #[error("lazaret runs only on x86-64 Linux; this machine is {0}")]
    Arch(String),
    #[error("lazaret needs Linux 6.9 or newer (pidfs process identity); this kernel is {0}")]
    Kernel(String),
    #[error("the sandbox layout could not be constructed: {0}")]
    Layout(String),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("cannot locate the lazaret binary: {0}")]
    SelfExe(std::io::Error),
    #[error("cannot make the session's Session Anchor key: {0}")]
    SessionAnchor(std::io::Error),
    #[error("cannot draw the session's Session ID: {0}")]
    SessionId(std::io::Error),
    #[error(transparent)]
    Session(#[from] ClientError),
    #[error("the image: {0}")]
    Image(#[source] Box<lazaret_effects::prepare::obtain::ObtainError>),
    #[error("the local terminal: {0}")]
    Terminal(#[from] TerminalModeError),
    #[error("cannot watch the local terminal's window size: {0}")]
    Watch(std::io::Error),
}

/// An interactive session's local side: raw mode for as long as it lives,
/// and the window sizes to send.
struct LocalTerminal {
    guard: RawModeGuard,
    initial: TerminalSize,
    resizes: Receiver<TerminalSize>,
}

fn cells(ws: rustix::termios::Winsize) -> TerminalSize {
    TerminalSize {
        rows: ws.ws_row,
        columns: ws.ws_col,
    }
}

/// Enters raw mode on stdin and starts turning window changes (SIGWINCH,
/// and SIGCONT after a local suspension) into sizes.
fn local_terminal(term: Arc<dyn TermSys>) -> Result<LocalTerminal, LaunchError> {
    let stdin = std::io::stdin();
    let mut guard = RawModeGuard::enter(Arc::clone(&term), stdin.as_fd())?;
    let initial = cells(guard.window_size()?);
    let events = guard.watch_signals()?;
    let fd = rustix::io::fcntl_dupfd_cloexec(stdin.as_fd(), 0)
        .map_err(|e| LaunchError::Watch(e.into()))?;
    let (tx, resizes) = mpsc::channel();
    std::thread::Builder::new()
        .name("window-size".into())
        .spawn(move || {
            for _changed in events {
                let Ok(ws) = term.window_size(fd.as_fd()) else {
                    continue;
                };
                if tx.send(cells(ws)).is_err() {
                    return;
                }
            }
        })
        .map_err(LaunchError::Watch)?;
    Ok(LocalTerminal {
        guard,
        initial,
        resizes,
    })
}

fn kernel_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    found >= (major, minor)
}

/// SR-1, architecture and kernel refusals, before anything else happens.
pub fn preflight(facts: &dyn HostFacts) -> Result<(), LaunchError> {
    if facts.uid() == 0 {
        return Err(LaunchError::Root);
    }
    let arch = facts.arch();
    if arch != "x86_64" {
        return Err(LaunchError::Arch(arch));
    }
    let release = facts.kernel_release();
    if !kernel_at_least(&release, 6, 9) {
        return Err(LaunchError::Kernel(release));
    }
    Ok(())
}

fn print_timings(config_load: std::time::Duration, t: &ClientTimings, total: std::time::Duration) {
    let mut line = format!(
        "lazaret: timings ({}): config_load {:.1} ms",
        if t.cold { "cold" } else { "join" },
        config_load.as_secs_f64() * 1e3
    );
    for (name, d) in &t.phases {
        line.push_str(&format!(", {name} {:.1} ms", d.as_secs_f64() * 1e3));
    }
    for (name, us) in &t.coordinator {
        line.push_str(&format!(", hc.{name} {:.1} ms", *us as f64 / 1e3));
    }
    line.push_str(&format!(", total {:.1} ms", total.as_secs_f64() * 1e3));
    errln!("{line}");
}

/// Runs a launch form; the exit code is the command's.
pub fn run(
    args: &RunArgs,
    facts: &dyn HostFacts,
    sys: &dyn ConfinedSys,
    env: &dyn HostEnvironment,
) -> Result<ExitCode, LaunchError> {
    let started = Instant::now();
    preflight(facts)?;
    // `lazaret state` is the maintenance command (clap routes it there); a
    // profile named `state` launches through `lazaret run --profile state`
    // (spec 3.2).
    let layout = SandboxLayoutV1::production().map_err(|e| LaunchError::Layout(e.to_string()))?;
    let workspace = args
        .host
        .workspace
        .clone()
        .unwrap_or_else(|| PathBuf::from("."));
    let request = LoadRequest {
        profile: &args.profile,
        config: args.host.config.as_deref(),
        workspace: &workspace,
        env,
        layout: &layout,
    };
    let config = load_configuration(sys, &request)?;
    let config_load = started.elapsed();
    let canonical = config.workspace().label();
    let program = std::env::current_exe().map_err(LaunchError::SelfExe)?;
    let mut coordinator: Vec<OsString> = vec![
        program.into(),
        COORDINATOR_SUBCOMMAND.into(),
        "--profile".into(),
        args.profile.clone().into(),
        "--workspace".into(),
        canonical.into(),
    ];
    if let Some(c) = &args.host.config {
        coordinator.extend(["--config".into(), c.into()]);
    }
    let argv = if args.command.is_empty() {
        vec!["/bin/bash".to_owned()]
    } else {
        args.command.clone()
    };
    let session_anchor = SessionAnchor::generate().map_err(LaunchError::SessionAnchor)?;
    let mut plan = JoinPlan {
        paths: DomainPaths::new(
            &config.runtime_domain_root().label(),
            &config.storage_domain_root().label(),
        ),
        request: SessionRequest {
            session_id: fresh_session_id().map_err(LaunchError::SessionId)?,
            domain_id: config.domain_id().0,
            fingerprint: config.fingerprint().0,
            argv,
            terminal: None,
            session_anchor: session_anchor.public_key(),
        },
        session_anchor,
        coordinator,
    };
    // On a terminal, a launch that will start its Domain shows the image's
    // pull and unpack here, and the Host Coordinator then finds both done
    // (spec 3.6 "Prepared lower"). A running Domain (its socket exists)
    // keeps the image it started with: nothing is fetched for a join.
    if !args.host.quiet && std::io::stderr().is_terminal() && !plan.paths.socket().exists() {
        crate::cmd_image::obtain_with_progress(
            &config.storage_root().label(),
            config.selected().image().image_ref(),
            true,
        )
        .map_err(|e| LaunchError::Image(Box::new(e)))?;
    }
    drop(config);
    let interactive = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let local = if interactive {
        let local = local_terminal(Arc::new(RealTerm))?;
        // A `TERM` the protocol cannot carry (empty, over 256 bytes, or
        // not printable ASCII) is left unset in the sandbox.
        let term = std::env::var("TERM").ok().filter(|term| {
            !term.is_empty()
                && term.len() <= MAX_TERM_BYTES
                && term.bytes().all(|b| b.is_ascii_graphic())
        });
        plan.request.terminal = Some(InteractiveTerminal {
            size: local.initial,
            term,
        });
        Some(local)
    } else {
        None
    };
    let (guard, terminal) = match local {
        Some(l) => (
            Some(l.guard),
            Some(TerminalIo {
                resizes: l.resizes,
                echo: Box::new(std::io::stdout()),
            }),
        ),
        None => (None, None),
    };
    let result = run_session(
        &plan,
        Box::new(std::io::stdin()),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
        terminal,
    );
    // DX-5: the terminal is restored before anything else is printed.
    drop(guard);
    let (status, timings) = result?;
    if args.host.timings {
        print_timings(config_load, &timings, started.elapsed());
    }
    Ok(ExitCode::from(status.exit_code()))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Facts(u32, &'static str, &'static str);
    impl HostFacts for Facts {
        fn uid(&self) -> u32 {
            self.0
        }
        fn arch(&self) -> String {
            self.1.to_owned()
        }
        fn kernel_release(&self) -> String {
            self.2.to_owned()
        }
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        assert!(matches!(
            preflight(&Facts(0, "x86_64", "6.18.1")),
            Err(LaunchError::Root)
        ));
        assert!(matches!(
            preflight(&Facts(1000, "aarch64", "6.18.1")),
            Err(LaunchError::Arch(a)) if a == "aarch64"
        ));
        assert!(matches!(
            preflight(&Facts(1000, "x86_64", "6.8.12-generic")),
            Err(LaunchError::Kernel(k)) if k == "6.8.12-generic"
        ));
        assert!(matches!(
            preflight(&Facts(1000, "x86_64", "5.15.0")),
            Err(LaunchError::Kernel(_))
        ));
        assert!(preflight(&Facts(1000, "x86_64", "6.9.0")).is_ok());
        assert!(preflight(&Facts(1000, "x86_64", "6.18.44-fc-v595")).is_ok());
        assert!(preflight(&Facts(1000, "x86_64", "7.0")).is_ok());
    }

    #[test]
    fn the_profile_form_takes_host_options_and_the_exact_argv() -> Result<(), clap::Error> {
        let argv: Vec<OsString> = [
            "dev",
            "--workspace",
            "/w",
            "--timings",
            "--",
            "sh",
            "-c",
            "exit 7",
        ]
        .map(OsString::from)
        .to_vec();
        let args = RunArgs::from_profile_form(&argv)?;
        assert_eq!(args.profile, "dev");
        assert_eq!(args.host.workspace, Some(PathBuf::from("/w")));
        assert!(args.host.timings);
        assert_eq!(args.command, vec!["sh", "-c", "exit 7"]);
        let bare = RunArgs::from_profile_form(&[OsString::from("dev")])?;
        assert!(bare.command.is_empty());
        Ok(())
    }
}
