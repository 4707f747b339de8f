//! The Escalation Client's side of the mailbox records (spec 3.8): what a
//! process in the Agent Sandbox signs and checks, given the sandbox
//! credential bundle (spec 3.3: read-only at the fixed credential path)
//! and its session's Session Request Capability (delivered with its guest
//! execution). It signs requests, cancellations and acknowledgements with
//! the sandbox key, and accepts result chunks and the terminal result only
//! when the Session Coordinator's key signed them, for its own open
//! request, in sequence, with a result whose chunk count and stream digests
//! match what it received.
use ed25519_dalek::SigningKey;
use sha2::{Digest as _, Sha256};

use crate::ids::EscalationRequestId;
use crate::mailbox::{
    seal, EscalationOutcome, MailboxCancellation, MailboxError, MailboxRequest, MailboxResult,
    MailboxResultAck, MailboxResultChunk, ResultStream, SignedProtocolRecord,
};
use crate::records::{Digest, PublicKey, SandboxCredentialBundle, SessionRequestCapability};
use crate::signing::{verify, SignatureError};
use crate::PROTOCOL_VERSION;

use crate::command::{check_argv, CommandError};
use crate::open_request::{OpenRequest, MAX_JUSTIFICATION};

/// The fixed credential path inside the sandbox (spec 3.3 "Protocol
/// cryptography refinement"): the Agent Sandbox's credential bundle
/// (`SandboxCredentialBundle`, its v1 Postcard encoding), a read-only file
/// mount whose host source the Host Coordinator unlinks once the sandbox
/// runs.
pub const CREDENTIALS: &str = "/.lazaret/credentials";

/// The environment variable every session's guest process gets (spec 3.3:
/// "HC delivers the signed Session Request Capability with guest
/// execution"): the session's `SessionRequestCapability`, its v1 Postcard
/// encoding in lowercase hex.
pub const SESSION_CAPABILITY_ENV: &str = "LAZARET_SESSION_CAPABILITY";

/// Where the generation's Escalation Mailbox appears inside the sandbox
/// (spec 3.8), read-only, when the profile enables escalation; an empty
/// directory otherwise.
pub const SANDBOX_MAILBOX: &str = "/.lazaret/escalation";

/// Where, inside the sandbox, the client writes requests, cancellations and
/// acknowledgements: the mailbox's inbound direction, mounted read-write
/// over its place in [`SANDBOX_MAILBOX`].
pub const SANDBOX_REQUESTS: &str = "/.lazaret/escalation/requests";

/// Where, inside the sandbox, the coordinator's result chunks and results
/// appear: the mailbox's outbound direction, read-only to the sandbox.
pub const SANDBOX_RESULTS: &str = "/.lazaret/escalation/results";

/// Why the Escalation Client refuses its own input or the coordinator's
/// records.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the session capability is not the coordinator's for this sandbox: {0}")]
    Capability(SignatureError),
    #[error("the session capability names another generation, coordinator or sandbox credential than the credential bundle")]
    OtherCredentials,
    #[error("the command: {0}")]
    Command(#[from] CommandError),
    #[error("the justification is {len} bytes; at most {MAX_JUSTIFICATION}")]
    Justification { len: usize },
    #[error("{0}")]
    Record(#[from] MailboxError),
    #[error("the {record} is for another session or request")]
    OtherRequest { record: &'static str },
    #[error("result chunk {found} arrived where chunk {expected} was due")]
    OutOfSequence { expected: u64, found: u64 },
    #[error("the result counts {counted} chunks but {received} arrived")]
    MissingChunks { counted: u64, received: u64 },
    #[error("the result's {stream:?} digest does not match the output received")]
    Digest { stream: ResultStream },
}

/// The sandbox's signing authority for one session.
pub struct EscalationClient {
    key: SigningKey,
    sandbox_credential_id: Digest,
    coordinator_public_key: PublicKey,
    coordinator_credential_id: Digest,
    capability: SessionRequestCapability,
}

impl std::fmt::Debug for EscalationClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EscalationClient")
            .field("session", &self.capability.session_binding.session_id)
            .finish_non_exhaustive()
    }
}

impl EscalationClient {
    /// The client of the session `capability` binds, once the capability
    /// verifies under the bundle's Session Coordinator credential and
    /// names the bundle's generation and sandbox credential.
    pub fn new(
        bundle: &SandboxCredentialBundle,
        capability: SessionRequestCapability,
    ) -> Result<Self, ClientError> {
        let coordinator = &bundle.coordinator_protocol_credential;
        let sandbox = &bundle.sandbox_protocol_credential;
        if capability.session_binding.generation_identity != bundle.generation_identity
            || capability.coordinator_credential_id != coordinator.credential_id
            || capability.sandbox_credential_id != sandbox.credential_id
        {
            return Err(ClientError::OtherCredentials);
        }
        let id = verify(
            &coordinator.public_key,
            &capability.claims(),
            &capability.coordinator_signature,
        )
        .map_err(ClientError::Capability)?;
        if id != capability.capability_id {
            return Err(ClientError::OtherCredentials);
        }
        Ok(Self {
            key: SigningKey::from_bytes(&bundle.sandbox_private_key),
            sandbox_credential_id: sandbox.credential_id,
            coordinator_public_key: coordinator.public_key,
            coordinator_credential_id: coordinator.credential_id,
            capability,
        })
    }

    /// The signed request file for `argv` with `justification` under the
    /// caller's fresh random `request_id`, and the reader of its results.
    pub fn request(
        &self,
        request_id: EscalationRequestId,
        argv: Vec<String>,
        justification: String,
    ) -> Result<(Vec<u8>, ResultReader), ClientError> {
        check_argv(&argv)?;
        if justification.len() > MAX_JUSTIFICATION {
            return Err(ClientError::Justification {
                len: justification.len(),
            });
        }
        let request = MailboxRequest {
            protocol_version: PROTOCOL_VERSION,
            session_binding: self.capability.session_binding.clone(),
            request_id,
            session_capability: self.capability.clone(),
            sandbox_credential_id: self.sandbox_credential_id,
            command_argv: argv,
            justification,
        };
        let (file, digest) = seal(&self.key, &request)?;
        let reader = ResultReader {
            open: OpenRequest::of(&request, digest),
            coordinator_public_key: self.coordinator_public_key,
            coordinator_credential_id: self.coordinator_credential_id,
            received: 0,
            stdout: Sha256::new(),
            stderr: Sha256::new(),
        };
        Ok((file, reader))
    }

    /// The signed cancellation of `reader`'s request.
    pub fn cancellation(&self, reader: &ResultReader) -> Result<Vec<u8>, ClientError> {
        let c = MailboxCancellation {
            protocol_version: PROTOCOL_VERSION,
            session_binding: reader.open.session_binding.clone(),
            request_id: reader.open.request_id,
            session_capability: self.capability.clone(),
            sandbox_credential_id: self.sandbox_credential_id,
        };
        Ok(seal(&self.key, &c)?.0)
    }

    /// The signed acknowledgement of every chunk `reader` received, or
    /// `None` before the first.
    pub fn acknowledgement(&self, reader: &ResultReader) -> Result<Option<Vec<u8>>, ClientError> {
        let Some(highest) = reader.received.checked_sub(1) else {
            return Ok(None);
        };
        let a = MailboxResultAck {
            protocol_version: PROTOCOL_VERSION,
            session_binding: reader.open.session_binding.clone(),
            request_id: reader.open.request_id,
            request_sha256: reader.open.request_sha256,
            session_capability: self.capability.clone(),
            sandbox_credential_id: self.sandbox_credential_id,
            highest_contiguous_sequence: highest,
        };
        Ok(Some(seal(&self.key, &a)?.0))
    }
}

/// The results of one request as they arrive.
#[derive(Debug)]
pub struct ResultReader {
    open: OpenRequest,
    coordinator_public_key: PublicKey,
    coordinator_credential_id: Digest,
    /// Chunks received in sequence (the next one's sequence).
    received: u64,
    stdout: Sha256,
    stderr: Sha256,
}

impl ResultReader {
    /// The request this reader belongs to.
    pub fn request(&self) -> &OpenRequest {
        &self.open
    }

    /// Chunks received in sequence so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    fn names(
        &self,
        record: &'static str,
        binding_ok: bool,
        id: EscalationRequestId,
        sha: &Digest,
        cred: &Digest,
    ) -> Result<(), ClientError> {
        if !binding_ok
            || id != self.open.request_id
            || *sha != self.open.request_sha256
            || *cred != self.coordinator_credential_id
        {
            return Err(ClientError::OtherRequest { record });
        }
        Ok(())
    }

    /// The next chunk, from its file: the coordinator's, for this request,
    /// exactly the next in sequence.
    pub fn chunk(&mut self, file: &[u8]) -> Result<MailboxResultChunk, ClientError> {
        let (chunk, _) = SignedProtocolRecord::read(file)?
            .open::<MailboxResultChunk>(&self.coordinator_public_key)?;
        self.names(
            "result chunk",
            chunk.session_binding == self.open.session_binding,
            chunk.request_id,
            &chunk.request_sha256,
            &chunk.coordinator_credential_id,
        )?;
        if chunk.sequence != self.received {
            return Err(ClientError::OutOfSequence {
                expected: self.received,
                found: chunk.sequence,
            });
        }
        match chunk.stream {
            ResultStream::Stdout => self.stdout.update(&chunk.bytes),
            ResultStream::Stderr => self.stderr.update(&chunk.bytes),
        }
        self.received += 1;
        Ok(chunk)
    }

    /// The terminal result, from its file: the coordinator's, for this
    /// request, counting exactly the chunks received and digesting exactly
    /// their bytes.
    pub fn result(&self, file: &[u8]) -> Result<MailboxResult, ClientError> {
        let (result, _) = SignedProtocolRecord::read(file)?
            .open::<MailboxResult>(&self.coordinator_public_key)?;
        self.names(
            "result",
            result.session_binding == self.open.session_binding,
            result.request_id,
            &result.request_sha256,
            &result.coordinator_credential_id,
        )?;
        // A run that was cancelled or timed out gave its unacknowledged
        // chunks up (spec 3.8): it counts them, the client never saw them,
        // and the output is incomplete by its outcome.
        if result.outcome != EscalationOutcome::Completed {
            if result.chunk_count < self.received {
                return Err(ClientError::MissingChunks {
                    counted: result.chunk_count,
                    received: self.received,
                });
            }
            return Ok(result);
        }
        if result.chunk_count != self.received {
            return Err(ClientError::MissingChunks {
                counted: result.chunk_count,
                received: self.received,
            });
        }
        for (stream, digest, expected) in [
            (ResultStream::Stdout, &self.stdout, result.stdout_sha256),
            (ResultStream::Stderr, &self.stderr, result.stderr_sha256),
        ] {
            if <[u8; 32]>::from(digest.clone().finalize()) != expected {
                return Err(ClientError::Digest { stream });
            }
        }
        Ok(result)
    }
}
