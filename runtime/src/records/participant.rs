//! Participant ownership snapshots (schemas.md "Participant ownership").
use super::ids::{
    ContainerId, DomainId, GenerationId, HostPath, NetworkSidecarId, PreparedArtifactId,
    Sha256Digest, SourceIdentity,
};
use super::process::{HostProcessOwnershipSlot, PersistedHostProcessOwnership};
use serde::{Deserialize, Serialize};

/// A role-bound Domain generation participant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ParticipantRole {
    PreparedLower,
    StateAnchor,
    GitRouting,
    Network,
    Helper,
    Sandbox,
    Publication,
}

impl ParticipantRole {
    pub const ALL: [Self; 7] = [
        Self::PreparedLower,
        Self::StateAnchor,
        Self::GitRouting,
        Self::Network,
        Self::Helper,
        Self::Sandbox,
        Self::Publication,
    ];

    /// The single serviceable ("active") state of the role (schemas.md table).
    pub fn active_state(self) -> ParticipantState {
        match self {
            Self::PreparedLower => ParticipantState::LeaseHeld,
            Self::StateAnchor | Self::GitRouting => ParticipantState::Prepared,
            Self::Network | Self::Helper | Self::Sandbox | Self::Publication => {
                ParticipantState::Committed
            }
        }
    }

    /// Stable one-byte key used by the store's participant table.
    pub fn key(self) -> u8 {
        match self {
            Self::PreparedLower => 0,
            Self::StateAnchor => 1,
            Self::GitRouting => 2,
            Self::Network => 3,
            Self::Helper => 4,
            Self::Sandbox => 5,
            Self::Publication => 6,
        }
    }

    pub fn empty_snapshot(self) -> ParticipantOwnership {
        match self {
            Self::PreparedLower => ParticipantOwnership::PreparedLower(Default::default()),
            Self::StateAnchor => ParticipantOwnership::StateAnchor(Default::default()),
            Self::GitRouting => ParticipantOwnership::GitRouting(Default::default()),
            Self::Network => ParticipantOwnership::Network(Default::default()),
            Self::Helper => ParticipantOwnership::Helper(Default::default()),
            Self::Sandbox => ParticipantOwnership::Sandbox(Default::default()),
            Self::Publication => ParticipantOwnership::Publication(Default::default()),
        }
    }
}

impl HostProcessOwnershipSlot {
    /// The participant role holding this slot (terminal and escalation slots
    /// belong to no participant).
    pub fn participant_role(self) -> Option<ParticipantRole> {
        match self {
            Self::SandboxHostCoordinator
            | Self::SandboxRuntimeSupervisor
            | Self::SandboxAttachedRunsc => Some(ParticipantRole::Sandbox),
            Self::StateAnchorRuntimeSupervisor => Some(ParticipantRole::StateAnchor),
            Self::GitRoutingDaemon => Some(ParticipantRole::GitRouting),
            Self::NetworkRuntimeSupervisor => Some(ParticipantRole::Network),
            Self::HelperConnectivityHelper | Self::HelperRuntimeSupervisor => {
                Some(ParticipantRole::Helper)
            }
            Self::SessionTerminalHostCoordinator
            | Self::SessionTerminalExecClient
            | Self::EscalationHostProcess => None,
        }
    }
}

/// Participant physical recovery state (schemas.md `ParticipantState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ParticipantState {
    Intent,
    LeaseHeld,
    Prepared,
    Committed,
    ReleaseIntent,
    Clean,
}

/// One participant row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Participant {
    pub generation_id: GenerationId,
    pub role: ParticipantRole,
    pub state: ParticipantState,
    /// `None` is the single encoding of a bare role-bound Intent.
    pub ownership: Option<ParticipantOwnership>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NamespaceIdentity {
    pub device: u64,
    pub inode: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MountIdentity {
    pub mount_id: u64,
    pub device: u64,
    pub inode: u64,
}

/// The prepared-lower lease phase recorded in the Domain Store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LeaseState {
    Intent,
    LeaseHeld,
    ReleaseIntent,
}

/// schemas.md "Network readiness": the accepted evidence bound into the
/// network participant before publication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NetworkReadinessEvidence {
    pub domain_id: DomainId,
    pub generation_id: GenerationId,
    pub network_sidecar_id: NetworkSidecarId,
    pub readiness_fingerprint: Sha256Digest,
}

/// A mount namespace: its nsfs identity and its 64-bit namespace ID
/// (`NS_GET_MNTNS_ID`), which the kernel never reuses while it runs
/// (an nsfs inode number may be reused once the namespace is gone).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MountNamespaceIdentity {
    pub id: u64,
    pub device: u64,
    pub inode: u64,
}

/// One State Anchor as mounted: its mount point in the Runtime
/// Supervisor's mount namespace and the mount there.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AnchorMount {
    pub mountpoint: HostPath,
    pub mount: MountIdentity,
}

/// A generation's State Anchors (spec 3.6: one per persistent path), all
/// mounted by the Runtime Supervisor in its own mount namespace.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AnchorMounts {
    pub namespace: MountNamespaceIdentity,
    pub anchors: Vec<AnchorMount>,
}

/// What spec 3.6 release step 3 observed absent before the prepared-lower
/// lease's release intent was recorded: the State Anchors' Runtime
/// Supervisor and their exact mounts in its mount namespace, as the
/// anchors' snapshot recorded them (schemas.md names one daemon, user
/// namespace and mount; docs/persistent-state.md "Release evidence").
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StateAnchorReleaseEvidence {
    pub runtime_supervisor: PersistedHostProcessOwnership,
    pub mounts: Option<AnchorMounts>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedLowerOwnership {
    pub prepared_artifact_id: Option<PreparedArtifactId>,
    pub source_identity: Option<SourceIdentity>,
    pub lease_state: Option<LeaseState>,
    pub path: Option<HostPath>,
    pub device: Option<u64>,
    pub inode: Option<u64>,
    pub released_state_anchor: Option<StateAnchorReleaseEvidence>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateAnchorOwnership {
    pub lower_artifact_id: Option<PreparedArtifactId>,
    pub upper_path: Option<HostPath>,
    pub work_path: Option<HostPath>,
    pub merged_path: Option<HostPath>,
    /// The Runtime Supervisor, whose mount namespace holds the anchors: a
    /// direct existing-process edge, as the network's (schemas.md names a
    /// daemon here; the kernel overlayfs medium has none,
    /// docs/persistent-state.md "The daemon slot").
    pub runtime_supervisor: PersistedHostProcessOwnership,
    pub mounts: Option<AnchorMounts>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitRoutingOwnership {
    pub mountpoint: Option<HostPath>,
    pub host_root: Option<HostPath>,
    pub isolated_root: Option<HostPath>,
    pub daemon: PersistedHostProcessOwnership,
    pub mount: Option<MountIdentity>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkOwnership {
    pub derived_policy_digest: Option<Sha256Digest>,
    pub readiness_fingerprint: Option<Sha256Digest>,
    pub readiness_evidence: Option<NetworkReadinessEvidence>,
    pub namespace: Option<NamespaceIdentity>,
    pub runtime_supervisor: PersistedHostProcessOwnership,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelperOwnership {
    pub network_sidecar_id: Option<NetworkSidecarId>,
    pub connectivity_helper: PersistedHostProcessOwnership,
    pub runtime_supervisor: PersistedHostProcessOwnership,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxOwnership {
    pub container_id: Option<ContainerId>,
    pub runtime_root: Option<HostPath>,
    pub bundle_digest: Option<Sha256Digest>,
    pub host_coordinator: PersistedHostProcessOwnership,
    pub runtime_supervisor: PersistedHostProcessOwnership,
    pub attached_runsc: PersistedHostProcessOwnership,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicationOwnership {
    pub socket_path: Option<HostPath>,
    pub identity_path: Option<HostPath>,
}

/// The role snapshot union; its variant must match the participant's role.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ParticipantOwnership {
    PreparedLower(PreparedLowerOwnership),
    StateAnchor(StateAnchorOwnership),
    GitRouting(GitRoutingOwnership),
    Network(NetworkOwnership),
    Helper(HelperOwnership),
    Sandbox(SandboxOwnership),
    Publication(PublicationOwnership),
}

impl ParticipantOwnership {
    pub fn role(&self) -> ParticipantRole {
        match self {
            Self::PreparedLower(_) => ParticipantRole::PreparedLower,
            Self::StateAnchor(_) => ParticipantRole::StateAnchor,
            Self::GitRouting(_) => ParticipantRole::GitRouting,
            Self::Network(_) => ParticipantRole::Network,
            Self::Helper(_) => ParticipantRole::Helper,
            Self::Sandbox(_) => ParticipantRole::Sandbox,
            Self::Publication(_) => ParticipantRole::Publication,
        }
    }

    /// The process slot `slot` inside this snapshot, if the role holds it.
    pub fn slot(&self, slot: HostProcessOwnershipSlot) -> Option<&PersistedHostProcessOwnership> {
        use HostProcessOwnershipSlot as S;
        match (self, slot) {
            (Self::Sandbox(s), S::SandboxHostCoordinator) => Some(&s.host_coordinator),
            (Self::Sandbox(s), S::SandboxRuntimeSupervisor) => Some(&s.runtime_supervisor),
            (Self::Sandbox(s), S::SandboxAttachedRunsc) => Some(&s.attached_runsc),
            (Self::StateAnchor(s), S::StateAnchorRuntimeSupervisor) => Some(&s.runtime_supervisor),
            (Self::GitRouting(s), S::GitRoutingDaemon) => Some(&s.daemon),
            (Self::Network(s), S::NetworkRuntimeSupervisor) => Some(&s.runtime_supervisor),
            (Self::Helper(s), S::HelperConnectivityHelper) => Some(&s.connectivity_helper),
            (Self::Helper(s), S::HelperRuntimeSupervisor) => Some(&s.runtime_supervisor),
            _ => None,
        }
    }

    /// Mutable access to the process slot `slot`, if the role holds it.
    pub fn slot_mut(
        &mut self,
        slot: HostProcessOwnershipSlot,
    ) -> Option<&mut PersistedHostProcessOwnership> {
        use HostProcessOwnershipSlot as S;
        match (self, slot) {
            (Self::Sandbox(s), S::SandboxHostCoordinator) => Some(&mut s.host_coordinator),
            (Self::Sandbox(s), S::SandboxRuntimeSupervisor) => Some(&mut s.runtime_supervisor),
            (Self::Sandbox(s), S::SandboxAttachedRunsc) => Some(&mut s.attached_runsc),
            (Self::StateAnchor(s), S::StateAnchorRuntimeSupervisor) => {
                Some(&mut s.runtime_supervisor)
            }
            (Self::GitRouting(s), S::GitRoutingDaemon) => Some(&mut s.daemon),
            (Self::Network(s), S::NetworkRuntimeSupervisor) => Some(&mut s.runtime_supervisor),
            (Self::Helper(s), S::HelperConnectivityHelper) => Some(&mut s.connectivity_helper),
            (Self::Helper(s), S::HelperRuntimeSupervisor) => Some(&mut s.runtime_supervisor),
            _ => None,
        }
    }
}
