//! A recycled or replaced PID (same number, different process) is never
//! adopted or signalled (spec 3.3 recovery matching, FR-7) - with real
//! processes and the real kernel.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_effects::process_identity::real::RealProcessSys;
use lazaret_effects::process_identity::{
    identity_of, match_recorded, ChildState, ProcessHandle, ProcessSys, RecoveryRefusal, Signal,
};
use lazaret_runtime::records::process::*;
use std::process::{Command, Stdio};

/// Spawns `sleep 60` and takes its identity through a fresh pidfd.
fn spawn_sleep() -> (std::process::Child, PidfsProcessIdentityV1) {
    let child = Command::new("sleep")
        .arg("60")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let sys = RealProcessSys;
    let pidfd = sys.pidfd_open(HostPid(child.id())).unwrap();
    let identity = identity_of(&sys, &pidfd).unwrap();
    (child, identity)
}

/// Ends a test child through its exact matched pidfd and reaps it.
fn end(child: std::process::Child, identity: &PidfsProcessIdentityV1) {
    let handle: ProcessHandle = match_recorded(&RealProcessSys, identity).unwrap();
    handle.signal(&RealProcessSys, Signal::Kill).unwrap();
    assert!(matches!(
        handle.wait(&RealProcessSys).unwrap(),
        ChildState::Exited {
            signal: Some(9),
            ..
        }
    ));
    drop(child);
}

fn alive(identity: &PidfsProcessIdentityV1) -> bool {
    matches!(
        match_recorded(&RealProcessSys, identity).map(|h| h.peek(&RealProcessSys)),
        Ok(Ok(ChildState::Running))
    )
}

#[test]
fn real_pidfs_identity_is_taken_and_matched_exactly() {
    let (child, identity) = spawn_sleep();
    let sys = RealProcessSys;
    assert_eq!(identity.authority.boot_id, sys.boot_id().unwrap());
    assert_eq!(identity.host_pid, HostPid(child.id()));
    // Every pidfd of the process shows the same pidfs inode.
    let again = identity_of(&sys, &sys.pidfd_open(identity.host_pid).unwrap()).unwrap();
    assert_eq!(again, identity);
    assert!(alive(&identity));
    end(child, &identity);
    // After exit and reap there is nothing at the locator with that authority.
    assert!(match_recorded(&sys, &identity).is_err());
}

#[test]
fn a_process_whose_pidfs_inode_differs_from_the_record_is_neither_adopted_nor_signalled() {
    let (child, live) = spawn_sleep();
    for forged in [
        // The same PID and start time, another pidfs inode (a replacement).
        PidfsProcessIdentityV1 {
            authority: PidfsProcessAuthorityV1 {
                pidfs_st_ino: PidfsIno(live.authority.pidfs_st_ino.0 ^ 1),
                ..live.authority
            },
            ..live
        },
        PidfsProcessIdentityV1 {
            authority: PidfsProcessAuthorityV1 {
                pidfs_st_ino: PidfsIno(u64::MAX),
                ..live.authority
            },
            ..live
        },
        // Another pidfs device.
        PidfsProcessIdentityV1 {
            authority: PidfsProcessAuthorityV1 {
                pidfs_st_dev: PidfsDev(live.authority.pidfs_st_dev.0 ^ 1),
                ..live.authority
            },
            ..live
        },
    ] {
        let err = match_recorded(&RealProcessSys, &forged).unwrap_err();
        assert!(
            matches!(err, RecoveryRefusal::AuthorityMismatch { .. }),
            "{err}"
        );
    }
    // A foreign boot is refused without even looking at the PID.
    let foreign = PidfsProcessIdentityV1 {
        authority: PidfsProcessAuthorityV1 {
            boot_id: BootId([0; 16]),
            ..live.authority
        },
        ..live
    };
    assert!(matches!(
        match_recorded(&RealProcessSys, &foreign),
        Err(RecoveryRefusal::BootMismatch { .. })
    ));
    assert!(alive(&live), "the live process was signalled");
    end(child, &live);
}

/// Makes the kernel hand out `pid` next (root only: ns_last_pid).
fn recycle(pid: u32) -> Option<(std::process::Child, PidfsProcessIdentityV1)> {
    for _ in 0..200 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).ok()?;
        let (child, identity) = spawn_sleep();
        if child.id() == pid {
            return Some((child, identity));
        }
        end(child, &identity);
    }
    None
}

#[test]
fn a_truly_recycled_pid_is_neither_adopted_nor_signalled() {
    assert_eq!(
        rustix::process::geteuid().as_raw(),
        0,
        "this test recycles a PID through /proc/sys/kernel/ns_last_pid and needs root (the test machines run tests as root)"
    );
    let (first, recorded) = spawn_sleep();
    let pid = recorded.host_pid.0;
    end(first, &recorded);
    let (second, replacement) =
        recycle(pid).expect("could not recycle the PID within 200 attempts");
    assert_eq!(replacement.host_pid, recorded.host_pid, "same PID number");
    assert_ne!(
        replacement.authority, recorded.authority,
        "different process"
    );
    let err = match_recorded(&RealProcessSys, &recorded).unwrap_err();
    assert!(
        matches!(err, RecoveryRefusal::AuthorityMismatch { .. }),
        "{err}"
    );
    assert!(alive(&replacement), "the replacement was signalled");
    end(second, &replacement);
}
