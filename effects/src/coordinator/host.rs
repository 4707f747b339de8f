//! The Host Coordinator (spec 3.1, 3.3): one per Domain, started detached
//! by the first CLI, ended when the last session leaves (daemonless). It
//! holds the Domain flock for its whole life, owns the Domain Store, creates
//! the verified user namespace for the Runtime Supervisor it spawns through
//! the broker, and serves sessions on the unix socket in the 0700 Domain
//! runtime directory (SR-10).
//!
//! Every lifecycle decision is a step of the generated Lazaret model
//! ([`super::hc_model`]): checked before its effect, traced after it. This
//! file holds the event loop (sessions: `ConnectClient`, `EnrollClient`,
//! `RegisterSession`, `CloseSession`, `FinishSessionRelease`); launch and
//! publication are in [`super::launch`], teardown in [`super::release`].
use super::absence::{AbsenceError, SlotObservationError};
use super::channel::{self, ChannelError};
use super::control_tls::{self, Accepted};
use super::election::elect;
use super::hc_model::{coordinator_name, trace_name, HcModel};
use super::launch::trust_anchor;
use super::launch::{launch_generation, LaunchedGeneration};
use super::mailbox::{host_setting, LoopSteps, MailboxControl, MailboxHost};
use super::observed::{ObserveError, Observer, Served};
use super::paths::{DomainPaths, ShortSocketPath};
use super::publication::Publication;
use super::recovery::{recover_all, RecoveryError};
use super::release::{abort, teardown};
use super::runtime_end::record_runtime_end;
use super::session::{random_bytes, record_terminal_intent, start_session, SessionContext};
use super::session_release::ReleaseOutcome;
use super::session_report::SessionReport;
use super::supervisor::{runsc_dcache, runsc_globals};
use super::terminal_session::TerminalEvidence;
use crate::broker::{Broker, BrokerError};
use crate::config_resolve::{load_configuration, LoadError, LoadRequest, ResolvedVolumeSource};
use crate::confined::{ConfinedError, OpenedObject, RealSys};
use crate::crash_point::fault;
use crate::domain_lock::DomainLockError;
use crate::domain_store::{DomainStore, StoreError, StoreOp};
use crate::escalation::model_steps::StepRefused;
use crate::image::reference::ReferenceError;
use crate::image::store::StoreError as BlobStoreError;
use crate::image::ImageError;
use crate::network::policy_fd::PolicyFdError;
use crate::prepare::PrepareError;
use crate::process_identity::real::RealProcessSys;
use crate::process_identity::IdentityError;
use crate::process_identity::{identity_of, ProcessSys};
use crate::userns::UsernsError;
use lazaret_generated::lazaret::{Action, Decision, ProcSlots, Sess, SessionsId};
use lazaret_runtime::config::ConfigError;
use lazaret_runtime::config::{
    DerivedNetworkPolicy, HostEnvironment, ResolvedEnvironment, SandboxLayoutV1,
};
use lazaret_runtime::coordinator::control::{
    ControlResponse, Refusal, SessionOpening, SessionStarted, MAX_CONTROL_FRAME,
};
use lazaret_runtime::coordinator::frame::PREFIX;
use lazaret_runtime::coordinator::host_model::SESSION_SLOTS;
use lazaret_runtime::coordinator::host_model::{HostModelError, ProcessView, Routing};
use lazaret_runtime::coordinator::launch::step_name;
use lazaret_runtime::coordinator::messages::SessionRequest;
use lazaret_runtime::coordinator::serve::{self, Admission, ServeError};
use lazaret_runtime::core::CoreError;
use lazaret_runtime::escalation::steps::EscalationStep;
use lazaret_runtime::ownership::terminal::TerminalOp;
use lazaret_runtime::ownership::AbsenceProof;
use lazaret_runtime::protocol::tls::TlsAuthority;
use lazaret_runtime::protocol::trust_anchor::TrustAnchorError;
use lazaret_runtime::protocol::TrustAnchor;
use lazaret_runtime::records::codec::CodecError;
use lazaret_runtime::records::ids::ValueError;
use lazaret_runtime::records::ids::{CliId, ContainerId, CoordinatorId, GenerationId, SessionId};
use lazaret_runtime::records::participant::NamespaceIdentity;
use lazaret_runtime::records::process::{
    HostProcessIdentity, HostProcessOwnershipSlot, MessageError, PersistedHostProcessOwnership,
    PidfsProcessIdentityV1,
};
use lazaret_runtime::records::terminal::SessionTerminalState;
use lazaret_runtime::terminal::protocol::{
    NonInteractiveSessionMessage, SessionAbort, SessionAbortKind, SessionTerminalMessage,
};
use std::collections::HashMap;
use std::io;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::time::{Duration, Instant};

/// How long a coordinator whose bootstrap failed keeps answering the CLIs
/// that try to join with the reason.
const REFUSAL_WINDOW: Duration = Duration::from_secs(2);
/// How long an authenticated connection may take to send its opening
/// frames (its registration and its start).
const OPENING_TIMEOUT: Duration = Duration::from_secs(5);

/// What the CLI passes to the coordinator it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordinatorArgs {
    pub profile: String,
    pub config: Option<String>,
    /// The canonical workspace the CLI resolved.
    pub workspace: PathBuf,
}

/// Why the coordinator stopped: one variant per failing step, each keeping
/// its source.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error("the sandbox layout: {0}")]
    Layout(#[source] ConfigError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Lock(#[from] DomainLockError),
    #[error("the coordinator socket {path}: {source}")]
    Socket { path: PathBuf, source: io::Error },
    #[error("Domain Store {path}: {source}")]
    Store { path: PathBuf, source: StoreError },
    #[error("image {reference}: {source}")]
    ImageReference {
        reference: String,
        source: ReferenceError,
    },
    #[error("the image blob store {path}: {source}")]
    BlobStore {
        path: PathBuf,
        source: BlobStoreError,
    },
    #[error("image {reference}: {source}")]
    ImageResolve {
        reference: String,
        source: Box<ImageError>,
    },
    #[error("user namespace: {0}")]
    Userns(#[source] UsernsError),
    /// The supervisor's user namespace reported a PID that is no PID.
    #[error("user namespace: the supervisor reported PID {pid}, out of range")]
    UsernsPid { pid: u32 },
    #[error("preparing the root filesystem from {reference}: {source}")]
    Prepare {
        reference: String,
        source: Box<PrepareError>,
    },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("starting the Runtime Supervisor: {0}")]
    Spawn(#[from] BrokerError),
    /// The Runtime Supervisor was spawned but is not running when its
    /// ownership is to be committed (spec 3.3 step 9).
    #[error("the Runtime Supervisor did not stay running to its commit: {0}")]
    SupervisorReadiness(#[source] BrokerError),
    /// The Runtime Supervisor reported its own failure (its text, from
    /// across the lifetime channel).
    #[error("Runtime Supervisor: {0}")]
    SupervisorFailed(String),
    #[error("Runtime Supervisor: sent {got} where {expected} was expected")]
    SupervisorProtocol { expected: &'static str, got: String },
    #[error("this coordinator's own pidfs identity: {0}")]
    OwnIdentity(#[source] IdentityError),
    /// Spec 3.7 "Policy transport": the policy memfd could not be made.
    #[error("sealing the derived network policy: {0}")]
    SealPolicy(#[source] PolicyFdError),
    /// Spec 3.7: RS installed another policy than HC derived.
    #[error("network readiness refused: the supervisor installed policy {installed} where {derived} was derived")]
    PolicyDigestMismatch { installed: String, derived: String },
    /// Spec 3.7: the reported enforcement namespace is not RS's own.
    #[error("network readiness refused: the supervisor reported enforcement namespace {reported:?}, its process is in {actual:?}")]
    NamespaceMismatch {
        reported: NamespaceIdentity,
        actual: NamespaceIdentity,
    },
    #[error("the network readiness fingerprint: {0}")]
    ReadinessFingerprint(#[source] CodecError),
    /// The workspace no longer is the object the configuration loaded.
    #[error("the workspace changed since the configuration was loaded: {0}")]
    Workspace(#[source] ConfinedError),
    /// A volume source no longer is the object the configuration loaded.
    #[error("{key}: the volume source changed since the configuration was loaded (expected the same object, reached without a symlink or mount crossing): {source}")]
    Volume {
        key: String,
        #[source]
        source: ConfinedError,
    },
    #[error("Runtime Supervisor channel: {0}")]
    Channel(#[from] ChannelError),
    #[error("boot id: {0}")]
    Boot(io::Error),
    /// An identifier or key seed could not be drawn.
    #[error("drawing random bytes from /dev/urandom: {0}")]
    Random(io::Error),
    /// The protocol model refused a step (spec "Document authority").
    #[error("protocol model: {0}")]
    Model(#[from] CoreError),
    /// A launch step's process could not be observed for its trace line.
    #[error("{0}")]
    ObserveProcess(#[from] SlotObservationError),
    /// The serving core met an event in a state it never serves in.
    #[error("serving: {0}")]
    Serve(#[from] ServeError),
    /// A step's effect could not be read back for its trace line.
    #[error("generation {generation}: {source}")]
    Observe {
        generation: u64,
        source: ObserveError,
    },
    /// This generation's trace could not be started.
    #[error("the generation's trace: {0}")]
    Trace(#[source] HostModelError),
    /// A value does not fit its durable record field.
    #[error("{what}: {source}")]
    RecordValue {
        what: &'static str,
        source: ValueError,
    },
    /// The step's participant has no acquisition snapshot to commit.
    #[error("the {role} participant has no snapshot to commit")]
    NoSnapshot { role: &'static str },
    #[error("a published generation without a launched sandbox")]
    NoLaunchedSandbox,
    /// Spec 3.4 acquisition step 1: the terminal intent was not recorded.
    #[error("recording the session's terminal intent: {0}")]
    TerminalIntent(#[source] Box<super::session::SessionError>),
    /// Spec 3.3 "Protocol cryptography refinement": the generation's Trust
    /// Anchor package could not be built.
    #[error("the generation's Trust Anchor: {0}")]
    TrustAnchor(#[source] TrustAnchorError),
    #[error("the generation's Trust Anchor was already taken by its launch")]
    TrustAnchorTaken,
    #[error(transparent)]
    Publication(super::publication::PublicationError),
    /// Spec 3.3: the session's Session Request Capability could not be
    /// issued.
    #[error("registering the session: {0}")]
    Registration(#[source] TrustAnchorError),
    /// Spec 3.3: the sandbox credential bundle could not be encoded.
    #[error("the sandbox credential bundle: {0}")]
    SandboxCredentials(#[source] lazaret_runtime::records::codec::CodecError),
    /// The generation's sandbox credential bundle was already written.
    #[error("the sandbox credential bundle of this generation was already written")]
    SandboxCredentialsTaken,
    /// A prepared artifact's record names an ID that is not 64 hex digits.
    #[error("the prepared lower's artifact ID {found:?} is not 64 hex digits")]
    ArtifactId { found: String },
    /// Spec 3.6: a Storage Catalog operation failed.
    #[error("the Storage Catalog: {0}")]
    Catalog(#[source] crate::storage_catalog::CatalogError),
    /// Spec 3.6: the Domain Store holds the prepared-lower lease, the
    /// Storage Catalog does not have it: inconsistent, so the release fails
    /// closed and the record is kept.
    #[error("generation {generation}: the Domain Store records the lease of prepared artifact {artifact} as held, but the Storage Catalog has no such lease (restored from an older copy, or edited); the release stops here and the record is kept (spec 3.6). `lazaret state` shows the Domain")]
    LeaseMissing {
        generation: u64,
        artifact: lazaret_runtime::records::ids::PreparedArtifactId,
    },
    /// RS reported State Anchors other than the planned ones.
    #[error(
        "the Runtime Supervisor reported State Anchors at {reported:?}, the plan has {planned:?}"
    )]
    AnchorsReported {
        planned: Vec<String>,
        reported: Vec<String>,
    },
    /// A directory of the Domain's persistent state (its State Anchors,
    /// its Ignored Workspace State) is not a plain directory.
    #[error("{path} must be a directory of the Domain's persistent state (a symlink or file is there); refusing to use it")]
    StateDirectory { path: PathBuf },
    /// Spec 3.6: the State Anchors could not be proved absent.
    #[error("the State Anchors of generation {generation}: {source}")]
    Anchors {
        generation: u64,
        source: crate::state_anchor::AnchorError,
    },
    /// The release loop was handed a step that does not release.
    #[error("{action} is not a release step")]
    NotAReleaseStep { action: &'static str },
    #[error("the release did not reach RetireGeneration")]
    ReleaseIncomplete,
    /// Spec 3.6: the generation's mailbox is recorded clean only once its
    /// path is observed gone; it went with the generation directory, which
    /// was not removed (the next launch's recovery removes it).
    #[error("the mailbox of generation {generation} is still at {}; the generation is not retired", .path.display())]
    MailboxLeft { generation: u64, path: PathBuf },
    /// Spec 3.8, OR-3: a closing session's host process could not be
    /// stopped and reaped, so the close is not recorded.
    #[error(
        "session {session}: its escalation host process could not be stopped and reaped: {source}"
    )]
    HostProcessNotStopped {
        session: SessionId,
        source: std::io::Error,
    },
    /// A launch step failed (spec 3.3): the model step the core chose, and
    /// why. The launch ended RS exactly before it returned this.
    #[error("launch step {}: {source}", step_name(.step))]
    LaunchStep {
        step: Action,
        source: Box<CoordinatorError>,
    },
    /// The core enables no launch step and nothing is published (the
    /// runtime ended under the launch, or the model and this build's
    /// launch disagree).
    #[error("the launch cannot go on: the protocol model enables none of its steps")]
    LaunchStuck,
    /// The core chose a launch step this build has no effect for.
    #[error("launch step {} has no effect in this build", step_name(.step))]
    NoLaunchEffect { step: Action },
    /// The launch step needs the Runtime Supervisor in a state the launch
    /// has not brought it to.
    #[error("the Runtime Supervisor is not acquired as this launch step needs it")]
    NoSupervisor,
    /// RS reported something else than the step the core expects next.
    #[error("Runtime Supervisor: reported {got} where the model expects {}", step_name(.expected))]
    UnexpectedReport { expected: Action, got: String },
    /// RS reported a staged or committed child it does not launch.
    #[error("Runtime Supervisor: slot {slot:?} is not launched by the Runtime Supervisor")]
    NotSupervisorLaunched { slot: HostProcessOwnershipSlot },
    /// RS reported a child of another slot than the step's.
    #[error("Runtime Supervisor: reported slot {reported:?} where the model expects {}", .expected.name())]
    ReportedSlot {
        expected: ProcSlots,
        reported: HostProcessOwnershipSlot,
    },
    /// RS's staged or committed ownership message does not decode.
    #[error("Runtime Supervisor: its process ownership message: {0}")]
    StagedRecord(#[source] MessageError),
    /// A released role's own child process could not be proved absent
    /// (FR-7): the role keeps its release intent.
    #[error("generation {generation}: releasing {role}: {source}")]
    ChildPresent {
        generation: u64,
        role: &'static str,
        source: AbsenceError,
    },
    /// The stopped runtime could not be proved absent (FR-7).
    #[error("generation {generation}: stopping the runtime: {source}")]
    Shutdown {
        generation: u64,
        source: AbsenceError,
    },
    /// The runtime ended on its own and could not be proved absent (FR-7):
    /// the generation is kept for the next coordinator's recovery.
    #[error("generation {generation}: the runtime ended: {source}")]
    RuntimeEnd {
        generation: u64,
        source: AbsenceError,
    },
    /// A generation left by a coordinator that died could not be recovered;
    /// it is kept as it is (spec 3.3 recovery).
    #[error("recovering generation {generation}: {source}")]
    Recovery {
        generation: u64,
        source: RecoveryError,
    },
}

fn store_err(path: &Path) -> impl FnOnce(StoreError) -> CoordinatorError + '_ {
    move |source| CoordinatorError::Store {
        path: path.to_owned(),
        source,
    }
}

/// Why the coordinator's process exits.
#[derive(Debug)]
pub enum Outcome {
    /// Another coordinator holds the Domain: the CLI joins that one.
    LostLock,
    /// The Domain was torn down.
    Done,
}

pub(super) enum HcEvent {
    /// An authenticated Client CLI of this Domain said hello.
    Client(Joining),
    /// A report of the session admitted to this slot, in the order its
    /// threads sent them.
    Session {
        slot: SessionsId,
        session: SessionId,
        report: SessionReport,
    },
    SupervisorLost(String),
    /// A mailbox thread asks for model steps of a request of `session`,
    /// taken together (spec 3.8; one, or a result's `DeliverResult` and
    /// `CollectResult`); the answer says whether they were taken.
    Escalation {
        session: SessionId,
        steps: Vec<EscalationStep>,
        reply: SyncSender<Result<(), StepRefused>>,
    },
}

/// An authenticated Client CLI's connection and its opening (spec 3.3).
pub(super) struct Joining {
    /// The mTLS connection's plaintext.
    pub stream: UnixStream,
    pub request: SessionRequest,
    /// Whether its configuration fingerprint matches this coordinator's.
    pub matches: bool,
    /// The Client CLI its leaf was issued to.
    pub cli_id: CliId,
}

/// Identity a joining CLI must match.
#[derive(Clone, Debug)]
pub(super) struct Running {
    pub domain_id: [u8; 32],
    pub fingerprint: [u8; 32],
    pub profile: String,
    pub workspace: String,
    pub source: String,
}

/// The Host Coordinator while it runs: the broker, the Domain Store, the
/// model core and the generation it launched.
pub(super) struct Hc<'s, 'l> {
    pub broker: Broker<RealProcessSys>,
    pub store: &'s DomainStore<'l>,
    pub model: HcModel,
    /// The generation this coordinator starts (or started).
    pub id: GenerationId,
    pub coordinator_id: CoordinatorId,
    /// The generation's Trust Anchor package until its launch takes it
    /// (spec 3.3: made before anything is published).
    pub trust_anchor: Option<TrustAnchor>,
    pub generation: Option<LaunchedGeneration>,
    /// The Domain Store session of each model session slot whose terminal
    /// is recorded (from `RecordTerminalIntent` until its release
    /// finishes or is retained), and whether it is piped.
    pub sessions: HashMap<SessionsId, Served>,
    /// This coordinator's own pidfs identity (its committed direct edges).
    pub own: PidfsProcessIdentityV1,
    /// The host-wide Storage Catalog (spec 3.6): prepared-lower leases.
    pub catalog: crate::storage_catalog::StorageCatalog,
    /// The sessions whose escalation requests are served and their running
    /// host processes (spec 3.8), shared with the mailbox threads: a
    /// session's close stops its host process.
    pub escalations: MailboxControl,
}

impl<'s, 'l> Hc<'s, 'l> {
    /// Checks `action` against the model, performs `effect`, and records
    /// the step; a refused step performs nothing.
    pub fn step<T>(
        &mut self,
        action: Action,
        effect: impl FnOnce(&mut Self) -> Result<T, CoordinatorError>,
    ) -> Result<T, CoordinatorError> {
        self.step_observing(action, |hc| Ok((effect(hc)?, ProcessView::default())))
    }

    /// [`Hc::step`] for a step whose effect also establishes what the
    /// Runtime Supervisor or attached runsc is (exactly, by identity): the
    /// effect returns that with its result, and the trace line carries it.
    pub fn step_observing<T>(
        &mut self,
        action: Action,
        effect: impl FnOnce(&mut Self) -> Result<(T, ProcessView), CoordinatorError>,
    ) -> Result<T, CoordinatorError> {
        self.model.check(&action).map_err(CoordinatorError::Model)?;
        let (out, processes) = effect(self)?;
        let observed = self
            .observer()
            .read()
            .map_err(|source| CoordinatorError::Observe {
                generation: self.id.0,
                source,
            })?;
        self.model
            .take_with_processes(action, observed.as_ref(), processes)
            .map_err(CoordinatorError::Model)?;
        Ok(out)
    }

    /// Reads this generation's record back after a step's effect.
    pub fn observer(&self) -> Observer<'s, 'l> {
        let names = &self.model.model().constants().sessions;
        let slots = SessionsId::all(names.len())
            .zip(names)
            .map(|(s, name)| (name.clone(), self.sessions.get(&s).copied()))
            .collect();
        Observer::new(self.store, self.id, slots)
    }

    /// One Domain Store transaction.
    pub fn apply(&self, ops: &[StoreOp]) -> Result<(), CoordinatorError> {
        self.store.apply(ops).map_err(|e| self.store_err(e))
    }

    pub fn store_err(&self, source: StoreError) -> CoordinatorError {
        CoordinatorError::Store {
            path: self.store.path().to_owned(),
            source,
        }
    }
}

/// This process's pidfs identity.
fn own_identity() -> Result<PidfsProcessIdentityV1, CoordinatorError> {
    let pidfd = RealProcessSys
        .pidfd_open(RealProcessSys.own_pid())
        .map_err(CoordinatorError::Boot)?;
    identity_of(&RealProcessSys, &pidfd).map_err(CoordinatorError::OwnIdentity)
}

/// Runs the coordinator until the Domain is torn down.
pub fn run_coordinator(
    args: &CoordinatorArgs,
    env: &dyn HostEnvironment,
    binaries: SandboxBinaries<'_>,
) -> Result<Outcome, CoordinatorError> {
    let layout = SandboxLayoutV1::production().map_err(CoordinatorError::Layout)?;
    let request = LoadRequest {
        profile: &args.profile,
        config: args.config.as_deref(),
        workspace: &args.workspace,
        env,
        layout: &layout,
    };
    let config = load_configuration(&RealSys, &request)?;
    let paths = DomainPaths::new(
        &config.runtime_domain_root().label(),
        &config.storage_domain_root().label(),
    );
    let coordinator_id = CoordinatorId(random_bytes().map_err(CoordinatorError::Random)?);
    let name = coordinator_name(&coordinator_id);
    let Some(lock) = elect(&name, &paths)? else {
        return Ok(Outcome::LostLock);
    };
    let socket = paths.socket();
    let publication = paths.publication();
    // Holding the lock, any socket or publication file left here is stale.
    super::publication::withdraw(&socket, &publication);
    let running = Running {
        domain_id: config.domain_id().0,
        fingerprint: config.fingerprint().0,
        profile: args.profile.clone(),
        workspace: config.workspace().label().display().to_string(),
        source: config.source_label().display().to_string(),
    };
    let boot = RealProcessSys.boot_id().map_err(CoordinatorError::Boot)?;
    let store_path = paths.store();
    let store = if store_path.exists() {
        DomainStore::open(&lock, &store_path, boot)
    } else {
        DomainStore::create(&lock, &store_path, boot)
    }
    .map_err(store_err(&store_path))?;
    let id = next_generation(&store, &store_path)?;
    // Spec 3.3: the generation's Trust Anchor exists before anything is
    // published; the publication identity is written before the socket is
    // bound, so a client that can connect can pin what it connects to.
    let (trust_anchor, tls) = trust_anchor(&args.profile, &running, id, coordinator_id)?;
    // Withdrawn when dropped: an early exit leaves neither file (declared
    // after the lock, so dropped before it).
    let published = Publication::publish(socket.clone(), publication, tls.publication())
        .map_err(CoordinatorError::Publication)?;
    crate::crash_point::crash_point!(Hc, "publication", "after", "Publication");
    let listener = ShortSocketPath::new(&socket)
        .and_then(|short| UnixListener::bind(short.path()))
        .map_err(|source| CoordinatorError::Socket {
            path: socket.clone(),
            source,
        })?;
    let (events_tx, events) = mpsc::channel();
    spawn_acceptor(
        listener,
        events_tx.clone(),
        tls,
        rustix::process::geteuid().as_raw(),
    );
    let program = std::env::current_exe().map_err(|source| CoordinatorError::Io {
        path: PathBuf::from("/proc/self/exe"),
        source,
    })?;
    let broker = Broker::claim(RealProcessSys, program.clone())?;
    // Spec 3.5: a routed Domain's generations acquire the GitRouting
    // participant too.
    let routing = if config.selected().isolate_gitignored() {
        Routing::Routed
    } else {
        Routing::Unrouted
    };
    let model = own_trace(name, id, routing, &paths)?;
    let mut hc = Hc {
        broker,
        store: &store,
        model,
        id,
        coordinator_id,
        trust_anchor: Some(trust_anchor),
        generation: None,
        sessions: HashMap::new(),
        own: own_identity()?,
        catalog: crate::storage_catalog::StorageCatalog::at(&config.storage_root().label()),
        escalations: MailboxControl::default(),
    };
    let launch = LaunchInputs {
        image: config.selected().image().to_string(),
        storage_root: config.storage_root().label(),
        profile: args.profile.clone(),
        running: &running,
        workspace: config.workspace(),
        binaries,
        paths: &paths,
        program: &program,
        environment: config.environment(),
        runsc_dcache: config.runsc_dcache(),
        policy: config.selected().derived_policy(),
        persistent_dirs: config
            .selected()
            .persistent_dirs()
            .map(|p| p.as_str().to_owned())
            .collect(),
        volumes: config.volumes(),
        isolate_gitignored: config.selected().isolate_gitignored(),
        escalation: config.selected().escalation().enabled,
    };
    let booted = bootstrap(&mut hc, &paths);
    if let Err(e) = &booted {
        refuse_waiting_clients(&events, e);
    }
    // The event queue ends with the loop (`serve` owns it): a session
    // waiting for its release intent's answer (`release_gate.rs`) is told
    // at once that none comes, instead of waiting through the teardown,
    // which would find its exec client unreaped.
    // Spec 3.8: the mailbox threads live in this scope, so every host
    // process is stopped and reaped before the teardown below.
    let result = booted.and_then(|()| {
        std::thread::scope(|scope| {
            let mut mailbox = launch.escalation.then(|| {
                MailboxHost::new(
                    scope,
                    config.auto_approval_rules(),
                    host_setting(env, &config.workspace().label(), &program),
                    launch.running.profile.clone(),
                    LoopSteps::new(events_tx.clone()),
                    hc.escalations.clone(),
                )
            });
            // Dropping `mailbox` (on return or panic) stops its threads
            // before the scope joins them.
            serve(&mut hc, &launch, events, &events_tx, mailbox.as_mut())
        })
    });
    // Teardown (FR-6): no new joiners, then the sandbox, then our files.
    let released = match hc.model.state().decision {
        Decision::Published => teardown(&mut hc, &published),
        _ => Ok(()),
    };
    published.withdraw();
    let exited = match hc.model.model().exit_step() {
        Some(exit) => hc.step(exit, |_| Ok(())),
        None => Ok(()),
    };
    hc.model.archive(&paths.traces());
    drop(published);
    drop(store);
    drop(lock);
    // The log only matters to a CLI whose coordinator failed before serving;
    // past this point every outcome reached the client.
    let _ = std::fs::remove_file(paths.log());
    result.and(released).and(exited).map(|()| Outcome::Done)
}

/// The model core of this coordinator. A coordinator that died before it
/// started generation `id` left that generation's trace: this process
/// continues it as a successor, after the dead one's `HostCoordinatorLost`
/// (the flock this process holds proves it gone).
fn own_trace(
    name: String,
    id: GenerationId,
    routing: Routing,
    paths: &DomainPaths,
) -> Result<HcModel, CoordinatorError> {
    let path = paths.runtime.join(trace_name(id.0));
    if !path.exists() {
        return HcModel::new(name, id.0, routing, path).map_err(CoordinatorError::Trace);
    }
    let mut model = HcModel::resume(path.clone()).map_err(|e| CoordinatorError::Recovery {
        generation: id.0,
        source: RecoveryError::Resume(e),
    })?;
    for dead in model.model().holders() {
        // The dead coordinator's loss is no effect of this process.
        model.take(Action::HostCoordinatorLost { c: dead }, None)?;
    }
    Ok(model)
}

/// AcquireDomainLock in this coordinator's trace (the flock is held), then
/// the recovery of any generation a coordinator that died left behind
/// (each in its own trace, where this process takes the lock step too),
/// then BootstrapVacantDomain.
///
/// A generation that cannot be recovered ends the bootstrap with
/// AbandonBootstrap: nothing is written for this coordinator's own
/// generation, and the step's effect, the lock's release, follows as this
/// process exits; the generation waits, as recorded, for the next one.
fn bootstrap(hc: &mut Hc<'_, '_>, paths: &DomainPaths) -> Result<(), CoordinatorError> {
    let c = hc.model.me();
    hc.step(Action::AcquireDomainLock { c }, |_| Ok(()))?;
    if let Err(e) = recover_all(hc, paths) {
        let _span = tracing::info_span!("AbandonBootstrap").entered();
        if let Err(step) = hc.step(Action::AbandonBootstrap { c }, |_| Ok(())) {
            tracing::warn!(error = %step, "the abandoned bootstrap is not in the trace");
        }
        return Err(e);
    }
    hc.step(Action::BootstrapVacantDomain { c }, |_| Ok(()))
}

pub(super) struct LaunchInputs<'a> {
    pub image: String,
    pub storage_root: PathBuf,
    pub profile: String,
    pub running: &'a Running,
    /// The workspace, opened through its confined plan at load.
    pub workspace: &'a OpenedObject,
    /// The static binaries bound read-only into the sandbox.
    pub binaries: SandboxBinaries<'a>,
    pub paths: &'a DomainPaths,
    pub program: &'a Path,
    /// The profile's resolved `env` table (values redacted in Debug).
    pub environment: &'a ResolvedEnvironment,
    /// `runtime.runsc_dcache` (spec 3.2): runsc's `--dcache`.
    pub runsc_dcache: u32,
    /// The selected profile's derived network policy (spec 3.7, FR-19).
    pub policy: &'a DerivedNetworkPolicy,
    /// The profile's persistent paths, one State Anchor each (spec 3.6).
    pub persistent_dirs: Vec<String>,
    /// `isolate_gitignored` (spec 3.5): the workspace is served through the
    /// ignored-path router, ignored untracked paths kept in the Domain's
    /// Ignored Workspace State.
    pub isolate_gitignored: bool,
    /// The developer volumes, opened through their confined plans at load.
    pub volumes: &'a [ResolvedVolumeSource],
    /// Whether the profile enables host escalation (spec 3.8): the
    /// generation gets an Escalation Mailbox.
    pub escalation: bool,
}

/// The static in-sandbox binaries the `lazaret` binary embeds
/// (ARCHITECTURE.md "Static in-sandbox binaries"), written into each
/// generation's `sbin` directory and bound read-only at
/// [`lazaret_runtime::bundle::INIT_DIR`].
#[derive(Debug, Clone, Copy)]
pub struct SandboxBinaries<'a> {
    /// PID 1 (`lazaret-init`).
    pub init: &'a [u8],
    /// The guest observation and signal tool (`lazaret-guest`, spec 3.4).
    pub guest: &'a [u8],
    /// The network probe of `lazaret doctor --network` (`lazaret-probe`).
    pub probe: &'a [u8],
    /// The Escalation Client (`lazaret-escalate`, spec 3.8).
    pub escalate: &'a [u8],
}

/// A bootstrap that failed (a generation that cannot be recovered) reaches
/// the CLIs waiting to join, the one that started this coordinator among
/// them, instead of only the coordinator's log, which goes at exit.
fn refuse_waiting_clients(events: &Receiver<HcEvent>, error: &CoordinatorError) {
    let deadline = Instant::now() + REFUSAL_WINDOW;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match events.recv_timeout(left) {
            Ok(HcEvent::Client(mut joining)) => reply(
                &mut joining.stream,
                &ControlResponse::Refused(Refusal::LaunchFailed(format!(
                    "the Domain could not be recovered: {error}"
                ))),
            ),
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

fn reply(stream: &mut UnixStream, message: &ControlResponse) {
    if let Err(e) = channel::send(stream, "client", message) {
        tracing::warn!(error = %e, "cannot answer a client");
    }
}

/// The event loop. Returns when the generation is to be torn down (the
/// last session left), or with the launch's error after the failed
/// generation was released. What each event leads to is the core's
/// decision ([`serve`]); this loop performs each step's effect. It owns
/// the event queue: when it returns, every event still queued is dropped,
/// so a session waiting for an answer (a release intent, a Running
/// record) is told at once that none comes.
fn serve(
    hc: &mut Hc<'_, '_>,
    launch: &LaunchInputs<'_>,
    events: Receiver<HcEvent>,
    events_tx: &Sender<HcEvent>,
    mut mailbox: Option<&mut MailboxHost<'_, '_>>,
) -> Result<(), CoordinatorError> {
    loop {
        let waiting = Instant::now();
        let event = match serve::wait_limit(hc.model.model()) {
            None => events.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(limit) => events.recv_timeout(limit),
        };
        let event = match event {
            Ok(event) => event,
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
            Err(RecvTimeoutError::Timeout) => {
                if serve::linger_over(hc.model.model(), waiting.elapsed()) {
                    tracing::info!("no client came: the Vacant Domain's coordinator exits");
                    return Ok(());
                }
                continue;
            }
        };
        match event {
            HcEvent::Client(joining) => {
                client(hc, launch, events_tx, joining, mailbox.as_deref_mut())?;
            }
            HcEvent::Session {
                slot,
                session,
                report,
            } => session_report(hc, slot, session, report)?,
            HcEvent::Escalation {
                session,
                steps,
                reply,
            } => match escalation_steps(hc, session, &steps) {
                Ok(answer) => {
                    let _ = reply.send(answer);
                }
                Err(e) => {
                    if let Some(&step) = steps.first() {
                        let _ = reply.send(Err(StepRefused::Unanswered { step }));
                    }
                    return Err(e);
                }
            },
            HcEvent::SupervisorLost(why) => {
                tracing::warn!(%why, "Runtime Supervisor lost");
                // The sandbox is gone: every session closes; each one's
                // release finishes when its exec client has been reaped.
                for close in serve::on_runtime_lost(hc.model.model()) {
                    hc.step(close.action, |hc| release_terminal(hc, close.s))?;
                }
                record_runtime_end(hc, None)?;
            }
        }
        publish_served(hc);
        if serve::serving_done(hc.model.model()) {
            return Ok(());
        }
    }
}

/// Spec 3.8: tells the mailbox threads the sessions whose requests count:
/// starting (a piped command may ask before its `RegisterSession`, whose
/// step this loop takes before the request's first) or registered, never
/// one that closed (the model's `CloseSession` ended its request and host
/// process, and its slot is served until its release finishes).
fn publish_served(hc: &Hc<'_, '_>) {
    let sess = &hc.model.state().sess;
    hc.escalations.publish(
        hc.sessions
            .iter()
            .filter(|(s, _)| matches!(sess.get(s.index()), Some(Sess::Starting | Sess::Registered)))
            .map(|(_, served)| served.session),
    );
}

/// Escalation steps of a request of `session`, in order, each taken for
/// the session's model slot when the model enables it (spec 3.8; a step's
/// effect is the asking mailbox thread's); the first refused ends them.
/// Only a failure to read a step's effect back is the coordinator's error.
fn escalation_steps(
    hc: &mut Hc<'_, '_>,
    session: SessionId,
    steps: &[EscalationStep],
) -> Result<Result<(), StepRefused>, CoordinatorError> {
    let Some(s) = hc
        .sessions
        .iter()
        .find(|(_, served)| served.session == session)
        .map(|(s, _)| *s)
    else {
        return Ok(steps.first().map_or(Ok(()), |&step| {
            Err(StepRefused::NotServed { step, session })
        }));
    };
    for &step in steps {
        let action = step.action(hc.model.me(), s);
        if let Err(e) = hc.model.check(&action) {
            return Ok(Err(StepRefused::Disabled {
                step,
                why: e.to_string(),
            }));
        }
        hc.step(action, |_| Ok(()))?;
    }
    Ok(Ok(()))
}

/// A client connected: the core's [`serve::on_client`] plan, from its
/// `ConnectClient` on. Only a client for which no session slot is free is
/// answered without a step (it is no model session).
fn client(
    hc: &mut Hc<'_, '_>,
    launch: &LaunchInputs<'_>,
    events_tx: &Sender<HcEvent>,
    mut joining: Joining,
    mut mailbox: Option<&mut MailboxHost<'_, '_>>,
) -> Result<(), CoordinatorError> {
    let c = hc.model.me();
    let Some(plan) = serve::on_client(hc.model.model(), joining.matches)? else {
        reply(
            &mut joining.stream,
            &ControlResponse::Refused(Refusal::SessionFailed(format!(
                "this Domain already serves {SESSION_SLOTS} sessions"
            ))),
        );
        return Ok(());
    };
    // Spec 3.3: the Client CLI chose its Session ID; one this generation
    // already recorded is refused before it is any model session (a
    // second Session row would fail the Domain Store transaction).
    if session_taken(hc, joining.request.session_id)? {
        reply(
            &mut joining.stream,
            &ControlResponse::Refused(Refusal::SessionIdTaken),
        );
        return Ok(());
    }
    let s = plan.s;
    hc.step(plan.connect(), |_| Ok(()))?;
    match plan.admission {
        Admission::Refuse => hc.step(Action::RefuseConfigurationMismatch { c, s }, |_| {
            reply(
                &mut joining.stream,
                &ControlResponse::Refused(launch.refusal()),
            );
            Ok(())
        }),
        Admission::Ended => hc.step(Action::ClientExits { s }, |_| {
            let why = super::launch::runtime_lost().unwrap_or("");
            reply(
                &mut joining.stream,
                &ControlResponse::Refused(Refusal::SessionFailed(format!(
                    "the sandbox has ended: {why}"
                ))),
            );
            Ok(())
        }),
        Admission::Join => admit(
            hc,
            launch,
            joining,
            s,
            Vec::new(),
            events_tx,
            mailbox.as_deref(),
        ),
        Admission::Launch => {
            let mut timings = Vec::new();
            let t = Instant::now();
            let launched = launch_generation(hc, launch, events_tx, &mut timings)
                .map(|g| hc.generation = Some(g));
            if let Err(e) = launched {
                // The client leaves with the launch's error, before the
                // failed generation's release.
                let refused = hc.step(Action::ClientExits { s }, |_| {
                    reply(
                        &mut joining.stream,
                        &ControlResponse::Refused(Refusal::LaunchFailed(e.to_string())),
                    );
                    Ok(())
                });
                if let Err(exit) = refused {
                    tracing::error!(error = %exit, "the launching client's exit");
                }
                // A launch that failed before StartGeneration left
                // nothing to release.
                if hc.model.state().decision == Decision::Starting {
                    if let Err(release) = abort(hc) {
                        tracing::error!(error = %release, "releasing the failed generation");
                    }
                }
                return Err(e);
            }
            timings.push(("launch_total".into(), micros(t)));
            if let (Some(m), Some(g)) = (mailbox.as_deref_mut(), hc.generation.as_ref()) {
                m.start(&g.dir, &g.trust_anchor);
            }
            admit(
                hc,
                launch,
                joining,
                s,
                timings,
                events_tx,
                mailbox.as_deref(),
            )
        }
    }
}

impl LaunchInputs<'_> {
    /// The refusal of a CLI whose configuration differs from this Domain's.
    fn refusal(&self) -> Refusal {
        Refusal::OtherConfiguration {
            profile: self.running.profile.clone(),
            workspace: self.running.workspace.clone(),
            running_fingerprint: self.running.fingerprint,
            config_file: self.running.source.clone(),
        }
    }
}

/// A connected, matching CLI joins the published generation (its
/// `ConnectClient` taken): EnrollClient, RecordTerminalIntent (spec 3.4
/// acquisition step 1), and RegisterSession once its terminal runs (an
/// interactive one's on its Running record, [`session_report`]); a session
/// that cannot be started is released (AbortSessionStart, then
/// FinishSessionRelease). `timings` are the launch's phases when this
/// client's connection launched the generation.
fn admit(
    hc: &mut Hc<'_, '_>,
    launch: &LaunchInputs<'_>,
    joining: Joining,
    s: SessionsId,
    timings: Vec<(String, u64)>,
    events_tx: &Sender<HcEvent>,
    mailbox: Option<&MailboxHost<'_, '_>>,
) -> Result<(), CoordinatorError> {
    let Joining {
        mut stream,
        request,
        cli_id,
        ..
    } = joining;
    let request = &request;
    let c = hc.model.me();
    let cold = !timings.is_empty();
    let Some(g) = hc.generation.as_ref() else {
        return Err(CoordinatorError::NoLaunchedSandbox);
    };
    let generation = g.id;
    // Spec 3.3 session registration: the Client CLI's Session Anchor is
    // bound to the Session ID it chose and the Client CLI ID its mTLS leaf
    // was issued to by the generation's Session Request Capability; the
    // Session record carries both IDs.
    let session = request.session_id;
    let registered = g
        .trust_anchor
        .register(cli_id, session, request.session_anchor)
        .map_err(CoordinatorError::Registration)?;
    let session_anchor_id = registered
        .session_capability
        .session_binding
        .session_anchor_id();
    let capability = registered.session_capability.clone();
    let started = SessionStarted {
        session_id: session,
        cold,
        timings,
        trust_manifest: g.trust_anchor.manifest().clone(),
        coordinator_protocol_credential: g.trust_anchor.coordinator_credential().clone(),
    };
    // The client is told it joined before its command can start: a CLI
    // that loses its coordinator after this never retries, so a command is
    // never run twice.
    hc.step(Action::EnrollClient { c, s }, |_| {
        reply(&mut stream, &ControlResponse::Registered(registered));
        reply(&mut stream, &ControlResponse::Started(Box::new(started)));
        Ok(())
    })?;
    hc.step(Action::RecordTerminalIntent { c, s }, |hc| {
        record_terminal_intent(hc.store, generation, session, cli_id, session_anchor_id)
            .map_err(|e| CoordinatorError::TerminalIntent(Box::new(e)))?;
        hc.sessions.insert(
            s,
            Served {
                session,
                piped: request.terminal.is_none(),
            },
        );
        Ok(())
    })?;
    // Spec 3.8: the session's requests count from before its command
    // can make one.
    publish_served(hc);
    let Some(g) = hc.generation.as_ref() else {
        return Err(CoordinatorError::NoLaunchedSandbox);
    };
    let globals = runsc_globals(&g.runsc_root, runsc_dcache(launch.runsc_dcache));
    let ctx = SessionContext {
        generation: g.id,
        program: launch.program,
        supervisor: g.supervisor.handle(),
        runsc_globals: &globals,
        container_id: &g.container_id,
        environment: launch.environment,
        prompts: mailbox.map(MailboxHost::prompts),
    };
    let reports = forward_reports(events_tx, s, session);
    let start = stream
        .try_clone()
        .map_err(|e| e.to_string())
        .and_then(|client| {
            start_session(
                &mut hc.broker,
                hc.store,
                &ctx,
                session,
                request,
                &capability,
                client,
                reports,
            )
            .map_err(|e| e.to_string())
        });
    match start {
        // An interactive session registers when its terminal's Running
        // record is made: on its guest leader identity (`session_report`).
        // A piped one has no Running record (schemas.md: the running state
        // records a PTY): it registers once its exec client runs.
        Ok(()) if request.terminal.is_some() => Ok(()),
        Ok(()) => hc.step(Action::RegisterSession { c, s }, |_| Ok(())),
        Err(e) => {
            // Spec 3.4 "Failure before the running state never admits the
            // terminal": no exec client of the session is left
            // (`start_session`), so its release intent is recorded and
            // its terminal cleaned; a bare intent (nothing of the terminal
            // was acquired) becomes clean only after runtime absence
            // (schemas.md "Session terminal ownership"), so its release is
            // retained for the generation's release.
            let retained = bare_intent(hc, s)?;
            let end = serve::on_session_ended(hc.model.model(), s, retained);
            if let Some(abort) = end.close {
                hc.step(abort.action, |hc| release_terminal(hc, abort.s))?;
            }
            hc.step(end.finish, |hc| {
                if retained {
                    hc.sessions.remove(&s);
                } else {
                    clean_terminal(hc, s)?;
                }
                // `Started` is sent: the failure is the session's one
                // ending, in its stream's own form.
                let abort = SessionAbort::new(session, SessionAbortKind::StartFailed, &e);
                let sent = if request.terminal.is_some() {
                    channel::send(&mut stream, "client", &SessionTerminalMessage::Abort(abort))
                } else {
                    channel::send(
                        &mut stream,
                        "client",
                        &NonInteractiveSessionMessage::Abort(abort),
                    )
                };
                if let Err(e) = sent {
                    tracing::warn!(error = %e, "cannot tell a client its session failed");
                }
                Ok(())
            })
        }
    }
}

/// Whether `session` is already a session of this coordinator: one it
/// serves, or a Session row of its generation.
fn session_taken(hc: &Hc<'_, '_>, session: SessionId) -> Result<bool, CoordinatorError> {
    if hc.sessions.values().any(|served| served.session == session) {
        return Ok(true);
    }
    match hc.generation.as_ref() {
        None => Ok(false),
        Some(g) => hc
            .store
            .has_session(g.id, session)
            .map_err(|e| hc.store_err(e)),
    }
}

/// CloseSession or AbortSessionStart: the session terminal's durable
/// ReleaseIntent (evidence kept) before its release.
fn release_terminal(hc: &mut Hc<'_, '_>, s: SessionsId) -> Result<(), CoordinatorError> {
    // Spec 3.8, OR-3: the session's host process is stopped and reaped
    // first, and none spawns after (Lazaret.tla CloseSession).
    if let Some(session) = hc.sessions.get(&s).map(|served| served.session) {
        hc.escalations
            .close_session(session)
            .map_err(|source| CoordinatorError::HostProcessNotStopped { session, source })?;
    }
    terminal_op(hc, s, false)
}

/// FinishSessionRelease: the terminal is Clean once its exec client is
/// reaped and its PTY closed; the slot is free again.
fn clean_terminal(hc: &mut Hc<'_, '_>, s: SessionsId) -> Result<(), CoordinatorError> {
    terminal_op(hc, s, true)?;
    hc.sessions.remove(&s);
    Ok(())
}

/// FinishSessionRelease or RetainSessionRelease of a session whose release
/// ran (spec 3.4 release step 3): "Record the terminal clean only after the
/// guest group, exec client, and PTY are absent; otherwise retain release
/// intent." A retained terminal keeps its ReleaseIntent record, with every
/// recorded identity, until the runtime is gone: the release's
/// `CleanSessionTerminals`, in Domain teardown or bootstrap recovery,
/// cleans it then (`recovery::clean_terminals`). The session slot is free
/// either way: the model's session is over.
fn finish_terminal(
    hc: &mut Hc<'_, '_>,
    s: SessionsId,
    outcome: ReleaseOutcome,
) -> Result<(), CoordinatorError> {
    match outcome {
        ReleaseOutcome::Clean => clean_terminal(hc, s),
        ReleaseOutcome::Retained(reason) => {
            // Fault `retained-release-cleaned` (crash-point builds only):
            // the effect records the retained terminal clean, as if its
            // processes were proved absent, while the step says it is
            // retained. Nothing in the run notices; only trace validation
            // does (the observed `termsLeft`).
            if fault!("retained-release-cleaned") {
                return clean_terminal(hc, s);
            }
            tracing::info!(
                ?reason,
                "RetainReleaseIntent: the terminal stays ReleaseIntent until the runtime is gone"
            );
            hc.sessions.remove(&s);
            Ok(())
        }
    }
}

/// Whether the session's terminal is a bare intent: nothing of it was
/// acquired (no identity recorded).
fn bare_intent(hc: &Hc<'_, '_>, s: SessionsId) -> Result<bool, CoordinatorError> {
    let Some(session) = hc.sessions.get(&s).map(|x| x.session) else {
        return Ok(false);
    };
    let terminal = hc
        .store
        .terminal(hc.id, session)
        .map_err(|e| hc.store_err(e))?;
    Ok(terminal.is_some_and(|t| t.is_bare_intent()))
}

fn terminal_op(hc: &mut Hc<'_, '_>, s: SessionsId, clean: bool) -> Result<(), CoordinatorError> {
    let Some(session) = hc.sessions.get(&s).map(|x| x.session) else {
        return Ok(());
    };
    let generation = hc.id;
    let terminal = hc
        .store
        .terminal(generation, session)
        .map_err(|e| hc.store_err(e))?;
    let op = match terminal.map(|t| (t.state, t.is_bare_intent())) {
        // A bare intent is its own release intent: it has nothing to
        // release, and is cleaned after runtime absence.
        Some((SessionTerminalState::Intent, true)) => return Ok(()),
        Some((SessionTerminalState::Intent | SessionTerminalState::Running, _)) if !clean => {
            TerminalOp::BeginRelease
        }
        Some((SessionTerminalState::ReleaseIntent, _)) if clean => {
            TerminalOp::Clean(AbsenceProof::ExactAbsence)
        }
        _ => return Ok(()),
    };
    hc.apply(&[StoreOp::Terminal {
        generation,
        session,
        op,
    }])
}

/// A session's report. Only the session the slot still serves is heard: a
/// report sent after its own session's end was handled (a guest identity
/// read late, a release whose acknowledgement timed out) names a session
/// that is over, and the slot may already serve another one, whose
/// terminal it must not touch.
fn session_report(
    hc: &mut Hc<'_, '_>,
    slot: SessionsId,
    session: SessionId,
    report: SessionReport,
) -> Result<(), CoordinatorError> {
    let Some(report) = heard(&hc.sessions, slot, session, report) else {
        return Ok(());
    };
    match report {
        SessionReport::Running {
            evidence,
            registered,
        } => {
            // Spec 3.4 acquisition steps 3-4: the guest leader identity is
            // known; the model's RegisterSession is the Running record.
            // The answer admits the session (step 5, `terminal_session`).
            // Fault `running-record-refused` (crash-point builds only): the
            // session is answered as if its record could not be made.
            let register = serve::on_session_running(hc.model.model(), slot);
            let record = match register {
                Some(_) => running_record(hc, slot, evidence)?,
                None => None,
            };
            let why = match (register, record) {
                _ if fault!("running-record-refused") => "the fault running-record-refused",
                (None, _) => "the session is no longer starting (its release or the runtime's end came first)",
                (Some(_), None) => "its terminal has no Intent record to promote",
                (Some(register), Some(record)) => {
                    hc.step(register, |hc| hc.apply(&[record]))?;
                    let _ = registered.send(true);
                    return Ok(());
                }
            };
            tracing::info!(
                ?slot,
                why,
                "the session is not recorded running; it is not admitted"
            );
            let _ = registered.send(false);
        }
        SessionReport::Releasing(recorded) => {
            // Spec 3.4 release step 1 (the model's CloseSession), asked by
            // the session before it signals anything.
            if let Some(close) = serve::on_session_releasing(hc.model.model(), slot) {
                hc.step(close.action, |hc| release_terminal(hc, close.s))?;
            }
            let _ = recorded.send(());
        }
        SessionReport::Ended(outcome) => {
            // The session's loop reaped its exec client and closed its PTY
            // before it said the session ended (spec 3.4).
            let retained = matches!(outcome, ReleaseOutcome::Retained(_));
            let end = serve::on_session_ended(hc.model.model(), slot, retained);
            if let Some(close) = end.close {
                hc.step(close.action, |hc| release_terminal(hc, close.s))?;
            }
            hc.step(end.finish, |hc| finish_terminal(hc, slot, outcome))?;
        }
    }
    Ok(())
}

/// The report, if `slot` still serves `session`; otherwise it is dropped
/// (a release still waiting is answered: that release was recorded when
/// its session's end was handled).
fn heard(
    sessions: &HashMap<SessionsId, Served>,
    slot: SessionsId,
    session: SessionId,
    report: SessionReport,
) -> Option<SessionReport> {
    if sessions.get(&slot).map(|x| x.session) == Some(session) {
        return Some(report);
    }
    tracing::info!(?slot, ?report, "a report of a session that is over");
    if let SessionReport::Releasing(recorded) = report {
        let _ = recorded.send(());
    }
    None
}

/// RegisterSession's effect, the terminal's durable Running record (spec
/// 3.4 acquisition step 4): this coordinator's committed direct edge, the
/// PTY master, the container and the guest leader join the committed exec
/// client in one transaction. `None` when the slot's terminal is no
/// recorded Intent (nothing to promote): the session is then not admitted.
fn running_record(
    hc: &Hc<'_, '_>,
    s: SessionsId,
    evidence: TerminalEvidence,
) -> Result<Option<StoreOp>, CoordinatorError> {
    let (Some(session), Some(g)) = (
        hc.sessions.get(&s).map(|x| x.session),
        hc.generation.as_ref(),
    ) else {
        return Ok(None);
    };
    let generation = hc.id;
    let container = ContainerId::new(g.container_id.clone()).map_err(|source| {
        CoordinatorError::RecordValue {
            what: "container id",
            source,
        }
    })?;
    let Some(t) = hc
        .store
        .terminal(generation, session)
        .map_err(|e| hc.store_err(e))?
    else {
        return Ok(None);
    };
    if t.state != SessionTerminalState::Intent {
        return Ok(None);
    }
    let mut snapshot = t.snapshot.clone();
    snapshot.container_id = Some(container);
    snapshot.host_coordinator =
        PersistedHostProcessOwnership::Committed(HostProcessIdentity { identity: hc.own });
    snapshot.pty_master = Some(evidence.pty);
    snapshot.guest_process = Some(evidence.guest);
    Ok(Some(StoreOp::Terminal {
        generation,
        session,
        op: TerminalOp::Run(snapshot),
    }))
}

/// The session's report queue: one forwarder keeps its reports in the order
/// they were sent, each naming the slot and the session.
fn forward_reports(
    events_tx: &Sender<HcEvent>,
    slot: SessionsId,
    session: SessionId,
) -> Sender<SessionReport> {
    let (tx, rx) = mpsc::channel::<SessionReport>();
    let events = events_tx.clone();
    std::thread::spawn(move || {
        while let Ok(report) = rx.recv() {
            let event = HcEvent::Session {
                slot,
                session,
                report,
            };
            if events.send(event).is_err() {
                return;
            }
        }
    });
    tx
}

pub(super) fn micros(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// The control socket's acceptor (spec 3.3): one TLS connection at a time,
/// its handshake bounded by `control_tls`, its opening frames by
/// [`OPENING_TIMEOUT`]; enrollments and refused openings are answered
/// here, and an opened session goes to the event loop with its Client CLI
/// ID. The acceptor holds the generation's [`TlsAuthority`] (its CA key)
/// until the process exits, after publication was withdrawn.
fn spawn_acceptor(
    listener: UnixListener,
    events: Sender<HcEvent>,
    mut tls: TlsAuthority,
    developer_uid: u32,
) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (cli_id, mut stream) = match control_tls::accept(stream, &mut tls, developer_uid) {
                Ok(Accepted::Client { cli_id, stream }) => (cli_id, stream),
                Ok(Accepted::Enrolled(cli_id)) => {
                    tracing::debug!(%cli_id, "Client CLI enrolled");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "a control connection is refused");
                    continue;
                }
            };
            let _ = stream.set_read_timeout(Some(OPENING_TIMEOUT));
            let opened = match open_session(&mut stream, tls.generation_identity(), cli_id) {
                Ok(Some(opened)) => opened,
                Ok(None) => continue,
                Err(refusal) => {
                    tracing::warn!(%cli_id, %refusal, "a session opening is refused");
                    reply(&mut stream, &ControlResponse::Refused(refusal));
                    continue;
                }
            };
            let _ = stream.set_read_timeout(None);
            if events
                .send(HcEvent::Client(Joining {
                    stream,
                    request: opened.request,
                    matches: opened.matches,
                    cli_id,
                }))
                .is_err()
            {
                return;
            }
        }
    });
}

/// Reads a session connection's opening frames through [`SessionOpening`]
/// (spec 3.3): the registration, then the start, each at most
/// [`MAX_CONTROL_FRAME`] bytes. `Ok(None)`: the client left or stalled
/// before it finished (nothing to answer).
fn open_session(
    stream: &mut UnixStream,
    expected: &lazaret_runtime::protocol::records::GenerationIdentity,
    cli_id: CliId,
) -> Result<Option<lazaret_runtime::coordinator::control::OpenedSession>, Refusal> {
    let mut opening = SessionOpening::new(expected.clone(), cli_id);
    // Two frames open a session; the loop is bounded by them.
    for _ in 0..2 {
        let body = match channel::receive_body(stream, "client", PREFIX + MAX_CONTROL_FRAME) {
            Ok(body) => body,
            Err(ChannelError::Oversized { len, limit, .. }) => {
                return Err(Refusal::Malformed(format!(
                    "a frame of {len} bytes exceeds the {limit}-byte bound"
                )))
            }
            Err(ChannelError::Frame(e)) => return Err(Refusal::Malformed(e.to_string())),
            Err(_) => return Ok(None),
        };
        if let Some(opened) = opening.feed(&body)? {
            return Ok(Some(opened));
        }
    }
    Err(Refusal::Unexpected {
        expected: "Execute or Attach".into(),
        found: "nothing".into(),
    })
}

fn next_generation(store: &DomainStore<'_>, path: &Path) -> Result<GenerationId, CoordinatorError> {
    let document = store.document().map_err(store_err(path))?;
    let last = document
        .generations
        .iter()
        .map(|g| g.generation.generation_id.0)
        .max()
        .unwrap_or(0);
    Ok(GenerationId(last + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_runtime::records::terminal::{GuestProcessIdentity, PtyIdentity};
    use std::sync::mpsc::sync_channel;

    fn event_of(events: &Receiver<HcEvent>) -> (SessionsId, SessionId, SessionReport) {
        match events.recv_timeout(Duration::from_secs(5)) {
            Ok(HcEvent::Session {
                slot,
                session,
                report,
            }) => (slot, session, report),
            _ => panic!("expected a session report"),
        }
    }

    #[test]
    fn a_sessions_reports_reach_the_loop_in_the_order_its_threads_sent_them() {
        // The release is asked without waiting (a guest that completed by
        // itself), and the end follows from another thread: the loop must
        // handle the intent before the end, every time.
        let (events_tx, events) = mpsc::channel();
        let (slot, session) = (SessionsId(3), SessionId([7; 16]));
        for _ in 0..200 {
            let reports = forward_reports(&events_tx, slot, session);
            let (ack, _unanswered) = sync_channel(1);
            reports.send(SessionReport::Releasing(ack)).ok();
            let ender = reports.clone();
            std::thread::spawn(move || ender.send(SessionReport::Ended(ReleaseOutcome::Clean)))
                .join()
                .ok();
            let first = event_of(&events);
            let second = event_of(&events);
            assert_eq!((first.0, first.1), (slot, session));
            assert_eq!((second.0, second.1), (slot, session));
            assert!(matches!(first.2, SessionReport::Releasing(_)));
            assert!(matches!(
                second.2,
                SessionReport::Ended(ReleaseOutcome::Clean)
            ));
        }
    }

    /// `serve` owns the event queue; when it returns (the loop failed, and
    /// the Domain's teardown follows), a release waiting for its durable
    /// intent's answer is told at once that none comes (the machine's
    /// `ReleaseIntentUnconfirmed`: no signal, then its exec client is
    /// reaped), whether its report sat in the queue or in its forwarder.
    #[test]
    fn a_release_waiting_when_the_loop_ends_is_unconfirmed_at_once() {
        use super::super::release_gate::ReleaseGate;
        use lazaret_runtime::terminal::machine::Input;
        let (events_tx, events) = mpsc::channel::<HcEvent>();
        let reports = forward_reports(&events_tx, SessionsId(0), SessionId([4; 16]));
        let (answered_tx, answered) = mpsc::channel();
        let waiting = std::thread::spawn(move || {
            let answer = ReleaseGate::new(reports).record_release_intent(true);
            answered_tx.send(answer).ok();
        });
        // Nobody takes the report: the loop is elsewhere, then returns.
        assert!(answered.recv_timeout(Duration::from_millis(200)).is_err());
        drop(events);
        assert_eq!(
            answered.recv_timeout(Duration::from_secs(5)),
            Ok(Some(Input::ReleaseIntentUnconfirmed))
        );
        waiting.join().ok();
    }

    #[test]
    fn a_late_report_never_reaches_the_next_session_of_its_slot() {
        let slot = SessionsId(1);
        let (over, current) = (SessionId([1; 16]), SessionId([2; 16]));
        let sessions = HashMap::from([(
            slot,
            Served {
                session: current,
                piped: false,
            },
        )]);
        // The session that held the slot before: its late release is
        // answered (so it does not wait) and dropped.
        let (ack, answered) = sync_channel(1);
        assert!(heard(&sessions, slot, over, SessionReport::Releasing(ack)).is_none());
        assert!(answered.try_recv().is_ok());
        assert!(heard(
            &sessions,
            slot,
            over,
            SessionReport::Ended(ReleaseOutcome::Clean)
        )
        .is_none());
        // Its late guest identity is never recorded for the current
        // session, and its identity thread hears it was not admitted (the
        // answer is dropped, not left waiting).
        let evidence = TerminalEvidence {
            pty: PtyIdentity {
                master_fd: 9,
                device: 1,
                inode: 2,
            },
            guest: GuestProcessIdentity {
                leader_pid: 5,
                leader_start_time: 6,
                process_group_id: 5,
            },
        };
        let (registered, answer) = sync_channel(1);
        let running = SessionReport::Running {
            evidence,
            registered,
        };
        assert!(heard(&sessions, slot, over, running).is_none());
        assert!(answer.recv_timeout(Duration::from_secs(1)).is_err());
        // The same slot's current session, and a free slot.
        let (ack, answered) = sync_channel(1);
        assert!(matches!(
            heard(&sessions, slot, current, SessionReport::Releasing(ack)),
            Some(SessionReport::Releasing(_))
        ));
        assert!(answered.try_recv().is_err());
        let (ack, _) = sync_channel(1);
        assert!(heard(
            &sessions,
            SessionsId(0),
            current,
            SessionReport::Releasing(ack)
        )
        .is_none());
    }
}
