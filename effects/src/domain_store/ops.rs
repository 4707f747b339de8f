//! Store mutations: each batch of [`StoreOp`]s is one atomic transaction, and
//! every ownership change goes through the runtime's snapshot rules.
use super::tables::{self, DOMAIN_KEY};
use super::{DomainStore, StoreError};
use lazaret_runtime::ownership::mailbox::{self, MailboxOp};
use lazaret_runtime::ownership::participant::{self, ParticipantOp};
use lazaret_runtime::ownership::terminal::{self, TerminalOp};
use lazaret_runtime::ownership::{OwnershipError, RuleContext};
use lazaret_runtime::records::codec;
use lazaret_runtime::records::domain::{Domain, Generation, Mailbox, Session};
use lazaret_runtime::records::ids::{GenerationId, HostPath, ModelValue, SessionId};
use lazaret_runtime::records::participant::{Participant, ParticipantRole, ParticipantState};
use lazaret_runtime::records::process::{
    HostProcessIdentity, HostProcessOwnershipSlot, PersistedHostProcessOwnership,
    PidfsProcessIdentityV1,
};
use lazaret_runtime::records::terminal::SessionTerminal;
use redb::{ReadableTable, TableDefinition, WriteTransaction};
use serde::{de::DeserializeOwned, Serialize};

/// Where a durable process slot lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotTarget {
    /// A participant slot; the role follows from the slot.
    Participant {
        generation: GenerationId,
        slot: HostProcessOwnershipSlot,
    },
    /// A Session Terminal's HC or exec-client slot.
    Terminal {
        generation: GenerationId,
        session: SessionId,
        slot: HostProcessOwnershipSlot,
    },
}

impl SlotTarget {
    pub fn generation(&self) -> GenerationId {
        match *self {
            Self::Participant { generation, .. } | Self::Terminal { generation, .. } => generation,
        }
    }

    pub fn slot(&self) -> HostProcessOwnershipSlot {
        match *self {
            Self::Participant { slot, .. } | Self::Terminal { slot, .. } => slot,
        }
    }
}

/// Every mutation the Domain Store accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreOp {
    /// Records the Domain (idempotent for an equal record; a different one refuses).
    PutDomain(Domain),
    /// A new generation of the stored Domain.
    InsertGeneration(Generation),
    /// A new value of the protocol model's durable decision.
    SetDurableDecision {
        generation: GenerationId,
        decision: ModelValue,
    },
    /// A bare role-bound Intent (no snapshot).
    InsertParticipantIntent {
        generation: GenerationId,
        role: ParticipantRole,
    },
    Participant {
        generation: GenerationId,
        role: ParticipantRole,
        op: ParticipantOp,
    },
    /// Intent must exist: the slot moves Unassigned -> Staged (spec 3.3 step 6).
    StageProcess {
        target: SlotTarget,
        identity: PidfsProcessIdentityV1,
    },
    /// Staged -> Committed with the same identity (acquired child), or
    /// Unassigned -> Committed (direct existing-process edge).
    CommitProcess {
        target: SlotTarget,
        identity: PidfsProcessIdentityV1,
    },
    InsertSession(Session),
    SetSessionPhase {
        generation: GenerationId,
        session: SessionId,
        phase: ModelValue,
    },
    /// A bare terminal Intent for an existing session (spec 3.4 step 1).
    InsertTerminalIntent {
        generation: GenerationId,
        session: SessionId,
    },
    Terminal {
        generation: GenerationId,
        session: SessionId,
        op: TerminalOp,
    },
    /// The generation mailbox in Intent.
    InsertMailbox {
        generation: GenerationId,
        identity_path: HostPath,
        inbox_path: HostPath,
        outbox_path: HostPath,
    },
    Mailbox {
        generation: GenerationId,
        op: MailboxOp,
    },
}

impl StoreOp {
    pub fn name(&self) -> &'static str {
        match self {
            Self::PutDomain(_) => "PutDomain",
            Self::InsertGeneration(_) => "InsertGeneration",
            Self::SetDurableDecision { .. } => "SetDurableDecision",
            Self::InsertParticipantIntent { .. } => "InsertParticipantIntent",
            Self::Participant { op, .. } => op.name(),
            Self::StageProcess { .. } => "StageProcess",
            Self::CommitProcess { .. } => "CommitProcess",
            Self::InsertSession(_) => "InsertSession",
            Self::SetSessionPhase { .. } => "SetSessionPhase",
            Self::InsertTerminalIntent { .. } => "InsertTerminalIntent",
            Self::Terminal { op, .. } => op.name(),
            Self::InsertMailbox { .. } => "InsertMailbox",
            Self::Mailbox { .. } => "Mailbox",
        }
    }
}

pub(crate) fn session_key(session: SessionId) -> u128 {
    u128::from_be_bytes(session.0)
}

pub(crate) fn get<K: redb::Key + 'static, T: DeserializeOwned>(
    txn: &WriteTransaction,
    def: TableDefinition<'_, K, &[u8]>,
    name: &'static str,
    key: K::SelfType<'_>,
    key_text: &dyn Fn() -> String,
) -> Result<Option<T>, StoreError> {
    let table = txn
        .open_table(def)
        .map_err(StoreError::redb("open table"))?;
    let Some(bytes) = table.get(key).map_err(StoreError::redb("read row"))? else {
        return Ok(None);
    };
    codec::decode(name, bytes.value())
        .map(Some)
        .map_err(|source| StoreError::Row {
            table: name,
            key: key_text(),
            source,
        })
}

fn put<K: redb::Key + 'static, T: Serialize>(
    txn: &WriteTransaction,
    def: TableDefinition<'_, K, &[u8]>,
    name: &'static str,
    key: K::SelfType<'_>,
    value: &T,
) -> Result<(), StoreError> {
    let bytes = codec::encode(name, value)?;
    let mut table = txn
        .open_table(def)
        .map_err(StoreError::redb("open table"))?;
    table
        .insert(key, bytes.as_slice())
        .map_err(StoreError::redb("write row"))?;
    Ok(())
}

fn generation(txn: &WriteTransaction, id: GenerationId) -> Result<Generation, StoreError> {
    get(txn, tables::GENERATIONS, "generation", id.0, &|| {
        id.to_string()
    })?
    .ok_or_else(|| StoreError::Missing {
        what: format!("generation {id}"),
    })
}

fn participant_row(
    txn: &WriteTransaction,
    generation: GenerationId,
    role: ParticipantRole,
) -> Result<Participant, StoreError> {
    get(
        txn,
        tables::PARTICIPANTS,
        "participant",
        (generation.0, role.key()),
        &|| format!("{generation}/{role:?}"),
    )?
    .ok_or_else(|| StoreError::Missing {
        what: format!("participant {role:?} of generation {generation}"),
    })
}

fn terminal_row(
    txn: &WriteTransaction,
    generation: GenerationId,
    session: SessionId,
) -> Result<SessionTerminal, StoreError> {
    get(
        txn,
        tables::TERMINALS,
        "session terminal",
        (generation.0, session_key(session)),
        &|| format!("{generation}/{session}"),
    )?
    .ok_or_else(|| StoreError::Missing {
        what: format!("session terminal {session} of generation {generation}"),
    })
}

fn rule(op: &StoreOp, target: String) -> impl FnOnce(OwnershipError) -> StoreError + '_ {
    move |source| StoreError::Rule {
        operation: op.name(),
        target,
        source: Box::new(source),
    }
}

fn slot_phase(identity: PidfsProcessIdentityV1, commit: bool) -> PersistedHostProcessOwnership {
    if commit {
        PersistedHostProcessOwnership::Committed(HostProcessIdentity { identity })
    } else {
        PersistedHostProcessOwnership::Staged(identity)
    }
}

fn set_slot(
    txn: &WriteTransaction,
    op: &StoreOp,
    target: SlotTarget,
    identity: PidfsProcessIdentityV1,
    commit: bool,
    ctx: &RuleContext<'_>,
) -> Result<(), StoreError> {
    let phase = slot_phase(identity, commit);
    match target {
        SlotTarget::Participant { generation, slot } => {
            let role = slot
                .participant_role()
                .ok_or_else(|| StoreError::Mismatch {
                    what: format!("slot {slot:?} (not a participant slot)"),
                })?;
            let row = participant_row(txn, generation, role)?;
            let mut snapshot = row
                .ownership
                .clone()
                .unwrap_or_else(|| role.empty_snapshot());
            let Some(cell) = snapshot.slot_mut(slot) else {
                return Err(StoreError::Mismatch {
                    what: format!("slot {slot:?} of role {role:?}"),
                });
            };
            *cell = phase;
            let next = participant::apply(&row, &ParticipantOp::Acquire(snapshot), ctx)
                .map_err(rule(op, format!("{generation}/{role:?}/{slot:?}")))?;
            put(
                txn,
                tables::PARTICIPANTS,
                "participant",
                (generation.0, role.key()),
                &next,
            )
        }
        SlotTarget::Terminal {
            generation,
            session,
            slot,
        } => {
            let row = terminal_row(txn, generation, session)?;
            let mut snapshot = row.snapshot.clone();
            match slot {
                HostProcessOwnershipSlot::SessionTerminalHostCoordinator => {
                    snapshot.host_coordinator = phase
                }
                HostProcessOwnershipSlot::SessionTerminalExecClient => snapshot.exec_client = phase,
                other => {
                    return Err(StoreError::Mismatch {
                        what: format!("slot {other:?} (not a session terminal slot)"),
                    })
                }
            }
            let next = terminal::apply(&row, &TerminalOp::Acquire(snapshot), ctx)
                .map_err(rule(op, format!("{generation}/{session}/{slot:?}")))?;
            put(
                txn,
                tables::TERMINALS,
                "session terminal",
                (generation.0, session_key(session)),
                &next,
            )
        }
    }
}

impl DomainStore<'_> {
    /// Applies `ops` in one atomic write transaction: all or nothing.
    pub fn apply(&self, ops: &[StoreOp]) -> Result<(), StoreError> {
        let _span = tracing::debug_span!("domain_store_transaction", ops = ops.len()).entered();
        let txn = self
            .db
            .begin_write()
            .map_err(StoreError::redb("begin write"))?;
        for op in ops {
            self.apply_one(&txn, op)?;
        }
        txn.commit().map_err(StoreError::redb("commit"))
    }

    fn apply_one(&self, txn: &WriteTransaction, op: &StoreOp) -> Result<(), StoreError> {
        let boot = self.current_boot;
        match op {
            StoreOp::PutDomain(domain) => {
                match get::<u8, Domain>(txn, tables::DOMAIN, "domain", DOMAIN_KEY, &|| {
                    "domain".into()
                })? {
                    Some(stored) if stored == *domain => Ok(()),
                    Some(_) => Err(StoreError::Mismatch {
                        what: format!("Domain {}", domain.domain_id),
                    }),
                    None => put(txn, tables::DOMAIN, "domain", DOMAIN_KEY, domain),
                }
            }
            StoreOp::InsertGeneration(g) => {
                let domain: Domain = get(txn, tables::DOMAIN, "domain", DOMAIN_KEY, &|| {
                    "domain".into()
                })?
                .ok_or_else(|| StoreError::Missing {
                    what: "the Domain record".into(),
                })?;
                if domain.domain_id != g.domain_id {
                    return Err(StoreError::Mismatch {
                        what: format!("generation {} Domain ID", g.generation_id),
                    });
                }
                if get::<u64, Generation>(
                    txn,
                    tables::GENERATIONS,
                    "generation",
                    g.generation_id.0,
                    &|| g.generation_id.to_string(),
                )?
                .is_some()
                {
                    return Err(StoreError::Exists {
                        what: format!("generation {}", g.generation_id),
                    });
                }
                put(txn, tables::GENERATIONS, "generation", g.generation_id.0, g)
            }
            StoreOp::SetDurableDecision {
                generation: id,
                decision,
            } => {
                let mut g = generation(txn, *id)?;
                g.durable_decision = decision.clone();
                put(txn, tables::GENERATIONS, "generation", id.0, &g)
            }
            StoreOp::InsertParticipantIntent {
                generation: id,
                role,
            } => {
                generation(txn, *id)?;
                let key = (id.0, role.key());
                if get::<(u64, u8), Participant>(
                    txn,
                    tables::PARTICIPANTS,
                    "participant",
                    key,
                    &|| format!("{id}/{role:?}"),
                )?
                .is_some()
                {
                    return Err(StoreError::Exists {
                        what: format!("participant {role:?} of generation {id}"),
                    });
                }
                put(
                    txn,
                    tables::PARTICIPANTS,
                    "participant",
                    key,
                    &participant::bare_intent(*id, *role),
                )
            }
            StoreOp::Participant {
                generation: id,
                role,
                op: pop,
            } => {
                let g = generation(txn, *id)?;
                let ctx = RuleContext {
                    current_boot: boot,
                    generation: &g,
                };
                let row = participant_row(txn, *id, *role)?;
                let next = participant::apply(&row, pop, &ctx)
                    .map_err(rule(op, format!("{id}/{role:?}")))?;
                put(
                    txn,
                    tables::PARTICIPANTS,
                    "participant",
                    (id.0, role.key()),
                    &next,
                )
            }
            StoreOp::StageProcess { target, identity }
            | StoreOp::CommitProcess { target, identity } => {
                let g = generation(txn, target.generation())?;
                let ctx = RuleContext {
                    current_boot: boot,
                    generation: &g,
                };
                let commit = matches!(op, StoreOp::CommitProcess { .. });
                set_slot(txn, op, *target, *identity, commit, &ctx)
            }
            StoreOp::InsertSession(s) => {
                generation(txn, s.generation_id)?;
                let key = (s.generation_id.0, session_key(s.session_id));
                if get::<(u64, u128), Session>(txn, tables::SESSIONS, "session", key, &|| {
                    s.session_id.to_string()
                })?
                .is_some()
                {
                    return Err(StoreError::Exists {
                        what: format!("session {}", s.session_id),
                    });
                }
                put(txn, tables::SESSIONS, "session", key, s)
            }
            StoreOp::SetSessionPhase {
                generation: id,
                session,
                phase,
            } => {
                let key = (id.0, session_key(*session));
                let mut s: Session = get(txn, tables::SESSIONS, "session", key, &|| {
                    session.to_string()
                })?
                .ok_or_else(|| StoreError::Missing {
                    what: format!("session {session} of generation {id}"),
                })?;
                s.session_phase = phase.clone();
                put(txn, tables::SESSIONS, "session", key, &s)
            }
            StoreOp::InsertTerminalIntent {
                generation: id,
                session,
            } => {
                let key = (id.0, session_key(*session));
                if get::<(u64, u128), Session>(txn, tables::SESSIONS, "session", key, &|| {
                    session.to_string()
                })?
                .is_none()
                {
                    return Err(StoreError::Missing {
                        what: format!("session {session} of generation {id}"),
                    });
                }
                if get::<(u64, u128), SessionTerminal>(
                    txn,
                    tables::TERMINALS,
                    "session terminal",
                    key,
                    &|| session.to_string(),
                )?
                .is_some()
                {
                    return Err(StoreError::Exists {
                        what: format!("session terminal {session}"),
                    });
                }
                put(
                    txn,
                    tables::TERMINALS,
                    "session terminal",
                    key,
                    &terminal::bare_intent(*id, *session),
                )
            }
            StoreOp::Terminal {
                generation: id,
                session,
                op: top,
            } => {
                let g = generation(txn, *id)?;
                let ctx = RuleContext {
                    current_boot: boot,
                    generation: &g,
                };
                let row = terminal_row(txn, *id, *session)?;
                let next = terminal::apply(&row, top, &ctx)
                    .map_err(rule(op, format!("{id}/{session}")))?;
                put(
                    txn,
                    tables::TERMINALS,
                    "session terminal",
                    (id.0, session_key(*session)),
                    &next,
                )
            }
            StoreOp::InsertMailbox {
                generation: id,
                identity_path,
                inbox_path,
                outbox_path,
            } => {
                generation(txn, *id)?;
                if get::<u64, Mailbox>(txn, tables::MAILBOXES, "mailbox", id.0, &|| id.to_string())?
                    .is_some()
                {
                    return Err(StoreError::Exists {
                        what: format!("mailbox of generation {id}"),
                    });
                }
                let m = Mailbox {
                    generation_id: *id,
                    identity_path: identity_path.clone(),
                    inbox_path: inbox_path.clone(),
                    outbox_path: outbox_path.clone(),
                    state: ParticipantState::Intent,
                };
                put(txn, tables::MAILBOXES, "mailbox", id.0, &m)
            }
            StoreOp::Mailbox {
                generation: id,
                op: mop,
            } => {
                let m: Mailbox = get(txn, tables::MAILBOXES, "mailbox", id.0, &|| id.to_string())?
                    .ok_or_else(|| StoreError::Missing {
                        what: format!("mailbox of generation {id}"),
                    })?;
                let next = mailbox::apply(&m, *mop).map_err(rule(op, format!("mailbox {id}")))?;
                put(txn, tables::MAILBOXES, "mailbox", id.0, &next)
            }
        }
    }
}
