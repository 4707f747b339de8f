//! The three-phase process slot (spec 3.3: "Every durable host-process slot is
//! exactly unassigned, staged with a current pidfs process identity, or
//! committed with current host-process ownership").
use super::OwnershipError;
use crate::records::process::{
    BootId, HostProcessOwnershipSlot, PersistedHostProcessOwnership as Phase,
    PidfsProcessIdentityV1, SlotEdge,
};

fn current(
    field: &'static str,
    identity: &PidfsProcessIdentityV1,
    boot: BootId,
) -> Result<(), OwnershipError> {
    if identity.authority.boot_id != boot {
        return Err(OwnershipError::ForeignBoot {
            field,
            found: identity.authority.boot_id,
            current: boot,
        });
    }
    Ok(())
}

/// Checks one acquisition step of a slot. Unchanged is always allowed. An
/// acquired child moves Unassigned -> Staged -> Committed with the exact same
/// identity; a direct existing-process edge enters Committed directly. Every
/// other move (regress, replace, skip staging) is refused.
pub fn check_advance(
    field: &'static str,
    slot: HostProcessOwnershipSlot,
    prev: &Phase,
    next: &Phase,
    boot: BootId,
) -> Result<(), OwnershipError> {
    let refuse = |reason| OwnershipError::SlotTransition {
        field,
        from: prev.phase_name(),
        to: next.phase_name(),
        reason,
    };
    match (prev, next) {
        _ if prev == next => Ok(()),
        (Phase::Unassigned, Phase::Staged(identity)) => match slot.edge() {
            SlotEdge::AcquiredChild => current(field, identity, boot),
            SlotEdge::DirectExisting => Err(refuse(
                "a direct existing-process edge is entered by an already committed process, not staged",
            )),
        },
        (Phase::Unassigned, Phase::Committed(committed)) => match slot.edge() {
            SlotEdge::DirectExisting => current(field, &committed.identity, boot),
            SlotEdge::AcquiredChild => Err(refuse("an acquired child must be staged first")),
        },
        (Phase::Staged(staged), Phase::Committed(committed)) => {
            if committed.identity != *staged {
                return Err(refuse("committed identity differs from the staged identity"));
            }
            current(field, staged, boot)
        }
        _ => Err(refuse(
            "recorded process evidence cannot be replaced, regressed or cleared",
        )),
    }
}

/// Whether a slot holds current committed ownership (the only serviceable
/// phase).
pub fn is_current_committed(phase: &Phase, boot: BootId) -> bool {
    matches!(phase, Phase::Committed(c) if c.identity.authority.boot_id == boot)
}
