//! The Runtime Supervisor (spec 3.1, 3.3, 3.7): started by HC through the
//! broker, it unshares its user namespace and waits for HC's verified maps,
//! creates the enforcement network namespace (IPv6 off), acquires the
//! routing daemon of a routed Domain (spec 3.5, [`super::git_routing`]) and
//! the connectivity helper (slirp4netns) through its broker, enters the
//! namespace with a new mount namespace, installs and observes the derived
//! policy (`enforcement`), waits for HC's MarkNetworkReady, writes the
//! bundle and launches the non-detached `runsc run --network=sandbox`
//! (attached runsc) through the same broker, staging each child through
//! HC's exact acknowledgement.
//!
//! Lifetime: the container's PID 1 (the static `lazaret-init`) reads its
//! stdin, a pipe whose only write end RS holds. Closing it — on HC's `Stop`,
//! on HC loss (EOF on the lifetime channel) or when RS dies — makes init exit,
//! and `runsc run` then deletes the container and its state itself.
use super::channel::{self, ChannelError};
use super::enforcement::{self, EnforcementError};
use super::git_routing::{self, RoutingPlan, SentryPlan};
use super::nsys::NamespaceSys;
use super::paths::{MAILBOX, SANDBOX_CREDENTIALS};
use crate::broker::ledger::StagingContext;
use crate::broker::remote::{CoordinatorLink, LinkError, RemoteLedger};
use crate::broker::sys::TargetCommand;
use crate::broker::{Broker, BrokerError, ChildPipes, CommittedChild, ReadinessError};
use crate::confined::{ConfinedSys, FileKind, RealSys};
use crate::crash_point::{crash_point, fault};
use crate::git_sentry::filter::FilterError;
use crate::git_sentry::EditorDirs;
use crate::git_sentry::{self, GitSentryError};
use crate::network::authority::{AuthoritySys, RealAuthority};
use crate::network::canary::{self, CanaryError, CanaryNetwork, InitPipes, RealCanary};
use crate::network::nft::RealNft;
use crate::network::policy_fd::{read_sealed_policy, PolicyFdError};
use crate::network::rtnl::NetlinkRoutes;
use crate::process_identity::real::RealProcessSys;
use crate::process_identity::{ChildState, ProcessHandle, Signal};
use crate::state_anchor::destinations::{self, DestinationError};
use crate::state_anchor::{self, real::RealAnchorSys, AnchorError, AnchorSys, MOUNT_POINTS_DIR};
use crate::workspace_owner::{self, RealOwnerSys};
use lazaret_runtime::bundle::{
    build_spec, worktree_git_file, BundleError, BundlePlan, BundleVolume, GitSentry, INIT_DIR,
};
use lazaret_runtime::coordinator::messages::{
    AnchorPlan, CoordinatorCommand, ObjectId, SupervisorMessage, SupervisorPlan, VolumePlan,
    VolumeSourceKind,
};
use lazaret_runtime::records::ids::{CoordinatorId, DomainId, GenerationId};
use lazaret_runtime::records::participant::{AnchorMounts, NamespaceIdentity};
use lazaret_runtime::records::process::{HostProcessOwnershipSlot, StagedProcessOwnership};
use sha2::Digest as _;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The static init's file name, in its own directory on both sides.
pub const INIT_NAME: &str = "lazaret-init";
/// The static network probe's file name, next to the init (spec 3.7,
/// `lazaret doctor --network`).
pub const PROBE_NAME: &str = "lazaret-probe";
/// The static Escalation Client's file name, next to the init (spec 3.8):
/// `/.lazaret/sbin/lazaret-escalate` inside.
pub const ESCALATE_NAME: &str = "lazaret-escalate";
/// How long the sandbox may take to reach `running`.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `runsc run` gets to stop the sandbox itself after init's stdin
/// closes; then it is killed (spec README "Resource bounds": a Domain full
/// of tasks tears down within seconds). An idle sandbox stops well within
/// it; with a thousand guest tasks gVisor's own stop took longer than the
/// kill path (measured: SIGKILL of the sandbox, 2.2-3.9 s to nothing left).
const GRACEFUL_STOP: Duration = Duration::from_secs(2);
/// How long `runsc run` may take to exit after SIGKILL (the attached
/// sandbox dies with it).
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("lifetime channel: {0}")]
    Channel(#[from] ChannelError),
    #[error("HC sent {got} where {expected} was expected")]
    Protocol { expected: &'static str, got: String },
    #[error("HC refused: {0}")]
    Refused(String),
    #[error("the coordinator link: {0}")]
    Link(#[from] LinkError),
    #[error("{step} failed: {source}")]
    Kernel {
        step: &'static str,
        source: io::Error,
    },
    #[error("Git Sentry: the workspace's repository layout: {0}")]
    GitSentryLayout(#[source] GitSentryError),
    #[error("Git Sentry: mounting the filter: {0}")]
    GitSentryFilter(#[source] FilterError),
    #[error("Git Sentry: the editor configuration directories: {0}")]
    EditorDirs(#[source] GitSentryError),
    #[error("opening the Domain's Ignored Workspace State {}: {source}", .path.display())]
    IgnoredState { path: PathBuf, source: io::Error },
    #[error("acquiring the routing daemon of the ignored-path router: {0}")]
    GitRouting(#[source] BrokerError),
    #[error("the ignored-path router did not start: {0}")]
    GitRoutingNotReady(#[source] BrokerError),
    #[error("the ignored-path router's mount at {}: {source}", .path.display())]
    GitRoutingMount { path: PathBuf, source: io::Error },
    #[error("{path}: the workspace is no longer the directory the configuration loaded (now {found}); expected the same directory at the handoff to runsc")]
    WorkspaceChanged { path: PathBuf, found: String },
    #[error("{path}: the source of the volume at {container} is no longer the object the configuration loaded (now {found}); expected the same object at the handoff to runsc")]
    VolumeChanged {
        container: String,
        path: PathBuf,
        found: String,
    },
    #[error("the volume at {container} lies beneath no State Anchor of the plan; a volume must be strictly beneath a persistent path")]
    VolumeOutsideAnchors { container: String },
    #[error("bundle: {0}")]
    Bundle(#[source] BundleError),
    #[error("bundle: the init's mount: {0}")]
    InitMount(#[source] oci_spec::OciSpecError),
    #[error("bundle: config.json: {0}")]
    BundleJson(#[source] serde_json::Error),
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("launching runsc run: {0}")]
    Launch(#[from] BrokerError),
    #[error("the sandbox did not start: {source}: {stderr_tail}")]
    NotReady {
        source: BrokerError,
        /// The end of runsc's standard error.
        stderr_tail: String,
    },
    #[error("network policy transport: {0}")]
    Policy(#[from] PolicyFdError),
    #[error("network: {0}")]
    Enforcement(#[from] EnforcementError),
    #[error("acquiring the connectivity helper slirp4netns: {0}")]
    Helper(#[source] BrokerError),
    #[error("network attestation refused publication: {0}")]
    Canary(#[from] CanaryError),
    #[error("the enforcement namespace descriptor names namespace {held:?}, but the supervisor is in {current:?}; expected the same (SR-12)")]
    NamespaceDescriptor {
        held: NamespaceIdentity,
        current: NamespaceIdentity,
    },
    #[error("State Anchors: {0}")]
    Anchors(#[from] AnchorError),
    #[error("State Anchors: {0}")]
    Destinations(#[from] DestinationError),
    #[error(
        "the network helper slirp4netns ended ({status:?}); the sandbox was stopped, its network is gone"
    )]
    HelperLost {
        status: Result<ChildState, io::ErrorKind>,
    },
    #[error(
        "the routing daemon of the ignored-path router ended ({status:?}); the sandbox was stopped, its workspace is gone"
    )]
    GitRoutingLost {
        status: Result<ChildState, io::ErrorKind>,
    },
}

fn kernel(step: &'static str) -> impl FnOnce(io::Error) -> SupervisorError {
    move |source| SupervisorError::Kernel { step, source }
}

/// RS's side of the HC link, used by the broker's [`RemoteLedger`].
#[derive(Debug)]
struct ChannelLink<'a> {
    stream: &'a UnixStream,
    /// The slot RS is acquiring over this link, if any: its crash points
    /// are named after it (docs/crash-points.md).
    #[cfg(feature = "crash-points")]
    slot: Option<HostProcessOwnershipSlot>,
}

impl<'a> ChannelLink<'a> {
    fn new(stream: &'a UnixStream) -> Self {
        Self {
            stream,
            #[cfg(feature = "crash-points")]
            slot: None,
        }
    }

    /// The link of one RS-launched acquisition of `slot`.
    fn acquiring(stream: &'a UnixStream, slot: HostProcessOwnershipSlot) -> Self {
        #[cfg(not(feature = "crash-points"))]
        let _ = slot;
        Self {
            stream,
            #[cfg(feature = "crash-points")]
            slot: Some(slot),
        }
    }

    /// A crash point's step: `phase`, with the slot being acquired.
    #[cfg(feature = "crash-points")]
    fn step(&self, phase: &str) -> String {
        match self.slot {
            Some(slot) => format!("{phase}-{slot:?}"),
            None => phase.to_owned(),
        }
    }

    fn send(&mut self, message: &SupervisorMessage) -> Result<(), LinkError> {
        let mut s = self.stream;
        channel::send(&mut s, "supervisor", message).map_err(|e| LinkError::Channel(Box::new(e)))
    }
    fn receive(&mut self) -> Result<CoordinatorCommand, LinkError> {
        let mut s = self.stream;
        channel::receive(&mut s, "supervisor").map_err(|e| LinkError::Channel(Box::new(e)))
    }
}

/// HC's answer that is neither the expected one nor a refusal.
fn unexpected(expected: &'static str, got: &CoordinatorCommand) -> LinkError {
    LinkError::Unexpected {
        expected,
        got: format!("{got:?}"),
    }
}

impl CoordinatorLink for ChannelLink<'_> {
    fn confirm_intent(&mut self, context: &StagingContext) -> Result<(), LinkError> {
        self.send(&SupervisorMessage::ConfirmIntent(context.slot))?;
        crash_point!(Rs, self.step("intent"), "before-ack", "ConfirmIntent");
        match self.receive()? {
            CoordinatorCommand::IntentConfirmed => {
                crash_point!(Rs, self.step("intent"), "after-ack", "IntentConfirmed");
                Ok(())
            }
            CoordinatorCommand::Refused(why) => Err(LinkError::Refused(why)),
            other => Err(unexpected("IntentConfirmed", &other)),
        }
    }
    fn send_staged(&mut self, message: &[u8]) -> Result<(), LinkError> {
        self.send(&SupervisorMessage::Staged(message.to_vec()))
    }
    fn receive_ack(&mut self) -> Result<Option<Vec<u8>>, LinkError> {
        crash_point!(Rs, self.step("staged"), "before-ack", "Staged");
        match self.receive()? {
            CoordinatorCommand::Ack(bytes) => {
                crash_point!(Rs, self.step("staged"), "after-ack", "Ack");
                Ok(Some(bytes))
            }
            CoordinatorCommand::Refused(why) => Err(LinkError::Refused(why)),
            other => Err(unexpected("Ack", &other)),
        }
    }
    fn report_committed(&mut self, staged: &StagedProcessOwnership) -> Result<(), LinkError> {
        let bytes = staged.encode()?;
        self.send(&SupervisorMessage::Committed(bytes))?;
        crash_point!(Rs, self.step("committed"), "before-ack", "Committed");
        match self.receive()? {
            CoordinatorCommand::IntentConfirmed => {
                crash_point!(Rs, self.step("committed"), "after-ack", "IntentConfirmed");
                Ok(())
            }
            CoordinatorCommand::Refused(why) => Err(LinkError::Refused(why)),
            other => Err(unexpected("IntentConfirmed", &other)),
        }
    }
}

/// The generation's mount namespace, the supervisor's own and made
/// private, in which the State Anchors, the Git Sentry filter and runsc
/// live (and end with it). Runs as root of the verified user namespace,
/// which owns the new namespace: that is what lets it mount overlayfs.
pub fn own_mount_namespace<N: NamespaceSys>(ns: &N) -> Result<(), SupervisorError> {
    ns.unshare_mount().map_err(kernel("unshare(CLONE_NEWNS)"))?;
    ns.make_mounts_private()
        .map_err(kernel("making / recursively private"))?;
    Ok(())
}

/// Spec 3.6 step 4, RS's part: once HC's `RecordIntent(StateAnchor)` is
/// durable (its `MountStateAnchors`), every anchor of the plan is mounted
/// in this mount namespace and reported with its identity.
fn mount_state_anchors(
    plan: &SupervisorPlan,
    stream: &UnixStream,
) -> Result<AnchorMounts, SupervisorError> {
    let mut link = ChannelLink::new(stream);
    match link.receive()? {
        CoordinatorCommand::MountStateAnchors => {}
        CoordinatorCommand::Refused(why) => return Err(SupervisorError::Refused(why)),
        other => {
            return Err(SupervisorError::Protocol {
                expected: "MountStateAnchors",
                got: format!("{other:?}"),
            })
        }
    }
    let dir = PathBuf::from(&plan.generation_dir).join(MOUNT_POINTS_DIR);
    std::fs::create_dir_all(&dir).map_err(|source| SupervisorError::Write {
        path: dir.clone(),
        source,
    })?;
    let mounts = state_anchor::mount_anchors(&RealAnchorSys, &plan.state_anchors)?;
    if let Err(e) = restore_product_destinations(plan).and_then(|()| make_volume_mount_points(plan))
    {
        release_state_anchors(plan, &mounts);
        return Err(e);
    }
    crash_point!(Rs, "anchors", "before-report", "StateAnchorsMounted");
    if let Err(e) = link.send(&SupervisorMessage::StateAnchorsMounted(mounts.clone())) {
        release_state_anchors(plan, &mounts);
        return Err(e.into());
    }
    Ok(mounts)
}

/// The product's mount destinations beneath each anchor (the resolver
/// configuration and network directory beneath `/etc`) are put back as the
/// file or directory they must be before runsc sees them: what the agent
/// left there (a symlink, another kind) would make runsc follow it or
/// create the destination in the shared prepared lower.
fn restore_product_destinations(plan: &SupervisorPlan) -> Result<(), SupervisorError> {
    for anchor in &plan.state_anchors {
        let wanted = destinations::beneath(&anchor.path);
        if wanted.is_empty() {
            continue;
        }
        let restored = destinations::restore_destinations(Path::new(&anchor.mountpoint), &wanted)?;
        for path in restored {
            tracing::warn!(
                anchor = %anchor.path,
                path = %path.display(),
                "a protected mount destination in the State Anchor was put back"
            );
        }
    }
    Ok(())
}

/// The State Anchor a volume lies in and the volume's path relative to it
/// (schemas "volume": strictly beneath exactly one persistent path).
fn volume_anchor<'p>(
    plan: &'p SupervisorPlan,
    volume: &VolumePlan,
) -> Result<(&'p AnchorPlan, PathBuf), SupervisorError> {
    plan.state_anchors
        .iter()
        .find_map(|a| {
            let rel = Path::new(&volume.container).strip_prefix(&a.path).ok()?;
            (!rel.as_os_str().is_empty()).then(|| (a, rel.to_owned()))
        })
        .ok_or_else(|| SupervisorError::VolumeOutsideAnchors {
            container: volume.container.clone(),
        })
}

/// Each volume's mount point is made in its anchor when missing, so runsc
/// neither creates it nor follows what the agent left there; an entry of
/// the wrong kind refuses the launch and stays.
fn make_volume_mount_points(plan: &SupervisorPlan) -> Result<(), SupervisorError> {
    for volume in &plan.volumes {
        let (anchor, relative) = volume_anchor(plan, volume)?;
        let kind = match volume.kind {
            VolumeSourceKind::File => destinations::Destination::File,
            VolumeSourceKind::Directory => destinations::Destination::Directory,
        };
        if destinations::make_volume_mount_point(Path::new(&anchor.mountpoint), &relative, kind)? {
            tracing::info!(volume = %volume.container, "made the volume's mount point in its State Anchor");
        }
    }
    Ok(())
}

/// Spec 3.6 release step 2, RS's part (and the lease-loss teardown's):
/// the exact anchors are unmounted once runsc has exited, then their mount
/// points go with `rmdir`, which refuses a mount point still in use, so
/// nothing is ever removed through an anchor. A failure is logged: the
/// mounts live only in this mount namespace, which ends with the
/// supervisor, and HC proves them gone independently.
fn release_state_anchors(plan: &SupervisorPlan, mounts: &AnchorMounts) {
    if let Err(e) = state_anchor::unmount_anchors(&RealAnchorSys, mounts) {
        tracing::warn!(error = %e, "unmounting the State Anchors");
    }
    let generation = PathBuf::from(&plan.generation_dir);
    let points = plan
        .state_anchors
        .iter()
        .map(|a| PathBuf::from(&a.mountpoint));
    for dir in points.chain([generation.join(MOUNT_POINTS_DIR)]) {
        match std::fs::remove_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(error = %e, path = %dir.display(), "removing a State Anchor directory")
            }
        }
    }
    // Empty once the sandbox's teardown removed its files; a launch that
    // failed before the sandbox leaves them to HC, which removes the rest.
    let _ = std::fs::remove_dir(&generation);
}

/// Removes the generation directory's files (bundle, runsc state, network
/// files, binaries) but not its anchors directory, whose mount points may
/// still carry the Domain's State Anchors: a recursive removal there would
/// delete the agent's persistent state through the overlay.
/// [`release_state_anchors`] removes the rest with `rmdir` only. The mount
/// points of the router and the Git Sentry filter likewise go by `rmdir`
/// only: should either still be mounted, a recursive removal would delete
/// the workspace or its git directory through it (the Host Coordinator
/// removes what is left, outside this mount namespace).
fn remove_generation_files(generation: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(generation)? {
        let entry = entry?;
        if entry.file_name() == MOUNT_POINTS_DIR {
            continue;
        }
        if entry.file_name() == ROUTER_DIR || entry.file_name() == GIT_SENTRY_DIR {
            if let Err(e) = std::fs::remove_dir(entry.path()) {
                tracing::warn!(error = %e, path = %entry.path().display(), "a mount point left for the coordinator");
            }
            continue;
        }
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// How RS serves the workspace to the bundle: the Git Sentry's plan and
/// filter mount, the ignored-path router's mount, and the editor
/// directories covered by a tmpfs.
#[derive(Debug)]
pub struct WorkspaceServing {
    pub git: GitSentry,
    pub git_filter: Option<PathBuf>,
    pub router: Option<PathBuf>,
    pub editor_dirs: Vec<PathBuf>,
}

/// Builds `config.json`: launch's bundle plan (SR-3/SR-4/SR-12, Git Sentry)
/// plus the read-only bind of the init's directory at
/// [`lazaret_runtime::bundle::INIT_DIR`], a mount point the preparer created,
/// so runsc never writes into the prepared lower.
/// Returns the SHA-256 of the `config.json` written.
pub fn write_bundle(
    plan: &SupervisorPlan,
    served: WorkspaceServing,
    bundle: &Path,
    netns: &Path,
    network_files: &Path,
) -> Result<[u8; 32], SupervisorError> {
    let WorkspaceServing {
        git,
        git_filter,
        router,
        editor_dirs,
    } = served;
    let workspace = PathBuf::from(&plan.workspace);
    // A linked worktree's `.git` file is covered by a Lazaret-owned file
    // naming the worktree's git directory under the common-dir mount.
    let git_file = match &git {
        GitSentry::LinkedWorktree { worktree_dir, .. } => {
            let path = bundle.join("dot-git");
            std::fs::create_dir_all(bundle)
                .and_then(|()| std::fs::write(&path, worktree_git_file(worktree_dir)))
                .map_err(|source| SupervisorError::Write {
                    path: path.clone(),
                    source,
                })?;
            Some(path)
        }
        GitSentry::NoRepository | GitSentry::Repository { .. } => None,
    };
    let bundle_plan = BundlePlan {
        rootfs: PathBuf::from(&plan.rootfs),
        workspace: workspace.clone(),
        router,
        netns: netns.to_owned(),
        args: vec![format!("{INIT_DIR}/{INIT_NAME}")],
        env: plan.env.clone(),
        hostname: plan.hostname.clone(),
        git,
        editor_dirs,
        git_file,
        git_filter,
        network_files: network_files.to_owned(),
        credentials: PathBuf::from(&plan.generation_dir).join(SANDBOX_CREDENTIALS),
        mailbox: plan
            .escalation
            .then(|| PathBuf::from(&plan.generation_dir).join(MAILBOX)),
        state_anchors: plan
            .state_anchors
            .iter()
            .map(|a| (PathBuf::from(&a.path), PathBuf::from(&a.mountpoint)))
            .collect(),
        volumes: plan
            .volumes
            .iter()
            .map(|v| BundleVolume {
                container: PathBuf::from(&v.container),
                host: PathBuf::from(&v.host),
                read_only: v.read_only,
            })
            .collect(),
    };
    let mut spec = build_spec(&bundle_plan).map_err(SupervisorError::Bundle)?;
    let init = oci_spec::runtime::MountBuilder::default()
        .destination(INIT_DIR)
        .typ("bind")
        .source(&plan.init)
        .options(vec![
            "rbind".to_owned(),
            "ro".to_owned(),
            "nosuid".to_owned(),
            "nodev".to_owned(),
        ])
        .build()
        .map_err(SupervisorError::InitMount)?;
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    mounts.push(init);
    spec.set_mounts(Some(mounts));
    let text = serde_json::to_vec_pretty(&spec).map_err(SupervisorError::BundleJson)?;
    let path = bundle.join("config.json");
    std::fs::create_dir_all(bundle)
        .and_then(|()| std::fs::write(&path, &text))
        .map_err(|source| SupervisorError::Write { path, source })?;
    Ok(sha2::Sha256::digest(&text).into())
}

/// The `--dcache` for `runtime.runsc_dcache` (spec 3.2) under this
/// process's descriptor budget (the hard `RLIMIT_NOFILE` runsc inherits):
/// [`lazaret_runtime::config::effective_dcache`].
pub fn runsc_dcache(configured: u32) -> u32 {
    let budget = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .unwrap_or(u64::MAX);
    let dcache = lazaret_runtime::config::effective_dcache(configured, budget);
    if dcache < configured {
        tracing::info!(
            configured,
            dcache,
            budget,
            "runtime.runsc_dcache lowered to its share of the descriptor budget"
        );
    }
    dcache
}

/// The runsc global flags of this generation (shared by run and exec).
/// `dcache` is the effective `runtime.runsc_dcache` ([`runsc_dcache`]):
/// the global gofer-client dentry cache's zero-reference entries, 0
/// included (0 disables retention). runsc keeps its descriptor budget: the
/// inherited soft `RLIMIT_NOFILE`, which the supervisor raises to the hard
/// limit.
pub fn runsc_globals(runsc_root: &Path, dcache: u32) -> Vec<String> {
    vec![
        format!("--root={}", runsc_root.display()),
        "--ignore-cgroups".to_owned(),
        // Spec 3.7: the sandbox's only network is the enforcement namespace
        // the bundle names (SR-12), imported by runsc.
        "--network=sandbox".to_owned(),
        format!("--dcache={dcache}"),
        // A transient rootfs overlay over the read-only prepared lower for
        // what lies outside the State Anchors (`root:self` would write its
        // filestore into the shared prepared lower). Its filestore lives on
        // the supervisor's size-limited tmpfs (`bound_resources`): a write
        // past it fails with ENOSPC inside instead of taking host memory.
        format!(
            "--overlay2=root:dir={}",
            rootfs_writes(runsc_root).display()
        ),
    ]
}

/// Where the rootfs overlay's filestore lives: a tmpfs of
/// [`ROOTFS_WRITES_MAX_BYTES`] in the supervisor's mount namespace, next to
/// the runsc state of the generation.
fn rootfs_writes(runsc_root: &Path) -> PathBuf {
    runsc_root
        .parent()
        .unwrap_or(runsc_root)
        .join("rootfs-writes")
}

/// What the sandbox's root file system may take of host memory for what
/// the agent writes outside `/workspace` and `/tmp` (spec README "Resource
/// bounds").
pub const ROOTFS_WRITES_MAX_BYTES: u64 = 1 << 30;
/// The host task backstop: `RLIMIT_NPROC` of the supervisor, in its own
/// user namespace, inherited by runsc. Under systrap each guest process is
/// two host tasks (stub and stub thread) besides the sentry's own threads;
/// the guest ceiling (`GUEST_TASKS_MAX`, per guest user) keeps an ordinary
/// fork bomb near 2,400 host tasks. A bomb spread over many guest users
/// (the sandbox has CAP_SETUID) meets this limit instead, and the sentry
/// then ends the whole sandbox: no guest error, but the host is safe.
pub const HOST_TASKS_MAX: u64 = 4096;

/// Spec README "Resource bounds": the host task backstop, and the bounded
/// tmpfs that holds the rootfs overlay's writes.
fn bound_resources<N: NamespaceSys>(ns: &N, runsc_root: &Path) -> Result<(), SupervisorError> {
    let writes = rootfs_writes(runsc_root);
    std::fs::create_dir_all(&writes).map_err(|source| SupervisorError::Write {
        path: writes.clone(),
        source,
    })?;
    ns.mount_tmpfs(&writes, ROOTFS_WRITES_MAX_BYTES)
        .map_err(kernel("mounting the rootfs writes tmpfs"))?;
    ns.limit_tasks(HOST_TASKS_MAX)
        .map_err(kernel("setting the host task limit (RLIMIT_NPROC)"))
}

fn wait_exit(handle: &ProcessHandle, timeout: Duration) -> io::Result<Option<ChildState>> {
    let deadline = Instant::now() + timeout;
    loop {
        match handle.poll(&RealProcessSys)? {
            ChildState::Running => {}
            exited => return Ok(Some(exited)),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let ms = i64::try_from(left.as_millis().min(100)).unwrap_or(100);
        let ts = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: ms * 1_000_000,
        };
        let mut fds = [rustix::event::PollFd::new(
            handle.pidfd(),
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Gives the entries of the workspace and of each read-write directory
/// volume, and each read-write file volume itself, back to namespace 0:0,
/// the developer.
fn restore_owners(owned: &[(OwnedFd, VolumeSourceKind)]) {
    for (fd, kind) in owned {
        match kind {
            VolumeSourceKind::Directory => restore_workspace_owner(fd),
            VolumeSourceKind::File => restore_file_owner(fd),
        }
    }
}

/// A read-write file volume the sandbox re-owned goes back to 0:0 (the
/// kernel clears its set-ID bits with the `chown`). A failure is logged.
fn restore_file_owner(file: &OwnedFd) {
    let restored = rustix::fs::statat(file, "", rustix::fs::AtFlags::EMPTY_PATH).and_then(|st| {
        if (st.st_uid, st.st_gid) == (0, 0) {
            return Ok(());
        }
        rustix::fs::chownat(
            file,
            "",
            Some(rustix::fs::Uid::ROOT),
            Some(rustix::fs::Gid::ROOT),
            rustix::fs::AtFlags::EMPTY_PATH,
        )
    });
    if let Err(e) = restored {
        tracing::warn!(error = %e, "file volume ownership not restored");
    }
}

/// Gives a directory's entries back to namespace 0:0, the developer
/// (`crate::workspace_owner`). A failure to read the directory is logged:
/// the restore does what it can and never stops a teardown.
fn restore_workspace_owner(workspace: &OwnedFd) {
    let opened = rustix::fs::openat(
        workspace,
        ".",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    );
    let result = opened
        .map_err(|e| workspace_owner::OwnerError::Root(e.into()))
        .and_then(|dir| workspace_owner::restore_owner(&RealOwnerSys, dir.as_fd(), (0, 0)));
    if let Err(e) = result {
        tracing::warn!(error = %e, "workspace ownership not restored");
    }
}

/// Unmounts an unrouted Domain's Git Sentry filter once runsc has exited.
/// A failure leaves nothing behind: the mount lives only in this process's
/// mount namespace, which ends with it.
fn unmount_filter(filter: Option<git_sentry::filter::MountedFilter>) {
    if let Some(f) = filter {
        let at = f.mountpoint().to_owned();
        if let Err(e) = f.unmount() {
            tracing::warn!(error = %e, path = %at.display(), "unmounting the Git Sentry filter");
        }
    }
}

fn sandbox_running(state_file: &Path) -> bool {
    std::fs::read_to_string(state_file).is_ok_and(|t| t.contains("\"status\":\"running\""))
}

/// Arms RS's parent-death signal (spec 3.1) as SIGTERM,
/// delivered to a socket the serving loop polls. The broker wrapper armed
/// SIGKILL, which would kill RS before it could stop the sandbox; SIGTERM
/// lets RS take the same stop path as EOF on the lifetime channel. HC spawns
/// RS from its serving thread, which lives as long as HC, so the signal means
/// HC is gone. If HC died before the `prctl`, the channel's EOF still says so.
fn arm_parent_death<N: NamespaceSys>(ns: &N) -> Result<UnixStream, SupervisorError> {
    let (gone, notify) =
        UnixStream::pair().map_err(kernel("socketpair for the parent-death signal"))?;
    for s in [&gone, &notify] {
        s.set_nonblocking(true)
            .map_err(kernel("socketpair for the parent-death signal"))?;
    }
    signal_hook::low_level::pipe::register(signal_hook::consts::SIGTERM, notify)
        .map_err(kernel("installing the SIGTERM handler"))?;
    ns.parent_death_signal(Some(rustix::process::Signal::TERM))
        .map_err(kernel("prctl(PR_SET_PDEATHSIG, SIGTERM)"))?;
    Ok(gone)
}

/// Runs RS to completion on the lifetime channel `stream`.
pub fn run_supervisor<N: NamespaceSys>(
    ns: &N,
    stream: UnixStream,
    policy_fd: OwnedFd,
) -> Result<(), SupervisorError> {
    // HC loss: EOF on the lifetime channel, or the parent-death signal.
    let hc_gone = arm_parent_death(ns)?;
    let mut rx = &stream;
    let plan = match channel::receive::<CoordinatorCommand>(&mut rx, "supervisor")? {
        CoordinatorCommand::Plan(plan) => *plan,
        other => {
            return Err(SupervisorError::Protocol {
                expected: "Plan",
                got: format!("{other:?}"),
            })
        }
    };
    let mut link = ChannelLink::new(&stream);
    ns.unshare_user()
        .map_err(kernel("unshare(CLONE_NEWUSER)"))?;
    link.send(&SupervisorMessage::UserNamespace {
        pid: std::process::id(),
    })?;
    match link.receive()? {
        CoordinatorCommand::MapsVerified => {}
        CoordinatorCommand::Refused(why) => return Err(SupervisorError::Refused(why)),
        other => {
            return Err(SupervisorError::Protocol {
                expected: "MapsVerified",
                got: format!("{other:?}"),
            })
        }
    }
    let served = own_mount_namespace(ns)
        .and_then(|()| mount_state_anchors(&plan, &stream))
        .and_then(|anchors| {
            let served = launch_and_serve(ns, &plan, &stream, &hc_gone, policy_fd);
            release_state_anchors(&plan, &anchors);
            served
        });
    match served {
        Ok(()) => Ok(()),
        Err(e) => {
            let mut tx = &stream;
            let _ = channel::send(
                &mut tx,
                "supervisor",
                &SupervisorMessage::Failed(e.to_string()),
            );
            Err(e)
        }
    }
}

/// The handoff check of spec 3.2: the workspace path given to runsc must
/// still name the directory the Host Coordinator revalidated through its
/// confined plan (no symlink followed at the last component). Replacement
/// after this point is ordinary host concurrency.
fn check_workspace(
    sys: &dyn ConfinedSys,
    workspace: &Path,
    expected: ObjectId,
) -> Result<OwnedFd, SupervisorError> {
    check_handoff(sys, workspace, FileKind::Directory, expected).map_err(|found| {
        SupervisorError::WorkspaceChanged {
            path: workspace.to_owned(),
            found,
        }
    })
}

/// The same handoff check for each developer volume's source (spec 3.2,
/// schemas "volume"): the file or directory HC revalidated, reached
/// without following a symlink at its last component.
fn check_volumes(
    sys: &dyn ConfinedSys,
    volumes: &[VolumePlan],
) -> Result<Vec<OwnedFd>, SupervisorError> {
    volumes
        .iter()
        .map(|v| {
            let kind = match v.kind {
                VolumeSourceKind::File => FileKind::Regular,
                VolumeSourceKind::Directory => FileKind::Directory,
            };
            check_handoff(sys, Path::new(&v.host), kind, v.object).map_err(|found| {
                SupervisorError::VolumeChanged {
                    container: v.container.clone(),
                    path: PathBuf::from(&v.host),
                    found,
                }
            })
        })
        .collect()
}

/// Opens `path` without following its last component and returns it when
/// it is the `kind` object `expected`; otherwise what was found instead.
fn check_handoff(
    sys: &dyn ConfinedSys,
    path: &Path,
    kind: FileKind,
    expected: ObjectId,
) -> Result<OwnedFd, String> {
    let fd = sys.open_ambient(path, false).map_err(|e| e.to_string())?;
    let st = sys.stat(fd.as_fd()).map_err(|e| e.to_string())?;
    let found = ObjectId {
        dev_major: st.identity.dev_major,
        dev_minor: st.identity.dev_minor,
        ino: st.identity.ino,
    };
    if st.kind() != kind {
        return Err(st.kind().describe().to_owned());
    }
    if found != expected {
        return Err(format!(
            "device {}:{} inode {} instead of {}:{} inode {}",
            found.dev_major,
            found.dev_minor,
            found.ino,
            expected.dev_major,
            expected.dev_minor,
            expected.ino
        ));
    }
    Ok(fd)
}

/// The connectivity helper while the supervisor runs: its committed
/// ownership and the write end of its exit pipe.
struct Helper {
    child: CommittedChild,
    exit: OwnedFd,
}

impl Helper {
    /// Closes the exit pipe (slirp4netns then exits by itself) and reaps it;
    /// killed through its pidfd if it does not end in time.
    fn stop(self, broker: &Broker<RealProcessSys>) {
        let _span = tracing::info_span!("StopHelper").entered();
        drop(self.exit);
        end_child(broker, self.child.handle(), GRACEFUL_STOP);
    }
}

/// Gives a child whose end was already asked for (its pipe closed) `grace`
/// to exit, then kills it through its pidfd; reaped either way. Used where
/// nothing can be reported any more (failure and teardown paths).
fn end_child(broker: &Broker<RealProcessSys>, handle: &ProcessHandle, grace: Duration) {
    if !matches!(wait_exit(handle, grace), Ok(Some(_))) {
        let _ = broker.signal(handle, Signal::Kill);
        let _ = wait_exit(handle, STOP_TIMEOUT);
    }
}

/// A routed Domain's routing daemon while the supervisor runs: its
/// committed ownership, the write end of its exit pipe and where it
/// mounted the router and the Git Sentry filter.
struct RoutingDaemon {
    child: CommittedChild,
    exit: OwnedFd,
    router: PathBuf,
    filter: Option<PathBuf>,
}

impl RoutingDaemon {
    /// Closes the exit pipe (the daemon unmounts and exits), reaps it
    /// (killed through its pidfd if it does not end in time), then
    /// detaches whatever it left mounted (a daemon killed before it
    /// unmounted leaves its mounts without a server): nothing of the router
    /// outlives this, and no later removal of the generation directory can
    /// reach the workspace through it.
    fn stop<N: NamespaceSys>(self, ns: &N, broker: &Broker<RealProcessSys>) {
        let _span = tracing::info_span!("StopGitRouting").entered();
        drop(self.exit);
        end_child(broker, self.child.handle(), GRACEFUL_STOP);
        for at in self.filter.iter().chain([&self.router]) {
            match ns.unmount(at) {
                // Not a mount point: the daemon unmounted it.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {}
                Err(e) => {
                    tracing::warn!(error = %e, path = %at.display(), "detaching a mount of the routing daemon")
                }
                Ok(()) => {
                    tracing::warn!(path = %at.display(), "the routing daemon left a mount; detached")
                }
            }
        }
    }
}

/// The long-lived children RS acquired before the sandbox: the routing
/// daemon (routed Domains) and the connectivity helper. Their loss ends
/// the sandbox ([`serve`]).
struct Children {
    routing: Option<RoutingDaemon>,
    helper: Helper,
}

impl Children {
    /// Stops the routing daemon, once runsc has exited.
    fn stop_routing<N: NamespaceSys>(&mut self, ns: &N, broker: &Broker<RealProcessSys>) {
        if let Some(daemon) = self.routing.take() {
            daemon.stop(ns, broker);
        }
    }
}

/// Spec 3.5: acquires the routing daemon through this process's broker
/// (slot GitRoutingDaemon, staged through HC), committed once it reported
/// the router and the filter mounted; then reports the router's mount for
/// `CommitParticipant(GitRouting)`. The daemon is this binary, run in
/// this mount namespace.
fn acquire_git_routing<N: NamespaceSys>(
    ns: &N,
    broker: &mut Broker<RealProcessSys>,
    plan: &SupervisorPlan,
    stream: &UnixStream,
    routing: RoutingPlan,
) -> Result<RoutingDaemon, SupervisorError> {
    let _span = tracing::info_span!("AcquireGitRouting").entered();
    let dirs = std::iter::once(&routing.router_at).chain(routing.sentry.iter().map(|s| &s.at));
    for dir in dirs {
        std::fs::create_dir_all(dir).map_err(|source| SupervisorError::Write {
            path: dir.clone(),
            source,
        })?;
    }
    let program = std::env::current_exe().map_err(kernel("locating the lazaret binary"))?;
    let router = routing.router_at.clone();
    let filter = routing.sentry.as_ref().map(|s| s.at.clone());
    let acquired = acquire_ready_child(
        broker,
        plan,
        stream,
        HostProcessOwnershipSlot::GitRoutingDaemon,
        git_routing::DAEMON,
        git_routing::READY_TIMEOUT,
        |pipes| git_routing::daemon_command(&program, routing, pipes),
    );
    let daemon = match acquired {
        Ok((child, exit)) => RoutingDaemon {
            child,
            exit,
            router,
            filter,
        },
        Err(failure) => {
            // A daemon that died mid-mount leaves its mounts without a server.
            for at in filter.iter().chain([&router]) {
                let _ = ns.unmount(at);
            }
            return Err(match failure {
                ChildFailure::Pipes(e) => kernel("pipes for the routing daemon")(e),
                ChildFailure::Acquire(e) => SupervisorError::GitRouting(e),
                ChildFailure::NotReady(e) => SupervisorError::GitRoutingNotReady(e),
            });
        }
    };
    let reported = RealAnchorSys
        .mount_identity(&daemon.router)
        .map_err(|source| SupervisorError::GitRoutingMount {
            path: daemon.router.clone(),
            source,
        })
        .and_then(|mount| {
            crash_point!(Rs, "git-routing", "before-report", "GitRoutingMounted");
            let mut link = ChannelLink::new(stream);
            Ok(link.send(&SupervisorMessage::GitRoutingMounted(mount))?)
        });
    match reported {
        Ok(()) => Ok(daemon),
        Err(e) => {
            daemon.stop(ns, broker);
            Err(e)
        }
    }
}

/// Why a long-lived child of RS was not acquired.
enum ChildFailure {
    Pipes(io::Error),
    Acquire(BrokerError),
    NotReady(BrokerError),
}

/// Acquires RS's long-lived child `slot` (`what` in errors) through this
/// process's broker, staged through HC, the command `target` gives for its
/// pipes; committed once it wrote its readiness byte within `within`.
/// Returns it with the write end of its exit pipe. A child that is not
/// ready in time is ended (its exit pipe closed, then killed) and reaped.
#[allow(clippy::too_many_arguments)] // the acquisition's context, one each
fn acquire_ready_child(
    broker: &mut Broker<RealProcessSys>,
    plan: &SupervisorPlan,
    stream: &UnixStream,
    slot: HostProcessOwnershipSlot,
    what: &'static str,
    within: Duration,
    target: impl FnOnce(&ChildPipes) -> TargetCommand,
) -> Result<(CommittedChild, OwnedFd), ChildFailure> {
    let pipes = ChildPipes::new().map_err(ChildFailure::Pipes)?;
    let context = StagingContext {
        domain_id: DomainId(plan.domain_id),
        generation_id: GenerationId(plan.generation_id),
        coordinator_id: CoordinatorId(plan.coordinator_id),
        slot,
    };
    let mut ledger = RemoteLedger::new(ChannelLink::acquiring(stream, slot), context);
    let acquired = broker.acquire(&target(&pipes), &mut ledger);
    let ChildPipes {
        ready_read,
        ready_write,
        exit_read,
        exit_write,
    } = pipes;
    // Only the child keeps these ends: its readiness pipe reports EOF if
    // it dies, and nothing else can make it exit.
    drop((ready_write, exit_read));
    let child = acquired.map_err(ChildFailure::Acquire)?;
    let committed = broker.commit(child, &mut ledger, |sys, handle| {
        crate::broker::await_ready_byte(what, &ready_read, within, || {
            ReadinessError::running(what, handle.peek(sys))
        })
    });
    match committed {
        Ok(child) => Ok((child, exit_write)),
        Err(failure) => {
            drop(exit_write);
            end_child(broker, failure.child.handle(), GRACEFUL_STOP);
            Err(ChildFailure::NotReady(failure.error))
        }
    }
}

/// FR-16: acquires slirp4netns through this process's broker (slot
/// HelperConnectivityHelper, staged through HC) while this thread is still
/// in the host network namespace, attached to `netns`; committed once it
/// reported `tap0` configured.
fn acquire_helper(
    broker: &mut Broker<RealProcessSys>,
    plan: &SupervisorPlan,
    stream: &UnixStream,
    netns: &OwnedFd,
) -> Result<Helper, SupervisorError> {
    let _span = tracing::info_span!("AcquireHelper").entered();
    let acquired = acquire_ready_child(
        broker,
        plan,
        stream,
        HostProcessOwnershipSlot::HelperConnectivityHelper,
        enforcement::HELPER,
        enforcement::HELPER_READY_TIMEOUT,
        |pipes| enforcement::helper_command(netns, pipes),
    );
    match acquired {
        Ok((child, exit)) => Ok(Helper { child, exit }),
        Err(ChildFailure::Pipes(e)) => Err(kernel("pipes for the connectivity helper")(e)),
        Err(ChildFailure::Acquire(e)) => Err(SupervisorError::Helper(e)),
        Err(ChildFailure::NotReady(e)) => {
            Err(EnforcementError::HelperNotReady(e.to_string()).into())
        }
    }
}

/// The enforcement namespace's identity as this process sees it.
fn own_network_namespace() -> Result<NamespaceIdentity, SupervisorError> {
    let st = rustix::fs::stat("/proc/self/ns/net")
        .map_err(|e| kernel("stat /proc/self/ns/net")(e.into()))?;
    Ok(NamespaceIdentity {
        device: st.st_dev,
        inode: st.st_ino,
    })
}

/// Spec 3.7 up to MarkNetworkReady: the canary set up and proven live, the
/// derived policy, verified from its sealed descriptor, installed in the
/// enforcement namespace and observed exactly; HC then records readiness
/// and answers `NetworkReady`. The canary stays for the sandbox's own
/// view of it ([`CanaryNetwork::attest`]).
fn ready_network<N: NamespaceSys>(
    ns: &N,
    plan: &SupervisorPlan,
    stream: &UnixStream,
    netns: &OwnedFd,
    policy: &lazaret_runtime::config::DerivedNetworkPolicy,
) -> Result<CanaryNetwork, SupervisorError> {
    let _span = tracing::info_span!("MarkNetworkReady").entered();
    enforcement::enter(ns, netns)?;
    let canary = canary::set_up(&NetlinkRoutes, ns, &RealCanary, plan.generation_id)?;
    let projection = enforcement::install_policy(&NetlinkRoutes, &RealNft, policy)?;
    tracing::info!(
        routes = projection.ipv4_routes.len(),
        "the enforcement namespace shows the derived policy"
    );
    let mut link = ChannelLink::new(stream);
    link.send(&SupervisorMessage::NetworkInstalled {
        namespace: own_network_namespace()?,
        policy_digest: plan.policy_digest,
    })?;
    crash_point!(Rs, "network", "before-ack", "NetworkInstalled");
    match link.receive()? {
        CoordinatorCommand::NetworkReady => {}
        CoordinatorCommand::Refused(why) => return Err(SupervisorError::Refused(why)),
        other => {
            return Err(SupervisorError::Protocol {
                expected: "NetworkReady",
                got: format!("{other:?}"),
            })
        }
    }
    // A route tampered with after readiness, for the fault suite: only the
    // sandbox's own view can catch it.
    if fault!("drop-canary-route") {
        use crate::network::rtnl::RouteSys as _;
        let _ = NetlinkRoutes.delete_route(&lazaret_runtime::network::canary_route());
    }
    enforcement::hide_root_namespace_probe(ns)
        .map_err(kernel("mounting an empty /proc/sys/net/core for runsc"))?;
    Ok(canary)
}

fn launch_and_serve<N: NamespaceSys>(
    ns: &N,
    plan: &SupervisorPlan,
    stream: &UnixStream,
    hc_gone: &UnixStream,
    policy_fd: OwnedFd,
) -> Result<(), SupervisorError> {
    let _span = tracing::info_span!("LaunchSandbox", generation = plan.generation_id).entered();
    // Spec 3.7 "Policy transport": nothing is built before the policy's
    // seals and digest are verified.
    let policy = read_sealed_policy(policy_fd, &plan.policy_digest)?;
    let netns = enforcement::create_enforcement_namespace(ns)?;
    let program = std::env::current_exe().map_err(kernel("locating the lazaret binary"))?;
    let mut broker = Broker::claim(RealProcessSys, program)?;
    let generation = PathBuf::from(&plan.generation_dir);
    let prepared = prepare_workspace(plan, &generation)?;
    // The model's acquisition order: the router before the helper.
    let routing = match &plan.ignored_state {
        None => None,
        Some(isolated) => Some(acquire_git_routing(
            ns,
            &mut broker,
            plan,
            stream,
            routing_plan(&prepared, &generation, isolated),
        )?),
    };
    let helper = match acquire_helper(&mut broker, plan, stream, &netns) {
        Ok(helper) => helper,
        Err(e) => {
            if let Some(daemon) = routing {
                daemon.stop(ns, &broker);
            }
            return Err(e);
        }
    };
    let mut children = Children { routing, helper };
    let served = ready_network(ns, plan, stream, &netns, &policy).and_then(|canary| {
        let sandbox = SandboxInputs {
            netns: &netns,
            policy: &policy,
            canary,
        };
        run_sandbox(
            ns,
            plan,
            stream,
            hc_gone,
            &mut broker,
            &mut children,
            sandbox,
            prepared,
        )
    });
    children.stop_routing(ns, &broker);
    children.helper.stop(&broker);
    served
}

/// What the ready enforcement namespace hands the sandbox.
struct SandboxInputs<'a> {
    /// The enforcement namespace, as created and entered.
    netns: &'a OwnedFd,
    policy: &'a lazaret_runtime::config::DerivedNetworkPolicy,
    canary: CanaryNetwork,
}

/// SR-12: the path runsc joins the enforcement namespace by, through this
/// process's own descriptor of it (`/proc/PID/fd/N`), once that descriptor
/// is verified to be the namespace this process is in, the one it reported
/// and HC read independently. A path like `/proc/PID/ns/net` would name
/// whatever namespace the process is in when runsc opens it.
fn verified_namespace_path(netns: &OwnedFd) -> Result<PathBuf, SupervisorError> {
    let st = rustix::fs::fstat(netns)
        .map_err(|e| kernel("fstat of the enforcement namespace descriptor")(e.into()))?;
    let held = NamespaceIdentity {
        device: st.st_dev,
        inode: st.st_ino,
    };
    let current = own_network_namespace()?;
    if held != current {
        return Err(SupervisorError::NamespaceDescriptor { held, current });
    }
    Ok(PathBuf::from(format!(
        "/proc/{}/fd/{}",
        std::process::id(),
        netns.as_raw_fd()
    )))
}

/// Runs `work` on a thread that has first dropped CAP_NET_ADMIN (spec 3.7,
/// SR-5). Capabilities are per thread and copied when a thread is
/// created, so every thread `work` starts (the Git Sentry filter's request
/// threads, runsc's stderr reader) is without it too, whenever the
/// supervisor itself drops it.
fn without_network_administration<T: Send>(work: impl FnOnce() -> T + Send) -> io::Result<T> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .spawn_scoped(scope, || {
                RealAuthority.drop_network_administration()?;
                Ok(work())
            })?
            .join()
            .map_err(|_| io::Error::other("the thread without network administration panicked"))?
    })
}

/// The Git Sentry filter of an unrouted Domain, mounted without network
/// administration (its threads outlive the supervisor's drop). Mounting
/// needs only CAP_SYS_ADMIN in the Domain user namespace. (A routed
/// Domain's filter is its routing daemon's.)
fn mount_filter(
    common: &Path,
    at: &Path,
) -> Result<git_sentry::filter::MountedFilter, SupervisorError> {
    without_network_administration(|| git_sentry::filter::mount(common, at, None))
        .map_err(kernel(
            "dropping CAP_NET_ADMIN before the Git Sentry filter",
        ))?
        .map_err(SupervisorError::GitSentryFilter)
}

/// The workspace as RS prepared it before any child (spec 3.2 handoff,
/// SR-4, SR-13): checked to be the loaded directory, what the sandbox
/// re-owns listed for the restore, the Git Sentry's plan and the editor
/// directories made for this sandbox (held until RS exits: removed again,
/// when still empty, once it has stopped).
struct PreparedWorkspace {
    path: PathBuf,
    owned: Vec<(OwnedFd, VolumeSourceKind)>,
    marker: PathBuf,
    git: GitSentry,
    /// (common directory, the workspace's own git directory).
    git_dirs: Option<(PathBuf, PathBuf)>,
    editor_dirs: EditorDirs,
}

fn prepare_workspace(
    plan: &SupervisorPlan,
    generation: &Path,
) -> Result<PreparedWorkspace, SupervisorError> {
    let workspace = PathBuf::from(&plan.workspace);
    let workspace_fd = check_workspace(&RealSys, &workspace, plan.workspace_object)?;
    let volume_fds = check_volumes(&RealSys, &plan.volumes)?;
    // The Ignored Workspace State, when the router serves the workspace.
    let ignored_fd = match &plan.ignored_state {
        None => None,
        Some(dir) => Some(
            rustix::fs::open(
                dir.as_str(),
                rustix::fs::OFlags::PATH
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| SupervisorError::IgnoredState {
                path: PathBuf::from(dir),
                source: e.into(),
            })?,
        ),
    };
    // What the sandbox writes as another user is given back to the
    // developer: the workspace, its Ignored Workspace State and every
    // read-write volume.
    let owned: Vec<(OwnedFd, VolumeSourceKind)> =
        std::iter::once((workspace_fd, VolumeSourceKind::Directory))
            .chain(ignored_fd.map(|fd| (fd, VolumeSourceKind::Directory)))
            .chain(
                plan.volumes
                    .iter()
                    .zip(volume_fds)
                    .filter(|(v, _)| !v.read_only)
                    .map(|(v, fd)| (fd, v.kind)),
            )
            .collect();
    // A generation that did not finish its ownership restore (a crash, a
    // reboot) left the marker: restore before this sandbox starts.
    let marker = PathBuf::from(&plan.owner_restore_marker);
    if marker.exists() {
        restore_owners(&owned);
    }
    std::fs::write(&marker, b"").map_err(|source| SupervisorError::Write {
        path: marker.clone(),
        source,
    })?;
    let git = git_sentry::resolve(&workspace).map_err(SupervisorError::GitSentryLayout)?;
    let git_dirs = match &git {
        GitSentry::NoRepository => None,
        GitSentry::Repository { .. } => Some((workspace.join(".git"), workspace.join(".git"))),
        GitSentry::LinkedWorktree {
            common_dir,
            worktree_dir,
            ..
        } => Some((common_dir.clone(), common_dir.join(worktree_dir))),
    };
    let editor_dirs =
        git_sentry::editor_dirs(&workspace, &generation.join(git_sentry::EDITOR_RECORD))
            .map_err(SupervisorError::EditorDirs)?;
    Ok(PreparedWorkspace {
        path: workspace,
        owned,
        marker,
        git,
        git_dirs,
        editor_dirs,
    })
}

/// Where the Git Sentry filter is mounted in the generation directory.
const GIT_SENTRY_DIR: &str = "git-sentry";
/// Where the ignored-path router is mounted in the generation directory.
pub const ROUTER_DIR: &str = "router";

/// The routing daemon's plan for a routed Domain whose Ignored Workspace
/// State is `isolated` (spec 3.5): the router of the prepared workspace,
/// the Git Sentry filter of its repository under it.
fn routing_plan(workspace: &PreparedWorkspace, generation: &Path, isolated: &str) -> RoutingPlan {
    RoutingPlan {
        workspace: workspace.path.clone(),
        isolated: PathBuf::from(isolated),
        router_at: generation.join(ROUTER_DIR),
        sentry: workspace
            .git_dirs
            .as_ref()
            .map(|(common, git_dir)| SentryPlan {
                common: common.clone(),
                git_dir: git_dir.clone(),
                at: generation.join(GIT_SENTRY_DIR),
            }),
        editor_dirs: workspace.editor_dirs.names.clone(),
    }
}

/// From the enforcement namespace, ready, to the sandbox's end.
#[allow(clippy::too_many_arguments)] // each is one acquired resource of the launch
fn run_sandbox<N: NamespaceSys>(
    ns: &N,
    plan: &SupervisorPlan,
    stream: &UnixStream,
    hc_gone: &UnixStream,
    broker: &mut Broker<RealProcessSys>,
    children: &mut Children,
    sandbox: SandboxInputs<'_>,
    prepared: PreparedWorkspace,
) -> Result<(), SupervisorError> {
    let SandboxInputs {
        netns,
        policy,
        canary,
    } = sandbox;
    let PreparedWorkspace {
        path: _,
        owned,
        marker,
        git,
        git_dirs,
        editor_dirs,
    } = prepared;
    let generation = PathBuf::from(&plan.generation_dir);
    let bundle = generation.join("bundle");
    let runsc_root = generation.join("runsc");
    std::fs::create_dir_all(&runsc_root).map_err(|source| SupervisorError::Write {
        path: runsc_root.clone(),
        source,
    })?;
    bound_resources(ns, &runsc_root)?;
    let netns = verified_namespace_path(netns)?;
    // SR-4: the common git directory is served through the Git Sentry
    // filter — the routing daemon's in a routed Domain, this process's
    // otherwise — mounted in this private mount namespace before runsc
    // starts and kept until runsc has exited; the bundle binds it in place
    // of the host git directory. SR-13: a routed Domain's workspace is the
    // router's tree.
    let (filter, git_filter, router) = match &children.routing {
        Some(daemon) => (None, daemon.filter.clone(), Some(daemon.router.clone())),
        None => match git_dirs {
            None => (None, None, None),
            Some((common, _)) => {
                let at = generation.join(GIT_SENTRY_DIR);
                std::fs::create_dir_all(&at).map_err(|source| SupervisorError::Write {
                    path: at.clone(),
                    source,
                })?;
                let filter = mount_filter(&common, &at)?;
                (Some(filter), Some(at), None)
            }
        },
    };
    let network_files = generation.join("net");
    enforcement::write_network_files(&network_files, policy)?;
    let bundle_digest = write_bundle(
        plan,
        WorkspaceServing {
            git,
            git_filter,
            router,
            editor_dirs: editor_dirs.names.clone(),
        },
        &bundle,
        &netns,
        &network_files,
    )?;

    // init's stdin is the lifetime pipe, which also carries the attestation
    // requests; its stdout carries the reports; runsc's stderr is kept for
    // errors.
    let (init_r, init_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| kernel("pipe")(e.into()))?;
    let (report_r, report_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| kernel("pipe")(e.into()))?;
    // Queued before runsc starts: init takes the request up as it runs.
    let canary = canary.request(
        &mut InitPipes {
            request: init_w.as_fd(),
            report: report_r.as_fd(),
        },
        &RealCanary,
    )?;
    let (err_r, err_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| kernel("pipe")(e.into()))?;
    let null: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(kernel("open /dev/null"))?
        .into();
    // Stdio is inherited by the wrapper and then runsc: pipes only, never a
    // regular file (HOST-NOTES: runsc re-owns such files).
    ns.dup_onto_stdio(init_r.as_fd(), 0)
        .map_err(kernel("dup2 stdin"))?;
    ns.dup_onto_stdio(report_w.as_fd(), 1)
        .map_err(kernel("dup2 stdout"))?;
    ns.dup_onto_stdio(err_w.as_fd(), 2)
        .map_err(kernel("dup2 stderr"))?;
    drop((init_r, report_w, err_w));

    let context = StagingContext {
        domain_id: DomainId(plan.domain_id),
        generation_id: GenerationId(plan.generation_id),
        coordinator_id: CoordinatorId(plan.coordinator_id),
        slot: HostProcessOwnershipSlot::SandboxAttachedRunsc,
    };
    let mut ledger = RemoteLedger::new(ChannelLink::acquiring(stream, context.slot), context);
    let mut argv: Vec<std::ffi::OsString> = vec!["runsc".into()];
    argv.extend(
        runsc_globals(&runsc_root, runsc_dcache(plan.runsc_dcache))
            .into_iter()
            .map(Into::into),
    );
    argv.extend([
        "run".into(),
        "--bundle".into(),
        bundle.clone().into_os_string(),
        plan.container_id.clone().into(),
    ]);
    // runsc inherits only the standard descriptors set up above.
    let acquired = broker.acquire(
        &TargetCommand {
            argv,
            inherit: Vec::new(),
        },
        &mut ledger,
    );
    // RS keeps no copy of init's stdin read end, init's stdout write end or
    // runsc's stderr write end.
    ns.dup_onto_stdio(null.as_fd(), 0)
        .map_err(kernel("dup2 stdin"))?;
    ns.dup_onto_stdio(null.as_fd(), 1)
        .map_err(kernel("dup2 stdout"))?;
    ns.dup_onto_stdio(null.as_fd(), 2)
        .map_err(kernel("dup2 stderr"))?;
    // runsc's stderr, read by a thread that never holds network
    // administration (it outlives the supervisor's drop).
    let reader = without_network_administration(|| {
        std::thread::Builder::new().spawn(move || {
            let mut text = Vec::new();
            let _ = std::fs::File::from(err_r)
                .take(64 * 1024)
                .read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        })
    });
    let stderr_tail = match reader {
        Ok(Ok(thread)) => thread,
        Ok(Err(e)) | Err(e) => {
            drop(init_w);
            if let Ok(child) = &acquired {
                end_child(broker, child.handle(), STOP_TIMEOUT);
            }
            return Err(kernel("starting the reader of runsc's stderr")(e));
        }
    };
    let child = acquired?;
    let state_file = runsc_root.join(format!("{0}_sandbox:{0}.state", plan.container_id));
    let committed = broker.commit(child, &mut ledger, |sys, handle| {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if sandbox_running(&state_file) {
                return Ok(());
            }
            ReadinessError::running("runsc run", handle.peek(sys))?;
            if Instant::now() > deadline {
                return Err(ReadinessError::Timeout {
                    what: "runsc run",
                    within: READY_TIMEOUT,
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    let committed = match committed {
        Ok(c) => c,
        Err(failure) => {
            drop(init_w);
            end_child(broker, failure.child.handle(), STOP_TIMEOUT);
            let tail = stderr_tail.join().unwrap_or_default();
            unmount_filter(filter);
            children.stop_routing(ns, broker);
            restore_owners(&owned);
            let _ = std::fs::remove_file(&marker);
            drop(editor_dirs);
            let _ = ns.unmount(&rootfs_writes(&runsc_root));
            let _ = remove_generation_files(&generation);
            return Err(SupervisorError::NotReady {
                source: failure.error,
                stderr_tail: tail.trim().to_owned(),
            });
        }
    };
    let handle = committed.handle();
    // Spec 3.7: the sandbox's own view of the canary, the canary's exact
    // cleanup and the supervisor's authority drop come before the sandbox is
    // reported running, so a failed predicate refuses publication.
    let mut init = InitPipes {
        request: init_w.as_fd(),
        report: report_r.as_fd(),
    };
    let failure = match canary.attest(&NetlinkRoutes, &mut init, &RealCanary, &RealAuthority) {
        Err(refused) => {
            tracing::warn!(%refused, "network attestation refused");
            Some(SupervisorError::from(refused))
        }
        Ok(()) => {
            let mut tx = stream;
            channel::send(
                &mut tx,
                "supervisor",
                &SupervisorMessage::SandboxRunning {
                    container_id: plan.container_id.clone(),
                    runsc_root: runsc_root.display().to_string(),
                    bundle_digest,
                },
            )?;
            crash_point!(Rs, "running", "after-report", "SandboxRunning");
            serve(stream, handle, hc_gone, children)?
        }
    };
    let _span = tracing::info_span!("StopSandbox").entered();
    drop(init_w);
    let ended = wait_exit(handle, GRACEFUL_STOP).map_err(kernel("waiting for runsc run"))?;
    if ended.is_none() {
        broker
            .signal(handle, Signal::Kill)
            .map_err(kernel("SIGKILL runsc run"))?;
        wait_exit(handle, STOP_TIMEOUT).map_err(kernel("waiting for runsc run"))?;
    }
    let _ = stderr_tail.join();
    unmount_filter(filter);
    children.stop_routing(ns, broker);
    // The sandbox is gone: what it re-owned in the workspace and the
    // read-write volumes goes back to the developer, then the marker goes.
    restore_owners(&owned);
    std::fs::remove_file(&marker).map_err(|source| SupervisorError::Write {
        path: marker.clone(),
        source,
    })?;
    // The editor directories go before their record (in the generation
    // directory): a crash in between leaves the record to the successor.
    drop(editor_dirs);
    // The rootfs writes go with their tmpfs (the memory is freed here).
    ns.unmount(&rootfs_writes(&runsc_root))
        .map_err(kernel("unmounting the rootfs writes tmpfs"))?;
    remove_generation_files(&generation).map_err(|source| SupervisorError::Write {
        path: generation.clone(),
        source,
    })?;
    match failure {
        Some(failure) => Err(failure),
        None => Ok(()),
    }
}

/// Serves until Stop, HC loss (EOF or the parent-death signal), or the
/// sandbox ending on its own; the loss of a child the sandbox depends on
/// (the connectivity helper, the routing daemon) is returned, already told
/// to HC, for the caller to end with.
fn serve(
    stream: &UnixStream,
    handle: &ProcessHandle,
    hc_gone: &UnixStream,
    children: &Children,
) -> Result<Option<SupervisorError>, SupervisorError> {
    let mut rx = stream;
    let helper = children.helper.child.handle();
    let routing = children.routing.as_ref().map(|d| d.child.handle());
    loop {
        let mut fds = vec![
            rustix::event::PollFd::new(&rx, rustix::event::PollFlags::IN),
            rustix::event::PollFd::new(handle.pidfd(), rustix::event::PollFlags::IN),
            rustix::event::PollFd::new(hc_gone, rustix::event::PollFlags::IN),
            rustix::event::PollFd::new(helper.pidfd(), rustix::event::PollFlags::IN),
        ];
        if let Some(daemon) = routing {
            fds.push(rustix::event::PollFd::new(
                daemon.pidfd(),
                rustix::event::PollFlags::IN,
            ));
        }
        match rustix::event::poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(kernel("poll")(e.into())),
        }
        // Spec 3.7 helper loss: without slirp4netns the Domain fails closed.
        let lost = if !fds[3].revents().is_empty() {
            let status = helper.peek(&RealProcessSys);
            tracing::warn!(?status, "the connectivity helper slirp4netns ended");
            Some(SupervisorError::HelperLost {
                status: status.map_err(|e| e.kind()),
            })
        // Spec 3.5: without the router the sandbox has no workspace.
        } else if let (Some(daemon), Some(fd)) = (routing, fds.get(4)) {
            (!fd.revents().is_empty()).then(|| {
                let status = daemon.peek(&RealProcessSys);
                tracing::warn!(?status, "the routing daemon ended");
                SupervisorError::GitRoutingLost {
                    status: status.map_err(|e| e.kind()),
                }
            })
        } else {
            None
        };
        if let Some(lost) = lost {
            // Told before the sandbox stops, so every session's end
            // carries it.
            let mut tx = stream;
            let _ = channel::send(
                &mut tx,
                "supervisor",
                &SupervisorMessage::Failed(lost.to_string()),
            );
            return Ok(Some(lost));
        }
        if !fds[1].revents().is_empty() || !fds[2].revents().is_empty() {
            if !fds[2].revents().is_empty() {
                tracing::warn!("the Host Coordinator is gone (parent-death signal)");
            }
            return Ok(None);
        }
        if !fds[0].revents().is_empty() {
            match channel::receive::<CoordinatorCommand>(&mut rx, "supervisor") {
                Ok(CoordinatorCommand::Stop) | Err(_) => return Ok(None),
                Ok(other) => tracing::warn!(?other, "ignored coordinator command"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::nsys::RecordingNs;

    /// SR-12: runsc gets the supervisor's own descriptor of the namespace
    /// it is in; a descriptor of any other namespace is refused.
    #[test]
    fn runsc_joins_the_network_namespace_by_a_verified_descriptor() -> Result<(), SupervisorError> {
        let own: OwnedFd = std::fs::File::open("/proc/self/ns/net")
            .map_err(kernel("open /proc/self/ns/net"))?
            .into();
        let path = verified_namespace_path(&own)?;
        assert_eq!(
            path,
            PathBuf::from(format!(
                "/proc/{}/fd/{}",
                std::process::id(),
                own.as_raw_fd()
            ))
        );
        let joined = rustix::fs::stat(&path).map_err(|e| kernel("stat")(e.into()))?;
        assert_eq!(
            NamespaceIdentity {
                device: joined.st_dev,
                inode: joined.st_ino
            },
            own_network_namespace()?
        );
        let other = crate::coordinator::nsys::RealNs
            .create_network_namespace(&[])
            .map_err(kernel("a second network namespace"))?;
        assert!(matches!(
            verified_namespace_path(&other),
            Err(SupervisorError::NamespaceDescriptor { .. })
        ));
        Ok(())
    }

    fn object_id(path: &Path) -> ObjectId {
        let st = RealSys
            .open_ambient(path, false)
            .and_then(|fd| RealSys.stat(fd.as_fd()))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        ObjectId {
            dev_major: st.identity.dev_major,
            dev_minor: st.identity.dev_minor,
            ino: st.identity.ino,
        }
    }

    /// Spec 3.2 handoff: runsc gets the workspace path only while it names
    /// the directory the Host Coordinator revalidated.
    #[test]
    fn the_workspace_handed_to_runsc_must_be_the_loaded_directory() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).map_err(|e| e.to_string())?;
        let loaded = object_id(&ws);
        drop(check_workspace(&RealSys, &ws, loaded).map_err(|e| e.to_string())?);
        // Replaced by another directory of the same name.
        std::fs::rename(&ws, dir.path().join("old")).map_err(|e| e.to_string())?;
        std::fs::create_dir(&ws).map_err(|e| e.to_string())?;
        let m = check_workspace(&RealSys, &ws, loaded)
            .err()
            .ok_or("a replaced workspace was accepted")?
            .to_string();
        assert!(
            m.contains("no longer the directory") && m.contains("inode"),
            "{m}"
        );
        // A symlink to the loaded directory is not followed.
        std::fs::remove_dir(&ws).map_err(|e| e.to_string())?;
        std::os::unix::fs::symlink(dir.path().join("old"), &ws).map_err(|e| e.to_string())?;
        let m = check_workspace(&RealSys, &ws, loaded)
            .err()
            .ok_or("a symlink was followed")?
            .to_string();
        assert!(m.contains("symbolic link"), "{m}");
        // Gone.
        std::fs::remove_file(&ws).map_err(|e| e.to_string())?;
        assert!(check_workspace(&RealSys, &ws, loaded).is_err());
        Ok(())
    }

    /// Spec 3.2, schemas "volume": runsc gets a volume's source path only
    /// while it names the file or directory HC revalidated, with the kind
    /// declared; the error names the volume's sandbox path.
    #[test]
    fn a_volume_handed_to_runsc_must_be_the_loaded_source() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let token = dir.path().join("token");
        std::fs::write(&token, b"t").map_err(|e| e.to_string())?;
        let plan = |object| VolumePlan {
            container: "/root/token".to_owned(),
            host: token.display().to_string(),
            kind: VolumeSourceKind::File,
            read_only: true,
            object,
        };
        let loaded = object_id(&token);
        assert_eq!(
            check_volumes(&RealSys, &[plan(loaded)])
                .map_err(|e| e.to_string())?
                .len(),
            1
        );
        // A directory where the file volume was.
        let mut directory = plan(loaded);
        directory.kind = VolumeSourceKind::Directory;
        let m = check_volumes(&RealSys, &[directory])
            .err()
            .ok_or("a file passed as a directory")?
            .to_string();
        assert!(
            m.contains("/root/token") && m.contains("regular file"),
            "{m}"
        );
        // Replaced by another file, then by a symlink to the original.
        std::fs::rename(&token, dir.path().join("old")).map_err(|e| e.to_string())?;
        std::fs::write(&token, b"t").map_err(|e| e.to_string())?;
        let m = check_volumes(&RealSys, &[plan(loaded)])
            .err()
            .ok_or("a replaced file was accepted")?
            .to_string();
        assert!(
            m.contains("no longer the object") && m.contains("inode"),
            "{m}"
        );
        std::fs::remove_file(&token).map_err(|e| e.to_string())?;
        std::os::unix::fs::symlink(dir.path().join("old"), &token).map_err(|e| e.to_string())?;
        let m = check_volumes(&RealSys, &[plan(loaded)])
            .err()
            .ok_or("a symlink was followed")?
            .to_string();
        assert!(m.contains("symbolic link"), "{m}");
        Ok(())
    }

    /// Spec README "Resource bounds": the rootfs writes tmpfs is mounted
    /// with its size, then the host task backstop is set, before runsc (the
    /// globals point runsc's overlay filestore at that tmpfs).
    #[test]
    fn resource_bounds_come_before_runsc() -> Result<(), SupervisorError> {
        let dir = tempfile::tempdir().map_err(kernel("tempdir"))?;
        let runsc_root = dir.path().join("gen-1/runsc");
        let ns = RecordingNs::default();
        bound_resources(&ns, &runsc_root)?;
        let writes = dir.path().join("gen-1/rootfs-writes");
        assert!(writes.is_dir());
        assert_eq!(
            ns.calls(),
            vec![
                format!("mount_tmpfs {} {}", writes.display(), 1u64 << 30),
                "limit_tasks 4096".to_owned(),
            ]
        );
        let globals = runsc_globals(&runsc_root, 7);
        assert!(globals.contains(&format!("--overlay2=root:dir={}", writes.display())));
        assert!(globals.contains(&"--dcache=7".to_owned()));
        // A failed mount stops the launch with the step named.
        let failing = RecordingNs::failing("mount_tmpfs");
        let e = bound_resources(&failing, &runsc_root)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("rootfs writes tmpfs"), "{e}");
        Ok(())
    }

    /// A generation's teardown removes its files and directories but never
    /// enters the anchors' mount points: what lies beneath them (here a
    /// stand-in for an anchor's content) stays.
    #[test]
    fn the_generation_files_go_but_never_through_an_anchor_or_the_router(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let generation = dir.path().join("gen-3");
        std::fs::create_dir_all(generation.join("bundle/rootfs"))?;
        std::fs::create_dir_all(generation.join(MOUNT_POINTS_DIR).join("usr/local"))?;
        std::fs::write(generation.join("bundle/config.json"), b"{}")?;
        std::fs::write(generation.join("marker"), b"")?;
        let anchored = generation.join(MOUNT_POINTS_DIR).join("usr/local/tool");
        std::fs::write(&anchored, b"agent's")?;
        // A router mount point with content stands for one still mounted
        // (the workspace seen through it); the filter's is empty.
        std::fs::create_dir_all(generation.join(ROUTER_DIR))?;
        let routed = generation.join(ROUTER_DIR).join("a.txt");
        std::fs::write(&routed, b"host's")?;
        std::fs::create_dir_all(generation.join(GIT_SENTRY_DIR))?;
        remove_generation_files(&generation)?;
        let mut left: Vec<String> = std::fs::read_dir(&generation)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()?;
        left.sort();
        assert_eq!(left, [MOUNT_POINTS_DIR, ROUTER_DIR]);
        assert_eq!(std::fs::read(&anchored)?, b"agent's");
        assert_eq!(std::fs::read(&routed)?, b"host's");
        Ok(())
    }

    /// The supervisor's own mount namespace, made private before anything
    /// is mounted in it.
    #[test]
    fn the_supervisor_mounts_only_in_its_own_private_mount_namespace(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let ns = RecordingNs::default();
        own_mount_namespace(&ns)?;
        assert_eq!(
            ns.calls(),
            vec!["unshare_mount".to_owned(), "make_mounts_private".to_owned()]
        );
        let failing = RecordingNs::failing("unshare_mount");
        assert!(own_mount_namespace(&failing).is_err());
        assert_eq!(failing.calls(), vec!["unshare_mount".to_owned()]);
        Ok(())
    }

    /// RS arms SIGTERM as its parent-death signal, and the signal wakes the
    /// serving loop's poll (the same stop path as EOF on the channel).
    #[test]
    fn the_parent_death_signal_is_sigterm_and_wakes_the_serving_loop() -> Result<(), SupervisorError>
    {
        let ns = RecordingNs::default();
        let gone = arm_parent_death(&ns)?;
        assert_eq!(
            ns.calls(),
            vec![format!(
                "parent_death_signal {:?}",
                Some(rustix::process::Signal::TERM)
            )]
        );
        let mut fds = [rustix::event::PollFd::new(
            &gone,
            rustix::event::PollFlags::IN,
        )];
        let none = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        assert_eq!(rustix::event::poll(&mut fds, Some(&none)).ok(), Some(0));
        signal_hook::low_level::raise(signal_hook::consts::SIGTERM)
            .map_err(kernel("raise(SIGTERM)"))?;
        let five = rustix::event::Timespec {
            tv_sec: 5,
            tv_nsec: 0,
        };
        assert_eq!(rustix::event::poll(&mut fds, Some(&five)).ok(), Some(1));
        Ok(())
    }
}
