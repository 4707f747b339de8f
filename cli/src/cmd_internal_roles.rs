//! The hidden role subcommands of the process chain: `__coordinator` (the
//! Host Coordinator), `__supervisor` (the Runtime Supervisor),
//! `__git-routing` (a routed Domain's routing daemon) and `__enter` (what
//! an exec client runs as before it becomes `runsc exec`), and the
//! removal worker of `lazaret state reset` and `lazaret state gc`
//! (`__remove-tree`), and the preparation's mount-point worker
//! (`__mount-points`).
use crate::report::errln;
use clap::Args;
use lazaret_effects::coordinator::enter::{run_enter, EnterArgs, EnterError};
use lazaret_effects::coordinator::git_routing::{run_git_routing, GitRoutingError, RoutingArgs};
use lazaret_effects::coordinator::host::{
    run_coordinator, CoordinatorArgs, Outcome, SandboxBinaries,
};
use lazaret_effects::coordinator::nsys::RealNs;
use lazaret_effects::coordinator::supervisor::run_supervisor;
use lazaret_effects::coordinator::LOST_LOCK_EXIT;
use lazaret_effects::inherited_fd::take_inherited;
use lazaret_effects::network::authority::RealAuthority;
use lazaret_effects::process_env::ProcessEnvironment;
use lazaret_effects::process_identity::real::RealProcessSys;
use lazaret_runtime::display::escape_line;
use std::ffi::OsString;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

/// The static PID 1 built by build.rs.
pub static INIT_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lazaret-init"));
/// The static guest observation and signal tool (cli/init/lazaret_guest.rs),
/// bound next to it.
pub static GUEST_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lazaret-guest"));
/// The static network probe (cli/init/lazaret_probe.rs), bound next to it.
pub static PROBE_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lazaret-probe"));
/// The static Escalation Client (the `lazaret-escalate` package), bound
/// next to it.
pub static ESCALATE_BINARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/lazaret-escalate"));

#[derive(Debug, Args)]
pub struct CoordinatorCommand {
    #[arg(long)]
    profile: String,
    #[arg(long)]
    workspace: PathBuf,
    #[arg(long)]
    config: Option<String>,
}

/// Filter directives that keep registry credentials out of the log.
const NO_HTTP_HEADS: &str = "ureq_proto=off";
const HTTP_CLIENT_AT_MOST_DEBUG: &str = "ureq=debug";

/// The internal roles' diagnostics: `tracing` events on stderr (the Host
/// Coordinator's goes to the Domain's `coordinator.log`, whose tail a CLI
/// shows when the coordinator fails), at the level `LAZARET_LOG` names
/// (an `EnvFilter` directive; default `warn`). Timestamps are seconds since
/// the process started. The HTTP client's own request logging is always
/// off and its other logging at most `debug`: its `trace` level writes
/// request heads, `Authorization` included.
fn init_diagnostics() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LAZARET_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"))
        .add_directive(NO_HTTP_HEADS.parse().unwrap_or_default())
        .add_directive(HTTP_CLIENT_AT_MOST_DEBUG.parse().unwrap_or_default());
    let _already = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_timer(tracing_subscriber::fmt::time::uptime())
        .with_ansi(false)
        .try_init();
}

pub fn coordinator(args: CoordinatorCommand) -> ExitCode {
    init_diagnostics();
    let args = CoordinatorArgs {
        profile: args.profile,
        config: args.config,
        workspace: args.workspace,
    };
    let binaries = SandboxBinaries {
        init: INIT_BINARY,
        guest: GUEST_BINARY,
        probe: PROBE_BINARY,
        escalate: ESCALATE_BINARY,
    };
    match run_coordinator(&args, &ProcessEnvironment, binaries) {
        Ok(Outcome::LostLock) => ExitCode::from(LOST_LOCK_EXIT),
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("lazaret __coordinator: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Args)]
pub struct SupervisorCommand {
    /// The inherited lifetime channel to the Host Coordinator.
    #[arg(long)]
    channel_fd: RawFd,
    /// The inherited write-sealed memfd holding the derived network policy
    /// (spec 3.7 "Policy transport").
    #[arg(long)]
    policy_fd: RawFd,
}

/// Takes ownership of an inherited descriptor named by `flag`, or says
/// which flag named a descriptor that is not open.
fn inherited(flag: &str, raw: RawFd) -> Result<OwnedFd, ExitCode> {
    take_inherited(raw).map_err(|e| {
        errln!("lazaret __supervisor: {flag} {e}");
        ExitCode::from(2)
    })
}

pub fn supervisor(args: SupervisorCommand) -> ExitCode {
    init_diagnostics();
    if args.channel_fd == args.policy_fd {
        errln!("lazaret __supervisor: --channel-fd and --policy-fd name the same descriptor");
        return ExitCode::from(2);
    }
    let channel = match inherited("--channel-fd", args.channel_fd) {
        Ok(fd) => fd,
        Err(code) => return code,
    };
    let policy = match inherited("--policy-fd", args.policy_fd) {
        Ok(fd) => fd,
        Err(code) => return code,
    };
    match run_supervisor(&RealNs, UnixStream::from(channel), policy) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("lazaret __supervisor: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Args)]
pub struct GitRoutingCommand {
    /// --workspace P --isolated P --router-at P [--common P --git-dir P
    /// --filter-at P] [--editor-dir P]... --ready-fd N --exit-fd N
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

pub fn git_routing(command: GitRoutingCommand) -> ExitCode {
    git_routing_with(&command.args)
}

/// The routing daemon (spec 3.5) on its arguments (after the subcommand
/// name): also run in place by a released `__wrapper` whose target is
/// `lazaret __git-routing`. Its errors go to the Runtime Supervisor's
/// stderr, the coordinator's log.
pub fn git_routing_with(argv: &[OsString]) -> ExitCode {
    init_diagnostics();
    let served = RoutingArgs::parse(argv)
        .map_err(GitRoutingError::from)
        .and_then(|args| run_git_routing(&RealNs, &RealAuthority, &args));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("lazaret __git-routing: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Args)]
pub struct EnterCommand {
    /// --pid N --dev N --ino N --stdio A,B,C -- TARGET...
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

pub fn enter(command: EnterCommand) -> ExitCode {
    enter_with(&command.args)
}

/// `__enter`'s work on its arguments (after the subcommand name): also run
/// in place by a released `__wrapper` whose target is `lazaret __enter`.
/// Returns only on failure (exit status 126).
pub fn enter_with(argv: &[std::ffi::OsString]) -> ExitCode {
    let args = match EnterArgs::parse(argv) {
        Ok(args) => args,
        Err(e) => {
            errln!("lazaret __enter: {e}");
            return ExitCode::from(126);
        }
    };
    let failure = run_enter(&RealProcessSys, &RealNs, &args);
    // One escaped line (spec README 'Terminal output hygiene'): it names
    // paths, and the copy below reaches the user as session output.
    let message = escape_line(&format!("lazaret __enter: {failure}")).into_owned();
    errln!("{message}");
    // Until the session pipes are on stdio (a failed exec is the only
    // failure after that), stderr is the coordinator's log: the session's
    // own stderr gets the message too, so its CLI shows why the command did
    // not run (docs/crash-points.md: RS lost right after the sandbox ran).
    if !matches!(failure, EnterError::Exec { .. }) {
        // SAFETY: the descriptor was inherited from the Host Coordinator as
        // this session's stderr and stays open for this process's life; the
        // borrow ends with this call.
        let session_stderr = unsafe { BorrowedFd::borrow_raw(args.stdio[2]) };
        let _ = rustix::io::write(session_stderr, format!("{message}\n").as_bytes());
    }
    ExitCode::from(126)
}

/// `lazaret __host-command --executable-fd N -- ARGV0 ARGS...`.
#[derive(Debug, Args)]
pub struct HostCommandCommand {
    /// --executable-fd N -- ARGV0 ARGS...
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<std::ffi::OsString>,
}

/// Runs an escalation host command under supervision (spec 3.8, OR-3;
/// `lazaret_effects::escalation::subreaper`): its exit status, or an
/// abort when a signal ended it; 126 when it could not be run or waited
/// for. Standard error is the command's own, so the message reaches the
/// request's output.
pub fn host_command(command: HostCommandCommand) -> ExitCode {
    use lazaret_effects::escalation::subreaper::{mirror, supervise, SupervisorArgs};
    let failed = |e: &dyn std::fmt::Display| {
        let message = escape_line(&format!("lazaret __host-command: {e}")).into_owned();
        errln!("{message}");
        ExitCode::from(126)
    };
    let args = match SupervisorArgs::parse(&command.args) {
        Ok(args) => args,
        Err(e) => return failed(&e),
    };
    match supervise(&args) {
        Ok(ended) => ExitCode::from(u8::try_from(mirror(ended)).unwrap_or(u8::MAX)),
        Err(e) => failed(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::{ESCALATE_BINARY, GUEST_BINARY, INIT_BINARY, PROBE_BINARY};

    fn u16_at(b: &[u8], at: usize) -> Option<u16> {
        Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
    }

    fn u64_at(b: &[u8], at: usize) -> Option<u64> {
        Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
    }

    /// The embedded PID 1 and network probe are static x86-64 executables:
    /// no PT_INTERP (no ELF interpreter) and no PT_DYNAMIC segment
    /// (ARCHITECTURE.md "Static in-sandbox binaries").
    #[test]
    fn the_init_has_no_interpreter_and_no_dynamic_section() {
        for b in [INIT_BINARY, GUEST_BINARY, PROBE_BINARY, ESCALATE_BINARY] {
            assert_static(b);
        }
    }

    fn assert_static(b: &[u8]) {
        assert_eq!(b.get(..4), Some(&b"\x7fELF"[..]), "not ELF");
        assert_eq!(b.get(4), Some(&2), "not ELF64");
        assert_eq!(u16_at(b, 0x12), Some(0x3e), "not x86-64");
        let phoff = usize::try_from(u64_at(b, 0x20).unwrap_or(0)).unwrap_or(usize::MAX);
        let phentsize = usize::from(u16_at(b, 0x36).unwrap_or(0));
        let phnum = usize::from(u16_at(b, 0x38).unwrap_or(0));
        assert!(phnum > 0 && phentsize >= 4, "no program headers");
        let types: Vec<u32> = (0..phnum)
            .map(|i| {
                let at = phoff + i * phentsize;
                b.get(at..at + 4)
                    .and_then(|t| t.try_into().ok())
                    .map_or(u32::MAX, u32::from_le_bytes)
            })
            .collect();
        assert!(types.contains(&1), "no PT_LOAD in {types:?}");
        assert!(!types.contains(&3), "PT_INTERP present: {types:?}");
        assert!(!types.contains(&2), "PT_DYNAMIC present: {types:?}");
    }
}

#[derive(Debug, Args)]
pub struct RemoveTreeCommand {
    /// The directory to empty (reached without a symbolic link).
    #[arg(long)]
    dir: PathBuf,
    /// Its device and inode as the caller recorded them.
    #[arg(long)]
    device: u64,
    #[arg(long)]
    inode: u64,
}

/// Runs as root of the developer's user namespace: empties a directory
/// (`tree_removal::remove_contents`).
pub fn remove_tree(args: RemoveTreeCommand) -> ExitCode {
    init_diagnostics();
    match lazaret_effects::tree_removal::remove_contents(&args.dir, args.device, args.inode) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("{e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Debug, Args)]
pub struct MountPointsCommand {
    /// The preparation's stage (reached without a symbolic link).
    #[arg(long)]
    stage: PathBuf,
    /// Its device and inode as its operation recorded them.
    #[arg(long)]
    device: u64,
    #[arg(long)]
    inode: u64,
}

/// Runs as root of the preparation's user namespace: makes the bundle's
/// mount points beneath the recorded stage's `rootfs`
/// (`prepare::mount_points::make_mount_points`).
pub fn mount_points(args: MountPointsCommand) -> ExitCode {
    init_diagnostics();
    match lazaret_effects::prepare::mount_points::make_mount_points(
        &args.stage,
        (args.device, args.inode),
    ) {
        // A default persistent path the image links elsewhere is left as
        // it is; a profile using it refuses at launch.
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("{e}");
            ExitCode::FAILURE
        }
    }
}
