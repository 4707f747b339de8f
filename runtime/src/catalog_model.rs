//! The Storage Catalog's model core (spec 3.6 "Prepared lower", OR-7,
//! FR-17, FR-22; `protocol/PreparedLower.tla`): every catalog decision of
//! one operation is a step of the generated PreparedLower model, checked
//! before its effect and taken after it, exactly as the Host Coordinator's
//! lifecycle is a run of the Lazaret model.
//!
//! One instance per operation of one process on one artifact:
//! - a preparation: `RecordPrepareIntent`, `CreateStage`,
//!   `RecordStageOwned`, `PublishArtifact`; a preparation that fails ends
//!   its worker (`PrepareWorkerCrash`) and recovers its own stage;
//! - the recovery of an abandoned operation: `RecoverAbandonedStage` then
//!   `ForgetPrepareOperation`, or `ForgetAbandonedIntent`;
//! - a reclamation: `BeginReclaim`, `RemoveArtifact`;
//! - a lease insertion (`InsertCatalogLease`) or removal
//!   (`RemoveCatalogLease`) by a Domain's Host Coordinator.
//!
//! The instance starts from a state projected from what the operation's
//! first catalog section read under the catalog lock (the trace header
//! records it, so replay checks it satisfies every invariant), and every
//! later section's rows must agree with the instance before its next step.
//! After each step, the rows read back in the step's own transaction (and
//! the stage the operation observed, for a physical step) are the line's
//! `observed`, which replay compares with the model's successor.
//!
//! The projection (refinement mapping), sized for this one artifact:
//! - `prep`, `artifact`, `lease`: the catalog rows. An artifact row that is
//!   absent is `None`, except that one the instance saw Reclaiming is
//!   `Removed` (only `RemoveArtifact` deletes a Reclaiming row).
//! - `worker`, `stage`: what the operation knows of its own process and
//!   stage; an operation row of another process is projected in the state
//!   its worker left when it wrote the row (`Running`, with its stage
//!   exactly when the row is `Owned`), which no step of this instance reads.
//! - Domains: the Domain this operation acts for (lease steps), sized by
//!   its Host Coordinator's knowledge of its own Domain Store; and one
//!   model Domain per other lease row of the artifact, named
//!   `<domain>@<generation>`. Another Domain's store is another
//!   coordinator's and is never opened here, so it is given the weakest
//!   record that explains a held lease (`LeaseHeld`, no process, no
//!   mount); the only guard that reads it is `BeginReclaim`'s `NoLease`.
//! - `MaxGen` 1: each model Domain is one generation, started (a Host
//!   Coordinator acts only for a started generation); the real generation
//!   is in its name and in each line's `generation`.
use lazaret_generated::prepared_lower::{
    Action, ArtifactStates, ArtifactsId, Constants, DomainsId, HcStates, Model, MountStates, PlArt,
    PlStates, PrepStates, RsStates, SaStates, StageStates, State, WorkerStates,
};
use lazaret_generated::support::{Protocol, StepError};
use serde_json::{json, Value};

use crate::core::{Core, CoreError};
use crate::records::catalog::{ArtifactState, PrepareStageState};
use crate::records::ids::{DomainId, GenerationId, PreparedArtifactId};
use crate::trace::{TraceLine, HEADER_ACTION};

/// The most lease rows of one artifact an instance represents (each is a
/// model Domain); a catalog with more for one artifact is refused.
pub const MAX_HOLDERS: usize = 4096;

/// The rows of one artifact a catalog section read: its artifact row, its
/// prepare operation (the artifact's one slot) and its lease rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArtifactRows {
    pub artifact: Option<ArtifactState>,
    pub operation: Option<PrepareStageState>,
    /// `(Domain, generation)` of every lease row naming the artifact.
    pub leases: Vec<(DomainId, GenerationId)>,
}

/// The Domain a lease step acts for: its exact generation and what its
/// lock-holding Host Coordinator knows of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActingDomain {
    pub domain: DomainId,
    pub generation: GenerationId,
    pub record: DomainRecord,
}

/// What a Domain's lock-holding Host Coordinator knows of its generation:
/// its own Domain Store's records, and its processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DomainRecord {
    /// `Running` (the generation's own coordinator) or `Recovering` (a
    /// bootstrap coordinator).
    pub hc: HcStates,
    pub rs: RsStates,
    /// The Domain Store's PreparedLower record of the generation.
    pub pl: PlStates,
    /// Whether that record names this artifact.
    pub names_artifact: bool,
    /// The Domain Store's StateAnchor record of the generation.
    pub sa: SaStates,
    pub mount: MountStates,
}

/// A step of the PreparedLower model this build takes; each is the
/// model's action of the same name on the instance's artifact (and, for
/// the lease steps, the Domain it acts for).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    RecordPrepareIntent,
    CreateStage,
    RecordStageOwned,
    PublishArtifact,
    PrepareWorkerCrash,
    RecoverAbandonedStage,
    ForgetPrepareOperation,
    ForgetAbandonedIntent,
    BeginReclaim,
    RemoveArtifact,
    InsertCatalogLease,
    RemoveCatalogLease,
}

/// Why the model could not start, or a step was refused after its effect.
#[derive(Debug, thiserror::Error)]
pub enum CatalogModelError {
    #[error("artifact {artifact}: the catalog's rows project to a state that violates {invariant} of PreparedLower")]
    Projection {
        artifact: PreparedArtifactId,
        invariant: &'static str,
    },
    #[error("artifact {artifact}: more than {MAX_HOLDERS} lease rows name it")]
    TooManyHolders { artifact: PreparedArtifactId },
    #[error("artifact {artifact}: a lease of Domain {domain} generation {generation} appeared during the operation")]
    UnexpectedLease {
        artifact: PreparedArtifactId,
        domain: DomainId,
        generation: GenerationId,
    },
    #[error("artifact {artifact}: the catalog changed under the operation: `{variable}` is {found}, the model has {expected}")]
    Changed {
        artifact: PreparedArtifactId,
        variable: &'static str,
        found: Value,
        expected: Value,
    },
    #[error("{step:?} acts for a Domain, and this operation acts for none")]
    NoDomain { step: Step },
    #[error("artifact {artifact}: after {step:?}, what was read back differs from the model's next state in `{variable}`: read {found}, model {expected}")]
    Observed {
        artifact: PreparedArtifactId,
        step: Step,
        variable: String,
        found: Value,
        expected: Value,
    },
    #[error(transparent)]
    Step(#[from] CoreError),
    #[error("the model's initial state: {0}")]
    Init(#[from] StepError),
}

/// The model instance of one catalog operation.
#[derive(Debug)]
pub struct CatalogModel {
    core: Core<Model>,
    start: State,
    artifact: PreparedArtifactId,
    /// Model Domain `i` is `domains[i]`; the acting Domain, if any, is 0.
    domains: Vec<(DomainId, GenerationId)>,
    acting: bool,
}

const A: ArtifactsId = ArtifactsId(0);
const ACTING: DomainsId = DomainsId(0);

impl CatalogModel {
    /// The instance of an operation whose first section read `rows`.
    /// `physical` is what the operation knows of the operation row's
    /// worker and stage (`None`: the row, if any, is another process's);
    /// `acting` is the Domain a lease step acts for.
    pub fn start(
        artifact: PreparedArtifactId,
        rows: &ArtifactRows,
        physical: Option<(WorkerStates, StageStates)>,
        acting: Option<&ActingDomain>,
    ) -> Result<Self, CatalogModelError> {
        if rows.leases.len() > MAX_HOLDERS {
            return Err(CatalogModelError::TooManyHolders { artifact });
        }
        let mut domains: Vec<(DomainId, GenerationId)> = Vec::new();
        if let Some(d) = acting {
            domains.push((d.domain, d.generation));
        }
        for lease in &rows.leases {
            if !domains.contains(lease) {
                domains.push(*lease);
            }
        }
        let cx = Constants {
            artifacts: vec![artifact.to_string()],
            domains: domains
                .iter()
                .map(|(d, g)| format!("{d}@{}", g.0))
                .collect(),
            fault_domains: Vec::new(),
            published_at_start: Vec::new(),
            max_gen: 1,
            max_hc_loss: 0,
            max_worker_crash: 1,
        };
        let mut st = Model::init(&cx)?;
        st.prep[A.index()] = prep_of(rows.operation);
        st.artifact[A.index()] = artifact_of(rows.artifact, ArtifactStates::None);
        let (worker, stage) = match (physical, rows.operation) {
            (Some(known), _) => known,
            (None, None) => (WorkerStates::Idle, StageStates::Absent),
            (None, Some(PrepareStageState::Intent)) => (WorkerStates::Running, StageStates::Absent),
            (None, Some(PrepareStageState::Owned)) => (WorkerStates::Running, StageStates::Own),
        };
        st.worker[A.index()] = worker;
        st.stage[A.index()] = stage;
        for (i, key) in domains.iter().enumerate() {
            st.lease[A.index()][i][0] = rows.leases.contains(key);
            match acting.filter(|_| i == ACTING.index()) {
                Some(ActingDomain { record: d, .. }) => {
                    st.hc[i] = d.hc;
                    st.rs[i] = d.rs;
                    st.pl[i] = d.pl;
                    st.pl_art[i] = if d.names_artifact {
                        PlArt::Id(A)
                    } else {
                        PlArt::None
                    };
                    st.sa[i] = d.sa;
                    st.mount[i] = d.mount;
                    st.gen_[i] = 1;
                }
                None => {
                    st.pl[i] = PlStates::LeaseHeld;
                    st.pl_art[i] = PlArt::Id(A);
                    st.gen_[i] = 1;
                }
            }
        }
        let generation = acting.map_or(0, |d| d.generation.0);
        let core = Core::from_state(cx, generation, st.clone()).map_err(|invariant| {
            CatalogModelError::Projection {
                artifact,
                invariant,
            }
        })?;
        Ok(Self {
            core,
            start: st,
            artifact,
            domains,
            acting: acting.is_some(),
        })
    }

    /// The step-0 header: the constants and the projected start state.
    pub fn header(&self) -> TraceLine {
        let cx = self.core.constants();
        TraceLine {
            model: Model::NAME.to_string(),
            step: 0,
            action: HEADER_ACTION.to_string(),
            params: Vec::new(),
            generation: self.core.generation(),
            state: Some(Model::state_view(cx, &self.start)),
            constants: Some(json!({
                "Artifacts": cx.artifacts,
                "Domains": cx.domains,
                "FaultDomains": cx.fault_domains,
                "PublishedAtStart": cx.published_at_start,
                "MaxGen": cx.max_gen,
                "MaxHcLoss": cx.max_hc_loss,
                "MaxWorkerCrash": cx.max_worker_crash,
            })),
            observed: None,
        }
    }

    /// The model state.
    pub fn state(&self) -> &State {
        self.core.state()
    }

    /// Whether `step` is enabled now; nothing changes.
    pub fn check(&self, step: Step) -> Result<(), CatalogModelError> {
        Ok(self.core.check(&self.action(step)?)?)
    }

    /// Checks that rows read at the start of a later section agree with
    /// the instance: nothing outside the operation changed its artifact.
    pub fn agrees(&self, rows: &ArtifactRows) -> Result<(), CatalogModelError> {
        let projected = self.project(rows)?;
        let now = self.core.state();
        let view = |st: &State| Model::state_view(self.core.constants(), st);
        let (found, expected) = (view(&projected), view(now));
        for variable in ["prep", "artifact", "lease"] {
            if found.get(variable) != expected.get(variable) {
                return Err(CatalogModelError::Changed {
                    artifact: self.artifact,
                    variable,
                    found: found.get(variable).cloned().unwrap_or(Value::Null),
                    expected: expected.get(variable).cloned().unwrap_or(Value::Null),
                });
            }
        }
        Ok(())
    }

    /// Takes `step`, whose effect is done: `after` are the rows read back in
    /// the step's transaction (`None` for a physical step, which reads no
    /// rows), `stage` the stage the operation observed after a physical
    /// step. Returns the trace line, whose `observed` carries them.
    pub fn take(
        &mut self,
        step: Step,
        after: Option<&ArtifactRows>,
        stage: Option<StageStates>,
    ) -> Result<TraceLine, CatalogModelError> {
        let action = self.action(step)?;
        let mut variables: Vec<&str> = Vec::new();
        let mut observed_state = self.core.state().clone();
        if let Some(rows) = after {
            observed_state = self.project(rows)?;
            variables.extend(["prep", "artifact", "lease"]);
        }
        if let Some(stage) = stage {
            observed_state.stage[A.index()] = stage;
            variables.push("stage");
        }
        let cx = self.core.constants();
        let view = Model::state_view(cx, &observed_state);
        let mut observed = serde_json::Map::new();
        for v in variables {
            if let Some(value) = view.get(v) {
                observed.insert(v.to_owned(), value.clone());
            }
        }
        // The successor, compared with what was read back before the run
        // advances: a refused step leaves the run where it was.
        self.core.check(&action)?;
        let successor = Model::step(cx, self.core.state(), &action, None)?;
        let next = Model::state_view(cx, &successor);
        for (variable, found) in &observed {
            let expected = next.get(variable).cloned().unwrap_or(Value::Null);
            if *found != expected {
                return Err(CatalogModelError::Observed {
                    artifact: self.artifact,
                    step,
                    variable: variable.clone(),
                    found: found.clone(),
                    expected,
                });
            }
        }
        let mut line = self.core.take("effect completion", &action)?;
        line.observed = (!observed.is_empty()).then_some(Value::Object(observed));
        Ok(line)
    }

    /// The model action of `step`.
    fn action(&self, step: Step) -> Result<Action, CatalogModelError> {
        let a = A;
        let d = || {
            if self.acting {
                Ok(ACTING)
            } else {
                Err(CatalogModelError::NoDomain { step })
            }
        };
        Ok(match step {
            Step::RecordPrepareIntent => Action::RecordPrepareIntent { a },
            Step::CreateStage => Action::CreateStage { a },
            Step::RecordStageOwned => Action::RecordStageOwned { a },
            Step::PublishArtifact => Action::PublishArtifact { a },
            Step::PrepareWorkerCrash => Action::PrepareWorkerCrash { a },
            Step::RecoverAbandonedStage => Action::RecoverAbandonedStage { a },
            Step::ForgetPrepareOperation => Action::ForgetPrepareOperation { a },
            Step::ForgetAbandonedIntent => Action::ForgetAbandonedIntent { a },
            Step::BeginReclaim => Action::BeginReclaim { a },
            Step::RemoveArtifact => Action::RemoveArtifact { a },
            Step::InsertCatalogLease => Action::InsertCatalogLease { d: d()? },
            Step::RemoveCatalogLease => Action::RemoveCatalogLease { d: d()? },
        })
    }

    /// The instance's state with its durable variables replaced by the
    /// projection of `rows`.
    fn project(&self, rows: &ArtifactRows) -> Result<State, CatalogModelError> {
        let mut st = self.core.state().clone();
        st.prep[A.index()] = prep_of(rows.operation);
        let absent = match st.artifact[A.index()] {
            ArtifactStates::Reclaiming | ArtifactStates::Removed => ArtifactStates::Removed,
            _ => ArtifactStates::None,
        };
        st.artifact[A.index()] = artifact_of(rows.artifact, absent);
        for held in st.lease[A.index()].iter_mut() {
            held[0] = false;
        }
        for (domain, generation) in &rows.leases {
            let i = self
                .domains
                .iter()
                .position(|k| k == &(*domain, *generation))
                .ok_or(CatalogModelError::UnexpectedLease {
                    artifact: self.artifact,
                    domain: *domain,
                    generation: *generation,
                })?;
            st.lease[A.index()][i][0] = true;
        }
        Ok(st)
    }
}

fn prep_of(operation: Option<PrepareStageState>) -> PrepStates {
    match operation {
        None => PrepStates::None,
        Some(PrepareStageState::Intent) => PrepStates::Intent,
        Some(PrepareStageState::Owned) => PrepStates::Owned,
    }
}

fn artifact_of(row: Option<ArtifactState>, absent: ArtifactStates) -> ArtifactStates {
    match row {
        None => absent,
        Some(ArtifactState::Available) => ArtifactStates::Available,
        Some(ArtifactState::Reclaiming) => ArtifactStates::Reclaiming,
    }
}

#[cfg(test)]
#[path = "catalog_model_tests.rs"]
mod tests;
