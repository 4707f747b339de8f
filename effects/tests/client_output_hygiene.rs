//! The CLI side of a session, against a fake Host Coordinator on a real
//! unix socket with the real publication identity and TLS: it checks its
//! registration (spec 3.3) before anything else, and filters the sandbox's stdout and stderr (spec README
//! 'Terminal output hygiene'): clipboard sequences split across messages
//! and streams are dropped, everything else is written byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[path = "support/trust_anchor.rs"]
mod trust_anchor;

use lazaret_effects::coordinator::client::{
    fresh_session_id, run_session, ClientError, JoinPlan, SessionAnchor,
};
use lazaret_effects::coordinator::control_tls::{self, Accepted};
use lazaret_effects::coordinator::paths::DomainPaths;
use lazaret_effects::coordinator::{channel, publication};
use lazaret_runtime::coordinator::control::{ControlResponse, SessionOpening, SessionStarted};
use lazaret_runtime::coordinator::messages::{CommandStatus, SessionRequest};
use lazaret_runtime::protocol::{TrustAnchor, VerifyError};
use lazaret_runtime::records::ids::SessionId;
use lazaret_runtime::terminal::protocol::{
    Chunk, NonInteractiveOutput, NonInteractiveSessionEvent, NonInteractiveSessionMessage,
    SessionExit,
};
use std::os::unix::net::UnixListener;

/// What the fake coordinator sends after `Started`, for session `id`.
fn script(id: SessionId) -> Vec<NonInteractiveSessionMessage> {
    let out = |s: &[u8]| NonInteractiveOutput {
        session_id: id,
        bytes: Chunk::new(s.to_vec()).unwrap(),
    };
    let stdout = |s: &[u8]| NonInteractiveSessionMessage::Stdout(out(s));
    let stderr = |s: &[u8]| NonInteractiveSessionMessage::Stderr(out(s));
    vec![
        stdout(b"start\n\x1b]0;ti"),
        stdout(b"tle\x07\x1b[3"),
        stdout(b"1mred\x1b[0m\n"),
        // OSC 52 split across three messages.
        stdout(b"before|\x1b]5"),
        stdout(b"2;c;aGVs"),
        stdout(b"bG8=\x07|after\n"),
        // On stderr: the C1 form in UTF-8, ended by ST; then tmux's wrapper.
        stderr(b"err|\xc2"),
        stderr(b"\x9d52;c;aGk=\x1b\\|err\n"),
        stderr(b"\x1bPtmux;\x1b\x1b]52;c;aGk=\x07\x1b\\tmux-gone\n"),
        // stdout leaves an ESC pending; stderr's `]52;` must not use it.
        stdout(b"\x1b\x1b]52;c;eA==\x07"),
        stderr(b"]52;c;eQ==\x07cross\n"),
        stdout(b"[0mtext\n"),
        // Ends unterminated: discarded at the exit.
        stdout(b"last\x1b]52;c;dW50ZXJt"),
        NonInteractiveSessionMessage::Exit(SessionExit::exited(id, 7)),
    ]
}

/// A fake coordinator on `paths`' socket, with a real publication identity
/// and TLS (spec 3.3): it answers the enrollment, then on the mTLS
/// connection takes the opening frames through the real [`SessionOpening`]
/// checks and answers them with the registration of `registered(the
/// request's anchor)`, then sends its script.
fn fake_coordinator(
    paths: &DomainPaths,
    registered: fn([u8; 32]) -> [u8; 32],
) -> std::thread::JoinHandle<()> {
    std::fs::create_dir_all(&paths.runtime).unwrap();
    let (trust_anchor, mut tls) = trust_anchor::trust_anchor();
    publication::publish(&paths.publication(), tls.publication()).unwrap();
    let listener = UnixListener::bind(paths.socket()).unwrap();
    let uid = rustix::process::geteuid().as_raw();
    std::thread::spawn(move || {
        let (enrolling, _) = listener.accept().unwrap();
        let enrolled = control_tls::accept(enrolling, &mut tls, uid).unwrap();
        assert!(matches!(enrolled, Accepted::Enrolled(_)), "{enrolled:?}");
        let (session, _) = listener.accept().unwrap();
        let Accepted::Client { mut stream, cli_id } =
            control_tls::accept(session, &mut tls, uid).unwrap()
        else {
            panic!("the second connection is not an authenticated client");
        };
        let mut opening = SessionOpening::new(tls.generation_identity().clone(), cli_id);
        let register = channel::receive_body(&mut stream, "test", 1 << 16).unwrap();
        assert_eq!(opening.feed(&register).unwrap(), None);
        let start = channel::receive_body(&mut stream, "test", 1 << 16).unwrap();
        let opened = opening.feed(&start).unwrap().unwrap();
        assert!(opened.matches, "{opened:?}");
        let request = opened.request;
        let registration = trust_anchor
            .register(
                cli_id,
                request.session_id,
                registered(request.session_anchor),
            )
            .unwrap();
        channel::send(
            &mut stream,
            "test",
            &ControlResponse::Registered(registration),
        )
        .unwrap();
        let started =
            ControlResponse::Started(Box::new(started(&trust_anchor, request.session_id)));
        channel::send(&mut stream, "test", &started).unwrap();
        // A client that refused its registration has hung up.
        for message in script(request.session_id) {
            if channel::send(&mut stream, "test", &message).is_err() {
                return;
            }
        }
        // Drains the client (its input closed) until it hangs up.
        while channel::receive::<NonInteractiveSessionEvent>(&mut stream, "test").is_ok() {}
    })
}

fn started(trust_anchor: &TrustAnchor, session_id: SessionId) -> SessionStarted {
    SessionStarted {
        session_id,
        cold: false,
        timings: Vec::new(),
        trust_manifest: trust_anchor.manifest().clone(),
        coordinator_protocol_credential: trust_anchor.coordinator_credential().clone(),
    }
}

fn plan(paths: DomainPaths) -> JoinPlan {
    let session_anchor = SessionAnchor::generate().unwrap();
    JoinPlan {
        paths,
        request: SessionRequest {
            domain_id: [1; 32],
            fingerprint: [2; 32],
            session_id: fresh_session_id().unwrap(),
            argv: vec!["true".into()],
            terminal: None,
            session_anchor: session_anchor.public_key(),
        },
        session_anchor,
        coordinator: vec!["/nonexistent/lazaret".into()],
    }
}

/// Spec 3.3: a registration that binds another Session Anchor than the
/// one this CLI holds is refused, before any of the session's output.
#[test]
fn a_registration_of_another_session_anchor_is_refused_before_any_output() {
    let dir = tempfile::tempdir().unwrap();
    let paths = DomainPaths::new(&dir.path().join("run"), &dir.path().join("store"));
    let coordinator = fake_coordinator(&paths, |_| [0x42; 32]);
    let plan = plan(paths);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let refused = run_session(&plan, Box::new(std::io::empty()), &mut out, &mut err, None);
    assert!(
        matches!(
            refused,
            Err(ClientError::Registration(VerifyError::OtherSessionAnchor))
        ),
        "{refused:?}"
    );
    drop(plan);
    coordinator.join().unwrap();
    assert!(out.is_empty() && err.is_empty());
}

#[test]
fn a_session_streams_everything_but_clipboard_sequences() {
    let dir = tempfile::tempdir().unwrap();
    let paths = DomainPaths::new(&dir.path().join("run"), &dir.path().join("store"));
    let coordinator = fake_coordinator(&paths, |anchor| anchor);
    let plan = plan(paths);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let (status, _) =
        run_session(&plan, Box::new(std::io::empty()), &mut out, &mut err, None).unwrap();
    coordinator.join().unwrap();
    assert_eq!(status, CommandStatus::Exited(7));
    assert_eq!(
        out.escape_ascii().to_string(),
        b"start\n\x1b]0;title\x07\x1b[31mred\x1b[0m\nbefore||after\n\x1b[0mtext\nlast"
            .escape_ascii()
            .to_string()
    );
    assert_eq!(
        err.escape_ascii().to_string(),
        b"err||err\ntmux-gone\ncross\n".escape_ascii().to_string()
    );
}
