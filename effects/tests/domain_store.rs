//! The Domain Store: metadata refusal before rows, atomic batches, the
//! snapshot rules enforced by the store, and round trips across reopen
//! (spec 3.6, FR-17, FR-21; schemas.md "Domain Store").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_effects::domain_lock::{DomainLock, DomainLockError};
use lazaret_effects::domain_store::{
    accept_staged_ownership, DomainStore, RecordedSlot, SlotHolder, SlotTarget, StoreError, StoreOp,
};
use lazaret_runtime::coordinator::host_model::TerminalRow;
use lazaret_runtime::ownership::mailbox::MailboxOp;
use lazaret_runtime::ownership::participant::ParticipantOp;
use lazaret_runtime::ownership::terminal::TerminalOp;
use lazaret_runtime::ownership::AbsenceProof;
use lazaret_runtime::records::codec;
use lazaret_runtime::records::domain::*;
use lazaret_runtime::records::ids::*;
use lazaret_runtime::records::participant::*;
use lazaret_runtime::records::process::*;
use lazaret_runtime::records::terminal::*;
use quickcheck::{QuickCheck, TestResult};
use redb::TableDefinition;
use std::path::Path;

const BOOT: BootId = BootId([0x42; 16]);
const GEN: GenerationId = GenerationId(1);
const SESSION: SessionId = SessionId([0x5e; 16]);

fn domain() -> Domain {
    Domain {
        domain_id: DomainId([1; 32]),
        profile_name: ProfileName::new("default").unwrap(),
        canonical_workspace: HostPath::new("/home/dev/project").unwrap(),
    }
}

fn generation() -> Generation {
    Generation {
        domain_id: DomainId([1; 32]),
        generation_id: GEN,
        configuration_fingerprint: ConfigurationFingerprint([2; 32]),
        coordinator_id: CoordinatorId([3; 16]),
        network_sidecar_id: NetworkSidecarId([4; 16]),
        sandbox_id: SandboxId([5; 16]),
        durable_decision: ModelValue::new("Intent").unwrap(),
    }
}

fn identity(ino: u64) -> PidfsProcessIdentityV1 {
    PidfsProcessIdentityV1 {
        authority: PidfsProcessAuthorityV1 {
            boot_id: BOOT,
            pidfs_st_dev: PidfsDev(u64::MAX),
            pidfs_st_ino: PidfsIno(ino),
        },
        host_pid: HostPid(4242),
        start_time_ticks: u64::MAX,
    }
}

fn seeded(store: &DomainStore<'_>) {
    store
        .apply(&[
            StoreOp::PutDomain(domain()),
            StoreOp::InsertGeneration(generation()),
            StoreOp::InsertParticipantIntent {
                generation: GEN,
                role: ParticipantRole::Sandbox,
            },
            StoreOp::InsertSession(Session {
                generation_id: GEN,
                session_id: SESSION,
                cli_id: CliId([6; 16]),
                session_anchor_id: SessionAnchorId([7; 32]),
                session_phase: ModelValue::new("Registering").unwrap(),
            }),
            StoreOp::InsertTerminalIntent {
                generation: GEN,
                session: SESSION,
            },
            StoreOp::InsertMailbox {
                generation: GEN,
                identity_path: HostPath::new("/run/l/id").unwrap(),
                inbox_path: HostPath::new("/run/l/in").unwrap(),
                outbox_path: HostPath::new("/run/l/out").unwrap(),
            },
        ])
        .unwrap();
}

/// Inserts generation `g` (otherwise as [`generation`]).
fn generation_op(g: GenerationId) -> StoreOp {
    StoreOp::InsertGeneration(Generation {
        generation_id: g,
        ..generation()
    })
}

/// The Sandbox participant's bare intent in generation `g`.
fn sandbox_intent_op(g: GenerationId) -> StoreOp {
    StoreOp::InsertParticipantIntent {
        generation: g,
        role: ParticipantRole::Sandbox,
    }
}

fn sandbox_target(slot: HostProcessOwnershipSlot) -> SlotTarget {
    SlotTarget::Participant {
        generation: GEN,
        slot,
    }
}

#[test]
fn a_store_round_trip_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("domain.redb");
    let lock = DomainLock::try_acquire(&dir.path().join("domain.lock")).unwrap();
    let before = {
        let store = DomainStore::create(&lock, &path, BOOT).unwrap();
        seeded(&store);
        store
            .apply(&[
                StoreOp::CommitProcess {
                    target: sandbox_target(HostProcessOwnershipSlot::SandboxHostCoordinator),
                    identity: identity(1),
                },
                StoreOp::StageProcess {
                    target: sandbox_target(HostProcessOwnershipSlot::SandboxRuntimeSupervisor),
                    identity: identity(u64::MAX),
                },
                StoreOp::SetDurableDecision {
                    generation: GEN,
                    decision: ModelValue::new("Committed").unwrap(),
                },
                StoreOp::Mailbox {
                    generation: GEN,
                    op: MailboxOp::Commit,
                },
                StoreOp::CommitProcess {
                    target: SlotTarget::Terminal {
                        generation: GEN,
                        session: SESSION,
                        slot: HostProcessOwnershipSlot::SessionTerminalHostCoordinator,
                    },
                    identity: identity(1),
                },
            ])
            .unwrap();
        store.document().unwrap()
    };
    let store = DomainStore::open(&lock, &path, BOOT).unwrap();
    let after = store.document().unwrap();
    assert_eq!(before, after);
    let sandbox = store
        .participant(GEN, ParticipantRole::Sandbox)
        .unwrap()
        .unwrap();
    let ParticipantOwnership::Sandbox(s) = sandbox.ownership.unwrap() else {
        panic!("role")
    };
    assert_eq!(
        s.runtime_supervisor,
        PersistedHostProcessOwnership::Staged(identity(u64::MAX))
    );
    assert_eq!(
        after.generations[0].generation.durable_decision.as_str(),
        "Committed"
    );
    assert_eq!(
        after.generations[0].mailbox.as_ref().unwrap().state,
        ParticipantState::Committed
    );
    // A lock held for another directory does not open this store.
    let elsewhere = tempfile::tempdir().unwrap();
    let other_lock = DomainLock::try_acquire(&elsewhere.path().join("domain.lock")).unwrap();
    assert!(matches!(
        DomainStore::open(&other_lock, &path, BOOT),
        Err(StoreError::LockElsewhere { .. })
    ));
    // Creating over an existing file is refused, never truncating it.
    assert!(matches!(
        DomainStore::create(&lock, &path, BOOT),
        Err(StoreError::CreateFile { .. })
    ));
}

/// The read-only view `lazaret state` uses: every recorded process slot
/// with where it sits, and whether a generation still owns anything.
#[test]
fn process_slots_and_cleanliness_are_read_from_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let lock = DomainLock::try_acquire(&dir.path().join("domain.lock")).unwrap();
    let store = DomainStore::create(&lock, &dir.path().join("domain.redb"), BOOT).unwrap();
    seeded(&store);
    let terminal_hc = SlotTarget::Terminal {
        generation: GEN,
        session: SESSION,
        slot: HostProcessOwnershipSlot::SessionTerminalHostCoordinator,
    };
    store
        .apply(&[
            StoreOp::CommitProcess {
                target: sandbox_target(HostProcessOwnershipSlot::SandboxHostCoordinator),
                identity: identity(1),
            },
            StoreOp::StageProcess {
                target: sandbox_target(HostProcessOwnershipSlot::SandboxAttachedRunsc),
                identity: identity(3),
            },
            StoreOp::CommitProcess {
                target: terminal_hc,
                identity: identity(1),
            },
        ])
        .unwrap();
    let g = store.generation_document(GEN).unwrap().unwrap();
    assert!(!g.is_clean());
    let sandbox = |slot, ownership| RecordedSlot {
        holder: SlotHolder::Participant(ParticipantRole::Sandbox),
        slot,
        ownership,
    };
    let terminal = |slot, ownership| RecordedSlot {
        holder: SlotHolder::Terminal(SESSION),
        slot,
        ownership,
    };
    use HostProcessOwnershipSlot as S;
    use PersistedHostProcessOwnership as P;
    assert_eq!(
        g.process_slots(),
        vec![
            sandbox(
                S::SandboxHostCoordinator,
                P::Committed(HostProcessIdentity {
                    identity: identity(1)
                })
            ),
            sandbox(S::SandboxRuntimeSupervisor, P::Unassigned),
            sandbox(S::SandboxAttachedRunsc, P::Staged(identity(3))),
            terminal(
                S::SessionTerminalHostCoordinator,
                P::Committed(HostProcessIdentity {
                    identity: identity(1)
                })
            ),
            terminal(S::SessionTerminalExecClient, P::Unassigned),
        ]
    );
    // Release and clean everything: the generation owns nothing any more,
    // and a clean participant has no slots left to show.
    let clean = AbsenceProof::ExactAbsence;
    store
        .apply(&[
            StoreOp::Participant {
                generation: GEN,
                role: ParticipantRole::Sandbox,
                op: ParticipantOp::BeginRelease {
                    released_state_anchor: None,
                },
            },
            StoreOp::Participant {
                generation: GEN,
                role: ParticipantRole::Sandbox,
                op: ParticipantOp::Clean(clean),
            },
            StoreOp::Terminal {
                generation: GEN,
                session: SESSION,
                op: TerminalOp::BeginRelease,
            },
            StoreOp::Terminal {
                generation: GEN,
                session: SESSION,
                op: TerminalOp::Clean(clean),
            },
        ])
        .unwrap();
    let g = store.generation_document(GEN).unwrap().unwrap();
    assert!(!g.is_clean(), "the mailbox is still in Intent");
    store
        .apply(&[StoreOp::Mailbox {
            generation: GEN,
            op: MailboxOp::Clean(AbsenceProof::SealedRuntimeAbsence),
        }])
        .unwrap();
    let g = store.generation_document(GEN).unwrap().unwrap();
    assert!(g.is_clean());
    assert!(g
        .process_slots()
        .iter()
        .all(|s| s.ownership == P::Unassigned));
}

#[test]
fn the_domain_lock_is_exclusive() {
    let dir = tempfile::tempdir().unwrap();
    let lock_path = dir.path().join("domain.lock");
    let held = DomainLock::try_acquire(&lock_path).unwrap();
    assert!(matches!(
        DomainLock::try_acquire(&lock_path),
        Err(DomainLockError::Held { .. })
    ));
    drop(held);
    DomainLock::try_acquire(&lock_path).unwrap();
}

const RAW_METADATA: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("store_metadata");
const RAW_PARTICIPANTS: TableDefinition<'_, (u64, u8), &[u8]> =
    TableDefinition::new("participants");

/// Writes a redb file with the given metadata bytes (or none) and one
/// participant row that does not decode.
fn forge(path: &Path, metadata: Option<Vec<u8>>) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    if let Some(bytes) = metadata {
        txn.open_table(RAW_METADATA)
            .unwrap()
            .insert("metadata", bytes.as_slice())
            .unwrap();
    }
    txn.open_table(RAW_PARTICIPANTS)
        .unwrap()
        .insert((1, 5), [0xffu8, 0xff, 0xff].as_slice())
        .unwrap();
    txn.commit().unwrap();
}

fn metadata(id: &str, version: u32) -> Option<Vec<u8>> {
    Some(
        codec::encode(
            "m",
            &StoreMetadata {
                schema_id: id.to_owned(),
                schema_version: version,
            },
        )
        .unwrap(),
    )
}

/// Which refusal a forged store must produce.
type Expect = fn(&StoreError) -> bool;

#[test]
fn wrong_unversioned_older_and_newer_metadata_refuse_before_rows() {
    let dir = tempfile::tempdir().unwrap();
    let lock = DomainLock::try_acquire(&dir.path().join("domain.lock")).unwrap();
    let cases: Vec<(&str, Option<Vec<u8>>, Expect)> = vec![
        ("unversioned", None, |e| {
            matches!(e, StoreError::Unversioned { .. })
        }),
        ("malformed", Some(vec![0x80]), |e| {
            matches!(e, StoreError::MetadataMalformed { .. })
        }),
        ("catalog", metadata("lazaret-storage-catalog-v1", 1), |e| {
            matches!(e, StoreError::UnknownIdentity { .. })
        }),
        ("older", metadata(DOMAIN_STORE_SCHEMA_ID, 0), |e| {
            matches!(e, StoreError::OlderVersion { found: 0, .. })
        }),
        ("newer", metadata(DOMAIN_STORE_SCHEMA_ID, 2), |e| {
            matches!(e, StoreError::NewerVersion { found: 2, .. })
        }),
        ("max", metadata(DOMAIN_STORE_SCHEMA_ID, u32::MAX), |e| {
            matches!(e, StoreError::NewerVersion { .. })
        }),
    ];
    for (name, meta, expected) in cases {
        let path = dir.path().join(format!("{name}.redb"));
        forge(&path, meta);
        let err = DomainStore::open(&lock, &path, BOOT).unwrap_err();
        assert!(expected(&err), "{name}: {err}");
    }
    // Control: with v1 metadata the same undecodable row is reached, and
    // reported as a row error - so the refusals above happened before rows.
    let path = dir.path().join("v1.redb");
    forge(
        &path,
        metadata(DOMAIN_STORE_SCHEMA_ID, DOMAIN_STORE_SCHEMA_VERSION),
    );
    let store = DomainStore::open(&lock, &path, BOOT).unwrap();
    assert!(matches!(
        store.document(),
        Err(StoreError::Row {
            table: "participant",
            ..
        })
    ));
    // A file that is not a redb database at all.
    let junk = dir.path().join("junk.redb");
    std::fs::write(&junk, b"not a database").unwrap();
    assert!(matches!(
        DomainStore::open(&lock, &junk, BOOT),
        Err(StoreError::Open { .. })
    ));
}

#[test]
fn the_store_enforces_the_rules_and_batches_are_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let lock = DomainLock::try_acquire(&dir.path().join("domain.lock")).unwrap();
    let store = DomainStore::create(&lock, &dir.path().join("d.redb"), BOOT).unwrap();
    seeded(&store);
    let runsc = sandbox_target(HostProcessOwnershipSlot::SandboxAttachedRunsc);
    store
        .apply(&[StoreOp::StageProcess {
            target: runsc,
            identity: identity(10),
        }])
        .unwrap();
    let before = store.document().unwrap();
    let refused: Vec<Vec<StoreOp>> = vec![
        // commit a different identity than staged (a reused PID's process)
        vec![StoreOp::CommitProcess {
            target: runsc,
            identity: identity(11),
        }],
        // stage a foreign-boot identity
        vec![StoreOp::StageProcess {
            target: sandbox_target(HostProcessOwnershipSlot::SandboxRuntimeSupervisor),
            identity: PidfsProcessIdentityV1 {
                authority: PidfsProcessAuthorityV1 {
                    boot_id: BootId([9; 16]),
                    ..identity(12).authority
                },
                ..identity(12)
            },
        }],
        // an acquired child may not skip staging
        vec![StoreOp::CommitProcess {
            target: sandbox_target(HostProcessOwnershipSlot::SandboxRuntimeSupervisor),
            identity: identity(12),
        }],
        // Clean without release
        vec![StoreOp::Participant {
            generation: GEN,
            role: ParticipantRole::Sandbox,
            op: ParticipantOp::Clean(AbsenceProof::SealedRuntimeAbsence),
        }],
        // a terminal cannot run with nothing recorded
        vec![StoreOp::Terminal {
            generation: GEN,
            session: SESSION,
            op: TerminalOp::Run(TerminalSnapshot::default()),
        }],
        // a legal first op followed by an illegal one: nothing is applied
        vec![
            StoreOp::CommitProcess {
                target: runsc,
                identity: identity(10),
            },
            StoreOp::Participant {
                generation: GEN,
                role: ParticipantRole::Sandbox,
                op: ParticipantOp::Activate(ParticipantRole::Sandbox.empty_snapshot()),
            },
        ],
        // duplicate generation
        vec![StoreOp::InsertGeneration(generation())],
    ];
    for ops in refused {
        assert!(store.apply(&ops).is_err(), "{ops:?}");
        assert_eq!(
            store.document().unwrap(),
            before,
            "partial state after {ops:?}"
        );
    }
    // The legal commit alone succeeds.
    store
        .apply(&[StoreOp::CommitProcess {
            target: runsc,
            identity: identity(10),
        }])
        .unwrap();
    assert_ne!(store.document().unwrap(), before);
}

#[test]
fn hc_accepts_staged_ownership_and_echoes_the_exact_tuple() {
    let dir = tempfile::tempdir().unwrap();
    let lock = DomainLock::try_acquire(&dir.path().join("domain.lock")).unwrap();
    let store = DomainStore::create(&lock, &dir.path().join("d.redb"), BOOT).unwrap();
    seeded(&store);
    let g = generation();
    let staged = StagedProcessOwnership {
        version: ProcessOwnershipMessageVersion::V1,
        domain_id: g.domain_id,
        generation_id: GEN,
        coordinator_id: g.coordinator_id,
        slot: HostProcessOwnershipSlot::SandboxAttachedRunsc,
        identity: identity(77),
    };
    let ack = accept_staged_ownership(&store, &staged.encode().unwrap()).unwrap();
    assert_eq!(
        ProcessOwnershipCommitAck::decode(&ack).unwrap().committed,
        staged
    );
    let p = store
        .participant(GEN, ParticipantRole::Sandbox)
        .unwrap()
        .unwrap();
    assert_eq!(
        p.ownership.unwrap().slot(staged.slot),
        Some(&PersistedHostProcessOwnership::Staged(identity(77)))
    );
    // Another coordinator, or a second staging of the slot, is refused.
    let other = StagedProcessOwnership {
        coordinator_id: CoordinatorId([0xee; 16]),
        ..staged
    };
    assert!(accept_staged_ownership(&store, &other.encode().unwrap()).is_err());
    let again = StagedProcessOwnership {
        identity: identity(78),
        ..staged
    };
    assert!(accept_staged_ownership(&store, &again.encode().unwrap()).is_err());
    let mut unknown = staged.encode().unwrap();
    unknown[0] = 1;
    assert!(matches!(
        accept_staged_ownership(&store, &unknown),
        Err(StoreError::Message(_))
    ));
}

/// Random operation sequences through the store: every refused batch leaves
/// the document unchanged, and every stored row reads back well-formed.
#[test]
fn random_store_operations_keep_the_document_legal() {
    fn prop(seeds: Vec<u64>) -> TestResult {
        let dir = tempfile::tempdir().unwrap();
        let lock = DomainLock::try_acquire(&dir.path().join("domain.lock")).unwrap();
        let store = DomainStore::create(&lock, &dir.path().join("d.redb"), BOOT).unwrap();
        seeded(&store);
        let slots = [
            HostProcessOwnershipSlot::SandboxHostCoordinator,
            HostProcessOwnershipSlot::SandboxRuntimeSupervisor,
            HostProcessOwnershipSlot::SandboxAttachedRunsc,
            HostProcessOwnershipSlot::HelperConnectivityHelper,
        ];
        for seed in seeds.into_iter().take(10) {
            let slot = slots[usize::try_from(seed % 4).unwrap()];
            let id = identity(seed / 4 % 3);
            let op = match seed / 12 % 6 {
                0 => StoreOp::StageProcess {
                    target: sandbox_target(slot),
                    identity: id,
                },
                1 => StoreOp::CommitProcess {
                    target: sandbox_target(slot),
                    identity: id,
                },
                2 => StoreOp::Participant {
                    generation: GEN,
                    role: ParticipantRole::Sandbox,
                    op: ParticipantOp::BeginRelease {
                        released_state_anchor: None,
                    },
                },
                3 => StoreOp::Participant {
                    generation: GEN,
                    role: ParticipantRole::Sandbox,
                    op: ParticipantOp::Clean(AbsenceProof::ExactAbsence),
                },
                4 => StoreOp::InsertParticipantIntent {
                    generation: GEN,
                    role: ParticipantRole::Helper,
                },
                _ => StoreOp::Terminal {
                    generation: GEN,
                    session: SESSION,
                    op: TerminalOp::BeginRelease,
                },
            };
            let before = store.document().unwrap();
            if store.apply(&[op]).is_err() && store.document().unwrap() != before {
                return TestResult::error("a refused operation changed the document");
            }
            // document() validates every row's encoding rules.
            if let Err(e) = store.document() {
                return TestResult::error(format!("illegal stored row: {e}"));
            }
        }
        TestResult::passed()
    }
    QuickCheck::new()
        .tests(15)
        .quickcheck(prop as fn(Vec<u64>) -> TestResult);
}

/// `generation_document` reads one generation through key ranges: it equals
/// that generation's entry of the whole document, with neighbours on both
/// sides holding rows in every table, and an absent generation is `None`.
#[test]
fn one_generation_is_read_exactly_among_its_neighbours() {
    let dir = tempfile::tempdir().unwrap();
    let lock = DomainLock::try_acquire(&dir.path().join("domain.lock")).unwrap();
    let store = DomainStore::create(&lock, &dir.path().join("domain.redb"), BOOT).unwrap();
    store.apply(&[StoreOp::PutDomain(domain())]).unwrap();
    for g in [GenerationId(1), GenerationId(2), GenerationId(u64::MAX)] {
        let session = SessionId([u8::try_from(g.0 % 200).unwrap(); 16]);
        store
            .apply(&[
                generation_op(g),
                sandbox_intent_op(g),
                StoreOp::InsertParticipantIntent {
                    generation: g,
                    role: ParticipantRole::Network,
                },
                StoreOp::InsertSession(Session {
                    generation_id: g,
                    session_id: session,
                    cli_id: CliId([6; 16]),
                    session_anchor_id: SessionAnchorId([7; 32]),
                    session_phase: ModelValue::new("Registering").unwrap(),
                }),
                StoreOp::InsertTerminalIntent {
                    generation: g,
                    session,
                },
                StoreOp::InsertMailbox {
                    generation: g,
                    identity_path: HostPath::new("/run/l/id").unwrap(),
                    inbox_path: HostPath::new("/run/l/in").unwrap(),
                    outbox_path: HostPath::new("/run/l/out").unwrap(),
                },
            ])
            .unwrap();
    }
    let whole = store.document().unwrap();
    assert_eq!(whole.generations.len(), 3);
    for expected in &whole.generations {
        let one = store
            .generation_document(expected.generation.generation_id)
            .unwrap()
            .unwrap();
        assert_eq!(&one, expected);
        assert_eq!(one.participants.len(), 2);
        assert_eq!(one.terminals.len(), 1);
    }
    assert_eq!(store.generation_document(GenerationId(3)).unwrap(), None);
}

/// Trace validation's `termsLeft` (docs/durable-state.md "The model's
/// durable variables"): a terminal row that is not clean counts as left
/// unless the observing coordinator serves its session; a recovery, which
/// serves none, sees every unclean row; a clean row never counts. Each
/// slot's `terminalRow` is its served session's row (a bare intent named
/// so, an acquiring intent named by the session's form), `None` when clean
/// or not served.
#[test]
fn terminal_rows_are_observed_as_terms_left_unless_served() {
    use lazaret_effects::coordinator::observed::{durable_view, Served};
    let dir = tempfile::tempdir().unwrap();
    let lock = DomainLock::try_acquire(&dir.path().join("domain.lock")).unwrap();
    let store = DomainStore::create(&lock, &dir.path().join("domain.redb"), BOOT).unwrap();
    seeded(&store);
    store
        .apply(&[StoreOp::SetDurableDecision {
            generation: GEN,
            decision: ModelValue::new("Published").unwrap(),
        }])
        .unwrap();
    // Two slots; `served` is the (interactive) session in the second, if
    // any.
    let slots = |served: Option<SessionId>| {
        let served = served.map(|session| Served {
            session,
            piped: false,
        });
        vec![("s1".to_owned(), None), ("s2".to_owned(), served)]
    };
    let observe =
        |served: Option<SessionId>| durable_view(&store, GEN, &slots(served)).unwrap().unwrap();
    let terms_left = |served: Option<SessionId>| observe(served).terms_left;
    let rows = |served: Option<SessionId>| {
        let r = observe(served).rows.unwrap();
        (r["s1"], r["s2"])
    };
    let none = TerminalRow::None;
    // The seeded session's terminal intent.
    assert_eq!(terms_left(Some(SESSION)), Some(false));
    assert_eq!(rows(Some(SESSION)), (none, TerminalRow::BareIntent));
    assert_eq!(terms_left(None), Some(true));
    assert_eq!(rows(None), (none, none));
    // Another coordinator's session: left for this one, and not its slot's.
    assert_eq!(terms_left(Some(SessionId([0x11; 16]))), Some(true));
    assert_eq!(rows(Some(SessionId([0x11; 16]))), (none, none));
    // A bare intent is cleaned after runtime absence.
    store
        .apply(&[StoreOp::Terminal {
            generation: GEN,
            session: SESSION,
            op: TerminalOp::Clean(AbsenceProof::SealedRuntimeAbsence),
        }])
        .unwrap();
    assert_eq!(terms_left(None), Some(false));
    assert_eq!(rows(Some(SESSION)), (none, none));
    // No such generation: nothing is observed.
    assert!(durable_view(&store, GenerationId(9), &slots(None))
        .unwrap()
        .is_none());
    // An intent with its exec client staged: an interactive session's
    // Intent, a piped session's PipedIntent (it stays Intent while it
    // runs, so replay tells the two apart only by the observer's form).
    let acquiring = SessionId([0x22; 16]);
    store
        .apply(&[
            StoreOp::InsertSession(Session {
                generation_id: GEN,
                session_id: acquiring,
                cli_id: CliId([8; 16]),
                session_anchor_id: SessionAnchorId([9; 32]),
                session_phase: ModelValue::new("Active").unwrap(),
            }),
            StoreOp::InsertTerminalIntent {
                generation: GEN,
                session: acquiring,
            },
            StoreOp::StageProcess {
                target: SlotTarget::Terminal {
                    generation: GEN,
                    session: acquiring,
                    slot: HostProcessOwnershipSlot::SessionTerminalExecClient,
                },
                identity: identity(4),
            },
        ])
        .unwrap();
    for (piped, row) in [
        (false, TerminalRow::Intent),
        (true, TerminalRow::PipedIntent),
    ] {
        let served = Served {
            session: acquiring,
            piped,
        };
        let slots = [("s1".to_owned(), Some(served))];
        let view = durable_view(&store, GEN, &slots).unwrap().unwrap();
        assert_eq!(view.rows.unwrap()["s1"], row, "piped: {piped}");
        assert_eq!(view.terms_left, Some(false));
    }
}

/// The keyed reads a model step makes (`has_session`, `terminal`,
/// `participant`, `generation_row`, `generation_view`) answer exactly what
/// the whole generation document says, for generations holding any mix of
/// sessions, bare, clean and unclean terminal rows and any set of served
/// sessions (present or not), with a neighbouring generation on each side.
#[test]
fn keyed_reads_agree_with_the_whole_generation() {
    // Per session: 0 no terminal row, 1 bare intent, 2 cleaned, 3 acquiring;
    // and whether the observer serves it.
    fn prop(rows: Vec<(u8, bool)>, absent_served: bool) -> TestResult {
        let dir = tempfile::tempdir().unwrap();
        let lock = DomainLock::try_acquire(&dir.path().join("domain.lock")).unwrap();
        let store = DomainStore::create(&lock, &dir.path().join("domain.redb"), BOOT).unwrap();
        store.apply(&[StoreOp::PutDomain(domain())]).unwrap();
        let mut served = Vec::new();
        for g in [GenerationId(0), GEN, GenerationId(2)] {
            // Two participants, so a keyed participant read has a
            // neighbour to confuse itself with.
            let mut ops = vec![
                generation_op(g),
                sandbox_intent_op(g),
                StoreOp::InsertParticipantIntent {
                    generation: g,
                    role: ParticipantRole::PreparedLower,
                },
            ];
            for (i, (kind, serve)) in rows.iter().enumerate() {
                let mut id = [0u8; 16];
                id[0] = u8::try_from(i).unwrap().wrapping_mul(97);
                id[15] = u8::try_from(i).unwrap();
                let session = SessionId(id);
                if g == GEN && *serve {
                    served.push(session);
                }
                ops.push(StoreOp::InsertSession(Session {
                    generation_id: g,
                    session_id: session,
                    cli_id: CliId([6; 16]),
                    session_anchor_id: SessionAnchorId([7; 32]),
                    session_phase: ModelValue::new("Active").unwrap(),
                }));
                let terminal = |op| StoreOp::Terminal {
                    generation: g,
                    session,
                    op,
                };
                match kind % 4 {
                    0 => {}
                    1 => ops.push(StoreOp::InsertTerminalIntent {
                        generation: g,
                        session,
                    }),
                    2 => ops.extend([
                        StoreOp::InsertTerminalIntent {
                            generation: g,
                            session,
                        },
                        terminal(TerminalOp::Clean(AbsenceProof::SealedRuntimeAbsence)),
                    ]),
                    _ => ops.extend([
                        StoreOp::InsertTerminalIntent {
                            generation: g,
                            session,
                        },
                        StoreOp::StageProcess {
                            target: SlotTarget::Terminal {
                                generation: g,
                                session,
                                slot: HostProcessOwnershipSlot::SessionTerminalExecClient,
                            },
                            identity: identity(u64::try_from(i).unwrap() + 10),
                        },
                    ]),
                }
            }
            store.apply(&ops).unwrap();
        }
        if absent_served {
            served.push(SessionId([0xee; 16]));
        }
        // A session served twice reads the same as once.
        if let Some(first) = served.first().copied() {
            served.push(first);
        }
        let whole = store.generation_document(GEN).unwrap().unwrap();
        let view = store.generation_view(GEN, &served).unwrap().unwrap();
        let expected_served: Vec<_> = served
            .iter()
            .filter_map(|s| whole.terminals.iter().find(|t| t.session_id == *s).cloned())
            .collect();
        let expected_left = whole
            .terminals
            .iter()
            .any(|t| t.state != SessionTerminalState::Clean && !served.contains(&t.session_id));
        let mut ok = view.generation == whole.generation
            && view.participants == whole.participants
            && view.served_terminals == expected_served
            && view.other_terminal_left == expected_left
            && store.generation_row(GEN).unwrap().as_ref() == Some(&whole.generation)
            && [ParticipantRole::Sandbox, ParticipantRole::PreparedLower]
                .into_iter()
                .all(|role| {
                    let keyed = store.participant(GEN, role).unwrap();
                    keyed.is_some()
                        && keyed == whole.participants.iter().find(|p| p.role == role).cloned()
                })
            && store
                .participant(GEN, ParticipantRole::Network)
                .unwrap()
                .is_none();
        for s in whole
            .sessions
            .iter()
            .map(|s| s.session_id)
            .chain(served.clone())
        {
            ok &= store.has_session(GEN, s).unwrap()
                == whole.sessions.iter().any(|r| r.session_id == s);
            ok &= store.terminal(GEN, s).unwrap()
                == whole.terminals.iter().find(|t| t.session_id == s).cloned();
        }
        ok &= store
            .generation_view(GenerationId(7), &served)
            .unwrap()
            .is_none()
            && !store.has_session(GenerationId(7), SESSION).unwrap()
            && store.generation_row(GenerationId(7)).unwrap().is_none();
        TestResult::from_bool(ok)
    }
    QuickCheck::new()
        .tests(30)
        .max_tests(30)
        .rng(quickcheck::Gen::new(16))
        .quickcheck(prop as fn(Vec<(u8, bool)>, bool) -> TestResult);
}
