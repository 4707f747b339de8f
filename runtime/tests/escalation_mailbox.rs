//! The Escalation Mailbox's records and the Host Coordinator's pure checks
//! of them (spec 3.8; schemas.md mailbox records and auto-approval rules):
//! fixed v1 encodings, signatures verified before decoding, bounds before
//! allocation, every refusal by name (forged, replayed, another session's
//! capability, an unregistered session, another generation), the command
//! language and rule matching, the bounded result window, and the
//! developer prompt: its escaped text, its answer line and the signed
//! decision the Host Coordinator takes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test
use std::sync::Arc;

use ed25519_dalek::{Signer as _, SigningKey};
use lazaret_runtime::config::ResolvedAutoApprovalRule;
use lazaret_runtime::escalation::command::{
    check_argv, classify, rule_matches, CommandError, RuleMatch,
};
use lazaret_runtime::escalation::{
    authenticate, correlate_ack, correlate_cancellation, ClientError, EscalationClient,
    MailboxAuthority, MailboxRefusal, OpenRequest, RequestLedger, ResultError, ResultWindow,
    MAX_JUSTIFICATION, MAX_UNACKED_CHUNKS,
};
use lazaret_runtime::protocol::mailbox::*;
use lazaret_runtime::protocol::records::{
    GenerationIdentity, ProtocolRecord, SandboxCredentialBundle, SessionBinding, Signature,
};
use lazaret_runtime::protocol::signing::{sha256, signature_input, SignatureError};
use lazaret_runtime::protocol::{TrustAnchor, TrustAnchorSeeds, PROTOCOL_VERSION};
use lazaret_runtime::records::ids::{
    CliId, ConfigurationFingerprint, CoordinatorId, DomainId, EscalationRequestId, GenerationId,
    ProfileName, SandboxId, SessionId,
};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use sha2::Digest as _;

/// 2026-12-05T00:00:00Z.
const NOW: i64 = 1_796_428_800;
/// Cases per property.
const CASES: u64 = 100_000;

#[derive(Debug)]
struct FixedClock;

impl rustls::time_provider::TimeProvider for FixedClock {
    fn current_time(&self) -> Option<rustls::pki_types::UnixTime> {
        Some(rustls::pki_types::UnixTime::since_unix_epoch(
            std::time::Duration::from_secs(NOW as u64),
        ))
    }
}

fn identity(generation: u64) -> GenerationIdentity {
    GenerationIdentity {
        agent_profile: ProfileName::new("agent").expect("a valid profile name"),
        domain_id: DomainId([1; 32]),
        generation_id: GenerationId(generation),
        configuration_fingerprint: ConfigurationFingerprint([2; 32]),
        coordinator_id: CoordinatorId([3; 16]),
        sandbox_id: SandboxId([4; 16]),
    }
}

/// A generation's Trust Anchor and the sandbox key from its bundle.
struct Generation {
    anchor: TrustAnchor,
    sandbox_key: SigningKey,
}

fn generation(number: u64, base: u8) -> Generation {
    generation_and_bundle(number, base).0
}

/// A generation and the credential bundle its sandbox reads.
fn generation_and_bundle(number: u64, base: u8) -> (Generation, SandboxCredentialBundle) {
    let seeds = TrustAnchorSeeds {
        tls_ca: [base; 32],
        tls_ca_serial: [base.wrapping_add(1); 16],
        issuer: [base.wrapping_add(2); 32],
        coordinator: [base.wrapping_add(3); 32],
        coordinator_tls: [base.wrapping_add(5); 32],
        sandbox: [base.wrapping_add(4); 32],
    };
    let (mut anchor, _) = TrustAnchor::new(identity(number), &seeds, NOW, Arc::new(FixedClock))
        .expect("a trust anchor");
    let bundle = anchor.take_sandbox_bundle().expect("the bundle, once");
    let sandbox_key = SigningKey::from_bytes(&bundle.sandbox_private_key);
    (
        Generation {
            anchor,
            sandbox_key,
        },
        bundle,
    )
}

const CLI: CliId = CliId([5; 16]);

/// The capability of session `session` (anchor key `[session; 32]`).
fn capability(
    g: &Generation,
    session: u8,
) -> lazaret_runtime::protocol::records::SessionRequestCapability {
    g.anchor
        .register(CLI, SessionId([session; 16]), [session; 32])
        .expect("a registration")
        .session_capability
}

fn request(g: &Generation, session: u8, id: u8, argv: &[&str]) -> MailboxRequest {
    let capability = capability(g, session);
    MailboxRequest {
        protocol_version: PROTOCOL_VERSION,
        session_binding: capability.session_binding.clone(),
        request_id: EscalationRequestId([id; 16]),
        sandbox_credential_id: capability.sandbox_credential_id,
        session_capability: capability,
        command_argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        justification: "update the lock file".to_owned(),
    }
}

/// Sessions 1 and 2 are registered.
fn registered(binding: &SessionBinding) -> bool {
    [1u8, 2]
        .iter()
        .any(|s| binding.session_id == SessionId([*s; 16]))
}

fn accept(g: &Generation, file: &[u8]) -> Result<(MailboxRequest, [u8; 32]), MailboxRefusal> {
    let envelope = SignedProtocolRecord::read(file)?;
    authenticate::<MailboxRequest>(&envelope, &MailboxAuthority::of(&g.anchor), registered)
}

#[test]
fn mailbox_records_keep_their_schema_indices_and_names() {
    let signed = SignedPayload {
        payload_bytes: vec![0xaa, 0xbb],
        signature: Signature([0x11; 64]),
    };
    let variants = [
        SignedProtocolRecord::MailboxRequest(signed.clone()),
        SignedProtocolRecord::MailboxCancellation(signed.clone()),
        SignedProtocolRecord::MailboxResultAck(signed.clone()),
        SignedProtocolRecord::DeveloperDecision(signed.clone()),
        SignedProtocolRecord::MailboxResult(signed.clone()),
        SignedProtocolRecord::MailboxResultChunk(signed),
    ];
    let names = [
        "mailbox-request",
        "mailbox-cancellation",
        "mailbox-result-ack",
        "developer-decision",
        "mailbox-result",
        "mailbox-result-chunk",
    ];
    for (index, (variant, name)) in variants.iter().zip(names).enumerate() {
        let bytes = variant.encode().expect("an envelope encodes");
        // Tag, payload length 2, the payload, 64 signature bytes (no length).
        let mut expected = vec![u8::try_from(index).expect("a small index"), 2, 0xaa, 0xbb];
        expected.extend([0x11; 64]);
        assert_eq!(bytes, expected, "{name}");
        assert_eq!(variant.record_name(), name);
        assert_eq!(
            SignedProtocolRecord::read(&bytes).expect("it reads back"),
            *variant
        );
    }
    for (outcome, index) in [
        (EscalationOutcome::Completed, 0u8),
        (EscalationOutcome::Denied, 1),
        (EscalationOutcome::TimedOut, 2),
        (EscalationOutcome::Cancelled, 3),
        (EscalationOutcome::Failed, 4),
    ] {
        assert_eq!(postcard::to_allocvec(&outcome).expect("encodes"), [index]);
    }
    assert_eq!(
        postcard::to_allocvec(&ResultStream::Stderr).expect("encodes"),
        [1]
    );
    assert_eq!(
        postcard::to_allocvec(&DeveloperDecisionKind::Deny).expect("encodes"),
        [1]
    );
}

#[test]
fn a_request_is_signed_over_its_exact_payload_under_its_own_name() {
    let g = generation(7, 0x40);
    let r = request(&g, 1, 9, &["/usr/bin/git", "fetch"]);
    let (file, digest) = seal(&g.sandbox_key, &r).expect("a request seals");
    let SignedProtocolRecord::MailboxRequest(signed) =
        SignedProtocolRecord::read(&file).expect("it reads")
    else {
        panic!("a request file carries a MailboxRequest");
    };
    assert_eq!(signed.payload_bytes, r.encode().expect("encodes"));
    assert_eq!(digest, sha256(&signed.payload_bytes));
    let expected = g
        .sandbox_key
        .sign(&signature_input("mailbox-request", &signed.payload_bytes));
    assert_eq!(signed.signature.0, expected.to_bytes());
    let (accepted, accepted_digest) = accept(&g, &file).expect("the sandbox's request is accepted");
    assert_eq!(accepted, r);
    assert_eq!(accepted_digest, digest);
}

#[test]
fn a_forged_or_relabelled_record_is_refused_before_it_is_decoded() {
    let g = generation(7, 0x40);
    let r = request(&g, 1, 9, &["/usr/bin/git", "fetch"]);
    // Signed by the coordinator's key? No: by a key that is not the sandbox's.
    let stranger = SigningKey::from_bytes(&[0x77; 32]);
    let (forged, _) = seal(&stranger, &r).expect("seals");
    assert!(matches!(
        accept(&g, &forged),
        Err(MailboxRefusal::Record(MailboxError::Signature(
            SignatureError::Forged { .. }
        )))
    ));
    // One payload byte changed after signing.
    let (file, _) = seal(&g.sandbox_key, &r).expect("seals");
    let mut envelope = SignedProtocolRecord::read(&file).expect("reads");
    if let SignedProtocolRecord::MailboxRequest(s) = &mut envelope {
        let last = s.payload_bytes.len() - 1;
        s.payload_bytes[last] ^= 1;
    }
    let tampered = envelope.encode().expect("encodes");
    assert!(matches!(
        accept(&g, &tampered),
        Err(MailboxRefusal::Record(MailboxError::Signature(
            SignatureError::Forged { .. }
        )))
    ));
    // The same signed payload relabelled as a cancellation: the signature
    // input names the record, so it does not verify under the new label.
    let SignedProtocolRecord::MailboxRequest(s) = SignedProtocolRecord::read(&file).expect("reads")
    else {
        panic!("a request");
    };
    let relabelled = SignedProtocolRecord::MailboxCancellation(s);
    let refused = authenticate::<MailboxCancellation>(
        &relabelled,
        &MailboxAuthority::of(&g.anchor),
        registered,
    );
    assert!(matches!(
        refused,
        Err(MailboxRefusal::Record(MailboxError::Signature(
            SignatureError::Forged { .. }
        )))
    ));
    // A request file offered where an acknowledgement is expected.
    let wrong_kind = authenticate::<MailboxResultAck>(
        &SignedProtocolRecord::read(&file).expect("reads"),
        &MailboxAuthority::of(&g.anchor),
        registered,
    );
    assert!(matches!(
        wrong_kind,
        Err(MailboxRefusal::Record(MailboxError::Kind {
            expected: "mailbox-result-ack",
            found: "mailbox-request"
        }))
    ));
}

#[test]
fn a_request_of_another_session_generation_or_version_is_refused_by_name() {
    let g = generation(7, 0x40);
    // Session 2's binding with session 1's capability.
    let mut r = request(&g, 1, 9, &["/bin/true"]);
    r.session_binding = capability(&g, 2).session_binding;
    let (file, _) = seal(&g.sandbox_key, &r).expect("seals");
    assert!(matches!(
        accept(&g, &file),
        Err(MailboxRefusal::AnotherSessionsCapability { .. })
    ));
    // A capability whose binding was edited to another session: its
    // coordinator signature no longer verifies.
    let mut r = request(&g, 1, 9, &["/bin/true"]);
    r.session_capability.session_binding = capability(&g, 2).session_binding;
    r.session_binding = r.session_capability.session_binding.clone();
    let (file, _) = seal(&g.sandbox_key, &r).expect("seals");
    assert!(matches!(
        accept(&g, &file),
        Err(MailboxRefusal::CapabilityForged { .. })
    ));
    // A capability the coordinator issued for a session that is not (or no
    // longer) registered.
    let r = request(&g, 3, 9, &["/bin/true"]);
    let (file, _) = seal(&g.sandbox_key, &r).expect("seals");
    assert!(matches!(
        accept(&g, &file),
        Err(MailboxRefusal::SessionNotRegistered { .. })
    ));
    // The previous generation's sandbox signs a request with its own
    // capability: neither its key nor its capability is this generation's.
    let old = generation(6, 0x10);
    let r = request(&old, 1, 9, &["/bin/true"]);
    let (file, _) = seal(&old.sandbox_key, &r).expect("seals");
    assert!(matches!(
        accept(&g, &file),
        Err(MailboxRefusal::Record(MailboxError::Signature(
            SignatureError::Forged { .. }
        )))
    ));
    // This generation's key signing the old generation's capability.
    let (file, _) = seal(&g.sandbox_key, &r).expect("seals");
    assert!(matches!(
        accept(&g, &file),
        Err(MailboxRefusal::OtherSandboxCredential { .. })
    ));
    let mut r = request(&g, 1, 9, &["/bin/true"]);
    r.protocol_version = 2;
    let (file, _) = seal(&g.sandbox_key, &r).expect("seals");
    assert!(matches!(
        accept(&g, &file),
        Err(MailboxRefusal::Version { found: 2, .. })
    ));
}

#[test]
fn a_replayed_request_is_refused_and_ids_are_never_reused() {
    let g = generation(7, 0x40);
    let mut ledger = RequestLedger::default();
    let r = request(&g, 1, 9, &["/bin/true"]);
    let (file, _) = seal(&g.sandbox_key, &r).expect("seals");
    let (first, _) = accept(&g, &file).expect("accepted");
    ledger.admit(&first).expect("a new ID is admitted");
    // The same file again, byte for byte.
    let (again, _) = accept(&g, &file).expect("it still authenticates");
    assert!(matches!(
        ledger.admit(&again),
        Err(MailboxRefusal::Replayed { id }) if id == EscalationRequestId([9; 16])
    ));
    // The same ID in another session's (valid) request.
    let other = request(&g, 2, 9, &["/bin/false"]);
    assert!(matches!(
        ledger.admit(&other),
        Err(MailboxRefusal::Replayed { .. })
    ));
    assert_eq!(ledger.len(), 1);
    let mut long = request(&g, 1, 10, &["/bin/true"]);
    long.justification = "x".repeat(MAX_JUSTIFICATION + 1);
    assert!(matches!(
        ledger.admit(&long),
        Err(MailboxRefusal::JustificationTooLong { .. })
    ));
    assert_eq!(ledger.len(), 1, "a refused request does not spend its ID");
}

#[test]
fn cancellations_and_acknowledgements_name_the_open_request_exactly() {
    let g = generation(7, 0x40);
    let r = request(&g, 1, 9, &["/bin/true"]);
    let (file, digest) = seal(&g.sandbox_key, &r).expect("seals");
    let (r, _) = accept(&g, &file).expect("accepted");
    let open = OpenRequest::of(&r, digest);
    let cancel = |id: u8, session: u8| {
        let c = capability(&g, session);
        MailboxCancellation {
            protocol_version: PROTOCOL_VERSION,
            session_binding: c.session_binding.clone(),
            request_id: EscalationRequestId([id; 16]),
            sandbox_credential_id: c.sandbox_credential_id,
            session_capability: c,
        }
    };
    let authority = MailboxAuthority::of(&g.anchor);
    let through = |c: &MailboxCancellation| {
        let (file, _) = seal(&g.sandbox_key, c).expect("seals");
        authenticate::<MailboxCancellation>(
            &SignedProtocolRecord::read(&file).expect("reads"),
            &authority,
            registered,
        )
        .map(|(c, _)| c)
    };
    let ok = through(&cancel(9, 1)).expect("the session's cancellation authenticates");
    correlate_cancellation(&open, &ok).expect("it names the open request");
    let other_id = through(&cancel(8, 1)).expect("authenticates");
    assert!(matches!(
        correlate_cancellation(&open, &other_id),
        Err(MailboxRefusal::NotTheOpenRequest { .. })
    ));
    let other_session = through(&cancel(9, 2)).expect("authenticates");
    assert!(matches!(
        correlate_cancellation(&open, &other_session),
        Err(MailboxRefusal::AnotherSessionsCapability { .. })
    ));
    let c = capability(&g, 1);
    let mut ack = MailboxResultAck {
        protocol_version: PROTOCOL_VERSION,
        session_binding: c.session_binding.clone(),
        request_id: EscalationRequestId([9; 16]),
        request_sha256: digest,
        sandbox_credential_id: c.sandbox_credential_id,
        session_capability: c,
        highest_contiguous_sequence: 0,
    };
    correlate_ack(&open, &ack).expect("the acknowledgement names the request");
    ack.request_sha256[0] ^= 1;
    assert!(matches!(
        correlate_ack(&open, &ack),
        Err(MailboxRefusal::OtherRequestDigest)
    ));
}

#[test]
fn bounds_hold_before_allocation_and_for_every_chunk() {
    let g = generation(7, 0x40);
    assert!(matches!(
        SignedProtocolRecord::read(&vec![0; MAX_MAILBOX_RECORD + 1]),
        Err(MailboxError::TooLarge { len }) if len == MAX_MAILBOX_RECORD + 1
    ));
    let mut huge = request(&g, 1, 9, &["/bin/true"]);
    huge.justification = "y".repeat(MAX_MAILBOX_RECORD);
    assert!(matches!(
        seal(&g.sandbox_key, &huge),
        Err(MailboxError::TooLarge { .. })
    ));

    let c = capability(&g, 1);
    let open = OpenRequest {
        session_binding: c.session_binding.clone(),
        request_id: EscalationRequestId([9; 16]),
        request_sha256: [7; 32],
    };
    let mut window = ResultWindow::new(open, g.anchor.coordinator_credential().credential_id);
    // A full chunk of the longest profile name still fits one file.
    let chunk = window
        .emit(ResultStream::Stdout, vec![0x5a; MAX_RESULT_CHUNK])
        .expect("a full chunk");
    let (file, _) = g
        .anchor
        .result_signer()
        .seal_chunk(&chunk)
        .expect("a full chunk seals");
    assert!(file.len() <= MAX_MAILBOX_RECORD);
    let coordinator = g.anchor.coordinator_credential().public_key;
    let (opened, _) = SignedProtocolRecord::read(&file)
        .expect("reads")
        .open::<MailboxResultChunk>(&coordinator)
        .expect("the coordinator's chunk opens");
    assert_eq!(opened, chunk);
    // One byte over: refused when sealed, and refused when opened even
    // with a valid signature.
    let mut over = chunk.clone();
    over.bytes.push(0);
    assert!(matches!(
        g.anchor.result_signer().seal_chunk(&over),
        Err(MailboxError::ChunkTooLarge { len }) if len == MAX_RESULT_CHUNK + 1
    ));
    let payload = over.encode().expect("encodes");
    let signature = Signature(
        SigningKey::from_bytes(&[0x43; 32])
            .sign(&signature_input("mailbox-result-chunk", &payload))
            .to_bytes(),
    );
    // Seeds base 0x40: the coordinator seed is base + 3.
    assert_eq!(
        SigningKey::from_bytes(&[0x43; 32])
            .verifying_key()
            .to_bytes(),
        coordinator
    );
    let file = SignedProtocolRecord::MailboxResultChunk(SignedPayload {
        payload_bytes: payload,
        signature,
    });
    assert!(matches!(
        file.open::<MailboxResultChunk>(&coordinator),
        Err(MailboxError::ChunkTooLarge { .. })
    ));
    assert!(matches!(
        window.emit(ResultStream::Stdout, vec![0; MAX_RESULT_CHUNK + 1]),
        Err(ResultError::ChunkSize { .. })
    ));
    assert!(matches!(
        window.emit(ResultStream::Stdout, Vec::new()),
        Err(ResultError::ChunkSize { len: 0 })
    ));
}

#[test]
fn the_command_language_has_no_shell_form() {
    let v = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(check_argv(&[]), Err(CommandError::Empty));
    assert_eq!(
        check_argv(&v(&["ls -l | grep x"])),
        Err(CommandError::RequiresShell {
            executable: "ls -l | grep x".to_owned()
        })
    );
    assert_eq!(
        check_argv(&v(&["git", "status"])),
        Err(CommandError::RequiresShell {
            executable: "git".to_owned()
        })
    );
    assert_eq!(
        check_argv(&v(&["/bin/echo", "a\0b"])),
        Err(CommandError::Nul { index: 1 })
    );
    assert_eq!(check_argv(&v(&["/bin/sh", "-c", "echo $HOME"])), Ok(()));

    let rules = [
        ResolvedAutoApprovalRule {
            canonical_executable: b"/usr/bin/git".to_vec(),
            args: v(&["fetch", "origin"]),
            allow_extra_args: false,
        },
        ResolvedAutoApprovalRule {
            canonical_executable: b"/usr/bin/make".to_vec(),
            args: v(&["test"]),
            allow_extra_args: true,
        },
        ResolvedAutoApprovalRule {
            canonical_executable: b"/bin/sh".to_vec(),
            args: v(&["-c", "make lint"]),
            allow_extra_args: false,
        },
    ];
    let exact = |a: &[&str]| classify(&rules, &v(a));
    assert_eq!(
        exact(&["/usr/bin/git", "fetch", "origin"]),
        RuleMatch::Exact { rule: 0 }
    );
    // An argv mismatch by one element.
    assert_eq!(
        exact(&["/usr/bin/git", "fetch", "upstream"]),
        RuleMatch::Inexact
    );
    assert_eq!(exact(&["/usr/bin/git", "fetch"]), RuleMatch::Inexact);
    assert_eq!(
        exact(&["/usr/bin/git", "fetch", "origin", "--all"]),
        RuleMatch::Inexact
    );
    assert_eq!(exact(&["git", "fetch", "origin"]), RuleMatch::Inexact);
    assert_eq!(
        exact(&["/usr/bin/../bin/git", "fetch", "origin"]),
        RuleMatch::Inexact
    );
    assert_eq!(
        exact(&["/usr/bin/make", "test"]),
        RuleMatch::Exact { rule: 1 }
    );
    assert_eq!(
        exact(&["/usr/bin/make", "test", "-j4"]),
        RuleMatch::Exact { rule: 1 }
    );
    assert_eq!(exact(&["/usr/bin/make", "-j4", "test"]), RuleMatch::Inexact);
    // A configured shell vector matches only itself.
    assert_eq!(
        exact(&["/bin/sh", "-c", "make lint"]),
        RuleMatch::Exact { rule: 2 }
    );
    assert_eq!(
        exact(&["/bin/sh", "-c", "make lint; id"]),
        RuleMatch::Inexact
    );
    assert_eq!(RuleMatch::Exact { rule: 2 }.model().name(), "Exact");
    assert_eq!(RuleMatch::Inexact.model().name(), "Inexact");
}

/// A rule and a vector built around it, from a small alphabet so that
/// matches and near misses are both common.
#[derive(Clone, Debug)]
struct Case {
    rule: ResolvedAutoApprovalRule,
    argv: Vec<String>,
}

fn word(g: &mut Gen) -> String {
    (*g.choose(&["", "a", "b", "-x", "/bin/a", "/bin/b", "a b", "$(id)"])
        .expect("non-empty"))
    .to_owned()
}

impl Arbitrary for Case {
    fn arbitrary(g: &mut Gen) -> Self {
        let exe = (*g.choose(&["/bin/a", "/bin/b", "a"]).expect("non-empty")).to_owned();
        let args: Vec<String> = (0..usize::arbitrary(g) % 4).map(|_| word(g)).collect();
        let allow_extra_args = bool::arbitrary(g) && !args.is_empty();
        let mut argv = vec![exe.clone()];
        argv.extend(args.iter().cloned());
        // Perturb: change, drop or append elements, or none.
        match u8::arbitrary(g) % 4 {
            0 => {}
            1 => {
                let i = usize::arbitrary(g) % argv.len();
                argv[i] = word(g);
            }
            2 => {
                argv.pop();
            }
            _ => argv.push(word(g)),
        }
        Case {
            rule: ResolvedAutoApprovalRule {
                canonical_executable: exe.into_bytes(),
                args,
                allow_extra_args,
            },
            argv,
        }
    }
}

#[test]
fn a_rule_matches_exactly_its_vector_or_its_granted_prefix() {
    fn prop(case: Case) -> bool {
        let Case { rule, argv } = case;
        let expected = match argv.split_first() {
            None => false,
            Some((exe, args)) => {
                exe.as_bytes() == rule.canonical_executable.as_slice()
                    && if rule.allow_extra_args {
                        args.len() >= rule.args.len() && args[..rule.args.len()] == rule.args[..]
                    } else {
                        args == rule.args.as_slice()
                    }
            }
        };
        let classified = classify(std::slice::from_ref(&rule), &argv);
        rule_matches(&rule, &argv) == expected
            && (classified == RuleMatch::Exact { rule: 0 })
                == (expected && check_argv(&argv).is_ok())
    }
    QuickCheck::new()
        .tests(CASES)
        .max_tests(CASES)
        .quickcheck(prop as fn(Case) -> bool);
}

/// One step against a result window.
#[derive(Clone, Debug)]
enum Step {
    Emit(bool, Vec<u8>),
    Ack(u64),
    AckTimeout,
}

impl Arbitrary for Step {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 8 {
            0..=3 => {
                let len = 1 + usize::arbitrary(g) % 24;
                Step::Emit(
                    bool::arbitrary(g),
                    (0..len).map(|_| u8::arbitrary(g)).collect(),
                )
            }
            4..=6 => Step::Ack(u64::arbitrary(g) % 24),
            _ => Step::AckTimeout,
        }
    }
}

#[test]
fn the_result_window_never_holds_more_than_eight_and_digests_every_byte() {
    fn prop(steps: Vec<Step>) -> TestResult {
        let open = OpenRequest {
            session_binding: SessionBinding {
                generation_identity: identity(1),
                cli_id: CLI,
                session_id: SessionId([1; 16]),
                session_anchor_public_key: [1; 32],
            },
            request_id: EscalationRequestId([9; 16]),
            request_sha256: [3; 32],
        };
        let mut w = ResultWindow::new(open, [4; 32]);
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let (mut emitted, mut settled) = (0u64, 0u64);
        for step in steps {
            match step {
                Step::Emit(err, bytes) => {
                    let stream = if err {
                        ResultStream::Stderr
                    } else {
                        ResultStream::Stdout
                    };
                    match w.emit(stream, bytes.clone()) {
                        Ok(chunk) => {
                            if chunk.sequence != emitted || chunk.bytes != bytes {
                                return TestResult::failed();
                            }
                            emitted += 1;
                            if err {
                                stderr.extend(bytes)
                            } else {
                                stdout.extend(bytes)
                            }
                        }
                        Err(ResultError::WindowFull { unacked }) => {
                            if unacked != MAX_UNACKED_CHUNKS {
                                return TestResult::failed();
                            }
                        }
                        Err(_) => return TestResult::failed(),
                    }
                }
                Step::Ack(h) => match w.acknowledge(h) {
                    Ok(range) => {
                        if h >= emitted || h + 1 < settled || range != (settled..h + 1) {
                            return TestResult::failed();
                        }
                        settled = h + 1;
                    }
                    Err(_) => {
                        if h < emitted && h + 1 >= settled {
                            return TestResult::failed();
                        }
                    }
                },
                Step::AckTimeout => {
                    if w.ack_timeout() != (settled..emitted) {
                        return TestResult::failed();
                    }
                    settled = emitted;
                }
            }
            if w.unacknowledged() != emitted - settled || w.unacknowledged() > MAX_UNACKED_CHUNKS {
                return TestResult::failed();
            }
        }
        let result = w.finish(EscalationOutcome::Completed, Some(0));
        if emitted != settled {
            return TestResult::from_bool(matches!(
                result,
                Err(ResultError::Unacknowledged { .. })
            ));
        }
        let Ok(result) = result else {
            return TestResult::failed();
        };
        TestResult::from_bool(
            result.chunk_count == emitted
                && result.stdout_sha256 == <[u8; 32]>::from(sha2::Sha256::digest(&stdout))
                && result.stderr_sha256 == <[u8; 32]>::from(sha2::Sha256::digest(&stderr)),
        )
    }
    QuickCheck::new()
        .rng(Gen::new(64))
        .tests(CASES / 10)
        .max_tests(CASES / 10)
        .quickcheck(prop as fn(Vec<Step>) -> TestResult);
}

#[test]
fn arbitrary_bytes_are_refused_or_open_without_panicking() {
    let g = generation(7, 0x40);
    let authority = MailboxAuthority::of(&g.anchor);
    fn prop(bytes: Vec<u8>, authority: &MailboxAuthority) -> bool {
        match SignedProtocolRecord::read(&bytes) {
            Err(_) => true,
            // Random bytes never carry a valid sandbox signature.
            Ok(envelope) => {
                authenticate::<MailboxRequest>(&envelope, authority, |_| true).is_err()
                    && authenticate::<MailboxResultAck>(&envelope, authority, |_| true).is_err()
            }
        }
    }
    let mut g = Gen::new(256);
    for _ in 0..CASES {
        let bytes = Vec::<u8>::arbitrary(&mut g);
        assert!(prop(bytes, &authority));
    }
}

/// Generation `number` and the Escalation Client of its session `session`.
fn client_of(number: u64, base: u8, session: u8) -> (Generation, EscalationClient) {
    let (g, bundle) = generation_and_bundle(number, base);
    let client =
        EscalationClient::new(&bundle, capability(&g, session)).expect("the session's client");
    (g, client)
}

#[test]
fn a_flood_of_output_round_trips_with_eight_chunks_outstanding_at_most() {
    let (g, client) = client_of(7, 0x40, 1);
    let authority = MailboxAuthority::of(&g.anchor);
    let (file, mut reader) = client
        .request(
            EscalationRequestId([9; 16]),
            vec!["/usr/bin/yes".to_owned()],
            "print a lot".to_owned(),
        )
        .expect("a request");
    let (request, digest) = authenticate::<MailboxRequest>(
        &SignedProtocolRecord::read(&file).expect("reads"),
        &authority,
        registered,
    )
    .expect("the coordinator accepts its own sandbox's request");
    RequestLedger::default().admit(&request).expect("admitted");
    let open = OpenRequest::of(&request, digest);
    assert_eq!(&open, reader.request());
    let mut window = ResultWindow::new(
        open.clone(),
        g.anchor.coordinator_credential().credential_id,
    );
    // The host process writes 2 MiB; the client acknowledges after every
    // third chunk it reads (a slow reader). The coordinator writes while
    // the window allows, and the files in flight never exceed eight.
    let output: Vec<u8> = (0..2 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let mut pending: std::collections::VecDeque<Vec<u8>> = Default::default();
    let mut offset = 0;
    let mut received = Vec::new();
    let mut most_in_flight = 0;
    for _ in 0..10_000 {
        while window.can_emit() && offset < output.len() {
            let end = (offset + MAX_RESULT_CHUNK).min(output.len());
            let chunk = window
                .emit(ResultStream::Stdout, output[offset..end].to_vec())
                .expect("within the window");
            offset = end;
            pending.push_back(
                g.anchor
                    .result_signer()
                    .seal_chunk(&chunk)
                    .expect("seals")
                    .0,
            );
        }
        most_in_flight = most_in_flight.max(window.unacknowledged());
        for _ in 0..3 {
            if let Some(file) = pending.pop_front() {
                received.extend(
                    reader
                        .chunk(&file)
                        .expect("the coordinator's chunk, in sequence")
                        .bytes,
                );
            }
        }
        if let Some(ack) = client.acknowledgement(&reader).expect("an acknowledgement") {
            let (ack, _) = authenticate::<MailboxResultAck>(
                &SignedProtocolRecord::read(&ack).expect("reads"),
                &authority,
                registered,
            )
            .expect("the acknowledgement authenticates");
            correlate_ack(&open, &ack).expect("it names the request");
            window
                .acknowledge(ack.highest_contiguous_sequence)
                .expect("a valid acknowledgement");
        }
        if offset == output.len() && window.unacknowledged() == 0 {
            break;
        }
    }
    assert_eq!(most_in_flight, MAX_UNACKED_CHUNKS);
    assert_eq!(received, output);
    let result = window
        .finish(EscalationOutcome::Completed, Some(0))
        .expect("nothing unacknowledged");
    let (file, _) = g
        .anchor
        .result_signer()
        .seal_result(&result)
        .expect("seals");
    let checked = reader
        .result(&file)
        .expect("the result matches what arrived");
    assert_eq!(
        checked.chunk_count,
        output.len().div_ceil(MAX_RESULT_CHUNK) as u64
    );
    assert_eq!(checked.exit_code, Some(0));
}

#[test]
fn the_client_refuses_out_of_order_foreign_and_incomplete_results() {
    let (g, client) = client_of(7, 0x40, 1);
    let (file, mut reader) = client
        .request(
            EscalationRequestId([9; 16]),
            vec!["/bin/true".to_owned()],
            String::new(),
        )
        .expect("a request");
    let (request, digest) = authenticate::<MailboxRequest>(
        &SignedProtocolRecord::read(&file).expect("reads"),
        &MailboxAuthority::of(&g.anchor),
        registered,
    )
    .expect("accepted");
    let open = OpenRequest::of(&request, digest);
    let mut window = ResultWindow::new(
        open.clone(),
        g.anchor.coordinator_credential().credential_id,
    );
    let first = window
        .emit(ResultStream::Stderr, b"one".to_vec())
        .expect("emits");
    let second = window
        .emit(ResultStream::Stdout, b"two".to_vec())
        .expect("emits");
    assert!(matches!(
        reader.chunk(
            &g.anchor
                .result_signer()
                .seal_chunk(&second)
                .expect("seals")
                .0
        ),
        Err(ClientError::OutOfSequence {
            expected: 0,
            found: 1
        })
    ));
    // Another request's chunk, and a chunk the sandbox key signed.
    let mut foreign = first.clone();
    foreign.request_id = EscalationRequestId([8; 16]);
    assert!(matches!(
        reader.chunk(
            &g.anchor
                .result_signer()
                .seal_chunk(&foreign)
                .expect("seals")
                .0
        ),
        Err(ClientError::OtherRequest { .. })
    ));
    assert!(matches!(
        reader.chunk(&seal(&g.sandbox_key, &first).expect("seals").0),
        Err(ClientError::Record(MailboxError::Signature(
            SignatureError::Forged { .. }
        )))
    ));
    reader
        .chunk(
            &g.anchor
                .result_signer()
                .seal_chunk(&first)
                .expect("seals")
                .0,
        )
        .expect("chunk 0");
    // The coordinator gave chunk 1 up (AckTimeout): the result counts it,
    // the client never had it.
    window.acknowledge(0).expect("acknowledged");
    assert_eq!(window.ack_timeout(), 1..2);
    let result = window
        .finish(EscalationOutcome::Completed, Some(0))
        .expect("finishes");
    assert!(matches!(
        reader.result(
            &g.anchor
                .result_signer()
                .seal_result(&result)
                .expect("seals")
                .0
        ),
        Err(ClientError::MissingChunks {
            counted: 2,
            received: 1
        })
    ));
    // A client cannot be made from another generation's capability.
    let (other, _) = client_of(6, 0x10, 1);
    let (_, bundle_g) = generation_and_bundle(7, 0x40);
    assert!(matches!(
        EscalationClient::new(&bundle_g, capability(&other, 1)),
        Err(ClientError::OtherCredentials)
    ));
    // Nor build a request needing a shell.
    assert!(matches!(
        client.request(
            EscalationRequestId([7; 16]),
            vec!["make test".to_owned()],
            String::new()
        ),
        Err(ClientError::Command(CommandError::RequiresShell { .. }))
    ));
}

// ---------------------------------------------------------------------------
// The developer prompt (spec 3.8, DX-4, FR-5).

use lazaret_runtime::escalation::answer::{code_of, Answer, AnswerLine, EDIT_LINE_MAX};
use lazaret_runtime::escalation::edit_line::{edit_line, parse_edit_line};
use lazaret_runtime::escalation::prompt::{
    check_decision, confirm_text, prompt_text, showable, shown, DecisionRefusal, PromptExpectation,
    EDITED_ARGV_MAX_BYTES, PROMPT_START, SHOWN_ARGS_MAX, SHOWN_MAX,
};
use lazaret_runtime::terminal::protocol::EscalationPrompt;

/// Session 9, registered with a real Session Anchor key, its open
/// request, and what the coordinator expects of the decision on it.
fn prompted(g: &Generation) -> (SigningKey, MailboxRequest, PromptExpectation) {
    let key = SigningKey::from_bytes(&[0x99; 32]);
    let capability = g
        .anchor
        .register(CLI, SessionId([9; 16]), key.verifying_key().to_bytes())
        .expect("a registration")
        .session_capability;
    let request = MailboxRequest {
        protocol_version: PROTOCOL_VERSION,
        session_binding: capability.session_binding.clone(),
        request_id: EscalationRequestId([0x42; 16]),
        sandbox_credential_id: capability.sandbox_credential_id,
        session_capability: capability,
        command_argv: vec!["/usr/bin/git".into(), "push".into()],
        justification: "publish the branch".into(),
    };
    let digest = sha256(&request.encode().expect("encodes"));
    let expect = PromptExpectation {
        open: OpenRequest::of(&request, digest),
        session_anchor: key.verifying_key().to_bytes(),
        command_argv: request.command_argv.clone(),
    };
    (key, request, expect)
}

fn approval(expect: &PromptExpectation, argv: &[&str]) -> DeveloperDecision {
    DeveloperDecision {
        protocol_version: PROTOCOL_VERSION,
        session_binding: expect.open.session_binding.clone(),
        request_id: expect.open.request_id,
        request_sha256: expect.open.request_sha256,
        decision: DeveloperDecisionKind::Approve,
        approved_command_argv: argv.iter().map(|a| (*a).to_owned()).collect(),
    }
}

fn signed_by(key: &SigningKey, decision: &DeveloperDecision) -> SignedProtocolRecord {
    let payload_bytes = decision.encode().expect("encodes");
    let signature = Signature(
        key.sign(&signature_input(DeveloperDecision::NAME, &payload_bytes))
            .to_bytes(),
    );
    SignedProtocolRecord::DeveloperDecision(SignedPayload {
        payload_bytes,
        signature,
    })
}

#[test]
fn a_decision_counts_only_signed_by_its_sessions_anchor_for_its_open_request() {
    let g = generation(3, 0x30);
    let (key, _, expect) = prompted(&g);
    let approve = approval(&expect, &["/usr/bin/git", "push"]);
    let taken = check_decision(&signed_by(&key, &approve), &expect).expect("the developer's");
    assert_eq!(taken, approve);

    // Another key: the sandbox's, or another session's anchor.
    for other in [&g.sandbox_key, &SigningKey::from_bytes(&[1; 32])] {
        let r = check_decision(&signed_by(other, &approve), &expect);
        assert!(matches!(r, Err(DecisionRefusal::Record(_))), "{r:?}");
    }
    // The same bytes under another record kind's name do not verify.
    let SignedProtocolRecord::DeveloperDecision(payload) = signed_by(&key, &approve) else {
        panic!("a decision");
    };
    let relabelled = SignedProtocolRecord::MailboxRequest(payload);
    assert!(matches!(
        check_decision(&relabelled, &expect),
        Err(DecisionRefusal::Record(MailboxError::Kind { .. }))
    ));
    // Another request, or the same ID with other request bytes.
    let mut other_id = approve.clone();
    other_id.request_id = EscalationRequestId([0x43; 16]);
    let mut other_digest = approve.clone();
    other_digest.request_sha256[0] ^= 1;
    for d in [other_id, other_digest] {
        let r = check_decision(&signed_by(&key, &d), &expect);
        assert!(matches!(r, Err(DecisionRefusal::OtherRequest)), "{r:?}");
    }
    // Bound to another session (session 1's binding), signed by this key.
    let mut other_session = approve.clone();
    other_session.session_binding = capability(&g, 1).session_binding;
    let r = check_decision(&signed_by(&key, &other_session), &expect);
    assert!(matches!(r, Err(DecisionRefusal::OtherSession)), "{r:?}");
    // Another protocol version.
    let mut version = approve.clone();
    version.protocol_version = PROTOCOL_VERSION + 1;
    let r = check_decision(&signed_by(&key, &version), &expect);
    assert!(matches!(r, Err(DecisionRefusal::Version { .. })), "{r:?}");
    // An approval the command language refuses; the developer's edit of
    // the shown vector, taken as signed; an edit too large to have been
    // shown whole; a denial naming a command.
    let shell = approval(&expect, &["git", "push"]);
    let r = check_decision(&signed_by(&key, &shell), &expect);
    assert!(matches!(r, Err(DecisionRefusal::Argv(_))), "{r:?}");
    let edited = approval(&expect, &["/usr/bin/git", "push", "--dry-run"]);
    let taken = check_decision(&signed_by(&key, &edited), &expect).expect("the developer's edit");
    assert_eq!(taken.approved_command_argv, edited.approved_command_argv);
    let long = "x".repeat(SHOWN_MAX + 1);
    let unshown = approval(&expect, &["/usr/bin/git", &long]);
    let r = check_decision(&signed_by(&key, &unshown), &expect);
    assert!(matches!(r, Err(DecisionRefusal::EditTooLarge)), "{r:?}");
    // Showable, but too many bytes for one record (four-byte characters).
    let wide: Vec<String> = std::iter::once("/bin/echo".to_owned())
        .chain((0..30).map(|_| "\u{1f600}".repeat(SHOWN_MAX)))
        .collect();
    assert!(showable(&wide, ""));
    assert!(wide.iter().map(String::len).sum::<usize>() > EDITED_ARGV_MAX_BYTES);
    let wide_refs: Vec<&str> = wide.iter().map(String::as_str).collect();
    let r = check_decision(&signed_by(&key, &approval(&expect, &wide_refs)), &expect);
    assert!(matches!(r, Err(DecisionRefusal::EditTooLarge)), "{r:?}");
    // The shown vector itself is taken as it is (the coordinator showed
    // it, whatever its size).
    let mut big = expect.clone();
    big.command_argv = vec!["/usr/bin/git".into(), long.clone()];
    let r = check_decision(&signed_by(&key, &unshown), &big);
    assert!(r.is_ok(), "{r:?}");
    let mut deny = approve.clone();
    deny.decision = DeveloperDecisionKind::Deny;
    let r = check_decision(&signed_by(&key, &deny), &expect);
    assert!(
        matches!(r, Err(DecisionRefusal::DenialWithCommand { len: 2 })),
        "{r:?}"
    );
    deny.approved_command_argv.clear();
    assert_eq!(
        check_decision(&signed_by(&key, &deny), &expect)
            .expect("a denial")
            .decision,
        DeveloperDecisionKind::Deny
    );
}

#[test]
fn the_prompt_shows_the_requests_text_escaped_never_as_terminal_input() {
    let g = generation(3, 0x30);
    let (_, request, expect) = prompted(&g);
    let prompt = EscalationPrompt {
        session_id: request.session_binding.session_id,
        request_id: request.request_id,
        request_sha256: expect.open.request_sha256,
        profile: "agent".into(),
        command_argv: vec![
            "/usr/bin/env".into(),
            "\x1b[2J clear".into(),
            "\u{1b}]52;c;Zm9v\u{7}".into(),
            "back\rspace\u{202e}gnp.exe".into(),
        ],
        justification: "line one\nApproved: yes\u{9b}".into(),
        deadline_seconds: 300,
    };
    let text = prompt_text(&prompt, "4821");
    // Ours: the start (CAN ends any sequence the sandbox left open, then
    // the terminal's state is reset and the screen cleared); after it no
    // escape at all, and every carriage return starts our own line break.
    let body = text.strip_prefix(PROMPT_START).expect("our start");
    assert!(PROMPT_START.starts_with('\x18'));
    for reset in [
        "\x1b[!p",
        "\x1b[r",
        "\x1b]111\x1b\\",
        "\x1b[2J",
        "\x1b[20l",
        "\x1b[=0;1u",
        "\x1b[>4m",
    ] {
        assert!(PROMPT_START.contains(reset), "{reset:?}");
    }
    assert!(body.is_ascii(), "{body:?}");
    assert!(
        !body.contains('\x1b') && !body.contains('\u{7}'),
        "{body:?}"
    );
    assert!(
        body.match_indices('\r')
            .all(|(i, _)| body[i + 1..].starts_with('\n')),
        "{body:?}"
    );
    // Arguments in the edit line's form: spaces and quotes escaped too,
    // so each reads back as itself.
    for shown_form in [
        "[1] \\u{1b}[2J\\ clear\r\n",
        "[2] \\u{1b}]52;c;Zm9v\\u{7}\r\n",
        "[3] back\\u{d}space\\u{202e}gnp.exe\r\n",
        "line one\\u{a}Approved: yes\\u{9b}",
        "session  09090909",
        "profile  agent",
        "[0] /usr/bin/env",
        "Type 4821 and Enter to approve, e and Enter to edit it first",
    ] {
        assert!(text.contains(shown_form), "{shown_form} in {text:?}");
    }
    // Every character outside printable ASCII is escaped: look-alikes,
    // soft hyphens, tag characters and invisible operators included.
    assert_eq!(
        shown("p\u{0430}ypal\u{ad}\u{e0041}\u{2062}\u{3164}"),
        "p\\u{430}ypal\\u{ad}\\u{e0041}\\u{2062}\\u{3164}"
    );
    assert_eq!(shown("a\\b"), "a\\\\b");
    // What cannot be shown whole is never prompted.
    let arg = |n: usize| "a".repeat(n);
    assert!(showable(&[arg(SHOWN_MAX)], &arg(SHOWN_MAX)));
    assert!(!showable(&[arg(SHOWN_MAX + 1)], ""));
    assert!(!showable(&[arg(1)], &arg(SHOWN_MAX + 1)));
    assert!(showable(&vec![arg(1); SHOWN_ARGS_MAX], ""));
    assert!(!showable(&vec![arg(1); SHOWN_ARGS_MAX + 1], ""));
}

fn git_push() -> Vec<String> {
    vec!["/usr/bin/git".into(), "push".into()]
}

/// Codes for the confirmations, in turn: 4821 (the question's, so it is
/// drawn again), then 7305, 1164, 5590, and 0000 from then on.
fn draws() -> Box<dyn FnMut() -> String + Send> {
    let mut next = ["4821", "7305", "1164", "5590"].into_iter();
    Box::new(move || next.next().unwrap_or("0000").to_owned())
}

fn line() -> AnswerLine {
    AnswerLine::new(git_push(), "4821".into(), draws())
}

/// Feeds `typed` read by read; the answer, once there is one, and
/// everything written on the terminal until then.
fn answered(typed: &[&[u8]]) -> (Option<Answer>, String) {
    let mut line = line();
    let mut written = Vec::new();
    for bytes in typed {
        let (out, answer) = line.feed(bytes);
        written.extend_from_slice(&out);
        if answer.is_some() {
            return (answer, String::from_utf8(written).expect("ASCII"));
        }
    }
    (None, String::from_utf8(written).expect("ASCII"))
}

#[test]
fn only_the_prompts_own_code_approves_and_every_other_answer_denies() {
    let answer = |typed: &[&[u8]]| answered(typed).0;
    let approve = Some(Answer::Approve(git_push()));
    for yes in [
        &b"4821\r"[..],
        b"4821\n",
        b"4821\r\n",
        b"48211\x7f\r",
        b"9\x7f4821\r",
    ] {
        assert_eq!(answer(&[yes]), approve, "{yes:?}");
    }
    assert_eq!(answer(&[b"48", b"21", b"\r"]), approve);
    for no in [
        &b"\r"[..],
        b"yes\r",
        b"y\r",
        b"4820\r",
        b"4821 \r",
        b"7305\r",
        b"48\x03",
        b"4821\x04",
        b"\x1b[A4821\r",
        b"48\x8021\r",
        b"48\t21\r",
    ] {
        assert_eq!(answer(&[no]), Some(Answer::Deny), "{no:?}");
    }
    assert_eq!(answer(&[b"4821"]), None, "no answer before Enter");
    // Without a code (the random source failed) nothing approves.
    let mut blank = AnswerLine::new(git_push(), String::new(), Box::new(String::new));
    assert_eq!(blank.feed(b"\r").1, Some(Answer::Deny));
    let mut blank = AnswerLine::new(git_push(), String::new(), Box::new(String::new));
    let (out, edit) = blank.feed(b"e\r/bin/true\r\r");
    assert_eq!(
        edit,
        Some(Answer::Deny),
        "{}",
        String::from_utf8_lossy(&out)
    );
    // Once answered, nothing more is taken.
    let mut once = line();
    assert_eq!(once.feed(b"no\r").1, Some(Answer::Deny));
    assert_eq!(once.feed(b"4821\r"), (Vec::new(), None));
    // Echo: what was typed, and Backspace erases on screen.
    let mut echo = line();
    assert_eq!(echo.feed(b"4x\x7f"), (b"4x\x08 \x08".to_vec(), None));
    // Codes are four digits, spread over all of them.
    let codes: std::collections::BTreeSet<String> = (0u32..2_000)
        .map(|i| code_of((i.wrapping_mul(2_654_435_761)).to_le_bytes()))
        .collect();
    assert!(codes
        .iter()
        .all(|c| c.len() == 4 && c.bytes().all(|b| b.is_ascii_digit())));
    assert!(codes.len() > 1_500, "{}", codes.len());

    // Keys typed for the shell never approve: any bytes in which the
    // question's code does not stand as typed, whatever else they hold.
    fn not_the_code(bytes: Vec<u8>) -> TestResult {
        if bytes.windows(4).any(|w| w == b"4821") || bytes.contains(&0x7f) || bytes.contains(&0x08)
        {
            return TestResult::discard();
        }
        TestResult::from_bool(!matches!(
            line().feed(&bytes).1,
            Some(Answer::Approve(v)) if v == git_push()
        ))
    }
    QuickCheck::new()
        .tests(CASES)
        .max_tests(CASES * 2)
        .rng(Gen::new(64))
        .quickcheck(not_the_code as fn(Vec<u8>) -> TestResult);
}

/// `e` edits the vector on a line that starts as the shown one; the edit
/// is shown back whole, argument by argument, and only a code drawn for
/// that showing approves it; a line that is no vector says why and stays
/// open; keys the line does not take deny or are ignored, never typed.
#[test]
fn an_edited_vector_is_shown_back_and_approved_only_by_its_own_code() {
    let edited = vec![
        "/usr/bin/git".to_owned(),
        "push".to_owned(),
        "--dry-run".to_owned(),
        "my branch".to_owned(),
    ];
    // The edit line starts as the shown vector; the developer appends.
    // The confirmation's code is drawn again when it equals the
    // question's: 7305, not 4821.
    let (answer, written) = answered(&[b"e\r", b" --dry-run my\\ branch\r", b"7305\r"]);
    assert_eq!(answer, Some(Answer::Approve(edited.clone())), "{written}");
    assert!(written.contains("Edit the command"), "{written}");
    assert!(
        written.contains("> /usr/bin/git push --dry-run my\\ branch"),
        "{written}"
    );
    assert!(
        written.contains(&confirm_text(&edited, "7305")),
        "{written}"
    );
    assert!(written.contains("[3] my\\ branch\r\n"), "{written}");
    // CR LF is one Enter: it opens the edit without submitting it, and
    // submits the edit without answering the confirmation.
    let (answer, written) = answered(&[b"e\r\n", b" x\r\n", b"7305\r\n"]);
    assert_eq!(
        answer,
        Some(Answer::Approve(vec![
            "/usr/bin/git".into(),
            "push".into(),
            "x".into()
        ])),
        "{written}"
    );
    // Ctrl-U starts over; cursor, Home/Delete and bracketed-paste keys do
    // nothing; a terminal's reply (an OSC string) is swallowed whole.
    let (answer, _) = answered(&[
        b"E\r",
        b"\x15/usr/bin/git push",
        b"\x1b[D\x1b[1;5C\x1bOH\x1b[3~\x1b[200~ --dry-run\x1b[201~",
        b"\x1b]11;rgb:0000/0000/0000\x1b\\",
        b" 'my branch'\x1b]10;rgb:ffff/ffff/ffff\x07\r",
        b"7305\r",
    ]);
    assert_eq!(answer, Some(Answer::Approve(edited.clone())));
    // Denials on the edit line: Escape on its own (at the end of a read,
    // or before Enter), Alt with a key, a key reported as a code (kitty's
    // CSI u, modifyOtherKeys), Ctrl-C (also inside a sequence), Ctrl-D,
    // an empty line. The question's code does not approve an edit, a
    // confirmation's code does not approve a later showing.
    for no in [
        &[&b"e\r"[..], b" x\x1b"][..],
        &[b"e\r", b"\x1b\r"],
        &[b"e\r", b"\x1bx"],
        &[b"e\r", b"\x1b[99;5u"],
        &[b"e\r", b"\x1b[27;5;99~"],
        &[b"e\r", b"\x03"],
        &[b"e\r", b"\x1b[1\x03"],
        &[b"e\r", b"\x1b]11;\x03"],
        &[b"e\r", b"\x04"],
        &[b"e\r\x15\r"],
        &[b"e\r\r", b"4821\r"],
        &[b"e\r x\r", b"yes\r"],
        &[b"e\r x\r", b"e\r", b"\r", b"7305\r"],
    ] {
        assert_eq!(answered(no).0, Some(Answer::Deny), "{no:?}");
    }
    // `e` on the confirmation edits again, from the edited vector; its
    // next showing has a code of its own.
    let (answer, written) = answered(&[b"e\r x\r", b"e\r", b"\x7fy\r", b"1164\r"]);
    assert_eq!(
        answer,
        Some(Answer::Approve(vec![
            "/usr/bin/git".into(),
            "push".into(),
            "y".into()
        ])),
        "{written}"
    );
    // A relative executable (named in the edit form, escaped), an open
    // quote, an unknown escape, a vector too large to show: each says
    // why, and the line stays open for editing; a character outside ASCII
    // is not taken (a bell).
    for (typed, why) in [
        (
            &b"\x15git\\u{ff0f}x push\r"[..],
            "git\\u{ff0f}x is not an absolute path",
        ),
        (b" 'open\r", "is not closed"),
        (b" \\q\r", "is no escape"),
        (b"\xc3\xa9", "\x07\x07"),
    ] {
        let (answer, written) = answered(&[b"e\r", typed]);
        assert_eq!(answer, None, "{written}");
        assert!(written.contains(why), "{why:?} in {written:?}");
        assert!(written.is_ascii(), "{written:?}");
    }
    let many = format!("\x15/bin/echo{}\r", " a".repeat(SHOWN_ARGS_MAX));
    let (answer, written) = answered(&[b"e\r", many.as_bytes()]);
    assert_eq!(answer, None);
    assert!(written.contains("at most 32 arguments"), "{written}");
    // The longest shown vector's edit line fits the line's bound.
    let widest: Vec<String> = std::iter::once("/\u{10ffff}".repeat(SHOWN_MAX / 2))
        .chain((1..SHOWN_ARGS_MAX).map(|_| "\u{10ffff}".repeat(SHOWN_MAX)))
        .collect();
    assert!(showable(&widest, ""));
    assert!(edit_line(&widest).len() <= EDIT_LINE_MAX);
}

/// Whatever keys arrive, read by read, an approval names the shown
/// vector after its question's code, or a vector shown back whole with
/// the code that approved it; without a code, nothing approves.
#[test]
fn only_a_vector_shown_with_its_code_is_ever_approved() {
    const KEYS: &[&[u8]] = &[
        b"e",
        b"E",
        b"\r",
        b"\n",
        b"\r\n",
        b" ",
        b"x",
        b"/bin/true",
        b"'",
        b"\\",
        b"\\u{41}",
        b"\x15",
        b"\x7f",
        b"\x1b",
        b"\x1b[D",
        b"\x1b[27u",
        b"\x1b]11;rgb:0/0/0\x07",
        b"\x03",
        b"\xc3\xa9",
        b"4821",
        b"7305",
        b"1164",
        b"48",
        b"21",
    ];
    /// The keys that are or begin a code.
    fn code_key(key: &[u8]) -> bool {
        key.first().is_some_and(u8::is_ascii_digit)
    }
    fn approves_only_what_was_shown(keys: Vec<u8>, with_codes: bool) -> TestResult {
        let mut line = line();
        let mut written = String::new();
        for k in keys {
            let key = KEYS[usize::from(k) % KEYS.len()];
            if !with_codes && code_key(key) {
                continue;
            }
            let (out, answer) = line.feed(key);
            written.push_str(&String::from_utf8_lossy(&out));
            match answer {
                Some(Answer::Approve(argv)) => {
                    let shown_back = ["7305", "1164", "5590", "0000"]
                        .iter()
                        .any(|c| written.contains(&confirm_text(&argv, c)));
                    return TestResult::from_bool(with_codes && (argv == git_push() || shown_back));
                }
                Some(Answer::Deny) => return TestResult::passed(),
                None => {}
            }
        }
        TestResult::passed()
    }
    fn with_codes(keys: Vec<u8>) -> TestResult {
        approves_only_what_was_shown(keys, true)
    }
    fn without_codes(keys: Vec<u8>) -> TestResult {
        approves_only_what_was_shown(keys, false)
    }
    for property in [with_codes as fn(Vec<u8>) -> TestResult, without_codes] {
        QuickCheck::new()
            .tests(CASES)
            .max_tests(CASES)
            .rng(Gen::new(24))
            .quickcheck(property);
    }
}

/// Every vector, whatever its characters, reads back from its edit line,
/// which is printable ASCII.
#[test]
fn every_vector_reads_back_from_its_edit_line() {
    fn round_trip(argv: Vec<String>) -> bool {
        let line = edit_line(&argv);
        line.bytes().all(|b| (b' '..=b'~').contains(&b))
            && parse_edit_line(&line).as_ref() == Ok(&argv)
    }
    QuickCheck::new()
        .tests(CASES)
        .max_tests(CASES)
        .rng(Gen::new(16))
        .quickcheck(round_trip as fn(Vec<String>) -> bool);
}
