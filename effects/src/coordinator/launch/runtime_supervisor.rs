//! The Runtime Supervisor's causal acquisition (spec 3.3 steps 1-9; SR-1,
//! SR-12): `RecordIntent(Sandbox)` and `StageProcess` as the broker spawns
//! it with its lifetime channel and the sealed policy (spec 3.7 "Policy
//! transport"), then the plan, the verified user namespace maps and
//! `CommitProcess`.
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use lazaret_generated::lazaret::{ProcSlots, Roles};
use lazaret_runtime::coordinator::messages::{
    CoordinatorCommand, SupervisorMessage, SupervisorPlan,
};
use lazaret_runtime::records::ids::GenerationId;
use lazaret_runtime::records::process::HostProcessOwnershipSlot;

use super::super::channel;
use super::super::hc_model::HcModel;
use super::super::host::{CoordinatorError, Hc, LaunchInputs};
use super::super::model_ledger::ModelLedger;
use super::super::observed::Observer;
use super::super::SUPERVISOR_SUBCOMMAND;
use super::{Launching, Supervisor, SUPERVISOR_TIMEOUT};
use crate::broker::sys::TargetCommand;
use crate::broker::ReadinessError;
use crate::domain_store::{DomainStore, SlotTarget, StoreLedger};
use crate::network::policy_fd::seal_policy;
use crate::process_identity::real::RealProcessSys;
use crate::userns::{map_and_verify, NamespaceMaps, RealHost};

/// The Domain Store ledger of RS's slot, as a model ledger recording
/// `intent` (when the acquisition records one).
fn supervisor_ledger<'m, 's, 'l>(
    store: &'s DomainStore<'l>,
    model: &'m mut HcModel,
    observer: Observer<'s, 'l>,
    generation: GenerationId,
    intent: Option<Roles>,
) -> Result<ModelLedger<'m, 's, 'l, StoreLedger<'s, 'l>, RealProcessSys>, CoordinatorError> {
    let store_ledger = StoreLedger::new(
        store,
        SlotTarget::Participant {
            generation,
            slot: HostProcessOwnershipSlot::SandboxRuntimeSupervisor,
        },
    )
    .map_err(|source| CoordinatorError::Store {
        path: store.path().to_owned(),
        source,
    })?;
    Ok(ModelLedger::new(
        store_ledger,
        RealProcessSys,
        model,
        observer,
        intent,
        ProcSlots::SandboxRuntimeSupervisor,
    ))
}

/// RecordIntent(Sandbox) and StageProcess(SandboxRuntimeSupervisor): the
/// broker spawns `lazaret __supervisor` with the RS end of a fresh
/// lifetime socketpair and the write-sealed policy memfd, the model
/// ledger recording both steps; then RS is sent its plan.
pub(super) fn acquire_supervisor(
    hc: &mut Hc<'_, '_>,
    launch: &LaunchInputs<'_>,
    l: &mut Launching,
) -> Result<(), CoordinatorError> {
    let io_err = |source| CoordinatorError::Io {
        path: l.dir.clone(),
        source,
    };
    let (hc_end, rs_end) = UnixStream::pair().map_err(io_err)?;
    let rs_fd: OwnedFd = rs_end.into();
    let policy_fd = seal_policy(launch.policy).map_err(CoordinatorError::SealPolicy)?;
    let target = TargetCommand {
        argv: vec![
            launch.program.into(),
            SUPERVISOR_SUBCOMMAND.into(),
            "--channel-fd".into(),
            rs_fd.as_raw_fd().to_string().into(),
            "--policy-fd".into(),
            policy_fd.as_raw_fd().to_string().into(),
        ],
        inherit: vec![rs_fd.as_raw_fd(), policy_fd.as_raw_fd()],
    };
    let observer = hc.observer();
    let mut ledger = supervisor_ledger(
        hc.store,
        &mut hc.model,
        observer,
        hc.id,
        Some(Roles::Sandbox),
    )?;
    let acquired = hc.broker.acquire(&target, &mut ledger);
    drop((rs_fd, policy_fd));
    let child = acquired?;
    l.supervisor = Supervisor::Staged {
        child,
        channel: hc_end,
    };
    let plan = supervisor_plan(launch, l, hc.coordinator_id.0);
    let Supervisor::Staged { channel: rs, .. } = &mut l.supervisor else {
        return Err(CoordinatorError::NoSupervisor);
    };
    rs.set_read_timeout(Some(SUPERVISOR_TIMEOUT))
        .map_err(io_err)?;
    channel::send(rs, "supervisor", &CoordinatorCommand::Plan(Box::new(plan)))?;
    Ok(())
}

/// What RS launches the sandbox from.
fn supervisor_plan(
    launch: &LaunchInputs<'_>,
    l: &Launching,
    coordinator_id: [u8; 16],
) -> SupervisorPlan {
    let running = launch.running;
    SupervisorPlan {
        domain_id: running.domain_id,
        generation_id: l.generation.0,
        coordinator_id,
        container_id: l.container_id.clone(),
        generation_dir: l.dir.display().to_string(),
        rootfs: l.prepared.lower.rootfs.display().to_string(),
        workspace: running.workspace.clone(),
        workspace_object: l.prepared.workspace_object,
        init: l.dir.join("sbin").display().to_string(),
        hostname: "lazaret".to_owned(),
        runsc_dcache: launch.runsc_dcache,
        owner_restore_marker: launch.paths.owner_restore_marker().display().to_string(),
        ignored_state: launch
            .isolate_gitignored
            .then(|| launch.paths.ignored_state().display().to_string()),
        policy_digest: l.network.policy_digest,
        state_anchors: l.anchors.clone(),
        volumes: l.prepared.volumes.clone(),
        escalation: launch.escalation,
        env: vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
            "HOME=/root".to_owned(),
            "TERM=xterm".to_owned(),
        ],
    }
}

/// CommitProcess(SandboxRuntimeSupervisor): RS's user namespace gets the
/// planned maps, written and verified by this coordinator (SR-1), and RS
/// still runs when its ownership commits (spec 3.3 step 9).
pub(super) fn commit_supervisor(
    hc: &mut Hc<'_, '_>,
    l: &mut Launching,
) -> Result<(), CoordinatorError> {
    let Supervisor::Staged { channel: rs, .. } = &mut l.supervisor else {
        return Err(CoordinatorError::NoSupervisor);
    };
    verify_user_namespace(rs, &l.prepared.maps)?;
    let Supervisor::Staged { child, channel } =
        std::mem::replace(&mut l.supervisor, Supervisor::Absent)
    else {
        return Err(CoordinatorError::NoSupervisor);
    };
    let observer = hc.observer();
    let mut ledger = supervisor_ledger(hc.store, &mut hc.model, observer, hc.id, None)?;
    let committed = hc.broker.commit(child, &mut ledger, |sys, handle| {
        ReadinessError::running("the Runtime Supervisor", handle.peek(sys))
    });
    match committed {
        Ok(child) => {
            l.supervisor = Supervisor::Committed { child, channel };
            Ok(())
        }
        Err(failure) => {
            // The staged child stays the launch's to end.
            l.supervisor = Supervisor::Staged {
                child: failure.child,
                channel,
            };
            Err(CoordinatorError::SupervisorReadiness(failure.error))
        }
    }
}

/// RS reports the PID of its fresh user namespace; this coordinator writes
/// and verifies the maps (a refusal is sent to RS before the error).
fn verify_user_namespace(
    rs: &mut UnixStream,
    maps: &NamespaceMaps,
) -> Result<(), CoordinatorError> {
    let verified = match channel::receive::<SupervisorMessage>(rs, "supervisor")? {
        SupervisorMessage::UserNamespace { pid } => i32::try_from(pid)
            .map_err(|_| CoordinatorError::UsernsPid { pid })
            .and_then(|pid| {
                map_and_verify(&mut RealHost, pid, maps).map_err(CoordinatorError::Userns)
            }),
        other => Err(CoordinatorError::SupervisorProtocol {
            expected: "UserNamespace",
            got: format!("{other:?}"),
        }),
    };
    if let Err(e) = verified {
        let _ = channel::send(
            rs,
            "supervisor",
            &CoordinatorCommand::Refused(e.to_string()),
        );
        return Err(e);
    }
    channel::send(rs, "supervisor", &CoordinatorCommand::MapsVerified)?;
    Ok(())
}
