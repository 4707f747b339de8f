//! An acquisition ledger whose durable steps are also model steps: the
//! participant intent is `RecordIntent`, the staged slot `StageProcess`, the
//! committed slot `CommitProcess` (spec 3.3 steps 1, 6, 9). Each is checked
//! against the model before the durable write and recorded after it, with
//! the write read back ([`super::observed`]).
use lazaret_generated::lazaret::{Action, ProcSlots, Roles};
use lazaret_runtime::records::process::StagedProcessOwnership;

use super::hc_model::HcModel;
use super::observed::Observer;
use crate::broker::ledger::{AcquisitionLedger, DurablyStaged, LedgerError, StagingContext};

#[derive(Debug)]
pub struct ModelLedger<'m, 's, 'l, L> {
    inner: L,
    model: &'m mut HcModel,
    observer: Observer<'s, 'l>,
    /// The role whose intent this acquisition records, if it records one.
    intent: Option<Roles>,
    slot: ProcSlots,
}

impl<'m, 's, 'l, L: AcquisitionLedger> ModelLedger<'m, 's, 'l, L> {
    pub fn new(
        inner: L,
        model: &'m mut HcModel,
        observer: Observer<'s, 'l>,
        intent: Option<Roles>,
        slot: ProcSlots,
    ) -> Self {
        Self {
            inner,
            model,
            observer,
            intent,
            slot,
        }
    }

    fn step<T>(
        &mut self,
        action: Action,
        effect: impl FnOnce(&mut L) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        self.model.check(&action).map_err(LedgerError::Model)?;
        let out = effect(&mut self.inner)?;
        let observed = self
            .observer
            .read()
            .map_err(|e| LedgerError::Observe(Box::new(e)))?;
        self.model
            .take(action, observed.as_ref())
            .map_err(LedgerError::Model)?;
        Ok(out)
    }
}

impl<L: AcquisitionLedger> AcquisitionLedger for ModelLedger<'_, '_, '_, L> {
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
