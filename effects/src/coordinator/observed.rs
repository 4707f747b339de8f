//! What the Host Coordinator observes after a model step's effect (the
//! CCF/etcd trace-validation approach): the Domain Store's record of the
//! generation, read back after the step's transaction committed and mapped
//! into the model's durable variables (`decision`, `part`, `slot`) by one
//! function, [`durable_view`]. Each trace line carries it as `observed`, and
//! `lazaret trace replay` checks that the model's successor equals it, so a
//! step whose effect wrote something else than the step says fails replay.
//! Bootstrap recovery compares the store with a dead coordinator's trace
//! through the same function.
//!
//! The HC holds the Domain Store's only handle under the flock, so nothing
//! else writes between the step's transaction and this read.
//!
//! The mapping (docs/durable-state.md "The model's durable variables"):
//! - `decision`: the generation row's `durable_decision`, by name;
//! - `part[r]`: no participant row is `None`; `Intent` without ownership is
//!   `Intent`, with a snapshot `Acquiring`; every other state by name;
//! - `slot[ps]`: the owning participant's snapshot slot: `Staged`,
//!   `Committed`, or `Unassigned` (also when absent);
//! - `termsLeft`: some Session Terminal row of the generation is not
//!   `Clean` although its session is not one the observing coordinator
//!   serves (spec 3.4: a retained release; for a recovery, which serves
//!   none, every unclean row, the dead coordinator's sessions included).
//! - `terminalRow`: per session slot, the Session Terminal row of the
//!   session the coordinator serves there: `None` (no row, a clean one, or
//!   no session served), `BareIntent` (Intent with nothing acquired),
//!   `Intent` (an interactive session's) or `PipedIntent` (a piped
//!   session's: its row stays Intent while it runs), `Running` or
//!   `ReleaseIntent`; replay checks it is one the model's `sess[s]` allows
//!   (`TerminalRow::allowed`).
use super::launch::participant_role;
use crate::domain_store::{DomainStore, StoreError};
use lazaret_generated::lazaret::{Decision, Part, ProcSlots, Roles, Slot};
use lazaret_runtime::coordinator::host_model::{DurableView, TerminalRow};
use lazaret_runtime::records::ids::{GenerationId, SessionId};
use lazaret_runtime::records::participant::ParticipantState;
use lazaret_runtime::records::process::{HostProcessOwnershipSlot, PersistedHostProcessOwnership};
use lazaret_runtime::records::terminal::SessionTerminalState;

/// A session the observing coordinator serves: its Domain Store id, and
/// whether it is piped (its terminal is never recorded Running: the
/// running state records a PTY, schemas.md "Session terminal ownership").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    pub session: SessionId,
    pub piped: bool,
}

/// Each session slot of the model (by its model value's name) with the
/// session the observing coordinator serves there, if any.
pub type ServedSlots = Vec<(String, Option<Served>)>;

/// Where a step's effect is read back: the Domain Store, the generation,
/// and the sessions the observing coordinator serves, by slot (their
/// terminals are its own, not left over).
#[derive(Clone, Debug)]
pub struct Observer<'s, 'l> {
    store: &'s DomainStore<'l>,
    generation: GenerationId,
    slots: ServedSlots,
}

impl<'s, 'l> Observer<'s, 'l> {
    pub fn new(store: &'s DomainStore<'l>, generation: GenerationId, slots: ServedSlots) -> Self {
        Self {
            store,
            generation,
            slots,
        }
    }

    /// [`durable_view`] of the generation.
    pub fn read(&self) -> Result<Option<DurableView>, ObserveError> {
        durable_view(self.store, self.generation, &self.slots)
    }
}

/// Why the store's record could not be read as the model's variables.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("reading the generation back from the Domain Store: {0}")]
    Store(#[from] StoreError),
    #[error("durable decision `{0}` is not a model value")]
    UnknownDecision(String),
}

/// The Domain Store's record of generation `g` as the model's durable
/// variables, read by a coordinator serving the sessions of `slots`;
/// `None` when the store has no such generation (before `StartGeneration`
/// writes it).
pub fn durable_view(
    store: &DomainStore<'_>,
    g: GenerationId,
    slots: &[(String, Option<Served>)],
) -> Result<Option<DurableView>, ObserveError> {
    let served: Vec<SessionId> = slots
        .iter()
        .filter_map(|(_, s)| s.map(|s| s.session))
        .collect();
    let Some(document) = store.generation_view(g, &served)? else {
        return Ok(None);
    };
    let decision_name = document.generation.durable_decision.as_str();
    let decision = Decision::from_name(decision_name)
        .ok_or_else(|| ObserveError::UnknownDecision(decision_name.to_owned()))?;
    let participant = |r: Roles| {
        document
            .participants
            .iter()
            .find(|p| p.role == participant_role(r))
    };
    let part = Roles::ALL
        .iter()
        .map(|r| match participant(*r) {
            None => Part::None,
            Some(p) => match p.state {
                ParticipantState::Intent if p.ownership.is_none() => Part::Intent,
                ParticipantState::Intent => Part::Acquiring,
                ParticipantState::LeaseHeld => Part::LeaseHeld,
                ParticipantState::Prepared => Part::Prepared,
                ParticipantState::Committed => Part::Committed,
                ParticipantState::ReleaseIntent => Part::ReleaseIntent,
                ParticipantState::Clean => Part::Clean,
            },
        })
        .collect();
    let slot = ProcSlots::ALL
        .iter()
        .map(|ps| {
            use HostProcessOwnershipSlot as S;
            let (role, slot) = match ps {
                ProcSlots::SandboxRuntimeSupervisor => {
                    (Roles::Sandbox, S::SandboxRuntimeSupervisor)
                }
                ProcSlots::SandboxAttachedRunsc => (Roles::Sandbox, S::SandboxAttachedRunsc),
                ProcSlots::GitRoutingDaemon => (Roles::GitRouting, S::GitRoutingDaemon),
                ProcSlots::HelperConnectivityHelper => (Roles::Helper, S::HelperConnectivityHelper),
            };
            match participant(role)
                .and_then(|p| p.ownership.as_ref())
                .and_then(|o| o.slot(slot))
            {
                Some(PersistedHostProcessOwnership::Staged(_)) => Slot::Staged,
                Some(PersistedHostProcessOwnership::Committed(_)) => Slot::Committed,
                Some(PersistedHostProcessOwnership::Unassigned) | None => Slot::Unassigned,
            }
        })
        .collect();
    let row = |served: &Served| {
        let terminal = document
            .served_terminals
            .iter()
            .find(|t| t.session_id == served.session);
        match terminal.map(|t| (t.state, t.is_bare_intent())) {
            None | Some((SessionTerminalState::Clean, _)) => TerminalRow::None,
            Some((SessionTerminalState::Intent, true)) => TerminalRow::BareIntent,
            Some((SessionTerminalState::Intent, false)) if served.piped => TerminalRow::PipedIntent,
            Some((SessionTerminalState::Intent, false)) => TerminalRow::Intent,
            Some((SessionTerminalState::Running, _)) => TerminalRow::Running,
            Some((SessionTerminalState::ReleaseIntent, _)) => TerminalRow::ReleaseIntent,
        }
    };
    let terms_left = document.other_terminal_left;
    let rows = slots
        .iter()
        .map(|(name, s)| (name.clone(), s.as_ref().map_or(TerminalRow::None, row)))
        .collect();
    Ok(Some(DurableView {
        decision,
        part,
        slot,
        terms_left: Some(terms_left),
        rows: Some(rows),
    }))
}
