//! Session Terminal snapshot transitions (spec 3.4; schemas.md "Session
//! terminal ownership").
use super::evidence::{check_monotonic, Evidence};
use super::slot::is_current_committed;
use super::{AbsenceProof, OwnershipError, RuleContext};
use crate::records::ids::{GenerationId, SessionId};
use crate::records::terminal::{SessionTerminal, SessionTerminalState, TerminalSnapshot};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TerminalOp {
    /// Intent -> Intent with a monotonically extended, non-empty snapshot.
    Acquire(TerminalSnapshot),
    /// Intent -> Running (spec 3.4 step 4): one transaction promotes the exact
    /// HC and exec-client ownership and records PTY, container and guest.
    Run(TerminalSnapshot),
    /// Partial or running -> ReleaseIntent keeping all evidence.
    BeginRelease,
    /// ReleaseIntent (or a bare Intent after the sealed runtime-absence
    /// check) -> Clean with every field cleared.
    Clean(AbsenceProof),
}

impl TerminalOp {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Acquire(_) => "Acquire",
            Self::Run(_) => "Run",
            Self::BeginRelease => "BeginRelease",
            Self::Clean(_) => "Clean",
        }
    }
}

pub fn bare_intent(generation_id: GenerationId, session_id: SessionId) -> SessionTerminal {
    SessionTerminal {
        generation_id,
        session_id,
        state: SessionTerminalState::Intent,
        snapshot: TerminalSnapshot::default(),
    }
}

fn wrong_state(t: &SessionTerminal, op: &TerminalOp, expected: &'static str) -> OwnershipError {
    OwnershipError::WrongState {
        record: "session terminal",
        operation: op.name(),
        found: format!("{:?}", t.state),
        expected,
    }
}

fn check_running(s: &TerminalSnapshot, ctx: &RuleContext<'_>) -> Result<(), OwnershipError> {
    let missing = |field| {
        Err(OwnershipError::MissingEvidence {
            role: "SessionTerminal".to_owned(),
            field,
        })
    };
    if s.container_id.is_none() {
        return missing("container_id");
    }
    if s.pty_master.is_none() {
        return missing("pty_master");
    }
    if s.guest_process.is_none() {
        return missing("guest_process");
    }
    for (field, phase) in [
        ("host_coordinator", &s.host_coordinator),
        ("exec_client", &s.exec_client),
    ] {
        if !is_current_committed(phase, ctx.current_boot) {
            return Err(OwnershipError::NotCommitted {
                role: "SessionTerminal".to_owned(),
                field,
                phase: phase.phase_name(),
            });
        }
    }
    Ok(())
}

pub fn apply(
    t: &SessionTerminal,
    op: &TerminalOp,
    ctx: &RuleContext<'_>,
) -> Result<SessionTerminal, OwnershipError> {
    let bare = t.snapshot.is_empty();
    match op {
        TerminalOp::Acquire(next) | TerminalOp::Run(next) => {
            if t.state != SessionTerminalState::Intent {
                return Err(wrong_state(t, op, "Intent"));
            }
            check_monotonic(&Evidence::pairs(&t.snapshot, next), &[], ctx.current_boot)?;
            let state = if let TerminalOp::Run(_) = op {
                if bare {
                    return Err(OwnershipError::BareIntent { operation: "Run" });
                }
                check_running(next, ctx)?;
                SessionTerminalState::Running
            } else {
                if next.is_empty() {
                    return Err(OwnershipError::EmptyAcquisition);
                }
                SessionTerminalState::Intent
            };
            Ok(SessionTerminal {
                state,
                snapshot: next.clone(),
                ..t.clone()
            })
        }
        TerminalOp::BeginRelease => {
            if !matches!(
                t.state,
                SessionTerminalState::Intent | SessionTerminalState::Running
            ) {
                return Err(wrong_state(t, op, "Intent with evidence, or Running"));
            }
            if bare {
                return Err(OwnershipError::BareIntent {
                    operation: "BeginRelease",
                });
            }
            Ok(SessionTerminal {
                state: SessionTerminalState::ReleaseIntent,
                ..t.clone()
            })
        }
        TerminalOp::Clean(proof) => {
            match t.state {
                SessionTerminalState::ReleaseIntent => {}
                SessionTerminalState::Intent if bare => {
                    if *proof != AbsenceProof::SealedRuntimeAbsence {
                        return Err(OwnershipError::BareIntentNeedsSealedAbsence {
                            proof: format!("{proof:?}"),
                        });
                    }
                }
                _ => return Err(wrong_state(t, op, "ReleaseIntent, or a bare Intent")),
            }
            Ok(SessionTerminal {
                state: SessionTerminalState::Clean,
                snapshot: TerminalSnapshot::default(),
                ..t.clone()
            })
        }
    }
}

/// Structural well-formedness of a stored terminal row.
pub fn check_wellformed(t: &SessionTerminal) -> Result<(), OwnershipError> {
    let empty = t.snapshot.is_empty();
    let ok = match t.state {
        SessionTerminalState::Intent => true,
        SessionTerminalState::Running | SessionTerminalState::ReleaseIntent => !empty,
        SessionTerminalState::Clean => empty,
    };
    if ok {
        Ok(())
    } else {
        Err(OwnershipError::WrongState {
            record: "session terminal",
            operation: "read",
            found: format!(
                "{:?} with an {} snapshot",
                t.state,
                if empty { "empty" } else { "non-empty" }
            ),
            expected: "Running/ReleaseIntent with evidence, Clean without",
        })
    }
}
