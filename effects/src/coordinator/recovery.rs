//! Bootstrap recovery (issue 5 item 4; spec 3.3 recovery, 3.4, 3.6): a
//! coordinator that finds a generation not retired — its coordinator died —
//! continues that generation's trace as the next successor and takes the
//! model's recovery path: `HostCoordinatorLost` for the dead holder (the
//! flock this process holds proves it gone), the lease-loss steps of the
//! Runtime Supervisor and attached runsc once their exact recorded
//! identities are absent, `AcquireDomainLock`, `BootstrapRecover`, then
//! the same release as a teardown, ending in `RetireGeneration`.
//!
//! Nothing is adopted: a recorded process is only ever matched exactly
//! (pidfs authority) and, if it outlives its lease-loss teardown, ended
//! through that exact match. A process that cannot be proved absent keeps
//! the generation unrecovered and this coordinator fails closed.
use std::time::{Duration, Instant};

use lazaret_generated::lazaret::{Action, Rs, Runsc};
use lazaret_runtime::records::ids::GenerationId;
use lazaret_runtime::records::participant::{ParticipantOwnership, ParticipantRole};
use lazaret_runtime::records::process::PidfsProcessIdentityV1;

use super::hc_model::{trace_name, HcModel};
use super::host::{CoordinatorError, Hc};
use super::launch::decision_value;
use super::paths::DomainPaths;
use super::release::release;
use crate::domain_store::StoreOp;
use crate::process_identity::real::RealProcessSys;
use crate::process_identity::Signal;
use crate::process_identity::{match_recorded, RecoveryRefusal};

/// How long a recorded RS or attached runsc may take to finish its own
/// lease-loss teardown before it is ended through its exact match.
const LEASE_LOSS_GRACE: Duration = Duration::from_secs(20);
/// How long an exactly matched process may take to die after SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// Recovers every generation that is not retired, oldest first.
pub(super) fn recover_all(
    hc: &mut Hc<'_, '_>,
    paths: &DomainPaths,
) -> Result<(), CoordinatorError> {
    let document = hc.store.document().map_err(|e| hc.store_err(e))?;
    let mut live: Vec<GenerationId> = document
        .generations
        .iter()
        .filter(|g| g.generation.durable_decision.as_str() != "Vacant")
        .map(|g| g.generation.generation_id)
        .collect();
    live.sort_by_key(|g| g.0);
    for g in live {
        recover(hc, paths, g)?;
    }
    Ok(())
}

fn recover(
    hc: &mut Hc<'_, '_>,
    paths: &DomainPaths,
    g: GenerationId,
) -> Result<(), CoordinatorError> {
    let _span = tracing::info_span!("BootstrapRecover", generation = g.0).entered();
    let path = paths.runtime.join(trace_name(g.0));
    let old = HcModel::resume(path).map_err(|e| CoordinatorError::Recovery {
        generation: g.0,
        detail: format!(
            "{e}; without the trace of the coordinator that died this generation cannot be recovered by this version"
        ),
    })?;
    let own_model = std::mem::replace(&mut hc.model, old);
    let own_id = std::mem::replace(&mut hc.id, g);
    let result = recover_generation(hc, paths);
    let old = std::mem::replace(&mut hc.model, own_model);
    hc.id = own_id;
    match result {
        Ok(()) => {
            old.archive(&paths.traces());
            Ok(())
        }
        // The trace stays where it is: the next coordinator continues it.
        Err(e) => Err(e),
    }
}

fn recover_generation(hc: &mut Hc<'_, '_>, paths: &DomainPaths) -> Result<(), CoordinatorError> {
    for dead in hc.model.model().holders() {
        hc.step(Action::HostCoordinatorLost { c: dead }, |_| Ok(()))?;
    }
    let (supervisor, runsc) = recorded_runtime(hc)?;
    let runsc_outlived = wait_absent(hc.id, supervisor.as_ref(), runsc.as_ref())?;
    let state = hc.model.state();
    match (state.rs, state.runsc) {
        (Rs::LeaseLost, Runsc::Running) if runsc_outlived => {
            hc.step(Action::RuntimeSupervisorLost, |_| Ok(()))?;
            hc.step(Action::AttachedRunscParentDeath, |_| Ok(()))?;
        }
        (Rs::LeaseLost, _) => {
            hc.step(Action::RuntimeSupervisorLeaseLossTeardown, |_| Ok(()))?;
        }
        (Rs::Absent, Runsc::Running) => {
            hc.step(Action::AttachedRunscParentDeath, |_| Ok(()))?;
        }
        _ => {}
    }
    // The generation's runtime files (bundle, runsc state of a runsc that
    // was killed) go once its processes are proved absent.
    let dir = paths.generation(hc.id.0);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|source| CoordinatorError::Io {
            path: dir.clone(),
            source,
        })?;
    }
    let me = hc.model.me();
    let generation = hc.id;
    hc.step(Action::AcquireDomainLock { c: me }, |_| Ok(()))?;
    hc.step(Action::BootstrapRecover { c: me }, |hc| {
        hc.apply(&[StoreOp::SetDurableDecision {
            generation,
            decision: decision_value("Recovering")?,
        }])
    })?;
    release(hc)
}

/// The recorded identities of the generation's RS and attached runsc.
fn recorded_runtime(
    hc: &Hc<'_, '_>,
) -> Result<
    (
        Option<PidfsProcessIdentityV1>,
        Option<PidfsProcessIdentityV1>,
    ),
    CoordinatorError,
> {
    let sandbox = hc
        .store
        .participant(hc.id, ParticipantRole::Sandbox)
        .map_err(|e| hc.store_err(e))?
        .and_then(|p| p.ownership);
    Ok(match sandbox {
        Some(ParticipantOwnership::Sandbox(s)) => (
            s.runtime_supervisor.identity().copied(),
            s.attached_runsc.identity().copied(),
        ),
        _ => (None, None),
    })
}

/// Whether the process recorded as `identity` is exactly present.
fn present(identity: &PidfsProcessIdentityV1) -> Result<bool, String> {
    match match_recorded(&RealProcessSys, identity) {
        Ok(_) => Ok(true),
        Err(
            RecoveryRefusal::NoProcessAtLocator { .. }
            | RecoveryRefusal::AuthorityMismatch { .. }
            | RecoveryRefusal::StartTimeMismatch { .. }
            | RecoveryRefusal::BootMismatch { .. },
        ) => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Waits until RS and attached runsc are absent; one still present after
/// [`LEASE_LOSS_GRACE`] is ended through its exact match. Returns whether
/// runsc was still present when RS was already gone.
fn wait_absent(
    generation: GenerationId,
    supervisor: Option<&PidfsProcessIdentityV1>,
    runsc: Option<&PidfsProcessIdentityV1>,
) -> Result<bool, CoordinatorError> {
    let unproved = |what: &str, detail: String| CoordinatorError::Recovery {
        generation: generation.0,
        detail: format!("cannot prove the {what} absent: {detail}"),
    };
    let start = Instant::now();
    let mut killed = false;
    let mut runsc_outlived = false;
    loop {
        let rs_here = supervisor
            .map(present)
            .transpose()
            .map_err(|e| unproved("Runtime Supervisor", e))?
            .unwrap_or(false);
        let runsc_here = runsc
            .map(present)
            .transpose()
            .map_err(|e| unproved("attached runsc", e))?
            .unwrap_or(false);
        if !rs_here && runsc_here {
            runsc_outlived = true;
        }
        if !rs_here && !runsc_here {
            return Ok(runsc_outlived);
        }
        let waited = start.elapsed();
        if waited > LEASE_LOSS_GRACE + KILL_GRACE {
            return Err(unproved(
                "runtime",
                format!(
                    "still running {}s after the coordinator died",
                    waited.as_secs()
                ),
            ));
        }
        if waited > LEASE_LOSS_GRACE && !killed {
            killed = true;
            for identity in [supervisor, runsc].into_iter().flatten() {
                if let Ok(handle) = match_recorded(&RealProcessSys, identity) {
                    tracing::warn!(
                        pid = identity.host_pid.0,
                        "ending an exactly matched leftover"
                    );
                    let _ = handle.signal(&RealProcessSys, Signal::Kill);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
