//! The Client CLI's check of its session registration (spec 3.3): the
//! Trust Manifest is signed by its issuer and names the Domain,
//! configuration and generation the CLI resolved and was told; the Session
//! Coordinator's credential is the issuer's, for that generation and
//! coordinator; the capability is the coordinator's, for that generation
//! and for the CLI's own Session Anchor. Every refusal names the record
//! and the check that failed.
//!
//! The manifest must be the one the coordinator's publication identity
//! pins (its SHA-256), which the CLI read from the host-private Domain path
//! before it connected.
use super::records::{Digest, ProtocolRecord};
use super::records::{
    GenerationIdentity, ProtocolCredential, ProtocolCredentialRole, PublicKey,
    SessionRegistrationResponse, SessionRequestCapability, TrustManifest,
};
use super::signing::{sha256, verify, SignatureError};
use super::PROTOCOL_VERSION;
use crate::records::ids::{ConfigurationFingerprint, DomainId, GenerationId};

/// What the Client CLI expects its registration to name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectedRegistration {
    /// The Domain the CLI resolved.
    pub domain_id: DomainId,
    /// The configuration the CLI resolved.
    pub configuration_fingerprint: ConfigurationFingerprint,
    /// The generation the coordinator said the session joined.
    pub generation_id: GenerationId,
    /// The public key of the CLI's Session Anchor.
    pub session_anchor: PublicKey,
    /// The manifest digest the publication identity pins.
    pub trust_manifest_sha256: Digest,
}

/// Why a registration response is refused.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("the {record} speaks protocol version {found}, not {PROTOCOL_VERSION}")]
    Version { record: &'static str, found: u16 },
    #[error("the trust manifest names Domain {found}, not {expected}")]
    OtherDomain { expected: DomainId, found: DomainId },
    #[error("the trust manifest names configuration {found}, not the resolved {expected}")]
    OtherConfiguration {
        expected: ConfigurationFingerprint,
        found: ConfigurationFingerprint,
    },
    #[error("the trust manifest is generation {found}'s, not generation {announced}'s, which the session joined")]
    ManifestGeneration {
        announced: GenerationId,
        found: GenerationId,
    },
    #[error("the trust manifest: {0}")]
    Manifest(SignatureError),
    #[error("the trust manifest is not the one the coordinator's publication identity pins")]
    UnpinnedManifest,
    #[error("the {record} names another generation than the trust manifest")]
    OtherGeneration { record: &'static str },
    #[error("the coordinator credential is for role {found:?}, not SessionCoordinator")]
    CredentialRole { found: ProtocolCredentialRole },
    #[error("the coordinator credential's subject is not the manifest's coordinator")]
    CredentialSubject,
    #[error("the coordinator credential: {0}")]
    Credential(SignatureError),
    #[error("the {record}'s ID is not the digest of its claims")]
    WrongId { record: &'static str },
    #[error("the capability names another coordinator credential")]
    CapabilityCredential,
    #[error("the capability binds another Session Anchor than this client's")]
    OtherSessionAnchor,
    #[error("the capability: {0}")]
    Capability(SignatureError),
}

/// Checks `response`, under `manifest` and the Session Coordinator's
/// `credential`, for the client that expects `expected`; returns the
/// verified capability.
pub fn verify_registration<'r>(
    response: &'r SessionRegistrationResponse,
    manifest: &TrustManifest,
    credential: &ProtocolCredential,
    expected: &ExpectedRegistration,
) -> Result<&'r SessionRequestCapability, VerifyError> {
    let capability = &response.session_capability;
    for (record, found) in [
        ("session registration response", response.protocol_version),
        ("trust manifest", manifest.protocol_version),
        ("coordinator credential", credential.protocol_version),
        ("session request capability", capability.protocol_version),
    ] {
        if found != PROTOCOL_VERSION {
            return Err(VerifyError::Version { record, found });
        }
    }
    let identity: &GenerationIdentity = &manifest.generation_identity;
    if identity.domain_id != expected.domain_id {
        return Err(VerifyError::OtherDomain {
            expected: expected.domain_id,
            found: identity.domain_id,
        });
    }
    if identity.configuration_fingerprint != expected.configuration_fingerprint {
        return Err(VerifyError::OtherConfiguration {
            expected: expected.configuration_fingerprint,
            found: identity.configuration_fingerprint,
        });
    }
    if identity.generation_id != expected.generation_id {
        return Err(VerifyError::ManifestGeneration {
            announced: expected.generation_id,
            found: identity.generation_id,
        });
    }
    verify(
        &manifest.protocol_issuer_public_key,
        &manifest.claims(),
        &manifest.issuer_signature,
    )
    .map_err(VerifyError::Manifest)?;
    let manifest_sha256 = manifest
        .encode()
        .map(|bytes| sha256(&bytes))
        .map_err(|source| {
            VerifyError::Manifest(SignatureError::Claims {
                record: "trust manifest",
                source,
            })
        })?;
    if manifest_sha256 != expected.trust_manifest_sha256 {
        return Err(VerifyError::UnpinnedManifest);
    }

    if credential.generation_identity != *identity {
        return Err(VerifyError::OtherGeneration {
            record: "coordinator credential",
        });
    }
    if credential.role != ProtocolCredentialRole::SessionCoordinator {
        return Err(VerifyError::CredentialRole {
            found: credential.role,
        });
    }
    if credential.subject_id != identity.coordinator_id.0 {
        return Err(VerifyError::CredentialSubject);
    }
    let credential_id = verify(
        &manifest.protocol_issuer_public_key,
        &credential.claims(),
        &credential.issuer_signature,
    )
    .map_err(VerifyError::Credential)?;
    if credential_id != credential.credential_id {
        return Err(VerifyError::WrongId {
            record: "coordinator credential",
        });
    }

    if capability.session_binding.generation_identity != *identity {
        return Err(VerifyError::OtherGeneration {
            record: "session request capability",
        });
    }
    if capability.coordinator_credential_id != credential.credential_id {
        return Err(VerifyError::CapabilityCredential);
    }
    if capability.session_binding.session_anchor_public_key != expected.session_anchor {
        return Err(VerifyError::OtherSessionAnchor);
    }
    let capability_id = verify(
        &credential.public_key,
        &capability.claims(),
        &capability.coordinator_signature,
    )
    .map_err(VerifyError::Capability)?;
    if capability_id != capability.capability_id {
        return Err(VerifyError::WrongId {
            record: "session request capability",
        });
    }
    Ok(capability)
}
