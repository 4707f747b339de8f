//! The bounded per-session client queue (spec 3.4: bounded queues and PTY
//! backpressure; one session's data cannot consume another's capacity).
//!
//! Output chunks share a byte budget. The single `SessionExit` has its own
//! reserved slot, so a full output budget can never keep the exit from being
//! queued, and it is released only after every queued output byte (spec 3.4:
//! "at most one SessionExit after the last forwarded byte").
use super::protocol::{Chunk, SessionExit, SessionTerminalMessage, TerminalOutput};
use crate::records::ids::SessionId;
use std::collections::VecDeque;

#[derive(Debug)]
pub struct ClientQueue {
    session_id: SessionId,
    output: VecDeque<Chunk>,
    queued_bytes: usize,
    max_bytes: usize,
    exit: Option<SessionExit>,
    exit_sent: bool,
}

/// The queue refused a push.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    #[error("client queue full: {queued} of {max} bytes queued, {len} more offered")]
    Full {
        queued: usize,
        max: usize,
        len: usize,
    },
    #[error("a SessionExit was already queued for this session")]
    ExitTwice,
    #[error("output offered after the SessionExit")]
    OutputAfterExit,
}

impl ClientQueue {
    pub fn new(session_id: SessionId, max_bytes: usize) -> Self {
        Self {
            session_id,
            output: VecDeque::new(),
            queued_bytes: 0,
            max_bytes,
            exit: None,
            exit_sent: false,
        }
    }

    /// Bytes that may be read from the PTY now without exceeding the bound
    /// (0 means: stop reading the PTY master).
    pub fn room(&self) -> usize {
        self.max_bytes.saturating_sub(self.queued_bytes)
    }

    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    pub fn push_output(&mut self, chunk: Chunk) -> Result<(), QueueError> {
        if self.exit.is_some() || self.exit_sent {
            return Err(QueueError::OutputAfterExit);
        }
        if chunk.len() > self.room() {
            return Err(QueueError::Full {
                queued: self.queued_bytes,
                max: self.max_bytes,
                len: chunk.len(),
            });
        }
        if !chunk.is_empty() {
            self.queued_bytes += chunk.len();
            self.output.push_back(chunk);
        }
        Ok(())
    }

    pub fn push_exit(&mut self, exit: SessionExit) -> Result<(), QueueError> {
        if self.exit.is_some() || self.exit_sent {
            return Err(QueueError::ExitTwice);
        }
        self.exit = Some(exit);
        Ok(())
    }

    /// The next message for the client connection, oldest first; the exit
    /// comes only after the last output byte.
    pub fn pop(&mut self) -> Option<SessionTerminalMessage> {
        if let Some(bytes) = self.output.pop_front() {
            self.queued_bytes -= bytes.len();
            return Some(SessionTerminalMessage::Output(TerminalOutput {
                session_id: self.session_id,
                bytes,
            }));
        }
        let exit = self.exit.take()?;
        self.exit_sent = true;
        Some(SessionTerminalMessage::Exit(exit))
    }

    /// Drops everything (the connection is gone; nothing is retained for
    /// reattachment).
    pub fn discard(&mut self) {
        self.output.clear();
        self.queued_bytes = 0;
        self.exit = None;
    }

    pub fn is_empty(&self) -> bool {
        self.output.is_empty() && self.exit.is_none()
    }
}
