//! HC's side of step 6 for RS-launched children: persist the received staged
//! tuple and answer with the exact echo (spec 3.3; schemas.md
//! `ProcessOwnershipCommitAck`). The RS releases its barrier only on that echo.
use super::ops::SlotTarget;
use super::{DomainStore, StoreError, StoreOp};
use lazaret_runtime::records::process::{
    ProcessOwnershipCommitAck, ProcessOwnershipMessageVersion, StagedProcessOwnership,
};

/// Decodes (version first), checks the tuple names this Domain, generation
/// and coordinator, stages it durably and returns the acknowledgement bytes.
pub fn accept_staged_ownership(
    store: &DomainStore<'_>,
    message: &[u8],
) -> Result<Vec<u8>, StoreError> {
    let staged = StagedProcessOwnership::decode(message)?;
    let g = store
        .generation_row(staged.generation_id)?
        .ok_or_else(|| StoreError::Missing {
            what: format!("generation {}", staged.generation_id),
        })?;
    if g.domain_id != staged.domain_id || g.coordinator_id != staged.coordinator_id {
        return Err(StoreError::Mismatch {
            what: format!(
                "staged ownership Domain/coordinator for generation {}",
                staged.generation_id
            ),
        });
    }
    if staged.slot.participant_role().is_none() {
        return Err(StoreError::Mismatch {
            what: format!(
                "slot {:?} (RS-launched children fill participant slots)",
                staged.slot
            ),
        });
    }
    store.apply(&[StoreOp::StageProcess {
        target: SlotTarget::Participant {
            generation: staged.generation_id,
            slot: staged.slot,
        },
        identity: staged.identity,
    }])?;
    Ok(ProcessOwnershipCommitAck {
        version: ProcessOwnershipMessageVersion::V1,
        committed: staged,
    }
    .encode()?)
}
