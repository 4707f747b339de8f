//! The Runtime Supervisor side of step 6: staged ownership goes to HC, and
//! the barrier may be released only by HC's exact echoed acknowledgement.
use super::ledger::{AcquisitionLedger, DurablyStaged, LedgerError, StagingContext};
use lazaret_runtime::ownership::ack::AckGate;
use lazaret_runtime::records::process::{MessageError, StagedProcessOwnership};

/// Why a step over the link to the Host Coordinator failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The channel itself failed (send, receive, decode).
    #[error("the coordinator channel: {0}")]
    Channel(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// HC refused the step; its reason as it sent it.
    #[error("the coordinator refused: {0}")]
    Refused(String),
    /// HC answered with another message than the step's.
    #[error("the coordinator answered {got} where {expected} was expected")]
    Unexpected { expected: &'static str, got: String },
    /// The committed ownership could not be encoded.
    #[error("encoding the committed ownership: {0}")]
    Encode(#[from] MessageError),
}

/// The authenticated generation channel from RS to HC (the transport arrives
/// with the launch path). `receive_ack` returns `Ok(None)` when the deadline
/// passes without an answer.
pub trait CoordinatorLink {
    fn confirm_intent(&mut self, context: &StagingContext) -> Result<(), LinkError>;
    fn send_staged(&mut self, message: &[u8]) -> Result<(), LinkError>;
    fn receive_ack(&mut self) -> Result<Option<Vec<u8>>, LinkError>;
    fn report_committed(&mut self, staged: &StagedProcessOwnership) -> Result<(), LinkError>;
}

/// An [`AcquisitionLedger`] that stages through HC and its acknowledgement.
#[derive(Debug)]
pub struct RemoteLedger<L> {
    link: L,
    gate: AckGate,
    context: StagingContext,
}

impl<L: CoordinatorLink> RemoteLedger<L> {
    pub fn new(link: L, context: StagingContext) -> Self {
        Self {
            link,
            gate: AckGate::new(),
            context,
        }
    }
}

impl<L: CoordinatorLink> AcquisitionLedger for RemoteLedger<L> {
    fn context(&self) -> StagingContext {
        self.context
    }

    fn persist_intent(&mut self) -> Result<(), LedgerError> {
        self.link
            .confirm_intent(&self.context)
            .map_err(LedgerError::Link)
    }

    fn persist_staged(
        &mut self,
        staged: &StagedProcessOwnership,
    ) -> Result<DurablyStaged, LedgerError> {
        self.gate.arm(*staged)?;
        let sent = staged
            .encode()
            .map_err(LedgerError::from)
            .and_then(|m| self.link.send_staged(&m).map_err(LedgerError::Link));
        if let Err(e) = sent {
            // Nothing can acknowledge this barrier any more.
            self.gate.lost();
            return Err(e);
        }
        match self.link.receive_ack().map_err(LedgerError::Link)? {
            None => Err(self.gate.lost().into()),
            Some(bytes) => Ok(DurablyStaged::new(self.gate.receive(&bytes)?)),
        }
    }

    fn persist_committed(&mut self, staged: &StagedProcessOwnership) -> Result<(), LedgerError> {
        self.link
            .report_committed(staged)
            .map_err(LedgerError::Link)
    }
}
