//! The Escalation Mailbox records (spec 3.8; schemas.md "Protocol
//! cryptography", the mailbox class diagram): what the Escalation Client and
//! the Host Coordinator exchange as regular files. Every file holds one
//! [`SignedProtocolRecord`]: the record's exact Postcard payload bytes and a
//! signature over `lazaret/v1/`, the lower-kebab record name, the payload's
//! big-endian length and the payload (schemas.md). The envelope names the
//! record kind, so the reader knows which signer and which signature input
//! to check *before* it decodes the payload; a mislabelled kind changes the
//! signature input and fails verification.
//!
//! Signers (spec 3.3 protocol cryptography refinement, 3.8): requests,
//! cancellations and acknowledgements are the Agent Sandbox's
//! (its request-signing key); developer decisions are the owning Client
//! CLI's Session Anchor's; result chunks and terminal results are the
//! Session Coordinator's, whose key the Host Coordinator holds.
//!
//! Bounds (spec 3.8): a complete file is at most [`MAX_MAILBOX_RECORD`]
//! bytes, checked before anything is allocated or decoded; a chunk carries
//! at most [`MAX_RESULT_CHUNK`] output bytes.
use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};

use crate::codec::{self, CodecError};
use crate::ids::EscalationRequestId;
use crate::records::{
    Digest, ProtocolRecord, PublicKey, SessionBinding, SessionRequestCapability, Signature,
};
use crate::signing::{sha256, sign_payload, verify_payload, SignatureError};

/// The largest complete mailbox file (spec 3.8: 65,536 bytes).
pub const MAX_MAILBOX_RECORD: usize = 65_536;

/// The most output bytes one result chunk carries (spec 3.8: 49,152).
pub const MAX_RESULT_CHUNK: usize = 49_152;

/// MailboxRequest: the Agent Sandbox asks, for the session its capability
/// binds, that the host run `command_argv` (element zero an absolute path;
/// no command string, no shell form: schemas.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailboxRequest {
    pub protocol_version: u16,
    pub session_binding: SessionBinding,
    pub request_id: EscalationRequestId,
    pub session_capability: SessionRequestCapability,
    pub sandbox_credential_id: Digest,
    pub command_argv: Vec<String>,
    pub justification: String,
}

/// MailboxCancellation: the Agent Sandbox withdraws its open request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailboxCancellation {
    pub protocol_version: u16,
    pub session_binding: SessionBinding,
    pub request_id: EscalationRequestId,
    pub session_capability: SessionRequestCapability,
    pub sandbox_credential_id: Digest,
}

/// MailboxResultAck: the Agent Sandbox has every chunk up to and including
/// `highest_contiguous_sequence` of the request whose payload digest is
/// `request_sha256`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailboxResultAck {
    pub protocol_version: u16,
    pub session_binding: SessionBinding,
    pub request_id: EscalationRequestId,
    pub request_sha256: Digest,
    pub session_capability: SessionRequestCapability,
    pub sandbox_credential_id: Digest,
    pub highest_contiguous_sequence: u64,
}

/// DeveloperDecisionKind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeveloperDecisionKind {
    Approve,
    Deny,
}

/// DeveloperDecision: the developer's answer on the owning session's own
/// terminal, signed by that session's Session Anchor. An approval names the
/// exact vector that runs (the request's, or the developer's edit of it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeveloperDecision {
    pub protocol_version: u16,
    pub session_binding: SessionBinding,
    pub request_id: EscalationRequestId,
    pub request_sha256: Digest,
    pub decision: DeveloperDecisionKind,
    pub approved_command_argv: Vec<String>,
}

/// EscalationOutcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EscalationOutcome {
    Completed,
    Denied,
    TimedOut,
    Cancelled,
    Failed,
}

/// MailboxResult: the terminal Escalation Result. `exit_code` is present
/// when the host process ran and exited with a status; `chunk_count` and
/// the stream digests (SHA-256 of each stream's ordered bytes) let the
/// client check it received every chunk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailboxResult {
    pub protocol_version: u16,
    pub session_binding: SessionBinding,
    pub request_id: EscalationRequestId,
    pub request_sha256: Digest,
    pub coordinator_credential_id: Digest,
    pub outcome: EscalationOutcome,
    pub exit_code: Option<i32>,
    pub chunk_count: u64,
    pub stdout_sha256: Digest,
    pub stderr_sha256: Digest,
}

/// ResultStream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ResultStream {
    Stdout,
    Stderr,
}

/// MailboxResultChunk: output bytes of the host process, in sequence
/// order from 0.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MailboxResultChunk {
    pub protocol_version: u16,
    pub session_binding: SessionBinding,
    pub request_id: EscalationRequestId,
    pub request_sha256: Digest,
    pub coordinator_credential_id: Digest,
    pub sequence: u64,
    pub stream: ResultStream,
    pub bytes: Vec<u8>,
}

/// One record's exact payload bytes and the signature over them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedPayload {
    pub payload_bytes: Vec<u8>,
    pub signature: Signature,
}

/// SignedProtocolRecord: the content of one mailbox file, a union over the
/// mailbox record kinds (schemas.md), in the schema's order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SignedProtocolRecord {
    MailboxRequest(SignedPayload),
    MailboxCancellation(SignedPayload),
    MailboxResultAck(SignedPayload),
    DeveloperDecision(SignedPayload),
    MailboxResult(SignedPayload),
    MailboxResultChunk(SignedPayload),
}

impl ProtocolRecord for SignedProtocolRecord {
    const NAME: &'static str = "signed-protocol-record";
}

/// A record a mailbox file can carry.
pub trait MailboxRecord: ProtocolRecord {
    /// The envelope variant carrying `signed`.
    fn wrap(signed: SignedPayload) -> SignedProtocolRecord;
    /// The payload of `record` when it is this kind.
    fn unwrap(record: &SignedProtocolRecord) -> Option<&SignedPayload>;
    /// Refuses a record that is well formed but breaks a bound of its own
    /// (a chunk over [`MAX_RESULT_CHUNK`]).
    fn check_bounds(&self) -> Result<(), MailboxError> {
        Ok(())
    }
}

macro_rules! mailbox_record {
    ($($ty:ident => $name:literal),* $(,)?) => {
        $(impl ProtocolRecord for $ty {
            const NAME: &'static str = $name;
        })*
    };
}

mailbox_record!(
    MailboxRequest => "mailbox-request",
    MailboxCancellation => "mailbox-cancellation",
    MailboxResultAck => "mailbox-result-ack",
    DeveloperDecision => "developer-decision",
    MailboxResult => "mailbox-result",
    MailboxResultChunk => "mailbox-result-chunk",
);

macro_rules! envelope {
    ($($ty:ident),* $(,)?) => {
        $(impl MailboxRecord for $ty {
            fn wrap(signed: SignedPayload) -> SignedProtocolRecord {
                SignedProtocolRecord::$ty(signed)
            }
            fn unwrap(record: &SignedProtocolRecord) -> Option<&SignedPayload> {
                match record {
                    SignedProtocolRecord::$ty(signed) => Some(signed),
                    _ => None,
                }
            }
            mailbox_bounds!($ty);
        })*
    };
}

macro_rules! mailbox_bounds {
    (MailboxResultChunk) => {
        fn check_bounds(&self) -> Result<(), MailboxError> {
            if self.bytes.len() > MAX_RESULT_CHUNK {
                return Err(MailboxError::ChunkTooLarge {
                    len: self.bytes.len(),
                });
            }
            Ok(())
        }
    };
    ($other:ident) => {};
}

envelope!(
    MailboxRequest,
    MailboxCancellation,
    MailboxResultAck,
    DeveloperDecision,
    MailboxResult,
    MailboxResultChunk,
);

/// Why a mailbox file is refused or a record cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum MailboxError {
    #[error("the mailbox file is {len} bytes; a mailbox record is at most {MAX_MAILBOX_RECORD}")]
    TooLarge { len: usize },
    #[error("a result chunk carries {len} output bytes; at most {MAX_RESULT_CHUNK}")]
    ChunkTooLarge { len: usize },
    #[error("the mailbox file is not a signed protocol record: {0}")]
    Envelope(CodecError),
    #[error("the mailbox file carries a {found}, not a {expected}")]
    Kind {
        expected: &'static str,
        found: &'static str,
    },
    #[error("the mailbox file's signature: {0}")]
    Signature(#[from] SignatureError),
    #[error("the signed payload does not decode: {0}")]
    Payload(CodecError),
    #[error("cannot encode the record: {0}")]
    Encode(CodecError),
}

impl SignedProtocolRecord {
    /// The lower-kebab name of the record this envelope carries.
    pub fn record_name(&self) -> &'static str {
        match self {
            Self::MailboxRequest(_) => MailboxRequest::NAME,
            Self::MailboxCancellation(_) => MailboxCancellation::NAME,
            Self::MailboxResultAck(_) => MailboxResultAck::NAME,
            Self::DeveloperDecision(_) => DeveloperDecision::NAME,
            Self::MailboxResult(_) => MailboxResult::NAME,
            Self::MailboxResultChunk(_) => MailboxResultChunk::NAME,
        }
    }

    /// The envelope of one mailbox file's complete bytes, bounded before
    /// anything is decoded. Nothing in the payload is interpreted here.
    pub fn read(bytes: &[u8]) -> Result<Self, MailboxError> {
        if bytes.len() > MAX_MAILBOX_RECORD {
            return Err(MailboxError::TooLarge { len: bytes.len() });
        }
        codec::decode(Self::NAME, bytes).map_err(MailboxError::Envelope)
    }

    /// The record of kind `T`, once `signer`'s signature over its exact
    /// payload bytes verifies; then its payload is decoded, and the
    /// record's own bounds checked. Returns the record and the SHA-256 of
    /// its payload (a request's `request_sha256`).
    pub fn open<T: MailboxRecord>(&self, signer: &PublicKey) -> Result<(T, Digest), MailboxError> {
        let signed = T::unwrap(self).ok_or(MailboxError::Kind {
            expected: T::NAME,
            found: self.record_name(),
        })?;
        verify_payload(signer, T::NAME, &signed.payload_bytes, &signed.signature)?;
        let record = T::decode(&signed.payload_bytes).map_err(MailboxError::Payload)?;
        record.check_bounds()?;
        Ok((record, sha256(&signed.payload_bytes)))
    }
}

/// The complete mailbox file for `record`, signed by `key`, and the
/// SHA-256 of its payload. Refused when a bound does not hold.
pub fn seal<T: MailboxRecord>(
    key: &SigningKey,
    record: &T,
) -> Result<(Vec<u8>, Digest), MailboxError> {
    record.check_bounds()?;
    let payload_bytes = record.encode().map_err(MailboxError::Encode)?;
    let digest = sha256(&payload_bytes);
    let signature = sign_payload(key, T::NAME, &payload_bytes);
    let file = T::wrap(SignedPayload {
        payload_bytes,
        signature,
    })
    .encode()
    .map_err(MailboxError::Encode)?;
    if file.len() > MAX_MAILBOX_RECORD {
        return Err(MailboxError::TooLarge { len: file.len() });
    }
    Ok((file, digest))
}

/// The prefix of a mailbox entry still being written: a writer creates
/// `.tmp.<name>` and renames it to `<name>`, so a reader sees a whole file
/// or none, and never reads a name with this prefix.
pub const TEMPORARY_PREFIX: &str = ".tmp.";

/// What an entry's name says it carries. The name only routes: the
/// content is authenticated on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MailboxEntry {
    /// `<id>.request`: a MailboxRequest.
    Request(EscalationRequestId),
    /// `<id>.cancel`: a MailboxCancellation.
    Cancellation(EscalationRequestId),
    /// `<id>.ack.<n>`: a MailboxResultAck of chunks through `n`.
    Ack(EscalationRequestId, u64),
    /// `<id>.chunk.<n>`: result chunk `n`.
    Chunk(EscalationRequestId, u64),
    /// `<id>.result`: the terminal MailboxResult.
    Result(EscalationRequestId),
}

impl MailboxEntry {
    /// The entry's file name.
    pub fn name(&self) -> String {
        match self {
            Self::Request(id) => format!("{id}.request"),
            Self::Cancellation(id) => format!("{id}.cancel"),
            Self::Ack(id, n) => format!("{id}.ack.{n}"),
            Self::Chunk(id, n) => format!("{id}.chunk.{n}"),
            Self::Result(id) => format!("{id}.result"),
        }
    }

    /// The entry named `name`, if it is one of the forms above exactly
    /// (lower-case hex ID, decimal sequence without leading zeros).
    pub fn parse(name: &[u8]) -> Option<Self> {
        let name = std::str::from_utf8(name).ok()?;
        let (id, rest) = name.split_once('.')?;
        if id.len() != 32
            || !id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return None;
        }
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(id.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        let id = EscalationRequestId(bytes);
        let sequence = |n: &str| {
            let canonical =
                n == "0" || (!n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit()));
            if canonical {
                n.parse::<u64>().ok()
            } else {
                None
            }
        };
        match rest.split_once('.') {
            None => match rest {
                "request" => Some(Self::Request(id)),
                "cancel" => Some(Self::Cancellation(id)),
                "result" => Some(Self::Result(id)),
                _ => None,
            },
            Some(("ack", n)) => sequence(n).map(|n| Self::Ack(id, n)),
            Some(("chunk", n)) => sequence(n).map(|n| Self::Chunk(id, n)),
            Some(_) => None,
        }
    }
}
