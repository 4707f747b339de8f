//! One session (spec 3.4, non-interactive form): HC spawns the exec client
//! through the broker into the Runtime Supervisor's namespaces, keeps stdout
//! and stderr separate and streams them to the CLI, forwards stdin, and
//! reports the command's status. A CLI that disconnects gets its command
//! terminated (SIGTERM, grace, SIGKILL through the retained pidfd).
//! The interactive form (a host PTY) is handed to `terminal_session`, where
//! the pure terminal machine drives it, release order included.
use super::channel;
use super::enter::EnterArgs;
use super::guest_runner::STDIO_PLACEHOLDER;
use super::release_gate::ReleaseGate;
use super::terminal_session::{self, GuestTarget, TerminalEvidence, TerminalParts};
use super::ENTER_SUBCOMMAND;
use crate::broker::sys::TargetCommand;
use crate::broker::{Broker, BrokerError, CommittedChild};
use crate::domain_store::{DomainStore, SlotTarget, StoreError, StoreLedger, StoreOp};
use crate::process_identity::real::RealProcessSys;
use crate::process_identity::{ChildState, ProcessHandle, Signal};
use crate::pty::{RealPty, SessionPty, WindowSize};
use crate::runsc_exec::{ExecProcess, Runsc};
use lazaret_runtime::coordinator::messages::{
    ClientMessage, CommandStatus, CoordinatorMessage, Hello, TerminalSize,
};
use lazaret_runtime::records::domain::Session;
use lazaret_runtime::records::ids::{CliId, GenerationId, ModelValue, SessionAnchorId, SessionId};
use lazaret_runtime::records::process::HostProcessOwnershipSlot;
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::num::NonZeroU16;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a disconnected client's command gets after SIGTERM.
const TERM_GRACE: Duration = Duration::from_secs(2);
/// How long output may keep flowing after the exec client exited.
const DRAIN: Duration = Duration::from_secs(2);
/// Output is forwarded in chunks of at most this size (bounded frames).
const CHUNK: usize = 32 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session pipes: {0}")]
    Pipe(io::Error),
    #[error("Domain Store: {0}")]
    Store(#[from] StoreError),
    #[error("starting the exec client: {0}")]
    Spawn(#[from] BrokerError),
    #[error("the exec client is not running: {0}")]
    NotReady(String),
    #[error("random identifier: {0}")]
    Random(io::Error),
    #[error("session terminal: {0}")]
    Pty(#[from] crate::pty::PtyError),
    #[error("window size {rows}x{columns}: rows and columns must be nonzero")]
    WindowSize { rows: u16, columns: u16 },
    #[error("session process JSON: {0}")]
    ProcessSpec(#[from] crate::runsc_exec::ProcessSpecError),
    #[error("session process JSON memfd: {0}")]
    ProcessFile(io::Error),
}

/// The guest `PATH` of interactive sessions (`--process` replaces the
/// container's environment).
const SESSION_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What every session of this generation shares.
#[derive(Debug)]
pub struct SessionContext<'a> {
    pub generation: GenerationId,
    pub program: &'a Path,
    pub supervisor: &'a ProcessHandle,
    pub runsc_globals: &'a [String],
    pub container_id: &'a str,
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

/// The exec client's argv: `lazaret __enter ... -- runsc ... exec ...`.
/// An interactive session names its process JSON (`"terminal": true`)
/// instead of an argv.
pub fn exec_client_argv(
    ctx: &SessionContext<'_>,
    stdio: [i32; 3],
    command: ExecCommand<'_>,
) -> Vec<OsString> {
    let identity = ctx.supervisor.identity();
    let mut target: Vec<OsString> = vec!["runsc".into()];
    target.extend(ctx.runsc_globals.iter().map(OsString::from));
    match command {
        ExecCommand::Piped(argv) => {
            target.extend(["exec", "--cwd", "/workspace", ctx.container_id].map(OsString::from));
            target.extend(argv.iter().map(OsString::from));
        }
        ExecCommand::Terminal {
            process_json,
            internal_pid_file,
        } => {
            target.extend(["exec", "--process", process_json].map(OsString::from));
            target.extend(["--internal-pid-file", internal_pid_file].map(OsString::from));
            target.push(ctx.container_id.into());
        }
    }
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

/// What the exec client runs.
#[derive(Clone, Copy, Debug)]
pub enum ExecCommand<'a> {
    /// `runsc exec --cwd /workspace CID argv...` with pipes.
    Piped(&'a [String]),
    /// `runsc exec --process PATH --internal-pid-file PIDFILE CID` with the
    /// PTY slave as stdio.
    Terminal {
        process_json: &'a str,
        internal_pid_file: &'a str,
    },
}

/// How a session's own threads reach the coordinator's loop.
#[derive(Debug)]
pub struct SessionLinks {
    /// Told once the session is over (exec client reaped, PTY closed).
    pub ended: Sender<()>,
    /// Told the PTY and guest leader identity (interactive sessions).
    pub running: Sender<TerminalEvidence>,
    /// Commits the durable ReleaseIntent before release signals.
    pub release: ReleaseGate,
}

/// Spawns the exec client for `argv` as Domain Store session `session`
/// and starts the forwarding threads; `links.ended` is told when the session is
/// over. The CLI stream is answered with `Exited` by the session itself. On
/// an error no exec client of the session is left (the broker reaps a
/// refused wrapper, a failed commit is waited for).
#[allow(clippy::too_many_arguments)]
pub fn start_session(
    broker: &mut Broker<RealProcessSys>,
    store: &DomainStore<'_>,
    ctx: &SessionContext<'_>,
    session: SessionId,
    hello: &Hello,
    client: UnixStream,
    links: SessionLinks,
) -> Result<SessionId, SessionError> {
    let _span = tracing::info_span!("StartSession").entered();
    store.apply(&[
        StoreOp::InsertSession(Session {
            generation_id: ctx.generation,
            session_id: session,
            cli_id: CliId(random_bytes().map_err(SessionError::Random)?),
            session_anchor_id: SessionAnchorId(random_bytes().map_err(SessionError::Random)?),
            session_phase: ModelValue::new("Active")
                .map_err(|e| SessionError::NotReady(format!("session phase: {e}")))?,
        }),
        // Step 1 (terminal intent) in the same transaction: one fsync fewer on
        // the join path; the ledger then finds the intent with an unassigned slot.
        StoreOp::InsertTerminalIntent {
            generation: ctx.generation,
            session,
        },
    ])?;
    let mut ledger = StoreLedger::new(
        store,
        SlotTarget::Terminal {
            generation: ctx.generation,
            session,
            slot: HostProcessOwnershipSlot::SessionTerminalExecClient,
        },
    )?;
    if let Some(terminal) = &hello.terminal {
        let size = window_size(terminal.size)?;
        let mut env = vec![SESSION_PATH.to_owned(), "HOME=/root".to_owned()];
        if let Some(term) = &terminal.term {
            env.push(format!("TERM={term}"));
        }
        let process = ExecProcess {
            args: hello.argv.clone(),
            env,
            terminal: true,
        };
        let id = session;
        return start_terminal_session(
            broker,
            &mut ledger,
            ctx,
            (session, ctx.generation),
            &process,
            size,
            client,
            links,
        )
        .map(|()| id);
    }
    let argv = &hello.argv;
    let (in_r, in_w) = pipe()?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let stdio = [in_r.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
    let target = TargetCommand {
        argv: exec_client_argv(ctx, stdio, ExecCommand::Piped(argv)),
        inherit: stdio.to_vec(),
    };
    let acquired = broker.acquire(&target, &mut ledger);
    // The child has its copies; HC keeps only its own ends.
    drop((in_r, out_w, err_w));
    let committed = commit(broker, &mut ledger, acquired?)?;
    spawn_forwarders(committed, client, in_w, out_r, err_r, links).map(|()| session)
}

fn commit(
    broker: &mut Broker<RealProcessSys>,
    ledger: &mut StoreLedger<'_, '_>,
    child: crate::broker::StagedChild,
) -> Result<CommittedChild, SessionError> {
    broker
        .commit(child, ledger, |sys, handle| match handle.peek(sys) {
            Ok(ChildState::Running) => Ok(()),
            other => Err(format!("exec client ended before readiness: {other:?}")),
        })
        .map_err(|failure| {
            let _ = failure.child.handle().wait(&RealProcessSys);
            SessionError::NotReady(failure.error.to_string())
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

/// The interactive form (spec 3.4, FR-14, FR-15): a host PTY whose slave is
/// the exec client's stdio and whose master HC forwards; the process JSON
/// (`"terminal": true`) is passed as an inherited memfd, and the guest
/// leader PID comes back through an inherited pipe named as
/// `--internal-pid-file`. The pure terminal machine drives the session from
/// here on (`terminal_session`).
#[allow(clippy::too_many_arguments)] // one call site; each is a distinct owned part
fn start_terminal_session(
    broker: &mut Broker<RealProcessSys>,
    ledger: &mut StoreLedger<'_, '_>,
    ctx: &SessionContext<'_>,
    (session, generation): (SessionId, GenerationId),
    process: &ExecProcess,
    size: WindowSize,
    client: UnixStream,
    links: SessionLinks,
) -> Result<(), SessionError> {
    let json = process.to_json()?;
    let memfd = rustix::fs::memfd_create("lazaret-process-json", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| SessionError::ProcessFile(e.into()))?;
    std::fs::File::from(memfd.try_clone().map_err(SessionError::ProcessFile)?)
        .write_all(&json)
        .map_err(SessionError::ProcessFile)?;
    let (pid_r, pid_w) = pipe()?;
    let (pty, slave) = SessionPty::allocate(&RealPty)?;
    pty.resize(size)?;
    let fd = slave.as_raw_fd();
    let process_json = format!("/proc/self/fd/{}", memfd.as_raw_fd());
    let internal_pid_file = format!("/proc/self/fd/{}", pid_w.as_raw_fd());
    let target = TargetCommand {
        argv: exec_client_argv(
            ctx,
            [fd, fd, fd],
            ExecCommand::Terminal {
                process_json: &process_json,
                internal_pid_file: &internal_pid_file,
            },
        ),
        inherit: vec![fd, memfd.as_raw_fd(), pid_w.as_raw_fd()],
    };
    let acquired = broker.acquire(&target, ledger);
    // The child has its copies; HC keeps only the master and the pipe's
    // read end.
    drop((slave, memfd, pid_w));
    let committed = commit(broker, ledger, acquired?)?;
    terminal_session::spawn(TerminalParts {
        session,
        generation,
        committed,
        pty,
        client,
        pid_pipe: pid_r,
        guest: guest_target(ctx),
        ended: links.ended,
        running: links.running,
        release: links.release,
    })
    .map_err(SessionError::Pipe)
}

fn spawn_forwarders(
    committed: CommittedChild,
    client: UnixStream,
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    links: SessionLinks,
) -> Result<(), SessionError> {
    let SessionLinks {
        ended, mut release, ..
    } = links;
    let writer = Arc::new(Mutex::new(client.try_clone().map_err(SessionError::Pipe)?));
    let gone = Arc::new(AtomicBool::new(false));
    let (drained_tx, drained_rx) = mpsc::channel::<()>();
    for (fd, stdout_kind) in [(stdout, true), (stderr, false)] {
        let writer = Arc::clone(&writer);
        let done = drained_tx.clone();
        std::thread::spawn(move || {
            let mut file = std::fs::File::from(fd);
            let mut buf = vec![0u8; CHUNK];
            loop {
                match file.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let bytes = buf[..n].to_vec();
                        let msg = if stdout_kind {
                            CoordinatorMessage::Stdout(bytes)
                        } else {
                            CoordinatorMessage::Stderr(bytes)
                        };
                        let Ok(mut w) = writer.lock() else { break };
                        if channel::send(&mut *w, "session", &msg).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = done.send(());
        });
    }
    drop(drained_tx);
    {
        let gone = Arc::clone(&gone);
        let mut reader = client;
        std::thread::spawn(move || {
            let mut stdin = Some(std::fs::File::from(stdin));
            loop {
                match channel::receive::<ClientMessage>(&mut reader, "session") {
                    Ok(ClientMessage::Stdin(bytes)) => {
                        if let Some(pipe) = stdin.as_mut() {
                            if pipe.write_all(&bytes).is_err() {
                                stdin = None;
                            }
                        }
                    }
                    Ok(ClientMessage::StdinClosed) => stdin = None,
                    Ok(ClientMessage::Hello(_))
                    | Ok(ClientMessage::Resize(_))
                    | Ok(ClientMessage::Signal(_)) => {}
                    Err(_) => {
                        gone.store(true, Ordering::SeqCst);
                        return;
                    }
                }
            }
        });
    }
    std::thread::spawn(move || {
        let status = wait_session(&committed, &gone, &mut release);
        for _ in 0..2 {
            if drained_rx.recv_timeout(DRAIN).is_err() {
                break;
            }
        }
        if let (Some(status), Ok(mut w)) = (status, writer.lock()) {
            let _ = channel::send(&mut *w, "session", &CoordinatorMessage::Exited(status));
            let _ = w.shutdown(std::net::Shutdown::Both);
        }
        let _ = ended.send(());
    });
    Ok(())
}

fn wait_session(
    committed: &CommittedChild,
    gone: &AtomicBool,
    release: &mut ReleaseGate,
) -> Option<CommandStatus> {
    let handle = committed.handle();
    let mut term_sent: Option<Instant> = None;
    let mut killed = false;
    loop {
        match handle.poll(&RealProcessSys) {
            Ok(ChildState::Exited { code, signal }) => {
                return Some(CommandStatus::from_wait(code, signal))
            }
            Ok(ChildState::Running) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot wait for the exec client");
                return None;
            }
        }
        if gone.load(Ordering::SeqCst) {
            match term_sent {
                None => {
                    // Spec 3.4: the durable ReleaseIntent comes first.
                    release.record();
                    let _ = handle.signal(&RealProcessSys, Signal::Term);
                    term_sent = Some(Instant::now());
                }
                Some(at) if !killed && at.elapsed() > TERM_GRACE => {
                    let _ = handle.signal(&RealProcessSys, Signal::Kill);
                    killed = true;
                }
                Some(_) => {}
            }
        }
        let ts = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        let mut fds = [rustix::event::PollFd::new(
            handle.pidfd(),
            rustix::event::PollFlags::IN,
        )];
        let _ = rustix::event::poll(&mut fds, Some(&ts));
    }
}
