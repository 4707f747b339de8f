//! All Session Terminals of one Host Coordinator, each with its own bounded
//! inbound event queue and client queue (spec 3.4: "One Host Coordinator
//! event loop serializes input, resize, signal, close, prompt-routing, PTY
//! output, and exec-client completion for each Session ID. It uses bounded
//! queues and PTY backpressure; terminal data for one session cannot consume
//! another session's control capacity").
//!
//! Nothing is shared between sessions: a full queue stops reading only that
//! session's connection or PTY.
use super::machine::{Command, Input, Machine, Refusal, ReleaseTimings};
use super::protocol::SessionTerminalEvent;
use crate::records::ids::{GenerationId, SessionId};
use std::collections::{BTreeMap, VecDeque};

/// Capacities of one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionLimits {
    /// Decoded client events waiting for the event loop.
    pub inbound_events_max: usize,
    /// Output bytes waiting for the client connection.
    pub client_queue_bytes_max: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            inbound_events_max: 64,
            client_queue_bytes_max: 256 * 1024,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error("session {0} already has a terminal")]
    Duplicate(SessionId),
    #[error("the Host Coordinator already serves {max} session terminals")]
    TooMany { max: usize },
    #[error("no terminal for session {0}")]
    Unknown(SessionId),
    #[error(
        "inbound queue of session {session} is full ({max} events); stop reading its connection"
    )]
    InboundFull { session: SessionId, max: usize },
}

#[derive(Debug)]
struct Slot {
    machine: Machine,
    inbound: VecDeque<(GenerationId, SessionTerminalEvent)>,
}

#[derive(Debug)]
pub struct SessionTable {
    sessions: BTreeMap<SessionId, Slot>,
    limits: SessionLimits,
    timings: ReleaseTimings,
    max_sessions: usize,
}

impl SessionTable {
    pub fn new(limits: SessionLimits, timings: ReleaseTimings, max_sessions: usize) -> Self {
        Self {
            sessions: BTreeMap::new(),
            limits,
            timings,
            max_sessions,
        }
    }

    /// Admits a terminal that reached Running (spec 3.4 acquisition step 5).
    pub fn admit(
        &mut self,
        session: SessionId,
        generation: GenerationId,
    ) -> Result<(), TableError> {
        if self.sessions.contains_key(&session) {
            return Err(TableError::Duplicate(session));
        }
        if self.sessions.len() >= self.max_sessions {
            return Err(TableError::TooMany {
                max: self.max_sessions,
            });
        }
        let mut machine = Machine::new(
            session,
            generation,
            self.timings,
            self.limits.client_queue_bytes_max,
        );
        // A new terminal waits for nothing but its admission, which is
        // enabled from SessionRelease's Init; the guest leader's command
        // is the effects layer's (this table only holds the machines).
        if let Err(e) = machine.handle(Input::Admitted) {
            unreachable!("a new terminal refused its admission: {e}");
        }
        self.sessions.insert(
            session,
            Slot {
                machine,
                inbound: VecDeque::new(),
            },
        );
        Ok(())
    }

    /// Whether the connection reader may read another event for `session`.
    pub fn accepts_event(&self, session: SessionId) -> bool {
        self.sessions
            .get(&session)
            .is_some_and(|s| s.inbound.len() < self.limits.inbound_events_max)
    }

    /// Queues one decoded client event for the session's event loop turn.
    pub fn enqueue(
        &mut self,
        session: SessionId,
        generation: GenerationId,
        event: SessionTerminalEvent,
    ) -> Result<(), TableError> {
        let max = self.limits.inbound_events_max;
        let slot = self
            .sessions
            .get_mut(&session)
            .ok_or(TableError::Unknown(session))?;
        if slot.inbound.len() >= max {
            return Err(TableError::InboundFull { session, max });
        }
        slot.inbound.push_back((generation, event));
        Ok(())
    }

    /// Processes the oldest queued client event of `session`, if any.
    pub fn step(
        &mut self,
        session: SessionId,
    ) -> Result<Option<Result<Vec<Command>, Refusal>>, TableError> {
        let slot = self
            .sessions
            .get_mut(&session)
            .ok_or(TableError::Unknown(session))?;
        Ok(slot
            .inbound
            .pop_front()
            .map(|(generation, event)| slot.machine.handle(Input::Client { generation, event })))
    }

    /// Feeds a non-client input (PTY, exec client, timer, observation,
    /// route) to one session.
    pub fn handle(
        &mut self,
        session: SessionId,
        input: Input,
    ) -> Result<Result<Vec<Command>, Refusal>, TableError> {
        let slot = self
            .sessions
            .get_mut(&session)
            .ok_or(TableError::Unknown(session))?;
        Ok(slot.machine.handle(input))
    }

    pub fn machine(&self, session: SessionId) -> Option<&Machine> {
        self.sessions.get(&session).map(|s| &s.machine)
    }

    pub fn machine_mut(&mut self, session: SessionId) -> Option<&mut Machine> {
        self.sessions.get_mut(&session).map(|s| &mut s.machine)
    }

    pub fn inbound_len(&self, session: SessionId) -> usize {
        self.sessions.get(&session).map_or(0, |s| s.inbound.len())
    }

    /// Forgets a terminal that finished release (Clean or retained).
    pub fn remove_finished(&mut self, session: SessionId) -> Result<(), TableError> {
        let finished = self
            .sessions
            .get(&session)
            .ok_or(TableError::Unknown(session))?
            .machine
            .is_finished();
        if finished {
            self.sessions.remove(&session);
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}
