//! The generation's ephemeral Trust Anchor package (spec 3.3 "Protocol
//! cryptography refinement"): separate Ed25519 TLS-CA and protocol-issuer
//! keys, a Trust Manifest the issuer signs over the generation identity,
//! the Session Coordinator's protocol credential and signing key, and the
//! Agent Sandbox's request-signing credential.
//!
//! Built purely from [`TrustAnchorSeeds`] and the current time; the Host
//! Coordinator draws the seeds from the kernel's random source and holds
//! the package in memory for its generation only.
//!
//! What this build keeps: the manifest, both protocol credentials, the TLS
//! CA certificate and the coordinator's signing key (it signs every Session
//! Request Capability). The issuer key is dropped as soon as the manifest
//! and the two credentials are signed: nothing else is ever issued by it.
//! The sandbox request-signing key is kept only until the credential
//! bundle that carries it into the sandbox is taken
//! ([`TrustAnchor::take_sandbox_bundle`]); after that the package holds
//! its public half only (spec 3.3). The TLS CA key and the coordinator's
//! TLS leaf key go to the [`TlsAuthority`] built with the package, which
//! the control socket's acceptor holds.
use ed25519_dalek::pkcs8::EncodePrivateKey;
use ed25519_dalek::SigningKey;
use zeroize::Zeroize;

use super::mailbox::{seal, MailboxError, MailboxResult, MailboxResultChunk};
use super::records::{Digest, ProtocolRecord};
use super::records::{
    GenerationIdentity, ProtocolCredential, ProtocolCredentialClaims, ProtocolCredentialRole,
    SandboxCredentialBundle, SessionBinding, SessionRegistrationResponse, SessionRequestCapability,
    SessionRequestCapabilityClaims, TrustManifest, TrustManifestClaims,
};
use super::signing::{sha256, sign};
use super::tls::{Clock, TlsAuthority, TlsError};
use super::PROTOCOL_VERSION;
use crate::records::codec::CodecError;
use crate::records::ids::{CliId, SessionId};

/// How long the generation's TLS CA certificate is valid: longer than any
/// generation is expected to run; a generation is ended by its lease, not
/// by this date.
pub const TLS_CA_VALIDITY_SECS: i64 = 90 * 24 * 60 * 60;
/// How far before `now` the TLS CA's validity starts (clock steps).
pub const TLS_CA_BACKDATE_SECS: i64 = 60;

/// The random inputs of one Trust Anchor; zeroed when dropped.
pub struct TrustAnchorSeeds {
    pub tls_ca: [u8; 32],
    pub tls_ca_serial: [u8; 16],
    pub issuer: [u8; 32],
    pub coordinator: [u8; 32],
    /// The Session Coordinator's TLS leaf key.
    pub coordinator_tls: [u8; 32],
    pub sandbox: [u8; 32],
}

impl Drop for TrustAnchorSeeds {
    fn drop(&mut self) {
        self.tls_ca.zeroize();
        self.issuer.zeroize();
        self.coordinator.zeroize();
        self.coordinator_tls.zeroize();
        self.sandbox.zeroize();
    }
}

impl std::fmt::Debug for TrustAnchorSeeds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TrustAnchorSeeds(..)")
    }
}

/// Why a Trust Anchor could not be built or a capability issued.
#[derive(Debug, thiserror::Error)]
pub enum TrustAnchorError {
    #[error("cannot encode a protocol record: {0}")]
    Codec(#[from] CodecError),
    #[error("cannot encode the TLS CA key as PKCS#8: {0}")]
    CaKey(ed25519_dalek::pkcs8::Error),
    #[error("cannot build the generation's TLS CA certificate: {0}")]
    CaCertificate(rcgen::Error),
    #[error("the TLS CA validity does not fit a certificate date (now = {now} s since the epoch)")]
    CaValidity { now: i64 },
    #[error("the control socket's TLS: {0}")]
    Tls(#[from] TlsError),
}

/// One generation's Trust Anchor package, held only by its Host
/// Coordinator.
pub struct TrustAnchor {
    manifest: TrustManifest,
    tls_ca_certificate_der: Vec<u8>,
    coordinator_key: SigningKey,
    coordinator_credential: ProtocolCredential,
    sandbox_credential: ProtocolCredential,
    /// Until the credential bundle is taken.
    sandbox_key: Option<SigningKey>,
}

impl std::fmt::Debug for TrustAnchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustAnchor")
            .field("manifest", &self.manifest)
            .field(
                "coordinator_credential",
                &self.coordinator_credential.credential_id,
            )
            .field("sandbox_credential", &self.sandbox_credential.credential_id)
            .finish_non_exhaustive()
    }
}

impl TrustAnchor {
    /// The package for `identity`, from `seeds`, at `now` (seconds since
    /// the Unix epoch), and the generation's [`TlsAuthority`] (its CA key
    /// and the coordinator's TLS leaf, which the control socket's acceptor
    /// holds), whose handshakes judge certificate dates by `clock`.
    pub fn new(
        identity: GenerationIdentity,
        seeds: &TrustAnchorSeeds,
        now: i64,
        clock: Clock,
    ) -> Result<(Self, TlsAuthority), TrustAnchorError> {
        let (ca_certificate, ca_key) = tls_ca_certificate(&identity, seeds, now)?;
        let tls_ca_certificate_der = ca_certificate.der().to_vec();
        let issuer = SigningKey::from_bytes(&seeds.issuer);
        let manifest_claims = TrustManifestClaims {
            protocol_version: PROTOCOL_VERSION,
            generation_identity: identity.clone(),
            tls_ca_sha256: sha256(&tls_ca_certificate_der),
            protocol_issuer_public_key: issuer.verifying_key().to_bytes(),
        };
        let (_, issuer_signature) = sign(&issuer, &manifest_claims)?;
        let manifest = TrustManifest {
            protocol_version: manifest_claims.protocol_version,
            generation_identity: manifest_claims.generation_identity,
            tls_ca_sha256: manifest_claims.tls_ca_sha256,
            protocol_issuer_public_key: manifest_claims.protocol_issuer_public_key,
            issuer_signature,
        };
        let coordinator_key = SigningKey::from_bytes(&seeds.coordinator);
        let coordinator_credential = issue(
            &issuer,
            &identity,
            ProtocolCredentialRole::SessionCoordinator,
            identity.coordinator_id.0,
            &coordinator_key,
        )?;
        let sandbox_key = SigningKey::from_bytes(&seeds.sandbox);
        let sandbox_credential = issue(
            &issuer,
            &identity,
            ProtocolCredentialRole::AgentSandbox,
            identity.sandbox_id.0,
            &sandbox_key,
        )?;
        let tls = TlsAuthority::new(
            identity,
            ca_certificate,
            ca_key,
            &SigningKey::from_bytes(&seeds.coordinator_tls),
            sha256(&manifest.encode()?),
            now,
            clock,
        )?;
        let anchor = Self {
            manifest,
            tls_ca_certificate_der,
            coordinator_key,
            coordinator_credential,
            sandbox_credential,
            sandbox_key: Some(sandbox_key),
        };
        Ok((anchor, tls))
    }

    /// The Agent Sandbox's credential bundle, once: the sandbox
    /// request-signing key leaves the package with it (spec 3.3: HC
    /// "retains only its public key"). `None` when it was taken.
    pub fn take_sandbox_bundle(&mut self) -> Option<SandboxCredentialBundle> {
        let key = self.sandbox_key.take()?;
        Some(SandboxCredentialBundle {
            protocol_version: PROTOCOL_VERSION,
            generation_identity: self.manifest.generation_identity.clone(),
            trust_manifest: self.manifest.clone(),
            coordinator_protocol_credential: self.coordinator_credential.clone(),
            sandbox_protocol_credential: self.sandbox_credential.clone(),
            sandbox_private_key: key.to_bytes(),
        })
    }

    pub fn manifest(&self) -> &TrustManifest {
        &self.manifest
    }

    pub fn tls_ca_certificate_der(&self) -> &[u8] {
        &self.tls_ca_certificate_der
    }

    pub fn coordinator_credential(&self) -> &ProtocolCredential {
        &self.coordinator_credential
    }

    pub fn sandbox_credential(&self) -> &ProtocolCredential {
        &self.sandbox_credential
    }

    /// What signs this generation's escalation chunks and results: a copy
    /// of the Session Coordinator's protocol key (zeroed when dropped) with
    /// its credential ID, for the Host Coordinator's mailbox service.
    pub fn result_signer(&self) -> ResultSigner {
        ResultSigner {
            key: self.coordinator_key.clone(),
            credential_id: self.coordinator_credential.credential_id,
        }
    }

    /// Session registration (spec 3.3; schemas SessionRegistrationResponse):
    /// the Session Request Capability binding `session_id` of `cli_id` to
    /// the Session Anchor `session_anchor_public_key`, signed by the
    /// Session Coordinator's protocol key. The CLI verifies it by the
    /// [`Self::manifest`] and the [`Self::coordinator_credential`].
    pub fn register(
        &self,
        cli_id: CliId,
        session_id: SessionId,
        session_anchor_public_key: [u8; 32],
    ) -> Result<SessionRegistrationResponse, TrustAnchorError> {
        let claims = SessionRequestCapabilityClaims {
            protocol_version: PROTOCOL_VERSION,
            session_binding: SessionBinding {
                generation_identity: self.manifest.generation_identity.clone(),
                cli_id,
                session_id,
                session_anchor_public_key,
            },
            coordinator_credential_id: self.coordinator_credential.credential_id,
            sandbox_credential_id: self.sandbox_credential.credential_id,
        };
        let (capability_id, coordinator_signature) = sign(&self.coordinator_key, &claims)?;
        Ok(SessionRegistrationResponse {
            protocol_version: PROTOCOL_VERSION,
            session_capability: SessionRequestCapability {
                protocol_version: claims.protocol_version,
                capability_id,
                session_binding: claims.session_binding,
                coordinator_credential_id: claims.coordinator_credential_id,
                sandbox_credential_id: claims.sandbox_credential_id,
                coordinator_signature,
            },
        })
    }
}

/// The issuer's credential for `key` in `role`.
fn issue(
    issuer: &SigningKey,
    identity: &GenerationIdentity,
    role: ProtocolCredentialRole,
    subject_id: [u8; 16],
    key: &SigningKey,
) -> Result<ProtocolCredential, TrustAnchorError> {
    let claims = ProtocolCredentialClaims {
        protocol_version: PROTOCOL_VERSION,
        generation_identity: identity.clone(),
        role,
        subject_id,
        public_key: key.verifying_key().to_bytes(),
    };
    let (credential_id, issuer_signature) = sign(issuer, &claims)?;
    Ok(ProtocolCredential {
        protocol_version: claims.protocol_version,
        credential_id,
        generation_identity: claims.generation_identity,
        role: claims.role,
        subject_id: claims.subject_id,
        public_key: claims.public_key,
        issuer_signature,
    })
}

/// The generation's self-signed Ed25519 TLS CA certificate and its key: a
/// CA for leaves only (path length 0), named after the Domain and
/// generation. Ed25519 signatures are deterministic, so the certificate is
/// a function of its inputs.
fn tls_ca_certificate(
    identity: &GenerationIdentity,
    seeds: &TrustAnchorSeeds,
    now: i64,
) -> Result<(rcgen::Certificate, rcgen::KeyPair), TrustAnchorError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose, SerialNumber,
    };
    let key = SigningKey::from_bytes(&seeds.tls_ca);
    let pkcs8 = key.to_pkcs8_der().map_err(TrustAnchorError::CaKey)?;
    let der = rustls_pki_types::PrivatePkcs8KeyDer::from(pkcs8.as_bytes());
    let key_pair = KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_ED25519)
        .map_err(TrustAnchorError::CaCertificate)?;
    let date = |secs: i64| {
        time::OffsetDateTime::from_unix_timestamp(secs)
            .map_err(|_| TrustAnchorError::CaValidity { now })
    };
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.distinguished_name.push(
        DnType::CommonName,
        format!(
            "Lazaret {} generation {} CA",
            identity.domain_id, identity.generation_id.0
        ),
    );
    params.serial_number = Some(SerialNumber::from_slice(&seeds.tls_ca_serial));
    params.not_before = date(now.saturating_sub(TLS_CA_BACKDATE_SECS))?;
    params.not_after = date(now.saturating_add(TLS_CA_VALIDITY_SECS))?;
    let certificate = params
        .self_signed(&key_pair)
        .map_err(TrustAnchorError::CaCertificate)?;
    Ok((certificate, key_pair))
}

/// The Session Coordinator's signer of escalation results (spec 3.8:
/// chunks and terminal results are the coordinator's records).
pub struct ResultSigner {
    key: SigningKey,
    credential_id: Digest,
}

impl std::fmt::Debug for ResultSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultSigner")
            .field("credential_id", &self.credential_id)
            .finish_non_exhaustive()
    }
}

impl ResultSigner {
    /// The coordinator credential the signed records name.
    pub fn credential_id(&self) -> Digest {
        self.credential_id
    }

    /// A terminal Escalation Result as a complete mailbox file, and its
    /// payload's SHA-256.
    pub fn seal_result(&self, result: &MailboxResult) -> Result<(Vec<u8>, Digest), MailboxError> {
        seal(&self.key, result)
    }

    /// One result chunk as a complete mailbox file.
    pub fn seal_chunk(
        &self,
        chunk: &MailboxResultChunk,
    ) -> Result<(Vec<u8>, Digest), MailboxError> {
        seal(&self.key, chunk)
    }
}
