//! One session (spec 3.4): HC spawns the exec client through the broker
//! into the Runtime Supervisor's namespaces as `runsc exec --process
//! /proc/self/fd/N --internal-pid-file /proc/self/fd/M CID`. The process
//! JSON lives in a memfd (the profile's environment values are in it, and
//! never in a file, an argv or a log: spec 3.2); the guest leader PID comes
//! back through the inherited pipe. The interactive form (a host PTY) is
//! driven by `terminal_session`, the piped form (stdin, stdout and stderr
//! pipes, kept separate) by `piped_session`; the same pure terminal machine
//! runs both releases.
use super::enter::EnterArgs;
use super::guest_runner::STDIO_PLACEHOLDER;
use super::piped_session::{self, PipedParts};
use super::release_gate::ReleaseGate;
use super::session_report::SessionReport;
use super::terminal_session::{self, GuestTarget, TerminalParts};
use super::ENTER_SUBCOMMAND;
use crate::broker::sys::TargetCommand;
use crate::broker::{Broker, BrokerError, CommittedChild, ReadinessError};
use crate::domain_store::{DomainStore, SlotTarget, StoreError, StoreLedger, StoreOp};
use crate::process_identity::real::RealProcessSys;
use crate::process_identity::ProcessHandle;
use crate::pty::{RealPty, SessionPty, WindowSize};
use crate::runsc_exec::{ExecProcess, GuestTools, Runsc};
use lazaret_runtime::bundle::SESSION_CAPABILITY_ENV;
use lazaret_runtime::config::ResolvedEnvironment;
use lazaret_runtime::coordinator::messages::{SessionRequest, TerminalSize};
use lazaret_runtime::protocol::records::{ProtocolRecord, SessionRequestCapability};
use lazaret_runtime::records::codec::CodecError;
use lazaret_runtime::records::domain::Session;
use lazaret_runtime::records::ids::{
    CliId, GenerationId, ModelValue, SessionAnchorId, SessionId, ValueError,
};
use lazaret_runtime::records::process::HostProcessOwnershipSlot;
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::num::NonZeroU16;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::mpsc::Sender;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session pipes: {0}")]
    Pipe(io::Error),
    #[error("Domain Store: {0}")]
    Store(#[from] StoreError),
    #[error("starting the exec client: {0}")]
    Spawn(#[from] BrokerError),
    #[error("the exec client is not running: {0}")]
    NotReady(#[source] BrokerError),
    /// The session phase does not fit its durable record field.
    #[error("session phase: {0}")]
    SessionPhase(#[source] ValueError),
    #[error("session terminal: {0}")]
    Pty(#[from] crate::pty::PtyError),
    #[error("window size {rows}x{columns}: rows and columns must be nonzero")]
    WindowSize { rows: u16, columns: u16 },
    #[error("session process JSON: {0}")]
    ProcessSpec(#[from] crate::runsc_exec::ProcessSpecError),
    #[error("session process JSON memfd: {0}")]
    ProcessFile(io::Error),
    #[error("the session's Session Request Capability: {0}")]
    Capability(#[source] CodecError),
}

/// The guest `PATH` of every session (`--process` replaces the
/// container's environment).
const SESSION_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Git's configuration for every session, through Git's environment
/// (`GIT_CONFIG_COUNT`), so neither the image nor the workspace changes:
/// `core.checkStat=minimal`. runsc numbers the files of a mount in the
/// order it first sees them, so each new sandbox shows Git other inode
/// numbers than its index recorded, and Git re-read every tracked file on
/// its first `git status` (through the ignored-path router, four requests
/// each). `minimal` leaves inode numbers, owners and sub-second times out
/// of Git's check; sizes and whole-second times stay. A profile's `env`
/// replaces any of these entries.
const SESSION_GIT_CONFIG: [&str; 3] = [
    "GIT_CONFIG_COUNT=1",
    "GIT_CONFIG_KEY_0=core.checkStat",
    "GIT_CONFIG_VALUE_0=minimal",
];

/// What every session of this generation shares.
#[derive(Debug)]
pub struct SessionContext<'a> {
    pub generation: GenerationId,
    pub program: &'a Path,
    pub supervisor: &'a ProcessHandle,
    pub runsc_globals: &'a [String],
    pub container_id: &'a str,
    /// The profile's `env` table as this Host Coordinator resolved it at
    /// load (from the environment of the CLI that started it): every
    /// session of the Domain gets these values (spec 3.2; docs/config.md).
    pub environment: &'a ResolvedEnvironment,
    /// The escalation prompt desk an interactive session's terminal
    /// registers on (spec 3.8), when the profile enables escalation.
    pub prompts: Option<&'a std::sync::Arc<crate::escalation::prompt_desk::PromptDesk>>,
}

pub fn random_bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut out = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut out)?;
    Ok(out)
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SessionError> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| SessionError::Pipe(e.into()))
}

/// The exec client's argv: `lazaret __enter ... -- runsc ... exec
/// --process PROCESS_JSON --internal-pid-file PIDFILE CID`, the same for
/// both forms (the process JSON says whether there is a terminal).
pub fn exec_client_argv(
    ctx: &SessionContext<'_>,
    stdio: [i32; 3],
    files: ExecFiles<'_>,
) -> Vec<OsString> {
    let identity = ctx.supervisor.identity();
    let mut target: Vec<OsString> = vec!["runsc".into()];
    target.extend(ctx.runsc_globals.iter().map(OsString::from));
    target.extend(["exec", "--process", files.process_json].map(OsString::from));
    target.extend(["--internal-pid-file", files.internal_pid_file].map(OsString::from));
    target.push(ctx.container_id.into());
    let enter = EnterArgs {
        pid: identity.host_pid,
        dev: identity.authority.pidfs_st_dev,
        ino: identity.authority.pidfs_st_ino,
        stdio,
        target,
    };
    let mut full: Vec<OsString> = vec![ctx.program.into(), ENTER_SUBCOMMAND.into()];
    full.extend(enter.to_argv());
    full
}

/// The exec client's inherited files, named through `/proc/self/fd`.
#[derive(Clone, Copy, Debug)]
pub struct ExecFiles<'a> {
    /// The process JSON memfd.
    pub process_json: &'a str,
    /// The write end of the pipe runsc writes the guest leader PID to.
    pub internal_pid_file: &'a str,
}

/// Spec 3.4 acquisition step 1 (the model's `RecordTerminalIntent`): the
/// session (with the Client CLI ID and Session Anchor ID its registration
/// bound, spec 3.3) and its terminal intent in one Domain Store
/// transaction, before any PTY or exec client exists.
pub fn record_terminal_intent(
    store: &DomainStore<'_>,
    generation: GenerationId,
    session: SessionId,
    cli_id: CliId,
    session_anchor_id: SessionAnchorId,
) -> Result<(), SessionError> {
    let _span = tracing::info_span!("RecordTerminalIntent").entered();
    store.apply(&[
        StoreOp::InsertSession(Session {
            generation_id: generation,
            session_id: session,
            cli_id,
            session_anchor_id,
            session_phase: ModelValue::new("Active").map_err(SessionError::SessionPhase)?,
        }),
        StoreOp::InsertTerminalIntent {
            generation,
            session,
        },
    ])?;
    Ok(())
}

/// Spec 3.4 acquisition steps 2-3 for Domain Store session `session`,
/// whose terminal intent is recorded ([`record_terminal_intent`]): spawns
/// the exec client for `request`'s argv and starts the forwarding threads;
/// `links.ended` is told when the session is over. The CLI stream is
/// answered with `Exited` by the session itself. On an error no exec
/// client of the session is left (the broker reaps a refused wrapper, a
/// failed commit is waited for).
#[allow(clippy::too_many_arguments)]
pub fn start_session(
    broker: &mut Broker<RealProcessSys>,
    store: &DomainStore<'_>,
    ctx: &SessionContext<'_>,
    session: SessionId,
    request: &SessionRequest,
    capability: &SessionRequestCapability,
    client: UnixStream,
    reports: Sender<SessionReport>,
) -> Result<(), SessionError> {
    let _span = tracing::info_span!("StartSession").entered();
    let mut ledger = StoreLedger::new(
        store,
        SlotTarget::Terminal {
            generation: ctx.generation,
            session,
            slot: HostProcessOwnershipSlot::SessionTerminalExecClient,
        },
    )?;
    // The product's entries; the profile's `env` table is added (and wins
    // over these) only inside the memfd's JSON.
    let mut env = vec![SESSION_PATH.to_owned(), "HOME=/root".to_owned()];
    env.extend(SESSION_GIT_CONFIG.map(str::to_owned));
    match request.terminal.as_ref().and_then(|t| t.term.as_ref()) {
        Some(term) => env.push(format!("TERM={term}")),
        // The piped form keeps the sandbox's default.
        None if request.terminal.is_none() => env.push("TERM=xterm".to_owned()),
        None => {}
    }
    let capability = capability.encode().map_err(SessionError::Capability)?;
    let process = ExecProcess {
        args: session_args(request),
        env,
        session_env: vec![format!(
            "{SESSION_CAPABILITY_ENV}={}",
            hex::encode(capability)
        )],
        terminal: request.terminal.is_some(),
    };
    let json = process.to_json(
        ctx.environment
            .entries()
            .map(|(name, _, value)| (name.as_str(), value.expose())),
    )?;
    let memfd = rustix::fs::memfd_create("lazaret-process-json", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| SessionError::ProcessFile(e.into()))?;
    std::fs::File::from(memfd.try_clone().map_err(SessionError::ProcessFile)?)
        .write_all(&json)
        .map_err(SessionError::ProcessFile)?;
    drop(json);
    let (pid_r, pid_w) = pipe()?;
    let process_json = format!("/proc/self/fd/{}", memfd.as_raw_fd());
    let internal_pid_file = format!("/proc/self/fd/{}", pid_w.as_raw_fd());
    let files = ExecFiles {
        process_json: &process_json,
        internal_pid_file: &internal_pid_file,
    };
    if let Some(terminal) = &request.terminal {
        let size = window_size(terminal.size)?;
        let (pty, slave) = SessionPty::allocate(&RealPty)?;
        pty.resize(size)?;
        let fd = slave.as_raw_fd();
        let target = TargetCommand {
            argv: exec_client_argv(ctx, [fd, fd, fd], files),
            inherit: vec![fd, memfd.as_raw_fd(), pid_w.as_raw_fd()],
        };
        let acquired = broker.acquire(&target, &mut ledger);
        // The child has its copies; HC keeps only the master and the
        // pipe's read end.
        drop((slave, memfd, pid_w));
        let committed = commit(broker, &mut ledger, acquired?)?;
        terminal_session::spawn(TerminalParts {
            session,
            generation: ctx.generation,
            committed,
            pty,
            client,
            pid_pipe: pid_r,
            guest: guest_target(ctx),
            release: ReleaseGate::new(reports.clone()),
            reports,
            prompts: ctx.prompts.cloned(),
        })
        .map_err(SessionError::Pipe)?;
        return Ok(());
    }
    let (in_r, in_w) = pipe()?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let stdio = [in_r.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
    let mut inherit = stdio.to_vec();
    inherit.extend([memfd.as_raw_fd(), pid_w.as_raw_fd()]);
    let target = TargetCommand {
        argv: exec_client_argv(ctx, stdio, files),
        inherit,
    };
    let acquired = broker.acquire(&target, &mut ledger);
    // The child has its copies; HC keeps only its own ends.
    drop((in_r, out_w, err_w, memfd, pid_w));
    let committed = commit(broker, &mut ledger, acquired?)?;
    piped_session::spawn(PipedParts {
        session,
        generation: ctx.generation,
        committed,
        client,
        stdin: in_w,
        stdout: out_r,
        stderr: err_r,
        pid_pipe: pid_r,
        guest: guest_target(ctx),
        release: ReleaseGate::new(reports.clone()),
        reports,
    })
    .map_err(SessionError::Pipe)?;
    Ok(())
}

fn commit(
    broker: &mut Broker<RealProcessSys>,
    ledger: &mut StoreLedger<'_, '_>,
    child: crate::broker::StagedChild,
) -> Result<CommittedChild, SessionError> {
    broker
        .commit(child, ledger, |sys, handle| {
            ReadinessError::running("the exec client", handle.peek(sys))
        })
        .map_err(|failure| {
            let _ = failure.child.handle().wait(&RealProcessSys);
            SessionError::NotReady(failure.error)
        })
}

fn window_size(size: TerminalSize) -> Result<WindowSize, SessionError> {
    let bad = SessionError::WindowSize {
        rows: size.rows,
        columns: size.columns,
    };
    match (NonZeroU16::new(size.rows), NonZeroU16::new(size.columns)) {
        (Some(rows), Some(columns)) => Ok(WindowSize {
            rows,
            columns,
            pixel_width: 0,
            pixel_height: 0,
        }),
        _ => Err(bad),
    }
}

/// The guest argv: an interactive session's command runs under Lazaret's
/// guest leader (`lazaret-guest lead`), which holds it until the session is
/// admitted (spec 3.4 acquisition steps 3-5, `terminal_session`); a piped
/// one's runs as it is. An empty command stays empty (refused by
/// `ExecProcess::to_json`).
fn session_args(request: &SessionRequest) -> Vec<String> {
    if request.terminal.is_none() || request.argv.is_empty() {
        return request.argv.clone();
    }
    let mut args = vec![
        GuestTools::default().tool,
        "lead".to_owned(),
        "--".to_owned(),
    ];
    args.extend(request.argv.iter().cloned());
    args
}

/// Guest control for the Host Coordinator: `runsc` runs through
/// `lazaret __enter` into the Runtime Supervisor's namespaces, like the exec
/// client; the runner fills in the `--stdio` descriptors.
fn guest_target(ctx: &SessionContext<'_>) -> GuestTarget {
    let identity = ctx.supervisor.identity();
    let enter = EnterArgs {
        pid: identity.host_pid,
        dev: identity.authority.pidfs_st_dev,
        ino: identity.authority.pidfs_st_ino,
        stdio: [-1; 3],
        target: Vec::new(),
    };
    let mut prefix: Vec<OsString> = vec![ctx.program.into(), ENTER_SUBCOMMAND.into()];
    let mut stdio_next = false;
    for arg in enter.to_argv() {
        prefix.push(if stdio_next {
            STDIO_PLACEHOLDER.into()
        } else {
            arg.clone()
        });
        stdio_next = arg == "--stdio";
    }
    GuestTarget {
        runsc: Runsc {
            prefix,
            runsc: "runsc".into(),
            global: ctx.runsc_globals.iter().map(OsString::from).collect(),
        },
        container: ctx.container_id.to_owned(),
    }
}
