//! An acquisition ledger whose durable steps are also model steps: the
//! participant intent is `RecordIntent`, the staged slot `StageProcess`, the
//! committed slot `CommitProcess` (spec 3.3 steps 1, 6, 9). Each is checked
//! against the model before the durable write and recorded after it, with
//! the write read back ([`super::observed`]) and, for a staged or committed
//! slot, its process observed by its exact identity
//! ([`super::absence::observe_slot`]).
use lazaret_generated::lazaret::{Action, ProcSlots, Roles};
use lazaret_runtime::coordinator::host_model::ProcessView;
use lazaret_runtime::records::process::{PidfsProcessIdentityV1, StagedProcessOwnership};

use super::absence::observe_slot;
use super::hc_model::HcModel;
use super::observed::Observer;
use crate::broker::ledger::{AcquisitionLedger, DurablyStaged, LedgerError, StagingContext};
use crate::process_identity::ProcessSys;

#[derive(Debug)]
pub struct ModelLedger<'m, 's, 'l, L, S> {
    inner: L,
    /// Reads the staged or committed process's presence.
    sys: S,
    model: &'m mut HcModel,
    observer: Observer<'s, 'l>,
    /// The role whose intent this acquisition records, if it records one.
    intent: Option<Roles>,
    slot: ProcSlots,
}

impl<'m, 's, 'l, L: AcquisitionLedger, S: ProcessSys> ModelLedger<'m, 's, 'l, L, S> {
    pub fn new(
        inner: L,
        sys: S,
        model: &'m mut HcModel,
        observer: Observer<'s, 'l>,
        intent: Option<Roles>,
        slot: ProcSlots,
    ) -> Self {
        Self {
            inner,
            sys,
            model,
            observer,
            intent,
            slot,
        }
    }

    /// `process`: the identity of the slot's process the step stages or
    /// commits, observed after the effect.
    fn step<T>(
        &mut self,
        action: Action,
        process: Option<&PidfsProcessIdentityV1>,
        effect: impl FnOnce(&mut L) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        self.model.check(&action).map_err(LedgerError::Model)?;
        let out = effect(&mut self.inner)?;
        let observed = self
            .observer
            .read()
            .map_err(|e| LedgerError::Observe(Box::new(e)))?;
        let processes = match process {
            Some(identity) => observe_slot(&self.sys, self.slot, identity)
                .map_err(|e| LedgerError::Observe(Box::new(e)))?,
            None => ProcessView::default(),
        };
        self.model
            .take_with_processes(action, observed.as_ref(), processes)
            .map_err(LedgerError::Model)?;
        Ok(out)
    }
}

impl<L: AcquisitionLedger, S: ProcessSys> AcquisitionLedger for ModelLedger<'_, '_, '_, L, S> {
    fn context(&self) -> StagingContext {
        self.inner.context()
    }

    fn persist_intent(&mut self) -> Result<(), LedgerError> {
        match self.intent {
            Some(r) => {
                let c = self.model.me();
                self.step(Action::RecordIntent { c, r }, None, |l| l.persist_intent())
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
        self.step(action, Some(&staged.identity), |l| l.persist_staged(staged))
    }

    fn persist_committed(&mut self, staged: &StagedProcessOwnership) -> Result<(), LedgerError> {
        let action = Action::CommitProcess {
            c: self.model.me(),
            ps: self.slot,
        };
        self.step(action, Some(&staged.identity), |l| {
            l.persist_committed(staged)
        })
    }
}
