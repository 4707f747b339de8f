//! How the mailbox service takes its model steps (spec 3.8;
//! `lazaret_runtime::escalation::steps`): through an [`EscalationSteps`]
//! passed in explicitly. The Host Coordinator's is its event loop, which
//! checks each step against its model, takes it into the model trace and
//! answers; tests pass a model of their own.
use lazaret_runtime::escalation::steps::EscalationStep;
use lazaret_runtime::records::ids::SessionId;

/// Why a step was not taken: the request goes no further in the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepRefused {
    /// The session is not one the coordinator serves (any more).
    #[error("{step}: session {session} is not served")]
    NotServed {
        step: EscalationStep,
        session: SessionId,
    },
    /// The model does not enable the step now (its session closed, the
    /// runtime ended).
    #[error("{step}: not enabled in the model: {why}")]
    Disabled { step: EscalationStep, why: String },
    /// The coordinator's event loop has stopped serving, or did not answer
    /// in time.
    #[error("{step}: the coordinator did not take it")]
    Unanswered { step: EscalationStep },
}

/// Takes one escalation step of a session's request.
pub trait EscalationSteps: Sync {
    /// Checks `step` of `session` against the model and takes it; a
    /// refusal changes nothing.
    fn take(&self, session: SessionId, step: EscalationStep) -> Result<(), StepRefused>;
}
