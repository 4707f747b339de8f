//! Where the broker makes acquisition durable (spec 3.3 steps 1, 6 and 9).
use crate::domain_store::StoreError;
use lazaret_runtime::ownership::ack::AckRefusal;
use lazaret_runtime::records::ids::{CoordinatorId, DomainId, GenerationId};
use lazaret_runtime::records::process::{HostProcessOwnershipSlot, StagedProcessOwnership};

/// Why the ledger refused a step; the barrier is then never released.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("Domain Store: {0}")]
    Store(Box<StoreError>),
    #[error("staged ownership acknowledgement: {0}")]
    Ack(Box<AckRefusal>),
    #[error("coordinator link: {0}")]
    Link(#[source] super::remote::LinkError),
    /// The protocol model does not allow the step (spec "Document authority").
    #[error("protocol model: {0}")]
    Model(#[source] lazaret_runtime::core::CoreError),
    /// The step's effect could not be read back for its trace line.
    #[error("reading the step's effect back: {0}")]
    Observe(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot encode the staged ownership message: {0}")]
    Message(#[from] lazaret_runtime::records::process::MessageError),
}

impl From<StoreError> for LedgerError {
    fn from(e: StoreError) -> Self {
        Self::Store(Box::new(e))
    }
}

impl From<AckRefusal> for LedgerError {
    fn from(e: AckRefusal) -> Self {
        Self::Ack(Box::new(e))
    }
}

/// Proof that the exact staged tuple is durable (HC store commit, or HC's
/// exact echoed acknowledgement for an RS-launched child). Only this crate
/// constructs it; the broker releases a barrier only with it.
#[derive(Debug)]
pub struct DurablyStaged(StagedProcessOwnership);

impl DurablyStaged {
    pub(crate) fn new(staged: StagedProcessOwnership) -> Self {
        Self(staged)
    }

    pub(crate) fn staged(&self) -> &StagedProcessOwnership {
        &self.0
    }
}

/// The tuple fields a ledger contributes to the staged ownership.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagingContext {
    pub domain_id: DomainId,
    pub generation_id: GenerationId,
    pub coordinator_id: CoordinatorId,
    pub slot: HostProcessOwnershipSlot,
}

/// The durable side of one acquisition.
pub trait AcquisitionLedger {
    fn context(&self) -> StagingContext;
    /// Step 1: the owning participant or terminal intent exists durably,
    /// without positive process ownership in this slot.
    fn persist_intent(&mut self) -> Result<(), LedgerError>;
    /// Step 6: returns only once the exact tuple is durable.
    fn persist_staged(
        &mut self,
        staged: &StagedProcessOwnership,
    ) -> Result<DurablyStaged, LedgerError>;
    /// Step 9: promotes the exact staged identity to committed.
    fn persist_committed(&mut self, staged: &StagedProcessOwnership) -> Result<(), LedgerError>;
}
