//! Authentication and correlation of the Agent Sandbox's mailbox records
//! (spec 3.8, spec 3.3 protocol cryptography refinement). A request,
//! cancellation or acknowledgement is accepted only when, in this order:
//! the sandbox request-signing key's signature verifies over the file's
//! exact payload bytes (before they are decoded); the record speaks v1 and
//! names this generation's sandbox credential and identity; its Session
//! Request Capability is the Session Coordinator's, for that sandbox
//! credential, and binds exactly the record's session; and that session is
//! registered and live. A path, file owner or PID is never evidence.
//!
//! Every request ID is accepted at most once per generation
//! ([`RequestLedger`]): a replayed request file, byte for byte, is refused
//! like any reused ID.
use std::collections::BTreeSet;

use crate::protocol::mailbox::{
    MailboxCancellation, MailboxError, MailboxRecord, MailboxRequest, MailboxResultAck,
    SignedProtocolRecord,
};
use crate::protocol::records::{
    Digest, GenerationIdentity, ProtocolCredential, SessionBinding, SessionRequestCapability,
};
use crate::protocol::signing::{verify, SignatureError};
use crate::protocol::{TrustAnchor, PROTOCOL_VERSION};
use crate::records::ids::{EscalationRequestId, SessionId};
pub use lazaret_wire::open_request::{OpenRequest, MAX_JUSTIFICATION};

/// Request IDs one generation accepts (each one remembered so none is
/// accepted twice). At the bound further requests are refused until the
/// Domain restarts.
pub const MAX_REQUESTS_PER_GENERATION: usize = 65_536;

/// What the Host Coordinator checks the sandbox's records by: this
/// generation's identity and the two protocol credentials (their public
/// keys; no private key).
#[derive(Clone, Debug)]
pub struct MailboxAuthority {
    generation: GenerationIdentity,
    coordinator_credential: ProtocolCredential,
    sandbox_credential: ProtocolCredential,
}

impl MailboxAuthority {
    /// The authority of `anchor`'s generation.
    pub fn of(anchor: &TrustAnchor) -> Self {
        Self {
            generation: anchor.manifest().generation_identity.clone(),
            coordinator_credential: anchor.coordinator_credential().clone(),
            sandbox_credential: anchor.sandbox_credential().clone(),
        }
    }
}

/// Why the Host Coordinator refuses a mailbox record. Each names the check
/// that failed.
#[derive(Debug, thiserror::Error)]
pub enum MailboxRefusal {
    #[error("{0}")]
    Record(#[from] MailboxError),
    #[error("the {record} speaks protocol version {found}, not {PROTOCOL_VERSION}")]
    Version { record: &'static str, found: u16 },
    #[error("the {record} names another sandbox credential than this generation's")]
    OtherSandboxCredential { record: &'static str },
    #[error("the {record} is bound to another generation")]
    OtherGeneration { record: &'static str },
    #[error("the {record}'s session capability names another coordinator or sandbox credential")]
    CapabilityCredential { record: &'static str },
    #[error("the {record}'s session capability: {source}")]
    CapabilityForged {
        record: &'static str,
        source: SignatureError,
    },
    #[error("the {record}'s session capability ID is not the digest of its claims")]
    CapabilityId { record: &'static str },
    #[error("the {record} carries another session's capability")]
    AnotherSessionsCapability { record: &'static str },
    #[error("the {record} names session {session}, which is not registered with this coordinator")]
    SessionNotRegistered {
        record: &'static str,
        session: SessionId,
    },
    #[error(
        "escalation request {id} was already submitted in this generation (a replayed request)"
    )]
    Replayed { id: EscalationRequestId },
    #[error("this generation accepted {MAX_REQUESTS_PER_GENERATION} escalation requests; restart the Domain for more")]
    LedgerFull,
    #[error("the request's justification is {len} bytes; at most {MAX_JUSTIFICATION}")]
    JustificationTooLong { len: usize },
    #[error("the {record} names request {found}, not the session's open request {open}")]
    NotTheOpenRequest {
        record: &'static str,
        open: EscalationRequestId,
        found: EscalationRequestId,
    },
    #[error("the acknowledgement names another request digest than the open request's")]
    OtherRequestDigest,
}

/// The fields every sandbox-signed mailbox record carries.
pub trait SandboxSigned: MailboxRecord {
    fn protocol_version(&self) -> u16;
    fn session_binding(&self) -> &SessionBinding;
    fn request_id(&self) -> EscalationRequestId;
    fn session_capability(&self) -> &SessionRequestCapability;
    fn sandbox_credential_id(&self) -> &Digest;
}

macro_rules! sandbox_signed {
    ($($ty:ty),*) => {
        $(impl SandboxSigned for $ty {
            fn protocol_version(&self) -> u16 {
                self.protocol_version
            }
            fn session_binding(&self) -> &SessionBinding {
                &self.session_binding
            }
            fn request_id(&self) -> EscalationRequestId {
                self.request_id
            }
            fn session_capability(&self) -> &SessionRequestCapability {
                &self.session_capability
            }
            fn sandbox_credential_id(&self) -> &Digest {
                &self.sandbox_credential_id
            }
        })*
    };
}

sandbox_signed!(MailboxRequest, MailboxCancellation, MailboxResultAck);

/// The sandbox-signed record of kind `T` in `file`, once every check of
/// this module's preamble passed, and the SHA-256 of its payload.
/// `registered` answers whether a session binding is one this coordinator
/// registered and still serves.
pub fn authenticate<T: SandboxSigned>(
    file: &SignedProtocolRecord,
    authority: &MailboxAuthority,
    registered: impl Fn(&SessionBinding) -> bool,
) -> Result<(T, Digest), MailboxRefusal> {
    let record_name = T::NAME;
    let (record, digest) = file.open::<T>(&authority.sandbox_credential.public_key)?;
    if record.protocol_version() != PROTOCOL_VERSION {
        return Err(MailboxRefusal::Version {
            record: record_name,
            found: record.protocol_version(),
        });
    }
    if *record.sandbox_credential_id() != authority.sandbox_credential.credential_id {
        return Err(MailboxRefusal::OtherSandboxCredential {
            record: record_name,
        });
    }
    if record.session_binding().generation_identity != authority.generation {
        return Err(MailboxRefusal::OtherGeneration {
            record: record_name,
        });
    }
    let capability = record.session_capability();
    if capability.protocol_version != PROTOCOL_VERSION {
        return Err(MailboxRefusal::Version {
            record: "session request capability",
            found: capability.protocol_version,
        });
    }
    if capability.coordinator_credential_id != authority.coordinator_credential.credential_id
        || capability.sandbox_credential_id != authority.sandbox_credential.credential_id
    {
        return Err(MailboxRefusal::CapabilityCredential {
            record: record_name,
        });
    }
    let capability_id = verify(
        &authority.coordinator_credential.public_key,
        &capability.claims(),
        &capability.coordinator_signature,
    )
    .map_err(|source| MailboxRefusal::CapabilityForged {
        record: record_name,
        source,
    })?;
    if capability_id != capability.capability_id {
        return Err(MailboxRefusal::CapabilityId {
            record: record_name,
        });
    }
    if capability.session_binding != *record.session_binding() {
        return Err(MailboxRefusal::AnotherSessionsCapability {
            record: record_name,
        });
    }
    if !registered(record.session_binding()) {
        return Err(MailboxRefusal::SessionNotRegistered {
            record: record_name,
            session: record.session_binding().session_id,
        });
    }
    Ok((record, digest))
}

/// The request IDs this generation accepted.
#[derive(Debug, Default)]
pub struct RequestLedger {
    seen: BTreeSet<EscalationRequestId>,
}

impl RequestLedger {
    /// Admits an authenticated `request` once: its ID was never accepted
    /// in this generation and its justification fits a prompt.
    pub fn admit(&mut self, request: &MailboxRequest) -> Result<(), MailboxRefusal> {
        if request.justification.len() > MAX_JUSTIFICATION {
            return Err(MailboxRefusal::JustificationTooLong {
                len: request.justification.len(),
            });
        }
        if self.seen.contains(&request.request_id) {
            return Err(MailboxRefusal::Replayed {
                id: request.request_id,
            });
        }
        if self.seen.len() >= MAX_REQUESTS_PER_GENERATION {
            return Err(MailboxRefusal::LedgerFull);
        }
        self.seen.insert(request.request_id);
        debug_assert!(self.seen.len() <= MAX_REQUESTS_PER_GENERATION);
        Ok(())
    }

    /// How many requests this generation accepted.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

fn names<T: SandboxSigned>(open: &OpenRequest, record: &T) -> Result<(), MailboxRefusal> {
    if *record.session_binding() != open.session_binding {
        return Err(MailboxRefusal::AnotherSessionsCapability { record: T::NAME });
    }
    if record.request_id() != open.request_id {
        return Err(MailboxRefusal::NotTheOpenRequest {
            record: T::NAME,
            open: open.request_id,
            found: record.request_id(),
        });
    }
    Ok(())
}

/// An authenticated cancellation withdraws this request only when it
/// names it (the model's `RequestCancellation`).
pub fn correlate_cancellation(
    open: &OpenRequest,
    c: &MailboxCancellation,
) -> Result<(), MailboxRefusal> {
    names(open, c)
}

/// An authenticated acknowledgement counts for this request only when
/// it names it and its payload digest.
pub fn correlate_ack(open: &OpenRequest, a: &MailboxResultAck) -> Result<(), MailboxRefusal> {
    names(open, a)?;
    if a.request_sha256 != open.request_sha256 {
        return Err(MailboxRefusal::OtherRequestDigest);
    }
    Ok(())
}
