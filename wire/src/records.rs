//! The v1 protocol-cryptography records of schemas.md, field for field in
//! the schema's order, which is their Postcard field order (schemas.md:
//! "For embedded signed claims, the field order shown above is the Postcard
//! field order"). Each signed record has a claims form (every field but
//! its ID and signature) whose minimal Postcard encoding is what is
//! digested and signed ([`crate::signing`]).
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::codec::{self, CodecError};
use crate::ids::{
    CliId, ConfigurationFingerprint, CoordinatorId, DomainId, GenerationId, ProfileName, SandboxId,
    SessionAnchorId, SessionId,
};

/// An Ed25519 public key.
pub type PublicKey = [u8; 32];
/// A SHA-256 digest (a credential, capability or certificate digest).
pub type Digest = [u8; 32];

/// An Ed25519 signature: 64 bytes, encoded as a fixed-size tuple (no length
/// prefix), like every other fixed-size field.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Signature(pub [u8; 64]);

impl std::fmt::Debug for Signature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signature(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "..)")
    }
}

impl Serialize for Signature {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut tuple = serializer.serialize_tuple(64)?;
        for byte in &self.0 {
            tuple.serialize_element(byte)?;
        }
        tuple.end()
    }
}

impl<'de> Deserialize<'de> for Signature {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Bytes64;
        impl<'de> serde::de::Visitor<'de> for Bytes64 {
            type Value = Signature;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("64 signature bytes")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Signature, A::Error> {
                let mut out = [0u8; 64];
                for (i, slot) in out.iter_mut().enumerate() {
                    *slot = seq
                        .next_element()?
                        .ok_or_else(|| serde::de::Error::invalid_length(i, &self))?;
                }
                Ok(Signature(out))
            }
        }
        deserializer.deserialize_tuple(64, Bytes64)
    }
}

/// GenerationIdentity: what every credential, manifest and session binding
/// of one generation names (spec 3.3 "this specification's generation
/// identity").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationIdentity {
    pub agent_profile: ProfileName,
    pub domain_id: DomainId,
    pub generation_id: GenerationId,
    pub configuration_fingerprint: ConfigurationFingerprint,
    pub coordinator_id: CoordinatorId,
    pub sandbox_id: SandboxId,
}

/// TrustManifest: binds the generation's TLS CA and protocol issuer to its
/// identity; signed by the protocol issuer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustManifest {
    pub protocol_version: u16,
    pub generation_identity: GenerationIdentity,
    /// SHA-256 of the TLS CA certificate's DER.
    pub tls_ca_sha256: Digest,
    pub protocol_issuer_public_key: PublicKey,
    pub issuer_signature: Signature,
}

/// The manifest's signed fields (all but `issuer_signature`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustManifestClaims {
    pub protocol_version: u16,
    pub generation_identity: GenerationIdentity,
    pub tls_ca_sha256: Digest,
    pub protocol_issuer_public_key: PublicKey,
}

impl TrustManifest {
    pub fn claims(&self) -> TrustManifestClaims {
        TrustManifestClaims {
            protocol_version: self.protocol_version,
            generation_identity: self.generation_identity.clone(),
            tls_ca_sha256: self.tls_ca_sha256,
            protocol_issuer_public_key: self.protocol_issuer_public_key,
        }
    }
}

/// ProtocolCredentialRole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProtocolCredentialRole {
    SessionCoordinator,
    AgentSandbox,
}

/// ProtocolCredential: a protocol signing key of one role, issued by the
/// generation's protocol issuer. `subject_id` is the Session Coordinator
/// ID or the Agent Sandbox ID of the generation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtocolCredential {
    pub protocol_version: u16,
    pub credential_id: Digest,
    pub generation_identity: GenerationIdentity,
    pub role: ProtocolCredentialRole,
    pub subject_id: [u8; 16],
    pub public_key: PublicKey,
    pub issuer_signature: Signature,
}

/// The credential's claims (all but `credential_id` and
/// `issuer_signature`): digested into the ID and signed by the issuer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtocolCredentialClaims {
    pub protocol_version: u16,
    pub generation_identity: GenerationIdentity,
    pub role: ProtocolCredentialRole,
    pub subject_id: [u8; 16],
    pub public_key: PublicKey,
}

impl ProtocolCredential {
    pub fn claims(&self) -> ProtocolCredentialClaims {
        ProtocolCredentialClaims {
            protocol_version: self.protocol_version,
            generation_identity: self.generation_identity.clone(),
            role: self.role,
            subject_id: self.subject_id,
            public_key: self.public_key,
        }
    }
}

/// SessionBinding: one Client Session of one Client CLI, and the public
/// key of the Session Anchor the CLI holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionBinding {
    pub generation_identity: GenerationIdentity,
    pub cli_id: CliId,
    pub session_id: SessionId,
    pub session_anchor_public_key: PublicKey,
}

impl SessionBinding {
    /// The Session record's `session_anchor_id`: SHA-256 of the anchor's
    /// public key (schemas.md Session; records::ids::SessionAnchorId).
    pub fn session_anchor_id(&self) -> SessionAnchorId {
        SessionAnchorId(crate::signing::sha256(&self.session_anchor_public_key))
    }
}

/// SessionRequestCapability: the Session Coordinator's signed statement
/// that `session_binding` may make requests with the sandbox credential
/// `sandbox_credential_id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRequestCapability {
    pub protocol_version: u16,
    pub capability_id: Digest,
    pub session_binding: SessionBinding,
    pub coordinator_credential_id: Digest,
    pub sandbox_credential_id: Digest,
    pub coordinator_signature: Signature,
}

/// The capability's claims (all but `capability_id` and
/// `coordinator_signature`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRequestCapabilityClaims {
    pub protocol_version: u16,
    pub session_binding: SessionBinding,
    pub coordinator_credential_id: Digest,
    pub sandbox_credential_id: Digest,
}

impl SessionRequestCapability {
    pub fn claims(&self) -> SessionRequestCapabilityClaims {
        SessionRequestCapabilityClaims {
            protocol_version: self.protocol_version,
            session_binding: self.session_binding.clone(),
            coordinator_credential_id: self.coordinator_credential_id,
            sandbox_credential_id: self.sandbox_credential_id,
        }
    }
}

/// SessionRegistrationRequest: a Client CLI asks for a Session Request
/// Capability for `session_binding` (its Session ID, Client CLI ID and
/// Session Anchor under the generation it expects).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRegistrationRequest {
    pub protocol_version: u16,
    pub session_binding: SessionBinding,
}

/// SessionRegistrationResponse.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRegistrationResponse {
    pub protocol_version: u16,
    pub session_capability: SessionRequestCapability,
}

/// SandboxCredentialBundle: what the Agent Sandbox reads at the fixed
/// credential path ([`crate::bundle::CREDENTIALS`]): its request-signing
/// key and credential, the manifest, and the Session Coordinator's
/// credential it verifies the coordinator's records by. No other private
/// key is in it (spec 3.3).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxCredentialBundle {
    pub protocol_version: u16,
    pub generation_identity: GenerationIdentity,
    pub trust_manifest: TrustManifest,
    pub coordinator_protocol_credential: ProtocolCredential,
    pub sandbox_protocol_credential: ProtocolCredential,
    /// The sandbox request-signing key's Ed25519 seed.
    pub sandbox_private_key: [u8; 32],
}

impl std::fmt::Debug for SandboxCredentialBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxCredentialBundle")
            .field("generation_identity", &self.generation_identity)
            .field(
                "sandbox_credential",
                &self.sandbox_protocol_credential.credential_id,
            )
            .finish_non_exhaustive()
    }
}

/// The encoding buffer of a sandbox credential bundle: more than any
/// bundle needs (three generation identities with profile names of at most
/// 256 bytes, two credentials, a key: under 2 KiB).
const BUNDLE_BUFFER: usize = 8192;

impl SandboxCredentialBundle {
    /// The bundle's v1 encoding, written into one buffer allocated up front
    /// (so no reallocation leaves an unwiped copy of the key behind) and
    /// zeroed when dropped.
    pub fn encode_secret(&self) -> Result<zeroize::Zeroizing<Vec<u8>>, CodecError> {
        postcard::to_extend(self, Vec::with_capacity(BUNDLE_BUFFER))
            .map(zeroize::Zeroizing::new)
            .map_err(|source| CodecError::Encode {
                record: Self::NAME,
                source,
            })
    }
}

impl Drop for SandboxCredentialBundle {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.sandbox_private_key);
    }
}

/// TlsRole: whose TLS leaf a [`TlsCredential`] carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TlsRole {
    SessionCoordinator,
    ClientCli,
}

/// TlsCredential: a TLS leaf the generation's CA issued. `subject_id` is
/// the Session Coordinator ID or the Client CLI ID.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TlsCredential {
    pub generation_identity: GenerationIdentity,
    pub role: TlsRole,
    pub subject_id: [u8; 16],
    pub certificate_der: Vec<u8>,
    pub certificate_sha256: Digest,
}

/// ProtocolPublicationIdentity: what the Host Coordinator publishes in the
/// host-private Domain path before it accepts a connection (spec 3.3): the
/// generation's TLS CA, and the digests that pin its Trust Manifest and
/// its own TLS leaf.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtocolPublicationIdentity {
    pub protocol_version: u16,
    pub generation_identity: GenerationIdentity,
    pub tls_ca_certificate_der: Vec<u8>,
    pub trust_manifest_sha256: Digest,
    pub coordinator_tls_certificate_sha256: Digest,
}

/// ClientEnrollmentRequest: a Client CLI's request for a `clientAuth` leaf
/// of the published generation, for the key its CSR proves it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientEnrollmentRequest {
    pub protocol_version: u16,
    pub generation_identity: GenerationIdentity,
    pub cli_id: CliId,
    pub certificate_signing_request_der: Vec<u8>,
}

/// ClientEnrollmentResponse: the issued leaf.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientEnrollmentResponse {
    pub protocol_version: u16,
    pub credential: TlsCredential,
}

/// The records with a v1 codec, named as in their signature input
/// (lower-kebab record names, schemas.md).
pub trait ProtocolRecord: Serialize + serde::de::DeserializeOwned {
    /// The lower-kebab record name.
    const NAME: &'static str;

    /// The record's minimal Postcard encoding.
    fn encode(&self) -> Result<Vec<u8>, CodecError> {
        codec::encode(Self::NAME, self)
    }

    /// Exactly one record; trailing bytes are refused.
    fn decode(bytes: &[u8]) -> Result<Self, CodecError> {
        codec::decode(Self::NAME, bytes)
    }
}

macro_rules! record_name {
    ($($ty:ty => $name:literal),* $(,)?) => {
        $(impl ProtocolRecord for $ty {
            const NAME: &'static str = $name;
        })*
    };
}

record_name!(
    GenerationIdentity => "generation-identity",
    TrustManifest => "trust-manifest",
    TrustManifestClaims => "trust-manifest",
    ProtocolCredential => "protocol-credential",
    ProtocolCredentialClaims => "protocol-credential",
    SessionBinding => "session-binding",
    SessionRequestCapability => "session-request-capability",
    SessionRequestCapabilityClaims => "session-request-capability",
    SessionRegistrationRequest => "session-registration-request",
    SessionRegistrationResponse => "session-registration-response",
    SandboxCredentialBundle => "sandbox-credential-bundle",
    TlsCredential => "tls-credential",
    ProtocolPublicationIdentity => "protocol-publication-identity",
    ClientEnrollmentRequest => "client-enrollment-request",
    ClientEnrollmentResponse => "client-enrollment-response",
);
