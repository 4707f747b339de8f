//! The steps the Runtime Supervisor reports (spec 3.3 steps 1, 6, 9 for
//! each child RS launches; spec 3.7 readiness): the core names the step it
//! expects next ([`LaunchNext::OnReport`]); RS's next report must be that
//! step, which is then checked against the model, written and recorded.
//! A report of anything else is refused, and the launch fails.
//!
//! [`LaunchNext::OnReport`]: lazaret_runtime::coordinator::launch::LaunchNext::OnReport
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use lazaret_generated::lazaret::{Action, ProcSlots, Roles};
use lazaret_runtime::coordinator::messages::{CoordinatorCommand, SupervisorMessage};
use lazaret_runtime::records::ids::GenerationId;
use lazaret_runtime::records::participant::NamespaceIdentity;
use lazaret_runtime::records::process::{HostProcessOwnershipSlot, StagedProcessOwnership};

use super::super::absence::observe_slot;
use super::super::channel;
use super::super::host::{CoordinatorError, Hc};
use super::super::paths::DomainPaths;
use super::participants::{commit_git_routing, commit_sandbox, record_intent};
use super::storage::acquire_state_anchor_snapshot;
use super::Launching;
use crate::domain_store::{accept_staged_ownership, SlotTarget, StoreOp};
use crate::process_identity::real::RealProcessSys;

/// What RS reports once the sandbox runs.
pub(super) struct RunningSandbox {
    pub runsc_root: PathBuf,
    pub bundle_digest: [u8; 32],
}

/// Messages of one report: the attached runsc's intent confirmation
/// (its role recorded intent with RS) precedes its staging.
const MESSAGES_PER_REPORT: usize = 2;

/// Receives RS's report of `expected` and takes the step.
pub(super) fn on_report(
    hc: &mut Hc<'_, '_>,
    paths: &DomainPaths,
    l: &mut Launching,
    expected: Action,
) -> Result<(), CoordinatorError> {
    for _ in 0..MESSAGES_PER_REPORT {
        let message = channel::receive::<SupervisorMessage>(l.channel()?, "supervisor")?;
        let reply = match (expected, message) {
            // Spec 3.3 step 1 for the routing daemon: its role's bare
            // intent.
            (
                Action::RecordIntent {
                    r: Roles::GitRouting,
                    ..
                },
                SupervisorMessage::ConfirmIntent(HostProcessOwnershipSlot::GitRoutingDaemon),
            ) => record_intent(hc, l.generation, Roles::GitRouting)
                .map(|()| CoordinatorCommand::IntentConfirmed),
            // Spec 3.5: the committed daemon's router is mounted; RS goes
            // on with the helper without an answer (a refusal ends the
            // launch).
            (
                Action::CommitParticipant {
                    r: Roles::GitRouting,
                    ..
                },
                SupervisorMessage::GitRoutingMounted(mount),
            ) => return commit_git_routing(hc, l, paths, mount),
            // Spec 3.3 step 1 for the helper: its role's bare intent.
            (
                Action::RecordIntent {
                    r: Roles::Helper, ..
                },
                SupervisorMessage::ConfirmIntent(
                    HostProcessOwnershipSlot::HelperConnectivityHelper,
                ),
            ) => record_intent(hc, l.generation, Roles::Helper)
                .map(|()| CoordinatorCommand::IntentConfirmed),
            // The Sandbox role recorded its intent before RS's staging;
            // the staging follows.
            (
                Action::StageProcess {
                    ps: ProcSlots::SandboxAttachedRunsc,
                    ..
                },
                SupervisorMessage::ConfirmIntent(HostProcessOwnershipSlot::SandboxAttachedRunsc),
            ) => {
                channel::send(
                    l.channel()?,
                    "supervisor",
                    &CoordinatorCommand::IntentConfirmed,
                )?;
                continue;
            }
            (Action::StageProcess { ps, .. }, SupervisorMessage::Staged(bytes)) => {
                stage(hc, ps, &bytes).map(CoordinatorCommand::Ack)
            }
            (Action::CommitProcess { ps, .. }, SupervisorMessage::Committed(bytes)) => {
                commit(hc, l.generation, ps, &bytes).map(|()| CoordinatorCommand::IntentConfirmed)
            }
            (
                Action::RecordIntent {
                    r: Roles::Network, ..
                },
                SupervisorMessage::NetworkInstalled {
                    namespace,
                    policy_digest,
                },
            ) => {
                // RS waits for the answer until MarkNetworkReady.
                l.network_answer_due = true;
                return network_installed(hc, l, namespace, policy_digest);
            }
            // Spec 3.6 step 4: the anchors are mounted; RS goes on with
            // the helper without an answer (a refusal ends the launch).
            (
                Action::AcquireSnapshot {
                    r: Roles::StateAnchor,
                    ..
                },
                SupervisorMessage::StateAnchorsMounted(mounts),
            ) => return acquire_state_anchor_snapshot(hc, l, paths, mounts),
            (
                Action::CommitParticipant {
                    r: Roles::Sandbox, ..
                },
                SupervisorMessage::SandboxRunning {
                    runsc_root,
                    bundle_digest,
                    ..
                },
            ) => {
                let running = RunningSandbox {
                    runsc_root: PathBuf::from(runsc_root),
                    bundle_digest,
                };
                commit_sandbox(hc, l.generation, &l.container_id, &running)?;
                l.running = Some(running);
                // The running sandbox holds its credential mount.
                super::generation::unlink_sandbox_credentials(&l.dir)?;
                return Ok(());
            }
            (_, SupervisorMessage::Failed(why)) => {
                return Err(CoordinatorError::SupervisorFailed(why))
            }
            (expected, other) => Err(CoordinatorError::UnexpectedReport {
                expected,
                got: format!("{other:?}"),
            }),
        };
        return answer(l.channel()?, reply);
    }
    Err(CoordinatorError::UnexpectedReport {
        expected,
        got: "a second intent confirmation".to_owned(),
    })
}

/// Answers RS: `reply` after the step was taken, the step's refusal
/// otherwise (the launch then fails with it).
fn answer(
    rs: &mut UnixStream,
    reply: Result<CoordinatorCommand, CoordinatorError>,
) -> Result<(), CoordinatorError> {
    match reply {
        Ok(reply) => channel::send(rs, "supervisor", &reply).map_err(CoordinatorError::from),
        Err(e) => {
            let _ = channel::send(
                rs,
                "supervisor",
                &CoordinatorCommand::Refused(e.to_string()),
            );
            Err(e)
        }
    }
}

/// The model slot of a child RS stages: the routing daemon, the helper or
/// attached runsc.
fn rs_launched_slot(slot: HostProcessOwnershipSlot) -> Result<ProcSlots, CoordinatorError> {
    match slot {
        HostProcessOwnershipSlot::GitRoutingDaemon => Ok(ProcSlots::GitRoutingDaemon),
        HostProcessOwnershipSlot::HelperConnectivityHelper => {
            Ok(ProcSlots::HelperConnectivityHelper)
        }
        HostProcessOwnershipSlot::SandboxAttachedRunsc => Ok(ProcSlots::SandboxAttachedRunsc),
        other => Err(CoordinatorError::NotSupervisorLaunched { slot: other }),
    }
}

/// The staged or committed ownership RS reports, for the slot the core
/// expects.
fn reported_ownership(
    bytes: &[u8],
    expected: ProcSlots,
) -> Result<StagedProcessOwnership, CoordinatorError> {
    let staged = StagedProcessOwnership::decode(bytes).map_err(CoordinatorError::StagedRecord)?;
    let ps = rs_launched_slot(staged.slot)?;
    if ps != expected {
        return Err(CoordinatorError::ReportedSlot {
            expected,
            reported: staged.slot,
        });
    }
    Ok(staged)
}

/// StageProcess(ps): RS's staged message is accepted into the Domain Store
/// (its ack goes back to RS) and the staged child is observed by its exact
/// identity.
fn stage(hc: &mut Hc<'_, '_>, ps: ProcSlots, bytes: &[u8]) -> Result<Vec<u8>, CoordinatorError> {
    let staged = reported_ownership(bytes, ps)?;
    let c = hc.model.me();
    hc.step_observing(Action::StageProcess { c, ps }, |hc| {
        let ack = accept_staged_ownership(hc.store, bytes).map_err(|e| hc.store_err(e))?;
        let processes = observe_slot(&RealProcessSys, ps, &staged.identity)?;
        Ok((ack, processes))
    })
}

/// CommitProcess(ps): the slot commits to the identity RS staged, observed
/// again.
fn commit(
    hc: &mut Hc<'_, '_>,
    generation: GenerationId,
    ps: ProcSlots,
    bytes: &[u8],
) -> Result<(), CoordinatorError> {
    let staged = reported_ownership(bytes, ps)?;
    let c = hc.model.me();
    hc.step_observing(Action::CommitProcess { c, ps }, |hc| {
        hc.apply(&[StoreOp::CommitProcess {
            target: SlotTarget::Participant {
                generation,
                slot: staged.slot,
            },
            identity: staged.identity,
        }])?;
        let processes = observe_slot(&RealProcessSys, ps, &staged.identity)?;
        Ok(((), processes))
    })
}

/// RecordIntent(Network), once RS reports the policy it installed and its
/// enforcement namespace: refused unless RS installed exactly the policy
/// this coordinator derived, in the namespace this coordinator reads
/// itself (spec 3.7 "Independent identity").
fn network_installed(
    hc: &mut Hc<'_, '_>,
    l: &mut Launching,
    reported: NamespaceIdentity,
    policy_digest: [u8; 32],
) -> Result<(), CoordinatorError> {
    if policy_digest != l.network.policy_digest {
        return Err(CoordinatorError::PolicyDigestMismatch {
            installed: hex::encode(policy_digest),
            derived: hex::encode(l.network.policy_digest),
        });
    }
    let supervisor = l.committed()?;
    let namespace = supervisor_network_namespace(supervisor)?;
    if namespace != reported {
        return Err(CoordinatorError::NamespaceMismatch {
            reported,
            actual: namespace,
        });
    }
    record_intent(hc, l.generation, Roles::Network)?;
    l.network_namespace = Some(namespace);
    Ok(())
}

/// Spec 3.7 "Independent identity": the enforcement namespace of the
/// Runtime Supervisor as HC reads it, through the PID of the child it
/// still holds unreaped (so the PID names RS).
fn supervisor_network_namespace(
    supervisor: &crate::broker::CommittedChild,
) -> Result<NamespaceIdentity, CoordinatorError> {
    let pid = supervisor.handle().identity().host_pid;
    let path = PathBuf::from(format!("/proc/{}/ns/net", pid.0));
    let st = rustix::fs::stat(&path).map_err(|e| CoordinatorError::Io {
        path: path.clone(),
        source: e.into(),
    })?;
    Ok(NamespaceIdentity {
        device: st.st_dev,
        inode: st.st_ino,
    })
}
