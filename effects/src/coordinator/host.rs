//! The Host Coordinator (spec 3.1, 3.3): one per Domain, started detached
//! by the first CLI, ended when the last session leaves (daemonless). It
//! holds the Domain flock for its whole life, owns the Domain Store, creates
//! the verified user namespace for the Runtime Supervisor it spawns through
//! the broker, and serves sessions on the unix socket in the 0700 Domain
//! runtime directory (SR-10).
//!
//! The decisions come from `lazaret_runtime::coordinator::decide::step`;
//! this file interprets them.
use super::channel::{self, ChannelError};
use super::paths::{DomainPaths, ShortSocketPath};
use super::session::{random_bytes, start_session, SessionContext};
use super::supervisor::{runsc_globals, INIT_NAME};
use super::SUPERVISOR_SUBCOMMAND;
use crate::broker::sys::TargetCommand;
use crate::broker::{Broker, BrokerError, CommittedChild};
use crate::config_resolve::{load_configuration, LoadError, LoadRequest};
use crate::confined::RealSys;
use crate::domain_lock::{DomainLock, DomainLockError};
use crate::domain_store::{
    accept_staged_ownership, DomainStore, SlotTarget, StoreError, StoreLedger, StoreOp,
};
use crate::image::reference::ImageRef;
use crate::image::resolve;
use crate::image::store::BlobStore;
use crate::prepare::{prepare, RealPrepareHost};
use crate::process_identity::real::RealProcessSys;
use crate::process_identity::{ChildState, ProcessSys, Signal};
use crate::userns::{map_and_verify, plan_maps, Identity, RealHost};
use lazaret_runtime::config::{HostEnvironment, SandboxLayoutV1};
use lazaret_runtime::coordinator::decide::{step, Decision, Event, Phase};
use lazaret_runtime::coordinator::messages::{
    ClientMessage, CoordinatorCommand, CoordinatorMessage, Hello, Refusal, SupervisorMessage,
    SupervisorPlan, PROTOCOL_VERSION,
};
use lazaret_runtime::records::domain::{Domain, Generation};
use lazaret_runtime::records::ids::{
    ConfigurationFingerprint, CoordinatorId, DomainId, GenerationId, HostPath, ModelValue,
    NetworkSidecarId, ProfileName, SandboxId,
};
use lazaret_runtime::records::process::{HostProcessOwnershipSlot, StagedProcessOwnership};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

/// How long a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long RS may take for each launch step.
const SUPERVISOR_TIMEOUT: Duration = Duration::from_secs(30);
/// How long RS may take to stop the sandbox and exit.
const SUPERVISOR_EXIT: Duration = Duration::from_secs(20);

/// What the CLI passes to the coordinator it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordinatorArgs {
    pub profile: String,
    pub config: Option<String>,
    /// The canonical workspace the CLI resolved.
    pub workspace: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error("the sandbox layout: {0}")]
    Layout(String),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Lock(#[from] DomainLockError),
    #[error("the coordinator socket {path}: {source}")]
    Socket { path: PathBuf, source: io::Error },
    #[error("Domain Store {path}: {source}")]
    Store { path: PathBuf, source: StoreError },
    #[error("image {reference}: {detail}")]
    Image { reference: String, detail: String },
    #[error("user namespace: {0}")]
    Userns(String),
    #[error("preparing the root filesystem from {reference}: {detail}")]
    Prepare { reference: String, detail: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("starting the Runtime Supervisor: {0}")]
    Spawn(#[from] BrokerError),
    #[error("Runtime Supervisor: {0}")]
    Supervisor(String),
    #[error("Runtime Supervisor channel: {0}")]
    Channel(#[from] ChannelError),
    #[error("boot id: {0}")]
    Boot(io::Error),
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

enum HcEvent {
    Client(UnixStream, Hello),
    SessionEnded,
    SupervisorLost(String),
}

/// Identity a joining CLI must match.
#[derive(Clone, Debug)]
struct Running {
    domain_id: [u8; 32],
    fingerprint: [u8; 32],
    profile: String,
    workspace: String,
    source: String,
}

/// The running generation.
struct Generation_ {
    id: GenerationId,
    dir: PathBuf,
    supervisor: CommittedChild,
    to_supervisor: UnixStream,
    container_id: String,
    runsc_root: PathBuf,
}

/// Runs the coordinator until the Domain is torn down.
pub fn run_coordinator(
    args: &CoordinatorArgs,
    env: &dyn HostEnvironment,
    init_binary: &[u8],
) -> Result<Outcome, CoordinatorError> {
    let layout =
        SandboxLayoutV1::production().map_err(|e| CoordinatorError::Layout(e.to_string()))?;
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
    let lock = match DomainLock::try_acquire(&paths.lock()) {
        Ok(lock) => lock,
        Err(DomainLockError::Held { .. }) => return Ok(Outcome::LostLock),
        Err(e) => return Err(e.into()),
    };
    let socket = paths.socket();
    // Holding the lock, any socket file left here is stale.
    match std::fs::remove_file(&socket) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(CoordinatorError::Socket {
                path: socket,
                source,
            })
        }
    }
    let listener = ShortSocketPath::new(&socket)
        .and_then(|short| UnixListener::bind(short.path()))
        .map_err(|source| CoordinatorError::Socket {
            path: socket.clone(),
            source,
        })?;
    let running = Running {
        domain_id: config.domain_id().0,
        fingerprint: config.fingerprint().0,
        profile: args.profile.clone(),
        workspace: config.workspace().label().display().to_string(),
        source: config.source_label().display().to_string(),
    };
    let (events_tx, events) = mpsc::channel();
    spawn_acceptor(listener, running.clone(), events_tx.clone());
    let boot = RealProcessSys.boot_id().map_err(CoordinatorError::Boot)?;
    let store_path = paths.store();
    let store = if store_path.exists() {
        DomainStore::open(&lock, &store_path, boot)
    } else {
        DomainStore::create(&lock, &store_path, boot)
    }
    .map_err(store_err(&store_path))?;
    let program = std::env::current_exe().map_err(|source| CoordinatorError::Io {
        path: PathBuf::from("/proc/self/exe"),
        source,
    })?;
    let mut broker = Broker::claim(RealProcessSys, program.clone())?;
    let launch = LaunchInputs {
        image: config.selected().image().to_string(),
        storage_root: config.storage_root().label(),
        profile: args.profile.clone(),
        running: &running,
        init_binary,
        paths: &paths,
    };
    let result = serve(&mut broker, &store, &launch, &program, &events, &events_tx);
    // Teardown (FR-6): no new joiners, then the sandbox, then our files.
    let _ = std::fs::remove_file(&socket);
    let generation = result.as_ref().ok().and_then(|g| g.as_ref());
    if let Some(g) = generation {
        stop_generation(&broker, g);
    }
    drop(store);
    drop(lock);
    // The log only matters to a CLI whose coordinator failed before serving;
    // past this point every outcome reached the client.
    let _ = std::fs::remove_file(paths.log());
    match result {
        Ok(_) => Ok(Outcome::Done),
        Err(e) => Err(e),
    }
}

struct LaunchInputs<'a> {
    image: String,
    storage_root: PathBuf,
    profile: String,
    running: &'a Running,
    init_binary: &'a [u8],
    paths: &'a DomainPaths,
}

fn reply(stream: &mut UnixStream, message: &CoordinatorMessage) {
    if let Err(e) = channel::send(stream, "client", message) {
        tracing::warn!(error = %e, "cannot answer a client");
    }
}

/// The decision interpreter. Returns the generation to stop, if any.
fn serve(
    broker: &mut Broker<RealProcessSys>,
    store: &DomainStore<'_>,
    launch: &LaunchInputs<'_>,
    program: &Path,
    events: &Receiver<HcEvent>,
    events_tx: &Sender<HcEvent>,
) -> Result<Option<Generation_>, CoordinatorError> {
    let mut phase = Phase::Idle;
    let mut generation: Option<Generation_> = None;
    let mut pending_timings: Vec<(String, u64)> = Vec::new();
    loop {
        let Ok(event) = events.recv() else {
            return Ok(generation);
        };
        let (model_event, client) = match event {
            HcEvent::Client(stream, hello) => (Event::SessionRequested, Some((stream, hello))),
            HcEvent::SessionEnded => (Event::SessionEnded, None),
            HcEvent::SupervisorLost(why) => {
                tracing::warn!(%why, "Runtime Supervisor lost");
                (Event::SupervisorLost, None)
            }
        };
        let Ok((next, decision)) = step(phase, model_event) else {
            continue;
        };
        phase = next;
        let mut decision = decision;
        let mut client = client;
        let mut cold = false;
        // A launch is followed by the session that asked for it.
        if decision == Decision::Launch {
            let t = Instant::now();
            match launch_generation(
                broker,
                store,
                launch,
                program,
                events_tx,
                &mut pending_timings,
            ) {
                Ok(g) => {
                    generation = Some(g);
                    cold = true;
                    pending_timings.push(("launch_total".into(), micros(t)));
                    let (p, d) = step(phase, Event::Launched { ok: true })
                        .unwrap_or((Phase::Stopping, Decision::Teardown));
                    phase = p;
                    decision = d;
                }
                Err(e) => {
                    if let Some((mut stream, _)) = client.take() {
                        reply(
                            &mut stream,
                            &CoordinatorMessage::Refused(Refusal::LaunchFailed(e.to_string())),
                        );
                    }
                    return Err(e);
                }
            }
        }
        match decision {
            Decision::StartSession => {
                let (Some((mut stream, hello)), Some(g)) = (client.take(), generation.as_ref())
                else {
                    continue;
                };
                let globals = runsc_globals(&g.runsc_root);
                let ctx = SessionContext {
                    generation: g.id,
                    program,
                    supervisor: g.supervisor.handle(),
                    runsc_globals: &globals,
                    container_id: &g.container_id,
                };
                let joined = CoordinatorMessage::Joined {
                    generation: g.id.0,
                    cold,
                    timings: std::mem::take(&mut pending_timings),
                };
                let ended = forward_end(events_tx);
                let start = stream.try_clone().map_err(|e| e.to_string()).and_then(|s| {
                    start_session(broker, store, &ctx, &hello, s, ended).map_err(|e| e.to_string())
                });
                let outcome = match start {
                    Ok(()) => {
                        reply(&mut stream, &joined);
                        Event::SessionStarted
                    }
                    Err(e) => {
                        reply(
                            &mut stream,
                            &CoordinatorMessage::Refused(Refusal::SessionFailed(e)),
                        );
                        Event::SessionStartFailed
                    }
                };
                if let Ok((p, d)) = step(phase, outcome) {
                    phase = p;
                    if d == Decision::Teardown {
                        return Ok(generation);
                    }
                }
            }
            Decision::Refuse(refusal) => {
                if let Some((mut stream, _)) = client.take() {
                    reply(&mut stream, &CoordinatorMessage::Refused(refusal));
                }
            }
            Decision::Teardown => return Ok(generation),
            Decision::Continue | Decision::Launch => {}
        }
    }
}

/// A session's end becomes an HC event.
fn forward_end(events_tx: &Sender<HcEvent>) -> Sender<()> {
    let (tx, rx) = mpsc::channel::<()>();
    let events = events_tx.clone();
    std::thread::spawn(move || {
        if rx.recv().is_ok() {
            let _ = events.send(HcEvent::SessionEnded);
        }
    });
    tx
}

fn micros(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX)
}

fn spawn_acceptor(listener: UnixListener, running: Running, events: Sender<HcEvent>) {
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(HELLO_TIMEOUT));
            let hello = match channel::receive::<ClientMessage>(&mut stream, "client") {
                Ok(ClientMessage::Hello(hello)) => hello,
                _ => continue,
            };
            let _ = stream.set_read_timeout(None);
            let refusal = if hello.version != PROTOCOL_VERSION {
                Some(Refusal::Version {
                    supported: PROTOCOL_VERSION,
                })
            } else if hello.domain_id != running.domain_id {
                Some(Refusal::OtherDomain {
                    running: running.domain_id,
                })
            } else if hello.fingerprint != running.fingerprint {
                Some(Refusal::OtherConfiguration {
                    profile: running.profile.clone(),
                    workspace: running.workspace.clone(),
                    running_fingerprint: running.fingerprint,
                    source: running.source.clone(),
                })
            } else {
                None
            };
            match refusal {
                Some(r) => reply(&mut stream, &CoordinatorMessage::Refused(r)),
                None => {
                    if events.send(HcEvent::Client(stream, hello)).is_err() {
                        return;
                    }
                }
            }
        }
    });
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

/// LaunchGeneration: image -> prepared lower, Domain Store generation, RS
/// in a verified user namespace, sandbox running.
fn launch_generation(
    broker: &mut Broker<RealProcessSys>,
    store: &DomainStore<'_>,
    launch: &LaunchInputs<'_>,
    program: &Path,
    events_tx: &Sender<HcEvent>,
    timings: &mut Vec<(String, u64)>,
) -> Result<Generation_, CoordinatorError> {
    let _span = tracing::info_span!("LaunchGeneration").entered();
    let mut phase_timer = Instant::now();
    let mut mark = |name: &str, timings: &mut Vec<(String, u64)>| {
        timings.push((name.to_owned(), micros(phase_timer)));
        phase_timer = Instant::now();
    };
    let image_err = |detail: String| CoordinatorError::Image {
        reference: launch.image.clone(),
        detail,
    };
    let reference = ImageRef::parse(&launch.image).map_err(|e| image_err(e.to_string()))?;
    let blobs_dir = launch.storage_root.join("blobs");
    let blobs = BlobStore::open(&blobs_dir).map_err(|e| image_err(e.to_string()))?;
    let image = resolve(&reference, &blobs, &mut |_| {}).map_err(|e| image_err(e.to_string()))?;
    mark("resolve_image", timings);
    let me =
        Identity::current(&mut RealHost).map_err(|e| CoordinatorError::Userns(e.to_string()))?;
    let maps =
        plan_maps(&mut RealHost, &me).map_err(|e| CoordinatorError::Userns(e.to_string()))?;
    let lower = prepare(
        &mut RealPrepareHost::new(maps.clone()),
        &launch.storage_root,
        &blobs,
        &image,
        &maps,
    )
    .map_err(|e| CoordinatorError::Prepare {
        reference: launch.image.clone(),
        detail: e.to_string(),
    })?;
    mark("prepare_lower", timings);

    let store_path = store.path().to_owned();
    let id = next_generation(store, &store_path)?;
    let coordinator_id = CoordinatorId(random_bytes().map_err(CoordinatorError::Boot)?);
    let running = launch.running;
    let invalid = |what: &str, e: String| CoordinatorError::Supervisor(format!("{what}: {e}"));
    store
        .apply(&[
            StoreOp::PutDomain(Domain {
                domain_id: DomainId(running.domain_id),
                profile_name: ProfileName::new(launch.profile.clone())
                    .map_err(|e| invalid("profile", e.to_string()))?,
                canonical_workspace: HostPath::new(running.workspace.clone().into_bytes())
                    .map_err(|e| invalid("workspace", e.to_string()))?,
            }),
            StoreOp::InsertGeneration(Generation {
                domain_id: DomainId(running.domain_id),
                generation_id: id,
                configuration_fingerprint: ConfigurationFingerprint(running.fingerprint),
                coordinator_id,
                network_sidecar_id: NetworkSidecarId(
                    random_bytes().map_err(CoordinatorError::Boot)?,
                ),
                sandbox_id: SandboxId(random_bytes().map_err(CoordinatorError::Boot)?),
                durable_decision: ModelValue::new("Launching")
                    .map_err(|e| invalid("decision", e.to_string()))?,
            }),
        ])
        .map_err(store_err(&store_path))?;
    mark("store_generation", timings);

    let dir = launch.paths.generation(id.0);
    let init_dir = dir.join("sbin");
    let init = init_dir.join(INIT_NAME);
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |source| CoordinatorError::Io { path, source }
    };
    std::fs::create_dir_all(&init_dir).map_err(io_err(&init_dir))?;
    std::fs::write(&init, launch.init_binary)
        .and_then(|()| std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o555)))
        .map_err(io_err(&init))?;

    // The lifetime channel: a socketpair whose RS end RS inherits.
    let (hc_end, rs_end) = UnixStream::pair().map_err(io_err(&dir))?;
    let rs_fd: OwnedFd = rs_end.into();
    rustix::io::fcntl_setfd(&rs_fd, rustix::io::FdFlags::empty())
        .map_err(|e| io_err(&dir)(e.into()))?;
    let mut ledger = StoreLedger::new(
        store,
        SlotTarget::Participant {
            generation: id,
            slot: HostProcessOwnershipSlot::SandboxRuntimeSupervisor,
        },
    )
    .map_err(store_err(&store_path))?;
    let target = TargetCommand {
        argv: vec![
            program.into(),
            SUPERVISOR_SUBCOMMAND.into(),
            "--channel-fd".into(),
            rs_fd.as_raw_fd().to_string().into(),
        ],
    };
    let acquired = broker.acquire(&target, &mut ledger);
    drop(rs_fd);
    let child = acquired?;
    mark("spawn_supervisor", timings);
    let mut rs = hc_end;
    rs.set_read_timeout(Some(SUPERVISOR_TIMEOUT))
        .map_err(io_err(&dir))?;
    let container_id = format!("lazaret-{}-{}", hex_prefix(&running.domain_id), id.0);
    channel::send(
        &mut rs,
        "supervisor",
        &CoordinatorCommand::Plan(SupervisorPlan {
            domain_id: running.domain_id,
            generation_id: id.0,
            coordinator_id: coordinator_id.0,
            container_id: container_id.clone(),
            generation_dir: dir.display().to_string(),
            rootfs: lower.rootfs.display().to_string(),
            workspace: running.workspace.clone(),
            init: init_dir.display().to_string(),
            hostname: "lazaret".to_owned(),
            env: vec![
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
                "HOME=/root".to_owned(),
                "TERM=xterm".to_owned(),
            ],
        }),
    )?;
    let verified = match channel::receive::<SupervisorMessage>(&mut rs, "supervisor")? {
        SupervisorMessage::UserNamespace { pid } => {
            let pid = i32::try_from(pid)
                .map_err(|_| CoordinatorError::Userns(format!("PID {pid} out of range")))?;
            map_and_verify(&mut RealHost, pid, &maps).map_err(|e| e.to_string())
        }
        other => Err(format!("expected UserNamespace, got {other:?}")),
    };
    if let Err(why) = verified {
        let _ = channel::send(
            &mut rs,
            "supervisor",
            &CoordinatorCommand::Refused(why.clone()),
        );
        let _ = child.handle().wait(&RealProcessSys);
        let _ = std::fs::remove_dir_all(&dir);
        return Err(CoordinatorError::Userns(why));
    }
    channel::send(&mut rs, "supervisor", &CoordinatorCommand::MapsVerified)?;
    mark("verify_userns", timings);
    let supervisor = broker
        .commit(child, &mut ledger, |sys, handle| match handle.peek(sys) {
            Ok(ChildState::Running) => Ok(()),
            other => Err(format!("{other:?}")),
        })
        .map_err(|f| {
            let _ = f.child.handle().wait(&RealProcessSys);
            CoordinatorError::Supervisor(f.error.to_string())
        })?;
    let runsc_root = match serve_supervisor_launch(store, id, &mut rs) {
        Ok(root) => root,
        Err(e) => {
            let _ = supervisor.handle().wait(&RealProcessSys);
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    mark("runsc_run_ready", timings);
    rs.set_read_timeout(None).map_err(io_err(&dir))?;
    let to_supervisor = rs.try_clone().map_err(io_err(&dir))?;
    let lost = events_tx.clone();
    std::thread::spawn(move || {
        let why = match channel::receive::<SupervisorMessage>(&mut rs, "supervisor") {
            Ok(SupervisorMessage::Failed(why)) => why,
            Ok(other) => format!("unexpected {other:?}"),
            Err(e) => e.to_string(),
        };
        let _ = lost.send(HcEvent::SupervisorLost(why));
    });
    Ok(Generation_ {
        id,
        dir,
        supervisor,
        to_supervisor,
        container_id,
        runsc_root,
    })
}

fn hex_prefix(bytes: &[u8; 32]) -> String {
    bytes[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// HC's half of RS's acquisition of the attached runsc (spec 3.3 steps 1,
/// 6, 9 for an RS-launched child), until the sandbox runs.
fn serve_supervisor_launch(
    store: &DomainStore<'_>,
    generation: GenerationId,
    rs: &mut UnixStream,
) -> Result<PathBuf, CoordinatorError> {
    loop {
        match channel::receive::<SupervisorMessage>(rs, "supervisor")? {
            SupervisorMessage::ConfirmIntent => {
                channel::send(rs, "supervisor", &CoordinatorCommand::IntentConfirmed)?;
            }
            SupervisorMessage::Staged(bytes) => {
                let answer = match accept_staged_ownership(store, &bytes) {
                    Ok(ack) => CoordinatorCommand::Ack(ack),
                    Err(e) => CoordinatorCommand::Refused(e.to_string()),
                };
                channel::send(rs, "supervisor", &answer)?;
            }
            SupervisorMessage::Committed(bytes) => {
                let answer = StagedProcessOwnership::decode(&bytes)
                    .map_err(|e| e.to_string())
                    .and_then(|staged| {
                        store
                            .apply(&[StoreOp::CommitProcess {
                                target: SlotTarget::Participant {
                                    generation,
                                    slot: staged.slot,
                                },
                                identity: staged.identity,
                            }])
                            .map_err(|e| e.to_string())
                    });
                let reply = match answer {
                    Ok(()) => CoordinatorCommand::IntentConfirmed,
                    Err(e) => CoordinatorCommand::Refused(e),
                };
                channel::send(rs, "supervisor", &reply)?;
            }
            SupervisorMessage::SandboxRunning { runsc_root, .. } => {
                return Ok(PathBuf::from(runsc_root))
            }
            SupervisorMessage::Failed(why) => return Err(CoordinatorError::Supervisor(why)),
            SupervisorMessage::UserNamespace { .. } => {
                return Err(CoordinatorError::Supervisor(
                    "a second user namespace request".into(),
                ))
            }
        }
    }
}

/// Teardown of the generation: RS stops the sandbox (runsc run deletes its
/// state) and exits; HC reaps it and removes the generation directory.
fn stop_generation(broker: &Broker<RealProcessSys>, g: &Generation_) {
    let _span = tracing::info_span!("Teardown", generation = g.id.0).entered();
    let mut to = &g.to_supervisor;
    let _ = channel::send(&mut to, "supervisor", &CoordinatorCommand::Stop);
    let handle = g.supervisor.handle();
    let deadline = Instant::now() + SUPERVISOR_EXIT;
    loop {
        match broker.poll(handle) {
            Ok(ChildState::Running) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(ChildState::Running) => {
                let _ = broker.signal(handle, Signal::Kill);
                let _ = broker.wait(handle);
                break;
            }
            Ok(_) | Err(_) => break,
        }
    }
    let _ = std::fs::remove_dir_all(&g.dir);
}
