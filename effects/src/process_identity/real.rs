//! The kernel implementation of [`ProcessSys`].
use super::{ChildState, Pidfd, ProcessHandle, ProcessSys, Signal, WaitMode};
use lazaret_runtime::records::process::{BootId, HostPid, PidfsDev, PidfsIno};
use rustix::process::{Pid, PidfdFlags, WaitId, WaitIdOptions};
use std::io;

#[derive(Clone, Copy, Debug, Default)]
pub struct RealProcessSys;

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

pub(crate) fn rustix_signal(signal: Signal) -> rustix::process::Signal {
    use rustix::process::Signal as R;
    match signal {
        Signal::Hup => R::HUP,
        Signal::Int => R::INT,
        Signal::Quit => R::QUIT,
        Signal::Winch => R::WINCH,
        Signal::Tstp => R::TSTP,
        Signal::Term => R::TERM,
        Signal::Kill => R::KILL,
    }
}

fn to_pid(pid: HostPid) -> io::Result<Pid> {
    i32::try_from(pid.0)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| invalid(format!("PID {} is not a valid process ID", pid.0)))
}

/// Parses field 22 (`starttime`) of `/proc/<pid>/stat`; the command field
/// may contain spaces and parentheses, so fields are counted after the last ')'.
pub fn parse_start_time(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Field 3 is the first after ')'; starttime is field 22.
    after.split_ascii_whitespace().nth(19)?.parse().ok()
}

impl ProcessSys for RealProcessSys {
    fn boot_id(&self) -> io::Result<BootId> {
        let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?;
        BootId::parse(&text).map_err(|e| invalid(e.to_string()))
    }

    fn in_host_pid_namespace(&self) -> io::Result<bool> {
        let status = std::fs::read_to_string("/proc/self/status")?;
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .ok_or_else(|| invalid("/proc/self/status has no NSpid line".to_owned()))?;
        Ok(line.split_ascii_whitespace().count() == 1)
    }

    fn own_pid(&self) -> HostPid {
        HostPid(
            rustix::process::getpid()
                .as_raw_nonzero()
                .get()
                .unsigned_abs(),
        )
    }

    fn pidfd_open(&self, pid: HostPid) -> io::Result<Pidfd> {
        let fd = rustix::process::pidfd_open(to_pid(pid)?, PidfdFlags::empty())?;
        Ok(Pidfd::new(fd, pid))
    }

    fn fstatfs_type(&self, pidfd: &Pidfd) -> io::Result<u64> {
        let stat = rustix::fs::fstatfs(pidfd)?;
        u64::try_from(stat.f_type).map_err(|_| invalid(format!("negative f_type {}", stat.f_type)))
    }

    fn fstat_pidfs(&self, pidfd: &Pidfd) -> io::Result<(PidfsDev, PidfsIno)> {
        let stat = rustix::fs::fstat(pidfd)?;
        Ok((PidfsDev(stat.st_dev), PidfsIno(stat.st_ino)))
    }

    fn start_time(&self, pid: HostPid) -> io::Result<u64> {
        let path = format!("/proc/{}/stat", pid.0);
        let stat = std::fs::read_to_string(&path)?;
        parse_start_time(&stat).ok_or_else(|| invalid(format!("{path} has no start time field")))
    }

    fn exited(&self, pidfd: &Pidfd) -> io::Result<bool> {
        let mut fds = [rustix::event::PollFd::new(
            pidfd,
            rustix::event::PollFlags::IN,
        )];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut fds, Some(&zero))?;
        Ok(fds[0].revents().contains(rustix::event::PollFlags::IN))
    }

    fn waitid(&self, pidfd: &Pidfd, mode: WaitMode) -> io::Result<ChildState> {
        let options = match mode {
            WaitMode::Peek => WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
            WaitMode::Poll => WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            WaitMode::Block => WaitIdOptions::EXITED,
        };
        let _span = tracing::trace_span!("waitid", pid = pidfd.locator().0, ?mode).entered();
        match rustix::process::waitid(WaitId::PidFd(pidfd.as_fd_borrow()), options)? {
            None => Ok(ChildState::Running),
            Some(status) => Ok(ChildState::Exited {
                code: status.exit_status(),
                signal: status.terminating_signal(),
            }),
        }
    }

    fn pidfd_send_signal(&self, target: &ProcessHandle, signal: Signal) -> io::Result<()> {
        rustix::process::pidfd_send_signal(target.pidfd(), rustix_signal(signal))?;
        Ok(())
    }
}

impl Pidfd {
    fn as_fd_borrow(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(self)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_start_time;

    #[test]
    fn start_time_is_counted_after_the_last_parenthesis() {
        let stat = "42 (a) b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1 2 3";
        assert_eq!(parse_start_time(stat), Some(987654));
        assert_eq!(parse_start_time("42 (x) S 1"), None);
    }
}
