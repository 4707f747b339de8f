//! A running escalation host process (spec 3.8, OR-3, FR-7) under its
//! supervisor: spawned under the broker's spawn exclusion, held by its
//! pidfd from the moment it exists, stopped by closing its lifeline (the
//! supervisor then stops everything the command started), signalled only
//! through that pidfd, reaped only through it, with its output
//! pipes non-blocking so the caller decides when to read them (reading
//! stops while the result window is full: the pipes fill and the process
//! blocks, which is the back-pressure spec 3.8 asks for).
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::process::Command;

use rustix::event::{PollFd, PollFlags, Timespec};

use crate::process_identity::real::{rustix_signal, RealProcessSys};
use lazaret_runtime::records::process::HostPid;

use super::subreaper::Report;
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

/// A spawned host process (its supervisor, [`super::subreaper`]): its
/// pidfd, its two output pipes and the write end of its lifeline.
#[derive(Debug)]
pub struct HostProcess {
    pidfd: Pidfd,
    pub stdout: OutputPipe,
    pub stderr: OutputPipe,
    /// Closing it tells the supervisor to stop the command and everything
    /// it started.
    lifeline: Option<OwnedFd>,
    /// The supervisor's reports ([`Report`]): its last byte says whether
    /// everything the command started was stopped.
    report: OwnedFd,
    reaped: bool,
}

/// How long the supervisor may take to report that the command runs.
const START_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a supervisor whose lifeline was closed may take to stop its
/// tree and exit before it is killed itself.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

impl HostProcess {
    /// Spawns `command` (the supervisor: its standard input, the
    /// lifeline, and its standard output and error piped; `report_write`
    /// the report pipe's write end it inherits, closed here once it is
    /// spawned) and takes its pidfd, then waits for the supervisor to
    /// report the command running: a command that could not start is the
    /// spawn's error, with its errno. Without a pidfd the process is waited
    /// for and the spawn fails: it is never signalled by number.
    pub fn spawn(
        command: &mut Command,
        report: OwnedFd,
        report_write: OwnedFd,
    ) -> io::Result<Self> {
        let spawned = {
            let _spawning = crate::broker::exclusion::spawn_exclusion();
            command.spawn()
        };
        drop(report_write);
        let mut child = spawned?;
        let pidfd = match RealProcessSys.pidfd_open(HostPid(child.id())) {
            Ok(pidfd) => pidfd,
            Err(e) => {
                drop((child.stdin.take(), child.stdout.take(), child.stderr.take()));
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
        let lifeline = child.stdin.take().map(OwnedFd::from);
        // Dropped without waiting: the pidfd reaps it.
        drop(child);
        let mut process = Self {
            pidfd,
            stdout: OutputPipe { fd: None },
            stderr: OutputPipe { fd: None },
            lifeline,
            report,
            reaped: false,
        };
        if let Err(e) = process.started() {
            let _ = process.kill_and_reap();
            return Err(e);
        }
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

    /// The supervisor's first report: the command runs, or why not.
    fn started(&self) -> io::Result<()> {
        let mut fds = [PollFd::new(&self.report, PollFlags::IN)];
        let within = Timespec::try_from(START_WITHIN).unwrap_or(Timespec {
            tv_sec: 10,
            tv_nsec: 0,
        });
        match rustix::event::poll(&mut fds, Some(&within)) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the host-command supervisor did not report the command running",
                ))
            }
            // Interrupted: the read below waits for the report or the end.
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        // One byte: the last report may already follow it.
        let mut kind = [0u8; 1];
        if rustix::io::read(&self.report, &mut kind)? == 1 && kind[0] == Report::Running as u8 {
            return Ok(());
        }
        if kind[0] != Report::NotStarted as u8 {
            return Err(io::Error::other(
                "the host-command supervisor ended without starting the command",
            ));
        }
        let mut errno = [0u8; 4];
        let n = rustix::io::read(&self.report, &mut errno)?;
        let errno = if n == 4 { i32::from_le_bytes(errno) } else { 0 };
        Err(if errno == 0 {
            io::Error::other("the host-command supervisor could not start the command")
        } else {
            io::Error::from_raw_os_error(errno)
        })
    }

    /// The supervisor's last report, once it exited: `Ok` only when it
    /// stopped everything the command started.
    fn all_stopped(&self) -> io::Result<()> {
        let mut last = [0u8; 1];
        match rustix::io::read(&self.report, &mut last) {
            Ok(1) if last[0] == Report::AllStopped as u8 => Ok(()),
            _ => Err(io::Error::other(
                "the host-command supervisor did not stop everything the command started",
            )),
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
                self.all_stopped()?;
                Ok(Some(exited))
            }
        }
    }

    /// Stops the host process and reaps it (OR-3: the host process never
    /// outlives its request). The lifeline is closed first, so the
    /// supervisor stops the command and everything it started, reaps them
    /// and exits; one that has not exited within [`STOP_GRACE`] is killed
    /// through the pidfd (its command dies with it). Idempotent. An error
    /// means the process may still run.
    pub fn kill_and_reap(&mut self) -> io::Result<()> {
        if self.reaped {
            return Ok(());
        }
        drop(self.lifeline.take());
        let deadline = std::time::Instant::now() + STOP_GRACE;
        while std::time::Instant::now() < deadline {
            if self.try_reap()?.is_some() {
                return Ok(());
            }
            self.wait_ready(false, true, std::time::Duration::from_millis(50))?;
        }
        tracing::warn!("an escalation supervisor did not stop within its grace: killed");
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
                    // Its command died with it; what else it started may
                    // still run.
                    return self.all_stopped();
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
