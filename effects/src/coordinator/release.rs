//! Release of a generation (FR-6; spec 3.3 release, 3.6): `BeginTeardown`
//! or `AbortGeneration`, then `RecordReleaseIntent` for every live
//! snapshot in release order, `ShutdownRuntime`, `CleanParticipant` /
//! `CleanBareIntent` after absence is proved, and `RetireGeneration`. The
//! order comes from the model state: each role's durable state decides its
//! next step, so the same routine releases a clean teardown and a failed
//! launch.
use std::path::Path;

use lazaret_generated::lazaret::{Action, Decision, Part, Roles, Rs, Sess};
use lazaret_runtime::coordinator::messages::CoordinatorCommand;
use lazaret_runtime::ownership::participant::ParticipantOp;
use lazaret_runtime::ownership::AbsenceProof;

use super::channel;
use super::host::{CoordinatorError, Hc};
use super::launch::{decision_value, participant_role, reap_supervisor, LaunchedGeneration};
use crate::domain_store::StoreOp;

/// Release order (the model's `ReleaseRank`): publication is withdrawn
/// first, the prepared-lower lease released last.
const RELEASE_ORDER: [Roles; 7] = [
    Roles::Publication,
    Roles::Sandbox,
    Roles::Network,
    Roles::Helper,
    Roles::GitRouting,
    Roles::StateAnchor,
    Roles::PreparedLower,
];

/// Whether no session is registered or closing (the model's
/// `NoSessionsLeft`).
pub(super) fn no_sessions_left(hc: &Hc<'_, '_>) -> bool {
    hc.model
        .state()
        .sess
        .iter()
        .all(|s| !matches!(s, Sess::Registered | Sess::Closing))
}

/// BeginTeardown: the last session has left; publication is withdrawn (the
/// socket file goes, so nobody new joins), then the generation is released.
pub(super) fn teardown(hc: &mut Hc<'_, '_>, socket: &Path) -> Result<(), CoordinatorError> {
    let _span = tracing::info_span!("BeginTeardown", generation = hc.id.0).entered();
    let c = hc.model.me();
    let generation = hc.id;
    hc.step(Action::BeginTeardown { c }, |hc| {
        let _ = std::fs::remove_file(socket);
        hc.apply(&[StoreOp::SetDurableDecision {
            generation,
            decision: decision_value("TearingDown")?,
        }])
    })?;
    release(hc)
}

/// AbortGeneration: a launch step failed; what was acquired is released.
pub(super) fn abort(hc: &mut Hc<'_, '_>) -> Result<(), CoordinatorError> {
    let _span = tracing::info_span!("AbortGeneration", generation = hc.id.0).entered();
    let c = hc.model.me();
    let generation = hc.id;
    hc.step(Action::AbortGeneration { c }, |hc| {
        hc.apply(&[StoreOp::SetDurableDecision {
            generation,
            decision: decision_value("TearingDown")?,
        }])
    })?;
    release(hc)
}

fn part(hc: &Hc<'_, '_>, r: Roles) -> Part {
    hc.model.state().part[r.index()]
}

/// From TearingDown to Vacant, one model step per durable transaction.
pub(super) fn release(hc: &mut Hc<'_, '_>) -> Result<(), CoordinatorError> {
    let c = hc.model.me();
    let generation = hc.id;
    for r in RELEASE_ORDER {
        if matches!(
            part(hc, r),
            Part::Acquiring | Part::LeaseHeld | Part::Prepared | Part::Committed
        ) {
            let _span = tracing::info_span!("RecordReleaseIntent", role = r.name()).entered();
            hc.step(Action::RecordReleaseIntent { c, r }, |hc| {
                hc.apply(&[StoreOp::Participant {
                    generation,
                    role: participant_role(r),
                    op: ParticipantOp::BeginRelease {
                        released_state_anchor: None,
                    },
                }])
            })?;
        }
    }
    if hc.model.state().rs == Rs::Running {
        let _span = tracing::info_span!("ShutdownRuntime").entered();
        hc.step(Action::ShutdownRuntime { c }, |hc| {
            // A launched generation is stopped through RS; a failed launch
            // already ended its RS exactly before it returned.
            if let Some(g) = hc.generation.take() {
                stop_generation(hc, &g);
            }
            Ok(())
        })?;
    }
    for r in RELEASE_ORDER {
        let _span = tracing::info_span!("CleanParticipant", role = r.name()).entered();
        match part(hc, r) {
            Part::ReleaseIntent => hc.step(Action::CleanParticipant { c, r }, |hc| {
                hc.apply(&[StoreOp::Participant {
                    generation,
                    role: participant_role(r),
                    op: ParticipantOp::Clean(AbsenceProof::ExactAbsence),
                }])
            })?,
            Part::Intent => hc.step(Action::CleanBareIntent { c, r }, |hc| {
                hc.apply(&[StoreOp::Participant {
                    generation,
                    role: participant_role(r),
                    op: ParticipantOp::Clean(AbsenceProof::SealedRuntimeAbsence),
                }])
            })?,
            _ => {}
        }
    }
    let _span = tracing::info_span!("RetireGeneration").entered();
    hc.step(Action::RetireGeneration { c }, |hc| {
        hc.apply(&[StoreOp::SetDurableDecision {
            generation,
            decision: decision_value("Vacant")?,
        }])
    })?;
    debug_assert_eq!(hc.model.state().decision, Decision::Vacant);
    Ok(())
}

/// RS stops the sandbox (runsc run deletes its state) and exits; HC reaps
/// it and removes the generation directory.
fn stop_generation(hc: &Hc<'_, '_>, g: &LaunchedGeneration) {
    let _span = tracing::info_span!("ShutdownRuntime", generation = g.id.0).entered();
    let mut to = &g.to_supervisor;
    let _ = channel::send(&mut to, "supervisor", &CoordinatorCommand::Stop);
    reap_supervisor(hc, g.supervisor.handle());
    let _ = std::fs::remove_dir_all(&g.dir);
}
