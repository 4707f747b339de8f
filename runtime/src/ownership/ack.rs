//! The launch-barrier acknowledgement gate (spec 3.3 steps 6-7; schemas.md
//! `ProcessOwnershipCommitAck`). The receiver accepts one matching v1
//! acknowledgement only while that exact barrier is pending; a lost,
//! mismatched, duplicated or unknown-version acknowledgement never releases.
use crate::records::process::{MessageError, ProcessOwnershipCommitAck, StagedProcessOwnership};

#[derive(Debug, thiserror::Error)]
pub enum AckRefusal {
    #[error("no launch barrier is pending: the acknowledgement is a duplicate or unsolicited")]
    NotPending,
    #[error("a launch barrier is already pending for {pending:?}")]
    AlreadyPending {
        pending: Box<StagedProcessOwnership>,
    },
    #[error("acknowledgement echoes {received:?}, but the pending staged tuple is {expected:?}")]
    Mismatch {
        expected: Box<StagedProcessOwnership>,
        received: Box<StagedProcessOwnership>,
    },
    #[error("malformed acknowledgement: {0}")]
    Message(#[from] MessageError),
    #[error("the acknowledgement was lost (no answer before the deadline)")]
    Lost,
    #[error("the gate failed earlier ({reason}); it never releases again")]
    Failed { reason: String },
}

#[derive(Debug)]
enum GateState {
    Idle,
    Pending(StagedProcessOwnership),
    Failed(String),
}

/// Correlates one pending launch barrier with HC's acknowledgement.
#[derive(Debug)]
pub struct AckGate {
    state: GateState,
}

impl Default for AckGate {
    fn default() -> Self {
        Self::new()
    }
}

impl AckGate {
    pub fn new() -> Self {
        Self {
            state: GateState::Idle,
        }
    }

    /// Records the staged tuple whose barrier now waits for its ack.
    pub fn arm(&mut self, staged: StagedProcessOwnership) -> Result<(), AckRefusal> {
        match &self.state {
            GateState::Idle => {
                self.state = GateState::Pending(staged);
                Ok(())
            }
            GateState::Pending(pending) => Err(AckRefusal::AlreadyPending {
                pending: Box::new(*pending),
            }),
            GateState::Failed(reason) => Err(AckRefusal::Failed {
                reason: reason.clone(),
            }),
        }
    }

    /// Consumes an acknowledgement. Returns the staged tuple whose barrier may
    /// be released only for the exact echo of the pending tuple. Any refusal
    /// while pending fails the gate for good (fail closed).
    pub fn receive(&mut self, bytes: &[u8]) -> Result<StagedProcessOwnership, AckRefusal> {
        let expected = match &self.state {
            GateState::Idle => return Err(AckRefusal::NotPending),
            GateState::Failed(reason) => {
                return Err(AckRefusal::Failed {
                    reason: reason.clone(),
                })
            }
            GateState::Pending(expected) => *expected,
        };
        let outcome = match ProcessOwnershipCommitAck::decode(bytes) {
            Err(e) => Err(AckRefusal::Message(e)),
            Ok(ack) if ack.committed != expected => Err(AckRefusal::Mismatch {
                expected: Box::new(expected),
                received: Box::new(ack.committed),
            }),
            Ok(ack) => Ok(ack.committed),
        };
        self.state = match &outcome {
            Ok(_) => GateState::Idle,
            Err(e) => GateState::Failed(e.to_string()),
        };
        outcome
    }

    /// The transport's deadline passed without an acknowledgement.
    pub fn lost(&mut self) -> AckRefusal {
        self.state = GateState::Failed(AckRefusal::Lost.to_string());
        AckRefusal::Lost
    }
}
