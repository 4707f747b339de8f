//! The causal child acquisition broker with real children spawned through
//! the `lazaret __wrapper` built from this workspace (spec 3.3 steps 1-9).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_effects::broker::ledger::{
    AcquisitionLedger, DurablyStaged, LedgerError, StagingContext,
};
use lazaret_effects::broker::remote::{CoordinatorLink, LinkError, RemoteLedger};
use lazaret_effects::broker::sys::TargetCommand;
use lazaret_effects::broker::{Broker, BrokerError, ReadinessError};
use lazaret_effects::domain_lock::DomainLock;
use lazaret_effects::domain_store::{
    accept_staged_ownership, DomainStore, SlotTarget, StoreLedger, StoreOp,
};
use lazaret_effects::process_identity::real::RealProcessSys;
use lazaret_effects::process_identity::{match_recorded, ChildState, ProcessSys, Signal};
use lazaret_runtime::records::domain::{Domain, Generation};
use lazaret_runtime::records::ids::*;
use lazaret_runtime::records::participant::{ParticipantOwnership, ParticipantRole};
use lazaret_runtime::records::process::*;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One broker per process: tests in this binary take turns.
static ONE_BROKER: Mutex<()> = Mutex::new(());
const GEN: GenerationId = GenerationId(1);
/// The wrapper's exit status when its barrier closes without a release.
const BARRIER_EOF: ChildState = ChildState::Exited {
    code: Some(121),
    signal: None,
};

fn broker() -> Broker<RealProcessSys> {
    Broker::claim(RealProcessSys, PathBuf::from(env!("CARGO_BIN_EXE_lazaret"))).unwrap()
}

fn generation() -> Generation {
    Generation {
        domain_id: DomainId([1; 32]),
        generation_id: GEN,
        configuration_fingerprint: ConfigurationFingerprint([2; 32]),
        coordinator_id: CoordinatorId([3; 16]),
        network_sidecar_id: NetworkSidecarId([4; 16]),
        sandbox_id: SandboxId([5; 16]),
        durable_decision: ModelValue::new("Launching").unwrap(),
    }
}

fn seed(store: &DomainStore<'_>) {
    store
        .apply(&[
            StoreOp::PutDomain(Domain {
                domain_id: DomainId([1; 32]),
                profile_name: ProfileName::new("default").unwrap(),
                canonical_workspace: HostPath::new("/workspace").unwrap(),
            }),
            StoreOp::InsertGeneration(generation()),
        ])
        .unwrap();
}

/// `sh` writes its own PID (the wrapper's PID, since exec is in place).
fn marker_target(marker: &Path, then: &str) -> TargetCommand {
    TargetCommand {
        argv: vec![
            "sh".into(),
            "-c".into(),
            format!("echo $$ > '{}'; {then}", marker.display()).into(),
        ],
        inherit: Vec::new(),
    }
}

fn wait_for(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn stays_absent(path: &Path) -> bool {
    std::thread::sleep(Duration::from_millis(300));
    !path.exists()
}

fn slot_of(
    store: &DomainStore<'_>,
    slot: HostProcessOwnershipSlot,
) -> PersistedHostProcessOwnership {
    let p = store
        .participant(GEN, ParticipantRole::Sandbox)
        .unwrap()
        .unwrap();
    let o: ParticipantOwnership = p.ownership.unwrap();
    *o.slot(slot).unwrap()
}

#[test]
fn staged_identity_is_what_recovery_matching_verifies_and_survives_reopen() {
    let _one = ONE_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let lock = DomainLock::try_acquire(&dir.path().join("domain.lock")).unwrap();
    let store_path = dir.path().join("domain.redb");
    let boot = RealProcessSys.boot_id().unwrap();
    let slot = HostProcessOwnershipSlot::SandboxRuntimeSupervisor;
    let target = SlotTarget::Participant {
        generation: GEN,
        slot,
    };
    let mut broker = broker();

    let store = DomainStore::create(&lock, &store_path, boot).unwrap();
    seed(&store);
    let mut ledger = StoreLedger::new(&store, target).unwrap();
    let started = Instant::now();
    let child = broker
        .acquire(&marker_target(&marker, "exec sleep 30"), &mut ledger)
        .unwrap();
    let staged_ms = started.elapsed().as_millis();

    // The durable staged identity is exactly what recovery matching verifies.
    let PersistedHostProcessOwnership::Staged(stored) = slot_of(&store, slot) else {
        panic!("not staged")
    };
    assert_eq!(stored, child.staged().identity);
    let matched = match_recorded(&RealProcessSys, &stored).unwrap();
    assert_eq!(
        matched.identity().authority,
        child.handle().identity().authority
    );
    assert_eq!(
        matched.identity().authority.pidfs_st_dev,
        stored.authority.pidfs_st_dev
    );

    // The target ran after release, in place of the wrapper (same PID).
    let pid = wait_for(&marker);
    assert_eq!(pid.trim(), stored.host_pid.0.to_string());

    // Step 9: commit only after readiness; a failing readiness keeps Staged.
    let child = match broker.commit(child, &mut ledger, |_, _| {
        Err(ReadinessError::Silent { what: "the target" })
    }) {
        Err(failure) => {
            assert!(matches!(failure.error, BrokerError::Readiness(_)));
            failure.child
        }
        Ok(_) => panic!("committed without readiness"),
    };
    assert!(matches!(
        slot_of(&store, slot),
        PersistedHostProcessOwnership::Staged(_)
    ));
    let committed = broker
        .commit(child, &mut ledger, |sys, handle| {
            ReadinessError::running("the target", handle.peek(sys))
        })
        .unwrap();
    drop(store);

    // Reopen: the committed identity is still the exact one.
    let store = DomainStore::open(&lock, &store_path, boot).unwrap();
    assert_eq!(
        slot_of(&store, slot),
        PersistedHostProcessOwnership::Committed(HostProcessIdentity { identity: stored })
    );
    broker.signal(committed.handle(), Signal::Kill).unwrap();
    assert_eq!(
        broker.wait(committed.handle()).unwrap(),
        ChildState::Exited {
            code: None,
            signal: Some(9)
        }
    );
    eprintln!("acquire through staged ownership took {staged_ms} ms");
}

/// A ledger whose durable staging fails (for example a full disk).
struct FailsToStage;
impl AcquisitionLedger for FailsToStage {
    fn context(&self) -> StagingContext {
        StagingContext {
            domain_id: DomainId([1; 32]),
            generation_id: GEN,
            coordinator_id: CoordinatorId([3; 16]),
            slot: HostProcessOwnershipSlot::SessionTerminalExecClient,
        }
    }
    fn persist_intent(&mut self) -> Result<(), LedgerError> {
        Ok(())
    }
    fn persist_staged(&mut self, _: &StagedProcessOwnership) -> Result<DurablyStaged, LedgerError> {
        Err(LedgerError::Link(LinkError::Refused(
            "cannot persist".into(),
        )))
    }
    fn persist_committed(&mut self, _: &StagedProcessOwnership) -> Result<(), LedgerError> {
        Ok(())
    }
}

#[test]
fn barrier_eof_means_the_target_never_runs() {
    let _one = ONE_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let mut broker = broker();
    let err = broker
        .acquire(&marker_target(&marker, "true"), &mut FailsToStage)
        .unwrap_err();
    assert!(matches!(err, BrokerError::Staged(_)), "{err}");
    assert_eq!(
        broker.last_refused_wrapper(),
        Some(BARRIER_EOF),
        "wrapper exit"
    );
    assert!(stays_absent(&marker), "the target ran without a release");
}

/// A scripted HC answer to (staged message, earlier answers); None is lost.
type Fault = fn(&[u8], &[Vec<u8>]) -> Option<Vec<u8>>;

/// An RS-side link to a Host Coordinator: either a real in-process HC
/// (accepting into its store) or a scripted faulty one.
struct Link<'a> {
    store: Option<&'a DomainStore<'a>>,
    sent: Vec<u8>,
    history: Vec<Vec<u8>>,
    fault: Fault,
}

impl CoordinatorLink for Link<'_> {
    fn confirm_intent(&mut self, _: &StagingContext) -> Result<(), LinkError> {
        Ok(())
    }
    fn send_staged(&mut self, message: &[u8]) -> Result<(), LinkError> {
        self.sent = message.to_vec();
        Ok(())
    }
    fn receive_ack(&mut self) -> Result<Option<Vec<u8>>, LinkError> {
        let ack = match self.store {
            Some(store) => accept_staged_ownership(store, &self.sent)
                .map_err(|e| LinkError::Channel(Box::new(e)))?,
            None => match (self.fault)(&self.sent, &self.history) {
                Some(ack) => ack,
                None => return Ok(None),
            },
        };
        self.history.push(ack.clone());
        Ok(Some(ack))
    }
    fn report_committed(&mut self, _: &StagedProcessOwnership) -> Result<(), LinkError> {
        Ok(())
    }
}

fn echo(sent: &[u8]) -> ProcessOwnershipCommitAck {
    ProcessOwnershipCommitAck {
        version: ProcessOwnershipMessageVersion::V1,
        committed: StagedProcessOwnership::decode(sent).unwrap(),
    }
}

fn rs_context() -> StagingContext {
    let g = generation();
    StagingContext {
        domain_id: g.domain_id,
        generation_id: GEN,
        coordinator_id: g.coordinator_id,
        slot: HostProcessOwnershipSlot::SandboxAttachedRunsc,
    }
}

#[test]
fn mismatched_lost_unknown_version_and_duplicate_acks_never_release() {
    let _one = ONE_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let mut broker = broker();
    let faults: [(&str, Fault); 4] = [
        ("mismatched identity", |sent, _| {
            let mut ack = echo(sent);
            ack.committed.identity.authority.pidfs_st_ino = PidfsIno(
                ack.committed
                    .identity
                    .authority
                    .pidfs_st_ino
                    .0
                    .wrapping_add(1),
            );
            Some(ack.encode().unwrap())
        }),
        ("mismatched slot", |sent, _| {
            let mut ack = echo(sent);
            ack.committed.slot = HostProcessOwnershipSlot::SandboxRuntimeSupervisor;
            Some(ack.encode().unwrap())
        }),
        ("unknown version", |sent, _| {
            let mut bytes = echo(sent).encode().unwrap();
            bytes[0] = 7;
            Some(bytes)
        }),
        ("lost", |_, _| None),
    ];
    for (name, fault) in faults {
        let marker = dir.path().join(name.replace(' ', "-"));
        let mut ledger = RemoteLedger::new(
            Link {
                store: None,
                sent: Vec::new(),
                history: Vec::new(),
                fault,
            },
            rs_context(),
        );
        let err = broker
            .acquire(&marker_target(&marker, "true"), &mut ledger)
            .unwrap_err();
        assert!(
            matches!(err, BrokerError::Staged(LedgerError::Ack(_))),
            "{name}: {err}"
        );
        assert_eq!(
            broker.last_refused_wrapper(),
            Some(BARRIER_EOF),
            "{name}: wrapper exit"
        );
        assert!(stays_absent(&marker), "{name}: the target ran");
    }
    // Duplicate: the first acquisition is acknowledged exactly and runs; the
    // next one receives a replay of that first acknowledgement and never runs.
    let first = dir.path().join("first");
    let second = dir.path().join("second");
    let mut ledger = RemoteLedger::new(
        Link {
            store: None,
            sent: Vec::new(),
            history: Vec::new(),
            fault: |sent, history| match history.first() {
                None => Some(echo(sent).encode().unwrap()),
                Some(replay) => Some(replay.clone()),
            },
        },
        rs_context(),
    );
    let child = broker
        .acquire(&marker_target(&first, "true"), &mut ledger)
        .unwrap();
    wait_for(&first);
    broker.wait(child.handle()).unwrap();
    let err = broker
        .acquire(&marker_target(&second, "true"), &mut ledger)
        .unwrap_err();
    assert!(
        matches!(err, BrokerError::Staged(LedgerError::Ack(_))),
        "{err}"
    );
    assert_eq!(broker.last_refused_wrapper(), Some(BARRIER_EOF));
    assert!(
        stays_absent(&second),
        "a duplicate acknowledgement released a barrier"
    );
}

#[test]
fn rs_launched_child_is_staged_by_hc_before_release() {
    let _one = ONE_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let lock = DomainLock::try_acquire(&dir.path().join("domain.lock")).unwrap();
    let boot = RealProcessSys.boot_id().unwrap();
    let store = DomainStore::create(&lock, &dir.path().join("domain.redb"), boot).unwrap();
    seed(&store);
    store
        .apply(&[StoreOp::InsertParticipantIntent {
            generation: GEN,
            role: ParticipantRole::Sandbox,
        }])
        .unwrap();
    let mut broker = broker();
    let mut ledger = RemoteLedger::new(
        Link {
            store: Some(&store),
            sent: Vec::new(),
            history: Vec::new(),
            fault: |_, _| None,
        },
        rs_context(),
    );
    let child = broker
        .acquire(&marker_target(&marker, "true"), &mut ledger)
        .unwrap();
    assert_eq!(
        slot_of(&store, HostProcessOwnershipSlot::SandboxAttachedRunsc),
        PersistedHostProcessOwnership::Staged(child.staged().identity)
    );
    wait_for(&marker);
    assert_eq!(
        broker.wait(child.handle()).unwrap(),
        ChildState::Exited {
            code: Some(0),
            signal: None
        }
    );
}

/// A target's descriptors reach it while staying close-on-exec in the
/// broker's process, so a spawn by another thread never inherits them.
#[test]
fn inherited_descriptors_reach_the_target_and_stay_close_on_exec_here() {
    let _one = ONE_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let lock = DomainLock::try_acquire(&dir.path().join("domain.lock")).unwrap();
    let boot = RealProcessSys.boot_id().unwrap();
    let store = DomainStore::create(&lock, &dir.path().join("domain.redb"), boot).unwrap();
    seed(&store);
    let mut ledger = StoreLedger::new(
        &store,
        SlotTarget::Participant {
            generation: GEN,
            slot: HostProcessOwnershipSlot::SandboxRuntimeSupervisor,
        },
    )
    .unwrap();
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&write);
    let target = TargetCommand {
        argv: vec![
            "sh".into(),
            "-c".into(),
            format!("echo through-fd-{fd} >&{fd}").into(),
        ],
        inherit: vec![fd],
    };
    let mut broker = broker();
    let child = broker.acquire(&target, &mut ledger).unwrap();
    let flags = rustix::io::fcntl_getfd(&write).unwrap();
    assert!(
        flags.contains(rustix::io::FdFlags::CLOEXEC),
        "the parent's descriptor lost close-on-exec"
    );
    drop(write);
    let mut got = String::new();
    std::io::Read::read_to_string(&mut std::fs::File::from(read), &mut got).unwrap();
    assert_eq!(got.trim(), format!("through-fd-{fd}"));
    assert!(matches!(
        broker.wait(child.handle()).unwrap(),
        ChildState::Exited { code: Some(0), .. }
    ));
}
