//! Domain Store metadata, Domain, generation, session and mailbox rows
//! (schemas.md "Domain Store"; spec 3.6 "Durable generation document
//! refinement").
use super::ids::{
    CliId, ConfigurationFingerprint, CoordinatorId, DomainId, GenerationId, HostPath, ModelValue,
    NetworkSidecarId, ProfileName, SandboxId, SessionAnchorId, SessionId,
};
use super::participant::ParticipantState;
use serde::{Deserialize, Serialize};

/// The first product Domain Store identity (spec 3.6).
pub const DOMAIN_STORE_SCHEMA_ID: &str = "lazaret-domain-store-v1";
/// The only accepted Domain Store version.
pub const DOMAIN_STORE_SCHEMA_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreMetadata {
    pub schema_id: String,
    pub schema_version: u32,
}

impl StoreMetadata {
    pub fn domain_store_v1() -> Self {
        Self {
            schema_id: DOMAIN_STORE_SCHEMA_ID.to_owned(),
            schema_version: DOMAIN_STORE_SCHEMA_VERSION,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Domain {
    pub domain_id: DomainId,
    pub profile_name: ProfileName,
    pub canonical_workspace: HostPath,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Generation {
    pub domain_id: DomainId,
    pub generation_id: GenerationId,
    pub configuration_fingerprint: ConfigurationFingerprint,
    pub coordinator_id: CoordinatorId,
    pub network_sidecar_id: NetworkSidecarId,
    pub sandbox_id: SandboxId,
    /// A value of the protocol model's durable decision vocabulary.
    pub durable_decision: ModelValue,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub generation_id: GenerationId,
    pub session_id: SessionId,
    pub cli_id: CliId,
    pub session_anchor_id: SessionAnchorId,
    /// A value of the protocol model's session phase vocabulary.
    pub session_phase: ModelValue,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mailbox {
    pub generation_id: GenerationId,
    pub identity_path: HostPath,
    pub inbox_path: HostPath,
    pub outbox_path: HostPath,
    pub state: ParticipantState,
}
