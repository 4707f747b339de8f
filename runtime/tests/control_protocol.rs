//! The v1 control connection (spec 3.3, 3.4; schemas.md `ControlRequest` /
//! `ControlResponse`): fixed variant indices (schema variants first,
//! Lazaret's extensions after them), the session opening's checks, each
//! refusal by name, and properties over arbitrary, damaged and reordered
//! frames (quickcheck, 100,000 cases each).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_runtime::coordinator::control::*;
use lazaret_runtime::coordinator::messages::{InteractiveTerminal, SessionRequest, TerminalSize};
use lazaret_runtime::protocol::records::{
    ClientEnrollmentRequest, GenerationIdentity, SessionBinding, SessionRegistrationRequest,
};
use lazaret_runtime::protocol::PROTOCOL_VERSION;
use lazaret_runtime::records::codec;
use lazaret_runtime::records::ids::{
    CliId, ConfigurationFingerprint, CoordinatorId, DomainId, GenerationId, ProfileName, SandboxId,
    SessionId,
};
use lazaret_runtime::terminal::protocol::*;
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use std::num::NonZeroU16;

const CASES: u64 = 100_000;

fn identity() -> GenerationIdentity {
    GenerationIdentity {
        agent_profile: ProfileName::new("agent").unwrap(),
        domain_id: DomainId([1; 32]),
        generation_id: GenerationId(7),
        configuration_fingerprint: ConfigurationFingerprint([2; 32]),
        coordinator_id: CoordinatorId([3; 16]),
        sandbox_id: SandboxId([4; 16]),
    }
}

const CLI: CliId = CliId([9; 16]);

fn request(terminal: bool) -> SessionRequest {
    SessionRequest {
        domain_id: [1; 32],
        fingerprint: [2; 32],
        session_id: SessionId([5; 16]),
        argv: vec!["sh".into(), "-c".into(), "echo hi".into()],
        terminal: terminal.then(|| InteractiveTerminal {
            size: TerminalSize {
                rows: 40,
                columns: 120,
            },
            term: Some("xterm-256color".into()),
        }),
        session_anchor: [6; 32],
    }
}

fn frames(request: &SessionRequest) -> Vec<Vec<u8>> {
    opening_requests(request, &identity(), CLI)
        .unwrap()
        .iter()
        .map(|r| encode_control_request(r).unwrap())
        .collect()
}

fn open(frames: &[Vec<u8>]) -> Result<Option<OpenedSession>, Refusal> {
    let mut opening = SessionOpening::new(identity(), CLI);
    let mut opened = None;
    for frame in frames {
        opened = opening.feed(frame)?;
    }
    Ok(opened)
}

#[test]
fn schema_variants_keep_their_indices_and_extensions_follow() {
    let [register, execute] = opening_requests(&request(false), &identity(), CLI).unwrap();
    let [_, attach] = opening_requests(&request(true), &identity(), CLI).unwrap();
    let enroll = ControlRequest::Enroll(ClientEnrollmentRequest {
        protocol_version: PROTOCOL_VERSION,
        generation_identity: identity(),
        cli_id: CLI,
        certificate_signing_request_der: vec![1, 2, 3],
    });
    let first = |r: &ControlRequest| encode_control_request(r).unwrap()[0];
    assert_eq!(
        [&enroll, &register, &execute, &attach].map(first),
        [0, 1, 2, 3]
    );
    let refused = codec::encode("t", &ControlResponse::Refused(Refusal::SessionIdTaken)).unwrap();
    assert_eq!(refused[..2], [3, 6]);
    let abort = SessionAbort::new(SessionId([8; 16]), SessionAbortKind::RuntimeLost, "gone");
    let terminal = encode_message(&SessionTerminalMessage::Abort(abort.clone())).unwrap();
    let piped = encode_non_interactive(&NonInteractiveSessionMessage::Abort(abort)).unwrap();
    // Variant, Session ID, kind (RuntimeLost = 1), the reason's length and text.
    let mut tail = vec![8u8; 16];
    tail.extend([1, 4]);
    tail.extend(b"gone");
    assert_eq!(terminal, [&[2u8][..], &tail].concat());
    assert_eq!(piped, [&[3u8][..], &tail].concat());
    let closed = NonInteractiveSessionEvent::InputClosed(SessionClose {
        session_id: SessionId([8; 16]),
    });
    assert_eq!(encode_non_interactive_event(&closed).unwrap()[0], 1);
}

#[test]
fn an_opening_carries_the_request_whole_and_compares_the_configuration() {
    for terminal in [false, true] {
        let request = request(terminal);
        let opened = open(&frames(&request)).unwrap().unwrap();
        assert_eq!(opened.request, request);
        assert!(opened.matches);
        assert_eq!(opened.binding.cli_id, CLI);
        assert_eq!(opened.binding.session_id, request.session_id);
    }
    // Another configuration of the same Domain is opened, for the model's
    // RefuseConfigurationMismatch to refuse (FR-2).
    let mut other = request(false);
    other.fingerprint = [0xee; 32];
    assert!(!open(&frames(&other)).unwrap().unwrap().matches);
}

#[test]
fn a_zero_window_is_sent_as_the_default_one() {
    let mut zero = request(true);
    if let Some(t) = zero.terminal.as_mut() {
        t.size = TerminalSize {
            rows: 0,
            columns: 0,
        };
    }
    let opened = open(&frames(&zero)).unwrap().unwrap();
    let size = opened.request.terminal.unwrap().size;
    assert_eq!(
        (size.rows, size.columns),
        (DEFAULT_ROWS.get(), DEFAULT_COLUMNS.get())
    );
}

/// Every way an opening can be wrong is refused by name.
#[test]
fn every_bad_opening_is_refused_by_name() {
    let good = frames(&request(false));
    let register_with = |edit: &dyn Fn(&mut SessionRegistrationRequest)| {
        let [ControlRequest::Register(mut r), _] =
            opening_requests(&request(false), &identity(), CLI).unwrap()
        else {
            unreachable!()
        };
        edit(&mut r);
        vec![
            encode_control_request(&ControlRequest::Register(r)).unwrap(),
            good[1].clone(),
        ]
    };
    type Case = (&'static str, Vec<Vec<u8>>, fn(&Refusal) -> bool);
    let cases: Vec<Case> = vec![
        ("version", register_with(&|r| r.protocol_version = 2), |r| {
            matches!(r, Refusal::Version { supported: 1 })
        }),
        (
            "domain",
            register_with(&|r| r.session_binding.generation_identity.domain_id = DomainId([0; 32])),
            |r| matches!(r, Refusal::OtherDomain { running } if *running == [1; 32]),
        ),
        (
            "generation",
            register_with(&|r| {
                r.session_binding.generation_identity.generation_id = GenerationId(6)
            }),
            |r| {
                matches!(
                    r,
                    Refusal::StaleGeneration {
                        running: 7,
                        requested: 6
                    }
                )
            },
        ),
        (
            "sandbox",
            register_with(&|r| {
                r.session_binding.generation_identity.sandbox_id = SandboxId([0; 16])
            }),
            |r| matches!(r, Refusal::StaleGeneration { .. }),
        ),
        (
            "client",
            register_with(&|r| r.session_binding.cli_id = CliId([0; 16])),
            |r| matches!(r, Refusal::ClientMismatch),
        ),
        (
            "session",
            register_with(&|r| r.session_binding.session_id = SessionId([0; 16])),
            |r| matches!(r, Refusal::SessionMismatch),
        ),
        (
            "start first",
            vec![good[1].clone()],
            |r| matches!(r, Refusal::Unexpected { expected, found } if expected == "Register" && found == "Execute"),
        ),
        (
            "register twice",
            vec![good[0].clone(), good[0].clone()],
            |r| matches!(r, Refusal::Unexpected { found, .. } if found == "Register"),
        ),
        (
            "enroll on a session connection",
            vec![
                encode_control_request(&ControlRequest::Enroll(ClientEnrollmentRequest {
                    protocol_version: PROTOCOL_VERSION,
                    generation_identity: identity(),
                    cli_id: CLI,
                    certificate_signing_request_der: Vec::new(),
                }))
                .unwrap(),
            ],
            |r| matches!(r, Refusal::Unexpected { found, .. } if found == "Enroll"),
        ),
        (
            "truncated",
            vec![good[0][..good[0].len() - 1].to_vec()],
            |r| matches!(r, Refusal::Malformed(_)),
        ),
        (
            "trailing byte",
            vec![[good[0].clone(), vec![0]].concat()],
            |r| matches!(r, Refusal::Malformed(m) if m.contains("trailing")),
        ),
        ("unknown variant", vec![vec![4, 0, 0]], |r| {
            matches!(r, Refusal::Malformed(_))
        }),
        (
            "oversized",
            vec![vec![1; MAX_CONTROL_FRAME + 1]],
            |r| matches!(r, Refusal::Malformed(m) if m.contains("exceeds")),
        ),
        ("empty", vec![Vec::new()], |r| {
            matches!(r, Refusal::Malformed(_))
        }),
    ];
    for (name, frames, expected) in cases {
        match open(&frames) {
            Err(refusal) => assert!(expected(&refusal), "{name}: refused with {refusal:?}"),
            Ok(opened) => panic!("{name}: not refused: {opened:?}"),
        }
    }
    // A NUL in the argv or an unprintable TERM cannot be encoded either.
    let mut nul = request(false);
    nul.argv.push("a\0b".into());
    assert!(matches!(
        opening_requests(&nul, &identity(), CLI),
        Err(ProtocolError::ArgvNul { index: 3 })
    ));
    let mut term = request(true);
    if let Some(t) = term.terminal.as_mut() {
        t.term = Some("xterm\x1b".into());
    }
    assert!(matches!(
        opening_requests(&term, &identity(), CLI),
        Err(ProtocolError::Term { len: 6 })
    ));
}

/// One frame of an arbitrary opening sequence: a good frame, damaged or
/// cut, or noise.
#[derive(Clone, Debug)]
enum Frame {
    Register,
    Execute,
    Attach,
    Damaged { which: u8, edits: Vec<(usize, u8)> },
    Cut { which: u8, at: usize },
    Noise(Vec<u8>),
}

impl Arbitrary for Frame {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 6 {
            0 => Self::Register,
            1 => Self::Execute,
            2 => Self::Attach,
            3 => Self::Damaged {
                which: u8::arbitrary(g),
                edits: Vec::arbitrary(g),
            },
            4 => Self::Cut {
                which: u8::arbitrary(g),
                at: usize::arbitrary(g),
            },
            _ => Self::Noise(Vec::arbitrary(g)),
        }
    }
}

fn good_frames() -> &'static [Vec<u8>; 3] {
    static GOOD: std::sync::OnceLock<[Vec<u8>; 3]> = std::sync::OnceLock::new();
    GOOD.get_or_init(|| {
        let piped = frames(&request(false));
        let attach = frames(&request(true));
        [piped[0].clone(), piped[1].clone(), attach[1].clone()]
    })
}

impl Frame {
    fn bytes(&self, good: &[Vec<u8>; 3]) -> Vec<u8> {
        match self {
            Self::Register => good[0].clone(),
            Self::Execute => good[1].clone(),
            Self::Attach => good[2].clone(),
            Self::Damaged { which, edits } => {
                let mut b = good[usize::from(*which) % 3].clone();
                for &(at, value) in edits {
                    let at = at % b.len();
                    b[at] = value;
                }
                b
            }
            Self::Cut { which, at } => {
                let b = &good[usize::from(*which) % 3];
                b[..at % b.len()].to_vec()
            }
            Self::Noise(bytes) => bytes.clone(),
        }
    }
}

/// Any sequence of frames, in any order: the opening never panics, opens
/// only on its second frame, and then only for a registration of this
/// generation and Client CLI followed by a start of the same session; a
/// refusal ends it.
#[test]
fn arbitrary_frame_sequences_open_only_a_registered_start() {
    fn check(frames: Vec<Frame>) -> TestResult {
        let good = good_frames();
        let mut opening = SessionOpening::new(identity(), CLI);
        for (i, frame) in frames.iter().enumerate() {
            let bytes = frame.bytes(good);
            match opening.feed(&bytes) {
                Err(_) => return TestResult::passed(),
                Ok(None) => {
                    // Only a registration leaves the opening waiting.
                    if i != 0
                        || !matches!(
                            decode_control_request(&bytes),
                            Ok(ControlRequest::Register(_))
                        )
                    {
                        return TestResult::failed();
                    }
                }
                Ok(Some(opened)) => {
                    let first = decode_control_request(&frames[0].bytes(good));
                    let Ok(ControlRequest::Register(registration)) = first else {
                        return TestResult::failed();
                    };
                    let start_session = match decode_control_request(&bytes) {
                        Ok(ControlRequest::Execute(x)) => x.session_id(),
                        Ok(ControlRequest::Attach(x)) => x.session_id(),
                        _ => return TestResult::failed(),
                    };
                    let binding: &SessionBinding = &registration.session_binding;
                    let mut named = binding.generation_identity.clone();
                    named.configuration_fingerprint = identity().configuration_fingerprint;
                    return TestResult::from_bool(
                        i == 1
                            && named == identity()
                            && binding.cli_id == CLI
                            && start_session == binding.session_id
                            && opened.binding == *binding,
                    );
                }
            }
        }
        TestResult::passed()
    }
    QuickCheck::new()
        .tests(CASES)
        .max_tests(CASES)
        .quickcheck(check as fn(Vec<Frame>) -> TestResult);
}

/// Arbitrary requests and answers round-trip; a strict prefix of any
/// encoding never decodes (every record ends in a field of fixed or
/// announced length).
#[test]
fn control_records_round_trip_and_refuse_truncation() {
    fn prop(argv: Vec<String>, rows: u16, columns: u16, reason: String, cut: usize) -> TestResult {
        let argv: Vec<String> = argv
            .into_iter()
            .take(MAX_ARGV)
            .map(|a| a.replace('\0', ""))
            .collect();
        if argv.is_empty() {
            return TestResult::discard();
        }
        let session_id = SessionId([3; 16]);
        let (Some(rows), Some(columns)) = (NonZeroU16::new(rows), NonZeroU16::new(columns)) else {
            return TestResult::discard();
        };
        let requests = [
            ControlRequest::Execute(
                NonInteractiveSessionRequest::new(session_id, argv.clone()).unwrap(),
            ),
            ControlRequest::Attach(
                InteractiveSessionRequest::new(session_id, argv, rows, columns, None).unwrap(),
            ),
        ];
        let abort = SessionAbort::new(session_id, SessionAbortKind::StartFailed, &reason);
        let mut ok = abort.reason().len() <= MAX_REASON_BYTES;
        for request in &requests {
            let bytes = encode_control_request(request).unwrap();
            ok &= decode_control_request(&bytes).is_ok_and(|r| r == *request)
                && (bytes.len() > MAX_CONTROL_FRAME
                    || decode_control_request(&bytes[..cut % bytes.len()]).is_err());
        }
        let refused = ControlResponse::Refused(Refusal::SessionFailed(reason));
        let bytes = codec::encode("t", &refused).unwrap();
        ok &= codec::decode::<ControlResponse>("t", &bytes).is_ok_and(|r| r == refused);
        for message in [
            NonInteractiveSessionMessage::Abort(abort.clone()),
            NonInteractiveSessionMessage::Stderr(NonInteractiveOutput {
                session_id,
                bytes: Chunk::new(abort.reason().as_bytes().to_vec()).unwrap(),
            }),
        ] {
            let bytes = encode_non_interactive(&message).unwrap();
            ok &= decode_non_interactive(&bytes).is_ok_and(|m| m == message)
                && decode_non_interactive(&bytes[..cut % bytes.len()]).is_err();
        }
        TestResult::from_bool(ok)
    }
    // Small values (up to 24 elements of up to 24 characters): the bounds
    // themselves are checked by the fixed tests above.
    QuickCheck::new()
        .rng(Gen::new(24))
        .tests(CASES)
        .max_tests(2 * CASES)
        .quickcheck(prop as fn(Vec<String>, u16, u16, String, usize) -> TestResult);
}

/// Arbitrary bytes never panic a decoder of the session streams; whatever
/// decodes is within its bounds.
#[test]
fn arbitrary_bytes_decode_to_a_refusal_or_a_bounded_record() {
    fn prop(bytes: Vec<u8>) -> bool {
        let events = decode_event(&bytes).map_or(true, |e| match e {
            SessionTerminalEvent::Input(i) => i.bytes.len() <= MAX_CHUNK_BYTES,
            _ => true,
        });
        let piped = decode_non_interactive_event(&bytes).map_or(true, |e| match e {
            NonInteractiveSessionEvent::Input(i) => i.bytes.len() <= MAX_CHUNK_BYTES,
            NonInteractiveSessionEvent::InputClosed(_) => true,
        });
        let messages = decode_message(&bytes).map_or(true, |m| match m {
            SessionTerminalMessage::Abort(a) => a.reason().len() <= MAX_REASON_BYTES,
            _ => true,
        });
        let request = decode_interactive_request(&bytes)
            .map_or(true, |r| r.term().is_none_or(|t| t.len() <= MAX_TERM_BYTES));
        // A request that decodes re-encodes to one that decodes the same.
        let control = decode_control_request(&bytes).map_or(true, |r| {
            encode_control_request(&r)
                .is_ok_and(|b| decode_control_request(&b).is_ok_and(|again| again == r))
        });
        events && piped && messages && request && control
    }
    QuickCheck::new()
        .tests(CASES)
        .max_tests(CASES)
        .quickcheck(prop as fn(Vec<u8>) -> bool);
}
