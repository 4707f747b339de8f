//! Release of a generation (FR-6; spec 3.3 release, 3.6): `BeginTeardown`
//! or `AbortGeneration`, then `RecordReleaseIntent` for every live
//! snapshot in release order but the prepared-lower lease,
//! `ShutdownRuntime`, `CleanParticipant` / `CleanBareIntent` after absence
//! is proved (`CommitAnchorCleanLeaseReleaseIntent` records the lease's
//! release intent with the anchors' clean state), and `RetireGeneration`.
//! The order comes from the model state: each role's durable state decides
//! its next step, so the same routine releases a clean teardown and a
//! failed launch.
use crate::crash_point::{crash_point, fault};
use std::time::Duration;

use lazaret_generated::lazaret::{Action, Decision, Roles};
use lazaret_generated::prepared_lower::MountStates;
use lazaret_runtime::coordinator::messages::CoordinatorCommand;
use lazaret_runtime::ownership::participant::ParticipantOp;
use lazaret_runtime::ownership::AbsenceProof;

use super::absence::wait_absent;
use super::catalog_record::domain_record;
use super::channel;
use super::host::{CoordinatorError, Hc};
use super::launch::{decision_value, participant_role, reap_supervisor, LaunchedGeneration};
use super::recovery::{clean_terminals, recorded_runtime};
use super::runtime_end::{proved_absent, settle_runtime};
use crate::domain_store::StoreOp;
use crate::process_identity::real::RealProcessSys;
use crate::state_anchor::{real::RealAnchorSys, wait_namespace_left};
use crate::storage_catalog::ArtifactLease;
use lazaret_runtime::coordinator::host_model::ProcessView;
use lazaret_runtime::records::participant::{
    ParticipantOwnership, ParticipantRole, ParticipantState, PreparedLowerOwnership,
    StateAnchorReleaseEvidence,
};

/// BeginTeardown: the last session has left; publication is withdrawn (the
/// socket file goes, so nobody new joins, then the publication identity),
/// then the generation is released; its keys go after that (spec 3.3).
pub(super) fn teardown(
    hc: &mut Hc<'_, '_>,
    published: &super::publication::Publication,
) -> Result<(), CoordinatorError> {
    let _span = tracing::info_span!("BeginTeardown", generation = hc.id.0).entered();
    let c = hc.model.me();
    let generation = hc.id;
    hc.step(Action::BeginTeardown { c }, |hc| {
        published.withdraw();
        // Fault `teardown-keeps-published` (crash-point builds only): the
        // effect writes nothing, so the store still says Published while
        // the step says TearingDown. Nothing in the run notices; only trace
        // validation does (docs/durable-state.md "Trace validation").
        if fault!("teardown-keeps-published") {
            return Ok(());
        }
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

/// From TearingDown or Recovering to Vacant: the core decides each step
/// (`HostModel::next_release`), this carries it out, one durable
/// transaction per step.
pub(super) fn release(hc: &mut Hc<'_, '_>) -> Result<(), CoordinatorError> {
    // Each role leaves at most three steps; the bound catches a core that
    // would not make progress.
    for _ in 0..(3 * Roles::ALL.len() + 2) {
        let Some(action) = hc.model.model().next_release() else {
            debug_assert_eq!(hc.model.state().decision, Decision::Vacant);
            return Ok(());
        };
        release_step(hc, action)?;
    }
    Err(CoordinatorError::ReleaseIncomplete)
}

/// One release step the core decided, with its effect.
pub(super) fn release_step(hc: &mut Hc<'_, '_>, action: Action) -> Result<(), CoordinatorError> {
    let generation = hc.id;
    let _span = tracing::info_span!(
        "release",
        action = lazaret_generated::lazaret::action_name(&action)
    )
    .entered();
    if let Action::ShutdownRuntime { .. } = action {
        if settle_runtime(hc)? {
            // Nothing is left to stop: the runtime's end is recorded, and
            // the release goes on without ShutdownRuntime.
            return Ok(());
        }
        return hc.step_observing(action, shutdown_runtime);
    }
    if let Action::CleanSessionTerminals { .. } = action {
        return hc.step(action, clean_terminals);
    }
    hc.step(action, |hc| match action {
        Action::RecordReleaseIntent { r, .. } => {
            if r == Roles::PreparedLower {
                held_lease_present(hc)?;
            }
            hc.apply(&[StoreOp::Participant {
                generation,
                role: participant_role(r),
                op: ParticipantOp::BeginRelease {
                    released_state_anchor: None,
                },
            }])
        }
        Action::CommitAnchorCleanLeaseReleaseIntent { .. } => {
            commit_anchor_clean_lease_release_intent(hc)
        }
        Action::CleanParticipant {
            r: Roles::PreparedLower,
            ..
        } => clean_prepared_lower(hc),
        Action::CleanParticipant { r, .. } => {
            children_absent(hc, r)?;
            hc.apply(&[StoreOp::Participant {
                generation,
                role: participant_role(r),
                op: ParticipantOp::Clean(AbsenceProof::ExactAbsence),
            }])
        }
        Action::CleanBareIntent { r, .. } => hc.apply(&[StoreOp::Participant {
            generation,
            role: participant_role(r),
            op: ParticipantOp::Clean(AbsenceProof::SealedRuntimeAbsence),
        }]),
        Action::RetireGeneration { .. } => {
            let mut ops = super::mailbox::mailbox_clean(hc)?;
            ops.push(StoreOp::SetDurableDecision {
                generation,
                decision: decision_value("Vacant")?,
            });
            hc.apply(&ops)
        }
        other => Err(CoordinatorError::NotAReleaseStep {
            action: lazaret_generated::lazaret::action_name(&other),
        }),
    })
}

/// Spec 3.3 release: a role's own child process — the routing daemon of
/// GitRouting, the connectivity helper of Helper — is proved absent by
/// its exact recorded identity before the role is recorded clean (RS
/// stopped it, or it died with RS: both are RS's children, killed on
/// their parent's death). One still present after the grace is ended
/// through that exact match; one that cannot be proved absent keeps the
/// participant's release intent for the next coordinator.
fn children_absent(hc: &Hc<'_, '_>, r: Roles) -> Result<(), CoordinatorError> {
    let role = participant_role(r);
    let (what, child) = match recorded(hc, role)? {
        Some(ParticipantOwnership::GitRouting(g)) => ("routing daemon", g.daemon),
        Some(ParticipantOwnership::Helper(h)) => ("connectivity helper", h.connectivity_helper),
        _ => return Ok(()),
    };
    let Some(identity) = child.identity() else {
        return Ok(());
    };
    wait_absent(&RealProcessSys, (what, Some(identity)), None)
        .map(drop)
        .map_err(|source| CoordinatorError::ChildPresent {
            generation: hc.id.0,
            role: r.name(),
            source,
        })
}

/// How long the exec clients of the last sessions may take to leave the
/// State Anchors' mount namespace after the sandbox they served is gone.
const ANCHORS_LEFT: Duration = Duration::from_secs(10);

/// The generation's recorded snapshot of `role`.
fn recorded(
    hc: &Hc<'_, '_>,
    role: ParticipantRole,
) -> Result<Option<ParticipantOwnership>, CoordinatorError> {
    Ok(hc
        .store
        .participant(hc.id, role)
        .map_err(|e| hc.store_err(e))?
        .and_then(|p| p.ownership))
}

/// CommitAnchorCleanLeaseReleaseIntent, spec 3.6 release step 3: the
/// anchors are proved absent independently of the supervisor that
/// unmounted them (or died): no process is left in the mount namespace
/// that held them. Then, in one
/// Domain Store transaction, the anchors' explicit clean snapshot and the
/// prepared-lower lease's release intent with what was observed absent.
fn commit_anchor_clean_lease_release_intent(hc: &mut Hc<'_, '_>) -> Result<(), CoordinatorError> {
    let Some(ParticipantOwnership::StateAnchor(anchor)) =
        recorded(hc, ParticipantRole::StateAnchor)?
    else {
        return Err(CoordinatorError::NoSnapshot {
            role: "StateAnchor",
        });
    };
    if let Some(mounts) = &anchor.mounts {
        wait_namespace_left(
            &RealAnchorSys,
            &mounts.namespace,
            ANCHORS_LEFT,
            Duration::from_millis(20),
        )
        .map_err(|source| CoordinatorError::Anchors {
            generation: hc.id.0,
            source,
        })?;
    }
    held_lease_present(hc)?;
    let released = StateAnchorReleaseEvidence {
        runtime_supervisor: anchor.runtime_supervisor,
        mounts: anchor.mounts,
    };
    hc.apply(&[
        StoreOp::Participant {
            generation: hc.id,
            role: ParticipantRole::StateAnchor,
            op: ParticipantOp::Clean(AbsenceProof::IndependentAbsence),
        },
        StoreOp::Participant {
            generation: hc.id,
            role: ParticipantRole::PreparedLower,
            op: ParticipantOp::BeginRelease {
                released_state_anchor: Some(released),
            },
        },
    ])
}

/// CleanParticipant(PreparedLower), spec 3.6 release steps 4 and 5: with
/// the anchors clean and the lease's release intent recorded, the exact `(artifact, Domain, generation)` lease is
/// removed from the Storage Catalog (already absent is fine: the launch
/// may have died before inserting it), then the explicit clean snapshot.
fn clean_prepared_lower(hc: &mut Hc<'_, '_>) -> Result<(), CoordinatorError> {
    let lower = recorded(hc, ParticipantRole::PreparedLower)?;
    let (artifact, released) = match lower {
        Some(ParticipantOwnership::PreparedLower(p)) => {
            (p.prepared_artifact_id, p.released_state_anchor)
        }
        _ => (None, None),
    };
    if let Some(artifact) = artifact {
        let lease = lease_of(hc, artifact)?;
        // Release step 4: under the catalog lock, what the Domain Store
        // records now is the model's view of the Domain; the model removes
        // the lease only for this artifact's prepared-lower release intent.
        let (store, generation) = (hc.store, hc.id);
        let (state, me) = (hc.model.state(), hc.model.me());
        let record = || match domain_record(store, generation, artifact, state, me) {
            Ok(mut record) => {
                if !anchors_still_absent(released.as_ref()) {
                    record.mount = MountStates::Mounted;
                }
                Some(record)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the Domain's release intent");
                None
            }
        };
        let removed = hc
            .catalog
            .remove_lease(&lease, record)
            .map_err(CoordinatorError::Catalog)?;
        tracing::debug!(?removed, "prepared-lower lease");
        crash_point!(Hc, "catalog-lease", "after-remove", "CleanParticipant");
    }
    hc.apply(&[StoreOp::Participant {
        generation: hc.id,
        role: ParticipantRole::PreparedLower,
        op: ParticipantOp::Clean(AbsenceProof::ExactAbsence),
    }])
}

/// The exact `(artifact, Domain, generation)` lease of this generation.
fn lease_of(
    hc: &Hc<'_, '_>,
    artifact: lazaret_runtime::records::ids::PreparedArtifactId,
) -> Result<ArtifactLease, CoordinatorError> {
    let domain = hc
        .store
        .generation_row(hc.id)
        .map_err(|e| hc.store_err(e))?
        .ok_or(CoordinatorError::NoSnapshot {
            role: "PreparedLower",
        })?
        .domain_id;
    Ok(ArtifactLease {
        artifact,
        domain,
        generation: hc.id,
    })
}

/// Spec 3.6: before the lease's release intent, a Domain record that holds
/// the lease (`LeaseHeld`) must find it in the Storage Catalog. One whose
/// exact lease is absent is inconsistent and fails closed: the record is
/// kept, the lease is not recreated (the PreparedLower model's
/// `BootstrapRefuseMissingLease`). A lease only intended (the launch may
/// have died before inserting it) needs no catalog row.
fn held_lease_present(hc: &Hc<'_, '_>) -> Result<(), CoordinatorError> {
    let Some(lower) = hc
        .store
        .participant(hc.id, ParticipantRole::PreparedLower)
        .map_err(|e| hc.store_err(e))?
    else {
        return Ok(());
    };
    let artifact = match (&lower.state, &lower.ownership) {
        (
            ParticipantState::LeaseHeld,
            Some(ParticipantOwnership::PreparedLower(PreparedLowerOwnership {
                prepared_artifact_id: Some(artifact),
                ..
            })),
        ) => *artifact,
        _ => return Ok(()),
    };
    let lease = lease_of(hc, artifact)?;
    if hc
        .catalog
        .lease_held(&lease)
        .map_err(CoordinatorError::Catalog)?
    {
        return Ok(());
    }
    Err(CoordinatorError::LeaseMissing {
        generation: hc.id.0,
        artifact,
    })
}

/// Release step 4's recheck, under the catalog lock, of what step 3
/// observed: the mount namespace that held the released anchors is still
/// gone (its ID is never reused; only a process that entered it before it
/// was proved free could keep it). No evidence: the generation recorded no
/// anchor mounts.
fn anchors_still_absent(released: Option<&StateAnchorReleaseEvidence>) -> bool {
    let Some(mounts) = released.and_then(|r| r.mounts.as_ref()) else {
        return true;
    };
    match wait_namespace_left(
        &RealAnchorSys,
        &mounts.namespace,
        Duration::ZERO,
        Duration::ZERO,
    ) {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "the released State Anchors' mount namespace is in use");
            false
        }
    }
}

/// ShutdownRuntime: a launched generation is stopped through RS (a failed
/// launch already ended its RS exactly before it returned); RS and attached
/// runsc are then proved absent by their exact recorded identities, which
/// is what the step's trace line observes. The session terminals left over
/// are the next step's (`CleanSessionTerminals`).
fn shutdown_runtime(hc: &mut Hc<'_, '_>) -> Result<((), ProcessView), CoordinatorError> {
    if let Some(g) = hc.generation.take() {
        // The mailbox goes with the generation directory; without its
        // release intent `RetireGeneration` writes both on the observation.
        if let Err(e) = super::mailbox::mailbox_release_intent(hc) {
            tracing::warn!(error = %e, "the mailbox's release intent is not recorded");
        }
        crate::crash_point::crash_point!(Hc, "mailbox", "after-release-intent", "ShutdownRuntime");
        stop_generation(hc, &g);
    }
    let (supervisor, runsc) = recorded_runtime(hc)?;
    wait_absent(
        &RealProcessSys,
        ("Runtime Supervisor", supervisor.as_ref()),
        runsc.as_ref(),
    )
    .map_err(|source| CoordinatorError::Shutdown {
        generation: hc.id.0,
        source,
    })?;
    Ok((
        (),
        proved_absent(Action::ShutdownRuntime { c: hc.model.me() }),
    ))
}

/// RS stops the sandbox (runsc run deletes its state) and exits; HC reaps
/// it and removes the generation directory.
fn stop_generation(hc: &Hc<'_, '_>, g: &LaunchedGeneration) {
    let _span = tracing::info_span!("ShutdownRuntime", generation = g.id.0).entered();
    let mut to = &g.to_supervisor;
    let _ = channel::send(&mut to, "supervisor", &CoordinatorCommand::Stop);
    reap_supervisor(hc, g.supervisor.handle());
    if let Err(e) = super::paths::remove_generation_dir(&g.dir) {
        tracing::warn!(dir = %g.dir.display(), error = %e, "the generation directory was not removed");
    }
}
