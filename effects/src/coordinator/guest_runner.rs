//! Short runsc clients of the Host Coordinator (guest observation and group
//! signals, spec 3.4 release step 2): each runs as `lazaret __enter ... --
//! runsc ...` in the Runtime Supervisor's user and mount namespaces, with
//! pipes for stdio, a time limit and an output limit.
//!
//! The pipes stay close-on-exec in the Host Coordinator and become
//! inheritable only in the forked child (`pre_exec`), so an exec client
//! spawned by another thread at the same moment never holds their write
//! ends. Note (docs/terminals.md "Not built yet"): these short clients are
//! spawned and reaped here, not through the broker.
use crate::process_identity::real::RealProcessSys;
use crate::process_identity::{ChildState, Pidfd, ProcessSys, Signal};
use crate::runsc_exec::{Invocation, RunscRunner};
use lazaret_runtime::records::process::HostPid;
use rustix::event::{PollFd, PollFlags, Timespec};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// How long one guest tool run may take.
const RUN_LIMIT: Duration = Duration::from_secs(10);
/// Bytes kept from each of stdout and stderr.
const OUTPUT_LIMIT: usize = 1024 * 1024;

/// Runs an invocation whose argv starts with `lazaret __enter ... --stdio`
/// and leaves the three descriptor numbers to this runner: the
/// `{stdio}` placeholder in the argv is replaced by them.
#[derive(Debug, Default, Clone, Copy)]
pub struct EnteredRunner;

/// The argv placeholder for the `--stdio` value.
pub const STDIO_PLACEHOLDER: &str = "{stdio}";

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io::Error::from)
}

fn nonblocking(fd: &OwnedFd) -> io::Result<()> {
    rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK).map_err(io::Error::from)
}

/// Reads what is there now; returns false at end of file.
fn drain(fd: &OwnedFd, into: &mut Vec<u8>) -> io::Result<bool> {
    let mut buf = [0u8; 8192];
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                let room = OUTPUT_LIMIT.saturating_sub(into.len());
                into.extend_from_slice(&buf[..n.min(room)]);
            }
            Err(rustix::io::Errno::AGAIN) => return Ok(true),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

impl RunscRunner for EnteredRunner {
    fn run(&self, invocation: &Invocation) -> io::Result<Output> {
        let (program, args) = invocation
            .argv
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty invocation"))?;
        let (in_r, in_w) = pipe()?;
        let (out_r, out_w) = pipe()?;
        let (err_r, err_w) = pipe()?;
        let child_fds = [in_r.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
        let stdio = format!("{},{},{}", child_fds[0], child_fds[1], child_fds[2]);
        let args: Vec<_> = args
            .iter()
            .map(|a| {
                if a == STDIO_PLACEHOLDER {
                    stdio.clone().into()
                } else {
                    a.clone()
                }
            })
            .collect();
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: fcntl is async-signal-safe; the closure touches only the
        // three descriptor numbers copied into it, which are open in the
        // forked child (inherited from this process).
        unsafe {
            command.pre_exec(move || {
                for fd in child_fds {
                    let fd = BorrowedFd::borrow_raw(fd);
                    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
                }
                Ok(())
            });
        }
        let child = {
            let _spawning = crate::broker::exclusion::spawn_exclusion();
            command.spawn()?
        };
        drop((in_r, in_w, out_w, err_w));
        let pid = HostPid(child.id());
        // The child is ours and unreaped, so its PID cannot be recycled yet.
        let pidfd = RealProcessSys.pidfd_open(pid)?;
        // `child` is dropped without waiting; the pidfd reaps it below.
        drop(child);
        nonblocking(&out_r)?;
        nonblocking(&err_r)?;
        let mut out = Vec::new();
        let mut err = Vec::new();
        let (mut out_open, mut err_open) = (true, true);
        let limit = invocation.limit.unwrap_or(RUN_LIMIT).min(RUN_LIMIT);
        let deadline = Instant::now() + limit;
        let status = loop {
            if !out_open && !err_open {
                break wait_exit(&pidfd, deadline, limit)?;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break kill_and_reap(&pidfd, limit)?;
            };
            let mut fds = Vec::with_capacity(2);
            if out_open {
                fds.push(PollFd::new(&out_r, PollFlags::IN));
            }
            if err_open {
                fds.push(PollFd::new(&err_r, PollFlags::IN));
            }
            let timeout = Timespec::try_from(left).unwrap_or(Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            });
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            if out_open {
                out_open = drain(&out_r, &mut out)?;
            }
            if err_open {
                err_open = drain(&err_r, &mut err)?;
            }
        };
        Ok(Output {
            status,
            stdout: out,
            stderr: err,
        })
    }
}

fn to_status(state: ChildState) -> Option<ExitStatus> {
    match state {
        ChildState::Running => None,
        ChildState::Exited { code, signal } => Some(match (code, signal) {
            (_, Some(sig)) => ExitStatus::from_raw(sig & 0x7f),
            (Some(c), None) => ExitStatus::from_raw((c & 0xff) << 8),
            (None, None) => ExitStatus::from_raw(0xff << 8),
        }),
    }
}

/// Waits for the exit until `deadline`, then kills.
fn wait_exit(pidfd: &Pidfd, deadline: Instant, limit: Duration) -> io::Result<ExitStatus> {
    loop {
        let handle_state = RealProcessSys.waitid(pidfd, crate::process_identity::WaitMode::Poll)?;
        if let Some(status) = to_status(handle_state) {
            return Ok(status);
        }
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return kill_and_reap(pidfd, limit);
        };
        let timeout = Timespec::try_from(left.min(Duration::from_secs(1))).unwrap_or(Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        });
        let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

fn kill_and_reap(pidfd: &Pidfd, limit: Duration) -> io::Result<ExitStatus> {
    rustix::process::pidfd_send_signal(
        pidfd.as_fd(),
        crate::process_identity::real::rustix_signal(Signal::Kill),
    )
    .map_err(io::Error::from)?;
    RealProcessSys.waitid(pidfd, crate::process_identity::WaitMode::Block)?;
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!("the guest tool run took longer than {limit:?} and was killed"),
    ))
}
