//! Participant snapshot transitions (schemas.md "Participant ownership").
use super::evidence::{check_monotonic, Evidence, Pair};
use super::required::check_active;
use super::{AbsenceProof, OwnershipError, RuleContext};
use crate::records::ids::GenerationId;
use crate::records::participant::{
    LeaseState, Participant, ParticipantOwnership, ParticipantRole, ParticipantState,
    StateAnchorReleaseEvidence,
};

/// Every participant mutation the store accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParticipantOp {
    /// Intent -> Intent with a monotonically extended, non-empty snapshot.
    Acquire(ParticipantOwnership),
    /// Intent (with a snapshot) -> the role's active state; the snapshot may
    /// extend in the same transaction and must satisfy the serviceable table.
    Activate(ParticipantOwnership),
    /// Partial or active -> ReleaseIntent, keeping every recorded value. A
    /// PreparedLower moves its lease phase to ReleaseIntent and may add the
    /// released State Anchor evidence.
    BeginRelease {
        released_state_anchor: Option<StateAnchorReleaseEvidence>,
    },
    /// ReleaseIntent (or a bare Intent after the sealed runtime-absence
    /// check) -> Clean with the explicit empty snapshot.
    Clean(AbsenceProof),
}

impl ParticipantOp {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Acquire(_) => "Acquire",
            Self::Activate(_) => "Activate",
            Self::BeginRelease { .. } => "BeginRelease",
            Self::Clean(_) => "Clean",
        }
    }
}

/// The bare role-bound Intent: no ownership snapshot.
pub fn bare_intent(generation_id: GenerationId, role: ParticipantRole) -> Participant {
    Participant {
        generation_id,
        role,
        state: ParticipantState::Intent,
        ownership: None,
    }
}

pub fn snapshot_pairs<'a>(
    prev: &'a ParticipantOwnership,
    next: &'a ParticipantOwnership,
) -> Option<Vec<Pair<'a>>> {
    use ParticipantOwnership as O;
    Some(match (prev, next) {
        (O::PreparedLower(a), O::PreparedLower(b)) => Evidence::pairs(a, b),
        (O::StateAnchor(a), O::StateAnchor(b)) => Evidence::pairs(a, b),
        (O::GitRouting(a), O::GitRouting(b)) => Evidence::pairs(a, b),
        (O::Network(a), O::Network(b)) => Evidence::pairs(a, b),
        (O::Helper(a), O::Helper(b)) => Evidence::pairs(a, b),
        (O::Sandbox(a), O::Sandbox(b)) => Evidence::pairs(a, b),
        (O::Publication(a), O::Publication(b)) => Evidence::pairs(a, b),
        _ => return None,
    })
}

pub fn snapshot_is_empty(snapshot: &ParticipantOwnership) -> bool {
    use ParticipantOwnership as O;
    match snapshot {
        O::PreparedLower(s) => s.is_empty(),
        O::StateAnchor(s) => s.is_empty(),
        O::GitRouting(s) => s.is_empty(),
        O::Network(s) => s.is_empty(),
        O::Helper(s) => s.is_empty(),
        O::Sandbox(s) => s.is_empty(),
        O::Publication(s) => s.is_empty(),
    }
}

fn wrong_state(p: &Participant, op: &ParticipantOp, expected: &'static str) -> OwnershipError {
    OwnershipError::WrongState {
        record: "participant",
        operation: op.name(),
        found: format!("{:?}/{:?}", p.role, p.state),
        expected,
    }
}

fn lease_of(snapshot: &ParticipantOwnership) -> Option<LeaseState> {
    match snapshot {
        ParticipantOwnership::PreparedLower(s) => s.lease_state,
        _ => None,
    }
}

fn released_of(snapshot: &ParticipantOwnership) -> Option<&StateAnchorReleaseEvidence> {
    match snapshot {
        ParticipantOwnership::PreparedLower(s) => s.released_state_anchor.as_ref(),
        _ => None,
    }
}

/// Checks `next` extends `prev` (or the empty snapshot for a bare Intent).
/// `lease_step` is the lease-phase move this operation may make.
fn check_extension(
    p: &Participant,
    next: &ParticipantOwnership,
    lease_step: (Option<LeaseState>, LeaseState),
    operation: &'static str,
    ctx: &RuleContext<'_>,
) -> Result<(), OwnershipError> {
    if next.role() != p.role {
        return Err(OwnershipError::RoleMismatch {
            role: format!("{:?}", p.role),
            snapshot: format!("{:?}", next.role()),
        });
    }
    let empty = p.role.empty_snapshot();
    let prev = p.ownership.as_ref().unwrap_or(&empty);
    let pairs = snapshot_pairs(prev, next).ok_or_else(|| OwnershipError::RoleMismatch {
        role: format!("{:?}", prev.role()),
        snapshot: format!("{:?}", next.role()),
    })?;
    check_monotonic(
        &pairs,
        &["lease_state", "released_state_anchor"],
        ctx.current_boot,
    )?;
    if released_of(prev) != released_of(next) {
        return Err(OwnershipError::ReleaseEvidence {
            reason: "it is recorded only by BeginRelease",
        });
    }
    let (from, to) = (lease_of(prev), lease_of(next));
    let allowed = from == to || (from == lease_step.0 && to == Some(lease_step.1));
    if !allowed {
        return Err(OwnershipError::LeasePhase {
            from: format!("{from:?}"),
            to: format!("{to:?}"),
            operation,
        });
    }
    Ok(())
}

/// Applies `op` to `p`; returns the next row or why the move is illegal.
pub fn apply(
    p: &Participant,
    op: &ParticipantOp,
    ctx: &RuleContext<'_>,
) -> Result<Participant, OwnershipError> {
    let active = p.role.active_state();
    match op {
        ParticipantOp::Acquire(next) => {
            if p.state != ParticipantState::Intent {
                return Err(wrong_state(p, op, "Intent"));
            }
            check_extension(p, next, (None, LeaseState::Intent), "Acquire", ctx)?;
            if snapshot_is_empty(next) {
                return Err(OwnershipError::EmptyAcquisition);
            }
            Ok(Participant {
                ownership: Some(next.clone()),
                ..p.clone()
            })
        }
        ParticipantOp::Activate(next) => {
            if p.state != ParticipantState::Intent {
                return Err(wrong_state(p, op, "Intent"));
            }
            if p.ownership.is_none() {
                return Err(OwnershipError::BareIntent {
                    operation: "Activate",
                });
            }
            check_extension(
                p,
                next,
                (Some(LeaseState::Intent), LeaseState::LeaseHeld),
                "Activate",
                ctx,
            )?;
            check_active(next, ctx)?;
            Ok(Participant {
                state: active,
                ownership: Some(next.clone()),
                ..p.clone()
            })
        }
        ParticipantOp::BeginRelease {
            released_state_anchor,
        } => {
            if p.state != ParticipantState::Intent && p.state != active {
                return Err(wrong_state(
                    p,
                    op,
                    "Intent with a snapshot, or the active state",
                ));
            }
            let Some(mut snapshot) = p.ownership.clone() else {
                return Err(OwnershipError::BareIntent {
                    operation: "BeginRelease",
                });
            };
            match (&mut snapshot, released_state_anchor) {
                (ParticipantOwnership::PreparedLower(s), evidence) => {
                    if s.lease_state.is_some() {
                        s.lease_state = Some(LeaseState::ReleaseIntent);
                    }
                    if let Some(evidence) = evidence {
                        if s.released_state_anchor.is_some() {
                            return Err(OwnershipError::ReleaseEvidence {
                                reason: "it is already recorded and immutable",
                            });
                        }
                        s.released_state_anchor = Some(evidence.clone());
                    }
                }
                (_, Some(_)) => {
                    return Err(OwnershipError::ReleaseEvidence {
                        reason: "this participant is not a PreparedLower",
                    })
                }
                (_, None) => {}
            }
            Ok(Participant {
                state: ParticipantState::ReleaseIntent,
                ownership: Some(snapshot),
                ..p.clone()
            })
        }
        ParticipantOp::Clean(proof) => {
            match (p.state, &p.ownership) {
                (ParticipantState::ReleaseIntent, _) => {}
                (ParticipantState::Intent, None) => {
                    if *proof != AbsenceProof::SealedRuntimeAbsence {
                        return Err(OwnershipError::BareIntentNeedsSealedAbsence {
                            proof: format!("{proof:?}"),
                        });
                    }
                }
                _ => return Err(wrong_state(p, op, "ReleaseIntent, or a bare Intent")),
            }
            Ok(Participant {
                state: ParticipantState::Clean,
                ownership: Some(p.role.empty_snapshot()),
                ..p.clone()
            })
        }
    }
}

/// Structural well-formedness of a stored row: the encoding rules that every
/// reachable row satisfies (used when rows are read and by property tests).
pub fn check_wellformed(p: &Participant) -> Result<(), OwnershipError> {
    if let Some(snapshot) = &p.ownership {
        if snapshot.role() != p.role {
            return Err(OwnershipError::RoleMismatch {
                role: format!("{:?}", p.role),
                snapshot: format!("{:?}", snapshot.role()),
            });
        }
    }
    let bad = |expected| OwnershipError::WrongState {
        record: "participant",
        operation: "read",
        found: format!(
            "{:?}/{:?} with {}",
            p.role,
            p.state,
            match &p.ownership {
                None => "no snapshot",
                Some(s) if snapshot_is_empty(s) => "an empty snapshot",
                Some(_) => "a non-empty snapshot",
            }
        ),
        expected,
    };
    let empty = p.ownership.as_ref().map(snapshot_is_empty);
    match p.state {
        ParticipantState::Intent if empty == Some(true) => {
            Err(bad("Intent: no snapshot or a non-empty snapshot"))
        }
        ParticipantState::Intent => Ok(()),
        ParticipantState::ReleaseIntent if empty != Some(false) => {
            Err(bad("ReleaseIntent: a non-empty snapshot"))
        }
        ParticipantState::ReleaseIntent => Ok(()),
        ParticipantState::Clean if empty != Some(true) => {
            Err(bad("Clean: the explicit empty snapshot"))
        }
        ParticipantState::Clean => Ok(()),
        state if state != p.role.active_state() => Err(bad("the role's own active state")),
        _ if empty != Some(false) => Err(bad("an active state: a complete snapshot")),
        _ => Ok(()),
    }
}
