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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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

/// A spawned host process (its supervisor, [`super::subreaper`]): its two
/// output pipes, read by the thread serving its request, and what stops
/// it ([`ProcessStop`]), which the coordinator may share (spec 3.8: its
/// session's `CloseSession` stops and reaps it).
#[derive(Debug)]
pub struct HostProcess {
    pub stdout: OutputPipe,
    pub stderr: OutputPipe,
    stop: Arc<ProcessStop>,
}

/// A host process spawned and not yet reported running
/// ([`Starting::started`]); what stops it is already shared.
#[derive(Debug)]
pub struct Starting {
    process: HostProcess,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
}

/// How a host process is stopped and reaped, by whichever comes first:
/// the thread serving its request or its session's close (spec 3.8,
/// OR-3). The pidfd and the report pipe are read by both; the lifeline,
/// the reap and the supervisor's reports are taken under one lock, so the
/// process is reaped once and its reports are read in order.
#[derive(Debug)]
pub struct ProcessStop {
    pidfd: Pidfd,
    /// The supervisor's reports ([`Report`]), non-blocking.
    report: OwnedFd,
    state: Mutex<StopState>,
}

#[derive(Debug)]
struct StopState {
    /// The write end of the lifeline: closing it tells the supervisor to
    /// stop the command and everything it started.
    lifeline: Option<OwnedFd>,
    /// The first report once read: running, or not started.
    start: Option<Report>,
    /// How the supervisor ended, once reaped.
    exited: Option<ChildState>,
    /// Once reaped: whether it reported everything the command started
    /// stopped.
    all_stopped: Option<bool>,
}

/// How long the supervisor may take to report that the command runs.
const START_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a supervisor whose lifeline was closed may take to stop its
/// tree and exit before it is killed itself: longer than it gives the tree
/// ([`super::subreaper::STOP_WITHIN`]), so it can still report.
const STOP_GRACE: std::time::Duration =
    super::subreaper::STOP_WITHIN.saturating_add(std::time::Duration::from_secs(1));

/// The most report bytes a supervisor writes: running or not started
/// (with a four-byte errno), then all stopped or not.
const REPORT_MAX: usize = 6;

impl HostProcess {
    /// Spawns `command` (the supervisor: its standard input, the
    /// lifeline, and its standard output and error piped; `report_write`
    /// the report pipe's write end it inherits, closed here once it is
    /// spawned) and takes its pidfd. Without a pidfd the process is waited
    /// for and the spawn fails: it is never signalled by number. The
    /// caller waits for the start report with [`Starting::started`].
    pub fn spawn(
        command: &mut Command,
        report: OwnedFd,
        report_write: OwnedFd,
    ) -> io::Result<Starting> {
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
        let stdout = child.stdout.take().map(OwnedFd::from);
        let stderr = child.stderr.take().map(OwnedFd::from);
        let lifeline = child.stdin.take().map(OwnedFd::from);
        // Dropped without waiting: the pidfd reaps it.
        drop(child);
        let process = Self {
            stdout: OutputPipe { fd: None },
            stderr: OutputPipe { fd: None },
            stop: Arc::new(ProcessStop {
                pidfd,
                report,
                state: Mutex::new(StopState {
                    lifeline,
                    start: None,
                    exited: None,
                    all_stopped: None,
                }),
            }),
        };
        // Dropping `process` on an error stops and reaps it.
        rustix::fs::fcntl_setfl(&process.stop.report, rustix::fs::OFlags::NONBLOCK)?;
        Ok(Starting {
            process,
            stdout,
            stderr,
        })
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
        if watch_exit && !self.stop.reaped() {
            fds.push(PollFd::new(&self.stop.pidfd, PollFlags::IN));
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

    /// The exit status once the process exited (reaped then, here or by
    /// whoever stopped it), `None` while it runs.
    pub fn try_reap(&mut self) -> io::Result<Option<ChildState>> {
        self.stop.try_reap()
    }

    /// See [`ProcessStop::kill_and_reap`].
    pub fn kill_and_reap(&mut self) -> io::Result<()> {
        self.stop.kill_and_reap()
    }
}

impl Starting {
    /// What stops the process, to share before it reports.
    pub fn stop(&self) -> &Arc<ProcessStop> {
        &self.process.stop
    }

    /// The supervisor's first report: the command runs (the process is
    /// returned, its output pipes non-blocking), or why not: a command
    /// that could not start is the error, with its errno. The process is
    /// stopped and reaped on every error.
    pub fn started(self) -> io::Result<HostProcess> {
        let Self {
            mut process,
            stdout,
            stderr,
        } = self;
        if let Err(e) = process.stop.started() {
            let _ = process.kill_and_reap();
            return Err(e);
        }
        let pipe = |fd: Option<OwnedFd>| -> io::Result<OutputPipe> {
            if let Some(fd) = &fd {
                rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK)?;
            }
            Ok(OutputPipe { fd })
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
}

impl ProcessStop {
    fn state(&self) -> MutexGuard<'_, StopState> {
        // A thread that panicked under the lock left the state as it was:
        // the reap and the reports it records are still true.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn reaped(&self) -> bool {
        self.state().exited.is_some()
    }

    /// Waits for the first report (outside the lock), then reads it under
    /// the lock: a process already stopped by someone else never started
    /// as far as its caller knows.
    fn started(&self) -> io::Result<()> {
        let deadline = std::time::Instant::now() + START_WITHIN;
        // Bounded by the deadline: an interrupted wait waits for the rest.
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let within = Timespec::try_from(left).unwrap_or(Timespec {
                tv_sec: 10,
                tv_nsec: 0,
            });
            let mut fds = [PollFd::new(&self.report, PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&within)) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the host-command supervisor did not report the command running",
                    ))
                }
                Ok(_) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let mut state = self.state();
        if state.exited.is_some() {
            return Err(io::Error::other(
                "the host process was stopped before it reported running",
            ));
        }
        // One byte: the last report may already follow it.
        let mut kind = [0u8; 1];
        if read_some(&self.report, &mut kind)? == 1 && kind[0] == Report::Running as u8 {
            state.start = Some(Report::Running);
            return Ok(());
        }
        if kind[0] != Report::NotStarted as u8 {
            return Err(io::Error::other(
                "the host-command supervisor ended without starting the command",
            ));
        }
        state.start = Some(Report::NotStarted);
        let mut errno = [0u8; 4];
        let n = read_some(&self.report, &mut errno)?;
        let errno = if n == 4 { i32::from_le_bytes(errno) } else { 0 };
        Err(if errno == 0 {
            io::Error::other("the host-command supervisor could not start the command")
        } else {
            io::Error::from_raw_os_error(errno)
        })
    }

    /// See [`HostProcess::try_reap`].
    fn try_reap(&self) -> io::Result<Option<ChildState>> {
        let mut state = self.state();
        self.reap(&mut state, WaitMode::Poll)
    }

    /// Reaps the supervisor if it exited (`WaitMode::Poll`) or once it
    /// does (`WaitMode::Block`), and reads its last report then.
    fn reap(&self, state: &mut StopState, mode: WaitMode) -> io::Result<Option<ChildState>> {
        if let Some(exited) = state.exited {
            return Ok(Some(exited));
        }
        match RealProcessSys.waitid(&self.pidfd, mode)? {
            ChildState::Running => Ok(None),
            exited => {
                state.exited = Some(exited);
                state.all_stopped = Some(self.all_stopped(state.start));
                Ok(Some(exited))
            }
        }
    }

    /// The supervisor's reports left once it exited (it alone held the
    /// write end), after the first report `start` if that was read:
    /// `true` only when the last says everything the command started was
    /// stopped, or the first that the command never started.
    fn all_stopped(&self, start: Option<Report>) -> bool {
        let mut bytes = [0u8; REPORT_MAX];
        let mut len = 0;
        // Bounded: every turn reads at least one byte into `bytes`.
        while len < bytes.len() {
            match read_some(&self.report, &mut bytes[len..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => len += n,
            }
        }
        let bytes = &bytes[..len];
        let last = match (start, bytes.first()) {
            (Some(Report::NotStarted), _) => return true,
            (None, Some(&b)) if b == Report::NotStarted as u8 => return true,
            (None, Some(&b)) if b == Report::Running as u8 => bytes.get(1..).and_then(<[u8]>::last),
            (None, _) => return false,
            (Some(_), _) => bytes.last(),
        };
        last == Some(&(Report::AllStopped as u8))
    }

    /// Stops the host process and reaps it (OR-3: the host process never
    /// outlives its request, nor its session). The lifeline is closed
    /// first, so the supervisor stops the command and everything it
    /// started, reaps them and exits; one that has not exited within
    /// [`STOP_GRACE`] is killed through the pidfd (its command dies with
    /// it). Idempotent, whoever calls it. An error means the process may
    /// still run, or what it started.
    pub fn kill_and_reap(&self) -> io::Result<()> {
        let mut state = self.state();
        let result = self.stop_locked(&mut state);
        match (result, state.all_stopped) {
            (Err(e), _) => Err(e),
            (Ok(()), Some(true)) => Ok(()),
            (Ok(()), _) => Err(io::Error::other(
                "the host-command supervisor did not stop everything the command started",
            )),
        }
    }

    fn stop_locked(&self, state: &mut StopState) -> io::Result<()> {
        if state.exited.is_some() {
            return Ok(());
        }
        drop(state.lifeline.take());
        let deadline = std::time::Instant::now() + STOP_GRACE;
        let wait = Timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        };
        while std::time::Instant::now() < deadline {
            if self.reap(state, WaitMode::Poll)?.is_some() {
                return Ok(());
            }
            let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&wait)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        tracing::warn!("an escalation supervisor did not stop within its grace: killed");
        match rustix::process::pidfd_send_signal(self.pidfd.as_fd(), rustix_signal(Signal::Kill)) {
            // ESRCH: it already exited (not yet reaped).
            Ok(()) | Err(rustix::io::Errno::SRCH) => {}
            Err(e) => return Err(e.into()),
        }
        // Bounded: a killed process exits; only EINTR repeats the wait.
        for _ in 0..64 {
            match self.reap(state, WaitMode::Block) {
                Ok(_) => {
                    // Its command died with it; what else it started may
                    // still run: its report says.
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("the wait was interrupted 64 times"))
    }
}

/// One read of the non-blocking report pipe: nothing there yet reads as
/// its end.
fn read_some(report: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    match rustix::io::read(report, buf) {
        Ok(n) => Ok(n),
        Err(rustix::io::Errno::AGAIN) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Stops a process nobody stopped; one already reaped had its stop's
/// outcome reported by whoever stopped it.
impl Drop for HostProcess {
    fn drop(&mut self) {
        if self.stop.reaped() {
            return;
        }
        if let Err(e) = self.kill_and_reap() {
            tracing::error!(error = %e, "an escalation host process could not be stopped and reaped");
        }
    }
}
