//! Pure snapshot-transition rules of schemas.md "Participant ownership" and
//! "Session terminal ownership" (spec 3.3, 3.4, FR-7, FR-21). The Domain Store
//! applies these rules to every mutation; callers cannot bypass them.
pub mod ack;
pub mod error;
pub mod evidence;
pub mod mailbox;
pub mod participant;
pub mod required;
pub mod slot;
pub mod terminal;

use crate::records::domain::Generation;
use crate::records::process::BootId;

pub use error::OwnershipError;

/// What a rule needs to know beyond the record itself.
#[derive(Debug, Clone, Copy)]
pub struct RuleContext<'a> {
    /// The boot whose pidfs identities are current; only they may be staged
    /// or committed (spec 3.3).
    pub current_boot: BootId,
    /// The generation row that encloses the record.
    pub generation: &'a Generation,
}

/// How absence of every recorded resource was established before Clean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbsenceProof {
    /// Each recorded resource was matched exactly and observed gone.
    ExactAbsence,
    /// Absence observed independently of the recorded identities.
    IndependentAbsence,
    /// The sealed runtime-absence check: no Runtime Supervisor, attached
    /// runsc, container or generation resource remains. The only proof that
    /// lets a bare Intent become Clean.
    SealedRuntimeAbsence,
}
