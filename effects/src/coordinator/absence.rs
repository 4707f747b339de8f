//! Absence of a recorded process, proved by its exact pidfs identity (spec
//! 3.3 refinement; FR-7): recovery waits for a dead coordinator's runtime
//! and exec clients, a live coordinator for a runtime that ended on its
//! own, and teardown for the session exec clients before their terminals
//! are recorded clean. Nothing is adopted: a process is only ever matched
//! exactly and, if it outlives its grace, ended through that exact match.
use std::time::{Duration, Instant};

use lazaret_generated::lazaret::{ProcSlots, Rs, Runsc};
use lazaret_runtime::coordinator::host_model::ProcessView;
use lazaret_runtime::records::process::PidfsProcessIdentityV1;

use crate::process_identity::Signal;
use crate::process_identity::{match_recorded, ProcessSys, RecoveryRefusal};

/// Why a recorded process could not be proved absent.
#[derive(Debug, thiserror::Error)]
pub enum AbsenceError {
    /// The exact match of a recorded process neither found it nor proved
    /// it gone.
    #[error("cannot prove the {what} absent: {source}")]
    Unproved {
        what: &'static str,
        source: RecoveryRefusal,
    },
    #[error("cannot prove the runtime absent: still running {secs}s after it was to end")]
    Outlived { secs: u64 },
}

/// A launch slot's process whose presence could not be read for its trace
/// line.
#[derive(Debug, thiserror::Error)]
#[error("cannot observe the {} process for its trace line: {source}", slot.name())]
pub struct SlotObservationError {
    pub slot: ProcSlots,
    pub source: RecoveryRefusal,
}

/// What the trace line of a launch step that stages or commits `slot`
/// observed of its process, by the exact recorded `identity` (trace
/// validation, spec "Document authority"): the Runtime Supervisor and the
/// attached runsc are model variables (`rs`, `runsc`), Running when the
/// process is exactly present and Absent when it is proved gone; the other
/// slots' processes are no model variable.
pub(super) fn observe_slot<S: ProcessSys>(
    sys: &S,
    slot: ProcSlots,
    identity: &PidfsProcessIdentityV1,
) -> Result<ProcessView, SlotObservationError> {
    let here = || present(sys, identity).map_err(|source| SlotObservationError { slot, source });
    Ok(match slot {
        ProcSlots::SandboxRuntimeSupervisor => {
            ProcessView::supervisor(if here()? { Rs::Running } else { Rs::Absent })
        }
        ProcSlots::SandboxAttachedRunsc => ProcessView::attached_runsc(if here()? {
            Runsc::Running
        } else {
            Runsc::Absent
        }),
        ProcSlots::GitRoutingDaemon | ProcSlots::HelperConnectivityHelper => ProcessView::default(),
    })
}

/// How long a recorded RS or attached runsc may take to finish its own
/// teardown before it is ended through its exact match.
const LEASE_LOSS_GRACE: Duration = Duration::from_secs(20);
/// How long an exactly matched process may take to die after SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// Whether the process recorded as `identity` is exactly present. Absent
/// only on positive evidence (another boot, no process at the locator,
/// another pidfs authority there); anything else, a start time that
/// contradicts an equal pidfs authority among it, refuses (FR-7).
pub(super) fn present<S: ProcessSys>(
    sys: &S,
    identity: &PidfsProcessIdentityV1,
) -> Result<bool, RecoveryRefusal> {
    match match_recorded(sys, identity) {
        Ok(_handle) => Ok(true),
        Err(refusal) if refusal.proves_absence() => Ok(false),
        Err(refusal) => Err(refusal),
    }
}

/// Waits until the first recorded process (RS, or a session's exec client,
/// named for errors) and attached runsc are absent; one still present after
/// [`LEASE_LOSS_GRACE`] is ended through its exact match. Returns whether
/// runsc was still present when the first was already gone.
pub(super) fn wait_absent<S: ProcessSys>(
    sys: &S,
    (first_name, supervisor): (&'static str, Option<&PidfsProcessIdentityV1>),
    runsc: Option<&PidfsProcessIdentityV1>,
) -> Result<bool, AbsenceError> {
    let unproved = |what: &'static str, source| AbsenceError::Unproved { what, source };
    let start = Instant::now();
    let mut killed = false;
    let mut runsc_outlived = false;
    loop {
        let rs_here = supervisor
            .map(|id| present(sys, id))
            .transpose()
            .map_err(|e| unproved(first_name, e))?
            .unwrap_or(false);
        let runsc_here = runsc
            .map(|id| present(sys, id))
            .transpose()
            .map_err(|e| unproved("attached runsc", e))?
            .unwrap_or(false);
        if !rs_here && runsc_here {
            runsc_outlived = true;
        }
        if !rs_here && !runsc_here {
            return Ok(runsc_outlived);
        }
        let waited = start.elapsed();
        if waited > LEASE_LOSS_GRACE + KILL_GRACE {
            return Err(AbsenceError::Outlived {
                secs: waited.as_secs(),
            });
        }
        if waited > LEASE_LOSS_GRACE && !killed {
            killed = true;
            for identity in [supervisor, runsc].into_iter().flatten() {
                if let Ok(handle) = match_recorded(sys, identity) {
                    tracing::warn!(
                        pid = identity.host_pid.0,
                        "ending an exactly matched leftover"
                    );
                    let _ = handle.signal(sys, Signal::Kill);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process_identity::fake::{FakeProcess, FakeProcessSys};
    use crate::process_identity::{ChildState, PID_FS_MAGIC};
    use lazaret_runtime::records::process::PidfsProcessIdentityV1;
    use lazaret_runtime::records::process::{
        BootId, HostPid, PidfsDev, PidfsIno, PidfsProcessAuthorityV1,
    };

    const BOOT: BootId = BootId([7; 16]);

    fn recorded(pid: u32, ino: u64, start: u64) -> PidfsProcessIdentityV1 {
        PidfsProcessIdentityV1 {
            authority: PidfsProcessAuthorityV1 {
                boot_id: BOOT,
                pidfs_st_dev: PidfsDev(9),
                pidfs_st_ino: PidfsIno(ino),
            },
            host_pid: HostPid(pid),
            start_time_ticks: start,
        }
    }

    fn live(ino: u64, start: u64) -> FakeProcess {
        FakeProcess {
            dev: 9,
            ino,
            start_time: start,
            fs_type: PID_FS_MAGIC,
            state: ChildState::Running,
        }
    }

    /// FR-7: absence needs positive evidence. A start time that
    /// contradicts an exactly equal pidfs authority is not absence: it
    /// refuses, naming the disagreement.
    #[test]
    fn only_positive_evidence_proves_a_recorded_process_absent() {
        let sys = FakeProcessSys::new(BOOT);
        sys.insert(40, live(5, 1));
        sys.insert(41, live(6, 2));
        sys.insert(42, live(7, 2));
        assert!(matches!(present(&sys, &recorded(40, 5, 1)), Ok(true)));
        // Nothing at the locator, or another process there: absent.
        assert!(matches!(present(&sys, &recorded(43, 5, 1)), Ok(false)));
        assert!(matches!(present(&sys, &recorded(41, 5, 1)), Ok(false)));
        // Another boot: absent without looking the PID up.
        let other_boot = PidfsProcessIdentityV1 {
            authority: PidfsProcessAuthorityV1 {
                boot_id: BootId([8; 16]),
                ..recorded(40, 5, 1).authority
            },
            ..recorded(40, 5, 1)
        };
        assert!(matches!(present(&sys, &other_boot), Ok(false)));
        // The same pidfs authority with another start time: refused.
        let refused = present(&sys, &recorded(42, 7, 1));
        assert!(
            matches!(
                refused,
                Err(RecoveryRefusal::StartTimeMismatch { pid: 42, .. })
            ),
            "{refused:?}"
        );
    }

    /// A launch step's line carries what the slot's process exactly is:
    /// RS and attached runsc by their model variables, present as Running
    /// and gone as Absent; a helper is no model variable; a start-time
    /// contradiction is no observation (FR-7).
    #[test]
    fn a_launch_slot_is_observed_by_its_exact_identity() {
        let sys = FakeProcessSys::new(BOOT);
        sys.insert(60, live(20, 4));
        let here = recorded(60, 20, 4);
        let gone = recorded(61, 21, 4);
        let rs = ProcSlots::SandboxRuntimeSupervisor;
        let runsc = ProcSlots::SandboxAttachedRunsc;
        assert_eq!(
            observe_slot(&sys, rs, &here).ok(),
            Some(ProcessView::supervisor(Rs::Running))
        );
        assert_eq!(
            observe_slot(&sys, rs, &gone).ok(),
            Some(ProcessView::supervisor(Rs::Absent))
        );
        assert_eq!(
            observe_slot(&sys, runsc, &here).ok(),
            Some(ProcessView::attached_runsc(Runsc::Running))
        );
        assert_eq!(
            observe_slot(&sys, runsc, &gone).ok(),
            Some(ProcessView::attached_runsc(Runsc::Absent))
        );
        assert_eq!(
            observe_slot(&sys, ProcSlots::HelperConnectivityHelper, &here).ok(),
            Some(ProcessView::default())
        );
        let contradicted = recorded(60, 20, 3);
        let refused = observe_slot(&sys, runsc, &contradicted);
        assert!(
            matches!(&refused, Err(SlotObservationError { slot, .. }) if *slot == runsc),
            "{refused:?}"
        );
    }

    /// A runsc seen present once its supervisor is gone outlived it (the
    /// parent-death order); processes proved absent at the first look did
    /// not; a start-time contradiction is no absence (FR-7).
    #[test]
    fn waiting_for_absence_reports_a_runsc_that_outlived_its_supervisor() {
        let sys = FakeProcessSys::new(BOOT);
        sys.insert(51, live(11, 3));
        sys.vanish_after_reads(51, 2);
        let supervisor = recorded(50, 10, 3);
        let outliving = recorded(51, 11, 3);
        assert_eq!(
            wait_absent(
                &sys,
                ("Runtime Supervisor", Some(&supervisor)),
                Some(&outliving)
            )
            .ok(),
            Some(true)
        );
        let gone = recorded(52, 12, 3);
        assert_eq!(
            wait_absent(&sys, ("Runtime Supervisor", Some(&supervisor)), Some(&gone)).ok(),
            Some(false)
        );
        sys.insert(53, live(13, 2));
        let contradicted = recorded(53, 13, 1);
        let refused = wait_absent(&sys, ("session exec client", Some(&contradicted)), None);
        assert!(
            matches!(
                &refused,
                Err(AbsenceError::Unproved {
                    what: "session exec client",
                    source: RecoveryRefusal::StartTimeMismatch { pid: 53, .. },
                })
            ),
            "{refused:?}"
        );
    }
}
