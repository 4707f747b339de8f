//! Bootstrap recovery (spec 3.3 recovery, 3.4, 3.6): a
//! coordinator that finds a generation not retired — its coordinator died —
//! continues that generation's trace as the next successor and takes the
//! model's recovery path: `HostCoordinatorLost` for the dead holder (the
//! flock this process holds proves it gone), the lease-loss steps of the
//! Runtime Supervisor and attached runsc once their exact recorded
//! identities are absent, `AcquireDomainLock` (that flock) before the
//! first write for the generation, `BootstrapRecover`, then the same
//! release as a teardown, ending in `RetireGeneration`. A Domain Store
//! that disagrees with the trace beyond one untraced step is the model's
//! mismatched record: `DurableIdentityDiverges`, `AcquireDomainLock`,
//! `RefuseMismatchedRecord`, and the record stays untouched.
//!
//! Nothing is adopted: a recorded process is only ever matched exactly
//! (pidfs authority) and, if it outlives its lease-loss teardown, ended
//! through that exact match. A process that cannot be proved absent keeps
//! the generation unrecovered and this coordinator fails closed.
use lazaret_generated::lazaret::{Action, Roles};
use lazaret_runtime::coordinator::host_model::{DurableView, HostModelError, ProcessView};
use lazaret_runtime::coordinator::recovery::{next_recovery, Recovering, RecoveryNext};
use lazaret_runtime::records::ids::GenerationId;
use lazaret_runtime::records::participant::{ParticipantOwnership, ParticipantRole};
use lazaret_runtime::records::process::PidfsProcessIdentityV1;

use super::absence::{wait_absent, AbsenceError};
use super::hc_model::{coordinator_name, trace_name, HcModel, ResumeError};
use super::host::{CoordinatorError, Hc};
use super::launch::decision_value;
use super::observed::{self, ObserveError};
use super::paths::DomainPaths;
use super::release::release_step;
use super::runtime_end::proved_absent;
use crate::domain_store::StoreOp;
use crate::process_identity::real::RealProcessSys;
use lazaret_runtime::ownership::terminal::TerminalOp;
use lazaret_runtime::ownership::AbsenceProof;
use lazaret_runtime::records::terminal::SessionTerminalState;

/// Why a dead coordinator's generation was not recovered (spec 3.3
/// recovery): it fails closed and the generation is kept as it is.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error("its trace cannot be continued: {0}")]
    Resume(#[source] ResumeError),
    #[error("its trace cannot be rebuilt from the durable record: {0}")]
    Rebuild(#[source] HostModelError),
    #[error("the Domain Store has no such generation")]
    NoSuchGeneration,
    #[error("{0}")]
    Observe(#[source] ObserveError),
    #[error("the Domain Store ({store}) and the trace ({trace}) differ by more than one step")]
    TraceAndStoreDiffer { store: String, trace: String },
    #[error("{0}")]
    Absence(#[from] AbsenceError),
}

/// Recovers every generation that is not retired, oldest first, and keeps
/// the traces of generations that were retired but whose coordinator died
/// before it could move their trace.
pub(super) fn recover_all(
    hc: &mut Hc<'_, '_>,
    paths: &DomainPaths,
) -> Result<(), CoordinatorError> {
    let document = hc.store.document().map_err(|e| hc.store_err(e))?;
    let mut live: Vec<GenerationId> = Vec::new();
    for g in &document.generations {
        let id = g.generation.generation_id;
        if g.generation.durable_decision.as_str() != "Vacant" {
            live.push(id);
            continue;
        }
        let orphan = paths.runtime.join(trace_name(id.0));
        if orphan.exists() && id != hc.id {
            match HcModel::resume(orphan) {
                Ok(old) => old.archive(&paths.traces()),
                Err(e) => {
                    tracing::warn!(generation = id.0, error = %e, "an orphaned trace is not kept")
                }
            }
        }
    }
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
    let old = if path.exists() {
        HcModel::resume(path).map_err(|e| CoordinatorError::Recovery {
            generation: g.0,
            source: RecoveryError::Resume(e),
        })?
    } else {
        // The trace is gone (a reboot empties the runtime directory): the
        // recovery starts from the state the durable record describes.
        let durable = durable_view(hc, g)?;
        let dead = hc
            .store
            .generation_document(g)
            .map_err(|e| hc.store_err(e))?
            .map(|d| coordinator_name(&d.generation.coordinator_id))
            .unwrap_or_else(|| "hc-unknown".into());
        tracing::warn!(
            generation = g.0,
            "the trace of this generation is gone; recovering from the durable record"
        );
        HcModel::recovered(path, dead, g.0, &durable).map_err(|e| CoordinatorError::Recovery {
            generation: g.0,
            source: RecoveryError::Rebuild(e),
        })?
    };
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

/// What the Domain Store records of generation `g`, as the model's durable
/// variables ([`observed::durable_view`]); the generation must exist.
fn durable_view(hc: &Hc<'_, '_>, g: GenerationId) -> Result<DurableView, CoordinatorError> {
    let failed = |source: RecoveryError| CoordinatorError::Recovery {
        generation: g.0,
        source,
    };
    // Recovery serves none of the generation's sessions.
    let slots: observed::ServedSlots = hc
        .model
        .model()
        .constants()
        .sessions
        .iter()
        .map(|name| (name.clone(), None))
        .collect();
    observed::durable_view(hc.store, g, &slots)
        .map_err(|e| failed(RecoveryError::Observe(e)))?
        .ok_or_else(|| failed(RecoveryError::NoSuchGeneration))
}

/// The dead coordinator may have completed one durable step it did not
/// trace (it died between the store transaction and the trace line): that
/// step is taken for it, so the trace matches the store. Anything else is
/// a disagreement recovery does not guess at: returned, for
/// [`refuse_mismatched_record`].
fn catch_up(hc: &mut Hc<'_, '_>) -> Result<Option<RecoveryError>, CoordinatorError> {
    let store = durable_view(hc, hc.id)?;
    if hc.model.model().durable_unserved() == store {
        return Ok(None);
    }
    let step = hc
        .model
        .model()
        .holders()
        .into_iter()
        .find_map(|dead| hc.model.model().catch_up(dead, &store));
    let Some(action) = step else {
        return Ok(Some(RecoveryError::TraceAndStoreDiffer {
            store: format!("{store:?}"),
            trace: format!("{:?}", hc.model.model().durable_unserved()),
        }));
    };
    tracing::info!(
        ?action,
        "the dead coordinator's last durable step, taken for its trace"
    );
    // Its line carries what this process read, but not of the terminal
    // rows: the dead coordinator served those sessions, this one does not.
    hc.model.take(action, Some(&store.without_terminals()))?;
    Ok(None)
}

/// A step of a recovery without its own write; its line carries the
/// store's read-back only while the store agrees with the trace: a record
/// that stopped matching is the model's `recordIdentity = "Mismatched"`,
/// whose durable variables are not what the store holds.
fn recovery_step(
    hc: &mut Hc<'_, '_>,
    store_differs: bool,
    action: Action,
    processes: ProcessView,
) -> Result<(), CoordinatorError> {
    if store_differs {
        Ok(hc.model.take_with_processes(action, None, processes)?)
    } else {
        hc.step_observing(action, |_| Ok(((), processes)))
    }
}

/// The recovery the core decides ([`next_recovery`]), each step with its
/// effect. A store that disagrees with the trace ends in the model's
/// refusal (`DurableIdentityDiverges` once, `AcquireDomainLock`,
/// `RefuseMismatchedRecord`), the record untouched (spec 3.3 recovery),
/// and this coordinator fails closed with the disagreement; the trace
/// stays for the next coordinator, which refuses the same way.
fn recover_generation(hc: &mut Hc<'_, '_>, paths: &DomainPaths) -> Result<(), CoordinatorError> {
    // Spec 3.3: a lost coordinator's sandbox credential source goes first,
    // whatever the recovery decides about the rest of its directory (a
    // running sandbox keeps its own mount of it).
    let dir = paths.generation(hc.id.0);
    super::paths::remove_sandbox_credentials(&dir)
        .map_err(|source| CoordinatorError::Io { path: dir, source })?;
    let differs = catch_up(hc)?;
    let mut seen = Recovering {
        store_differs: differs.is_some(),
        runtime_absent: None,
    };
    let generation = hc.id;
    // Bounded: a few steps of loss, lease loss and bootstrap, and the
    // release's three per role.
    for _ in 0..(3 * Roles::ALL.len() + 16) {
        let action = match next_recovery(hc.model.model(), seen) {
            RecoveryNext::Done => {
                return match differs {
                    Some(why) => Err(CoordinatorError::Recovery {
                        generation: generation.0,
                        source: why,
                    }),
                    None => Ok(()),
                }
            }
            RecoveryNext::ProveRuntimeAbsent => {
                seen.runtime_absent = Some(prove_runtime_absent(hc)?);
                continue;
            }
            RecoveryNext::Step(action) => action,
        };
        match action {
            Action::AcquireDomainLock { .. } if !seen.store_differs => {
                // The generation's runtime files (bundle, runsc state of a
                // runsc that was killed) go once its processes are proved
                // absent, and every terminal's exec client is proved
                // absent before the lock step: a recovery that fails
                // closed on a proof does not spend a successor (the
                // terminals are recorded clean at `CleanSessionTerminals`,
                // where the proof is repeated). This process holds the
                // Domain flock (the step's effect, taken when it started);
                // the step comes before anything written for the
                // generation (FR-17).
                let dir = paths.generation(generation.0);
                super::paths::remove_generation_dir(&dir)
                    .map_err(|source| CoordinatorError::Io { path: dir, source })?;
                terminal_releases(hc)?;
                hc.step(action, |_| Ok(()))?;
            }
            Action::BootstrapRecover { .. } => hc.step(action, |hc| {
                hc.apply(&[StoreOp::SetDurableDecision {
                    generation,
                    decision: decision_value("Recovering")?,
                }])
            })?,
            Action::RuntimeSupervisorLeaseLossTeardown
            | Action::RuntimeSupervisorLost
            | Action::AttachedRunscParentDeath => {
                recovery_step(hc, seen.store_differs, action, proved_absent(action))?;
            }
            Action::HostCoordinatorLost { .. }
            | Action::AcquireDomainLock { .. }
            | Action::DurableIdentityDiverges
            | Action::RefuseMismatchedRecord { .. } => {
                recovery_step(hc, seen.store_differs, action, ProcessView::default())?;
            }
            release => release_step(hc, release)?,
        }
    }
    Err(CoordinatorError::ReleaseIncomplete)
}

/// The dead runtime's recorded RS and attached runsc, and its connectivity
/// helper, proved absent by their exact identities (one that outlives its
/// grace is ended through its exact match). Returns whether runsc
/// outlived RS.
fn prove_runtime_absent(hc: &Hc<'_, '_>) -> Result<bool, CoordinatorError> {
    let (supervisor, runsc) = recorded_runtime(hc)?;
    let generation = hc.id;
    let unproved = |source: AbsenceError| CoordinatorError::Recovery {
        generation: generation.0,
        source: RecoveryError::Absence(source),
    };
    let runsc_outlived = wait_absent(
        &RealProcessSys,
        ("Runtime Supervisor", supervisor.as_ref()),
        runsc.as_ref(),
    )
    .map_err(unproved)?;
    // The connectivity helper exits when RS's end of its exit pipe closes
    // (spec 3.7); it is proved absent by its exact recorded identity too.
    let helper = recorded_helper(hc)?;
    if helper.is_some() {
        wait_absent(
            &RealProcessSys,
            ("connectivity helper", helper.as_ref()),
            None,
        )
        .map_err(unproved)?;
    }
    Ok(runsc_outlived)
}

/// CleanSessionTerminals, once the runtime is absent (spec 3.4): every
/// session terminal of the generation that is not clean — a dead
/// coordinator's sessions, a release the session retained (release step
/// 3), a session that failed to start — has its exec client proved absent
/// by its exact recorded identity (it ends with the sandbox; one that
/// outlives the grace is ended through its exact match), then goes
/// ReleaseIntent -> Clean. Every terminal's Clean goes in one transaction
/// (a Domain that ran many piped commands may retain many).
pub(super) fn clean_terminals(hc: &mut Hc<'_, '_>) -> Result<(), CoordinatorError> {
    let ops = terminal_releases(hc)?;
    apply_releases(hc, &ops)
}

/// The releases [`clean_terminals`] writes, each terminal's exec client
/// proved absent first; nothing is written.
fn terminal_releases(hc: &Hc<'_, '_>) -> Result<Vec<StoreOp>, CoordinatorError> {
    let generation = hc.id;
    let document = hc
        .store
        .generation_document(generation)
        .map_err(|e| hc.store_err(e))?;
    let terminals = document.map(|d| d.terminals).unwrap_or_default();
    let mut ops = Vec::new();
    for t in terminals {
        if t.state == SessionTerminalState::Clean {
            continue;
        }
        let exec_client = t.snapshot.exec_client.identity().copied();
        wait_absent(
            &RealProcessSys,
            ("session exec client", exec_client.as_ref()),
            None,
        )
        .map_err(|source| CoordinatorError::Recovery {
            generation: generation.0,
            source: RecoveryError::Absence(source),
        })?;
        let bare = t.is_bare_intent();
        if !bare && t.state != SessionTerminalState::ReleaseIntent {
            ops.push(StoreOp::Terminal {
                generation,
                session: t.session_id,
                op: TerminalOp::BeginRelease,
            });
        }
        ops.push(StoreOp::Terminal {
            generation,
            session: t.session_id,
            op: TerminalOp::Clean(if bare {
                AbsenceProof::SealedRuntimeAbsence
            } else {
                AbsenceProof::ExactAbsence
            }),
        });
    }
    Ok(ops)
}

/// Writes the terminal releases in one transaction (none: no write).
fn apply_releases(hc: &Hc<'_, '_>, ops: &[StoreOp]) -> Result<(), CoordinatorError> {
    if ops.is_empty() {
        return Ok(());
    }
    hc.apply(ops)
}

/// The recorded identities of the generation's RS and attached runsc.
pub(super) fn recorded_runtime(
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

/// The connectivity helper recorded in the Helper participant, if any.
fn recorded_helper(hc: &Hc<'_, '_>) -> Result<Option<PidfsProcessIdentityV1>, CoordinatorError> {
    let helper = hc
        .store
        .participant(hc.id, ParticipantRole::Helper)
        .map_err(|e| hc.store_err(e))?
        .and_then(|p| p.ownership);
    Ok(match helper {
        Some(ParticipantOwnership::Helper(h)) => h.connectivity_helper.identity().copied(),
        _ => None,
    })
}
