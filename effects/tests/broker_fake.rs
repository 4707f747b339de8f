//! Broker and wrapper step order against the recording fake (spec 3.3).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_effects::broker::ledger::{
    AcquisitionLedger, DurablyStaged, LedgerError, StagingContext,
};
use lazaret_effects::broker::remote::{CoordinatorLink, LinkError, RemoteLedger};
use lazaret_effects::broker::sys::TargetCommand;
use lazaret_effects::broker::wrapper::{release_message, run_wrapper, WrapperArgs, WrapperFailure};
use lazaret_effects::broker::{Broker, BrokerError};
use lazaret_effects::process_identity::fake::{Call, FakeProcess, FakeProcessSys};
use lazaret_effects::process_identity::{ChildState, WaitMode, PID_FS_MAGIC};
use lazaret_runtime::records::ids::*;
use lazaret_runtime::records::process::*;
use std::ffi::OsString;
use std::sync::Mutex;

/// How the scripted HC answers a staged message.
type Answer = Box<dyn Fn(&[u8]) -> Vec<u8>>;

static ONE_BROKER: Mutex<()> = Mutex::new(());
const BOOT: BootId = BootId([0x5a; 16]);

fn context() -> StagingContext {
    StagingContext {
        domain_id: DomainId([1; 32]),
        generation_id: GenerationId(3),
        coordinator_id: CoordinatorId([2; 16]),
        slot: HostProcessOwnershipSlot::SandboxAttachedRunsc,
    }
}

fn process(ino: u64, state: ChildState) -> FakeProcess {
    FakeProcess {
        dev: 7,
        ino,
        start_time: 99,
        fs_type: PID_FS_MAGIC,
        state,
    }
}

fn fake_with_child(state: ChildState) -> FakeProcessSys {
    let mut sys = FakeProcessSys::new(BOOT);
    sys.own_pid = HostPid(100);
    sys.insert(100, process(1, ChildState::Running));
    sys.spawn_script.borrow_mut().push((200, process(2, state)));
    sys
}

/// A link whose acknowledgement never arrives before the deadline.
struct LostLink;

impl CoordinatorLink for LostLink {
    fn confirm_intent(&mut self, _: &StagingContext) -> Result<(), LinkError> {
        Ok(())
    }
    fn send_staged(&mut self, _: &[u8]) -> Result<(), LinkError> {
        Ok(())
    }
    fn receive_ack(&mut self) -> Result<Option<Vec<u8>>, LinkError> {
        Ok(None)
    }
    fn report_committed(&mut self, _: &StagedProcessOwnership) -> Result<(), LinkError> {
        Ok(())
    }
}

struct EchoLink {
    sent: Vec<u8>,
    answer: Answer,
}

impl CoordinatorLink for EchoLink {
    fn confirm_intent(&mut self, _: &StagingContext) -> Result<(), LinkError> {
        Ok(())
    }
    fn send_staged(&mut self, message: &[u8]) -> Result<(), LinkError> {
        self.sent = message.to_vec();
        Ok(())
    }
    fn receive_ack(&mut self) -> Result<Option<Vec<u8>>, LinkError> {
        Ok(Some((self.answer)(&self.sent)))
    }
    fn report_committed(&mut self, _: &StagedProcessOwnership) -> Result<(), LinkError> {
        Ok(())
    }
}

fn exact_echo(sent: &[u8]) -> Vec<u8> {
    let staged = StagedProcessOwnership::decode(sent).unwrap();
    ProcessOwnershipCommitAck {
        version: ProcessOwnershipMessageVersion::V1,
        committed: staged,
    }
    .encode()
    .unwrap()
}

fn target() -> TargetCommand {
    TargetCommand {
        argv: vec!["true".into()],
        inherit: Vec::new(),
    }
}

#[test]
fn steps_run_in_order_and_release_follows_the_exact_ack() {
    let _one = ONE_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let mut broker =
        Broker::claim(fake_with_child(ChildState::Running), "/lazaret".into()).unwrap();
    let mut ledger = RemoteLedger::new(
        EchoLink {
            sent: Vec::new(),
            answer: Box::new(exact_echo),
        },
        context(),
    );
    let child = broker.acquire(&target(), &mut ledger).unwrap();
    assert_eq!(child.staged().identity.authority.pidfs_st_ino, PidfsIno(2));
    let calls = broker.sys().calls();
    let after_claim: Vec<&Call> = calls
        .iter()
        .skip_while(|c| **c != Call::BarrierPipe)
        .collect();
    let pos = |want: &dyn Fn(&Call) -> bool| after_claim.iter().position(|c| want(c)).unwrap();
    let spawn = pos(&|c| matches!(c, Call::SpawnWrapper(_)));
    let open = pos(&|c| *c == Call::PidfdOpen(HostPid(200)));
    let peek = pos(&|c| *c == Call::Waitid(HostPid(200), WaitMode::Peek));
    let magic = pos(&|c| *c == Call::Fstatfs(HostPid(200)));
    let stat = pos(&|c| *c == Call::Fstat(HostPid(200)));
    let release = pos(&|c| matches!(c, Call::WriteRelease(_)));
    assert!(
        spawn < open && open < peek && peek < magic && magic < stat && stat < release,
        "{after_claim:?}"
    );
    let opens = after_claim
        .iter()
        .filter(|c| ***c == Call::PidfdOpen(HostPid(200)))
        .count();
    assert_eq!(opens, 1, "pidfd_open exactly once");
    assert_eq!(
        after_claim[release],
        &Call::WriteRelease(release_message(&child.staged().identity.authority))
    );
    // The wrapper is told to recheck this broker's own authority.
    let Call::SpawnWrapper(argv) = after_claim[spawn] else {
        unreachable!()
    };
    let args = WrapperArgs::parse(argv).unwrap();
    assert_eq!(args.parent, broker.own_authority());
    assert_eq!(args.target, vec![OsString::from("true")]);
}

fn refused_without_release(sys: &FakeProcessSys) -> bool {
    let calls = sys.calls();
    !calls.iter().any(|c| matches!(c, Call::WriteRelease(_)))
        && calls.contains(&Call::Waitid(HostPid(200), WaitMode::Block))
}

#[test]
fn lost_mismatched_and_unknown_version_acks_never_release() {
    let _one = ONE_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let answers: Vec<Answer> = vec![
        // mismatched inode
        Box::new(|sent| {
            let mut s = StagedProcessOwnership::decode(sent).unwrap();
            s.identity.authority.pidfs_st_ino = PidfsIno(s.identity.authority.pidfs_st_ino.0 + 1);
            ProcessOwnershipCommitAck {
                version: ProcessOwnershipMessageVersion::V1,
                committed: s,
            }
            .encode()
            .unwrap()
        }),
        // mismatched generation
        Box::new(|sent| {
            let mut s = StagedProcessOwnership::decode(sent).unwrap();
            s.generation_id = GenerationId(4);
            ProcessOwnershipCommitAck {
                version: ProcessOwnershipMessageVersion::V1,
                committed: s,
            }
            .encode()
            .unwrap()
        }),
        // unknown version
        Box::new(|sent| {
            let mut b = exact_echo(sent);
            b[0] = 2;
            b
        }),
        // garbage
        Box::new(|_| vec![0]),
    ];
    for answer in answers {
        let mut broker =
            Broker::claim(fake_with_child(ChildState::Running), "/lazaret".into()).unwrap();
        let mut ledger = RemoteLedger::new(
            EchoLink {
                sent: Vec::new(),
                answer,
            },
            context(),
        );
        let err = broker.acquire(&target(), &mut ledger).unwrap_err();
        assert!(
            matches!(err, BrokerError::Staged(LedgerError::Ack(_))),
            "{err}"
        );
        assert!(refused_without_release(broker.sys()));
    }
    // Lost: no acknowledgement before the deadline.
    let mut broker =
        Broker::claim(fake_with_child(ChildState::Running), "/lazaret".into()).unwrap();
    let mut ledger = RemoteLedger::new(LostLink, context());
    let err = broker.acquire(&target(), &mut ledger).unwrap_err();
    assert!(err.to_string().contains("lost"), "{err}");
    assert!(refused_without_release(broker.sys()));
}

struct ConfirmsOther;
impl AcquisitionLedger for ConfirmsOther {
    fn context(&self) -> StagingContext {
        context()
    }
    fn persist_intent(&mut self) -> Result<(), LedgerError> {
        Ok(())
    }
    fn persist_staged(&mut self, _: &StagedProcessOwnership) -> Result<DurablyStaged, LedgerError> {
        Err(LedgerError::Link(LinkError::Refused(
            "store unavailable".into(),
        )))
    }
    fn persist_committed(&mut self, _: &StagedProcessOwnership) -> Result<(), LedgerError> {
        Ok(())
    }
}

#[test]
fn an_exited_child_or_a_failed_stage_is_refused_and_reaped() {
    let _one = ONE_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let exited = ChildState::Exited {
        code: Some(0),
        signal: None,
    };
    let mut broker = Broker::claim(fake_with_child(exited), "/lazaret".into()).unwrap();
    let err = broker.acquire(&target(), &mut ConfirmsOther).unwrap_err();
    assert!(
        matches!(err, BrokerError::ChildExited { pid: 200, .. }),
        "{err}"
    );
    assert!(refused_without_release(broker.sys()));
    assert!(!broker.sys().calls().contains(&Call::Fstatfs(HostPid(200))));
    drop(broker);
    let mut broker =
        Broker::claim(fake_with_child(ChildState::Running), "/lazaret".into()).unwrap();
    let err = broker.acquire(&target(), &mut ConfirmsOther).unwrap_err();
    assert!(matches!(err, BrokerError::Staged(_)), "{err}");
    assert!(refused_without_release(broker.sys()));
}

#[test]
fn one_broker_per_process_and_default_sigchld_required() {
    let _one = ONE_BROKER.lock().unwrap_or_else(|e| e.into_inner());
    let first = Broker::claim(fake_with_child(ChildState::Running), "/lazaret".into()).unwrap();
    assert!(matches!(
        Broker::claim(fake_with_child(ChildState::Running), "/lazaret".into()),
        Err(BrokerError::AlreadyClaimed)
    ));
    drop(first);
    let mut ignoring = fake_with_child(ChildState::Running);
    ignoring.sigchld_ignored = true;
    assert!(matches!(
        Broker::claim(ignoring, "/lazaret".into()),
        Err(BrokerError::SigchldIgnored)
    ));
    assert!(Broker::claim(fake_with_child(ChildState::Running), "/lazaret".into()).is_ok());
}

// ---- wrapper -----------------------------------------------------------

fn wrapper_sys(barrier: Vec<u8>, parent_ino: u64) -> FakeProcessSys {
    let mut sys = FakeProcessSys::new(BOOT);
    sys.own_pid = HostPid(200);
    sys.parent = Some(HostPid(100));
    sys.insert(200, process(2, ChildState::Running));
    sys.insert(100, process(parent_ino, ChildState::Running));
    *sys.barrier_bytes.borrow_mut() = barrier;
    sys
}

fn authority(ino: u64) -> PidfsProcessAuthorityV1 {
    PidfsProcessAuthorityV1 {
        boot_id: BOOT,
        pidfs_st_dev: PidfsDev(7),
        pidfs_st_ino: PidfsIno(ino),
    }
}

fn args() -> WrapperArgs {
    WrapperArgs {
        barrier_fd: 3,
        parent: authority(1),
        target: vec!["sleep".into(), "1".into()],
    }
}

fn execs(sys: &FakeProcessSys) -> bool {
    sys.calls().iter().any(|c| matches!(c, Call::Exec(_)))
}

#[test]
fn wrapper_refuses_eof_malformed_foreign_release_and_parent_mismatch() {
    let cases: Vec<(FakeProcessSys, u8)> = vec![
        (wrapper_sys(Vec::new(), 1), 121),
        (wrapper_sys(b"release".to_vec(), 1), 122),
        (
            wrapper_sys(
                {
                    let mut m = release_message(&authority(2));
                    m.push(0);
                    m
                },
                1,
            ),
            122,
        ),
        (wrapper_sys(release_message(&authority(3)), 1), 123),
        (wrapper_sys(release_message(&authority(2)), 9), 125),
    ];
    for (sys, code) in cases {
        let failure = run_wrapper(&sys, &args());
        assert_eq!(failure.exit_code(), code, "{failure}");
        assert!(!execs(&sys), "target executed after {failure}");
    }
    let orphan = {
        let mut s = wrapper_sys(release_message(&authority(2)), 1);
        s.parent = None;
        s
    };
    assert!(matches!(
        run_wrapper(&orphan, &args()),
        WrapperFailure::NoParent
    ));
    assert!(!execs(&orphan));
}

#[test]
fn wrapper_arms_parent_death_before_the_recheck_then_execs() {
    let sys = wrapper_sys(release_message(&authority(2)), 1);
    let failure = run_wrapper(&sys, &args());
    assert!(matches!(failure, WrapperFailure::Exec(_)), "{failure}");
    let calls = sys.calls();
    let arm = calls
        .iter()
        .position(|c| *c == Call::ArmParentDeath)
        .unwrap();
    let recheck = calls
        .iter()
        .position(|c| *c == Call::PidfdOpen(HostPid(100)))
        .unwrap();
    let exec = calls
        .iter()
        .position(|c| matches!(c, Call::Exec(_)))
        .unwrap();
    assert!(
        calls[0] == Call::ReadBarrier(3) && arm < recheck && recheck < exec,
        "{calls:?}"
    );
    assert_eq!(calls[exec], Call::Exec(vec!["sleep".into(), "1".into()]));
}

#[test]
fn wrapper_argv_round_trips_including_u64_max() {
    let parent = PidfsProcessAuthorityV1 {
        boot_id: BOOT,
        pidfs_st_dev: PidfsDev(u64::MAX),
        pidfs_st_ino: PidfsIno(u64::MAX),
    };
    let target: Vec<OsString> = vec!["sh".into(), "-c".into(), "--".into()];
    let argv = WrapperArgs::to_argv(7, &parent, &target);
    assert_eq!(
        WrapperArgs::parse(&argv).unwrap(),
        WrapperArgs {
            barrier_fd: 7,
            parent,
            target
        }
    );
    let mut missing = argv.clone();
    missing.truncate(argv.len() - 3);
    assert!(
        WrapperArgs::parse(&missing).is_err(),
        "empty target accepted"
    );
}
