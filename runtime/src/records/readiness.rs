//! The network readiness identity and its fingerprint (schemas.md "Network
//! readiness"), needed to check network evidence internally (spec 3.3).
use super::codec::{self, CodecError};
use super::ids::{
    ConfigurationFingerprint, DomainId, GenerationId, NetworkSidecarId, Sha256Digest,
};
use super::participant::NamespaceIdentity;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const NETWORK_READINESS_IDENTITY_SCHEMA_ID: &str = "lazaret-network-readiness-identity-v1";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkReadinessIdentity {
    pub schema_id: String,
    pub domain_id: DomainId,
    pub generation_id: GenerationId,
    pub configuration_fingerprint: ConfigurationFingerprint,
    pub network_sidecar_id: NetworkSidecarId,
    pub derived_policy_digest: Sha256Digest,
    pub enforcement_namespace: NamespaceIdentity,
}

impl NetworkReadinessIdentity {
    /// SHA-256 over the schema ID, one zero byte and the minimal postcard
    /// encoding of the complete identity document.
    pub fn fingerprint(&self) -> Result<Sha256Digest, CodecError> {
        let encoded = codec::encode("network readiness identity", self)?;
        let mut hasher = Sha256::new();
        hasher.update(NETWORK_READINESS_IDENTITY_SCHEMA_ID.as_bytes());
        hasher.update([0u8]);
        hasher.update(&encoded);
        Ok(Sha256Digest(hasher.finalize().into()))
    }
}
