//! An acquisition ledger whose durable steps are also model steps: the
//! participant intent is `RecordIntent`, the staged slot `StageProcess`, the
//! committed slot `CommitProcess` (spec 3.3 steps 1, 6, 9). Each is checked
//! against the model before the durable write and recorded after it.
use lazaret_generated::lazaret::{Action, ProcSlots, Roles};
use lazaret_runtime::records::process::StagedProcessOwnership;

use super::hc_model::HcModel;
use crate::broker::ledger::{AcquisitionLedger, DurablyStaged, LedgerError, StagingContext};

#[derive(Debug)]
pub struct ModelLedger<'m, L> {
    inner: L,
    model: &'m mut HcModel,
    /// The role whose intent this acquisition records, if it records one.
    intent: Option<Roles>,
    slot: ProcSlots,
}

impl<'m, L: AcquisitionLedger> ModelLedger<'m, L> {
    pub fn new(inner: L, model: &'m mut HcModel, intent: Option<Roles>, slot: ProcSlots) -> Self {
        Self {
            inner,
            model,
            intent,
            slot,
        }
    }

    fn step<T>(
        &mut self,
        action: Action,
        effect: impl FnOnce(&mut L) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        let refused = |e: lazaret_runtime::core::CoreError| LedgerError::Model(e.to_string());
        self.model.check(&action).map_err(refused)?;
        let out = effect(&mut self.inner)?;
        self.model.take(action).map_err(refused)?;
        Ok(out)
    }
}

impl<L: AcquisitionLedger> AcquisitionLedger for ModelLedger<'_, L> {
    fn context(&self) -> StagingContext {
        self.inner.context()
    }

    fn persist_intent(&mut self) -> Result<(), LedgerError> {
        match self.intent {
            Some(r) => {
                let c = self.model.me();
                self.step(Action::RecordIntent { c, r }, |l| l.persist_intent())
            }
            None => self.inner.persist_intent(),
        }
    }

    fn persist_staged(
        &mut self,
        staged: &StagedProcessOwnership,
    ) -> Result<DurablyStaged, LedgerError> {
        let action = Action::StageProcess {
            c: self.model.me(),
            ps: self.slot,
        };
        self.step(action, |l| l.persist_staged(staged))
    }

    fn persist_committed(&mut self, staged: &StagedProcessOwnership) -> Result<(), LedgerError> {
        let action = Action::CommitProcess {
            c: self.model.me(),
            ps: self.slot,
        };
        self.step(action, |l| l.persist_committed(staged))
    }
}
