//! Generation mailbox record transitions. The mailbox paths are lookup hints
//! fixed at Intent; only the state moves (spec 3.6: sessions and the
//! generation mailbox are separate generation records).
use super::{AbsenceProof, OwnershipError};
use crate::records::domain::Mailbox;
use crate::records::participant::ParticipantState;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MailboxOp {
    /// Intent -> Committed once the mailbox files exist.
    Commit,
    /// Intent or Committed -> ReleaseIntent.
    BeginRelease,
    /// ReleaseIntent -> Clean (Intent -> Clean only after sealed absence).
    Clean(AbsenceProof),
}

pub fn apply(m: &Mailbox, op: MailboxOp) -> Result<Mailbox, OwnershipError> {
    use ParticipantState as S;
    let next = match (m.state, op) {
        (S::Intent, MailboxOp::Commit) => S::Committed,
        (S::Intent | S::Committed, MailboxOp::BeginRelease) => S::ReleaseIntent,
        (S::ReleaseIntent, MailboxOp::Clean(_)) => S::Clean,
        (S::Intent, MailboxOp::Clean(AbsenceProof::SealedRuntimeAbsence)) => S::Clean,
        (S::Intent, MailboxOp::Clean(proof)) => {
            return Err(OwnershipError::BareIntentNeedsSealedAbsence {
                proof: format!("{proof:?}"),
            })
        }
        (state, op) => {
            return Err(OwnershipError::WrongState {
                record: "mailbox",
                operation: match op {
                    MailboxOp::Commit => "Commit",
                    MailboxOp::BeginRelease => "BeginRelease",
                    MailboxOp::Clean(_) => "Clean",
                },
                found: format!("{state:?}"),
                expected: "Intent -> Committed -> ReleaseIntent -> Clean",
            })
        }
    };
    Ok(Mailbox {
        state: next,
        ..m.clone()
    })
}
