//! Kernel calls the broker and the wrapper make beyond process identity.
use crate::process_identity::real::RealProcessSys;
use crate::process_identity::ProcessSys;
use lazaret_runtime::records::process::{HostPid, PidfsProcessAuthorityV1};
use rustix::pipe::PipeFlags;
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// The target a broker acquisition finally executes (foreground,
/// non-daemonizing, argv[0] resolved through PATH by the wrapper).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetCommand {
    pub argv: Vec<OsString>,
    /// Descriptors the target inherits. They stay close-on-exec in this
    /// process and are made inheritable only in the spawned child, so a
    /// concurrent spawn by another thread can never inherit them.
    pub inherit: Vec<RawFd>,
}

/// One wrapper spawn: the `lazaret` binary, the inherited barrier read end,
/// the parent's pidfs authority the wrapper must recheck, and the target.
#[derive(Debug)]
pub struct WrapperSpawn<'a> {
    pub program: &'a Path,
    pub barrier: &'a OwnedFd,
    pub parent: PidfsProcessAuthorityV1,
    pub target: &'a TargetCommand,
}

/// Spawn-side kernel calls of the broker.
pub trait SpawnSys: ProcessSys {
    /// Whether `SIGCHLD` is ignored (the kernel would then auto-reap children
    /// and a PID could be recycled before acquisition completes).
    fn sigchld_ignored(&self) -> io::Result<bool>;
    /// A close-on-exec pipe: (read end, write end).
    fn barrier_pipe(&self) -> io::Result<(OwnedFd, OwnedFd)>;
    /// Spawns the wrapper with only the barrier read end inherited.
    fn spawn_wrapper(&self, spawn: &WrapperSpawn<'_>) -> io::Result<HostPid>;
    /// Writes the release message and closes the write end.
    fn write_release(&self, barrier: OwnedFd, message: &[u8]) -> io::Result<()>;
    /// Reaps a wrapper whose pidfd could not be opened (the zombie pins its
    /// PID, so this wait cannot reach another process).
    fn reap_unopened(&self, pid: HostPid) -> io::Result<()>;
}

/// Wrapper-side kernel calls.
pub trait WrapperSys: ProcessSys {
    /// Reads the inherited barrier descriptor to EOF (at most `limit` bytes)
    /// and closes it.
    fn read_barrier(&self, fd: RawFd, limit: usize) -> io::Result<Vec<u8>>;
    /// `prctl(PR_SET_PDEATHSIG, SIGKILL)`.
    fn arm_parent_death(&self) -> io::Result<()>;
    /// `getppid()`; `None` when the parent is outside our PID namespace.
    fn parent_pid(&self) -> Option<HostPid>;
    /// Replaces the process image; returns only on failure.
    fn exec(&self, argv: &[OsString]) -> io::Error;
}

pub(crate) fn sigchld_ignored_in(status: &str) -> io::Result<bool> {
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .map(str::trim)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no SigIgn line"))?;
    let mask =
        u64::from_str_radix(mask, 16).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    // Signal n is bit n-1; SIGCHLD is 17 on x86-64.
    Ok(mask & (1 << 16) != 0)
}

impl SpawnSys for RealProcessSys {
    fn sigchld_ignored(&self) -> io::Result<bool> {
        sigchld_ignored_in(&std::fs::read_to_string("/proc/self/status")?)
    }

    fn barrier_pipe(&self) -> io::Result<(OwnedFd, OwnedFd)> {
        Ok(rustix::pipe::pipe_with(PipeFlags::CLOEXEC)?)
    }

    fn spawn_wrapper(&self, spawn: &WrapperSpawn<'_>) -> io::Result<HostPid> {
        let fd = spawn.barrier.as_raw_fd();
        let mut args = vec![OsString::from(super::wrapper::WRAPPER_SUBCOMMAND)];
        args.extend(super::wrapper::WrapperArgs::to_argv(
            fd,
            &spawn.parent,
            &spawn.target.argv,
        ));
        // The barrier read end and the target's descriptors cross the exec;
        // they stay close-on-exec here (`posix_spawn`'s module doc).
        let keep: Vec<RawFd> = std::iter::once(fd)
            .chain(spawn.target.inherit.iter().copied())
            .collect();
        // The broker reaps the wrapper through its pidfd only.
        super::posix_spawn::spawn_keeping(spawn.program, &args, &keep)
    }

    fn write_release(&self, barrier: OwnedFd, message: &[u8]) -> io::Result<()> {
        let mut file = std::fs::File::from(barrier);
        file.write_all(message)
    }

    fn reap_unopened(&self, pid: HostPid) -> io::Result<()> {
        let raw = i32::try_from(pid.0)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "invalid PID"))?;
        rustix::process::waitpid(Some(raw), rustix::process::WaitOptions::empty())?;
        Ok(())
    }
}

impl WrapperSys for RealProcessSys {
    fn read_barrier(&self, fd: RawFd, limit: usize) -> io::Result<Vec<u8>> {
        // SAFETY: borrowing only for the F_GETFD validity check below; the
        // borrow does not outlive this statement.
        rustix::io::fcntl_getfd(unsafe { BorrowedFd::borrow_raw(fd) })?;
        // SAFETY: `fd` is open (checked above) and was inherited from the
        // broker solely for this wrapper; nothing else in this process owns
        // it, so taking ownership (and closing it) is sound.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut bytes = Vec::new();
        std::fs::File::from(owned)
            .take(u64::try_from(limit).unwrap_or(u64::MAX))
            .read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    fn arm_parent_death(&self) -> io::Result<()> {
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
        Ok(())
    }

    fn parent_pid(&self) -> Option<HostPid> {
        rustix::process::getppid().map(|p| HostPid(p.as_raw_nonzero().get().unsigned_abs()))
    }

    fn exec(&self, argv: &[OsString]) -> io::Error {
        let Some((program, args)) = argv.split_first() else {
            return io::Error::new(io::ErrorKind::InvalidInput, "empty target argv");
        };
        Command::new(program).args(args).exec()
    }
}

#[cfg(test)]
mod tests {
    use super::sigchld_ignored_in;

    #[test]
    fn sigchld_is_bit_sixteen_of_sigign() {
        assert!(matches!(
            sigchld_ignored_in("SigQ:\t0/1\nSigIgn:\t0000000000010000\n"),
            Ok(true)
        ));
        assert!(matches!(
            sigchld_ignored_in("SigIgn:\t0000000000001000\n"),
            Ok(false)
        ));
        assert!(sigchld_ignored_in("SigBlk:\t0\n").is_err());
    }
}
