//! Identity codecs and the acknowledgement gate (spec 3.3; schemas.md "Host
//! process identity and staged ownership").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_runtime::ownership::ack::{AckGate, AckRefusal};
use lazaret_runtime::records::codec;
use lazaret_runtime::records::ids::*;
use lazaret_runtime::records::process::*;
use quickcheck::{quickcheck, TestResult};

fn identity(boot: u128, dev: u64, ino: u64, pid: u32, start: u64) -> PidfsProcessIdentityV1 {
    PidfsProcessIdentityV1 {
        authority: PidfsProcessAuthorityV1 {
            boot_id: BootId(boot.to_be_bytes()),
            pidfs_st_dev: PidfsDev(dev),
            pidfs_st_ino: PidfsIno(ino),
        },
        host_pid: HostPid(pid),
        start_time_ticks: start,
    }
}

fn staged(id: PidfsProcessIdentityV1, slot: u8, generation: u64) -> StagedProcessOwnership {
    StagedProcessOwnership {
        version: ProcessOwnershipMessageVersion::V1,
        domain_id: DomainId([0xd0; 32]),
        generation_id: GenerationId(generation),
        coordinator_id: CoordinatorId([0xc0; 16]),
        slot: HostProcessOwnershipSlot::ALL
            [usize::from(slot) % HostProcessOwnershipSlot::ALL.len()],
        identity: id,
    }
}

quickcheck! {
    fn identity_and_slot_phases_round_trip(boot: u128, dev: u64, ino: u64, pid: u32, start: u64, phase: u8) -> bool {
        let id = identity(boot, dev, ino, pid, start);
        let slot = match phase % 3 {
            0 => PersistedHostProcessOwnership::Unassigned,
            1 => PersistedHostProcessOwnership::Staged(id),
            _ => PersistedHostProcessOwnership::Committed(HostProcessIdentity { identity: id }),
        };
        let bytes = codec::encode("slot", &slot).unwrap();
        codec::decode::<PersistedHostProcessOwnership>("slot", &bytes).unwrap() == slot
    }

    fn staged_message_and_ack_round_trip(boot: u128, dev: u64, ino: u64, pid: u32, start: u64, slot: u8, generation: u64) -> bool {
        let s = staged(identity(boot, dev, ino, pid, start), slot, generation);
        let ack = ProcessOwnershipCommitAck { version: ProcessOwnershipMessageVersion::V1, committed: s };
        StagedProcessOwnership::decode(&s.encode().unwrap()).unwrap() == s
            && ProcessOwnershipCommitAck::decode(&ack.encode().unwrap()).unwrap() == ack
    }

    /// Only the (boot, dev, ino) tuple is authority: a reused PID with the same
    /// start time but another inode, or any foreign boot, never matches.
    fn only_the_pidfs_tuple_is_authority(boot: u128, other_boot: u128, dev: u64, ino: u64, other_ino: u64, pid: u32, start: u64) -> TestResult {
        let recorded = identity(boot, dev, ino, pid, start);
        let reused_pid = identity(boot, dev, other_ino, pid, start);
        let foreign = identity(other_boot, dev, ino, pid, start);
        let moved = identity(boot, dev, ino, pid.wrapping_add(1), start.wrapping_add(1));
        TestResult::from_bool(
            recorded.same_authority(&recorded.authority)
                && recorded.same_authority(&moved.authority)
                && (ino == other_ino) == recorded.same_authority(&reused_pid.authority)
                && (boot == other_boot) == recorded.same_authority(&foreign.authority),
        )
    }

    fn boot_id_text_round_trips(bytes: u128) -> bool {
        let boot = BootId(bytes.to_be_bytes());
        BootId::parse(&format!("{boot}\n")) == Ok(boot)
    }

    fn unknown_versions_are_refused(tag: u8, rest: Vec<u8>) -> TestResult {
        if tag == 0 {
            return TestResult::discard();
        }
        let mut bytes = vec![tag];
        bytes.extend(rest);
        TestResult::from_bool(
            matches!(StagedProcessOwnership::decode(&bytes), Err(MessageError::UnknownVersion { tag: t, .. }) if t == tag)
                && matches!(ProcessOwnershipCommitAck::decode(&bytes), Err(MessageError::UnknownVersion { .. })),
        )
    }

    /// Random acknowledgement streams: a barrier is released exactly when the
    /// exact echo arrives while pending and nothing refused before it.
    fn ack_gate_releases_only_the_exact_pending_tuple(choices: Vec<u8>) -> bool {
        let expected = staged(identity(7, 9, 1000, 4242, 77), 2, 5);
        let mut gate = AckGate::new();
        let mut pending = false;
        let mut failed = false;
        for c in choices.into_iter().take(30) {
            let candidate = match c % 8 {
                0 => { // (re)arm the barrier
                    let r = gate.arm(expected);
                    let ok = !pending && !failed;
                    if r.is_ok() != ok { return false; }
                    if ok { pending = true; }
                    continue;
                }
                1 => { // lost
                    let _ = gate.lost();
                    failed = true;
                    pending = false;
                    continue;
                }
                2 | 3 => ProcessOwnershipCommitAck { version: ProcessOwnershipMessageVersion::V1, committed: expected }.encode().unwrap(),
                4 => ProcessOwnershipCommitAck { version: ProcessOwnershipMessageVersion::V1, committed: staged(identity(7, 9, 1001, 4242, 77), 2, 5) }.encode().unwrap(),
                5 => ProcessOwnershipCommitAck { version: ProcessOwnershipMessageVersion::V1, committed: staged(identity(7, 9, 1000, 4242, 77), 2, 6) }.encode().unwrap(),
                6 => { let mut b = ProcessOwnershipCommitAck { version: ProcessOwnershipMessageVersion::V1, committed: expected }.encode().unwrap(); b[0] = 1; b }
                _ => vec![0, 0xff],
            };
            let exact = matches!(c % 8, 2 | 3);
            let result = gate.receive(&candidate);
            let should_release = pending && !failed && exact;
            match result {
                Ok(s) => { if !should_release || s != expected { return false; } pending = false; }
                Err(AckRefusal::NotPending) => { if pending || failed { return false; } }
                Err(_) => {
                    if should_release {
                        return false;
                    }
                    if pending {
                        failed = true;
                        pending = false;
                    }
                }
            }
        }
        true
    }
}

#[test]
fn u64_max_and_u32_max_round_trip_in_every_identity_field() {
    let id = identity(u128::MAX, u64::MAX, u64::MAX, u32::MAX, u64::MAX);
    let committed = PersistedHostProcessOwnership::Committed(HostProcessIdentity { identity: id });
    let bytes = codec::encode("slot", &committed).unwrap();
    let back: PersistedHostProcessOwnership = codec::decode("slot", &bytes).unwrap();
    assert_eq!(back, committed);
    let inner = back.identity().unwrap();
    assert_eq!(inner.authority.pidfs_st_ino, PidfsIno(u64::MAX));
    assert_eq!(inner.authority.pidfs_st_dev, PidfsDev(u64::MAX));
    assert_eq!(inner.start_time_ticks, u64::MAX);
    assert_eq!(inner.host_pid, HostPid(u32::MAX));
    // Trailing bytes after a record are refused, not ignored.
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(codec::decode::<PersistedHostProcessOwnership>("slot", &longer).is_err());
}

#[test]
fn boot_id_is_stored_in_canonical_uuid_field_order() {
    let boot = BootId::parse("d899433e-4055-4509-a5b8-018f9a41dede\n").unwrap();
    assert_eq!(
        boot.0,
        [
            0xd8, 0x99, 0x43, 0x3e, 0x40, 0x55, 0x45, 0x09, 0xa5, 0xb8, 0x01, 0x8f, 0x9a, 0x41,
            0xde, 0xde
        ]
    );
    assert_eq!(boot.to_string(), "d899433e-4055-4509-a5b8-018f9a41dede");
    for bad in [
        "",
        "d899433e40554509a5b8018f9a41dede",
        "d899433e-4055-4509-a5b8-018f9a41dedg",
        "d899433e-4055-4509-a5b8_018f9a41dede",
    ] {
        assert!(BootId::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn duplicate_ack_after_release_is_never_success() {
    let expected = staged(identity(1, 2, 3, 4, 5), 0, 1);
    let ack = ProcessOwnershipCommitAck {
        version: ProcessOwnershipMessageVersion::V1,
        committed: expected,
    }
    .encode()
    .unwrap();
    let mut gate = AckGate::new();
    assert!(matches!(gate.receive(&ack), Err(AckRefusal::NotPending)));
    gate.arm(expected).unwrap();
    assert_eq!(gate.receive(&ack).unwrap(), expected);
    assert!(matches!(gate.receive(&ack), Err(AckRefusal::NotPending)));
    // A stale duplicate arriving while the next barrier is pending fails it.
    let next = staged(identity(1, 2, 4, 4, 5), 0, 1);
    gate.arm(next).unwrap();
    assert!(matches!(
        gate.receive(&ack),
        Err(AckRefusal::Mismatch { .. })
    ));
    let good = ProcessOwnershipCommitAck {
        version: ProcessOwnershipMessageVersion::V1,
        committed: next,
    }
    .encode()
    .unwrap();
    assert!(matches!(
        gate.receive(&good),
        Err(AckRefusal::Failed { .. })
    ));
}
