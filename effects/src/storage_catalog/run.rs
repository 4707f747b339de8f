//! One catalog operation's run of the PreparedLower model
//! (`lazaret_runtime::catalog_model`) and its trace: every step is checked
//! against the model before its effect and taken after it, one JSON line
//! per step in `<storage root>/catalog/traces/`, where the newest
//! [`KEPT_CATALOG_TRACES`] operations' traces are kept for `lazaret trace
//! replay`. An operation that takes no step writes no trace.
use super::{CatalogError, StorageCatalog};
use crate::trace_log::{prune_oldest, TraceLog};
use lazaret_generated::prepared_lower::{StageStates, WorkerStates};
use lazaret_runtime::catalog_model::{
    ActingDomain, ArtifactRows, CatalogModel, CatalogModelError, Step,
};
use lazaret_runtime::core::CoreError;
use lazaret_runtime::records::ids::PreparedArtifactId;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// The traces directory inside the catalog directory.
pub const TRACES_DIR: &str = "traces";
/// Catalog operations' traces kept.
pub const KEPT_CATALOG_TRACES: usize = 256;

/// One operation on one artifact, as a run of the model.
#[derive(Debug)]
pub struct CatalogRun {
    artifact: PreparedArtifactId,
    physical: Option<(WorkerStates, StageStates)>,
    acting: Option<ActingDomain>,
    model: Option<CatalogModel>,
    traces: PathBuf,
    catalog: PathBuf,
    log: Option<TraceLog>,
}

impl StorageCatalog {
    /// A new operation on `artifact`; its model starts at its first
    /// catalog section.
    pub fn run(&self, artifact: PreparedArtifactId) -> CatalogRun {
        CatalogRun {
            artifact,
            physical: None,
            acting: None,
            model: None,
            traces: self.dir.join(TRACES_DIR),
            catalog: self.path.clone(),
            log: None,
        }
    }
}

impl CatalogRun {
    /// The same operation, knowing the worker and stage of the artifact's
    /// prepare operation (a recovery that took its lock and looked at its
    /// stage path).
    pub fn knowing(mut self, worker: WorkerStates, stage: StageStates) -> Self {
        self.physical = Some((worker, stage));
        self
    }

    /// The same operation, acting for a Domain (a lease step).
    pub(super) fn acting_for(mut self, domain: ActingDomain) -> Self {
        self.acting = Some(domain);
        self
    }

    pub fn artifact(&self) -> PreparedArtifactId {
        self.artifact
    }

    fn model_err(&self, source: CatalogModelError) -> CatalogError {
        CatalogError::Model {
            path: self.catalog.clone(),
            source: Box::new(source),
        }
    }

    /// The rows a section read before its step: the model starts from them,
    /// or they must agree with it.
    pub(super) fn observe(&mut self, rows: &ArtifactRows) -> Result<(), CatalogError> {
        let checked = match &self.model {
            Some(model) => model.agrees(rows),
            None => CatalogModel::start(self.artifact, rows, self.physical, self.acting.as_ref())
                .map(|model| self.model = Some(model)),
        };
        checked.map_err(|e| self.model_err(e))
    }

    /// The started model; `step` names what needed it.
    fn model(&self, step: Step) -> Result<&CatalogModel, CatalogError> {
        self.model
            .as_ref()
            .ok_or_else(|| CatalogError::NotObserved {
                path: self.catalog.clone(),
                step,
            })
    }

    /// Whether the model enables `step` now. A refusal for any other
    /// reason than a false guard is an error.
    pub fn enabled(&self, step: Step) -> Result<bool, CatalogError> {
        match self.model(step)?.check(step) {
            Ok(()) => Ok(true),
            Err(CatalogModelError::Step(CoreError::Disabled { .. })) => Ok(false),
            Err(e) => Err(self.model_err(e)),
        }
    }

    /// `step` must be enabled now: a false guard is an error naming it.
    pub fn check(&self, step: Step) -> Result<(), CatalogError> {
        self.model(step)?.check(step).map_err(|e| self.model_err(e))
    }

    /// Takes `step`, whose effect is done, with the rows its transaction
    /// read back (`None` for a physical step) and the stage the operation
    /// observed; appends its trace line.
    pub(super) fn take(
        &mut self,
        step: Step,
        after: Option<&ArtifactRows>,
        stage: Option<StageStates>,
    ) -> Result<(), CatalogError> {
        let model = self
            .model
            .as_mut()
            .ok_or_else(|| CatalogError::NotObserved {
                path: self.catalog.clone(),
                step,
            })?;
        let taken = model.take(step, after, stage);
        let line = match taken {
            Ok(line) => line,
            Err(e) => return Err(self.model_err(e)),
        };
        if self.log.is_none() {
            let header = model.header();
            self.log = Some(self.create_log(&header));
        }
        if let Some(log) = self.log.as_mut() {
            log.append(&line);
        }
        Ok(())
    }

    /// Takes a physical step of the operation (its effect, checked with
    /// [`CatalogRun::check`], changed no row), with the stage it observed.
    pub fn took(&mut self, step: Step, stage: Option<StageStates>) -> Result<(), CatalogError> {
        self.take(step, None, stage)
    }

    fn create_log(&self, header: &lazaret_runtime::trace::TraceLine) -> TraceLog {
        if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&self.traces) {
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                tracing::warn!(dir = %self.traces.display(), error = %e, "cannot create the catalog traces directory");
            }
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = self
            .traces
            .join(format!("{nanos:020}-{}.jsonl", std::process::id()));
        let log = TraceLog::create(path, header);
        prune(&self.traces, log.path());
        log
    }
}

fn prune(dir: &Path, own: &Path) {
    if let Err(e) = prune_oldest(dir, "", KEPT_CATALOG_TRACES, own) {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot prune the catalog traces");
    }
}
