//! The CLI side of the chain: find the Domain's Host Coordinator or start
//! it (detached into its own session), join with the Domain ID and
//! configuration fingerprint, forward stdin and stream stdout/stderr
//! separately until the command's status arrives.
use super::channel::{self, ChannelError};
use super::client_prompt::{ClientPrompt, Typed};
use super::control_tls::{self, ControlTlsError};
use super::paths::{DomainPaths, ShortSocketPath};
use super::publication::{self, PublicationError};
use super::LOST_LOCK_EXIT;
use crate::crash_point::crash_point;
use ed25519_dalek::SigningKey;
use lazaret_runtime::coordinator::control::{
    opening_requests, ControlResponse, Refusal, MAX_CONTROL_FRAME,
};
use lazaret_runtime::coordinator::frame::PREFIX;
use lazaret_runtime::coordinator::messages::{CommandStatus, SessionRequest, TerminalSize};
use lazaret_runtime::escalation::prompt::{closing_text, prompt_text};
use lazaret_runtime::protocol::records::{ProtocolPublicationIdentity, SessionBinding};
use lazaret_runtime::protocol::tls::{check_publication, ClientTlsError, ClientTlsKey};
use lazaret_runtime::protocol::{verify_registration, ExpectedRegistration, VerifyError};
use lazaret_runtime::records::ids::{CliId, ConfigurationFingerprint, DomainId, SessionId};
use lazaret_runtime::terminal::escape_filter::{OutputStream, SessionOutputFilter};
use lazaret_runtime::terminal::protocol::{
    Chunk, NonInteractiveInput, NonInteractiveOutput, NonInteractiveSessionEvent,
    NonInteractiveSessionMessage, PromptClosed, ProtocolError, SessionAbort, SessionAbortKind,
    SessionClose, SessionExit, SessionTerminalEvent, SessionTerminalMessage, TerminalInput,
    TerminalResize, MAX_CHUNK_BYTES, MAX_RECORD_BYTES,
};
use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zeroize::Zeroize;

/// Join attempts (a coordinator that is stopping is waited out).
const ATTEMPTS: u32 = 400;
/// Pause between attempts.
const RETRY: Duration = Duration::from_millis(25);
/// How long a started coordinator may take to bind its socket.
const START_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot start the Host Coordinator {program}: {source}")]
    Start { program: PathBuf, source: io::Error },
    #[error("the Host Coordinator exited ({status}) without serving: {log}")]
    CoordinatorFailed { status: String, log: String },
    #[error("the Host Coordinator socket {path}: {source}")]
    Connect { path: PathBuf, source: io::Error },
    #[error("the Domain's coordinator channel: {0}")]
    Channel(#[from] ChannelError),
    #[error("the running Host Coordinator speaks protocol version {supported}, this lazaret speaks {ours}; let its sessions finish first")]
    Version { supported: u16, ours: u16 },
    #[error("the socket {path} belongs to another Domain ({running})")]
    OtherDomain { path: PathBuf, running: String },
    #[error("Domain '{profile}' for workspace {workspace} is already running with another configuration (fingerprint {running}, loaded from {source_file}); end its sessions first, or restore that configuration")]
    OtherConfiguration {
        profile: String,
        workspace: String,
        running: String,
        source_file: String,
    },
    #[error("the sandbox could not be launched: {0}")]
    LaunchFailed(String),
    #[error("the session could not be started: {0}")]
    SessionFailed(String),
    #[error("the session ended without the command's status: {0}")]
    SessionLost(String),
    #[error("gave up joining the Domain after {ATTEMPTS} attempts (it kept stopping)")]
    GaveUp,
    #[error("writing the command's output: {0}")]
    Output(io::Error),
    /// Spec 3.3: the coordinator's answer does not bind this session to
    /// this client's Session Anchor under a manifest of the resolved
    /// Domain and configuration.
    #[error("the coordinator's session registration is refused: {0}")]
    Registration(#[source] VerifyError),
    #[error(transparent)]
    Publication(PublicationError),
    /// Spec 3.3: the published identity is not this Domain's.
    #[error("the coordinator's publication identity is refused: {0}")]
    PublicationRefused(#[source] ClientTlsError),
    /// The control connection failed on every one of its attempts.
    #[error("the control connection to the Host Coordinator: {0}")]
    Control(#[source] ControlTlsError),
    #[error("the kernel's random source: {0}")]
    Random(#[source] io::Error),
    /// The session's opening frames cannot be built (its argv or `TERM`).
    #[error("the session request: {0}")]
    Request(#[source] ProtocolError),
    /// The coordinator refused a step of the session's opening.
    #[error("the coordinator refused the session: {0}")]
    Refused(#[source] Refusal),
    /// The coordinator's answer was not the record due.
    #[error("the coordinator sent {found} where {expected} was due")]
    Unexpected {
        expected: &'static str,
        found: &'static str,
    },
}

/// The Session Anchor of one Client Session (spec 3.3 "Protocol
/// cryptography refinement"): an Ed25519 key this CLI process holds in
/// memory; only its public key is sent, and the Session Request
/// Capability the coordinator returns must bind exactly that key.
pub struct SessionAnchor(SigningKey);

impl SessionAnchor {
    /// A fresh key from the kernel's random source.
    pub fn generate() -> io::Result<Self> {
        let mut seed: [u8; 32] = super::session::random_bytes()?;
        crate::crash_point::disclose_secret!("session-anchor", &seed);
        let key = SigningKey::from_bytes(&seed);
        seed.zeroize();
        Ok(Self(key))
    }

    pub fn public_key(&self) -> [u8; 32] {
        self.0.verifying_key().to_bytes()
    }

    /// The key, for the session's developer decisions (it stays in this
    /// process).
    fn signing_key(&self) -> SigningKey {
        self.0.clone()
    }
}

impl std::fmt::Debug for SessionAnchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SessionAnchor(public ")?;
        for b in self.public_key() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// A fresh Session ID for the session's registration (spec 3.3: the
/// Client CLI chooses it; the coordinator refuses one it already has).
pub fn fresh_session_id() -> io::Result<SessionId> {
    Ok(SessionId(super::session::random_bytes()?))
}

/// What the CLI knows before it joins.
#[derive(Debug)]
pub struct JoinPlan {
    pub paths: DomainPaths,
    pub request: SessionRequest,
    /// The session's anchor; `request.session_anchor` is its public key.
    pub session_anchor: SessionAnchor,
    /// `lazaret __coordinator ...` (program first).
    pub coordinator: Vec<OsString>,
}

/// Phase timings the CLI can print (`--timings`).
#[derive(Debug, Default)]
pub struct ClientTimings {
    pub phases: Vec<(String, Duration)>,
    pub coordinator: Vec<(String, u64)>,
    pub cold: bool,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn start_coordinator(plan: &JoinPlan) -> Result<Child, ClientError> {
    let (program, args) = plan
        .coordinator
        .split_first()
        .ok_or_else(|| ClientError::Start {
            program: PathBuf::new(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "empty coordinator argv"),
        })?;
    let start = |source| ClientError::Start {
        program: PathBuf::from(program),
        source,
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(plan.paths.log())
        .map_err(start)?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    // SAFETY: setsid is async-signal-safe and touches no memory of the
    // parent; it detaches the coordinator into its own session so the
    // terminal's signals and the CLI's exit do not reach it.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::setsid()?;
            Ok(())
        });
    }
    cmd.spawn().map_err(start)
}

enum Attempt {
    /// Joined: the session connection, the timings and the session's
    /// binding as its registration verified it.
    Joined(UnixStream, ClientTimings, Box<SessionBinding>),
    Retry,
}

/// Consecutive control connections that may fail their TLS handshake or
/// enrollment (a coordinator replaced between reading its publication and
/// connecting) before the failure is the join's.
const TLS_ATTEMPTS: u32 = 3;

/// What the CLI's control connection is, once it is authenticated.
enum Authenticated {
    /// The mTLS connection's plaintext, the publication it pinned, and the
    /// Client CLI ID its leaf was issued to.
    Connected(UnixStream, Box<ProtocolPublicationIdentity>, CliId),
    /// No publication identity, or no socket after the enrollment (the
    /// coordinator is stopping): try again.
    Unpublished,
}

/// Spec 3.3: the publication identity read from the Domain's host-private
/// runtime directory pins the coordinator; on `first`, a connection
/// without a client certificate, this CLI enrolls a fresh key as a fresh
/// Client CLI ID; the session runs on a new mTLS connection with the
/// issued one-hour leaf.
fn authenticate(plan: &JoinPlan, first: UnixStream) -> Result<Authenticated, ClientError> {
    let publication = match publication::read(&plan.paths.publication()) {
        Ok(publication) => publication,
        Err(e) if e.is_absent() => return Ok(Authenticated::Unpublished),
        Err(e) => return Err(ClientError::Publication(e)),
    };
    check_publication(&publication, DomainId(plan.request.domain_id))
        .map_err(ClientError::PublicationRefused)?;
    let mut seed: [u8; 32] = super::session::random_bytes().map_err(ClientError::Random)?;
    crate::crash_point::disclose_secret!("client-tls", &seed);
    let key = ClientTlsKey::from_seed(&seed);
    seed.zeroize();
    let cli_id = CliId(super::session::random_bytes().map_err(ClientError::Random)?);
    let credential =
        control_tls::enroll(first, &publication, &key, cli_id).map_err(ClientError::Control)?;
    crash_point!(Cli, "enrolled", "after", "Enrolled");
    let second = match connect(plan) {
        Ok(second) => second,
        // The coordinator withdrew its socket since the enrollment (it is
        // stopping): the join starts over.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(Authenticated::Unpublished)
        }
        Err(source) => {
            return Err(ClientError::Connect {
                path: plan.paths.socket(),
                source,
            })
        }
    };
    let stream =
        control_tls::open(second, &publication, &key, &credential).map_err(ClientError::Control)?;
    Ok(Authenticated::Connected(
        stream,
        Box::new(publication),
        cli_id,
    ))
}

fn connect(plan: &JoinPlan) -> io::Result<UnixStream> {
    let short = ShortSocketPath::new(&plan.paths.socket())?;
    UnixStream::connect(short.path())
}

/// Spec 3.3 session registration, then the session's start: the two
/// opening frames, answered by `Registered` (the Session Request
/// Capability, verified against this CLI's Session Anchor under the pinned
/// manifest) and `Started`, or by a refusal.
fn register(
    plan: &JoinPlan,
    mut stream: UnixStream,
    publication: &ProtocolPublicationIdentity,
    cli_id: CliId,
    timings: &mut ClientTimings,
) -> Result<Attempt, ClientError> {
    let t = Instant::now();
    crash_point!(Cli, "hello", "before", "Hello");
    let opening = opening_requests(&plan.request, &publication.generation_identity, cli_id)
        .map_err(ClientError::Request)?;
    for request in &opening {
        channel::send(&mut stream, "client", request)?;
    }
    // HC answers before the session's command starts (`Registered` and
    // `Started` are the EnrollClient step's effect), so no output can
    // precede the answer.
    let registered = match answer(&mut stream)? {
        None => return Ok(Attempt::Retry),
        Some(ControlResponse::Registered(registered)) => registered,
        Some(other) => return Err(refused(plan, other, "Registered")),
    };
    let started = match answer(&mut stream)? {
        None => return Ok(Attempt::Retry),
        Some(ControlResponse::Started(started)) => started,
        Some(other) => return Err(refused(plan, other, "Started")),
    };
    timings
        .phases
        .push(("hello_and_launch_or_join".into(), t.elapsed()));
    let expected = ExpectedRegistration {
        domain_id: DomainId(plan.request.domain_id),
        configuration_fingerprint: ConfigurationFingerprint(plan.request.fingerprint),
        generation_id: publication.generation_identity.generation_id,
        session_anchor: plan.session_anchor.public_key(),
        trust_manifest_sha256: publication.trust_manifest_sha256,
    };
    verify_registration(
        &registered,
        &started.trust_manifest,
        &started.coordinator_protocol_credential,
        &expected,
    )
    .map_err(ClientError::Registration)?;
    if started.session_id != plan.request.session_id
        || registered.session_capability.session_binding.session_id != plan.request.session_id
    {
        return Err(ClientError::Refused(Refusal::SessionMismatch));
    }
    timings.cold = started.cold;
    timings.coordinator = started.timings;
    let binding = Box::new(registered.session_capability.session_binding);
    Ok(Attempt::Joined(stream, std::mem::take(timings), binding))
}

/// One answer of the opening; `None` when the coordinator went away first
/// (it was stopping: the join starts over).
fn answer(stream: &mut UnixStream) -> Result<Option<ControlResponse>, ClientError> {
    match channel::receive_within(stream, "client", PREFIX + MAX_CONTROL_FRAME) {
        Ok(answer) => Ok(Some(answer)),
        Err(ChannelError::Closed { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The error for an answer that is not the `expected` one.
fn refused(plan: &JoinPlan, answer: ControlResponse, expected: &'static str) -> ClientError {
    let refusal = match answer {
        ControlResponse::Refused(refusal) => refusal,
        ControlResponse::Enrolled(_) => {
            return ClientError::Unexpected {
                expected,
                found: "Enrolled",
            }
        }
        ControlResponse::Registered(_) => {
            return ClientError::Unexpected {
                expected,
                found: "Registered",
            }
        }
        ControlResponse::Started(_) => {
            return ClientError::Unexpected {
                expected,
                found: "Started",
            }
        }
    };
    match refusal {
        Refusal::Version { supported } => ClientError::Version {
            supported,
            ours: lazaret_runtime::protocol::PROTOCOL_VERSION,
        },
        Refusal::OtherDomain { running } => ClientError::OtherDomain {
            path: plan.paths.socket(),
            running: hex(&running),
        },
        Refusal::OtherConfiguration {
            profile,
            workspace,
            running_fingerprint,
            config_file,
        } => ClientError::OtherConfiguration {
            profile,
            workspace,
            running: hex(&running_fingerprint),
            source_file: config_file,
        },
        Refusal::LaunchFailed(why) => ClientError::LaunchFailed(why),
        Refusal::SessionFailed(why) => ClientError::SessionFailed(why),
        other => ClientError::Refused(other),
    }
}

/// The failed coordinator's last log lines; the log is removed (nothing is
/// left behind).
fn log_tail(plan: &JoinPlan) -> String {
    let text = std::fs::read_to_string(plan.paths.log()).unwrap_or_default();
    let _ = std::fs::remove_file(plan.paths.log());
    let tail: Vec<&str> = text.lines().rev().take(5).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// Finds or starts the coordinator and joins it.
fn join(plan: &JoinPlan) -> Result<(UnixStream, ClientTimings, SessionBinding), ClientError> {
    let mut timings = ClientTimings::default();
    let mut tls_failures = 0;
    for _ in 0..ATTEMPTS {
        let t = Instant::now();
        let stream = match connect(plan) {
            Ok(stream) => stream,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                ) =>
            {
                let mut child = start_coordinator(plan)?;
                let deadline = Instant::now() + START_TIMEOUT;
                let stream = loop {
                    if let Ok(stream) = connect(plan) {
                        break Some(stream);
                    }
                    match child.try_wait() {
                        Ok(Some(status)) if status.code() == Some(i32::from(LOST_LOCK_EXIT)) => {
                            break None
                        }
                        Ok(Some(status)) => {
                            return Err(ClientError::CoordinatorFailed {
                                status: status.to_string(),
                                log: log_tail(plan),
                            })
                        }
                        Ok(None) | Err(_) => {}
                    }
                    if Instant::now() > deadline {
                        return Err(ClientError::CoordinatorFailed {
                            status: "no socket after 10 s".into(),
                            log: log_tail(plan),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(1));
                };
                // The coordinator is detached; the CLI never waits for it
                // beyond this point (its zombie, if any, goes with the CLI).
                drop(child);
                match stream {
                    Some(stream) => stream,
                    None => {
                        std::thread::sleep(RETRY);
                        continue;
                    }
                }
            }
            Err(source) => {
                return Err(ClientError::Connect {
                    path: plan.paths.socket(),
                    source,
                })
            }
        };
        timings
            .phases
            .push(("find_or_start_coordinator".into(), t.elapsed()));
        let t = Instant::now();
        let (stream, publication, cli_id) = match authenticate(plan, stream) {
            Ok(Authenticated::Connected(stream, publication, cli_id)) => {
                tls_failures = 0;
                (stream, publication, cli_id)
            }
            Ok(Authenticated::Unpublished) => {
                timings = ClientTimings::default();
                std::thread::sleep(RETRY);
                continue;
            }
            Err(ClientError::Control(e)) if tls_failures + 1 < TLS_ATTEMPTS => {
                tracing::debug!(error = %e, "a control connection failed; trying again");
                tls_failures += 1;
                timings = ClientTimings::default();
                std::thread::sleep(RETRY);
                continue;
            }
            Err(e) => return Err(e),
        };
        timings
            .phases
            .push(("enroll_and_connect".into(), t.elapsed()));
        match register(plan, stream, &publication, cli_id, &mut timings)? {
            Attempt::Joined(stream, timings, binding) => return Ok((stream, timings, *binding)),
            Attempt::Retry => {
                timings = ClientTimings::default();
                std::thread::sleep(RETRY);
            }
        }
    }
    Err(ClientError::GaveUp)
}

/// What an interactive session's CLI has of its terminal besides its
/// standard streams.
pub struct TerminalIo {
    /// New window sizes (spec 3.4, FR-15); each becomes one `Resize`
    /// message.
    pub resizes: Receiver<TerminalSize>,
    /// Where the input thread echoes what is typed at a developer prompt
    /// (the terminal).
    pub echo: Box<dyn Write + Send>,
}

impl std::fmt::Debug for TerminalIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalIo").finish_non_exhaustive()
    }
}

/// Runs one session to completion; returns the command's status. An
/// interactive session has its [`TerminalIo`].
pub fn run_session(
    plan: &JoinPlan,
    stdin: Box<dyn Read + Send>,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    terminal: Option<TerminalIo>,
) -> Result<(CommandStatus, ClientTimings), ClientError> {
    let (stream, mut timings, binding) = join(plan)?;
    crash_point!(Cli, "joined", "after", "Joined");
    let t = Instant::now();
    let writer = Arc::new(Mutex::new(stream.try_clone().map_err(|source| {
        ClientError::Connect {
            path: plan.paths.socket(),
            source,
        }
    })?));
    let session_id = plan.request.session_id;
    let interactive = plan.request.terminal.is_some();
    // Spec 3.8: only an interactive session has a terminal to prompt on.
    let prompt = Arc::new(ClientPrompt::new(
        plan.session_anchor.signing_key(),
        binding,
    ));
    let (resizes, echo) = match terminal {
        Some(t) => (Some(t.resizes), Some(t.echo)),
        None => (None, None),
    };
    if let Some(resizes) = resizes {
        let writer = Arc::clone(&writer);
        std::thread::spawn(move || {
            for size in resizes {
                // Spec 3.4: rows and columns are nonzero; a terminal that
                // reports a zero dimension has no size to send.
                let (Some(rows), Some(columns)) = (
                    std::num::NonZeroU16::new(size.rows),
                    std::num::NonZeroU16::new(size.columns),
                ) else {
                    continue;
                };
                let resize = SessionTerminalEvent::Resize(TerminalResize {
                    session_id,
                    rows,
                    columns,
                    pixel_width: 0,
                    pixel_height: 0,
                });
                if !send(&writer, &resize) {
                    return;
                }
            }
        });
    }
    let typing = echo.map(|echo| (Arc::clone(&prompt), echo));
    std::thread::spawn(move || forward_stdin(stdin, &writer, session_id, interactive, typing));
    let mut reader = stream;
    // Spec README 'Terminal output hygiene': no clipboard sequence of the
    // sandbox reaches the user, whatever stdout and stderr are (output piped
    // into `less -R` reaches a terminal too). One filter per stream; they
    // share the terminal both may reach.
    let mut hygiene = SessionOutputFilter::new();
    let mut filtered = Vec::new();
    let mut write = |what: Shown<'_>| {
        filtered.clear();
        let stream = match what {
            Shown::Sandbox(stream, bytes) => {
                hygiene.feed(stream, bytes, &mut filtered);
                stream
            }
            Shown::End(stream) => {
                hygiene.finish(stream, &mut filtered);
                stream
            }
            // Lazaret's own text (the developer prompt) is not the
            // sandbox's: it bypasses the filter, whose held bytes stay
            // held.
            Shown::Lazaret(text) => {
                filtered.extend_from_slice(text.as_bytes());
                OutputStream::Stdout
            }
        };
        let out: &mut dyn Write = match stream {
            OutputStream::Stdout => &mut *stdout,
            OutputStream::Stderr => &mut *stderr,
        };
        out.write_all(&filtered)
            .and_then(|()| out.flush())
            .map_err(ClientError::Output)
    };
    loop {
        let received = receive(&mut reader, interactive)?;
        if received.session_id() != session_id {
            return Err(ClientError::Unexpected {
                expected: "this session's records",
                found: "another session's record",
            });
        }
        match received {
            Received::Output(stream, out) => {
                write(Shown::Sandbox(stream, out.bytes.as_bytes()))?;
                if stream == OutputStream::Stdout {
                    crash_point!(Cli, "output", "after", "Stdout");
                }
            }
            Received::Exit(exit) => {
                write(Shown::End(OutputStream::Stdout))?;
                write(Shown::End(OutputStream::Stderr))?;
                let Some(status) = CommandStatus::of_exit(&exit) else {
                    return Err(ClientError::SessionLost(
                        "the session's exec client ended without reporting the command's \
                         status (it was killed or vanished before or while running the command)"
                            .into(),
                    ));
                };
                crash_point!(Cli, "status", "before", "Exited");
                timings.phases.push(("command".into(), t.elapsed()));
                return Ok((status, timings));
            }
            Received::Abort(abort) => return Err(aborted(&abort)),
            Received::Prompt(p) => {
                // Open before it shows: a key typed once it is visible is
                // the prompt's (and only its code approves).
                let code = prompt.open(&p);
                write(Shown::Lazaret(&prompt_text(&p, &code)))?;
            }
            Received::PromptClosed(closed) => {
                prompt.close(closed.request_id);
                write(Shown::Lazaret(closing_text(closed.closing)))?;
            }
        }
    }
}

/// What the CLI writes: the sandbox's bytes of one stream (through the
/// output filter), a stream's end (the filter's held bytes), or its own
/// text.
enum Shown<'a> {
    Sandbox(OutputStream, &'a [u8]),
    End(OutputStream),
    Lazaret(&'a str),
}

/// One record of the session's stream, whichever form the session has.
enum Received {
    Output(OutputStream, NonInteractiveOutput),
    Exit(SessionExit),
    Abort(SessionAbort),
    /// The terminal is on the developer prompt (spec 3.8).
    Prompt(lazaret_runtime::terminal::protocol::EscalationPrompt),
    PromptClosed(PromptClosed),
}

impl Received {
    fn session_id(&self) -> SessionId {
        match self {
            Self::Output(_, out) => out.session_id,
            Self::Exit(exit) => exit.session_id(),
            Self::Abort(abort) => abort.session_id(),
            Self::Prompt(p) => p.session_id,
            Self::PromptClosed(c) => c.session_id,
        }
    }
}

/// Reads one record: an interactive session's `SessionTerminalMessage`
/// (one merged output stream, spec 3.4), or a piped one's
/// `NonInteractiveSessionMessage` (stdout and stderr apart).
fn receive(reader: &mut UnixStream, interactive: bool) -> Result<Received, ClientError> {
    const LIMIT: usize = PREFIX + MAX_RECORD_BYTES;
    Ok(if interactive {
        match channel::receive_within(reader, "client", LIMIT)? {
            SessionTerminalMessage::Output(out) => Received::Output(
                OutputStream::Stdout,
                NonInteractiveOutput {
                    session_id: out.session_id,
                    bytes: out.bytes,
                },
            ),
            SessionTerminalMessage::Exit(exit) => Received::Exit(exit),
            SessionTerminalMessage::Abort(abort) => Received::Abort(abort),
            SessionTerminalMessage::Prompt(p) => Received::Prompt(p),
            SessionTerminalMessage::PromptClosed(c) => Received::PromptClosed(c),
        }
    } else {
        match channel::receive_within(reader, "client", LIMIT)? {
            NonInteractiveSessionMessage::Stdout(out) => {
                Received::Output(OutputStream::Stdout, out)
            }
            NonInteractiveSessionMessage::Stderr(out) => {
                Received::Output(OutputStream::Stderr, out)
            }
            NonInteractiveSessionMessage::Exit(exit) => Received::Exit(exit),
            NonInteractiveSessionMessage::Abort(abort) => Received::Abort(abort),
        }
    })
}

/// The CLI's error for a session that ended without its command's status.
fn aborted(abort: &SessionAbort) -> ClientError {
    match abort.kind() {
        SessionAbortKind::StartFailed => ClientError::SessionFailed(abort.reason().to_owned()),
        SessionAbortKind::RuntimeLost => ClientError::SessionLost(abort.reason().to_owned()),
    }
}

fn send<T: serde::Serialize>(writer: &Mutex<UnixStream>, record: &T) -> bool {
    match writer.lock() {
        Ok(mut w) => channel::send(&mut *w, "client", record).is_ok(),
        Err(_) => false,
    }
}

/// Forwards the CLI's standard input, in chunks of at most
/// [`MAX_CHUNK_BYTES`]: an interactive session's as `Input` events (a
/// terminal has no end of input; Ctrl-D is a byte), a piped one's as
/// `Input`, then `InputClosed` at its end. While a developer prompt is
/// open (`typing`), what is typed is the prompt's, echoed on the
/// terminal, and its answer is sent as the session's decision.
fn forward_stdin(
    mut stdin: Box<dyn Read + Send>,
    writer: &Mutex<UnixStream>,
    session_id: SessionId,
    interactive: bool,
    mut typing: Option<(Arc<ClientPrompt>, Box<dyn Write + Send>)>,
) {
    let mut buf = vec![0u8; MAX_CHUNK_BYTES];
    loop {
        let n = match stdin.read(&mut buf) {
            Ok(0) | Err(_) => {
                if !interactive {
                    let closed = SessionClose { session_id };
                    send(writer, &NonInteractiveSessionEvent::InputClosed(closed));
                }
                return;
            }
            Ok(n) => n,
        };
        if let Some((prompt, echo)) = typing.as_mut() {
            match prompt.typed(&buf[..n], echo.as_mut()) {
                Typed::Sandbox => {}
                Typed::Prompt => continue,
                Typed::Answered(decision) => {
                    if !send(writer, &decision) {
                        return;
                    }
                    continue;
                }
            }
        }
        let Ok(bytes) = Chunk::new(buf[..n].to_vec()) else {
            return;
        };
        let sent = if interactive {
            send(
                writer,
                &SessionTerminalEvent::Input(TerminalInput { session_id, bytes }),
            )
        } else {
            send(
                writer,
                &NonInteractiveSessionEvent::Input(NonInteractiveInput { session_id, bytes }),
            )
        };
        if !sent {
            return;
        }
    }
}
