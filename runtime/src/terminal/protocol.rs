//! v1 session terminal protocol records (schemas.md "Session terminal
//! protocol"; spec 3.4). Postcard payloads; field order is the schema's.
//!
//! Encoding (postcard): an enum is its variant index as a varint, a
//! `SessionId` is its 16 raw bytes, a `u16`/`u8` is a varint, a byte string
//! and `argv` are a varint length followed by the elements, an `Option` is
//! `0` or `1` followed by the value. Fixed codec tests in
//! `runtime/tests/terminal_protocol.rs` pin these bytes.
use crate::protocol::mailbox::SignedProtocolRecord;
use crate::records::codec::{self, CodecError};
use crate::records::ids::{EscalationRequestId, SessionId};
use serde::{Deserialize, Serialize};
use std::num::NonZeroU16;

/// Largest byte chunk in one input or output record. Bounded so one record
/// never holds more than one PTY read or one client write.
pub const MAX_CHUNK_BYTES: usize = 16 * 1024;
/// Largest complete encoded record accepted by [`decode_event`] and friends.
pub const MAX_RECORD_BYTES: usize = 64 * 1024;
/// Most argv elements in a session request.
pub const MAX_ARGV: usize = 4096;
/// Largest `TERM` value an interactive request carries.
pub const MAX_TERM_BYTES: usize = 256;
/// Largest reason text in a [`SessionAbort`].
pub const MAX_REASON_BYTES: usize = 4096;

/// A byte chunk of at most [`MAX_CHUNK_BYTES`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<u8>", into = "Vec<u8>")]
pub struct Chunk(Vec<u8>);

impl Chunk {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, ProtocolError> {
        let bytes = bytes.into();
        if bytes.len() > MAX_CHUNK_BYTES {
            return Err(ProtocolError::ChunkTooLarge { len: bytes.len() });
        }
        Ok(Self(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Chunk({} bytes)", self.0.len())
    }
}

impl TryFrom<Vec<u8>> for Chunk {
    type Error = ProtocolError;
    fn try_from(value: Vec<u8>) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<Chunk> for Vec<u8> {
    fn from(value: Chunk) -> Self {
        value.0
    }
}

/// A protocol value is out of range.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("terminal byte chunk of {len} bytes exceeds the {MAX_CHUNK_BYTES}-byte bound")]
    ChunkTooLarge { len: usize },
    #[error("SessionExit: exit_code must be present exactly when the outcome is Exited (outcome {outcome:?}, exit_code {exit_code:?})")]
    ExitCode {
        outcome: SessionExitOutcome,
        exit_code: Option<u8>,
    },
    #[error("non-interactive argv must have 1..={MAX_ARGV} NUL-free elements, got {len}")]
    ArgvLength { len: usize },
    #[error("non-interactive argv element {index} contains a NUL byte")]
    ArgvNul { index: usize },
    #[error("a terminal TERM value must be 1..={MAX_TERM_BYTES} bytes of printable ASCII, got {len} bytes")]
    Term { len: usize },
    #[error("a session abort reason of {len} bytes exceeds the {MAX_REASON_BYTES}-byte bound")]
    ReasonTooLarge { len: usize },
    #[error("{record} record of {len} bytes exceeds the {MAX_RECORD_BYTES}-byte bound")]
    RecordTooLarge { record: &'static str, len: usize },
    #[error(transparent)]
    Codec(#[from] CodecError),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalInput {
    pub session_id: SessionId,
    pub bytes: Chunk,
}

/// Rows and columns are nonzero u16 (spec 3.4); pixels may be zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalResize {
    pub session_id: SessionId,
    pub rows: NonZeroU16,
    pub columns: NonZeroU16,
    pub pixel_width: u16,
    pub pixel_height: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TerminalSignalKind {
    Interrupt,
    Quit,
    Suspend,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSignal {
    pub session_id: SessionId,
    pub signal: TerminalSignalKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionClose {
    pub session_id: SessionId,
}

/// Client -> Host Coordinator on the session connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionTerminalEvent {
    Input(TerminalInput),
    Resize(TerminalResize),
    Signal(TerminalSignal),
    Close(SessionClose),
    /// Lazaret extension, after the schema's variants: see
    /// [`SessionDecision`].
    Decision(SessionDecision),
}

impl SessionTerminalEvent {
    pub fn session_id(&self) -> SessionId {
        match self {
            Self::Input(e) => e.session_id,
            Self::Resize(e) => e.session_id,
            Self::Signal(e) => e.session_id,
            Self::Close(e) => e.session_id,
            Self::Decision(e) => e.session_id,
        }
    }
}

/// Lazaret extension (spec 3.8 and the model's `ApproveEscalation` /
/// `DenyEscalation` name the decision, not its transport): the developer's
/// answer to the [`EscalationPrompt`] on this session's terminal, a
/// `DeveloperDecision` signed by the session's Session Anchor, which only
/// the Client CLI holds. It is not a terminal event: the Host Coordinator
/// takes it only while its prompt is open.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDecision {
    pub session_id: SessionId,
    /// `SignedProtocolRecord::DeveloperDecision`.
    pub record: SignedProtocolRecord,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalOutput {
    pub session_id: SessionId,
    pub bytes: Chunk,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SessionExitOutcome {
    Exited,
    Terminated,
    RuntimeLost,
}

/// `exit_code` is present only for `Exited` (schemas.md); it is the status
/// collected from the non-detached runsc exec client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SessionExitWire", into = "SessionExitWire")]
pub struct SessionExit {
    session_id: SessionId,
    outcome: SessionExitOutcome,
    exit_code: Option<u8>,
}

#[derive(Serialize, Deserialize)]
struct SessionExitWire {
    session_id: SessionId,
    outcome: SessionExitOutcome,
    exit_code: Option<u8>,
}

impl SessionExit {
    pub fn exited(session_id: SessionId, exit_code: u8) -> Self {
        Self {
            session_id,
            outcome: SessionExitOutcome::Exited,
            exit_code: Some(exit_code),
        }
    }

    /// The exec client was terminated by the release order or a signal.
    pub fn terminated(session_id: SessionId) -> Self {
        Self {
            session_id,
            outcome: SessionExitOutcome::Terminated,
            exit_code: None,
        }
    }

    /// The exec client or its runtime vanished without a status.
    pub fn runtime_lost(session_id: SessionId) -> Self {
        Self {
            session_id,
            outcome: SessionExitOutcome::RuntimeLost,
            exit_code: None,
        }
    }

    pub fn session_id(&self) -> SessionId {
        self.session_id
    }
    pub fn outcome(&self) -> SessionExitOutcome {
        self.outcome
    }
    pub fn exit_code(&self) -> Option<u8> {
        self.exit_code
    }
}

impl TryFrom<SessionExitWire> for SessionExit {
    type Error = ProtocolError;
    fn try_from(w: SessionExitWire) -> Result<Self, Self::Error> {
        if (w.outcome == SessionExitOutcome::Exited) != w.exit_code.is_some() {
            return Err(ProtocolError::ExitCode {
                outcome: w.outcome,
                exit_code: w.exit_code,
            });
        }
        Ok(Self {
            session_id: w.session_id,
            outcome: w.outcome,
            exit_code: w.exit_code,
        })
    }
}

impl From<SessionExit> for SessionExitWire {
    fn from(e: SessionExit) -> Self {
        Self {
            session_id: e.session_id,
            outcome: e.outcome,
            exit_code: e.exit_code,
        }
    }
}

/// Host Coordinator -> client on an interactive session connection. PTY
/// output is one merged stream (spec 3.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionTerminalMessage {
    Output(TerminalOutput),
    Exit(SessionExit),
    /// Lazaret extension, after the schema's variants: see [`SessionAbort`].
    Abort(SessionAbort),
    /// Lazaret extension: see [`EscalationPrompt`].
    Prompt(EscalationPrompt),
    /// Lazaret extension: see [`PromptClosed`].
    PromptClosed(PromptClosed),
}

/// Lazaret extension (spec 3.8, DX-4, FR-5): the Host Coordinator routed
/// the session's terminal to the developer prompt for one escalation
/// request of this session (the model's `RouteToPrompt`). It names the
/// requesting profile and session, the exact command vector and the
/// sandbox's justification; the Client CLI answers with a
/// [`SessionDecision`] naming `request_id` and `request_sha256`. Every text
/// field is the sandbox's and is shown escaped, never as terminal input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EscalationPrompt {
    pub session_id: SessionId,
    pub request_id: EscalationRequestId,
    pub request_sha256: [u8; 32],
    pub profile: String,
    pub command_argv: Vec<String>,
    pub justification: String,
    /// How long the prompt waits for an answer before it is withdrawn
    /// (the model's `PromptTimeout`).
    pub deadline_seconds: u32,
}

/// How an open prompt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PromptClosing {
    /// The developer approved; the host command runs.
    Approved,
    /// The developer denied (or the answer was not a valid decision).
    Denied,
    /// No answer within the deadline (`PromptTimeout`).
    TimedOut,
    /// The sandbox cancelled its request, or serving stopped.
    Withdrawn,
}

/// Lazaret extension: the prompt for `request_id` is closed and the
/// session's terminal is back on the sandbox route; sent before any
/// sandbox output that follows the prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptClosed {
    pub session_id: SessionId,
    pub request_id: EscalationRequestId,
    pub closing: PromptClosing,
}

/// Why a session ended without a [`SessionExit`] of its command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SessionAbortKind {
    /// The session's exec client could not be started.
    StartFailed,
    /// The Domain's runtime ended under the session (the sandbox, its
    /// supervisor or its connectivity helper was lost).
    RuntimeLost,
}

/// Lazaret extension (schemas.md is silent): the session ended without the
/// command's status, and why, in the coordinator's words, so every attached
/// terminal can say what failed instead of a bare `RuntimeLost`. It takes
/// the place of the one `SessionExit` and is never sent after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "SessionAbortWire", into = "SessionAbortWire")]
pub struct SessionAbort {
    session_id: SessionId,
    kind: SessionAbortKind,
    reason: String,
}

#[derive(Serialize, Deserialize)]
struct SessionAbortWire {
    session_id: SessionId,
    kind: SessionAbortKind,
    reason: String,
}

impl SessionAbort {
    /// `reason` is cut to at most [`MAX_REASON_BYTES`] at a character
    /// boundary.
    pub fn new(session_id: SessionId, kind: SessionAbortKind, reason: &str) -> Self {
        let mut end = reason.len().min(MAX_REASON_BYTES);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        Self {
            session_id,
            kind,
            reason: reason[..end].to_owned(),
        }
    }
    pub fn session_id(&self) -> SessionId {
        self.session_id
    }
    pub fn kind(&self) -> SessionAbortKind {
        self.kind
    }
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl TryFrom<SessionAbortWire> for SessionAbort {
    type Error = ProtocolError;
    fn try_from(w: SessionAbortWire) -> Result<Self, Self::Error> {
        if w.reason.len() > MAX_REASON_BYTES {
            return Err(ProtocolError::ReasonTooLarge {
                len: w.reason.len(),
            });
        }
        Ok(Self {
            session_id: w.session_id,
            kind: w.kind,
            reason: w.reason,
        })
    }
}

impl From<SessionAbort> for SessionAbortWire {
    fn from(a: SessionAbort) -> Self {
        Self {
            session_id: a.session_id,
            kind: a.kind,
            reason: a.reason,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TerminalProtocolVersion {
    V1,
}

/// A non-interactive run: exact argv, stdout and stderr kept apart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "NonInteractiveWire", into = "NonInteractiveWire")]
pub struct NonInteractiveSessionRequest {
    protocol_version: TerminalProtocolVersion,
    session_id: SessionId,
    argv: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct NonInteractiveWire {
    protocol_version: TerminalProtocolVersion,
    session_id: SessionId,
    argv: Vec<String>,
}

impl NonInteractiveSessionRequest {
    pub fn new(session_id: SessionId, argv: Vec<String>) -> Result<Self, ProtocolError> {
        Self::try_from(NonInteractiveWire {
            protocol_version: TerminalProtocolVersion::V1,
            session_id,
            argv,
        })
    }
    pub fn session_id(&self) -> SessionId {
        self.session_id
    }
    pub fn argv(&self) -> &[String] {
        &self.argv
    }
}

/// A session's argv: 1..=[`MAX_ARGV`] elements, none with a NUL byte (an
/// exec argument cannot hold one).
pub fn check_argv(argv: &[String]) -> Result<(), ProtocolError> {
    if argv.is_empty() || argv.len() > MAX_ARGV {
        return Err(ProtocolError::ArgvLength { len: argv.len() });
    }
    if let Some(index) = argv.iter().position(|a| a.contains('\0')) {
        return Err(ProtocolError::ArgvNul { index });
    }
    Ok(())
}

impl TryFrom<NonInteractiveWire> for NonInteractiveSessionRequest {
    type Error = ProtocolError;
    fn try_from(w: NonInteractiveWire) -> Result<Self, Self::Error> {
        check_argv(&w.argv)?;
        Ok(Self {
            protocol_version: w.protocol_version,
            session_id: w.session_id,
            argv: w.argv,
        })
    }
}

impl From<NonInteractiveSessionRequest> for NonInteractiveWire {
    fn from(r: NonInteractiveSessionRequest) -> Self {
        Self {
            protocol_version: r.protocol_version,
            session_id: r.session_id,
            argv: r.argv,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NonInteractiveOutput {
    pub session_id: SessionId,
    pub bytes: Chunk,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NonInteractiveSessionMessage {
    Stdout(NonInteractiveOutput),
    Stderr(NonInteractiveOutput),
    Exit(SessionExit),
    /// Lazaret extension, after the schema's variants: see [`SessionAbort`].
    Abort(SessionAbort),
}

/// Standard input bytes of a non-interactive session (extension, below).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NonInteractiveInput {
    pub session_id: SessionId,
    pub bytes: Chunk,
}

/// Lazaret extension (schemas.md has no client-to-coordinator record for a
/// non-interactive session): the CLI's standard input, in chunks, then its
/// end. Unlike [`SessionClose`], the end of input does not close the
/// session: the command runs on and its output and status still come.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NonInteractiveSessionEvent {
    Input(NonInteractiveInput),
    InputClosed(SessionClose),
}

impl NonInteractiveSessionEvent {
    pub fn session_id(&self) -> SessionId {
        match self {
            Self::Input(e) => e.session_id,
            Self::InputClosed(e) => e.session_id,
        }
    }
}

/// Lazaret extension (schemas.md has a request record for the
/// non-interactive form only): an interactive session's start, its exact
/// argv run on a Host Coordinator-owned PTY of the CLI's window (rows and
/// columns nonzero, spec 3.4), with the CLI's `TERM` passed to the guest
/// process (`None`: unset).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "InteractiveWire", into = "InteractiveWire")]
pub struct InteractiveSessionRequest {
    protocol_version: TerminalProtocolVersion,
    session_id: SessionId,
    argv: Vec<String>,
    rows: NonZeroU16,
    columns: NonZeroU16,
    term: Option<String>,
}

/// The wire form of [`InteractiveSessionRequest`], checked on decode.
#[derive(Serialize, Deserialize)]
struct InteractiveWire {
    protocol_version: TerminalProtocolVersion,
    session_id: SessionId,
    argv: Vec<String>,
    rows: NonZeroU16,
    columns: NonZeroU16,
    term: Option<String>,
}

impl InteractiveSessionRequest {
    pub fn new(
        session_id: SessionId,
        argv: Vec<String>,
        rows: NonZeroU16,
        columns: NonZeroU16,
        term: Option<String>,
    ) -> Result<Self, ProtocolError> {
        Self::try_from(InteractiveWire {
            protocol_version: TerminalProtocolVersion::V1,
            session_id,
            argv,
            rows,
            columns,
            term,
        })
    }
    pub fn session_id(&self) -> SessionId {
        self.session_id
    }
    pub fn argv(&self) -> &[String] {
        &self.argv
    }
    pub fn rows(&self) -> NonZeroU16 {
        self.rows
    }
    pub fn columns(&self) -> NonZeroU16 {
        self.columns
    }
    pub fn term(&self) -> Option<&str> {
        self.term.as_deref()
    }
}

impl TryFrom<InteractiveWire> for InteractiveSessionRequest {
    type Error = ProtocolError;
    fn try_from(w: InteractiveWire) -> Result<Self, Self::Error> {
        check_argv(&w.argv)?;
        if let Some(term) = &w.term {
            let printable = term.bytes().all(|b| b.is_ascii_graphic());
            if term.is_empty() || term.len() > MAX_TERM_BYTES || !printable {
                return Err(ProtocolError::Term { len: term.len() });
            }
        }
        Ok(Self {
            protocol_version: w.protocol_version,
            session_id: w.session_id,
            argv: w.argv,
            rows: w.rows,
            columns: w.columns,
            term: w.term,
        })
    }
}

impl From<InteractiveSessionRequest> for InteractiveWire {
    fn from(r: InteractiveSessionRequest) -> Self {
        Self {
            protocol_version: r.protocol_version,
            session_id: r.session_id,
            argv: r.argv,
            rows: r.rows,
            columns: r.columns,
            term: r.term,
        }
    }
}

fn encode_bounded<T: Serialize>(record: &'static str, value: &T) -> Result<Vec<u8>, ProtocolError> {
    let bytes = codec::encode(record, value)?;
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(ProtocolError::RecordTooLarge {
            record,
            len: bytes.len(),
        });
    }
    Ok(bytes)
}

fn decode_bounded<T: serde::de::DeserializeOwned>(
    record: &'static str,
    bytes: &[u8],
) -> Result<T, ProtocolError> {
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(ProtocolError::RecordTooLarge {
            record,
            len: bytes.len(),
        });
    }
    Ok(codec::decode(record, bytes)?)
}

macro_rules! codec_pair {
    ($enc:ident, $dec:ident, $ty:ty, $name:literal) => {
        pub fn $enc(value: &$ty) -> Result<Vec<u8>, ProtocolError> {
            encode_bounded($name, value)
        }
        pub fn $dec(bytes: &[u8]) -> Result<$ty, ProtocolError> {
            decode_bounded($name, bytes)
        }
    };
}

codec_pair!(
    encode_event,
    decode_event,
    SessionTerminalEvent,
    "session terminal event"
);
codec_pair!(
    encode_message,
    decode_message,
    SessionTerminalMessage,
    "session terminal message"
);
codec_pair!(
    encode_request,
    decode_request,
    NonInteractiveSessionRequest,
    "non-interactive session request"
);
codec_pair!(
    encode_non_interactive,
    decode_non_interactive,
    NonInteractiveSessionMessage,
    "non-interactive session message"
);
codec_pair!(
    encode_non_interactive_event,
    decode_non_interactive_event,
    NonInteractiveSessionEvent,
    "non-interactive session event"
);
codec_pair!(
    encode_interactive_request,
    decode_interactive_request,
    InteractiveSessionRequest,
    "interactive session request"
);
