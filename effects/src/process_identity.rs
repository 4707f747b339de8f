//! pidfs process identity and exact recovery matching (spec 3.3 "Host process
//! identity and causal acquisition refinement", FR-7).
//!
//! The boot ID plus pidfs `st_dev`/`st_ino` is the only positive authority;
//! the host PID is a locator and the start time negative evidence. A retained
//! pidfd ([`ProcessHandle`]) is the live authority: every signal goes through
//! `pidfd_send_signal` on that exact descriptor. There is no numeric-PID
//! signalling anywhere, and a [`ProcessHandle`] can only be obtained by the
//! broker's child acquisition or by [`match_recorded`].
pub mod fake;
pub mod real;
mod recovery;

pub use recovery::{liveness, match_recorded, Liveness, RecoveryRefusal};

use lazaret_runtime::records::process::{
    BootId, HostPid, PidfsDev, PidfsIno, PidfsProcessAuthorityV1, PidfsProcessIdentityV1,
};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// `PID_FS_MAGIC` from `<linux/magic.h>`.
pub const PID_FS_MAGIC: u64 = 0x5049_4446;

/// A pidfd together with the locator it was opened for.
#[derive(Debug)]
pub struct Pidfd {
    fd: OwnedFd,
    pid: HostPid,
}

impl Pidfd {
    pub fn new(fd: OwnedFd, pid: HostPid) -> Self {
        Self { fd, pid }
    }

    /// The locator this descriptor was opened for (not authority).
    pub fn locator(&self) -> HostPid {
        self.pid
    }
}

impl AsFd for Pidfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Signals Lazaret sends to host processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Hup,
    Int,
    Quit,
    Term,
    Kill,
    /// Window change: to a PTY-attached `runsc exec` client, which forwards
    /// it to the guest terminal's foreground group (docs/terminals.md).
    Winch,
    /// Terminal stop (Ctrl-Z): to a PTY-attached `runsc exec` client, which
    /// forwards it to the guest terminal's foreground group.
    Tstp,
}

/// How `waitid(P_PIDFD, ...)` is called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// `WEXITED | WNOHANG | WNOWAIT`: observe without reaping (spec 3.3 step 4).
    Peek,
    /// `WEXITED | WNOHANG`: reap if exited.
    Poll,
    /// `WEXITED`: block until exit and reap.
    Block,
}

/// What `waitid` observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildState {
    Running,
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// Every kernel call process identity needs, behind one trait (youki style);
/// [`real::RealProcessSys`] calls the kernel, [`fake::FakeProcessSys`] records.
pub trait ProcessSys {
    /// `/proc/sys/kernel/random/boot_id`.
    fn boot_id(&self) -> io::Result<BootId>;
    /// Whether this process's PID namespace is the one its procfs shows at
    /// one level (`NSpid` has one entry), so stored PIDs are host PIDs.
    fn in_host_pid_namespace(&self) -> io::Result<bool>;
    /// `getpid()`.
    fn own_pid(&self) -> HostPid;
    /// `pidfd_open(pid, 0)`.
    fn pidfd_open(&self, pid: HostPid) -> io::Result<Pidfd>;
    /// `fstatfs(pidfd).f_type`.
    fn fstatfs_type(&self, pidfd: &Pidfd) -> io::Result<u64>;
    /// `fstat(pidfd)`: the pidfs device and inode.
    fn fstat_pidfs(&self, pidfd: &Pidfd) -> io::Result<(PidfsDev, PidfsIno)>;
    /// Field 22 of `/proc/<pid>/stat` (negative evidence only).
    fn start_time(&self, pid: HostPid) -> io::Result<u64>;
    /// `waitid(P_PIDFD, pidfd, ...)`.
    fn waitid(&self, pidfd: &Pidfd, mode: WaitMode) -> io::Result<ChildState>;
    /// Whether the pidfd's process has exited (`poll` says it is readable),
    /// whoever its parent is; nothing is reaped.
    fn exited(&self, pidfd: &Pidfd) -> io::Result<bool>;
    /// `pidfd_send_signal(pidfd, signal, NULL, 0)` on the retained pidfd of
    /// an exactly acquired or exactly matched process. Taking a
    /// [`ProcessHandle`] (not a bare [`Pidfd`]) makes reopen-and-signal by
    /// PID impossible: `pidfd_open` alone never yields a handle.
    fn pidfd_send_signal(&self, target: &ProcessHandle, signal: Signal) -> io::Result<()>;
}

/// Why a pidfs identity could not be formed from a descriptor.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("fstatfs on the pidfd for PID {pid:?} failed: {source}")]
    Fstatfs { pid: HostPid, source: io::Error },
    #[error("the descriptor for PID {pid:?} is not on pidfs (f_type {f_type:#x}, expected PID_FS_MAGIC {PID_FS_MAGIC:#x})")]
    NotPidfs { pid: HostPid, f_type: u64 },
    #[error("fstat on the pidfd for PID {pid:?} failed: {source}")]
    Fstat { pid: HostPid, source: io::Error },
    #[error("cannot read the current boot id: {0}")]
    BootId(io::Error),
    #[error("cannot read the start time of PID {pid:?}: {source}")]
    StartTime { pid: HostPid, source: io::Error },
}

/// Checks `f_type == PID_FS_MAGIC` and reads the pidfs device and inode of
/// exactly this descriptor (spec 3.3 step 5 and recovery step 5).
pub fn pidfs_authority<S: ProcessSys>(
    sys: &S,
    pidfd: &Pidfd,
    boot_id: BootId,
) -> Result<PidfsProcessAuthorityV1, IdentityError> {
    let pid = pidfd.locator();
    let f_type = sys
        .fstatfs_type(pidfd)
        .map_err(|source| IdentityError::Fstatfs { pid, source })?;
    if f_type != PID_FS_MAGIC {
        return Err(IdentityError::NotPidfs { pid, f_type });
    }
    let (dev, ino) = sys
        .fstat_pidfs(pidfd)
        .map_err(|source| IdentityError::Fstat { pid, source })?;
    Ok(PidfsProcessAuthorityV1 {
        boot_id,
        pidfs_st_dev: dev,
        pidfs_st_ino: ino,
    })
}

/// Forms the v1 identity of the process behind `pidfd`.
pub fn identity_of<S: ProcessSys>(
    sys: &S,
    pidfd: &Pidfd,
) -> Result<PidfsProcessIdentityV1, IdentityError> {
    let boot = sys.boot_id().map_err(IdentityError::BootId)?;
    let authority = pidfs_authority(sys, pidfd, boot)?;
    let pid = pidfd.locator();
    let start_time_ticks = sys
        .start_time(pid)
        .map_err(|source| IdentityError::StartTime { pid, source })?;
    Ok(PidfsProcessIdentityV1 {
        authority,
        host_pid: pid,
        start_time_ticks,
    })
}

/// A retained pidfd bound to an exact identity: the only way Lazaret polls,
/// waits for or signals a host process.
#[derive(Debug)]
pub struct ProcessHandle {
    pidfd: Pidfd,
    identity: PidfsProcessIdentityV1,
}

impl ProcessHandle {
    pub(crate) fn new(pidfd: Pidfd, identity: PidfsProcessIdentityV1) -> Self {
        Self { pidfd, identity }
    }

    pub fn identity(&self) -> &PidfsProcessIdentityV1 {
        &self.identity
    }

    /// The retained descriptor (for [`ProcessSys`] implementations).
    pub fn pidfd(&self) -> &Pidfd {
        &self.pidfd
    }

    /// Signals through the retained descriptor; `ESRCH` and every other error
    /// are returned, never retried by PID.
    pub fn signal<S: ProcessSys>(&self, sys: &S, signal: Signal) -> io::Result<()> {
        let _span =
            tracing::debug_span!("pidfd_send_signal", pid = self.identity.host_pid.0, ?signal)
                .entered();
        sys.pidfd_send_signal(self, signal)
    }

    /// Observes without reaping.
    pub fn peek<S: ProcessSys>(&self, sys: &S) -> io::Result<ChildState> {
        sys.waitid(&self.pidfd, WaitMode::Peek)
    }

    /// Reaps a child of this process if it has exited (no blocking).
    pub fn poll<S: ProcessSys>(&self, sys: &S) -> io::Result<ChildState> {
        sys.waitid(&self.pidfd, WaitMode::Poll)
    }

    /// Blocks until a child of this process exits and reaps it.
    pub fn wait<S: ProcessSys>(&self, sys: &S) -> io::Result<ChildState> {
        sys.waitid(&self.pidfd, WaitMode::Block)
    }
}
