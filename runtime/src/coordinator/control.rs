//! The v1 control connection (spec 3.3 "Protocol cryptography refinement",
//! spec 3.4; schemas.md `ControlRequest` / `ControlResponse`): the records
//! every control connection opens with, and [`SessionOpening`], the checks
//! a session connection's first frames pass before the event loop sees the
//! session.
//!
//! A connection without a client certificate carries one `Enroll` and its
//! `Enrolled` (or `Refused`). A session connection (mTLS with the enrolled
//! leaf) carries `Register`, then `Execute` or `Attach`; the coordinator
//! answers `Registered`, then `Started`, or `Refused` before either. The
//! session's stream follows: `SessionTerminalEvent` / `SessionTerminalMessage`
//! for an interactive session, `NonInteractiveSessionEvent` /
//! `NonInteractiveSessionMessage` for a piped one (`crate::terminal::protocol`).
//!
//! Variants schemas.md names come first, in its order, so their Postcard
//! indices are the schema's; Lazaret's extensions (where schemas.md is
//! silent) follow them and are named as such.
use serde::{Deserialize, Serialize};
use std::num::NonZeroU16;

use crate::coordinator::messages::{InteractiveTerminal, SessionRequest};
use crate::protocol::records::{
    ClientEnrollmentRequest, ClientEnrollmentResponse, GenerationIdentity, ProtocolCredential,
    SessionBinding, SessionRegistrationRequest, SessionRegistrationResponse, TrustManifest,
};
use crate::protocol::PROTOCOL_VERSION;
use crate::records::codec::{self, CodecError};
use crate::records::ids::{CliId, ConfigurationFingerprint, DomainId, SessionId};
use crate::terminal::protocol::{
    InteractiveSessionRequest, NonInteractiveSessionRequest, ProtocolError, MAX_RECORD_BYTES,
};

/// Largest frame body on a session connection, either way (the enrollment
/// connection's request is bounded tighter, spec 3.3).
pub const MAX_CONTROL_FRAME: usize = MAX_RECORD_BYTES;

/// The window an interactive request carries when the CLI's terminal
/// reports a zero dimension (spec 3.4: rows and columns are nonzero).
pub const DEFAULT_ROWS: NonZeroU16 = match NonZeroU16::new(24) {
    Some(v) => v,
    None => unreachable!(),
};
pub const DEFAULT_COLUMNS: NonZeroU16 = match NonZeroU16::new(80) {
    Some(v) => v,
    None => unreachable!(),
};

/// CLI -> Host Coordinator: the first frame of every control connection
/// (and the second of a session connection).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlRequest {
    Enroll(ClientEnrollmentRequest),
    Register(SessionRegistrationRequest),
    Execute(NonInteractiveSessionRequest),
    /// Lazaret extension: an interactive session's start.
    Attach(InteractiveSessionRequest),
}

impl ControlRequest {
    /// The variant's name, for a refusal or an error.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Enroll(_) => "Enroll",
            Self::Register(_) => "Register",
            Self::Execute(_) => "Execute",
            Self::Attach(_) => "Attach",
        }
    }
}

/// Host Coordinator -> CLI, before the session's stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ControlResponse {
    Enrolled(ClientEnrollmentResponse),
    Registered(SessionRegistrationResponse),
    /// Lazaret extension: the session is admitted; its stream follows.
    Started(Box<SessionStarted>),
    /// Lazaret extension: why the connection is refused (it is closed
    /// after this frame).
    Refused(Refusal),
}

/// Lazaret extension: the session joined the running generation. It is
/// sent before the session's command can start, so a CLI that loses its
/// coordinator after it never retries and a command never runs twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStarted {
    pub session_id: SessionId,
    /// Whether this session's connection launched the generation.
    pub cold: bool,
    /// Launch phase timings in microseconds (phase name, duration).
    pub timings: Vec<(String, u64)>,
    /// What the Session Request Capability of `Registered` is verified by:
    /// the manifest whose digest the publication identity pins, and the
    /// Session Coordinator's protocol credential it lists.
    pub trust_manifest: TrustManifest,
    pub coordinator_protocol_credential: ProtocolCredential,
}

/// Lazaret extension: why a control connection is refused, each a named
/// step the CLI reports as its own error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    #[error("the coordinator speaks protocol version {supported}")]
    Version { supported: u16 },
    #[error("the registration names another Domain than the coordinator's")]
    OtherDomain { running: [u8; 32] },
    /// The Domain is running with another configuration (FR-2).
    #[error("Domain '{profile}' for workspace {workspace} runs with another configuration (loaded from {config_file})")]
    OtherConfiguration {
        profile: String,
        workspace: String,
        running_fingerprint: [u8; 32],
        /// The running configuration's source file.
        config_file: String,
    },
    /// Its CLI read an earlier publication.
    #[error("the registration names generation {requested}; the Domain runs generation {running}")]
    StaleGeneration { running: u64, requested: u64 },
    #[error("the registration's Client CLI ID is not the one this connection's certificate was issued to")]
    ClientMismatch,
    #[error("the session start names another Session ID than its registration")]
    SessionMismatch,
    #[error("the Session ID is already a session of this generation")]
    SessionIdTaken,
    #[error("a malformed control frame: {0}")]
    Malformed(String),
    #[error("a {found} frame where {expected} was due")]
    Unexpected { expected: String, found: String },
    #[error("the enrollment is refused: {0}")]
    Enrollment(String),
    /// The message is the coordinator's error chain.
    #[error("the sandbox could not be launched: {0}")]
    LaunchFailed(String),
    #[error("the session could not be started: {0}")]
    SessionFailed(String),
}

/// Encodes a control request (bounded by [`MAX_CONTROL_FRAME`]).
pub fn encode_control_request(request: &ControlRequest) -> Result<Vec<u8>, CodecError> {
    codec::encode("control request", request)
}

/// Decodes one control request; trailing bytes and over-long bodies are
/// refused.
pub fn decode_control_request(body: &[u8]) -> Result<ControlRequest, Refusal> {
    if body.len() > MAX_CONTROL_FRAME {
        return Err(Refusal::Malformed(format!(
            "a control request of {} bytes exceeds the {MAX_CONTROL_FRAME}-byte bound",
            body.len()
        )));
    }
    codec::decode("control request", body).map_err(|e| Refusal::Malformed(e.to_string()))
}

/// The two frames that open a session connection for `request`: its
/// registration under `published` (the generation identity the CLI read
/// from the publication, with the Domain and configuration the CLI itself
/// resolved, so the coordinator can refuse a mismatch), then its start.
pub fn opening_requests(
    request: &SessionRequest,
    published: &GenerationIdentity,
    cli_id: CliId,
) -> Result<[ControlRequest; 2], ProtocolError> {
    let mut generation_identity = published.clone();
    generation_identity.domain_id = DomainId(request.domain_id);
    generation_identity.configuration_fingerprint = ConfigurationFingerprint(request.fingerprint);
    let register = ControlRequest::Register(SessionRegistrationRequest {
        protocol_version: PROTOCOL_VERSION,
        session_binding: SessionBinding {
            generation_identity,
            cli_id,
            session_id: request.session_id,
            session_anchor_public_key: request.session_anchor,
        },
    });
    let start = match &request.terminal {
        None => ControlRequest::Execute(NonInteractiveSessionRequest::new(
            request.session_id,
            request.argv.clone(),
        )?),
        Some(terminal) => ControlRequest::Attach(InteractiveSessionRequest::new(
            request.session_id,
            request.argv.clone(),
            NonZeroU16::new(terminal.size.rows).unwrap_or(DEFAULT_ROWS),
            NonZeroU16::new(terminal.size.columns).unwrap_or(DEFAULT_COLUMNS),
            terminal.term.clone(),
        )?),
    };
    Ok([register, start])
}

/// A session connection whose opening frames passed [`SessionOpening`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenedSession {
    pub binding: SessionBinding,
    pub request: SessionRequest,
    /// Whether its configuration fingerprint is this generation's; a
    /// mismatch is the model's RefuseConfigurationMismatch, decided by the
    /// event loop (spec 3.3, FR-2).
    pub matches: bool,
}

/// The checks on a session connection's first frames, fed one frame body
/// at a time by the acceptor: a `Register` whose binding is this
/// generation's (Domain, generation, coordinator and sandbox; the
/// configuration is compared by the event loop) for the Client CLI the
/// connection's leaf was issued to, then an `Execute` or `Attach` of the
/// same Session ID. Anything else, in any order, is refused by name.
#[derive(Debug)]
pub struct SessionOpening {
    expected: GenerationIdentity,
    cli_id: CliId,
    registered: Option<SessionBinding>,
}

impl SessionOpening {
    pub fn new(expected: GenerationIdentity, cli_id: CliId) -> Self {
        Self {
            expected,
            cli_id,
            registered: None,
        }
    }

    /// One frame body: `Ok(None)` while the start is still due,
    /// `Ok(Some(_))` once the session is opened (no further frame is an
    /// opening frame), `Err` for the refusal the connection ends with.
    pub fn feed(&mut self, body: &[u8]) -> Result<Option<OpenedSession>, Refusal> {
        let request = decode_control_request(body)?;
        match (self.registered.take(), request) {
            (None, ControlRequest::Register(registration)) => {
                self.register(&registration)?;
                self.registered = Some(registration.session_binding);
                Ok(None)
            }
            (Some(binding), ControlRequest::Execute(start)) => {
                let (session_id, argv) = (start.session_id(), start.argv().to_vec());
                Self::start(binding, session_id, argv, None, &self.expected).map(Some)
            }
            (Some(binding), ControlRequest::Attach(start)) => {
                let terminal = InteractiveTerminal {
                    size: crate::coordinator::messages::TerminalSize {
                        rows: start.rows().get(),
                        columns: start.columns().get(),
                    },
                    term: start.term().map(str::to_owned),
                };
                let (session_id, argv) = (start.session_id(), start.argv().to_vec());
                Self::start(binding, session_id, argv, Some(terminal), &self.expected).map(Some)
            }
            (None, other) => Err(Refusal::Unexpected {
                expected: "Register".into(),
                found: other.name().into(),
            }),
            (Some(_), other) => Err(Refusal::Unexpected {
                expected: "Execute or Attach".into(),
                found: other.name().into(),
            }),
        }
    }

    fn register(&self, registration: &SessionRegistrationRequest) -> Result<(), Refusal> {
        if registration.protocol_version != PROTOCOL_VERSION {
            return Err(Refusal::Version {
                supported: PROTOCOL_VERSION,
            });
        }
        let binding = &registration.session_binding;
        let named = &binding.generation_identity;
        if named.domain_id != self.expected.domain_id {
            return Err(Refusal::OtherDomain {
                running: self.expected.domain_id.0,
            });
        }
        let mut same_configuration = named.clone();
        same_configuration.configuration_fingerprint = self.expected.configuration_fingerprint;
        if same_configuration != self.expected {
            return Err(Refusal::StaleGeneration {
                running: self.expected.generation_id.0,
                requested: named.generation_id.0,
            });
        }
        if binding.cli_id != self.cli_id {
            return Err(Refusal::ClientMismatch);
        }
        Ok(())
    }

    fn start(
        binding: SessionBinding,
        session_id: SessionId,
        argv: Vec<String>,
        terminal: Option<InteractiveTerminal>,
        expected: &GenerationIdentity,
    ) -> Result<OpenedSession, Refusal> {
        if session_id != binding.session_id {
            return Err(Refusal::SessionMismatch);
        }
        let named = &binding.generation_identity;
        let request = SessionRequest {
            domain_id: named.domain_id.0,
            fingerprint: named.configuration_fingerprint.0,
            session_id,
            argv,
            terminal,
            session_anchor: binding.session_anchor_public_key,
        };
        Ok(OpenedSession {
            matches: named.configuration_fingerprint == expected.configuration_fingerprint,
            binding,
            request,
        })
    }
}
