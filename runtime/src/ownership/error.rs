//! Why a snapshot transition was refused.
use crate::records::codec::CodecError;
use crate::records::process::BootId;

#[derive(Debug, thiserror::Error)]
pub enum OwnershipError {
    #[error("{record} is {found}; the operation {operation} requires {expected}")]
    WrongState {
        record: &'static str,
        operation: &'static str,
        found: String,
        expected: &'static str,
    },
    #[error("participant role {role} cannot hold a {snapshot} snapshot")]
    RoleMismatch { role: String, snapshot: String },
    #[error("recorded evidence {field} cannot be replaced")]
    EvidenceReplaced { field: &'static str },
    #[error("recorded evidence {field} cannot be cleared")]
    EvidenceCleared { field: &'static str },
    #[error("process slot {field} cannot move {from} -> {to}: {reason}")]
    SlotTransition {
        field: &'static str,
        from: &'static str,
        to: &'static str,
        reason: &'static str,
    },
    #[error("process slot {field} names boot {found}, but only current-boot ({current}) identities may be staged or committed")]
    ForeignBoot {
        field: &'static str,
        found: BootId,
        current: BootId,
    },
    #[error(
        "an acquisition snapshot must record at least one field; an empty snapshot encodes Clean"
    )]
    EmptyAcquisition,
    #[error("a bare Intent has no snapshot; {operation} requires a non-empty acquisition snapshot first")]
    BareIntent { operation: &'static str },
    #[error(
        "a bare Intent becomes Clean only after the sealed runtime-absence check, not {proof}"
    )]
    BareIntentNeedsSealedAbsence { proof: String },
    #[error("{role} cannot become active: required evidence {field} is absent")]
    MissingEvidence { role: String, field: &'static str },
    #[error("{role} cannot become active: process slot {field} is {phase}, not current Committed")]
    NotCommitted {
        role: String,
        field: &'static str,
        phase: &'static str,
    },
    #[error("lease_state cannot move {from} -> {to} ({operation})")]
    LeasePhase {
        from: String,
        to: String,
        operation: &'static str,
    },
    #[error("network readiness evidence does not match: {what}")]
    ReadinessMismatch { what: &'static str },
    #[error("released State Anchor evidence is only for a PreparedLower participant and only once; {reason}")]
    ReleaseEvidence { reason: &'static str },
    #[error("cannot fingerprint the network readiness identity: {0}")]
    Fingerprint(#[from] CodecError),
}
