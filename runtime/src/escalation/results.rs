//! The result stream of one running escalation (spec 3.8): output chunks
//! numbered from 0, at most [`MAX_UNACKED_CHUNKS`] unacknowledged (at the
//! bound the Host Coordinator stops reading the host process's pipes, so
//! they fill and the process blocks), acknowledgements of the highest
//! contiguous sequence, and the terminal result's chunk count and stream
//! digests. Model steps: [`ResultWindow::emit`] is `EmitResultChunk`,
//! [`ResultWindow::acknowledge`] one `AckResultChunk` per newly
//! acknowledged chunk, [`ResultWindow::ack_timeout`] `AckTimeout`, and
//! [`ResultWindow::finish`] `DeliverResult` (only with nothing
//! unacknowledged).
use sha2::{Digest as _, Sha256};

use crate::protocol::mailbox::{
    EscalationOutcome, MailboxResult, MailboxResultChunk, ResultStream, MAX_RESULT_CHUNK,
};
use crate::protocol::records::Digest;
use crate::protocol::PROTOCOL_VERSION;

use super::request::OpenRequest;

/// Chunks one request may have unacknowledged (spec 3.8: eight; the
/// model's `MaxUnackedChunks`).
pub const MAX_UNACKED_CHUNKS: u64 = 8;

/// A step the window's state does not allow.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResultError {
    #[error("{unacked} chunks are unacknowledged; the window holds at most {MAX_UNACKED_CHUNKS}")]
    WindowFull { unacked: u64 },
    #[error("a chunk of {len} bytes; expected 1..={MAX_RESULT_CHUNK}")]
    ChunkSize { len: usize },
    #[error(
        "the acknowledgement names chunk {highest}, but only chunks below {emitted} were written"
    )]
    AckBeyondEmitted { highest: u64, emitted: u64 },
    #[error("the acknowledgement names chunk {highest}, below the already acknowledged {acked}")]
    AckBackwards { highest: u64, acked: u64 },
    #[error("{unacked} chunks are still unacknowledged; the result follows them")]
    Unacknowledged { unacked: u64 },
}

/// The chunks of one request, its acknowledgements and its stream digests.
#[derive(Clone, Debug)]
pub struct ResultWindow {
    request: OpenRequest,
    coordinator_credential_id: Digest,
    /// Chunks written so far (the next chunk's sequence).
    emitted: u64,
    /// Chunks acknowledged, or given up at `AckTimeout` (a prefix of
    /// `0..emitted`).
    settled: u64,
    stdout: Sha256,
    stderr: Sha256,
}

impl ResultWindow {
    /// The window of `request`, whose chunks name `coordinator_credential_id`.
    pub fn new(request: OpenRequest, coordinator_credential_id: Digest) -> Self {
        Self {
            request,
            coordinator_credential_id,
            emitted: 0,
            settled: 0,
            stdout: Sha256::new(),
            stderr: Sha256::new(),
        }
    }

    /// The request these results answer.
    pub fn request(&self) -> &OpenRequest {
        &self.request
    }

    /// Chunks written and neither acknowledged nor given up.
    pub fn unacknowledged(&self) -> u64 {
        debug_assert!(self.settled <= self.emitted);
        self.emitted - self.settled
    }

    /// Whether another chunk may be written (`EmitResultChunk`'s guard).
    pub fn can_emit(&self) -> bool {
        self.unacknowledged() < MAX_UNACKED_CHUNKS
    }

    /// `EmitResultChunk`: the next chunk, carrying `bytes` of `stream`.
    pub fn emit(
        &mut self,
        stream: ResultStream,
        bytes: Vec<u8>,
    ) -> Result<MailboxResultChunk, ResultError> {
        if !self.can_emit() {
            return Err(ResultError::WindowFull {
                unacked: self.unacknowledged(),
            });
        }
        if bytes.is_empty() || bytes.len() > MAX_RESULT_CHUNK {
            return Err(ResultError::ChunkSize { len: bytes.len() });
        }
        match stream {
            ResultStream::Stdout => self.stdout.update(&bytes),
            ResultStream::Stderr => self.stderr.update(&bytes),
        }
        let chunk = MailboxResultChunk {
            protocol_version: PROTOCOL_VERSION,
            session_binding: self.request.session_binding.clone(),
            request_id: self.request.request_id,
            request_sha256: self.request.request_sha256,
            coordinator_credential_id: self.coordinator_credential_id,
            sequence: self.emitted,
            stream,
            bytes,
        };
        self.emitted += 1;
        assert!(self.unacknowledged() <= MAX_UNACKED_CHUNKS);
        Ok(chunk)
    }

    /// `AckResultChunk`, once per chunk newly acknowledged by an
    /// acknowledgement of `highest` (the highest contiguous sequence the
    /// client holds). Returns the sequences it settles, whose files may
    /// now be removed. A repeated acknowledgement settles nothing.
    pub fn acknowledge(&mut self, highest: u64) -> Result<std::ops::Range<u64>, ResultError> {
        if highest >= self.emitted {
            return Err(ResultError::AckBeyondEmitted {
                highest,
                emitted: self.emitted,
            });
        }
        let through = highest + 1;
        if through < self.settled {
            return Err(ResultError::AckBackwards {
                highest,
                acked: self.settled - 1,
            });
        }
        let settled = self.settled..through;
        self.settled = through;
        Ok(settled)
    }

    /// `AckTimeout`: the client stopped acknowledging after the process
    /// ended; every unacknowledged chunk is given up (its file removed) so
    /// the terminal result can follow. Returns the sequences given up.
    pub fn ack_timeout(&mut self) -> std::ops::Range<u64> {
        let given_up = self.settled..self.emitted;
        self.settled = self.emitted;
        given_up
    }

    /// `DeliverResult`: the terminal result, once nothing is
    /// unacknowledged. `exit_code` is the host process's status when it
    /// ran and exited.
    pub fn finish(
        &self,
        outcome: EscalationOutcome,
        exit_code: Option<i32>,
    ) -> Result<MailboxResult, ResultError> {
        if self.unacknowledged() != 0 {
            return Err(ResultError::Unacknowledged {
                unacked: self.unacknowledged(),
            });
        }
        Ok(MailboxResult {
            protocol_version: PROTOCOL_VERSION,
            session_binding: self.request.session_binding.clone(),
            request_id: self.request.request_id,
            request_sha256: self.request.request_sha256,
            coordinator_credential_id: self.coordinator_credential_id,
            outcome,
            exit_code,
            chunk_count: self.emitted,
            stdout_sha256: self.stdout.clone().finalize().into(),
            stderr_sha256: self.stderr.clone().finalize().into(),
        })
    }
}
