//! What a CLI asks of the Domain's coordinator, and HC <-> Runtime
//! Supervisor messages. The CLI <-> HC wire records are
//! [`super::control`]'s and `crate::terminal::protocol`'s.
use serde::{Deserialize, Serialize};

use crate::protocol::records::PublicKey;
use crate::records::ids::SessionId;
use crate::records::participant::{AnchorMounts, MountIdentity, NamespaceIdentity};
use crate::records::process::HostProcessOwnershipSlot;
use crate::terminal::protocol::{SessionExit, SessionExitOutcome};

/// One Client Session as its CLI asks for it and as the coordinator admits
/// it (carried by the opening frames, [`super::control::opening_requests`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRequest {
    /// DomainIdV1 the CLI resolved.
    pub domain_id: [u8; 32],
    /// ConfigurationFingerprintV1 the CLI resolved.
    pub fingerprint: [u8; 32],
    /// The Session ID the CLI chose for its registration (spec 3.3).
    pub session_id: SessionId,
    /// The exact argv to run in the sandbox.
    pub argv: Vec<String>,
    /// Present when the CLI's stdin and stdout are terminals: the session
    /// gets a PTY (spec 3.4, FR-14); absent for the piped form.
    pub terminal: Option<InteractiveTerminal>,
    /// The public key of the Session Anchor the CLI holds in memory for
    /// this session (spec 3.3 "Protocol cryptography refinement").
    pub session_anchor: PublicKey,
}

/// The CLI's terminal at the start of an interactive session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InteractiveTerminal {
    pub size: TerminalSize,
    /// The CLI's `TERM`, passed to the guest process (`None`: unset).
    pub term: Option<String>,
}

/// A window size in character cells (zero is refused by the PTY side).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    pub rows: u16,
    pub columns: u16,
}

/// How the command in the sandbox ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandStatus {
    Exited(u8),
    Signalled(u8),
}

impl CommandStatus {
    /// The CLI's exit status: the command's, or 128+N when killed by signal N.
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Exited(code) => code,
            Self::Signalled(n) => 128u8.saturating_add(n),
        }
    }

    /// From a wait status of the exec client; `runsc exec` itself reports a
    /// signalled command as exit status 128+N.
    pub fn from_wait(code: Option<i32>, signal: Option<i32>) -> Self {
        match (code, signal) {
            (_, Some(n)) => Self::Signalled(u8::try_from(n).unwrap_or(u8::MAX - 128)),
            (Some(c), None) if (129..=192).contains(&c) => {
                Self::Signalled(u8::try_from(c - 128).unwrap_or(u8::MAX - 128))
            }
            (Some(c), None) => Self::Exited(u8::try_from(c & 0xff).unwrap_or(u8::MAX)),
            (None, None) => Self::Exited(u8::MAX),
        }
    }

    /// The status a session's `SessionExit` reports: an exit code (128+N
    /// from `runsc exec` for a command killed by signal N), or a command
    /// Lazaret's release terminated (reported as killed, 128 + 9); `None`
    /// when the runtime lost the exec client (the CLI reports that as its
    /// own error, never as a made-up status).
    pub fn of_exit(exit: &SessionExit) -> Option<Self> {
        match (exit.outcome(), exit.exit_code()) {
            (SessionExitOutcome::Exited, Some(code)) => {
                Some(Self::from_wait(Some(i32::from(code)), None))
            }
            (SessionExitOutcome::Terminated, _) | (SessionExitOutcome::Exited, None) => {
                Some(Self::Signalled(9))
            }
            (SessionExitOutcome::RuntimeLost, _) => None,
        }
    }
}

/// RS -> HC over the lifetime channel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SupervisorMessage {
    /// RS unshared its user namespace and waits for verified maps.
    UserNamespace { pid: u32 },
    /// spec 3.3 step 1 for an RS-launched child's slot (the routing
    /// daemon, the connectivity helper, then the attached runsc).
    ConfirmIntent(HostProcessOwnershipSlot),
    /// spec 3.3 step 6: the encoded `StagedProcessOwnership`.
    Staged(Vec<u8>),
    /// spec 3.3 step 9 done on RS's side (encoded staged tuple).
    Committed(Vec<u8>),
    /// Spec 3.7: the derived policy is installed in the enforcement
    /// namespace and the observed rtnetlink projection matched it exactly;
    /// RS waits for `NetworkReady` before it starts the sandbox.
    NetworkInstalled {
        /// The enforcement namespace RS observed it in (`/proc/self/ns/net`);
        /// HC compares it with what it reads itself.
        namespace: NamespaceIdentity,
        /// The digest of the policy bytes RS verified and installed.
        policy_digest: [u8; 32],
    },
    /// Spec 3.6 step 4: the State Anchors of the plan are mounted in RS's
    /// mount namespace (in the plan's order), as RS observed them.
    StateAnchorsMounted(AnchorMounts),
    /// Spec 3.5: the committed routing daemon mounted the ignored-path
    /// router (and the Git Sentry filter under it) in RS's mount
    /// namespace; the router's mount as RS observed it.
    GitRoutingMounted(MountIdentity),
    /// The sandbox runs; sessions may exec into it.
    SandboxRunning {
        container_id: String,
        runsc_root: String,
        /// SHA-256 of the bundle's `config.json` (the Sandbox snapshot's
        /// `bundle_digest`).
        bundle_digest: [u8; 32],
    },
    /// The launch failed.
    Failed(String),
}

/// A filesystem object's device and inode (mount identity is not comparable
/// across mount namespaces).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectId {
    pub dev_major: u32,
    pub dev_minor: u32,
    pub ino: u64,
}

/// One State Anchor to mount (spec 3.6): a kernel overlayfs whose lower is
/// the prepared lower's subtree at `path` (resolved inside `rootfs`, so an
/// image symlink never leads out of the image), whose upper and work
/// directories are the Domain's, mounted at `mountpoint` in RS's mount
/// namespace and bound at `path` in the sandbox. Every field but `path` is
/// a host path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnchorPlan {
    /// The persistent path in the sandbox (`/usr`).
    pub path: String,
    /// The prepared lower's root file system.
    pub rootfs: String,
    pub upper: String,
    pub work: String,
    pub mountpoint: String,
}

/// What a developer volume's source is (schemas "volume" `kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum VolumeSourceKind {
    File,
    Directory,
}

/// One developer volume (spec 3.2, schemas "volume"): the host source the
/// Host Coordinator revalidated through its confined plan just before the
/// handoff, bound at `container` (a strict descendant of exactly one
/// persistent path, so inside a State Anchor).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumePlan {
    /// The sandbox path.
    pub container: String,
    /// The canonical host source.
    pub host: String,
    pub kind: VolumeSourceKind,
    pub read_only: bool,
    /// The source's identity at the revalidation: RS hands runsc the path
    /// only while it names this object.
    pub object: ObjectId,
}

/// Everything the Runtime Supervisor needs for one generation; HC sends it
/// as the first message of the lifetime channel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorPlan {
    pub domain_id: [u8; 32],
    pub generation_id: u64,
    pub coordinator_id: [u8; 16],
    pub container_id: String,
    /// `<runtime domain root>/gen-N`: bundle and runsc state live here.
    pub generation_dir: String,
    /// The prepared lower (read-only root filesystem tree).
    pub rootfs: String,
    /// The canonical workspace.
    pub workspace: String,
    /// The workspace directory's identity as the Host Coordinator
    /// revalidated it through its confined plan just before this handoff
    /// (spec 3.2): RS hands runsc the path only while it names this object.
    pub workspace_object: ObjectId,
    /// The directory holding the static init binary, bind-mounted
    /// read-only at the bundle's init directory; PID 1 is the init in it.
    pub init: String,
    pub hostname: String,
    pub env: Vec<String>,
    /// `runtime.runsc_dcache` (spec 3.2), runsc's `--dcache`.
    pub runsc_dcache: u32,
    /// The Domain's workspace-ownership restore marker (a file in the
    /// persistent Domain root; effects `workspace_owner`).
    pub owner_restore_marker: String,
    /// The Domain's Ignored Workspace State directory (spec 3.5, SR-13):
    /// RS serves the workspace through the ignored-path router with this
    /// as its isolated backing. `None` when `isolate_gitignored` is false:
    /// the workspace is bound as it is.
    pub ignored_state: Option<String>,
    /// Spec 3.7 "Policy transport": the SHA-256 digest of the derived
    /// policy whose canonical bytes RS reads from the write-sealed memfd it
    /// inherited; RS installs nothing else.
    pub policy_digest: [u8; 32],
    /// The State Anchors, one per persistent path (spec 3.6, FR-4), mounted
    /// when HC answers [`CoordinatorCommand::MountStateAnchors`].
    pub state_anchors: Vec<AnchorPlan>,
    /// The developer volumes, bound after the anchors they lie in.
    pub volumes: Vec<VolumePlan>,
    /// Whether the profile enables host escalation (spec 3.8): the
    /// generation directory's `mailbox` is bound into the sandbox.
    pub escalation: bool,
}

/// HC -> RS over the lifetime channel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CoordinatorCommand {
    /// The generation's plan (first message).
    Plan(Box<SupervisorPlan>),
    /// The live maps were verified; RS may continue.
    MapsVerified,
    IntentConfirmed,
    /// The State Anchor's intent is durable (spec 3.6 step 4): RS may
    /// mount the anchors of its plan.
    MountStateAnchors,
    /// MarkNetworkReady is durable: RS may start the sandbox.
    NetworkReady,
    /// The exact echoed `ProcessOwnershipCommitAck` bytes.
    Ack(Vec<u8>),
    /// HC refused a step (the reason).
    Refused(String),
    /// Stop the sandbox and exit.
    Stop,
}
