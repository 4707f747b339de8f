//! The runtime ends while this coordinator holds its lease (the model's
//! `RuntimeSupervisorEnds`, `AttachedRunscEnds` and
//! `AttachedRunscParentDeath`): the Runtime Supervisor crashed or was
//! killed, or it reported a failure (the connectivity helper's loss, spec
//! 3.7), stopped the sandbox and exited; or the sandbox ended and the
//! supervisor followed. The coordinator waits for the supervisor's exit
//! through its pidfd, proves both processes absent by their exact recorded
//! identities, and records the steps in the order what it saw allows
//! (`HostModel::runtime_ended`). Every session is closed and the generation
//! torn down after (FR-6, FR-12); `ShutdownRuntime` is then not a step, as
//! there is no runtime left to stop.
use lazaret_generated::lazaret::{Action, Rs, Runsc};
use lazaret_runtime::coordinator::host_model::{ProcessView, RuntimeSeen};

use super::absence::{present, wait_absent, AbsenceError};
use super::host::{CoordinatorError, Hc};
use super::launch::reap_supervisor;
use super::recovery::recorded_runtime;
use crate::process_identity::real::RealProcessSys;
use crate::process_identity::ChildState;

/// Records the end of this coordinator's runtime, once: the launched
/// generation's supervisor is reaped (unless `reaped` already says how it
/// ended), attached runsc is proved absent, and the environment steps are
/// taken with what was established about each process. Nothing happens
/// when no launched runtime is left.
pub(super) fn record_runtime_end(
    hc: &mut Hc<'_, '_>,
    reaped: Option<ChildState>,
) -> Result<(), CoordinatorError> {
    let Some(g) = hc.generation.take() else {
        return Ok(());
    };
    let _span = tracing::info_span!("RuntimeEnds", generation = g.id.0).entered();
    let status = reaped.or_else(|| reap_supervisor(hc, g.supervisor.handle()));
    let (supervisor, runsc) = recorded_runtime(hc)?;
    let runsc_outlived = wait_absent(
        &RealProcessSys,
        ("Runtime Supervisor", supervisor.as_ref()),
        runsc.as_ref(),
    )
    .map_err(|source: AbsenceError| CoordinatorError::RuntimeEnd {
        generation: g.id.0,
        source,
    })?;
    let end = RuntimeSeen::Ended {
        supervisor_signalled: matches!(
            status,
            Some(ChildState::Exited {
                signal: Some(_),
                ..
            })
        ),
        runsc_outlived,
    };
    tracing::warn!(?status, runsc_outlived, "the runtime ended");
    for action in hc.model.model().runtime_ended(end) {
        hc.step_observing(action, |_| Ok(((), proved_absent(action))))?;
    }
    // The mailbox goes with the generation directory.
    super::mailbox::mailbox_release_intent(hc)?;
    super::paths::remove_generation_dir(&g.dir).map_err(|source| CoordinatorError::Io {
        path: g.dir.clone(),
        source,
    })
}

/// Before `ShutdownRuntime`: whatever of the runtime already ended on its
/// own is recorded as such, so the trace never says the coordinator stopped
/// what was gone. A supervisor that exited is reaped and the runtime's end
/// recorded (`true`: there is nothing left to stop); otherwise an attached
/// runsc proved absent by its exact identity is recorded as ended while the
/// supervisor lives (`AttachedRunscEnds`), and the supervisor is stopped as
/// usual.
pub(super) fn settle_runtime(hc: &mut Hc<'_, '_>) -> Result<bool, CoordinatorError> {
    let Some(g) = hc.generation.as_ref() else {
        return Ok(false);
    };
    let generation = g.id.0;
    match hc.broker.poll(g.supervisor.handle()) {
        Ok(ChildState::Running) => {}
        Ok(exited) => {
            record_runtime_end(hc, Some(exited))?;
            return Ok(true);
        }
        Err(e) => {
            tracing::warn!(error = %e, "polling the Runtime Supervisor");
            record_runtime_end(hc, None)?;
            return Ok(true);
        }
    }
    let (_, runsc) = recorded_runtime(hc)?;
    let Some(runsc) = runsc else {
        return Ok(false);
    };
    let here = present(&RealProcessSys, &runsc).map_err(|source| CoordinatorError::RuntimeEnd {
        generation,
        source: AbsenceError::Unproved {
            what: "attached runsc",
            source,
        },
    })?;
    if !here {
        for action in hc.model.model().runtime_ended(RuntimeSeen::RunscGone) {
            hc.step_observing(action, |_| Ok(((), proved_absent(action))))?;
        }
    }
    Ok(false)
}

/// What a step that records a process's end established once that process
/// was proved absent by its exact identity: the variables the step changes,
/// as `Absent`.
pub(super) fn proved_absent(action: Action) -> ProcessView {
    match action {
        Action::RuntimeSupervisorEnds | Action::RuntimeSupervisorLost => {
            ProcessView::supervisor(Rs::Absent)
        }
        Action::AttachedRunscEnds | Action::AttachedRunscParentDeath => {
            ProcessView::attached_runsc(Runsc::Absent)
        }
        Action::RuntimeSupervisorLeaseLossTeardown | Action::ShutdownRuntime { .. } => {
            ProcessView {
                rs: Some(Rs::Absent),
                runsc: Some(Runsc::Absent),
            }
        }
        _ => ProcessView::default(),
    }
}
