//! Property tests of the snapshot rules of schemas.md "Participant ownership"
//! and "Session terminal ownership" over random operation sequences. A test
//! model (field vectors over small value pools) is kept beside the real row;
//! every accepted step must keep the row well-formed, keep evidence, and agree
//! with the model; every known-illegal step must be refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_runtime::ownership::evidence::{check_monotonic, Evidence};
use lazaret_runtime::ownership::participant::{self, snapshot_pairs, ParticipantOp};
use lazaret_runtime::ownership::terminal::{self, TerminalOp};
use lazaret_runtime::ownership::{AbsenceProof, RuleContext};
use lazaret_runtime::records::domain::Generation;
use lazaret_runtime::records::ids::*;
use lazaret_runtime::records::participant::*;
use lazaret_runtime::records::process::*;
use lazaret_runtime::records::readiness::{
    NetworkReadinessIdentity, NETWORK_READINESS_IDENTITY_SCHEMA_ID,
};
use lazaret_runtime::records::terminal::*;
use quickcheck::{quickcheck, TestResult};

const CURRENT: BootId = BootId([0x11; 16]);
const FOREIGN: BootId = BootId([0x22; 16]);

fn generation() -> Generation {
    Generation {
        domain_id: DomainId([1; 32]),
        generation_id: GenerationId(7),
        configuration_fingerprint: ConfigurationFingerprint([2; 32]),
        coordinator_id: CoordinatorId([3; 16]),
        network_sidecar_id: NetworkSidecarId([4; 16]),
        sandbox_id: SandboxId([5; 16]),
        durable_decision: ModelValue::new("Launching").unwrap(),
    }
}

/// Identity pool: 0 current; 1 the same PID and start time with another pidfs
/// inode (a reused PID); 2 all-maximum values; 3 identity 0 from another boot.
fn identity(i: u8) -> PidfsProcessIdentityV1 {
    let (boot, dev, ino, pid, start) = match i % 4 {
        0 => (CURRENT, 9, 1000, 4242, 77),
        1 => (CURRENT, 9, 1001, 4242, 77),
        2 => (CURRENT, u64::MAX, u64::MAX, u32::MAX, u64::MAX),
        _ => (FOREIGN, 9, 1000, 4242, 77),
    };
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotC {
    Unassigned,
    Staged(u8),
    Committed(u8),
}

fn phase(s: SlotC) -> PersistedHostProcessOwnership {
    match s {
        SlotC::Unassigned => PersistedHostProcessOwnership::Unassigned,
        SlotC::Staged(i) => PersistedHostProcessOwnership::Staged(identity(i)),
        SlotC::Committed(i) => PersistedHostProcessOwnership::Committed(HostProcessIdentity {
            identity: identity(i),
        }),
    }
}

fn path(i: u8, tag: &str) -> HostPath {
    HostPath::new(format!("/lazaret/{tag}/{i}")).unwrap()
}

fn namespace(i: u8) -> NamespaceIdentity {
    NamespaceIdentity {
        device: 3,
        inode: u64::MAX - u64::from(i),
    }
}

fn mount(i: u8) -> MountIdentity {
    MountIdentity {
        mount_id: u64::from(i) + 40,
        device: u64::MAX,
        inode: u64::from(i),
    }
}

fn anchors(i: u8) -> AnchorMounts {
    AnchorMounts {
        namespace: MountNamespaceIdentity {
            id: u64::from(i) + 7,
            device: 4,
            inode: u64::from(i),
        },
        anchors: vec![AnchorMount {
            mountpoint: path(i, "anchor"),
            mount: mount(i),
        }],
    }
}

fn policy(i: u8) -> Sha256Digest {
    Sha256Digest([0x50 + i; 32])
}

/// Index 0 is the fingerprint of this generation's policy 0 and namespace 0;
/// any other index is a digest that matches nothing.
fn fingerprint(i: u8) -> Sha256Digest {
    if i != 0 {
        return Sha256Digest([0x70 + i; 32]);
    }
    let g = generation();
    NetworkReadinessIdentity {
        schema_id: NETWORK_READINESS_IDENTITY_SCHEMA_ID.to_owned(),
        domain_id: g.domain_id,
        generation_id: g.generation_id,
        configuration_fingerprint: g.configuration_fingerprint,
        network_sidecar_id: g.network_sidecar_id,
        derived_policy_digest: policy(0),
        enforcement_namespace: namespace(0),
    }
    .fingerprint()
    .unwrap()
}

fn readiness(i: u8) -> NetworkReadinessEvidence {
    let g = generation();
    NetworkReadinessEvidence {
        domain_id: g.domain_id,
        generation_id: if i == 0 {
            g.generation_id
        } else {
            GenerationId(99)
        },
        network_sidecar_id: g.network_sidecar_id,
        readiness_fingerprint: fingerprint(0),
    }
}

fn released(i: u8) -> StateAnchorReleaseEvidence {
    StateAnchorReleaseEvidence {
        runtime_supervisor: phase(SlotC::Committed(i)),
        mounts: Some(anchors(i)),
    }
}

const LEASE: [LeaseState; 3] = [
    LeaseState::Intent,
    LeaseState::LeaseHeld,
    LeaseState::ReleaseIntent,
];

/// Per role: its value fields count and its process slots.
fn shape(role: ParticipantRole) -> (usize, Vec<HostProcessOwnershipSlot>) {
    use HostProcessOwnershipSlot as S;
    match role {
        ParticipantRole::PreparedLower => (7, vec![]),
        ParticipantRole::StateAnchor => (5, vec![S::StateAnchorRuntimeSupervisor]),
        ParticipantRole::GitRouting => (4, vec![S::GitRoutingDaemon]),
        ParticipantRole::Network => (4, vec![S::NetworkRuntimeSupervisor]),
        ParticipantRole::Helper => (
            1,
            vec![S::HelperConnectivityHelper, S::HelperRuntimeSupervisor],
        ),
        ParticipantRole::Sandbox => (
            3,
            vec![
                S::SandboxHostCoordinator,
                S::SandboxRuntimeSupervisor,
                S::SandboxAttachedRunsc,
            ],
        ),
        ParticipantRole::Publication => (2, vec![]),
    }
}

/// Index of the value field that carries the lease phase / release evidence.
const PL_LEASE: usize = 2;
const PL_RELEASED: usize = 6;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Model {
    values: Vec<Option<u8>>,
    slots: Vec<SlotC>,
}

impl Model {
    fn empty(role: ParticipantRole) -> Self {
        let (n, slots) = shape(role);
        Self {
            values: vec![None; n],
            slots: vec![SlotC::Unassigned; slots.len()],
        }
    }
}

fn build(role: ParticipantRole, m: &Model) -> ParticipantOwnership {
    let v = |k: usize| m.values[k];
    let s = |k: usize| phase(m.slots[k]);
    match role {
        ParticipantRole::PreparedLower => {
            ParticipantOwnership::PreparedLower(PreparedLowerOwnership {
                prepared_artifact_id: v(0).map(|i| PreparedArtifactId([i + 1; 32])),
                source_identity: v(1).map(|i| SourceIdentity::new(format!("sha256:{i}")).unwrap()),
                lease_state: v(2).map(|i| LEASE[usize::from(i % 3)]),
                path: v(3).map(|i| path(i, "lower")),
                device: v(4).map(u64::from),
                inode: v(5).map(|i| u64::MAX - u64::from(i)),
                released_state_anchor: v(6).map(released),
            })
        }
        ParticipantRole::StateAnchor => ParticipantOwnership::StateAnchor(StateAnchorOwnership {
            lower_artifact_id: v(0).map(|i| PreparedArtifactId([i + 1; 32])),
            upper_path: v(1).map(|i| path(i, "upper")),
            work_path: v(2).map(|i| path(i, "work")),
            merged_path: v(3).map(|i| path(i, "merged")),
            runtime_supervisor: s(0),
            mounts: v(4).map(anchors),
        }),
        ParticipantRole::GitRouting => ParticipantOwnership::GitRouting(GitRoutingOwnership {
            mountpoint: v(0).map(|i| path(i, "mnt")),
            host_root: v(1).map(|i| path(i, "host")),
            isolated_root: v(2).map(|i| path(i, "iso")),
            daemon: s(0),
            mount: v(3).map(mount),
        }),
        ParticipantRole::Network => ParticipantOwnership::Network(NetworkOwnership {
            derived_policy_digest: v(0).map(policy),
            readiness_fingerprint: v(1).map(fingerprint),
            readiness_evidence: v(2).map(readiness),
            namespace: v(3).map(namespace),
            runtime_supervisor: s(0),
        }),
        ParticipantRole::Helper => ParticipantOwnership::Helper(HelperOwnership {
            network_sidecar_id: v(0).map(|i| NetworkSidecarId([4 + i; 16])),
            connectivity_helper: s(0),
            runtime_supervisor: s(1),
        }),
        ParticipantRole::Sandbox => ParticipantOwnership::Sandbox(SandboxOwnership {
            container_id: v(0).map(|i| ContainerId::new(format!("lazaret-{i}")).unwrap()),
            runtime_root: v(1).map(|i| path(i, "runsc")),
            bundle_digest: v(2).map(|i| Sha256Digest([0x30 + i; 32])),
            host_coordinator: s(0),
            runtime_supervisor: s(1),
            attached_runsc: s(2),
        }),
        ParticipantRole::Publication => ParticipantOwnership::Publication(PublicationOwnership {
            socket_path: v(0).map(|i| path(i, "sock")),
            identity_path: v(1).map(|i| path(i, "id")),
        }),
    }
}

/// A legal next phase for one slot (or unchanged).
fn advance(slot: HostProcessOwnershipSlot, c: SlotC, id: u8) -> SlotC {
    match (c, slot.edge()) {
        (SlotC::Unassigned, SlotEdge::AcquiredChild) => SlotC::Staged(id % 3),
        (SlotC::Unassigned, SlotEdge::DirectExisting) => SlotC::Committed(id % 3),
        (SlotC::Staged(i), _) => SlotC::Committed(i),
        (c, _) => c,
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn byte(&mut self, n: u8) -> u8 {
        u8::try_from(self.below(u64::from(n))).unwrap()
    }
}

fn proof(i: u64) -> AbsenceProof {
    [
        AbsenceProof::ExactAbsence,
        AbsenceProof::IndependentAbsence,
        AbsenceProof::SealedRuntimeAbsence,
    ][usize::try_from(i % 3).unwrap()]
}

/// An acquisition that breaks a rule, or None when nothing is recorded yet.
fn illegal(role: ParticipantRole, m: &Model, rng: &mut Rng) -> Option<(Model, &'static str)> {
    let (_, slots) = shape(role);
    let mut out = m.clone();
    let present: Vec<usize> = (0..m.values.len())
        .filter(|&k| {
            m.values[k].is_some() && !(role == ParticipantRole::PreparedLower && k == PL_LEASE)
        })
        .collect();
    let recorded: Vec<usize> = (0..m.slots.len())
        .filter(|&k| m.slots[k] != SlotC::Unassigned)
        .collect();
    let unassigned: Vec<usize> = (0..m.slots.len())
        .filter(|&k| m.slots[k] == SlotC::Unassigned)
        .collect();
    let choice = rng.below(4);
    if choice == 0 && !present.is_empty() {
        let k = present[usize::try_from(rng.below(present.len() as u64)).unwrap()];
        out.values[k] = Some((m.values[k]? + 1) % 2);
        return Some((out, "replace a recorded value"));
    }
    if choice == 1 && !present.is_empty() {
        let k = present[usize::try_from(rng.below(present.len() as u64)).unwrap()];
        out.values[k] = None;
        return Some((out, "clear a recorded value"));
    }
    if choice == 2 && !recorded.is_empty() {
        let k = recorded[usize::try_from(rng.below(recorded.len() as u64)).unwrap()];
        out.slots[k] = match m.slots[k] {
            SlotC::Staged(i) => [
                SlotC::Unassigned,
                SlotC::Staged((i + 1) % 3),
                SlotC::Committed((i + 1) % 3),
            ][usize::try_from(rng.below(3)).unwrap()],
            SlotC::Committed(i) => [
                SlotC::Unassigned,
                SlotC::Staged(i),
                SlotC::Committed((i + 1) % 3),
            ][usize::try_from(rng.below(3)).unwrap()],
            SlotC::Unassigned => return None,
        };
        return Some((out, "regress or replace a recorded slot"));
    }
    if !unassigned.is_empty() {
        let k = unassigned[usize::try_from(rng.below(unassigned.len() as u64)).unwrap()];
        out.slots[k] = match slots[k].edge() {
            // A foreign-boot identity is never current.
            _ if rng.below(2) == 0 => match slots[k].edge() {
                SlotEdge::AcquiredChild => SlotC::Staged(3),
                SlotEdge::DirectExisting => SlotC::Committed(3),
            },
            SlotEdge::AcquiredChild => SlotC::Committed(0),
            SlotEdge::DirectExisting => SlotC::Staged(0),
        };
        return Some((
            out,
            "skip staging, stage a direct edge, or use a foreign boot",
        ));
    }
    None
}

fn run_participant(role_pick: u8, seeds: Vec<u64>) -> TestResult {
    let role = ParticipantRole::ALL[usize::from(role_pick) % ParticipantRole::ALL.len()];
    let g = generation();
    let ctx = RuleContext {
        current_boot: CURRENT,
        generation: &g,
    };
    let (_, slots) = shape(role);
    let mut row = participant::bare_intent(g.generation_id, role);
    let mut model: Option<Model> = None;
    for seed in seeds.into_iter().take(40) {
        let mut rng = Rng(seed | 1);
        let current = model.clone().unwrap_or_else(|| Model::empty(role));
        let (op, expected_model, must_fail) = match rng.below(6) {
            0 | 1 => {
                let mut m = current.clone();
                for k in 0..m.values.len() {
                    if m.values[k].is_none() && rng.below(2) == 0 {
                        m.values[k] =
                            Some(if role == ParticipantRole::PreparedLower && k == PL_LEASE {
                                0
                            } else {
                                rng.byte(2)
                            });
                    }
                }
                if role == ParticipantRole::PreparedLower {
                    m.values[PL_RELEASED] = current.values[PL_RELEASED];
                }
                for (k, slot) in slots.iter().enumerate() {
                    if rng.below(2) == 0 {
                        m.slots[k] = advance(*slot, m.slots[k], rng.byte(3));
                    }
                }
                (ParticipantOp::Acquire(build(role, &m)), Some(m), None)
            }
            2 => {
                let mut m = current.clone();
                for k in 0..m.values.len() {
                    if m.values[k].is_none() {
                        m.values[k] = Some(0);
                    }
                }
                if role == ParticipantRole::PreparedLower {
                    m.values[PL_LEASE] = Some(1);
                    m.values[PL_RELEASED] = current.values[PL_RELEASED];
                }
                for (k, slot) in slots.iter().enumerate() {
                    m.slots[k] = advance(*slot, m.slots[k], 0);
                }
                (ParticipantOp::Activate(build(role, &m)), Some(m), None)
            }
            3 => {
                let evidence = (role == ParticipantRole::PreparedLower && rng.below(2) == 0)
                    .then(|| released(0));
                let mut m = current.clone();
                if role == ParticipantRole::PreparedLower {
                    if m.values[PL_LEASE].is_some() {
                        m.values[PL_LEASE] = Some(2);
                    }
                    if evidence.is_some() {
                        m.values[PL_RELEASED] = Some(0);
                    }
                }
                (
                    ParticipantOp::BeginRelease {
                        released_state_anchor: evidence,
                    },
                    Some(m),
                    None,
                )
            }
            4 => (
                ParticipantOp::Clean(proof(rng.next())),
                Some(Model::empty(role)),
                None,
            ),
            _ => match illegal(role, &current, &mut rng) {
                Some((m, why)) => {
                    let op = if rng.below(2) == 0 {
                        ParticipantOp::Acquire(build(role, &m))
                    } else {
                        ParticipantOp::Activate(build(role, &m))
                    };
                    (op, None, Some(why))
                }
                None => continue,
            },
        };
        let before = row.clone();
        match participant::apply(&row, &op, &ctx) {
            Err(_) => {}
            Ok(next) => {
                if let Some(why) = must_fail {
                    return TestResult::error(format!(
                        "accepted illegal step ({why}): {before:?} --{op:?}--> {next:?}"
                    ));
                }
                if let Err(e) = participant::check_wellformed(&next) {
                    return TestResult::error(format!("ill-formed row after {op:?}: {e}"));
                }
                // Bare Intent only reaches Clean with the sealed proof, and
                // never an active state.
                if before.ownership.is_none()
                    && !matches!(
                        (&op, next.state),
                        (ParticipantOp::Acquire(_), ParticipantState::Intent)
                            | (
                                ParticipantOp::Clean(AbsenceProof::SealedRuntimeAbsence),
                                ParticipantState::Clean
                            )
                    )
                {
                    return TestResult::error(format!(
                        "bare Intent moved by {op:?} to {:?}",
                        next.state
                    ));
                }
                if next.state == ParticipantState::Clean
                    && before.state != ParticipantState::ReleaseIntent
                    && before.ownership.is_some()
                {
                    return TestResult::error("Clean reached without ReleaseIntent");
                }
                // Evidence kept: every non-Clean step is monotonic.
                if next.state != ParticipantState::Clean {
                    if let (Some(a), Some(b)) = (&before.ownership, &next.ownership) {
                        let pairs = snapshot_pairs(a, b).unwrap();
                        if let Err(e) = check_monotonic(
                            &pairs,
                            &["lease_state", "released_state_anchor"],
                            CURRENT,
                        ) {
                            return TestResult::error(format!("evidence lost by {op:?}: {e}"));
                        }
                    }
                }
                let m = expected_model.unwrap_or_else(|| Model::empty(role));
                if next.ownership.as_ref() != Some(&build(role, &m)) {
                    return TestResult::error(format!("row disagrees with the model after {op:?}"));
                }
                model = Some(m);
                row = next;
            }
        }
    }
    TestResult::passed()
}

quickcheck! {
    fn participant_sequences_keep_the_snapshot_rules(role: u8, seeds: Vec<u64>) -> TestResult {
        run_participant(role, seeds)
    }
}

/// Many random sequences per role must reach every state, so the properties
/// above are exercised on active, released and clean rows, not only Intent.
#[test]
fn random_sequences_reach_every_state_for_every_role() {
    let g = generation();
    let ctx = RuleContext {
        current_boot: CURRENT,
        generation: &g,
    };
    for role in ParticipantRole::ALL {
        let (_, slots) = shape(role);
        let mut m = Model::empty(role);
        let mut row = participant::bare_intent(g.generation_id, role);
        let mut seen = vec![row.state];
        // Acquire slot by slot until every slot is committed, then activate.
        for _ in 0..2 {
            for (k, slot) in slots.iter().enumerate() {
                m.slots[k] = advance(*slot, m.slots[k], 0);
            }
            if role == ParticipantRole::PreparedLower {
                m.values[PL_LEASE] = Some(0);
            } else if !m.values.is_empty() {
                m.values[0] = Some(0);
            }
            if slots.is_empty() && row.ownership.is_some() {
                break;
            }
            row = participant::apply(&row, &ParticipantOp::Acquire(build(role, &m)), &ctx).unwrap();
        }
        assert!(
            participant::apply(&row, &ParticipantOp::Acquire(role.empty_snapshot()), &ctx).is_err()
        );
        for k in 0..m.values.len() {
            m.values[k].get_or_insert(0);
        }
        if role == ParticipantRole::PreparedLower {
            m.values[PL_LEASE] = Some(1);
            m.values[PL_RELEASED] = None;
        }
        row = participant::apply(&row, &ParticipantOp::Activate(build(role, &m)), &ctx)
            .unwrap_or_else(|e| panic!("{role:?} cannot activate: {e}"));
        assert_eq!(row.state, role.active_state());
        seen.push(row.state);
        row = participant::apply(
            &row,
            &ParticipantOp::BeginRelease {
                released_state_anchor: None,
            },
            &ctx,
        )
        .unwrap();
        seen.push(row.state);
        let kept = row.ownership.clone().unwrap();
        assert!(!participant::snapshot_is_empty(&kept));
        row = participant::apply(
            &row,
            &ParticipantOp::Clean(AbsenceProof::ExactAbsence),
            &ctx,
        )
        .unwrap();
        seen.push(row.state);
        assert_eq!(row.ownership, Some(role.empty_snapshot()));
        assert_eq!(seen.len(), 4, "{role:?}: {seen:?}");
    }
}

#[test]
fn staged_ownership_never_satisfies_an_active_state() {
    let g = generation();
    let ctx = RuleContext {
        current_boot: CURRENT,
        generation: &g,
    };
    let role = ParticipantRole::Sandbox;
    let mut m = Model::empty(role);
    m.values = vec![Some(0); 3];
    m.slots = vec![SlotC::Committed(0), SlotC::Staged(0), SlotC::Committed(2)];
    let row = participant::bare_intent(g.generation_id, role);
    // Acquired children cannot enter Committed without staging first.
    assert!(participant::apply(&row, &ParticipantOp::Acquire(build(role, &m)), &ctx).is_err());
    m.slots = vec![SlotC::Committed(0), SlotC::Staged(0), SlotC::Staged(2)];
    let row = participant::apply(&row, &ParticipantOp::Acquire(build(role, &m)), &ctx).unwrap();
    let err =
        participant::apply(&row, &ParticipantOp::Activate(build(role, &m)), &ctx).unwrap_err();
    assert!(err.to_string().contains("Staged"), "{err}");
    // The reused PID (same PID/start time, other inode) cannot commit the slot.
    m.slots = vec![
        SlotC::Committed(0),
        SlotC::Committed(1),
        SlotC::Committed(2),
    ];
    assert!(participant::apply(&row, &ParticipantOp::Activate(build(role, &m)), &ctx).is_err());
    m.slots = vec![
        SlotC::Committed(0),
        SlotC::Committed(0),
        SlotC::Committed(2),
    ];
    let active = participant::apply(&row, &ParticipantOp::Activate(build(role, &m)), &ctx).unwrap();
    assert_eq!(active.state, ParticipantState::Committed);
}

#[test]
fn bare_intent_cleans_only_after_sealed_runtime_absence() {
    let g = generation();
    let ctx = RuleContext {
        current_boot: CURRENT,
        generation: &g,
    };
    let row = participant::bare_intent(g.generation_id, ParticipantRole::Network);
    for proof in [AbsenceProof::ExactAbsence, AbsenceProof::IndependentAbsence] {
        assert!(participant::apply(&row, &ParticipantOp::Clean(proof), &ctx).is_err());
    }
    assert!(participant::apply(
        &row,
        &ParticipantOp::BeginRelease {
            released_state_anchor: None
        },
        &ctx
    )
    .is_err());
    let clean = participant::apply(
        &row,
        &ParticipantOp::Clean(AbsenceProof::SealedRuntimeAbsence),
        &ctx,
    )
    .unwrap();
    assert_eq!(clean.state, ParticipantState::Clean);
    assert_eq!(
        clean.ownership,
        Some(ParticipantRole::Network.empty_snapshot())
    );
}

#[test]
fn network_readiness_must_match_the_generation() {
    let g = generation();
    let ctx = RuleContext {
        current_boot: CURRENT,
        generation: &g,
    };
    let role = ParticipantRole::Network;
    let row = participant::bare_intent(g.generation_id, role);
    let mut m = Model::empty(role);
    m.slots = vec![SlotC::Committed(0)];
    let row = participant::apply(&row, &ParticipantOp::Acquire(build(role, &m)), &ctx).unwrap();
    for wrong in 0..4 {
        let mut bad = m.clone();
        bad.values = vec![Some(0); 4];
        bad.values[wrong] = Some(1);
        let err = participant::apply(&row, &ParticipantOp::Activate(build(role, &bad)), &ctx)
            .unwrap_err();
        assert!(
            err.to_string().contains("readiness"),
            "field {wrong}: {err}"
        );
    }
    m.values = vec![Some(0); 4];
    assert!(participant::apply(&row, &ParticipantOp::Activate(build(role, &m)), &ctx).is_ok());
}

// ---- Session terminals --------------------------------------------------

fn terminal_snapshot(v: [Option<u8>; 3], hc: SlotC, exec: SlotC) -> TerminalSnapshot {
    TerminalSnapshot {
        container_id: v[0].map(|i| ContainerId::new(format!("c{i}")).unwrap()),
        host_coordinator: phase(hc),
        pty_master: v[1].map(|i| PtyIdentity {
            master_fd: u32::from(i) + 3,
            device: u64::MAX,
            inode: u64::from(i),
        }),
        exec_client: phase(exec),
        guest_process: v[2].map(|i| GuestProcessIdentity {
            leader_pid: 1,
            leader_start_time: u64::MAX,
            process_group_id: u32::from(i),
        }),
    }
}

fn slot_pick(i: u64) -> SlotC {
    let k = u8::try_from(i % 4).unwrap();
    match (i / 4) % 3 {
        0 => SlotC::Unassigned,
        1 => SlotC::Staged(k),
        _ => SlotC::Committed(k),
    }
}

quickcheck! {
    fn terminal_sequences_keep_the_snapshot_rules(seeds: Vec<u64>) -> TestResult {
        let g = generation();
        let ctx = RuleContext { current_boot: CURRENT, generation: &g };
        let mut row = terminal::bare_intent(g.generation_id, SessionId([9; 16]));
        for seed in seeds.into_iter().take(40) {
            let mut rng = Rng(seed | 1);
            let v = [0, 1, 2].map(|_| match rng.below(3) { 0 => None, n => Some(u8::try_from(n - 1).unwrap()) });
            let snap = terminal_snapshot(v, slot_pick(rng.next()), slot_pick(rng.next()));
            let op = match rng.below(4) {
                0 => TerminalOp::Acquire(snap),
                1 => TerminalOp::Run(snap),
                2 => TerminalOp::BeginRelease,
                _ => TerminalOp::Clean(proof(rng.next())),
            };
            let before = row.clone();
            if let Ok(next) = terminal::apply(&row, &op, &ctx) {
                if let Err(e) = terminal::check_wellformed(&next) {
                    return TestResult::error(format!("ill-formed terminal: {e}"));
                }
                if next.state != SessionTerminalState::Clean {
                    if let Err(e) = check_monotonic(&Evidence::pairs(&before.snapshot, &next.snapshot), &[], CURRENT) {
                        return TestResult::error(format!("evidence lost by {op:?}: {e}"));
                    }
                } else if before.state == SessionTerminalState::Intent
                    && (!before.snapshot.is_empty() || op != TerminalOp::Clean(AbsenceProof::SealedRuntimeAbsence)) {
                    return TestResult::error("terminal cleaned without release or sealed absence");
                }
                if next.state == SessionTerminalState::Running {
                    for p in [&next.snapshot.host_coordinator, &next.snapshot.exec_client] {
                        if !matches!(p, PersistedHostProcessOwnership::Committed(c) if c.identity.authority.boot_id == CURRENT) {
                            return TestResult::error("Running without current committed HC and exec client");
                        }
                    }
                }
                row = next;
            }
        }
        TestResult::passed()
    }
}

#[test]
fn terminal_runs_only_with_all_evidence_committed() {
    let g = generation();
    let ctx = RuleContext {
        current_boot: CURRENT,
        generation: &g,
    };
    let row = terminal::bare_intent(g.generation_id, SessionId([9; 16]));
    let staged = terminal_snapshot([None, Some(0), None], SlotC::Committed(0), SlotC::Staged(2));
    let row = terminal::apply(&row, &TerminalOp::Acquire(staged), &ctx).unwrap();
    let incomplete = terminal_snapshot(
        [Some(0), Some(0), None],
        SlotC::Committed(0),
        SlotC::Committed(2),
    );
    assert!(terminal::apply(&row, &TerminalOp::Run(incomplete), &ctx).is_err());
    let wrong_exec = terminal_snapshot(
        [Some(0), Some(0), Some(0)],
        SlotC::Committed(0),
        SlotC::Committed(1),
    );
    assert!(terminal::apply(&row, &TerminalOp::Run(wrong_exec), &ctx).is_err());
    let full = terminal_snapshot(
        [Some(0), Some(0), Some(0)],
        SlotC::Committed(0),
        SlotC::Committed(2),
    );
    let running = terminal::apply(&row, &TerminalOp::Run(full.clone()), &ctx).unwrap();
    assert_eq!(running.state, SessionTerminalState::Running);
    let release = terminal::apply(&running, &TerminalOp::BeginRelease, &ctx).unwrap();
    assert_eq!(release.snapshot, full, "ReleaseIntent keeps every identity");
    let clean = terminal::apply(
        &release,
        &TerminalOp::Clean(AbsenceProof::ExactAbsence),
        &ctx,
    )
    .unwrap();
    assert_eq!(clean.snapshot, TerminalSnapshot::default());
}
