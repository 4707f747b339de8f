//! The host-private control socket's TLS (spec 3.3 "Protocol cryptography
//! refinement"; SR-9): TLS 1.3 only with the generation's CA, ALPN
//! [`ALPN`], no early data, no resumption; a connection without a client
//! certificate may only enroll, every other operation runs on a new mTLS
//! connection whose leaf the coordinator issued to that Client CLI for this
//! generation.
//!
//! Sans-IO: the coordinator's [`TlsAuthority`] and the client's
//! [`ClientTlsKey`] build rustls configurations, issue and check leaves and
//! enrollment records; time is an input. The socket and its byte relay are
//! the effects layer's.
use std::collections::BTreeMap;
use std::sync::Arc;

use ed25519_dalek::pkcs8::EncodePrivateKey;
use ed25519_dalek::SigningKey;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{
    CertificateDer, CertificateSigningRequestDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName,
    UnixTime,
};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};

use super::records::{
    ClientEnrollmentRequest, ClientEnrollmentResponse, Digest, GenerationIdentity,
    ProtocolPublicationIdentity, TlsCredential, TlsRole,
};
use super::signing::sha256;
use super::PROTOCOL_VERSION;
use crate::records::codec::CodecError;
use crate::records::ids::CliId;

/// The control protocol's only ALPN protocol.
pub const ALPN: &[u8] = b"lazaret-control/1";
/// The name the Session Coordinator's `serverAuth` leaf is issued for.
pub const SERVER_NAME: &str = "coordinator.lazaret.invalid";
/// The largest enrollment request (its whole frame) a connection without a
/// client certificate may send.
pub const ENROLLMENT_LIMIT: usize = 8192;
/// How long an issued Client CLI leaf is valid.
pub const CLIENT_LEAF_SECS: i64 = 60 * 60;
/// How far before issue a leaf's validity starts (clock steps).
pub const LEAF_BACKDATE_SECS: i64 = 60;
/// How long the coordinator's own leaf is valid: as long as its CA.
pub const COORDINATOR_LEAF_SECS: i64 = super::trust_anchor::TLS_CA_VALIDITY_SECS;
/// The most Client CLI leaves one generation keeps valid at once; expired
/// ones are forgotten at the next enrollment.
pub const ENROLLED_LIMIT: usize = 4096;

/// Why a TLS configuration, leaf or record could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot encode an Ed25519 key as PKCS#8: {0}")]
    Key(ed25519_dalek::pkcs8::Error),
    #[error("cannot build the {what} certificate: {source}")]
    Certificate {
        what: &'static str,
        source: rcgen::Error,
    },
    #[error("the {what} validity does not fit a certificate date (at {at} s since the epoch)")]
    Validity { what: &'static str, at: i64 },
    #[error("the TLS CA certificate is not a usable trust root: {0}")]
    Root(rustls::Error),
    #[error("cannot build the {what} TLS configuration: {source}")]
    Config {
        what: &'static str,
        source: rustls::Error,
    },
    #[error("cannot build the client certificate verifier: {0}")]
    ClientVerifier(rustls::server::VerifierBuilderError),
    #[error("cannot build the coordinator certificate verifier: {0}")]
    ServerVerifier(rustls::server::VerifierBuilderError),
    #[error("cannot encode the {0}")]
    Codec(#[from] CodecError),
    #[error("{SERVER_NAME} is not a valid server name")]
    ServerName,
}

/// Why an enrollment request is refused (each names its check).
#[derive(Debug, thiserror::Error)]
pub enum EnrollError {
    #[error("the enrollment request speaks protocol version {found}, not {PROTOCOL_VERSION}")]
    Version { found: u16 },
    #[error("the enrollment request names generation {found} of Domain {domain}, not this coordinator's generation {ours}: the client read a stale publication")]
    StaleGeneration {
        domain: crate::records::ids::DomainId,
        found: u64,
        ours: u64,
    },
    #[error(
        "the certificate signing request does not parse or its signature does not verify: {0}"
    )]
    Csr(rcgen::Error),
    #[error("the certificate signing request's key is not Ed25519")]
    KeyAlgorithm,
    #[error("Client CLI {0} is already enrolled in this generation")]
    CliIdTaken(CliId),
    #[error("this generation already holds {ENROLLED_LIMIT} valid Client CLI leaves")]
    Full,
    #[error(transparent)]
    Issue(#[from] TlsError),
}

/// Why an authenticated connection's leaf is not a Client CLI of this
/// generation.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("the client leaf is not one this coordinator issued in this generation")]
    NotIssued,
    #[error("Client CLI {cli_id}'s leaf expired at {not_after} s since the epoch")]
    Expired { cli_id: CliId, not_after: i64 },
    #[error(
        "the connection did not negotiate ALPN {}",
        String::from_utf8_lossy(ALPN)
    )]
    Alpn,
    #[error("the connection did not negotiate TLS 1.3")]
    Version,
}

/// What tells rustls the time for certificate validity: the caller's
/// (the effects layer passes the system clock; tests a fixed time).
pub type Clock = Arc<dyn rustls::time_provider::TimeProvider>;

/// The crypto provider of every control-socket configuration.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// An rcgen key pair for an Ed25519 key (rcgen keeps its own copy of the
/// PKCS#8 bytes, unwiped: docs/control-protocol.md); the encoding it is
/// made from is zeroed when dropped.
fn rcgen_key(key: &SigningKey) -> Result<rcgen::KeyPair, TlsError> {
    let pkcs8 = key.to_pkcs8_der().map_err(TlsError::Key)?;
    let der = PrivatePkcs8KeyDer::from(pkcs8.as_bytes());
    rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_ED25519).map_err(|source| {
        TlsError::Certificate {
            what: "key",
            source,
        }
    })
}

/// The PKCS#8 encoding of an Ed25519 key that a rustls configuration takes
/// ownership of (and keeps, unwiped, as its signing key).
fn rustls_key(key: &SigningKey) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pkcs8 = key.to_pkcs8_der().map_err(TlsError::Key)?;
    Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        pkcs8.as_bytes().to_vec(),
    )))
}

fn date(what: &'static str, at: i64) -> Result<time::OffsetDateTime, TlsError> {
    time::OffsetDateTime::from_unix_timestamp(at).map_err(|_| TlsError::Validity { what, at })
}

/// A positive 16-byte serial from a digest.
fn serial(digest: &Digest) -> rcgen::SerialNumber {
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    rcgen::SerialNumber::from_slice(&bytes)
}

/// One Client CLI leaf this coordinator issued.
#[derive(Clone, Copy, Debug)]
struct Enrolled {
    cli_id: CliId,
    not_after: i64,
}

/// The generation's TLS authority, held by the Host Coordinator's acceptor
/// only: the CA key and certificate, the coordinator's `serverAuth` leaf
/// and the server configuration that holds its key, the publication
/// identity, and the Client CLI leaves issued so far.
pub struct TlsAuthority {
    identity: GenerationIdentity,
    ca_certificate: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
    server_config: Arc<ServerConfig>,
    publication: ProtocolPublicationIdentity,
    coordinator_credential: TlsCredential,
    enrolled: BTreeMap<Digest, Enrolled>,
}

impl std::fmt::Debug for TlsAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsAuthority")
            .field("generation", &self.identity.generation_id)
            .field("enrolled", &self.enrolled.len())
            .finish_non_exhaustive()
    }
}

impl TlsAuthority {
    /// The generation every credential of this authority is bound to.
    pub fn generation_identity(&self) -> &GenerationIdentity {
        &self.identity
    }

    /// The authority of the CA `ca_key` certified by `ca_certificate`, with
    /// the coordinator's leaf for `coordinator_key`, issued at `now`; the
    /// publication pins `trust_manifest_sha256`.
    pub(crate) fn new(
        identity: GenerationIdentity,
        ca_certificate: rcgen::Certificate,
        ca_key: rcgen::KeyPair,
        coordinator_key: &SigningKey,
        trust_manifest_sha256: Digest,
        now: i64,
        clock: Clock,
    ) -> Result<Self, TlsError> {
        let pair = rcgen_key(coordinator_key)?;
        let mut params =
            rcgen::CertificateParams::new(vec![SERVER_NAME.to_owned()]).map_err(|source| {
                TlsError::Certificate {
                    what: "coordinator",
                    source,
                }
            })?;
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("Lazaret coordinator {}", identity.coordinator_id),
        );
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.serial_number = Some(serial(&sha256(&coordinator_key.verifying_key().to_bytes())));
        params.not_before = date("coordinator leaf", now.saturating_sub(LEAF_BACKDATE_SECS))?;
        params.not_after = date(
            "coordinator leaf",
            now.saturating_add(COORDINATOR_LEAF_SECS),
        )?;
        params.use_authority_key_identifier_extension = true;
        let leaf = params
            .signed_by(&pair, &ca_certificate, &ca_key)
            .map_err(|source| TlsError::Certificate {
                what: "coordinator",
                source,
            })?;
        let leaf_der = leaf.der().clone();
        let ca_der = ca_certificate.der().clone();
        let provider = provider();
        let mut roots = RootCertStore::empty();
        roots.add(ca_der.clone()).map_err(TlsError::Root)?;
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .allow_unauthenticated()
                .build()
                .map_err(TlsError::ClientVerifier)?;
        let config = |source| TlsError::Config {
            what: "server",
            source,
        };
        let mut server = ServerConfig::builder_with_details(provider, clock)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(config)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![leaf_der.clone()], rustls_key(coordinator_key)?)
            .map_err(config)?;
        server.alpn_protocols = vec![ALPN.to_vec()];
        // No resumption, no early data (spec 3.3): no session cache, no
        // tickets, no early-data window.
        server.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        server.send_tls13_tickets = 0;
        server.max_early_data_size = 0;
        let coordinator_credential = TlsCredential {
            generation_identity: identity.clone(),
            role: TlsRole::SessionCoordinator,
            subject_id: identity.coordinator_id.0,
            certificate_sha256: sha256(&leaf_der),
            certificate_der: leaf_der.to_vec(),
        };
        let publication = ProtocolPublicationIdentity {
            protocol_version: PROTOCOL_VERSION,
            generation_identity: identity.clone(),
            tls_ca_certificate_der: ca_der.to_vec(),
            trust_manifest_sha256,
            coordinator_tls_certificate_sha256: coordinator_credential.certificate_sha256,
        };
        Ok(Self {
            identity,
            ca_certificate,
            ca_key,
            server_config: Arc::new(server),
            publication,
            coordinator_credential,
            enrolled: BTreeMap::new(),
        })
    }

    /// What the coordinator publishes before it accepts a connection.
    pub fn publication(&self) -> &ProtocolPublicationIdentity {
        &self.publication
    }

    /// The coordinator's own `serverAuth` leaf.
    pub fn coordinator_credential(&self) -> &TlsCredential {
        &self.coordinator_credential
    }

    /// The server side of every control connection.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.server_config)
    }

    /// Enrollment (spec 3.3): for a request naming this generation, a CSR
    /// whose signature proves its Ed25519 key, and a Client CLI ID not yet
    /// enrolled, a `clientAuth` leaf valid for [`CLIENT_LEAF_SECS`] from
    /// `now`. Nothing of the CSR but its key is used: the leaf's name,
    /// usages and dates are the coordinator's. The caller has checked the
    /// request's size and its peer's UID.
    pub fn enroll(
        &mut self,
        request: &ClientEnrollmentRequest,
        now: i64,
    ) -> Result<ClientEnrollmentResponse, EnrollError> {
        if request.protocol_version != PROTOCOL_VERSION {
            return Err(EnrollError::Version {
                found: request.protocol_version,
            });
        }
        if request.generation_identity != self.identity {
            return Err(EnrollError::StaleGeneration {
                domain: request.generation_identity.domain_id,
                found: request.generation_identity.generation_id.0,
                ours: self.identity.generation_id.0,
            });
        }
        let csr = rcgen::CertificateSigningRequestParams::from_der(
            &CertificateSigningRequestDer::from(request.certificate_signing_request_der.as_slice()),
        )
        .map_err(EnrollError::Csr)?;
        if csr.public_key.algorithm() != &rcgen::PKCS_ED25519 {
            return Err(EnrollError::KeyAlgorithm);
        }
        self.enrolled.retain(|_, e| e.not_after > now);
        if self.enrolled.values().any(|e| e.cli_id == request.cli_id) {
            return Err(EnrollError::CliIdTaken(request.cli_id));
        }
        if self.enrolled.len() >= ENROLLED_LIMIT {
            return Err(EnrollError::Full);
        }
        let not_after = now.saturating_add(CLIENT_LEAF_SECS);
        let issue = |source| TlsError::Certificate {
            what: "client",
            source,
        };
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("Lazaret client {}", request.cli_id),
        );
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        params.serial_number = Some(serial(&sha256(&encode_for_serial(request)?)));
        params.not_before = date("client leaf", now.saturating_sub(LEAF_BACKDATE_SECS))?;
        params.not_after = date("client leaf", not_after)?;
        params.use_authority_key_identifier_extension = true;
        let leaf = params
            .signed_by(&csr.public_key, &self.ca_certificate, &self.ca_key)
            .map_err(issue)?;
        let der = leaf.der().to_vec();
        let digest = sha256(&der);
        self.enrolled.insert(
            digest,
            Enrolled {
                cli_id: request.cli_id,
                not_after,
            },
        );
        Ok(ClientEnrollmentResponse {
            protocol_version: PROTOCOL_VERSION,
            credential: TlsCredential {
                generation_identity: self.identity.clone(),
                role: TlsRole::ClientCli,
                subject_id: request.cli_id.0,
                certificate_der: der,
                certificate_sha256: digest,
            },
        })
    }

    /// The Client CLI an established connection's leaf was issued to, or
    /// `None` for a connection without a client certificate (which may
    /// only enroll). rustls verified the chain to this generation's CA,
    /// its `clientAuth` usage and its dates during the handshake; this
    /// checks that the leaf is one this coordinator issued, still valid at
    /// `now`, and that the connection is TLS 1.3 with [`ALPN`].
    pub fn authenticate(
        &self,
        connection: &rustls::ServerConnection,
        now: i64,
    ) -> Result<Option<CliId>, PeerError> {
        if connection.protocol_version() != Some(rustls::ProtocolVersion::TLSv1_3) {
            return Err(PeerError::Version);
        }
        if connection.alpn_protocol() != Some(ALPN) {
            return Err(PeerError::Alpn);
        }
        let Some(leaf) = connection.peer_certificates().and_then(|c| c.first()) else {
            return Ok(None);
        };
        let enrolled = self
            .enrolled
            .get(&sha256(leaf))
            .ok_or(PeerError::NotIssued)?;
        if enrolled.not_after <= now {
            return Err(PeerError::Expired {
                cli_id: enrolled.cli_id,
                not_after: enrolled.not_after,
            });
        }
        Ok(Some(enrolled.cli_id))
    }
}

/// The bytes a leaf's serial is derived from (the whole request).
fn encode_for_serial(request: &ClientEnrollmentRequest) -> Result<Vec<u8>, TlsError> {
    use super::records::ProtocolRecord;
    Ok(request.encode()?)
}

/// Why a Client CLI refuses what the coordinator published or issued.
#[derive(Debug, thiserror::Error)]
pub enum ClientTlsError {
    #[error("the publication identity speaks protocol version {found}, not {PROTOCOL_VERSION}")]
    PublicationVersion { found: u16 },
    #[error("the publication identity names Domain {found}, not the resolved {expected}")]
    PublicationDomain {
        expected: crate::records::ids::DomainId,
        found: crate::records::ids::DomainId,
    },
    #[error("the enrollment response speaks protocol version {found}, not {PROTOCOL_VERSION}")]
    ResponseVersion { found: u16 },
    #[error(
        "the issued leaf is not a Client CLI leaf for this client of the published generation"
    )]
    ResponseSubject,
    #[error("the issued leaf's digest does not match its certificate")]
    ResponseDigest,
    #[error("cannot build the certificate signing request: {0}")]
    Csr(rcgen::Error),
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// The server name every control connection verifies.
pub fn server_name() -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(SERVER_NAME).map_err(|_| TlsError::ServerName)
}

/// A Client CLI's TLS key: Ed25519, held in the CLI's memory for one join.
pub struct ClientTlsKey {
    key: SigningKey,
}

impl std::fmt::Debug for ClientTlsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTlsKey(..)")
    }
}

impl ClientTlsKey {
    /// The key of `seed` (the caller zeroes its copy).
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        Self {
            key: SigningKey::from_bytes(seed),
        }
    }

    /// The request for a leaf of `publication`'s generation as `cli_id`.
    pub fn enrollment_request(
        &self,
        publication: &ProtocolPublicationIdentity,
        cli_id: CliId,
    ) -> Result<ClientEnrollmentRequest, ClientTlsError> {
        let pair = rcgen_key(&self.key)?;
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("Lazaret client {cli_id}"),
        );
        let csr = params
            .serialize_request(&pair)
            .map_err(ClientTlsError::Csr)?;
        Ok(ClientEnrollmentRequest {
            protocol_version: PROTOCOL_VERSION,
            generation_identity: publication.generation_identity.clone(),
            cli_id,
            certificate_signing_request_der: csr.der().to_vec(),
        })
    }

    /// The leaf of `response`, once it is checked to be a Client CLI leaf
    /// for `cli_id` of the published generation.
    pub fn accept_enrollment(
        publication: &ProtocolPublicationIdentity,
        cli_id: CliId,
        response: ClientEnrollmentResponse,
    ) -> Result<TlsCredential, ClientTlsError> {
        if response.protocol_version != PROTOCOL_VERSION {
            return Err(ClientTlsError::ResponseVersion {
                found: response.protocol_version,
            });
        }
        let credential = response.credential;
        if credential.role != TlsRole::ClientCli
            || credential.subject_id != cli_id.0
            || credential.generation_identity != publication.generation_identity
        {
            return Err(ClientTlsError::ResponseSubject);
        }
        if sha256(&credential.certificate_der) != credential.certificate_sha256 {
            return Err(ClientTlsError::ResponseDigest);
        }
        Ok(credential)
    }

    /// The configuration of the enrollment connection (no client
    /// certificate) to the coordinator `publication` pins.
    pub fn enrollment_config(
        publication: &ProtocolPublicationIdentity,
        clock: Clock,
    ) -> Result<Arc<ClientConfig>, ClientTlsError> {
        let builder = client_builder(publication, clock)?;
        Ok(finish_client(builder.with_no_client_auth()))
    }

    /// The configuration of an operation's mTLS connection with the leaf
    /// `credential` issued for this key.
    pub fn session_config(
        &self,
        publication: &ProtocolPublicationIdentity,
        credential: &TlsCredential,
        clock: Clock,
    ) -> Result<Arc<ClientConfig>, ClientTlsError> {
        let builder = client_builder(publication, clock)?;
        let config = builder
            .with_client_auth_cert(
                vec![CertificateDer::from(credential.certificate_der.clone())],
                rustls_key(&self.key)?,
            )
            .map_err(|source| TlsError::Config {
                what: "client",
                source,
            })?;
        Ok(finish_client(config))
    }
}

/// Checks what a Client CLI read from the Domain's publication path
/// against the Domain it resolved.
pub fn check_publication(
    publication: &ProtocolPublicationIdentity,
    domain_id: crate::records::ids::DomainId,
) -> Result<(), ClientTlsError> {
    if publication.protocol_version != PROTOCOL_VERSION {
        return Err(ClientTlsError::PublicationVersion {
            found: publication.protocol_version,
        });
    }
    if publication.generation_identity.domain_id != domain_id {
        return Err(ClientTlsError::PublicationDomain {
            expected: domain_id,
            found: publication.generation_identity.domain_id,
        });
    }
    Ok(())
}

type ClientBuilder = rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>;

fn client_builder(
    publication: &ProtocolPublicationIdentity,
    clock: Clock,
) -> Result<ClientBuilder, TlsError> {
    let provider = provider();
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(
            publication.tls_ca_certificate_der.clone(),
        ))
        .map_err(TlsError::Root)?;
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(TlsError::ServerVerifier)?;
    let verifier = PinnedCoordinator {
        inner,
        pin: publication.coordinator_tls_certificate_sha256,
    };
    Ok(ClientConfig::builder_with_details(provider, clock)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|source| TlsError::Config {
            what: "client",
            source,
        })?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier)))
}

fn finish_client(mut config: ClientConfig) -> Arc<ClientConfig> {
    config.alpn_protocols = vec![ALPN.to_vec()];
    config.resumption = rustls::client::Resumption::disabled();
    config.enable_early_data = false;
    Arc::new(config)
}

/// Why the coordinator's leaf is refused although it chains to the CA.
#[derive(Debug, thiserror::Error)]
#[error("the coordinator's TLS leaf is not the one its publication identity pins")]
pub struct UnpinnedCoordinatorLeaf;

/// The Client CLI's check of the coordinator: the leaf must be exactly the
/// one the publication identity pins, and chain to the published CA as a
/// `serverAuth` leaf for [`SERVER_NAME`] (webpki).
#[derive(Debug)]
struct PinnedCoordinator {
    inner: Arc<WebPkiServerVerifier>,
    pin: Digest,
}

impl ServerCertVerifier for PinnedCoordinator {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if sha256(end_entity) != self.pin {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Other(rustls::OtherError(Arc::new(
                    UnpinnedCoordinatorLeaf,
                ))),
            ));
        }
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
