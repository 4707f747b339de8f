//! Exact pidfs recovery matching: the only positive recovery reacquisition
//! path (spec 3.3, the seven matching steps).
use super::{pidfs_authority, IdentityError, ProcessHandle, ProcessSys};
use lazaret_runtime::records::process::{BootId, PidfsProcessAuthorityV1, PidfsProcessIdentityV1};
use std::io;

/// Why a recorded identity was not matched. Every refusal closes the pidfd
/// (if one was opened) without any process action.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryRefusal {
    #[error("cannot read the current boot id: {0}")]
    BootIdUnreadable(io::Error),
    #[error("recorded boot {recorded} is not the current boot {current}; the stored PID is not looked up")]
    BootMismatch { recorded: BootId, current: BootId },
    #[error("cannot establish that this process runs in the host PID namespace: {0}")]
    PidNamespaceUnreadable(io::Error),
    #[error("this process is not in the host PID namespace; stored PIDs are ambiguous here")]
    NestedPidNamespace,
    #[error("PID {pid} is not a valid host-PID-namespace locator")]
    InvalidLocator { pid: u32 },
    #[error("pidfd_open({pid}) failed: no process has that PID (ESRCH)")]
    NoProcessAtLocator { pid: u32 },
    #[error("pidfd_open({pid}) failed: {source}")]
    PidfdOpen { pid: u32, source: io::Error },
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("PID {pid} now belongs to another process: pidfs authority {observed:?} differs from the recorded {recorded:?}")]
    AuthorityMismatch {
        pid: u32,
        recorded: PidfsProcessAuthorityV1,
        observed: PidfsProcessAuthorityV1,
    },
    #[error("start time of PID {pid} is {observed}, recorded {recorded}")]
    StartTimeMismatch {
        pid: u32,
        recorded: u64,
        observed: u64,
    },
    #[error("cannot read the start time of PID {pid}: {source}")]
    StartTimeUnreadable { pid: u32, source: io::Error },
    /// The exactly matched process exited while it was being matched: its
    /// start time was gone, or named the PID's next process.
    #[error("the process at PID {pid} exited while it was matched")]
    ExitedWhileMatched { pid: u32 },
}

/// Matches a recorded staged or committed identity against the live system.
/// Returns the retained handle only when the pidfs authority is exactly equal
/// and the negative evidence does not contradict it.
pub fn match_recorded<S: ProcessSys>(
    sys: &S,
    recorded: &PidfsProcessIdentityV1,
) -> Result<ProcessHandle, RecoveryRefusal> {
    let _span = tracing::debug_span!("PidfsRecoveryMatch", pid = recorded.host_pid.0).entered();
    // 1-2. Boot first; on mismatch never look the PID up.
    let current = sys.boot_id().map_err(RecoveryRefusal::BootIdUnreadable)?;
    if current != recorded.authority.boot_id {
        return Err(RecoveryRefusal::BootMismatch {
            recorded: recorded.authority.boot_id,
            current,
        });
    }
    // 3. The locator is a host-PID-namespace PID.
    let pid = recorded.host_pid.0;
    if !sys
        .in_host_pid_namespace()
        .map_err(RecoveryRefusal::PidNamespaceUnreadable)?
    {
        return Err(RecoveryRefusal::NestedPidNamespace);
    }
    if pid == 0 || i32::try_from(pid).is_err() {
        return Err(RecoveryRefusal::InvalidLocator { pid });
    }
    // 4. pidfd_open exactly once.
    let pidfd = sys.pidfd_open(recorded.host_pid).map_err(|source| {
        if source.raw_os_error() == Some(rustix::io::Errno::SRCH.raw_os_error()) {
            RecoveryRefusal::NoProcessAtLocator { pid }
        } else {
            RecoveryRefusal::PidfdOpen { pid, source }
        }
    })?;
    // 5. fstatfs magic, fstat, exact comparison.
    let observed = pidfs_authority(sys, &pidfd, current)?;
    if observed != recorded.authority {
        return Err(RecoveryRefusal::AuthorityMismatch {
            pid,
            recorded: recorded.authority,
            observed,
        });
    }
    // 6. Start time only as a negative check. `/proc/<pid>` is read by
    // PID, so a process that exits (and is reaped) after `pidfd_open` leaves
    // no stat, or the stat of the PID's next process; the exactly matched
    // pidfd tells that case apart (it polls readable once the process has
    // exited). An exit state that cannot be read keeps the refusal.
    let exited = || sys.exited(&pidfd).unwrap_or(false);
    let start = match sys.start_time(recorded.host_pid) {
        Ok(start) => start,
        Err(_) if exited() => return Err(RecoveryRefusal::ExitedWhileMatched { pid }),
        Err(source) => return Err(RecoveryRefusal::StartTimeUnreadable { pid, source }),
    };
    if start != recorded.start_time_ticks {
        if exited() {
            return Err(RecoveryRefusal::ExitedWhileMatched { pid });
        }
        return Err(RecoveryRefusal::StartTimeMismatch {
            pid,
            recorded: recorded.start_time_ticks,
            observed: start,
        });
    }
    // 7. The same matched pidfd is the handle for every action.
    Ok(ProcessHandle::new(pidfd, *recorded))
}

/// What the live system says about one recorded identity, read-only
/// (`lazaret state`, and recovery's proof of absence; FR-7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// The exact recorded process (equal pidfs authority, start time not
    /// contradicting) is still there.
    Running,
    /// Proven gone: another boot, no process at the PID, the exactly
    /// matched process exited during the match, or the PID now
    /// names a process with another pidfs identity.
    Gone { why: String },
    /// Neither proven running nor proven gone: every other refusal of the
    /// exact match, a start time contradicting an equal pidfs authority
    /// among them.
    Unknown { why: String },
}

impl Liveness {
    /// The stable `--json` name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Gone { .. } => "gone",
            Self::Unknown { .. } => "unknown",
        }
    }

    pub fn why(&self) -> Option<&str> {
        match self {
            Self::Running => None,
            Self::Gone { why } | Self::Unknown { why } => Some(why),
        }
    }
}

/// Matches one recorded identity exactly and says what that shows. The
/// handle of a match is dropped at once: nothing is signalled, waited on
/// or reaped.
pub fn liveness<S: ProcessSys>(sys: &S, recorded: &PidfsProcessIdentityV1) -> Liveness {
    match match_recorded(sys, recorded) {
        Ok(_handle) => Liveness::Running,
        Err(refusal) => {
            let why = refusal.to_string();
            if refusal.proves_absence() {
                Liveness::Gone { why }
            } else {
                Liveness::Unknown { why }
            }
        }
    }
}

impl RecoveryRefusal {
    /// Whether the refusal is positive evidence that the recorded process
    /// is gone (FR-7): another boot, no process at the PID, another pidfs
    /// authority there, or the exactly matched process exited during the
    /// match. Every other refusal proves nothing.
    pub fn proves_absence(&self) -> bool {
        matches!(
            self,
            Self::BootMismatch { .. }
                | Self::NoProcessAtLocator { .. }
                | Self::AuthorityMismatch { .. }
                | Self::ExitedWhileMatched { .. }
        )
    }
}
