//! The Host Coordinator's own acquisitions stage and commit straight into the
//! Domain Store (spec 3.3 steps 1, 6 and 9 for HC-launched children, spec 3.4
//! terminal acquisition).
use super::ops::SlotTarget;
use super::{DomainStore, StoreError, StoreOp};
use crate::broker::ledger::{AcquisitionLedger, DurablyStaged, LedgerError, StagingContext};
use lazaret_runtime::records::participant::ParticipantState;
use lazaret_runtime::records::process::{
    HostProcessOwnershipSlot, PersistedHostProcessOwnership, StagedProcessOwnership,
};
use lazaret_runtime::records::terminal::SessionTerminalState;

/// Stages one acquisition into one slot of the store.
#[derive(Debug)]
pub struct StoreLedger<'s, 'l> {
    store: &'s DomainStore<'l>,
    target: SlotTarget,
    context: StagingContext,
}

impl<'s, 'l> StoreLedger<'s, 'l> {
    pub fn new(store: &'s DomainStore<'l>, target: SlotTarget) -> Result<Self, StoreError> {
        let generation = target.generation();
        let g = store
            .generation_row(generation)?
            .ok_or_else(|| StoreError::Missing {
                what: format!("generation {generation}"),
            })?;
        Ok(Self {
            store,
            target,
            context: StagingContext {
                domain_id: g.domain_id,
                generation_id: g.generation_id,
                coordinator_id: g.coordinator_id,
                slot: target.slot(),
            },
        })
    }

    fn check_unassigned(
        &self,
        phase: Option<&PersistedHostProcessOwnership>,
    ) -> Result<(), StoreError> {
        match phase {
            None | Some(PersistedHostProcessOwnership::Unassigned) => Ok(()),
            Some(other) => Err(StoreError::Exists {
                what: format!(
                    "{} ownership in slot {:?}",
                    other.phase_name(),
                    self.target.slot()
                ),
            }),
        }
    }
}

impl AcquisitionLedger for StoreLedger<'_, '_> {
    fn context(&self) -> StagingContext {
        self.context
    }

    fn persist_intent(&mut self) -> Result<(), LedgerError> {
        match self.target {
            SlotTarget::Participant { generation, slot } => {
                let role = slot
                    .participant_role()
                    .ok_or_else(|| StoreError::Mismatch {
                        what: format!("slot {slot:?} (not a participant slot)"),
                    })?;
                match self.store.participant(generation, role)? {
                    None => self
                        .store
                        .apply(&[StoreOp::InsertParticipantIntent { generation, role }])?,
                    Some(p) if p.state == ParticipantState::Intent => {
                        self.check_unassigned(p.ownership.as_ref().and_then(|o| o.slot(slot)))?
                    }
                    Some(p) => {
                        return Err(StoreError::Mismatch {
                            what: format!(
                                "participant {role:?} in state {:?} (not Intent)",
                                p.state
                            ),
                        }
                        .into())
                    }
                }
            }
            SlotTarget::Terminal {
                generation,
                session,
                slot,
            } => match self.store.terminal(generation, session)? {
                None => self.store.apply(&[StoreOp::InsertTerminalIntent {
                    generation,
                    session,
                }])?,
                Some(t) if t.state == SessionTerminalState::Intent => {
                    let phase = match slot {
                        HostProcessOwnershipSlot::SessionTerminalHostCoordinator => {
                            &t.snapshot.host_coordinator
                        }
                        HostProcessOwnershipSlot::SessionTerminalExecClient => {
                            &t.snapshot.exec_client
                        }
                        other => {
                            return Err(StoreError::Mismatch {
                                what: format!("slot {other:?} (not a session terminal slot)"),
                            }
                            .into())
                        }
                    };
                    self.check_unassigned(Some(phase))?
                }
                Some(t) => {
                    return Err(StoreError::Mismatch {
                        what: format!(
                            "session terminal {session} in state {:?} (not Intent)",
                            t.state
                        ),
                    }
                    .into())
                }
            },
        }
        Ok(())
    }

    fn persist_staged(
        &mut self,
        staged: &StagedProcessOwnership,
    ) -> Result<DurablyStaged, LedgerError> {
        self.store.apply(&[StoreOp::StageProcess {
            target: self.target,
            identity: staged.identity,
        }])?;
        Ok(DurablyStaged::new(*staged))
    }

    fn persist_committed(&mut self, staged: &StagedProcessOwnership) -> Result<(), LedgerError> {
        self.store.apply(&[StoreOp::CommitProcess {
            target: self.target,
            identity: staged.identity,
        }])?;
        Ok(())
    }
}
