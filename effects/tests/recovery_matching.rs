//! Exact pidfs recovery matching against the recording fake (spec 3.3, the
//! seven matching steps; FR-7).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_effects::process_identity::fake::{Call, FakeProcess, FakeProcessSys};
use lazaret_effects::process_identity::{
    liveness, match_recorded, ChildState, Liveness, RecoveryRefusal, Signal, PID_FS_MAGIC,
};
use lazaret_runtime::records::process::*;
use quickcheck::{quickcheck, TestResult};

const BOOT: BootId = BootId([0xab; 16]);

fn recorded(boot: BootId, pid: u32, dev: u64, ino: u64, start: u64) -> PidfsProcessIdentityV1 {
    PidfsProcessIdentityV1 {
        authority: PidfsProcessAuthorityV1 {
            boot_id: boot,
            pidfs_st_dev: PidfsDev(dev),
            pidfs_st_ino: PidfsIno(ino),
        },
        host_pid: HostPid(pid),
        start_time_ticks: start,
    }
}

fn live(dev: u64, ino: u64, start: u64) -> FakeProcess {
    FakeProcess {
        dev,
        ino,
        start_time: start,
        fs_type: PID_FS_MAGIC,
        state: ChildState::Running,
    }
}

fn signalled(sys: &FakeProcessSys) -> bool {
    sys.calls().iter().any(|c| matches!(c, Call::Signal(..)))
}

#[test]
fn boot_mismatch_never_looks_the_pid_up() {
    let sys = FakeProcessSys::new(BOOT);
    sys.insert(4242, live(9, 1000, 77));
    let foreign = recorded(BootId([0xcd; 16]), 4242, 9, 1000, 77);
    let err = match_recorded(&sys, &foreign).unwrap_err();
    assert!(matches!(err, RecoveryRefusal::BootMismatch { .. }), "{err}");
    assert_eq!(sys.calls(), vec![Call::BootId]);
}

#[test]
fn reused_pid_with_another_pidfs_inode_is_refused_and_not_signalled() {
    let sys = FakeProcessSys::new(BOOT);
    // Same PID and even the same start time: a reused PID, different process.
    sys.insert(4242, live(9, 1001, 77));
    let err = match_recorded(&sys, &recorded(BOOT, 4242, 9, 1000, 77)).unwrap_err();
    assert!(
        matches!(err, RecoveryRefusal::AuthorityMismatch { .. }),
        "{err}"
    );
    assert_eq!(
        sys.calls(),
        vec![
            Call::BootId,
            Call::InHostPidNamespace,
            Call::PidfdOpen(HostPid(4242)),
            Call::Fstatfs(HostPid(4242)),
            Call::Fstat(HostPid(4242)),
        ]
    );
    assert!(!signalled(&sys));
}

#[test]
fn every_refusal_step_refuses_without_action() {
    // Wrong magic: not pidfs.
    let sys = FakeProcessSys::new(BOOT);
    sys.insert(
        10,
        FakeProcess {
            fs_type: 0xef53,
            ..live(9, 5, 1)
        },
    );
    assert!(matches!(
        match_recorded(&sys, &recorded(BOOT, 10, 9, 5, 1)),
        Err(RecoveryRefusal::Identity(_))
    ));
    assert!(
        !sys.calls().contains(&Call::Fstat(HostPid(10))),
        "fstat after a wrong magic"
    );
    // ESRCH.
    let sys = FakeProcessSys::new(BOOT);
    assert!(matches!(
        match_recorded(&sys, &recorded(BOOT, 11, 9, 5, 1)),
        Err(RecoveryRefusal::NoProcessAtLocator { pid: 11 })
    ));
    // Nested PID namespace: refused before lookup.
    let mut sys = FakeProcessSys::new(BOOT);
    sys.host_pid_namespace = false;
    sys.insert(12, live(9, 5, 1));
    assert!(matches!(
        match_recorded(&sys, &recorded(BOOT, 12, 9, 5, 1)),
        Err(RecoveryRefusal::NestedPidNamespace)
    ));
    assert!(!sys.calls().contains(&Call::PidfdOpen(HostPid(12))));
    // A locator that cannot be a host PID.
    let sys = FakeProcessSys::new(BOOT);
    assert!(matches!(
        match_recorded(&sys, &recorded(BOOT, u32::MAX, 9, 5, 1)),
        Err(RecoveryRefusal::InvalidLocator { .. })
    ));
    assert!(!sys.calls().iter().any(|c| matches!(c, Call::PidfdOpen(_))));
    // Start time is negative evidence: inequality refuses even with equal authority.
    let sys = FakeProcessSys::new(BOOT);
    sys.insert(13, live(9, 5, 2));
    assert!(matches!(
        match_recorded(&sys, &recorded(BOOT, 13, 9, 5, 1)),
        Err(RecoveryRefusal::StartTimeMismatch { .. })
    ));
    assert!(!signalled(&sys));
}

/// FR-7 with the exit race: `/proc/<pid>/stat` is read by PID, so a process
/// that exits and is reaped after `pidfd_open` leaves no stat (or its PID's
/// next process's). Its exactly matched pidfd says it exited: that is
/// proven absence, never a live mismatch, and nothing is signalled. A
/// mismatch while the matched process still runs stays a refusal.
#[test]
fn a_process_that_exits_during_the_match_is_gone_not_unknown() {
    let sys = FakeProcessSys::new(BOOT);
    sys.insert(14, live(9, 5, 1));
    sys.vanish_at_start_time.borrow_mut().push(14);
    let id = recorded(BOOT, 14, 9, 5, 1);
    assert!(matches!(
        match_recorded(&sys, &id),
        Err(RecoveryRefusal::ExitedWhileMatched { pid: 14 })
    ));
    sys.insert(14, live(9, 5, 1));
    assert!(matches!(liveness(&sys, &id), Liveness::Gone { .. }));
    // Exited, and the stat now names another start time.
    let sys = FakeProcessSys::new(BOOT);
    let mut exited = live(9, 5, 2);
    exited.state = ChildState::Exited {
        code: Some(0),
        signal: None,
    };
    sys.insert(15, exited);
    assert!(matches!(
        liveness(&sys, &recorded(BOOT, 15, 9, 5, 1)),
        Liveness::Gone { .. }
    ));
    // Still running with another start time: refused, not gone.
    let sys = FakeProcessSys::new(BOOT);
    sys.insert(16, live(9, 5, 2));
    assert!(matches!(
        liveness(&sys, &recorded(BOOT, 16, 9, 5, 1)),
        Liveness::Unknown { .. }
    ));
    assert!(!signalled(&sys));
}

#[test]
fn an_exact_match_at_u64_max_acts_through_the_same_pidfd() {
    let sys = FakeProcessSys::new(BOOT);
    sys.insert(i32::MAX.unsigned_abs(), live(u64::MAX, u64::MAX, u64::MAX));
    let id = recorded(BOOT, i32::MAX.unsigned_abs(), u64::MAX, u64::MAX, u64::MAX);
    let handle = match_recorded(&sys, &id).unwrap();
    assert_eq!(*handle.identity(), id);
    handle.signal(&sys, Signal::Term).unwrap();
    let opens = sys
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::PidfdOpen(_)))
        .count();
    assert_eq!(opens, 1, "pidfd_open exactly once");
    assert_eq!(
        sys.calls().last(),
        Some(&Call::Signal(
            HostPid(i32::MAX.unsigned_abs()),
            Signal::Term
        ))
    );
}

quickcheck! {
    /// Matching succeeds exactly when boot, device, inode and start time are
    /// equal; matching itself never signals.
    fn matched_iff_exact(boot_same: bool, recorded_tuple: (u64, u64, u64), live_tuple: (u64, u64, u64), pid: u16) -> TestResult {
        let ((dev, ino, start), (live_dev, live_ino, live_start)) = (recorded_tuple, live_tuple);
        let pid = u32::from(pid) + 1;
        let sys = FakeProcessSys::new(BOOT);
        sys.insert(pid, live(live_dev, live_ino, live_start));
        let boot = if boot_same { BOOT } else { BootId([0x01; 16]) };
        let outcome = match_recorded(&sys, &recorded(boot, pid, dev, ino, start));
        let exact = boot_same && dev == live_dev && ino == live_ino && start == live_start;
        TestResult::from_bool(outcome.is_ok() == exact && !signalled(&sys))
    }
}
