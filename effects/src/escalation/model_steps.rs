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

impl StepRefused {
    /// The step refused.
    pub fn step(&self) -> EscalationStep {
        match self {
            Self::NotServed { step, .. }
            | Self::Disabled { step, .. }
            | Self::Unanswered { step } => *step,
        }
    }
}

/// The most steps taken together ([`EscalationSteps::take`]): a result's
/// `DeliverResult` and `CollectResult`.
pub const TOGETHER_MAX: usize = 2;

/// Takes the escalation steps of a session's request.
pub trait EscalationSteps: Sync {
    /// Checks each of `steps` (one to [`TOGETHER_MAX`]) of `session`
    /// against the model and takes it, in order and together: no other
    /// step of the model comes between them. The first refused ends them
    /// (the ones before it stay taken) and changes nothing.
    fn take(&self, session: SessionId, steps: &[EscalationStep]) -> Result<(), StepRefused>;
}
