//! A running escalation host process (spec 3.8, OR-3, FR-7): spawned under
//! the broker's spawn exclusion, held by its pidfd from the moment it
//! exists, signalled and reaped only through that pidfd, with its output
//! pipes non-blocking so the caller decides when to read them (reading
//! stops while the result window is full: the pipes fill and the process
//! blocks, which is the back-pressure spec 3.8 asks for).
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::process::Command;

use rustix::event::{PollFd, PollFlags, Timespec};

use crate::process_identity::real::{rustix_signal, RealProcessSys};
use lazaret_runtime::records::process::HostPid;

use crate::process_identity::{ChildState, Pidfd, ProcessSys, Signal, WaitMode};

/// One of the host process's output streams.
#[derive(Debug)]
pub struct OutputPipe {
    fd: Option<OwnedFd>,
}

impl OutputPipe {
    /// Whether the stream is still open.
    pub fn is_open(&self) -> bool {
        self.fd.is_some()
    }

    /// Up to `max` bytes available now: `Some(bytes)` (empty when nothing
    /// is ready), `None` once the stream ended (it is then closed).
    pub fn read(&mut self, max: usize) -> io::Result<Option<Vec<u8>>> {
        let Some(fd) = &self.fd else {
            return Ok(None);
        };
        let mut buf = vec![0u8; max];
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => {
                self.fd = None;
                Ok(None)
            }
            Ok(n) => {
                buf.truncate(n);
                Ok(Some(buf))
            }
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => Ok(Some(Vec::new())),
            Err(e) => Err(e.into()),
        }
    }
}

/// A spawned host process: its pidfd and its two output pipes.
#[derive(Debug)]
pub struct HostProcess {
    pidfd: Pidfd,
    pub stdout: OutputPipe,
    pub stderr: OutputPipe,
    reaped: bool,
}

impl HostProcess {
    /// Spawns `command` (its standard output and error piped) and takes
    /// its pidfd. Without a pidfd the process is waited for and the spawn
    /// fails: it is never signalled by number.
    pub fn spawn(command: &mut Command) -> io::Result<Self> {
        let mut child = {
            let _spawning = crate::broker::exclusion::spawn_exclusion();
            command.spawn()?
        };
        let pidfd = match RealProcessSys.pidfd_open(HostPid(child.id())) {
            Ok(pidfd) => pidfd,
            Err(e) => {
                drop((child.stdout.take(), child.stderr.take()));
                let _ = child.wait();
                return Err(e);
            }
        };
        let pipe = |fd: Option<OwnedFd>| -> io::Result<OutputPipe> {
            if let Some(fd) = &fd {
                rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK)?;
            }
            Ok(OutputPipe { fd })
        };
        let stdout = child.stdout.take().map(OwnedFd::from);
        let stderr = child.stderr.take().map(OwnedFd::from);
        // Dropped without waiting: the pidfd reaps it.
        drop(child);
        let mut process = Self {
            pidfd,
            stdout: OutputPipe { fd: None },
            stderr: OutputPipe { fd: None },
            reaped: false,
        };
        match (pipe(stdout), pipe(stderr)) {
            (Ok(out), Ok(err)) => {
                process.stdout = out;
                process.stderr = err;
                Ok(process)
            }
            (Err(e), _) | (_, Err(e)) => {
                let _ = process.kill_and_reap();
                Err(e)
            }
        }
    }

    /// Waits at most `timeout` for output on the open pipes (only when
    /// `read_output`) or for the process's exit (only when `watch_exit`:
    /// a reaped process's pidfd stays readable).
    pub fn wait_ready(
        &self,
        read_output: bool,
        watch_exit: bool,
        timeout: std::time::Duration,
    ) -> io::Result<()> {
        let mut fds = Vec::with_capacity(3);
        if read_output {
            for pipe in [&self.stdout, &self.stderr] {
                if let Some(fd) = &pipe.fd {
                    fds.push(PollFd::new(fd, PollFlags::IN));
                }
            }
        }
        if watch_exit && !self.reaped {
            fds.push(PollFd::new(&self.pidfd, PollFlags::IN));
        }
        if fds.is_empty() {
            std::thread::sleep(timeout);
            return Ok(());
        }
        let timeout = Timespec::try_from(timeout).unwrap_or(Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        });
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The exit status once the process exited (reaped then), `None`
    /// while it runs.
    pub fn try_reap(&mut self) -> io::Result<Option<ChildState>> {
        if self.reaped {
            return Ok(None);
        }
        match RealProcessSys.waitid(&self.pidfd, WaitMode::Poll)? {
            ChildState::Running => Ok(None),
            exited => {
                self.reaped = true;
                Ok(Some(exited))
            }
        }
    }

    /// SIGKILL through the pidfd and a blocking reap through it (OR-3: the
    /// host process never outlives its request). Idempotent. An error
    /// means the process may still run.
    pub fn kill_and_reap(&mut self) -> io::Result<()> {
        if self.reaped {
            return Ok(());
        }
        match rustix::process::pidfd_send_signal(self.pidfd.as_fd(), rustix_signal(Signal::Kill)) {
            // ESRCH: it already exited (not yet reaped).
            Ok(()) | Err(rustix::io::Errno::SRCH) => {}
            Err(e) => return Err(e.into()),
        }
        // Bounded: a killed process exits; only EINTR repeats the wait.
        for _ in 0..64 {
            match RealProcessSys.waitid(&self.pidfd, WaitMode::Block) {
                Ok(_) => {
                    self.reaped = true;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("the wait was interrupted 64 times"))
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        if let Err(e) = self.kill_and_reap() {
            tracing::error!(error = %e, "an escalation host process could not be stopped and reaped");
        }
    }
}
