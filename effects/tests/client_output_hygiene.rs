//! The CLI side of a session filters the sandbox's stdout and stderr (spec
//! README 'Terminal output hygiene'): a fake Host Coordinator on a real
//! unix socket sends clipboard sequences split across messages and streams,
//! and `run_session` writes everything else byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

use lazaret_effects::coordinator::channel;
use lazaret_effects::coordinator::client::{run_session, JoinPlan};
use lazaret_effects::coordinator::paths::DomainPaths;
use lazaret_runtime::coordinator::messages::{
    ClientMessage, CommandStatus, CoordinatorMessage, Hello, PROTOCOL_VERSION,
};
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

#[test]
fn a_session_streams_everything_but_clipboard_sequences() {
    let dir = tempfile::tempdir().unwrap();
    let paths = DomainPaths::new(&dir.path().join("run"), &dir.path().join("store"));
    std::fs::create_dir_all(&paths.runtime).unwrap();
    let listener = UnixListener::bind(paths.socket()).unwrap();
    let coordinator = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let hello: ClientMessage = channel::receive(&mut stream, "test").unwrap();
        assert!(matches!(hello, ClientMessage::Hello(_)));
        let joined = CoordinatorMessage::Joined {
            generation: 1,
            cold: false,
            timings: Vec::new(),
        };
        channel::send(&mut stream, "test", &joined).unwrap();
        for message in script() {
            channel::send(&mut stream, "test", &message).unwrap();
        }
        // Drains the client (stdin closed) until it hangs up.
        while channel::receive::<ClientMessage>(&mut stream, "test").is_ok() {}
    });
    let plan = JoinPlan {
        paths,
        hello: Hello {
            version: PROTOCOL_VERSION,
            domain_id: [1; 32],
            fingerprint: [2; 32],
            argv: vec!["true".into()],
            terminal: None,
        },
        coordinator: vec!["/nonexistent/lazaret".into()],
    };
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
