//! `lazaret __host-command`: the process an escalation host command runs
//! under, so that nothing the command starts outlives its request (spec
//! 3.8, OR-3: the host process is stopped and reaped before its results are
//! removed; a command's descendants are part of what it runs).
//!
//! The Host Coordinator starts it with the approved executable's held
//! descriptor, the exact vector, the host setting's environment and working
//! directory, the command's output pipes as standard output and error, and
//! a lifeline as standard input: the read end of a pipe whose write end
//! only the coordinator holds. The supervisor
//! 1. marks itself a child subreaper, so every orphan of the command's tree
//!    becomes its child instead of init's;
//! 2. runs the vector through the held descriptor (`/proc/self/fd/N`,
//!    argument zero as approved; standard input `/dev/null`; the command
//!    dies with it);
//! 3. waits for the command's exit or for the lifeline to end (the
//!    coordinator stops the request, or died);
//! 4. stops the command if it still runs, then every descendant: it kills
//!    its children through pidfds, which is exact because a child's PID
//!    cannot be reused before its parent reaps it, reaps them, and repeats
//!    (a killed child's own children are re-parented to it) until it has
//!    no child left;
//! 5. exits with the command's exit status, or aborts (no core) when a
//!    signal ended the command, so the coordinator sees "ended by a
//!    signal" as before.
//!
//! It reports on a pipe of its own (`--report-fd`, [`Report`]): first that
//! the command runs (or the errno it could not start with, so a command
//! that cannot start is the coordinator's launch failure, not an exit
//! status), last whether everything was stopped; the coordinator treats a
//! missing "all stopped" as a host process it could not stop. A child it
//! may not signal (one that gained another user's authority, `sudo`) or one
//! that does not end within 10 s makes that report "not all stopped".
//!
//! It signals nothing by number. A command cannot escape by daemonising
//! (`setsid`, double fork): re-parenting goes to the nearest subreaper.
//! What is beyond it: a process that another user's authority moves away,
//! and the supervisor itself killed by SIGKILL from outside (then the
//! command dies with it, and its orphans go to init).
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions};

/// The subcommand of the `lazaret` binary that runs [`supervise`].
pub const HOST_COMMAND_SUBCOMMAND: &str = "__host-command";

/// How long [`stop_descendants`] keeps killing and reaping before it gives
/// up (a child it may not signal, one stuck in the kernel).
pub(super) const STOP_WITHIN: Duration = Duration::from_secs(10);

/// What `__host-command` is given: `--executable-fd N -- ARGV0 ARGS...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupervisorArgs {
    pub executable_fd: RawFd,
    /// Where the supervisor reports ([`Report`]).
    pub report_fd: RawFd,
    pub argv: Vec<OsString>,
}

/// The supervisor's reports to the coordinator, one byte each on the
/// report pipe (`--report-fd`): first [`Report::Running`] or
/// [`Report::NotStarted`] (followed by the start error's errno, four bytes
/// little-endian), last [`Report::AllStopped`] or [`Report::NotAllStopped`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Report {
    Running = b'R',
    NotStarted = b'E',
    AllStopped = b'D',
    NotAllStopped = b'F',
}

/// Why `__host-command`'s arguments are unusable.
#[derive(Debug, thiserror::Error)]
#[error("argument {argument}: {problem}")]
pub struct SupervisorArgsError {
    argument: &'static str,
    problem: &'static str,
}

impl SupervisorArgs {
    /// The arguments after the subcommand name.
    pub fn to_argv(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec![
            "--executable-fd".into(),
            self.executable_fd.to_string().into(),
            "--report-fd".into(),
            self.report_fd.to_string().into(),
            "--".into(),
        ];
        out.extend(self.argv.iter().cloned());
        out
    }

    /// Parses what [`SupervisorArgs::to_argv`] produces, nothing else.
    pub fn parse(argv: &[OsString]) -> Result<Self, SupervisorArgsError> {
        const SHAPE: &str = "expected --executable-fd N --report-fd M -- ARGV0 ARGS...";
        let bad = |argument, problem| SupervisorArgsError { argument, problem };
        let [flag, fd, report_flag, report, separator, command @ ..] = argv else {
            return Err(bad("--executable-fd", SHAPE));
        };
        if flag != "--executable-fd" || report_flag != "--report-fd" || separator != "--" {
            return Err(bad("--executable-fd", SHAPE));
        }
        let descriptor = |text: &OsString, argument| {
            std::str::from_utf8(text.as_bytes())
                .ok()
                .and_then(|s| s.parse::<RawFd>().ok())
                .filter(|n| *n > 2)
                .ok_or_else(|| bad(argument, "not a descriptor number above 2"))
        };
        let executable_fd = descriptor(fd, "--executable-fd")?;
        let report_fd = descriptor(report, "--report-fd")?;
        if executable_fd == report_fd {
            return Err(bad("--report-fd", "the same descriptor as --executable-fd"));
        }
        if command.is_empty() {
            return Err(bad("ARGV0", "the command vector is empty"));
        }
        Ok(Self {
            executable_fd,
            report_fd,
            argv: command.to_vec(),
        })
    }
}

/// How the supervised command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this status.
    Exited(i32),
    /// A signal ended it (the lifeline's end included: it was killed).
    Signalled,
}

/// Why supervision failed (the command never ran, or could not be
/// waited for).
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("marking the supervisor a child subreaper: {0}")]
    Subreaper(#[source] io::Error),
    #[error("starting the command: {0}")]
    Spawn(#[source] io::Error),
    #[error("opening the command's pidfd: {0}")]
    Pidfd(#[source] io::Error),
    #[error("waiting for the command or the lifeline: {0}")]
    Wait(#[source] io::Error),
    #[error("stopping what the command left: {0}")]
    Descendants(#[source] io::Error),
}

/// Steps 1-4 of the module docs; returns how the command ended once it and
/// every descendant are gone. Reports on the report pipe as it goes
/// ([`Report`]); the pipe is closed when this returns.
pub fn supervise(args: &SupervisorArgs) -> Result<Ended, SupervisorError> {
    // SAFETY: the descriptor was inherited from the coordinator for exactly
    // this purpose; nothing else in this process owns it.
    let report = unsafe { OwnedFd::from_raw_fd(args.report_fd) };
    let tell = |bytes: &[u8]| {
        // A coordinator that stopped reading learns nothing either way.
        let _ = rustix::io::write(&report, bytes);
    };
    let started = start(args);
    let (pidfd, lifeline) = match started {
        Ok(running) => {
            tell(&[Report::Running as u8]);
            running
        }
        Err(e) => {
            let errno = match &e {
                SupervisorError::Spawn(source) => source.raw_os_error().unwrap_or(0),
                _ => 0,
            };
            let mut record = vec![Report::NotStarted as u8];
            record.extend_from_slice(&errno.to_le_bytes());
            tell(&record);
            return Err(e);
        }
    };
    let ended = wait_for_end(&pidfd, lifeline);
    let stopped = stop_descendants();
    tell(&[if stopped.is_ok() {
        Report::AllStopped as u8
    } else {
        Report::NotAllStopped as u8
    }]);
    let ended = ended?;
    stopped.map_err(SupervisorError::Descendants)?;
    Ok(ended)
}

/// Steps 1 and 2: the subreaper mark and the command, held by its pidfd.
fn start(args: &SupervisorArgs) -> Result<(OwnedFd, BorrowedFd<'static>), SupervisorError> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(|e| SupervisorError::Subreaper(e.into()))?;
    let (program, rest) = args
        .argv
        .split_first()
        .ok_or_else(|| SupervisorError::Spawn(io::Error::other("the command vector is empty")))?;
    let mut command = Command::new(format!("/proc/self/fd/{}", args.executable_fd));
    command.arg0(program).args(rest).stdin(Stdio::null());
    let report = args.report_fd;
    // SAFETY: close and prctl are async-signal-safe and allocate nothing;
    // the closure holds only a descriptor number, open in the forked child.
    unsafe {
        command.pre_exec(move || {
            // The command gets no report descriptor.
            drop(OwnedFd::from_raw_fd(report));
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            Ok(())
        });
    }
    let child = command.spawn().map_err(SupervisorError::Spawn)?;
    let pid = Pid::from_child(&child);
    // The std handle is dropped without waiting: the pidfd reaps it.
    drop(child);
    match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
        Ok(pidfd) => Ok((pidfd, rustix::stdio::stdin())),
        Err(e) => {
            // Our unreaped child: stop everything we have and fail.
            let _ = stop_descendants();
            Err(SupervisorError::Pidfd(e.into()))
        }
    }
}

/// Step 3: the command's end, or the lifeline's (the command is then
/// killed; it is reaped with the rest).
fn wait_for_end(pidfd: &OwnedFd, lifeline: BorrowedFd<'_>) -> Result<Ended, SupervisorError> {
    loop {
        let mut fds = [
            PollFd::new(pidfd, PollFlags::IN),
            PollFd::new(&lifeline, PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(SupervisorError::Wait(e.into())),
        }
        if let Some(ended) = exited(pidfd.as_fd()).map_err(SupervisorError::Wait)? {
            return Ok(ended);
        }
        if lifeline_ended(lifeline) {
            let _ = rustix::process::pidfd_send_signal(pidfd, Signal::KILL);
            return Ok(Ended::Signalled);
        }
        // Readable but not reapable (a zombie an outside tracer holds):
        // no busy loop.
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Step 5: the supervisor's own end for `ended`.
pub fn mirror(ended: Ended) -> i32 {
    match ended {
        Ended::Exited(code) => code,
        Ended::Signalled => {
            // A non-dumpable process leaves no core and wakes no core
            // handler: the abort only reports "ended by a signal".
            let _ = rustix::process::set_dumpable_behavior(
                rustix::process::DumpableBehavior::NotDumpable,
            );
            std::process::abort()
        }
    }
}

/// The command's end, reaped, once it ended.
fn exited(pidfd: BorrowedFd<'_>) -> io::Result<Option<Ended>> {
    let status = rustix::process::waitid(
        WaitId::PidFd(pidfd),
        WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
    )?;
    Ok(status.map(|s| match s.exit_status() {
        Some(code) => Ended::Exited(code),
        None => Ended::Signalled,
    }))
}

/// Whether the coordinator's end of the lifeline is gone (end of file, an
/// error, or anything written: the lifeline carries no data).
fn lifeline_ended(lifeline: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::new(&lifeline, PollFlags::IN)];
    match rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())) {
        Ok(0) => false,
        Ok(_) => !fds[0].revents().is_empty(),
        Err(rustix::io::Errno::INTR) => false,
        Err(_) => true,
    }
}

/// Step 4: kills every child through its pidfd and reaps, round after
/// round, until the supervisor has no child at all, for at most
/// [`STOP_WITHIN`]. A child it may not signal (one that gained another
/// user's authority) is passed over, and the stop then fails when the time
/// is up.
pub fn stop_descendants() -> io::Result<()> {
    let own = rustix::process::getpid();
    let deadline = Instant::now() + STOP_WITHIN;
    let mut pause = Duration::from_millis(1);
    let mut refused = 0usize;
    while Instant::now() < deadline {
        for pid in children_of(own)? {
            // A child of ours, unreaped: its PID names it until we reap.
            match rustix::process::pidfd_open(pid, PidfdFlags::empty()) {
                Ok(pidfd) => match rustix::process::pidfd_send_signal(&pidfd, Signal::KILL) {
                    Ok(()) | Err(rustix::io::Errno::SRCH) => {}
                    Err(rustix::io::Errno::PERM) => refused += 1,
                    Err(e) => return Err(e.into()),
                },
                // Ended between the listing and now (only this thread
                // reaps, so the PID is still ours until it does).
                Err(rustix::io::Errno::SRCH) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Reap whatever has ended; no child at all ends the stop.
        loop {
            match rustix::process::waitid(
                WaitId::All,
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            ) {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(rustix::io::Errno::CHILD) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        // Killed children take a moment to exit; a child that does not
        // end is not polled for at full speed.
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
    Err(io::Error::other(format!(
        "children were left after {} s ({refused} signals refused)",
        STOP_WITHIN.as_secs()
    )))
}

/// The PIDs whose parent is `parent` (read from `/proc/PID/stat`; this
/// kernel may lack `/proc/PID/task/TID/children`).
fn children_of(parent: Pid) -> io::Result<Vec<Pid>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let name = entry.file_name();
        let Some(pid) = std::str::from_utf8(name.as_bytes())
            .ok()
            .and_then(|s| s.parse::<i32>().ok())
            .and_then(Pid::from_raw)
        else {
            continue;
        };
        // A process that ended since the listing has no stat: skip it.
        let Ok(stat) = std::fs::read(entry.path().join("stat")) else {
            continue;
        };
        if parent_in_stat(&stat) == Some(parent.as_raw_nonzero().get()) {
            out.push(pid);
        }
    }
    Ok(out)
}

/// The parent PID field of a `/proc/PID/stat` line: the second field after
/// the command name's closing parenthesis (the name may hold any byte).
fn parent_in_stat(stat: &[u8]) -> Option<i32> {
    let close = stat.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_round_trip_and_anything_else_is_refused() {
        let args = SupervisorArgs {
            executable_fd: 7,
            report_fd: 8,
            argv: vec!["/usr/bin/make".into(), "--".into(), "-x".into()],
        };
        assert_eq!(SupervisorArgs::parse(&args.to_argv()).ok(), Some(args));
        for bad in [
            "",
            "--executable-fd 7 --report-fd 8 --",
            "--executable-fd 2 --report-fd 8 -- /bin/true",
            "--executable-fd x --report-fd 8 -- /bin/true",
            "--executable-fd 7 --report-fd 7 -- /bin/true",
            "--fd 7 --report-fd 8 -- /bin/true",
            "--executable-fd 7 -- /bin/true",
            "--executable-fd 7 --report-fd 8 /bin/true",
        ] {
            let argv: Vec<OsString> = bad.split_whitespace().map(OsString::from).collect();
            assert!(SupervisorArgs::parse(&argv).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_parent_is_read_after_the_last_parenthesis() {
        assert_eq!(parent_in_stat(b"42 (a) b) S 17 42 42 0"), Some(17));
        assert_eq!(parent_in_stat(b"42 (sh) R 1 1 1"), Some(1));
        assert_eq!(parent_in_stat(b"42 (sh"), None);
    }
}
