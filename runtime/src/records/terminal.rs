//! Session terminal ownership (spec 3.4; schemas.md "Session terminal
//! ownership").
use super::ids::{ContainerId, GenerationId, SessionId};
use super::process::PersistedHostProcessOwnership;
use serde::{Deserialize, Serialize};

/// Physical recovery state below the protocol model's session phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SessionTerminalState {
    Intent,
    Running,
    ReleaseIntent,
    Clean,
}

/// The PTY master, exact only together with its HC process identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PtyIdentity {
    pub master_fd: u32,
    pub device: u64,
    pub inode: u64,
}

/// Guest leader identity inside the exact generation-bound runsc container;
/// never converts to host process authority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GuestProcessIdentity {
    pub leader_pid: u32,
    pub leader_start_time: u64,
    pub process_group_id: u32,
}

/// The physical evidence of one Session Terminal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSnapshot {
    pub container_id: Option<ContainerId>,
    pub host_coordinator: PersistedHostProcessOwnership,
    pub pty_master: Option<PtyIdentity>,
    pub exec_client: PersistedHostProcessOwnership,
    pub guest_process: Option<GuestProcessIdentity>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionTerminal {
    pub generation_id: GenerationId,
    pub session_id: SessionId,
    pub state: SessionTerminalState,
    pub snapshot: TerminalSnapshot,
}

impl SessionTerminal {
    /// A bare intent: nothing of the terminal was acquired (no identity
    /// recorded). It has nothing to release and becomes clean only after
    /// runtime absence (schemas.md "Session terminal ownership").
    pub fn is_bare_intent(&self) -> bool {
        self.state == SessionTerminalState::Intent && self.snapshot == TerminalSnapshot::default()
    }
}
