//! Short runsc clients of the Host Coordinator (guest observation and group
//! signals, spec 3.4 release step 2): each runs as `lazaret __enter ... --
//! runsc ...` in the Runtime Supervisor's user and mount namespaces, with
//! pipes for stdio, a time limit and an output limit.
//!
//! The pipes stay close-on-exec in the Host Coordinator and become
//! inheritable only in the forked child (`pre_exec`), so an exec client
//! spawned by another thread at the same moment never holds their write
//! ends. Each is a transient child of the broker
//! ([`crate::broker::transient`]): spawned under the spawn exclusion and
//! reaped only through its pidfd.
use crate::broker::transient::{Limits, Transient};
use crate::runsc_exec::{Invocation, RunscRunner};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// How long one guest tool run may take.
const RUN_LIMIT: Duration = Duration::from_secs(10);

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
        let entered = Transient::spawn(&mut command).map_err(io::Error::other)?;
        // Only the child holds the write ends (and its standard input's
        // read end) now.
        drop((in_r, in_w, out_w, err_w));
        let limit = invocation.limit.unwrap_or(RUN_LIMIT).min(RUN_LIMIT);
        entered
            .with_output(out_r, err_r)
            .finish(b"", Limits::of(limit))
            .map_err(io::Error::other)
    }
}
