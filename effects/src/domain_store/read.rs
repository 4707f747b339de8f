//! Reading the durable document. Every row is decoded, checked against its
//! key and checked for structural well-formedness before it is returned.
use super::tables::{self, DOMAIN_KEY};
use super::{DomainStore, StoreError};
use lazaret_runtime::ownership::{participant, terminal};
use lazaret_runtime::records::codec;
use lazaret_runtime::records::domain::{Domain, Generation, Mailbox, Session};
use lazaret_runtime::records::ids::{GenerationId, SessionId};
use lazaret_runtime::records::participant::{Participant, ParticipantRole, ParticipantState};
use lazaret_runtime::records::process::{HostProcessOwnershipSlot, PersistedHostProcessOwnership};
use lazaret_runtime::records::terminal::{SessionTerminal, SessionTerminalState};
use redb::{ReadTransaction, TableDefinition};
use serde::de::DeserializeOwned;

/// One generation and everything recorded under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerationDocument {
    pub generation: Generation,
    pub participants: Vec<Participant>,
    pub sessions: Vec<Session>,
    pub terminals: Vec<SessionTerminal>,
    pub mailbox: Option<Mailbox>,
}

/// Where a recorded host-process slot sits in a generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotHolder {
    Participant(ParticipantRole),
    Terminal(SessionId),
}

/// One host-process slot of a generation as recorded (Unassigned included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedSlot {
    pub holder: SlotHolder,
    pub slot: HostProcessOwnershipSlot,
    pub ownership: PersistedHostProcessOwnership,
}

impl GenerationDocument {
    /// Whether every participant, session terminal and the mailbox is
    /// Clean: nothing physical is left for recovery. A generation without
    /// any such row owns nothing and is clean too.
    pub fn is_clean(&self) -> bool {
        self.participants
            .iter()
            .all(|p| p.state == ParticipantState::Clean)
            && self
                .terminals
                .iter()
                .all(|t| t.state == SessionTerminalState::Clean)
            && self
                .mailbox
                .as_ref()
                .is_none_or(|m| m.state == ParticipantState::Clean)
    }

    /// Every host-process slot the generation's participants and session
    /// terminals record, in role order then session order. A bare Intent
    /// participant has no snapshot and so no slots.
    pub fn process_slots(&self) -> Vec<RecordedSlot> {
        let mut out = Vec::new();
        for p in &self.participants {
            let Some(ownership) = &p.ownership else {
                continue;
            };
            for slot in HostProcessOwnershipSlot::ALL {
                if slot.participant_role() != Some(p.role) {
                    continue;
                }
                if let Some(recorded) = ownership.slot(slot) {
                    out.push(RecordedSlot {
                        holder: SlotHolder::Participant(p.role),
                        slot,
                        ownership: *recorded,
                    });
                }
            }
        }
        for t in &self.terminals {
            for (slot, ownership) in [
                (
                    HostProcessOwnershipSlot::SessionTerminalHostCoordinator,
                    t.snapshot.host_coordinator,
                ),
                (
                    HostProcessOwnershipSlot::SessionTerminalExecClient,
                    t.snapshot.exec_client,
                ),
            ] {
                out.push(RecordedSlot {
                    holder: SlotHolder::Terminal(t.session_id),
                    slot,
                    ownership,
                });
            }
        }
        out
    }
}

/// Everything a Domain holds durably (for recovery and `lazaret state`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainDocument {
    pub domain: Option<Domain>,
    pub generations: Vec<GenerationDocument>,
}

/// The rows of `def` whose keys lie in `range` (`..` for all), decoded,
/// with their keys as text for the checks and errors.
fn rows_in<'r, K, T>(
    txn: &ReadTransaction,
    def: TableDefinition<'_, K, &[u8]>,
    name: &'static str,
    range: impl std::ops::RangeBounds<K::SelfType<'r>> + 'r,
) -> Result<Vec<(String, T)>, StoreError>
where
    K: redb::Key + 'static,
    for<'a> K::SelfType<'a>: std::fmt::Debug,
    T: DeserializeOwned,
{
    let table = match txn.open_table(def) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(StoreError::redb("open table")(e)),
    };
    let mut out = Vec::new();
    for entry in table
        .range(range)
        .map_err(StoreError::redb("iterate table"))?
    {
        let (key, value) = entry.map_err(StoreError::redb("read row"))?;
        let key_text = format!("{:?}", key.value());
        let record = codec::decode(name, value.value()).map_err(|source| StoreError::Row {
            table: name,
            key: key_text.clone(),
            source,
        })?;
        out.push((key_text, record));
    }
    Ok(out)
}

fn key_check(ok: bool, table: &'static str, key: &str) -> Result<(), StoreError> {
    if ok {
        Ok(())
    } else {
        Err(StoreError::RowKey {
            table,
            key: key.to_owned(),
        })
    }
}

/// A participant row matches its key and is well formed.
fn check_participant(key: &str, p: &Participant) -> Result<(), StoreError> {
    key_check(
        key == format!("{:?}", (p.generation_id.0, p.role.key())),
        "participants",
        key,
    )?;
    participant::check_wellformed(p).map_err(|source| StoreError::IllegalRow {
        table: "participants",
        key: key.to_owned(),
        source: Box::new(source),
    })
}

/// A session row matches its key.
fn check_session(key: &str, s: &Session) -> Result<(), StoreError> {
    key_check(
        key == format!(
            "{:?}",
            (s.generation_id.0, super::ops::session_key(s.session_id))
        ),
        "sessions",
        key,
    )
}

/// A session terminal row matches its key and is well formed.
fn check_terminal(key: &str, t: &SessionTerminal) -> Result<(), StoreError> {
    key_check(
        key == format!(
            "{:?}",
            (t.generation_id.0, super::ops::session_key(t.session_id))
        ),
        "session_terminals",
        key,
    )?;
    terminal::check_wellformed(t).map_err(|source| StoreError::IllegalRow {
        table: "session_terminals",
        key: key.to_owned(),
        source: Box::new(source),
    })
}

impl DomainStore<'_> {
    /// Reads and validates the whole durable document in one snapshot.
    pub fn document(&self) -> Result<DomainDocument, StoreError> {
        let txn = self
            .db
            .begin_read()
            .map_err(StoreError::redb("begin read"))?;
        let domain = rows_in::<u8, Domain>(&txn, tables::DOMAIN, "domain", ..)?
            .into_iter()
            .find(|(k, _)| *k == format!("{DOMAIN_KEY:?}"))
            .map(|(_, d)| d);
        let mut generations = Vec::new();
        for (key, generation) in
            rows_in::<u64, Generation>(&txn, tables::GENERATIONS, "generation", ..)?
        {
            key_check(
                key == format!("{:?}", generation.generation_id.0),
                "generations",
                &key,
            )?;
            if domain.as_ref().map(|d| d.domain_id) != Some(generation.domain_id) {
                return Err(StoreError::Mismatch {
                    what: format!("generation {} Domain ID", generation.generation_id),
                });
            }
            generations.push(GenerationDocument {
                generation,
                participants: Vec::new(),
                sessions: Vec::new(),
                terminals: Vec::new(),
                mailbox: None,
            });
        }
        let find = |gens: &mut Vec<GenerationDocument>, id: GenerationId, table, key: &str| {
            let index = gens.iter().position(|g| g.generation.generation_id == id);
            index.ok_or_else(|| StoreError::RowKey {
                table,
                key: key.to_owned(),
            })
        };
        for (key, p) in
            rows_in::<(u64, u8), Participant>(&txn, tables::PARTICIPANTS, "participant", ..)?
        {
            check_participant(&key, &p)?;
            let i = find(&mut generations, p.generation_id, "participants", &key)?;
            generations[i].participants.push(p);
        }
        for (key, s) in rows_in::<(u64, u128), Session>(&txn, tables::SESSIONS, "session", ..)? {
            check_session(&key, &s)?;
            let i = find(&mut generations, s.generation_id, "sessions", &key)?;
            generations[i].sessions.push(s);
        }
        for (key, t) in rows_in::<(u64, u128), SessionTerminal>(
            &txn,
            tables::TERMINALS,
            "session terminal",
            ..,
        )? {
            check_terminal(&key, &t)?;
            let i = find(&mut generations, t.generation_id, "session_terminals", &key)?;
            generations[i].terminals.push(t);
        }
        for (key, m) in rows_in::<u64, Mailbox>(&txn, tables::MAILBOXES, "mailbox", ..)? {
            key_check(key == format!("{:?}", m.generation_id.0), "mailboxes", &key)?;
            let i = find(&mut generations, m.generation_id, "mailboxes", &key)?;
            generations[i].mailbox = Some(m);
        }
        Ok(DomainDocument {
            domain,
            generations,
        })
    }

    /// One participant row (validated), if present.
    pub fn participant(
        &self,
        generation: GenerationId,
        role: ParticipantRole,
    ) -> Result<Option<Participant>, StoreError> {
        Ok(self
            .generation_document(generation)?
            .and_then(|g| g.participants.into_iter().find(|p| p.role == role)))
    }

    /// Whether `session` is a Session row of `generation` (spec 3.3: a
    /// Client CLI chooses its Session ID; one already recorded is refused).
    pub fn has_session(
        &self,
        generation: GenerationId,
        session: SessionId,
    ) -> Result<bool, StoreError> {
        Ok(self
            .generation_document(generation)?
            .is_some_and(|g| g.sessions.iter().any(|s| s.session_id == session)))
    }

    /// One session terminal row (validated), if present.
    pub fn terminal(
        &self,
        generation: GenerationId,
        session: SessionId,
    ) -> Result<Option<SessionTerminal>, StoreError> {
        Ok(self
            .generation_document(generation)?
            .and_then(|g| g.terminals.into_iter().find(|t| t.session_id == session)))
    }

    /// One generation and its rows, read in one snapshot through key
    /// ranges: the cost does not grow with the Domain's other generations
    /// (the Host Coordinator reads its generation back after every model
    /// step). Every returned row is checked as [`DomainStore::document`]
    /// checks it.
    pub fn generation_document(
        &self,
        generation: GenerationId,
    ) -> Result<Option<GenerationDocument>, StoreError> {
        let txn = self
            .db
            .begin_read()
            .map_err(StoreError::redb("begin read"))?;
        let g = generation.0;
        let Some((key, row)) =
            rows_in::<u64, Generation>(&txn, tables::GENERATIONS, "generation", g..=g)?
                .into_iter()
                .next()
        else {
            return Ok(None);
        };
        key_check(row.generation_id == generation, "generations", &key)?;
        let domain =
            rows_in::<u8, Domain>(&txn, tables::DOMAIN, "domain", DOMAIN_KEY..=DOMAIN_KEY)?
                .into_iter()
                .next()
                .map(|(_, d)| d);
        if domain.as_ref().map(|d| d.domain_id) != Some(row.domain_id) {
            return Err(StoreError::Mismatch {
                what: format!("generation {} Domain ID", row.generation_id),
            });
        }
        let mut doc = GenerationDocument {
            generation: row,
            participants: Vec::new(),
            sessions: Vec::new(),
            terminals: Vec::new(),
            mailbox: None,
        };
        for (key, p) in rows_in::<(u64, u8), Participant>(
            &txn,
            tables::PARTICIPANTS,
            "participant",
            (g, u8::MIN)..=(g, u8::MAX),
        )? {
            check_participant(&key, &p)?;
            doc.participants.push(p);
        }
        for (key, s) in rows_in::<(u64, u128), Session>(
            &txn,
            tables::SESSIONS,
            "session",
            (g, u128::MIN)..=(g, u128::MAX),
        )? {
            check_session(&key, &s)?;
            doc.sessions.push(s);
        }
        for (key, t) in rows_in::<(u64, u128), SessionTerminal>(
            &txn,
            tables::TERMINALS,
            "session terminal",
            (g, u128::MIN)..=(g, u128::MAX),
        )? {
            check_terminal(&key, &t)?;
            doc.terminals.push(t);
        }
        for (key, m) in rows_in::<u64, Mailbox>(&txn, tables::MAILBOXES, "mailbox", g..=g)? {
            key_check(key == format!("{:?}", m.generation_id.0), "mailboxes", &key)?;
            doc.mailbox = Some(m);
        }
        Ok(Some(doc))
    }
}
