//! The CLI side of the chain: find the Domain's Host Coordinator or start
//! it (detached into its own session), join with the Domain ID and
//! configuration fingerprint, forward stdin and stream stdout/stderr
//! separately until the command's status arrives.
use super::channel::{self, ChannelError};
use super::paths::{DomainPaths, ShortSocketPath};
use super::LOST_LOCK_EXIT;
use crate::crash_point::crash_point;
use ed25519_dalek::SigningKey;
use lazaret_runtime::coordinator::messages::{
    ClientMessage, CommandStatus, CoordinatorMessage, Hello, Refusal, TerminalSize,
};
use lazaret_runtime::protocol::{verify_registration, ExpectedRegistration, VerifyError};
use lazaret_runtime::records::ids::{ConfigurationFingerprint, DomainId, GenerationId};
use lazaret_runtime::terminal::escape_filter::{OutputStream, SessionOutputFilter};
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

/// What the CLI knows before it joins.
#[derive(Debug)]
pub struct JoinPlan {
    pub paths: DomainPaths,
    pub hello: Hello,
    /// The session's anchor; `hello.session_anchor` is its public key.
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
    Joined(UnixStream, ClientTimings),
    Retry,
}

fn connect(plan: &JoinPlan) -> io::Result<UnixStream> {
    let short = ShortSocketPath::new(&plan.paths.socket())?;
    UnixStream::connect(short.path())
}

fn hello(
    plan: &JoinPlan,
    mut stream: UnixStream,
    timings: &mut ClientTimings,
) -> Result<Attempt, ClientError> {
    let t = Instant::now();
    crash_point!(Cli, "hello", "before", "Hello");
    channel::send(
        &mut stream,
        "client",
        &ClientMessage::Hello(plan.hello.clone()),
    )?;
    // HC answers before the session's command starts (`Joined` is the
    // EnrollClient step's effect), so no output can precede the answer.
    let answer = match channel::receive::<CoordinatorMessage>(&mut stream, "client") {
        Ok(answer) => answer,
        // The coordinator went away between accept and answer: it was
        // stopping.
        Err(ChannelError::Closed { .. }) => return Ok(Attempt::Retry),
        Err(e) => return Err(e.into()),
    };
    timings
        .phases
        .push(("hello_and_launch_or_join".into(), t.elapsed()));
    match answer {
        CoordinatorMessage::Joined {
            generation,
            cold,
            timings: hc,
            registration,
        } => {
            let expected = ExpectedRegistration {
                domain_id: DomainId(plan.hello.domain_id),
                configuration_fingerprint: ConfigurationFingerprint(plan.hello.fingerprint),
                generation_id: GenerationId(generation),
                session_anchor: plan.session_anchor.public_key(),
            };
            verify_registration(
                &registration.response,
                &registration.trust_manifest,
                &registration.coordinator_protocol_credential,
                &expected,
            )
            .map_err(ClientError::Registration)?;
            timings.cold = cold;
            timings.coordinator = hc;
            Ok(Attempt::Joined(stream, std::mem::take(timings)))
        }
        CoordinatorMessage::Refused(Refusal::Version { supported }) => Err(ClientError::Version {
            supported,
            ours: plan.hello.version,
        }),
        CoordinatorMessage::Refused(Refusal::OtherDomain { running }) => {
            Err(ClientError::OtherDomain {
                path: plan.paths.socket(),
                running: hex(&running),
            })
        }
        CoordinatorMessage::Refused(Refusal::OtherConfiguration {
            profile,
            workspace,
            running_fingerprint,
            source,
        }) => Err(ClientError::OtherConfiguration {
            profile,
            workspace,
            running: hex(&running_fingerprint),
            source_file: source,
        }),
        CoordinatorMessage::Refused(Refusal::LaunchFailed(why)) => {
            Err(ClientError::LaunchFailed(why))
        }
        CoordinatorMessage::Refused(Refusal::SessionFailed(why)) => {
            Err(ClientError::SessionFailed(why))
        }
        other => Err(ClientError::Channel(ChannelError::Io {
            what: "client",
            source: io::Error::new(io::ErrorKind::InvalidData, format!("unexpected {other:?}")),
        })),
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
fn join(plan: &JoinPlan) -> Result<(UnixStream, ClientTimings), ClientError> {
    let mut timings = ClientTimings::default();
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
        match hello(plan, stream, &mut timings)? {
            Attempt::Joined(stream, timings) => return Ok((stream, timings)),
            Attempt::Retry => {
                timings = ClientTimings::default();
                std::thread::sleep(RETRY);
            }
        }
    }
    Err(ClientError::GaveUp)
}

/// Runs one session to completion; returns the command's status. For an
/// interactive session `resizes` carries the new window sizes (spec 3.4,
/// FR-15); each becomes one `Resize` message.
pub fn run_session(
    plan: &JoinPlan,
    stdin: Box<dyn Read + Send>,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    resizes: Option<Receiver<TerminalSize>>,
) -> Result<(CommandStatus, ClientTimings), ClientError> {
    let (stream, mut timings) = join(plan)?;
    crash_point!(Cli, "joined", "after", "Joined");
    let t = Instant::now();
    let writer = Arc::new(Mutex::new(stream.try_clone().map_err(|source| {
        ClientError::Connect {
            path: plan.paths.socket(),
            source,
        }
    })?));
    let send = |writer: &Mutex<UnixStream>, msg: &ClientMessage| -> bool {
        match writer.lock() {
            Ok(mut w) => channel::send(&mut *w, "client", msg).is_ok(),
            Err(_) => false,
        }
    };
    if let Some(resizes) = resizes {
        let writer = Arc::clone(&writer);
        std::thread::spawn(move || {
            for size in resizes {
                if !send(&writer, &ClientMessage::Resize(size)) {
                    return;
                }
            }
        });
    }
    std::thread::spawn(move || {
        let mut stdin = stdin;
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    send(&writer, &ClientMessage::StdinClosed);
                    return;
                }
                Ok(n) => {
                    if !send(&writer, &ClientMessage::Stdin(buf[..n].to_vec())) {
                        return;
                    }
                }
            }
        }
    });
    let mut reader = stream;
    // Spec README 'Terminal output hygiene': no clipboard sequence of the
    // sandbox reaches the user, whatever stdout and stderr are (output piped
    // into `less -R` reaches a terminal too). One filter per stream; they
    // share the terminal both may reach.
    let mut hygiene = SessionOutputFilter::new();
    let mut filtered = Vec::new();
    let mut write = |stream: OutputStream, bytes: Option<&[u8]>| {
        filtered.clear();
        match bytes {
            Some(bytes) => hygiene.feed(stream, bytes, &mut filtered),
            None => hygiene.finish(stream, &mut filtered),
        }
        let out: &mut dyn Write = match stream {
            OutputStream::Stdout => &mut *stdout,
            OutputStream::Stderr => &mut *stderr,
        };
        out.write_all(&filtered)
            .and_then(|()| out.flush())
            .map_err(ClientError::Output)
    };
    loop {
        let message = channel::receive::<CoordinatorMessage>(&mut reader, "client")?;
        match message {
            CoordinatorMessage::Stdout(bytes) => {
                write(OutputStream::Stdout, Some(&bytes))?;
                crash_point!(Cli, "output", "after", "Stdout");
            }
            CoordinatorMessage::Stderr(bytes) => write(OutputStream::Stderr, Some(&bytes))?,
            CoordinatorMessage::Exited(status) => {
                write(OutputStream::Stdout, None)?;
                write(OutputStream::Stderr, None)?;
                crash_point!(Cli, "status", "before", "Exited");
                timings.phases.push(("command".into(), t.elapsed()));
                return Ok((status, timings));
            }
            CoordinatorMessage::SessionLost(why) => return Err(ClientError::SessionLost(why)),
            // Joined comes before the exec client is started, so a start
            // that fails is reported after it.
            CoordinatorMessage::Refused(Refusal::SessionFailed(why)) => {
                return Err(ClientError::SessionFailed(why))
            }
            other => {
                return Err(ClientError::Channel(ChannelError::Io {
                    what: "client",
                    source: io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("unexpected {other:?}"),
                    ),
                }))
            }
        }
    }
}
