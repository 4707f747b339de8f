use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};

use super::records::{
    ClientEnrollmentRequest, ClientEnrollmentResponse, GenerationIdentity, ProtocolCredential,
    ProtocolCredentialRole, ProtocolPublicationIdentity, ProtocolRecord, SandboxCredentialBundle,
    SessionBinding, SessionRegistrationResponse, SessionRequestCapability, Signature,
    TlsCredential, TlsRole, TrustManifest,
};
use super::signing::{sha256, signature_input, SignatureError};
use super::trust_anchor::{TrustAnchor, TrustAnchorError, TrustAnchorSeeds};
use super::{verify_registration, ExpectedRegistration, VerifyError, PROTOCOL_VERSION};
use crate::records::ids::{
    CliId, ConfigurationFingerprint, CoordinatorId, DomainId, GenerationId, ProfileName, SandboxId,
    SessionId,
};

/// Cases per codec property: at least 100,000 for every codec.
const CODEC_CASES: u64 = 100_000;
/// 2026-12-05T00:00:00Z.
pub(super) const NOW: i64 = 1_796_428_800;
const ANCHOR: [u8; 32] = [0xa7; 32];

/// A clock that always says `at` (seconds since the epoch).
#[derive(Debug)]
pub(super) struct FixedClock(pub i64);

impl rustls::time_provider::TimeProvider for FixedClock {
    fn current_time(&self) -> Option<rustls::pki_types::UnixTime> {
        u64::try_from(self.0).ok().map(|secs| {
            rustls::pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs))
        })
    }
}

pub(super) fn fixed_clock(at: i64) -> super::tls::Clock {
    std::sync::Arc::new(FixedClock(at))
}

pub(super) fn identity(generation: u64) -> GenerationIdentity {
    GenerationIdentity {
        agent_profile: ProfileName::new("agent").expect("a valid profile name"),
        domain_id: DomainId([1; 32]),
        generation_id: GenerationId(generation),
        configuration_fingerprint: ConfigurationFingerprint([2; 32]),
        coordinator_id: CoordinatorId([3; 16]),
        sandbox_id: SandboxId([4; 16]),
    }
}

pub(super) fn seeds(base: u8) -> TrustAnchorSeeds {
    TrustAnchorSeeds {
        tls_ca: [base; 32],
        tls_ca_serial: [base.wrapping_add(1); 16],
        issuer: [base.wrapping_add(2); 32],
        coordinator: [base.wrapping_add(3); 32],
        coordinator_tls: [base.wrapping_add(5); 32],
        sandbox: [base.wrapping_add(4); 32],
    }
}

fn anchor(generation: u64, base: u8) -> Result<TrustAnchor, TrustAnchorError> {
    TrustAnchor::new(identity(generation), &seeds(base), NOW, fixed_clock(NOW))
        .map(|(anchor, _)| anchor)
}

/// What a coordinator answers a registration with (the response, and the
/// manifest and credential the CLI checks it by).
#[derive(Clone, Debug)]
struct Answer {
    response: SessionRegistrationResponse,
    manifest: TrustManifest,
    credential: ProtocolCredential,
    /// The manifest digest the coordinator's publication identity pins.
    pinned: [u8; 32],
}

fn answer(a: &TrustAnchor) -> Result<Answer, TrustAnchorError> {
    Ok(Answer {
        response: a.register(CliId([5; 16]), SessionId([6; 16]), ANCHOR)?,
        manifest: a.manifest().clone(),
        credential: a.coordinator_credential().clone(),
        pinned: sha256(&a.manifest().encode()?),
    })
}

/// The CLI's check, for a session told it joined `generation`.
fn check_joined(r: &Answer, generation: u64) -> Result<(), VerifyError> {
    let expected = ExpectedRegistration {
        domain_id: DomainId([1; 32]),
        configuration_fingerprint: ConfigurationFingerprint([2; 32]),
        generation_id: GenerationId(generation),
        session_anchor: ANCHOR,
        trust_manifest_sha256: r.pinned,
    };
    verify_registration(&r.response, &r.manifest, &r.credential, &expected).map(|_| ())
}

/// [`check_joined`] of generation 7.
fn check(r: &Answer) -> Result<(), VerifyError> {
    check_joined(r, 7)
}

#[test]
fn a_signature_input_is_the_prefix_the_name_the_length_and_the_payload() {
    let payload = [0xde, 0xad, 0xbe, 0xef, 0x01];
    let mut expected = b"lazaret/v1/trust-manifest".to_vec();
    expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 5]);
    expected.extend_from_slice(&payload);
    assert_eq!(signature_input("trust-manifest", &payload), expected);
}

/// The v1 encoding of a GenerationIdentity, built by hand from Postcard's
/// rules (a string is its varint length and bytes, a byte array its bytes,
/// a u64 its LEB128 varint), pins the schema's field order.
#[test]
fn a_generation_identity_encodes_in_the_schema_field_order(
) -> Result<(), Box<dyn std::error::Error>> {
    let mut id = identity(300);
    id.agent_profile = ProfileName::new("ab")?;
    let mut expected = vec![2, b'a', b'b'];
    expected.extend_from_slice(&[1; 32]);
    // 300 = 0b10_0101100: low seven bits with the continuation bit, then 2.
    expected.extend_from_slice(&[0xac, 0x02]);
    expected.extend_from_slice(&[2; 32]);
    expected.extend_from_slice(&[3; 16]);
    expected.extend_from_slice(&[4; 16]);
    assert_eq!(id.encode()?, expected);
    assert_eq!(GenerationIdentity::decode(&expected)?, id);
    Ok(())
}

/// A signature is 64 bytes without a length prefix, like every fixed field.
#[test]
fn a_signature_encodes_as_its_64_bytes() -> Result<(), Box<dyn std::error::Error>> {
    let sig = Signature([9; 64]);
    let bytes = postcard::to_allocvec(&sig)?;
    assert_eq!(bytes, vec![9; 64]);
    assert_eq!(postcard::from_bytes::<Signature>(&bytes)?, sig);
    Ok(())
}

#[test]
fn a_registration_verifies_and_carries_its_binding() -> Result<(), Box<dyn std::error::Error>> {
    let a = anchor(7, 10)?;
    let r = answer(&a)?;
    check(&r)?;
    let capability = &r.response.session_capability;
    assert_eq!(capability.session_binding.cli_id, CliId([5; 16]));
    assert_eq!(capability.session_binding.session_id, SessionId([6; 16]));
    assert_eq!(capability.session_binding.generation_identity, identity(7));
    assert_eq!(
        capability.sandbox_credential_id,
        a.sandbox_credential().credential_id
    );
    assert_eq!(
        capability.session_binding.session_anchor_id().0,
        sha256(&ANCHOR)
    );
    Ok(())
}

/// The issuer's signature over a manifest verifies, with the plain Ed25519
/// verifier, over the signature input built by hand: the prefix, the
/// record name `trust-manifest`, the length and the claims (every field
/// but the signature). A wrong record name or claim set in the signer
/// fails this even though sign and verify would agree with each other.
#[test]
fn the_manifest_signature_is_over_the_specified_input() -> Result<(), Box<dyn std::error::Error>> {
    use ed25519_dalek::Verifier;
    let a = anchor(7, 10)?;
    let m = a.manifest();
    let mut claims = PROTOCOL_VERSION.encode_varint();
    claims.extend(m.generation_identity.encode()?);
    claims.extend_from_slice(&m.tls_ca_sha256);
    claims.extend_from_slice(&m.protocol_issuer_public_key);
    let mut input = b"lazaret/v1/trust-manifest".to_vec();
    input.extend_from_slice(&u64::try_from(claims.len())?.to_be_bytes());
    input.extend_from_slice(&claims);
    let key = ed25519_dalek::VerifyingKey::from_bytes(&m.protocol_issuer_public_key)?;
    key.verify(
        &input,
        &ed25519_dalek::Signature::from_bytes(&m.issuer_signature.0),
    )?;
    // The same for a credential (`protocol-credential`, its claims).
    let c = a.coordinator_credential();
    let mut claims = PROTOCOL_VERSION.encode_varint();
    claims.extend(c.generation_identity.encode()?);
    claims.push(0);
    claims.extend_from_slice(&c.subject_id);
    claims.extend_from_slice(&c.public_key);
    let mut input = b"lazaret/v1/protocol-credential".to_vec();
    input.extend_from_slice(&u64::try_from(claims.len())?.to_be_bytes());
    input.extend_from_slice(&claims);
    key.verify(
        &input,
        &ed25519_dalek::Signature::from_bytes(&c.issuer_signature.0),
    )?;
    Ok(())
}

/// Credential and capability IDs are SHA-256 of the claims: the record
/// minus its ID and signature, in schema order (schemas.md).
#[test]
fn ids_are_digests_of_the_claims_without_id_and_signature() -> Result<(), Box<dyn std::error::Error>>
{
    let a = anchor(7, 10)?;
    let credential = a.coordinator_credential();
    let mut claims = PROTOCOL_VERSION.encode_varint();
    claims.extend(credential.generation_identity.encode()?);
    claims.push(0); // role SessionCoordinator: variant index 0
    claims.extend_from_slice(&credential.subject_id);
    claims.extend_from_slice(&credential.public_key);
    assert_eq!(credential.credential_id, sha256(&claims));

    let capability = answer(&a)?.response.session_capability;
    let mut claims = PROTOCOL_VERSION.encode_varint();
    claims.extend(capability.session_binding.encode()?);
    claims.extend_from_slice(&capability.coordinator_credential_id);
    claims.extend_from_slice(&capability.sandbox_credential_id);
    assert_eq!(capability.capability_id, sha256(&claims));
    Ok(())
}

trait Varint {
    fn encode_varint(self) -> Vec<u8>;
}

impl Varint for u16 {
    fn encode_varint(self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut v = self;
        while v >= 0x80 {
            out.push(u8::try_from(v & 0x7f).unwrap_or(0) | 0x80);
            v >>= 7;
        }
        out.push(u8::try_from(v).unwrap_or(0));
        out
    }
}

#[test]
fn the_package_is_a_function_of_its_seeds_and_binds_its_tls_ca(
) -> Result<(), Box<dyn std::error::Error>> {
    let (a, b, c) = (anchor(7, 10)?, anchor(7, 10)?, anchor(7, 11)?);
    assert_eq!(a.manifest(), b.manifest());
    assert_eq!(a.tls_ca_certificate_der(), b.tls_ca_certificate_der());
    assert_ne!(a.manifest(), c.manifest());
    assert_eq!(
        a.manifest().tls_ca_sha256,
        sha256(a.tls_ca_certificate_der())
    );
    // Separate keys: the issuer, the coordinator and the sandbox each sign
    // with their own.
    let keys = [
        a.manifest().protocol_issuer_public_key,
        a.coordinator_credential().public_key,
        a.sandbox_credential().public_key,
    ];
    assert!(keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2]);
    assert_eq!(
        a.sandbox_credential().role,
        ProtocolCredentialRole::AgentSandbox
    );
    assert_eq!(a.sandbox_credential().subject_id, [4; 16]);
    Ok(())
}

/// Each way a registration can be wrong is refused with its own error.
#[test]
fn every_tampered_registration_is_refused_by_name() -> Result<(), Box<dyn std::error::Error>> {
    let a = anchor(7, 10)?;
    let good = answer(&a)?;
    check(&good)?;
    let tamper = |f: &dyn Fn(&mut Answer)| {
        let mut r = good.clone();
        f(&mut r);
        check(&r)
    };
    let r = tamper(&|r| r.manifest.protocol_version = 2);
    assert!(
        matches!(
            r,
            Err(VerifyError::Version {
                record: "trust manifest",
                found: 2
            })
        ),
        "{r:?}"
    );
    let r = tamper(&|r| r.manifest.generation_identity.domain_id = DomainId([9; 32]));
    assert!(matches!(r, Err(VerifyError::OtherDomain { .. })), "{r:?}");
    let r = tamper(&|r| {
        r.manifest.generation_identity.configuration_fingerprint =
            ConfigurationFingerprint([9; 32]);
    });
    assert!(
        matches!(r, Err(VerifyError::OtherConfiguration { .. })),
        "{r:?}"
    );
    let r = check_joined(&good, 8);
    assert!(
        matches!(r, Err(VerifyError::ManifestGeneration { .. })),
        "{r:?}"
    );
    let r = tamper(&|r| r.manifest.tls_ca_sha256[0] ^= 1);
    assert!(
        matches!(r, Err(VerifyError::Manifest(SignatureError::Forged { .. }))),
        "{r:?}"
    );
    let r = tamper(&|r| r.credential = a.sandbox_credential().clone());
    assert!(
        matches!(r, Err(VerifyError::CredentialRole { .. })),
        "{r:?}"
    );
    let r = tamper(&|r| r.credential.subject_id[0] ^= 1);
    assert!(matches!(r, Err(VerifyError::CredentialSubject)), "{r:?}");
    let r = tamper(&|r| r.credential.public_key[0] ^= 1);
    assert!(
        matches!(
            r,
            Err(VerifyError::Credential(SignatureError::Forged { .. }))
        ),
        "{r:?}"
    );
    let r = tamper(&|r| r.credential.credential_id[0] ^= 1);
    assert!(
        matches!(
            r,
            Err(VerifyError::WrongId {
                record: "coordinator credential"
            })
        ),
        "{r:?}"
    );
    let r = tamper(&|r| r.response.session_capability.coordinator_credential_id[0] ^= 1);
    assert!(matches!(r, Err(VerifyError::CapabilityCredential)), "{r:?}");
    let r = tamper(&|r| {
        r.response
            .session_capability
            .session_binding
            .session_anchor_public_key[0] ^= 1;
    });
    assert!(matches!(r, Err(VerifyError::OtherSessionAnchor)), "{r:?}");
    let r = tamper(&|r| {
        r.response.session_capability.session_binding.session_id = SessionId([0; 16]);
    });
    assert!(
        matches!(
            r,
            Err(VerifyError::Capability(SignatureError::Forged { .. }))
        ),
        "{r:?}"
    );
    let r = tamper(&|r| r.response.session_capability.capability_id[0] ^= 1);
    assert!(
        matches!(
            r,
            Err(VerifyError::WrongId {
                record: "session request capability"
            })
        ),
        "{r:?}"
    );
    Ok(())
}

/// A capability or credential of another generation of the same Domain
/// and configuration, mixed into this generation's answer, is refused.
/// (A whole, self-consistent answer of another generation is refused only
/// against the generation the session was told it joined: the manifest is
/// not pinned yet, docs/control-protocol.md.)
#[test]
fn a_registration_under_a_manifest_the_publication_does_not_pin_is_refused(
) -> Result<(), Box<dyn std::error::Error>> {
    // Another package for the same generation identity: every record is
    // validly signed, but its manifest is not the published one.
    let published = answer(&anchor(7, 10)?)?;
    let other = Answer {
        pinned: published.pinned,
        ..answer(&anchor(7, 60)?)?
    };
    check(&published)?;
    assert!(matches!(check(&other), Err(VerifyError::UnpinnedManifest)));
    Ok(())
}

#[test]
fn another_generations_records_are_refused() -> Result<(), Box<dyn std::error::Error>> {
    let (current, previous) = (anchor(8, 10)?, anchor(7, 20)?);
    let mut r = answer(&current)?;
    r.response = answer(&previous)?.response;
    let refused = check_joined(&r, 8);
    assert!(
        matches!(
            refused,
            Err(VerifyError::OtherGeneration {
                record: "session request capability"
            })
        ),
        "{refused:?}"
    );
    let mut r = answer(&current)?;
    r.credential = previous.coordinator_credential().clone();
    let refused = check_joined(&r, 8);
    assert!(
        matches!(
            refused,
            Err(VerifyError::OtherGeneration {
                record: "coordinator credential"
            })
        ),
        "{refused:?}"
    );
    let refused = check_joined(&answer(&previous)?, 8);
    assert!(
        matches!(refused, Err(VerifyError::ManifestGeneration { .. })),
        "{refused:?}"
    );
    check_joined(&answer(&previous)?, 7)?;
    Ok(())
}

/// The sandbox key leaves the package once, in the bundle; the bundle's
/// key is the one the sandbox credential certifies, and the bundle carries
/// no other private key (its only 32-byte secret field is the sandbox's).
#[test]
fn the_sandbox_bundle_is_taken_once_with_the_certified_key(
) -> Result<(), Box<dyn std::error::Error>> {
    let mut a = anchor(7, 10)?;
    let bundle = a.take_sandbox_bundle().ok_or("no bundle")?;
    assert!(
        a.take_sandbox_bundle().is_none(),
        "the sandbox key is still held"
    );
    let key = ed25519_dalek::SigningKey::from_bytes(&bundle.sandbox_private_key);
    assert_eq!(
        key.verifying_key().to_bytes(),
        bundle.sandbox_protocol_credential.public_key
    );
    assert_eq!(&bundle.sandbox_protocol_credential, a.sandbox_credential());
    assert_eq!(
        &bundle.coordinator_protocol_credential,
        a.coordinator_credential()
    );
    assert_eq!(&bundle.trust_manifest, a.manifest());
    let bytes = bundle.encode()?;
    for (label, seed) in [("issuer", 12u8), ("coordinator", 13), ("tls-ca", 10)] {
        assert!(
            !bytes.windows(32).any(|w| w == [seed; 32]),
            "the {label} seed is in the bundle"
        );
    }
    // Capabilities issued after the bundle was taken still name the same
    // sandbox credential.
    assert_eq!(
        answer(&a)?
            .response
            .session_capability
            .sandbox_credential_id,
        bundle.sandbox_protocol_credential.credential_id
    );
    Ok(())
}

// ---- codec properties (quickcheck, CODEC_CASES each) ----

fn bytes<const N: usize>(g: &mut Gen) -> [u8; N] {
    let mut out = [0u8; N];
    for b in &mut out {
        *b = u8::arbitrary(g);
    }
    out
}

/// One of each record, with arbitrary field values.
#[derive(Clone, Debug)]
struct AnyRecords {
    response: SessionRegistrationResponse,
    manifest: TrustManifest,
    credential: ProtocolCredential,
    bundle: SandboxCredentialBundle,
    publication: ProtocolPublicationIdentity,
    enrollment: ClientEnrollmentRequest,
    enrolled: ClientEnrollmentResponse,
}

impl Arbitrary for AnyRecords {
    fn arbitrary(g: &mut Gen) -> Self {
        let profile: String = (0..usize::arbitrary(g) % 24 + 1)
            .map(|_| char::from(b'!' + u8::arbitrary(g) % 94))
            .collect();
        let identity = GenerationIdentity {
            agent_profile: ProfileName::new(profile).unwrap_or_else(|_| {
                ProfileName::new("p").unwrap_or_else(|_| unreachable!("a valid name"))
            }),
            domain_id: DomainId(bytes(g)),
            generation_id: GenerationId(u64::arbitrary(g)),
            configuration_fingerprint: ConfigurationFingerprint(bytes(g)),
            coordinator_id: CoordinatorId(bytes(g)),
            sandbox_id: SandboxId(bytes(g)),
        };
        let credential = ProtocolCredential {
            protocol_version: u16::arbitrary(g),
            credential_id: bytes(g),
            generation_identity: identity.clone(),
            role: if bool::arbitrary(g) {
                ProtocolCredentialRole::SessionCoordinator
            } else {
                ProtocolCredentialRole::AgentSandbox
            },
            subject_id: bytes(g),
            public_key: bytes(g),
            issuer_signature: Signature(bytes(g)),
        };
        let manifest = TrustManifest {
            protocol_version: u16::arbitrary(g),
            generation_identity: identity.clone(),
            tls_ca_sha256: bytes(g),
            protocol_issuer_public_key: bytes(g),
            issuer_signature: Signature(bytes(g)),
        };
        let response = SessionRegistrationResponse {
            protocol_version: u16::arbitrary(g),
            session_capability: SessionRequestCapability {
                protocol_version: u16::arbitrary(g),
                capability_id: bytes(g),
                session_binding: SessionBinding {
                    generation_identity: identity.clone(),
                    cli_id: CliId(bytes(g)),
                    session_id: SessionId(bytes(g)),
                    session_anchor_public_key: bytes(g),
                },
                coordinator_credential_id: bytes(g),
                sandbox_credential_id: bytes(g),
                coordinator_signature: Signature(bytes(g)),
            },
        };
        let publication = ProtocolPublicationIdentity {
            protocol_version: u16::arbitrary(g),
            generation_identity: identity.clone(),
            tls_ca_certificate_der: Vec::arbitrary(g),
            trust_manifest_sha256: bytes(g),
            coordinator_tls_certificate_sha256: bytes(g),
        };
        let enrollment = ClientEnrollmentRequest {
            protocol_version: u16::arbitrary(g),
            generation_identity: identity.clone(),
            cli_id: CliId(bytes(g)),
            certificate_signing_request_der: Vec::arbitrary(g),
        };
        let enrolled = ClientEnrollmentResponse {
            protocol_version: u16::arbitrary(g),
            credential: TlsCredential {
                generation_identity: identity.clone(),
                role: if bool::arbitrary(g) {
                    TlsRole::SessionCoordinator
                } else {
                    TlsRole::ClientCli
                },
                subject_id: bytes(g),
                certificate_der: Vec::arbitrary(g),
                certificate_sha256: bytes(g),
            },
        };
        let bundle = SandboxCredentialBundle {
            protocol_version: u16::arbitrary(g),
            generation_identity: identity,
            trust_manifest: manifest.clone(),
            coordinator_protocol_credential: credential.clone(),
            sandbox_protocol_credential: credential.clone(),
            sandbox_private_key: bytes(g),
        };
        Self {
            response,
            manifest,
            credential,
            bundle,
            publication,
            enrollment,
            enrolled,
        }
    }
}

fn cases() -> QuickCheck {
    QuickCheck::new().tests(CODEC_CASES).max_tests(CODEC_CASES)
}

/// Every record round-trips, and neither a strict prefix nor a trailing
/// byte of its encoding decodes (each record ends in a fixed-size field).
fn round_trips<T: ProtocolRecord + PartialEq + std::fmt::Debug>(value: &T, cut: usize) -> bool {
    let Ok(bytes) = value.encode() else {
        return false;
    };
    let exact = T::decode(&bytes).is_ok_and(|v| v == *value);
    let truncated = T::decode(&bytes[..cut % bytes.len()]).is_err();
    let mut longer = bytes.clone();
    longer.push(0);
    exact && truncated && T::decode(&longer).is_err()
}

#[test]
fn every_protocol_record_round_trips_and_refuses_truncation_and_trailing_bytes() {
    fn prop(r: AnyRecords, cut: usize) -> bool {
        round_trips(&r.response, cut)
            && round_trips(&r.response.session_capability, cut)
            && round_trips(&r.response.session_capability.session_binding, cut)
            && round_trips(&r.manifest, cut)
            && round_trips(&r.manifest.generation_identity, cut)
            && round_trips(&r.credential, cut)
            && round_trips(&r.bundle, cut)
            && round_trips(&r.publication, cut)
            && round_trips(&r.enrollment, cut)
            && round_trips(&r.enrolled, cut)
            && round_trips(&r.enrolled.credential, cut)
    }
    cases().quickcheck(prop as fn(AnyRecords, usize) -> bool);
}

/// A damaged encoding (bytes overwritten, inserted or removed anywhere in
/// a valid one) never panics a decoder; whatever it decodes to re-encodes
/// to bytes that decode to the same record. (Postcard accepts overlong
/// varints, so the damaged bytes themselves need not be the canonical
/// encoding; IDs and signatures are computed over the re-encoding, never
/// over received claim bytes.)
#[test]
fn damaged_encodings_decode_to_a_refusal_or_to_a_stable_record() {
    fn stable<T: ProtocolRecord + PartialEq>(data: &[u8]) -> bool {
        T::decode(data).map_or(true, |v| {
            v.encode()
                .is_ok_and(|b| T::decode(&b).is_ok_and(|again| again == v))
        })
    }
    fn damage(mut bytes: Vec<u8>, edits: &[(usize, u8, u8)]) -> Vec<u8> {
        for &(at, kind, value) in edits {
            let at = at % (bytes.len() + 1);
            match kind % 3 {
                0 if at < bytes.len() => bytes[at] = value,
                1 => bytes.insert(at, value),
                _ if at < bytes.len() => {
                    bytes.remove(at);
                }
                _ => {}
            }
        }
        bytes
    }
    fn prop(r: AnyRecords, edits: Vec<(usize, u8, u8)>) -> TestResult {
        let encodings: [Result<Vec<u8>, _>; 7] = [
            r.response.encode(),
            r.manifest.encode(),
            r.credential.encode(),
            r.bundle.encode(),
            r.publication.encode(),
            r.enrollment.encode(),
            r.enrolled.encode(),
        ];
        let mut all = true;
        for bytes in encodings {
            let Ok(bytes) = bytes else {
                return TestResult::failed();
            };
            let data = damage(bytes, &edits);
            all &= stable::<SessionRegistrationResponse>(&data)
                && stable::<TrustManifest>(&data)
                && stable::<ProtocolCredential>(&data)
                && stable::<SandboxCredentialBundle>(&data)
                && stable::<GenerationIdentity>(&data)
                && stable::<ProtocolPublicationIdentity>(&data)
                && stable::<ClientEnrollmentRequest>(&data)
                && stable::<ClientEnrollmentResponse>(&data)
                && stable::<TlsCredential>(&data);
        }
        TestResult::from_bool(all)
    }
    cases().quickcheck(prop as fn(AnyRecords, Vec<(usize, u8, u8)>) -> TestResult);
}

/// Every single-bit flip of every byte of a valid answer is refused by
/// decoding or by verification, never accepted (exhaustive over the
/// answer's bits).
#[test]
fn a_flipped_bit_never_verifies() -> Result<(), Box<dyn std::error::Error>> {
    let good = answer(&anchor(7, 10)?)?;
    let parts = [
        good.response.encode()?,
        good.manifest.encode()?,
        good.credential.encode()?,
    ];
    for (part, bytes) in parts.iter().enumerate() {
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut flipped = bytes.clone();
                flipped[at] ^= 1 << bit;
                let mut r = good.clone();
                let decoded = match part {
                    0 => SessionRegistrationResponse::decode(&flipped).map(|v| r.response = v),
                    1 => TrustManifest::decode(&flipped).map(|v| r.manifest = v),
                    _ => ProtocolCredential::decode(&flipped).map(|v| r.credential = v),
                };
                if decoded.is_ok() {
                    assert!(
                        check(&r).is_err(),
                        "part {part}: flipping bit {bit} of byte {at} still verifies"
                    );
                }
            }
        }
    }
    Ok(())
}
