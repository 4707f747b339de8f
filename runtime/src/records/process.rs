//! Host process identity and staged ownership (spec 3.3 "Host process identity
//! and causal acquisition refinement"; schemas.md "Host process identity and
//! staged ownership").
use super::codec::{self, CodecError};
use super::ids::{CoordinatorId, DomainId, GenerationId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The current Linux boot ID as the 16 UUID bytes in canonical field order
/// (the order in which `/proc/sys/kernel/random/boot_id` prints them).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BootId(pub [u8; 16]);

/// Text is not a canonical lowercase-or-uppercase hyphenated UUID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("boot id {text:?} is not a canonical UUID (8-4-4-4-12 hex digits): {reason}")]
pub struct BootIdParseError {
    pub text: String,
    pub reason: &'static str,
}

impl BootId {
    /// Parses the canonical UUID text form (one trailing newline allowed).
    pub fn parse(text: &str) -> Result<Self, BootIdParseError> {
        let fail = |reason| BootIdParseError {
            text: text.chars().take(64).collect(),
            reason,
        };
        let trimmed = text.strip_suffix('\n').unwrap_or(text);
        let bytes = trimmed.as_bytes();
        if bytes.len() != 36 {
            return Err(fail("expected 36 characters"));
        }
        let mut out = [0u8; 16];
        let mut nibbles = 0usize;
        for (offset, &b) in bytes.iter().enumerate() {
            if matches!(offset, 8 | 13 | 18 | 23) {
                if b != b'-' {
                    return Err(fail("expected '-' at offsets 8, 13, 18 and 23"));
                }
                continue;
            }
            let value = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => return Err(fail("expected hexadecimal digits")),
            };
            let index = nibbles / 2;
            out[index] = (out[index] << 4) | value;
            nibbles += 1;
        }
        Ok(Self(out))
    }
}

impl fmt::Display for BootId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, byte) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for BootId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BootId({self})")
    }
}

/// pidfs `st_dev` of a pidfd: distinct from general filesystem devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PidfsDev(pub u64);

/// pidfs `st_ino` of a pidfd: unique per process within one boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PidfsIno(pub u64);

/// Host-PID-namespace PID: a lookup locator only, never authority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HostPid(pub u32);

/// The only positive durable host-process authority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PidfsProcessAuthorityV1 {
    pub boot_id: BootId,
    pub pidfs_st_dev: PidfsDev,
    pub pidfs_st_ino: PidfsIno,
}

/// v1 pidfs process identity: authority plus locator and negative evidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PidfsProcessIdentityV1 {
    pub authority: PidfsProcessAuthorityV1,
    pub host_pid: HostPid,
    pub start_time_ticks: u64,
}

impl PidfsProcessIdentityV1 {
    /// Whether `other` names the same process. Only the authority tuple
    /// counts: equal PID and start time add nothing (spec 3.3).
    pub fn same_authority(&self, other: &PidfsProcessAuthorityV1) -> bool {
        self.authority == *other
    }
}

/// Committed ownership wraps the current pidfs identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HostProcessIdentity {
    pub identity: PidfsProcessIdentityV1,
}

/// The three-phase durable process slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PersistedHostProcessOwnership {
    #[default]
    Unassigned,
    Staged(PidfsProcessIdentityV1),
    Committed(HostProcessIdentity),
}

impl PersistedHostProcessOwnership {
    /// The recorded identity in a staged or committed slot.
    pub fn identity(&self) -> Option<&PidfsProcessIdentityV1> {
        match self {
            Self::Unassigned => None,
            Self::Staged(identity) => Some(identity),
            Self::Committed(committed) => Some(&committed.identity),
        }
    }

    pub fn phase_name(&self) -> &'static str {
        match self {
            Self::Unassigned => "Unassigned",
            Self::Staged(_) => "Staged",
            Self::Committed(_) => "Committed",
        }
    }
}

/// How a slot's process enters ownership (spec 3.3: "The direct
/// existing-process edges are Network RS, Helper RS, Sandbox HC, and Session
/// Terminal HC"; every other edge is an acquired child and requires staging).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotEdge {
    /// An already committed owner or supervisor enters the snapshot directly.
    DirectExisting,
    /// A child acquired through the broker: Unassigned -> Staged -> Committed.
    AcquiredChild,
}

/// Every durable host-process ownership slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HostProcessOwnershipSlot {
    SandboxHostCoordinator,
    SandboxRuntimeSupervisor,
    SandboxAttachedRunsc,
    StateAnchorRuntimeSupervisor,
    GitRoutingDaemon,
    NetworkRuntimeSupervisor,
    HelperConnectivityHelper,
    HelperRuntimeSupervisor,
    SessionTerminalHostCoordinator,
    SessionTerminalExecClient,
    EscalationHostProcess,
}

impl HostProcessOwnershipSlot {
    pub const ALL: [Self; 11] = [
        Self::SandboxHostCoordinator,
        Self::SandboxRuntimeSupervisor,
        Self::SandboxAttachedRunsc,
        Self::StateAnchorRuntimeSupervisor,
        Self::GitRoutingDaemon,
        Self::NetworkRuntimeSupervisor,
        Self::HelperConnectivityHelper,
        Self::HelperRuntimeSupervisor,
        Self::SessionTerminalHostCoordinator,
        Self::SessionTerminalExecClient,
        Self::EscalationHostProcess,
    ];

    pub fn edge(self) -> SlotEdge {
        match self {
            Self::NetworkRuntimeSupervisor
            | Self::StateAnchorRuntimeSupervisor
            | Self::HelperRuntimeSupervisor
            | Self::SandboxHostCoordinator
            | Self::SessionTerminalHostCoordinator => SlotEdge::DirectExisting,
            Self::SandboxRuntimeSupervisor
            | Self::SandboxAttachedRunsc
            | Self::GitRoutingDaemon
            | Self::HelperConnectivityHelper
            | Self::SessionTerminalExecClient
            | Self::EscalationHostProcess => SlotEdge::AcquiredChild,
        }
    }
}

/// Version of the staged-ownership message and its acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ProcessOwnershipMessageVersion {
    V1,
}

/// One acquisition's complete staged tuple (spec 3.3 step 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StagedProcessOwnership {
    pub version: ProcessOwnershipMessageVersion,
    pub domain_id: DomainId,
    pub generation_id: GenerationId,
    pub coordinator_id: CoordinatorId,
    pub slot: HostProcessOwnershipSlot,
    pub identity: PidfsProcessIdentityV1,
}

/// HC's commit acknowledgement: echoes the exact staged value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProcessOwnershipCommitAck {
    pub version: ProcessOwnershipMessageVersion,
    pub committed: StagedProcessOwnership,
}

/// A staged-ownership message or acknowledgement was refused.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    #[error("{message} is empty")]
    Empty { message: &'static str },
    #[error("{message} has unknown version tag {tag:#04x}; only v1 (0x00) is accepted")]
    UnknownVersion { message: &'static str, tag: u8 },
    #[error(transparent)]
    Codec(#[from] CodecError),
}

// Postcard encodes an enum discriminant as a varint; V1 is the single byte 0.
const V1_TAG: u8 = 0;

fn check_version(message: &'static str, bytes: &[u8]) -> Result<(), MessageError> {
    match bytes.first() {
        None => Err(MessageError::Empty { message }),
        Some(&V1_TAG) => Ok(()),
        Some(&tag) => Err(MessageError::UnknownVersion { message, tag }),
    }
}

impl StagedProcessOwnership {
    pub fn encode(&self) -> Result<Vec<u8>, MessageError> {
        Ok(codec::encode("staged process ownership", self)?)
    }

    /// Decodes with version dispatch before interpreting any field.
    pub fn decode(bytes: &[u8]) -> Result<Self, MessageError> {
        check_version("staged process ownership", bytes)?;
        Ok(codec::decode("staged process ownership", bytes)?)
    }
}

impl ProcessOwnershipCommitAck {
    pub fn encode(&self) -> Result<Vec<u8>, MessageError> {
        Ok(codec::encode("process ownership commit ack", self)?)
    }

    /// Decodes with version dispatch before interpreting any field.
    pub fn decode(bytes: &[u8]) -> Result<Self, MessageError> {
        check_version("process ownership commit ack", bytes)?;
        Ok(codec::decode("process ownership commit ack", bytes)?)
    }
}
