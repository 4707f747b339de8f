//! The CLI side of a session, against a fake Host Coordinator on a real
//! unix socket with the real publication identity and TLS: it checks its
//! registration (spec 3.3) before anything else, and filters the sandbox's stdout and stderr (spec README
//! 'Terminal output hygiene'): clipboard sequences split across messages
//! and streams are dropped, everything else is written byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

#[path = "support/trust_anchor.rs"]
mod trust_anchor;

use lazaret_effects::coordinator::client::{run_session, ClientError, JoinPlan, SessionAnchor};
use lazaret_effects::coordinator::control_tls::{self, Accepted};
use lazaret_effects::coordinator::paths::DomainPaths;
use lazaret_effects::coordinator::{channel, publication};
use lazaret_runtime::coordinator::messages::{
    ClientMessage, CommandStatus, CoordinatorMessage, Hello, Registration, PROTOCOL_VERSION,
};
use lazaret_runtime::protocol::{TrustAnchor, VerifyError};
use lazaret_runtime::records::ids::{CliId, SessionId};
use std::os::unix::net::UnixListener;

/// What the fake coordinator sends after `Joined`.
fn script() -> Vec<CoordinatorMessage> {
    use CoordinatorMessage::{Stderr, Stdout};
    let m = |s: &[u8]| s.to_vec();
    vec![
        Stdout(m(b"start\n\x1b]0;ti")),
        Stdout(m(b"tle\x07\x1b[3")),
        Stdout(m(b"1mred\x1b[0m\n")),
        // OSC 52 split across three messages.
        Stdout(m(b"before|\x1b]5")),
        Stdout(m(b"2;c;aGVs")),
        Stdout(m(b"bG8=\x07|after\n")),
        // On stderr: the C1 form in UTF-8, ended by ST; then tmux's wrapper.
        Stderr(m(b"err|\xc2")),
        Stderr(m(b"\x9d52;c;aGk=\x1b\\|err\n")),
        Stderr(m(b"\x1bPtmux;\x1b\x1b]52;c;aGk=\x07\x1b\\tmux-gone\n")),
        // stdout leaves an ESC pending; stderr's `]52;` must not use it.
        Stdout(m(b"\x1b\x1b]52;c;eA==\x07")),
        Stderr(m(b"]52;c;eQ==\x07cross\n")),
        Stdout(m(b"[0mtext\n")),
        // Ends unterminated: discarded at Exited.
        Stdout(m(b"last\x1b]52;c;dW50ZXJt")),
        CoordinatorMessage::Exited(CommandStatus::Exited(7)),
    ]
}

/// The registration binding `anchor`.
fn joined(trust_anchor: &TrustAnchor, anchor: [u8; 32]) -> CoordinatorMessage {
    CoordinatorMessage::Joined {
        generation: 1,
        cold: false,
        timings: Vec::new(),
        registration: Box::new(Registration {
            response: trust_anchor
                .register(CliId([10; 16]), SessionId([11; 16]), anchor)
                .unwrap(),
            trust_manifest: trust_anchor.manifest().clone(),
            coordinator_protocol_credential: trust_anchor.coordinator_credential().clone(),
        }),
    }
}

/// A fake coordinator on `paths`' socket, with a real publication identity
/// and TLS (spec 3.3): it answers the enrollment, then on the mTLS
/// connection answers the Hello with the registration of
/// `registered(hello's anchor)`, then sends `script`.
fn fake_coordinator(
    paths: &DomainPaths,
    registered: fn([u8; 32]) -> [u8; 32],
    script: Vec<CoordinatorMessage>,
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
        let Accepted::Client { mut stream, .. } =
            control_tls::accept(session, &mut tls, uid).unwrap()
        else {
            panic!("the second connection is not an authenticated client");
        };
        let hello: ClientMessage = channel::receive(&mut stream, "test").unwrap();
        let ClientMessage::Hello(hello) = hello else {
            panic!("the first message is not a Hello: {hello:?}");
        };
        channel::send(
            &mut stream,
            "test",
            &joined(&trust_anchor, registered(hello.session_anchor)),
        )
        .unwrap();
        // A client that refused its registration has hung up.
        for message in script {
            if channel::send(&mut stream, "test", &message).is_err() {
                return;
            }
        }
        // Drains the client (stdin closed) until it hangs up.
        while channel::receive::<ClientMessage>(&mut stream, "test").is_ok() {}
    })
}

fn plan(paths: DomainPaths) -> JoinPlan {
    let session_anchor = SessionAnchor::generate().unwrap();
    JoinPlan {
        paths,
        hello: Hello {
            version: PROTOCOL_VERSION,
            domain_id: [1; 32],
            fingerprint: [2; 32],
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
    let coordinator = fake_coordinator(&paths, |_| [0x42; 32], script());
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
    let coordinator = fake_coordinator(&paths, |anchor| anchor, script());
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
