//! Short children that never become durable process ownership: the ID map
//! helpers (`newuidmap`/`newgidmap`), the preparation workers (`umoci`,
//! `rm`), `nft`, `git`, and the guest tool's `runsc exec` clients.
//!
//! Spec 3.3: the broker owns every spawn and reap of its process; "no
//! same-parent spawn or reap and no dependency process API bypasses the
//! broker". So a transient child is spawned while this thread holds the
//! process-wide spawn exclusion ([`super::exclusion`]), its pidfd is opened
//! at once (the child is ours and unreaped, so its PID cannot have been
//! reused), and it is reaped only through that pidfd — never by a numeric
//! PID wait. Every run is bounded: a time limit, after which the child is
//! killed through its pidfd and reaped, and an output limit per stream.
use crate::process_identity::real::{rustix_signal, RealProcessSys};
use crate::process_identity::{ChildState, Pidfd, ProcessSys, Signal, WaitMode};
use lazaret_runtime::records::process::HostPid;
use rustix::event::{PollFd, PollFlags, Timespec};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a transient child may run and how much of each output stream
/// is kept (the rest is read and dropped, so the child never blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub time: Duration,
    pub output: usize,
}

impl Limits {
    /// A run of `time` keeping up to 1 MiB of each stream.
    pub const fn of(time: Duration) -> Self {
        Self {
            time,
            output: 1024 * 1024,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TransientError {
    #[error("cannot start {program}: {source}")]
    Spawn { program: String, source: io::Error },
    #[error("cannot open a pidfd for {program} (PID {pid}): {source}")]
    Pidfd {
        program: String,
        pid: u32,
        source: io::Error,
    },
    #[error("cannot {step} of {program}: {source}")]
    Io {
        program: String,
        step: &'static str,
        source: io::Error,
    },
    #[error("{program} ran longer than {limit:?} and was killed")]
    TimedOut { program: String, limit: Duration },
}

impl TransientError {
    /// The underlying I/O error (a missing program is `NotFound`).
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            Self::Spawn { source, .. } | Self::Pidfd { source, .. } | Self::Io { source, .. } => {
                Some(source.kind())
            }
            Self::TimedOut { .. } => None,
        }
    }
}

/// A spawned transient child: its pidfd and the parent ends of the pipes
/// it was given.
#[derive(Debug)]
pub struct Transient {
    program: String,
    pidfd: Pidfd,
    stdin: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
}

impl Transient {
    /// Spawns `command` (with the stdio its caller set) under the spawn
    /// exclusion and takes its pidfd.
    pub fn spawn(command: &mut Command) -> Result<Self, TransientError> {
        let program = command.get_program().to_string_lossy().into_owned();
        let child = {
            let _spawning = super::exclusion::spawn_exclusion();
            command.spawn()
        }
        .map_err(|source| TransientError::Spawn {
            program: program.clone(),
            source,
        })?;
        Self::adopt(child, program)
    }

    /// Takes over a child its caller spawned while holding the spawn
    /// exclusion (the user-namespace worker spawn, which maps the child
    /// before releasing it).
    pub fn adopt(mut child: Child, program: String) -> Result<Self, TransientError> {
        let pid = child.id();
        let pidfd = match RealProcessSys.pidfd_open(HostPid(pid)) {
            Ok(pidfd) => pidfd,
            Err(source) => {
                // Without a pidfd the std handle is the only one left. The
                // child is never signalled by number (spec 3.3); its pipes
                // close with the handle, and it is reaped by its own PID,
                // which stays its own until that reap.
                drop((child.stdin.take(), child.stdout.take(), child.stderr.take()));
                let _ = child.wait();
                return Err(TransientError::Pidfd {
                    program,
                    pid,
                    source,
                });
            }
        };
        let stdin = child.stdin.take().map(OwnedFd::from);
        let stdout = child.stdout.take().map(OwnedFd::from);
        let stderr = child.stderr.take().map(OwnedFd::from);
        // Dropped without waiting: the pidfd reaps it.
        drop(child);
        Ok(Self {
            program,
            pidfd,
            stdin,
            stdout,
            stderr,
        })
    }

    /// Output pipes the caller made itself (the child got the write ends
    /// some other way than its standard streams).
    pub fn with_output(mut self, stdout: OwnedFd, stderr: OwnedFd) -> Self {
        self.stdout = Some(stdout);
        self.stderr = Some(stderr);
        self
    }

    /// Writes `input` to the child's standard input (then closes it),
    /// collects its output and reaps it through the pidfd, within `limits`.
    pub fn finish(mut self, input: &[u8], limits: Limits) -> Result<Output, TransientError> {
        let deadline = Instant::now() + limits.time;
        let mut written = 0;
        let mut out = Vec::new();
        let mut err = Vec::new();
        for fd in [&self.stdin, &self.stdout, &self.stderr]
            .into_iter()
            .flatten()
        {
            rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK)
                .map_err(|e| self.failed("make its pipes non-blocking", e.into()))?;
        }
        if input.is_empty() {
            self.stdin = None;
        }
        while self.stdin.is_some() || self.stdout.is_some() || self.stderr.is_some() {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Err(self.kill_and_reap(limits.time));
            };
            let mut fds = Vec::with_capacity(3);
            if let Some(fd) = &self.stdin {
                fds.push(PollFd::new(fd, PollFlags::OUT));
            }
            for fd in [&self.stdout, &self.stderr].into_iter().flatten() {
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
            let timeout = Timespec::try_from(left).unwrap_or(Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            });
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(self.failed("poll its pipes", e.into())),
            }
            drop(fds);
            if let Some(fd) = &self.stdin {
                match write_some(fd, &input[written..]) {
                    Ok(n) => written += n,
                    // A child that stopped reading: its output tells why.
                    Err(e) if e.kind() == io::ErrorKind::BrokenPipe => written = input.len(),
                    Err(e) => return Err(self.failed("write its standard input", e)),
                }
                if written == input.len() {
                    self.stdin = None;
                }
            }
            if let Some(fd) = &self.stdout {
                if !drain(fd, &mut out, limits.output)
                    .map_err(|e| self.failed("read its standard output", e))?
                {
                    self.stdout = None;
                }
            }
            if let Some(fd) = &self.stderr {
                if !drain(fd, &mut err, limits.output)
                    .map_err(|e| self.failed("read its standard error", e))?
                {
                    self.stderr = None;
                }
            }
        }
        let status = self.wait_exit(deadline, limits.time)?;
        Ok(Output {
            status,
            stdout: out,
            stderr: err,
        })
    }

    fn io(&self, step: &'static str, source: io::Error) -> TransientError {
        TransientError::Io {
            program: self.program.clone(),
            step,
            source,
        }
    }

    /// Waits for the exit until `deadline` (the streams are closed), then
    /// kills.
    fn wait_exit(&self, deadline: Instant, limit: Duration) -> Result<ExitStatus, TransientError> {
        // Bounded by the deadline: each turn waits at most until it.
        loop {
            let state = RealProcessSys
                .waitid(&self.pidfd, WaitMode::Poll)
                .map_err(|e| self.failed("wait for its exit", e))?;
            if let ChildState::Exited { code, signal } = state {
                return Ok(exit_status(code, signal));
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Err(self.kill_and_reap(limit));
            };
            let timeout = Timespec::try_from(left).unwrap_or(Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            });
            let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(self.failed("poll its pidfd", e.into())),
            }
        }
    }

    /// A step of [`Transient::finish`] failed: the child is killed and
    /// reaped through its pidfd before the error is returned, so no
    /// transient child outlives a failed run (a caller may then remove
    /// what the child was writing).
    fn failed(&self, step: &'static str, source: io::Error) -> TransientError {
        let reaped =
            rustix::process::pidfd_send_signal(self.pidfd.as_fd(), rustix_signal(Signal::Kill))
                .map_err(io::Error::from)
                .and_then(|()| RealProcessSys.waitid(&self.pidfd, WaitMode::Block));
        if let Err(e) = reaped {
            tracing::warn!(program = %self.program, error = %e, "could not kill and reap the child after a failure");
        }
        self.io(step, source)
    }

    /// SIGKILL through the pidfd and a blocking reap through it.
    fn kill_and_reap(&self, limit: Duration) -> TransientError {
        let killed =
            rustix::process::pidfd_send_signal(self.pidfd.as_fd(), rustix_signal(Signal::Kill))
                .map_err(io::Error::from)
                .and_then(|()| RealProcessSys.waitid(&self.pidfd, WaitMode::Block));
        match killed {
            Ok(_) => TransientError::TimedOut {
                program: self.program.clone(),
                limit,
            },
            Err(e) => self.io("kill it after its time limit", e),
        }
    }
}

/// Runs `command` to completion as a transient child: `input` on its
/// standard input (none when empty), its standard output and error
/// collected.
pub fn output(
    command: &mut Command,
    input: &[u8],
    limits: Limits,
) -> Result<Output, TransientError> {
    command
        .stdin(if input.is_empty() {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Transient::spawn(command)?.finish(input, limits)
}

fn exit_status(code: Option<i32>, signal: Option<i32>) -> ExitStatus {
    match (code, signal) {
        (_, Some(sig)) => ExitStatus::from_raw(sig & 0x7f),
        (Some(c), None) => ExitStatus::from_raw((c & 0xff) << 8),
        (None, None) => ExitStatus::from_raw(0xff << 8),
    }
}

fn write_some(fd: &OwnedFd, bytes: &[u8]) -> io::Result<usize> {
    match rustix::io::write(fd, bytes) {
        Ok(n) => Ok(n),
        Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Reads what is there now, keeping at most `limit` bytes in `into`;
/// false at end of file.
fn drain(fd: &OwnedFd, into: &mut Vec<u8>, limit: usize) -> io::Result<bool> {
    let mut buf = [0u8; 8192];
    // Bounded: a pipe holds at most its capacity between two polls, and
    // a writer that keeps up is cut off by the time limit.
    loop {
        match rustix::io::read(fd, &mut buf) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                let room = limit.saturating_sub(into.len());
                into.extend_from_slice(&buf[..n.min(room)]);
            }
            Err(rustix::io::Errno::AGAIN) => return Ok(true),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn collects_both_streams_and_the_exit_status() {
        let out = output(
            &mut sh("echo out; echo err >&2; exit 3"),
            b"",
            Limits::of(Duration::from_secs(10)),
        )
        .unwrap();
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
        assert_eq!(out.status.code(), Some(3));
    }

    #[test]
    fn feeds_input_larger_than_a_pipe() {
        let input = vec![b'x'; 300 * 1024];
        let out = output(
            &mut sh("wc -c"),
            &input,
            Limits::of(Duration::from_secs(10)),
        )
        .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "307200");
    }

    #[test]
    fn keeps_at_most_the_output_limit_and_never_blocks_the_child() {
        let limits = Limits {
            time: Duration::from_secs(10),
            output: 1000,
        };
        let out = output(&mut sh("head -c 500000 /dev/zero"), b"", limits).unwrap();
        assert_eq!(out.stdout.len(), 1000);
        assert!(out.status.success());
    }

    #[test]
    fn a_child_past_its_time_limit_is_killed_and_reaped() {
        let started = Instant::now();
        let err = output(
            &mut sh("exec sleep 30"),
            b"",
            Limits::of(Duration::from_millis(300)),
        )
        .unwrap_err();
        assert!(matches!(err, TransientError::TimedOut { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_missing_program_is_a_spawn_error_naming_it() {
        let err = output(
            &mut Command::new("/nonexistent/lazaret-no-such-tool"),
            b"",
            Limits::of(Duration::from_secs(1)),
        )
        .unwrap_err();
        assert_eq!(err.io_kind(), Some(io::ErrorKind::NotFound));
        assert!(err.to_string().contains("lazaret-no-such-tool"), "{err}");
    }
}
