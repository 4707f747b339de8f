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

/// The part of a generation a model step's observation needs
/// ([`DomainStore::generation_view`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerationView {
    pub generation: Generation,
    pub participants: Vec<Participant>,
    /// The terminal rows of the sessions asked for, those that exist.
    pub served_terminals: Vec<SessionTerminal>,
    /// Whether a terminal row of a session not asked for is not Clean.
    pub other_terminal_left: bool,
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

/// Decodes the rows of `def` whose keys lie in `range` (`..` for all), in
/// key order, handing each with its key as text (for the checks and
/// errors) to `visit` until it answers [`Visit::Stop`].
fn visit_rows_in<'r, K, T>(
    txn: &ReadTransaction,
    def: TableDefinition<'_, K, &[u8]>,
    name: &'static str,
    range: impl std::ops::RangeBounds<K::SelfType<'r>> + 'r,
    mut visit: impl FnMut(String, T) -> Result<Visit, StoreError>,
) -> Result<(), StoreError>
where
    K: redb::Key + 'static,
    for<'a> K::SelfType<'a>: std::fmt::Debug,
    T: DeserializeOwned,
{
    let table = match txn.open_table(def) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(StoreError::redb("open table")(e)),
    };
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
        if visit(key_text, record)? == Visit::Stop {
            break;
        }
    }
    Ok(())
}

/// Whether [`visit_rows_in`] reads on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Visit {
    Next,
    Stop,
}

/// Every row of `def` whose key lies in `range`, decoded, with its key as
/// text.
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
    let mut out = Vec::new();
    visit_rows_in(txn, def, name, range, |key, row| {
        out.push((key, row));
        Ok(Visit::Next)
    })?;
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
        let txn = self.begin_read()?;
        if generation_checked(&txn, generation)?.is_none() {
            return Ok(None);
        }
        let key = (generation.0, role.key());
        let mut found = None;
        visit_rows_in::<(u64, u8), Participant>(
            &txn,
            tables::PARTICIPANTS,
            "participant",
            key..=key,
            |key, p| {
                check_participant(&key, &p)?;
                found = Some(p);
                Ok(Visit::Stop)
            },
        )?;
        Ok(found)
    }

    /// The generation row alone (validated against the Domain row), if
    /// present.
    pub fn generation_row(
        &self,
        generation: GenerationId,
    ) -> Result<Option<Generation>, StoreError> {
        let txn = self.begin_read()?;
        generation_checked(&txn, generation)
    }

    /// Whether `session` is a Session row of `generation` (spec 3.3: a
    /// Client CLI chooses its Session ID; one already recorded is refused).
    /// One keyed read: the cost does not grow with the generation's other
    /// sessions.
    pub fn has_session(
        &self,
        generation: GenerationId,
        session: SessionId,
    ) -> Result<bool, StoreError> {
        let txn = self.begin_read()?;
        if generation_checked(&txn, generation)?.is_none() {
            return Ok(false);
        }
        let key = (generation.0, super::ops::session_key(session));
        let mut found = false;
        visit_rows_in::<(u64, u128), Session>(
            &txn,
            tables::SESSIONS,
            "session",
            key..=key,
            |key, s| {
                check_session(&key, &s)?;
                found = true;
                Ok(Visit::Stop)
            },
        )?;
        Ok(found)
    }

    /// One session terminal row (validated), if present; one keyed read.
    pub fn terminal(
        &self,
        generation: GenerationId,
        session: SessionId,
    ) -> Result<Option<SessionTerminal>, StoreError> {
        let txn = self.begin_read()?;
        if generation_checked(&txn, generation)?.is_none() {
            return Ok(None);
        }
        terminal_in(&txn, generation, session)
    }

    /// What the Host Coordinator reads back after every model step (spec
    /// 3.3 observation; `coordinator::observed`): the generation, its
    /// participants, the terminal rows of the sessions it serves and
    /// whether any other terminal row is not Clean, in one snapshot. The
    /// reads are keyed and the scan for another terminal stops at the first
    /// one left: the ReleaseIntent rows piped sessions leave until teardown
    /// end it at once, while Clean rows (released interactive sessions)
    /// before the first unclean one are still read. Session and mailbox
    /// rows are not read here; `DomainStore::document` checks every row.
    pub fn generation_view(
        &self,
        generation: GenerationId,
        served: &[SessionId],
    ) -> Result<Option<GenerationView>, StoreError> {
        let txn = self.begin_read()?;
        let Some((row, participants)) = generation_head(&txn, generation)? else {
            return Ok(None);
        };
        let mut served_terminals = Vec::with_capacity(served.len());
        for session in served {
            served_terminals.extend(terminal_in(&txn, generation, *session)?);
        }
        let g = generation.0;
        let mut other_terminal_left = false;
        visit_rows_in::<(u64, u128), SessionTerminal>(
            &txn,
            tables::TERMINALS,
            "session terminal",
            (g, u128::MIN)..=(g, u128::MAX),
            |key, t| {
                check_terminal(&key, &t)?;
                other_terminal_left =
                    t.state != SessionTerminalState::Clean && !served.contains(&t.session_id);
                Ok(if other_terminal_left {
                    Visit::Stop
                } else {
                    Visit::Next
                })
            },
        )?;
        Ok(Some(GenerationView {
            generation: row,
            participants,
            served_terminals,
            other_terminal_left,
        }))
    }

    /// One generation and its rows, read in one snapshot through key
    /// ranges: the cost does not grow with the Domain's other generations.
    /// Every returned row is checked as [`DomainStore::document`] checks
    /// it. It reads every session and terminal row of the generation: the
    /// per-step paths use the keyed reads above instead.
    pub fn generation_document(
        &self,
        generation: GenerationId,
    ) -> Result<Option<GenerationDocument>, StoreError> {
        let txn = self.begin_read()?;
        let Some((row, participants)) = generation_head(&txn, generation)? else {
            return Ok(None);
        };
        let g = generation.0;
        let mut doc = GenerationDocument {
            generation: row,
            participants,
            sessions: Vec::new(),
            terminals: Vec::new(),
            mailbox: None,
        };
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

    fn begin_read(&self) -> Result<ReadTransaction, StoreError> {
        self.db.begin_read().map_err(StoreError::redb("begin read"))
    }
}

/// A generation's row, checked against its key and the Domain row, and its
/// participant rows (at most one per role), checked.
fn generation_head(
    txn: &ReadTransaction,
    generation: GenerationId,
) -> Result<Option<(Generation, Vec<Participant>)>, StoreError> {
    let Some(row) = generation_checked(txn, generation)? else {
        return Ok(None);
    };
    let g = generation.0;
    let mut participants = Vec::new();
    for (key, p) in rows_in::<(u64, u8), Participant>(
        txn,
        tables::PARTICIPANTS,
        "participant",
        (g, u8::MIN)..=(g, u8::MAX),
    )? {
        check_participant(&key, &p)?;
        participants.push(p);
    }
    Ok(Some((row, participants)))
}

/// A generation's row, checked against its key and the Domain row (the
/// keyed reads that need no participant read only this).
fn generation_checked(
    txn: &ReadTransaction,
    generation: GenerationId,
) -> Result<Option<Generation>, StoreError> {
    let g = generation.0;
    let Some((key, row)) =
        rows_in::<u64, Generation>(txn, tables::GENERATIONS, "generation", g..=g)?
            .into_iter()
            .next()
    else {
        return Ok(None);
    };
    key_check(row.generation_id == generation, "generations", &key)?;
    let domain = rows_in::<u8, Domain>(txn, tables::DOMAIN, "domain", DOMAIN_KEY..=DOMAIN_KEY)?
        .into_iter()
        .next()
        .map(|(_, d)| d);
    if domain.as_ref().map(|d| d.domain_id) != Some(row.domain_id) {
        return Err(StoreError::Mismatch {
            what: format!("generation {} Domain ID", row.generation_id),
        });
    }
    Ok(Some(row))
}

/// One session terminal row of `generation`, checked, by its key.
fn terminal_in(
    txn: &ReadTransaction,
    generation: GenerationId,
    session: SessionId,
) -> Result<Option<SessionTerminal>, StoreError> {
    let key = (generation.0, super::ops::session_key(session));
    let mut found = None;
    visit_rows_in::<(u64, u128), SessionTerminal>(
        txn,
        tables::TERMINALS,
        "session terminal",
        key..=key,
        |key, t| {
            check_terminal(&key, &t)?;
            found = Some(t);
            Ok(Visit::Stop)
        },
    )?;
    Ok(found)
}
