//! The control socket's TLS, handshakes run in memory (rustls is sans-IO):
//! enrollment, mTLS authentication, and every refusal spec 3.3 names.
use std::sync::Arc;

use rustls::{ClientConnection, ServerConnection};

use super::records::{ClientEnrollmentRequest, ProtocolPublicationIdentity, ProtocolRecord};
use super::tests::{fixed_clock, identity, seeds, NOW};
use super::tls::{
    check_publication, server_name, ClientTlsError, ClientTlsKey, EnrollError, PeerError,
    TlsAuthority, UnpinnedCoordinatorLeaf, ALPN, CLIENT_LEAF_SECS,
};
use super::trust_anchor::TrustAnchor;
use crate::records::ids::{CliId, DomainId};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Every handshake here runs at [`NOW`], by the configurations' clock.
fn now() -> i64 {
    NOW
}

fn authority(
    generation: u64,
    base: u8,
) -> Result<(TrustAnchor, TlsAuthority), Box<dyn std::error::Error>> {
    Ok(TrustAnchor::new(
        identity(generation),
        &seeds(base),
        now(),
        fixed_clock(now()),
    )?)
}

/// Which side of an in-memory handshake failed, and why.
#[derive(Debug)]
enum Failed {
    Client(rustls::Error),
    Server(rustls::Error),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for Failed {}

/// Moves every pending TLS record from one side to the other until both
/// are done handshaking (bounded: a TLS 1.3 handshake takes two flights
/// each way).
fn handshake(client: &mut ClientConnection, server: &mut ServerConnection) -> Result<(), Failed> {
    for _ in 0..8 {
        while client.wants_write() {
            let mut buf = Vec::new();
            client
                .write_tls(&mut buf)
                .map_err(|e| Failed::Client(rustls::Error::General(e.to_string())))?;
            let mut rd = buf.as_slice();
            while !rd.is_empty() {
                server
                    .read_tls(&mut rd)
                    .map_err(|e| Failed::Server(rustls::Error::General(e.to_string())))?;
                server.process_new_packets().map_err(Failed::Server)?;
            }
        }
        while server.wants_write() {
            let mut buf = Vec::new();
            server
                .write_tls(&mut buf)
                .map_err(|e| Failed::Server(rustls::Error::General(e.to_string())))?;
            let mut rd = buf.as_slice();
            while !rd.is_empty() {
                client
                    .read_tls(&mut rd)
                    .map_err(|e| Failed::Client(rustls::Error::General(e.to_string())))?;
                client.process_new_packets().map_err(Failed::Client)?;
            }
        }
        if !client.is_handshaking() && !server.is_handshaking() {
            return Ok(());
        }
    }
    Err(Failed::Client(rustls::Error::General(
        "the handshake did not finish".into(),
    )))
}

/// Both ends of one in-memory connection, and how its handshake ended.
type Connected = (ClientConnection, ServerConnection, Result<(), Failed>);

fn connect(
    config: Arc<rustls::ClientConfig>,
    tls: &TlsAuthority,
) -> Result<Connected, Box<dyn std::error::Error>> {
    let mut client = ClientConnection::new(config, server_name()?)?;
    let mut server = ServerConnection::new(tls.server_config())?;
    let done = handshake(&mut client, &mut server);
    Ok((client, server, done))
}

/// Whether the coordinator refused the client's certificate with `expected`.
fn server_refused(
    done: &Result<(), Failed>,
    expected: fn(&rustls::CertificateError) -> bool,
) -> bool {
    matches!(done, Err(Failed::Server(rustls::Error::InvalidCertificate(e))) if expected(e))
}

/// A client key enrolled at `tls` at `at`, with its leaf.
fn enrolled(
    tls: &mut TlsAuthority,
    cli: u8,
    at: i64,
) -> Result<(ClientTlsKey, super::records::TlsCredential), Box<dyn std::error::Error>> {
    let key = ClientTlsKey::from_seed(&[cli; 32]);
    let publication = tls.publication().clone();
    let request = key.enrollment_request(&publication, CliId([cli; 16]))?;
    let response = tls.enroll(&request, at)?;
    let credential = ClientTlsKey::accept_enrollment(&publication, CliId([cli; 16]), response)?;
    Ok((key, credential))
}

/// A client enrolled at `issuer` connecting to `tls` with its leaf: its
/// key and how the handshake ended.
fn leaf_of(
    issuer: &mut TlsAuthority,
    tls: &TlsAuthority,
) -> Result<(ClientTlsKey, Result<(), Failed>), Box<dyn std::error::Error>> {
    let (key, credential) = enrolled(issuer, 7, now())?;
    let (_, _, done) = connect(
        key.session_config(tls.publication(), &credential, fixed_clock(now()))?,
        tls,
    )?;
    Ok((key, done))
}

#[test]
fn an_enrolled_client_authenticates_as_its_cli_id_on_a_new_connection() -> TestResult {
    let (_, mut tls) = authority(1, 10)?;
    let publication = tls.publication().clone();
    check_publication(&publication, DomainId([1; 32]))?;
    // Enrollment runs on a connection without a client certificate.
    let (_, server, done) = connect(
        ClientTlsKey::enrollment_config(&publication, fixed_clock(now()))?,
        &tls,
    )?;
    done?;
    assert_eq!(tls.authenticate(&server, now())?, None);
    assert_eq!(server.alpn_protocol(), Some(ALPN));
    let (key, credential) = enrolled(&mut tls, 7, now())?;
    let (_, server, done) = connect(
        key.session_config(&publication, &credential, fixed_clock(now()))?,
        &tls,
    )?;
    done?;
    assert_eq!(tls.authenticate(&server, now())?, Some(CliId([7; 16])));
    Ok(())
}

#[test]
fn a_client_leaf_from_another_ca_is_refused_in_the_handshake() -> TestResult {
    let (_, tls) = authority(1, 10)?;
    // Another CA for the same generation identity (so of the same name,
    // with another key): the leaf's signature does not verify.
    let (_, mut other) = authority(1, 40)?;
    let (_, done) = leaf_of(&mut other, &tls)?;
    assert!(
        server_refused(&done, |e| matches!(
            e,
            rustls::CertificateError::BadSignature
        )),
        "{done:?}"
    );
    Ok(())
}

#[test]
fn a_leaf_and_an_enrollment_of_the_previous_generation_are_refused() -> TestResult {
    let (_, mut previous) = authority(1, 10)?;
    let (_, mut tls) = authority(2, 70)?;
    let (key, done) = leaf_of(&mut previous, &tls)?;
    assert!(
        server_refused(&done, |e| matches!(
            e,
            rustls::CertificateError::UnknownIssuer
        )),
        "{done:?}"
    );
    // A client that read the previous generation's publication asks for
    // the wrong generation.
    let stale = key.enrollment_request(previous.publication(), CliId([8; 16]))?;
    let refused = tls.enroll(&stale, now());
    assert!(
        matches!(
            refused,
            Err(EnrollError::StaleGeneration {
                found: 1,
                ours: 2,
                ..
            })
        ),
        "{refused:?}"
    );
    Ok(())
}

#[test]
fn an_expired_leaf_is_refused_in_the_handshake_and_by_the_issued_record() -> TestResult {
    let (_, mut tls) = authority(1, 10)?;
    let issued = now() - 2 * CLIENT_LEAF_SECS;
    let (key, credential) = enrolled(&mut tls, 7, issued)?;
    let (_, _, done) = connect(
        key.session_config(tls.publication(), &credential, fixed_clock(now()))?,
        &tls,
    )?;
    assert!(
        server_refused(&done, |e| matches!(
            e,
            rustls::CertificateError::Expired | rustls::CertificateError::ExpiredContext { .. }
        )),
        "{done:?}"
    );
    // A leaf valid when the handshake ran is refused once its hour is over.
    let (key, credential) = enrolled(&mut tls, 8, now())?;
    let (_, server, done) = connect(
        key.session_config(tls.publication(), &credential, fixed_clock(now()))?,
        &tls,
    )?;
    done?;
    let later = now() + CLIENT_LEAF_SECS;
    assert!(matches!(
        tls.authenticate(&server, later),
        Err(PeerError::Expired { cli_id, .. }) if cli_id == CliId([8; 16])
    ));
    Ok(())
}

#[test]
fn tls_1_2_is_refused() -> TestResult {
    let (_, tls) = authority(1, 10)?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(
        tls.publication().tls_ca_certificate_der.clone(),
    ))?;
    let mut config = rustls::ClientConfig::builder_with_details(
        Arc::new(rustls::crypto::ring::default_provider()),
        fixed_clock(now()),
    )
    .with_protocol_versions(&[&rustls::version::TLS12])?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![ALPN.to_vec()];
    let (_, _, done) = connect(Arc::new(config), &tls)?;
    assert!(
        matches!(
            done,
            Err(Failed::Server(rustls::Error::PeerIncompatible(_)))
        ),
        "{done:?}"
    );
    Ok(())
}

#[test]
fn no_connection_resumes_or_sends_early_data() -> TestResult {
    let (_, mut tls) = authority(1, 10)?;
    let (key, credential) = enrolled(&mut tls, 7, now())?;
    // A client that would resume and send early data if it could.
    let mut config =
        (*key.session_config(tls.publication(), &credential, fixed_clock(now()))?).clone();
    config.resumption = rustls::client::Resumption::in_memory_sessions(16);
    config.enable_early_data = true;
    let config = Arc::new(config);
    for attempt in 0..2 {
        let (mut client, server, done) = connect(Arc::clone(&config), &tls)?;
        done?;
        assert_eq!(
            client.handshake_kind(),
            Some(rustls::HandshakeKind::Full),
            "connection {attempt}"
        );
        assert!(client.early_data().is_none(), "connection {attempt}");
        assert!(!client.is_early_data_accepted());
        assert!(server.received_resumption_data().is_none());
    }
    Ok(())
}

#[test]
fn a_connection_without_the_alpn_protocol_is_refused() -> TestResult {
    let (_, tls) = authority(1, 10)?;
    let mut config =
        (*ClientTlsKey::enrollment_config(tls.publication(), fixed_clock(now()))?).clone();
    config.alpn_protocols.clear();
    let (_, server, done) = connect(Arc::new(config), &tls)?;
    done?;
    assert!(matches!(
        tls.authenticate(&server, now()),
        Err(PeerError::Alpn)
    ));
    Ok(())
}

#[test]
fn a_coordinator_leaf_other_than_the_published_one_is_refused_by_the_client() -> TestResult {
    let (_, tls) = authority(1, 10)?;
    let mut publication: ProtocolPublicationIdentity = tls.publication().clone();
    publication.coordinator_tls_certificate_sha256[0] ^= 1;
    let (_, _, done) = connect(
        ClientTlsKey::enrollment_config(&publication, fixed_clock(now()))?,
        &tls,
    )?;
    let Err(Failed::Client(rustls::Error::InvalidCertificate(rustls::CertificateError::Other(
        other,
    )))) = &done
    else {
        return Err(format!("the unpinned leaf was not refused: {done:?}").into());
    };
    assert!(other.0.downcast_ref::<UnpinnedCoordinatorLeaf>().is_some());
    // And another generation's CA does not verify it either.
    let (_, other_tls) = authority(2, 90)?;
    let (_, _, done) = connect(
        ClientTlsKey::enrollment_config(other_tls.publication(), fixed_clock(now()))?,
        &tls,
    )?;
    assert!(matches!(done, Err(Failed::Client(_))), "{done:?}");
    // A publication of another Domain is refused before any connection.
    assert!(matches!(
        check_publication(tls.publication(), DomainId([9; 32])),
        Err(ClientTlsError::PublicationDomain { .. })
    ));
    Ok(())
}

#[test]
fn an_enrollment_is_refused_for_a_forged_csr_a_non_ed25519_key_or_a_taken_id() -> TestResult {
    let (_, mut tls) = authority(1, 10)?;
    let publication = tls.publication().clone();
    let key = ClientTlsKey::from_seed(&[7; 32]);
    let mut forged = key.enrollment_request(&publication, CliId([7; 16]))?;
    let last = forged.certificate_signing_request_der.len() - 1;
    forged.certificate_signing_request_der[last] ^= 1;
    assert!(matches!(
        tls.enroll(&forged, now()),
        Err(EnrollError::Csr(_))
    ));
    let ecdsa = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let csr = rcgen::CertificateParams::default().serialize_request(&ecdsa)?;
    let request = ClientEnrollmentRequest {
        certificate_signing_request_der: csr.der().to_vec(),
        ..key.enrollment_request(&publication, CliId([7; 16]))?
    };
    assert!(matches!(
        tls.enroll(&request, now()),
        Err(EnrollError::KeyAlgorithm)
    ));
    let good = key.enrollment_request(&publication, CliId([7; 16]))?;
    tls.enroll(&good, now())?;
    assert!(matches!(
        tls.enroll(&good, now()),
        Err(EnrollError::CliIdTaken(CliId([7, ..])))
    ));
    // The request's encoding is what the acceptor bounds.
    assert!(good.encode()?.len() < super::tls::ENROLLMENT_LIMIT);
    Ok(())
}

#[test]
fn the_published_identity_pins_the_manifest_and_the_coordinator_leaf() -> TestResult {
    let (anchor, tls) = authority(1, 10)?;
    let publication = tls.publication();
    assert_eq!(
        publication.trust_manifest_sha256,
        super::signing::sha256(&anchor.manifest().encode()?)
    );
    assert_eq!(
        anchor.manifest().tls_ca_sha256,
        super::signing::sha256(&publication.tls_ca_certificate_der)
    );
    assert_eq!(
        publication.coordinator_tls_certificate_sha256,
        super::signing::sha256(&tls.coordinator_credential().certificate_der)
    );
    Ok(())
}
