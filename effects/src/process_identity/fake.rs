//! A recording fake of [`ProcessSys`] with a scripted process table.
use super::{ChildState, Pidfd, ProcessHandle, ProcessSys, Signal, WaitMode};
use crate::broker::sys::{SpawnSys, WrapperSpawn, WrapperSys};
use lazaret_runtime::records::process::{BootId, HostPid, PidfsDev, PidfsIno};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// One recorded call with its typed arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    BootId,
    InHostPidNamespace,
    PidfdOpen(HostPid),
    Fstatfs(HostPid),
    Fstat(HostPid),
    StartTime(HostPid),
    Exited(HostPid),
    Waitid(HostPid, WaitMode),
    Signal(HostPid, Signal),
    SigchldIgnored,
    BarrierPipe,
    SpawnWrapper(Vec<OsString>),
    WriteRelease(Vec<u8>),
    ReapUnopened(HostPid),
    ReadBarrier(RawFd),
    ArmParentDeath,
    ParentPid,
    Exec(Vec<OsString>),
}

/// A scripted process at a PID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeProcess {
    pub dev: u64,
    pub ino: u64,
    pub start_time: u64,
    pub fs_type: u64,
    pub state: ChildState,
}

/// The fake kernel: a boot ID, a PID table and a call log.
#[derive(Debug)]
pub struct FakeProcessSys {
    pub boot: BootId,
    pub host_pid_namespace: bool,
    pub own_pid: HostPid,
    pub processes: RefCell<BTreeMap<u32, FakeProcess>>,
    pub calls: RefCell<Vec<Call>>,
    /// Processes that appear, in order, when the broker spawns a wrapper.
    pub spawn_script: RefCell<Vec<(u32, FakeProcess)>>,
    /// What the wrapper reads from its barrier.
    pub barrier_bytes: RefCell<Vec<u8>>,
    /// What `getppid` returns to the wrapper.
    pub parent: Option<HostPid>,
    pub sigchld_ignored: bool,
    /// PIDs whose process ends and is reaped as its start time is read
    /// (the race of a process that exits during an exact match).
    pub vanish_at_start_time: RefCell<Vec<u32>>,
    /// PIDs whose process ends after its start time has been read this
    /// many more times (a process that dies while it is being waited for).
    pub start_time_reads_left: RefCell<BTreeMap<u32, usize>>,
}

impl FakeProcessSys {
    pub fn new(boot: BootId) -> Self {
        Self {
            boot,
            host_pid_namespace: true,
            own_pid: HostPid(1),
            processes: RefCell::new(BTreeMap::new()),
            calls: RefCell::new(Vec::new()),
            spawn_script: RefCell::new(Vec::new()),
            barrier_bytes: RefCell::new(Vec::new()),
            parent: None,
            sigchld_ignored: false,
            vanish_at_start_time: RefCell::new(Vec::new()),
            start_time_reads_left: RefCell::new(BTreeMap::new()),
        }
    }

    /// The process at `pid` ends once its start time has been read
    /// `reads` times.
    pub fn vanish_after_reads(&self, pid: u32, reads: usize) {
        self.start_time_reads_left.borrow_mut().insert(pid, reads);
    }

    pub fn insert(&self, pid: u32, process: FakeProcess) {
        self.processes.borrow_mut().insert(pid, process);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }

    fn record(&self, call: Call) {
        self.calls.borrow_mut().push(call);
    }

    fn lookup(&self, pid: HostPid) -> io::Result<FakeProcess> {
        self.processes
            .borrow()
            .get(&pid.0)
            .cloned()
            .ok_or_else(|| io::Error::from_raw_os_error(rustix::io::Errno::SRCH.raw_os_error()))
    }
}

impl ProcessSys for FakeProcessSys {
    fn boot_id(&self) -> io::Result<BootId> {
        self.record(Call::BootId);
        Ok(self.boot)
    }

    fn in_host_pid_namespace(&self) -> io::Result<bool> {
        self.record(Call::InHostPidNamespace);
        Ok(self.host_pid_namespace)
    }

    fn own_pid(&self) -> HostPid {
        self.own_pid
    }

    fn pidfd_open(&self, pid: HostPid) -> io::Result<Pidfd> {
        self.record(Call::PidfdOpen(pid));
        self.lookup(pid)?;
        // A real descriptor stands in for the pidfd so ownership and close
        // behave as with the kernel.
        let file = std::fs::File::open("/dev/null")?;
        Ok(Pidfd::new(file.into(), pid))
    }

    fn fstatfs_type(&self, pidfd: &Pidfd) -> io::Result<u64> {
        self.record(Call::Fstatfs(pidfd.locator()));
        Ok(self.lookup(pidfd.locator())?.fs_type)
    }

    fn fstat_pidfs(&self, pidfd: &Pidfd) -> io::Result<(PidfsDev, PidfsIno)> {
        self.record(Call::Fstat(pidfd.locator()));
        let p = self.lookup(pidfd.locator())?;
        Ok((PidfsDev(p.dev), PidfsIno(p.ino)))
    }

    fn start_time(&self, pid: HostPid) -> io::Result<u64> {
        self.record(Call::StartTime(pid));
        if self.vanish_at_start_time.borrow().contains(&pid.0) {
            self.processes.borrow_mut().remove(&pid.0);
            return Err(io::ErrorKind::NotFound.into());
        }
        if let Some(left) = self.start_time_reads_left.borrow_mut().get_mut(&pid.0) {
            if *left == 0 {
                self.processes.borrow_mut().remove(&pid.0);
            } else {
                *left -= 1;
            }
        }
        Ok(self.lookup(pid)?.start_time)
    }

    /// A process gone from the table (reaped) or recorded as exited.
    fn exited(&self, pidfd: &Pidfd) -> io::Result<bool> {
        self.record(Call::Exited(pidfd.locator()));
        Ok(self
            .lookup(pidfd.locator())
            .map_or(true, |p| matches!(p.state, ChildState::Exited { .. })))
    }

    fn waitid(&self, pidfd: &Pidfd, mode: WaitMode) -> io::Result<ChildState> {
        self.record(Call::Waitid(pidfd.locator(), mode));
        Ok(self.lookup(pidfd.locator())?.state)
    }

    fn pidfd_send_signal(&self, target: &ProcessHandle, signal: Signal) -> io::Result<()> {
        let pid = target.pidfd().locator();
        self.record(Call::Signal(pid, signal));
        self.lookup(pid).map(|_| ())
    }
}

impl SpawnSys for FakeProcessSys {
    fn sigchld_ignored(&self) -> io::Result<bool> {
        self.record(Call::SigchldIgnored);
        Ok(self.sigchld_ignored)
    }

    fn barrier_pipe(&self) -> io::Result<(OwnedFd, OwnedFd)> {
        self.record(Call::BarrierPipe);
        let read = std::fs::File::open("/dev/null")?;
        let write = std::fs::File::options().write(true).open("/dev/null")?;
        Ok((read.into(), write.into()))
    }

    fn spawn_wrapper(&self, spawn: &WrapperSpawn<'_>) -> io::Result<HostPid> {
        self.record(Call::SpawnWrapper(
            crate::broker::wrapper::WrapperArgs::to_argv(
                spawn.barrier.as_raw_fd(),
                &spawn.parent,
                &spawn.target.argv,
            ),
        ));
        let mut script = self.spawn_script.borrow_mut();
        if script.is_empty() {
            return Err(io::Error::other("fake: no scripted child to spawn"));
        }
        let (pid, process) = script.remove(0);
        self.insert(pid, process);
        Ok(HostPid(pid))
    }

    fn write_release(&self, barrier: OwnedFd, message: &[u8]) -> io::Result<()> {
        drop(barrier);
        self.record(Call::WriteRelease(message.to_vec()));
        Ok(())
    }

    fn reap_unopened(&self, pid: HostPid) -> io::Result<()> {
        self.record(Call::ReapUnopened(pid));
        Ok(())
    }
}

impl WrapperSys for FakeProcessSys {
    fn read_barrier(&self, fd: RawFd, limit: usize) -> io::Result<Vec<u8>> {
        self.record(Call::ReadBarrier(fd));
        let bytes = self.barrier_bytes.borrow();
        Ok(bytes[..bytes.len().min(limit)].to_vec())
    }

    fn arm_parent_death(&self) -> io::Result<()> {
        self.record(Call::ArmParentDeath);
        Ok(())
    }

    fn parent_pid(&self) -> Option<HostPid> {
        self.record(Call::ParentPid);
        self.parent
    }

    fn exec(&self, argv: &[OsString]) -> io::Error {
        self.record(Call::Exec(argv.to_vec()));
        io::Error::other("fake exec")
    }
}
