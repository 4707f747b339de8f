//! The local raw-mode guard always restores (DX-5; spec 3.4 host CLI
//! suspension): with the recording fake, and for real in a child process on
//! a real PTY, killed by SIGTERM/SIGHUP/SIGINT, panicking, and suspended.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::exit)] // test code: a failed unwrap is a failed test; the child role exits

use lazaret_effects::pty::{RealPty, SessionPty};
use lazaret_effects::terminal_mode::fake::{RecordingTerm, TermCall};
use lazaret_effects::terminal_mode::{is_cooked, RawModeGuard, RealTerm};
use rustix::fs::{Mode, OFlags};
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn fresh_slave() -> (OwnedFd, OwnedFd) {
    let sys = RealPty;
    let pair = lazaret_effects::pty::PtySys::open_pair(&sys).unwrap();
    (pair.master, pair.slave)
}

fn recording() -> (Arc<RecordingTerm>, OwnedFd, OwnedFd) {
    let (master, slave) = fresh_slave();
    let attrs = rustix::termios::tcgetattr(&slave).unwrap();
    assert!(is_cooked(&attrs), "a new PTY slave starts cooked");
    let size = rustix::termios::tcgetwinsize(&slave).unwrap();
    (Arc::new(RecordingTerm::new(attrs, size)), master, slave)
}

#[test]
fn fake_enter_and_drop_restore_exactly_once() {
    let (term, _m, slave) = recording();
    let guard = RawModeGuard::enter(term.clone(), rustix::fd::AsFd::as_fd(&slave)).unwrap();
    assert!(guard.is_raw());
    assert!(!term.currently_cooked());
    guard.restore().unwrap();
    guard.restore().unwrap();
    drop(guard);
    assert!(term.currently_cooked());
    assert_eq!(
        term.calls(),
        vec![
            TermCall::GetAttrs,
            TermCall::SetAttrs { cooked: false },
            TermCall::SetAttrs { cooked: true },
        ],
        "restoring is idempotent: drop after restore sets nothing"
    );
}

#[test]
fn fake_local_suspension_restores_stops_and_reenters_raw() {
    let (term, _m, slave) = recording();
    let guard = RawModeGuard::enter(term.clone(), rustix::fd::AsFd::as_fd(&slave)).unwrap();
    guard.suspend_locally().unwrap();
    assert!(!guard.is_raw(), "stays restored until SIGCONT");
    guard.suspend_locally().unwrap();
    guard.resume_after_continue().unwrap();
    guard.resume_after_continue().unwrap();
    let size = guard.window_size().unwrap();
    assert!(guard.is_raw());
    assert_eq!(size, rustix::termios::tcgetwinsize(&slave).unwrap());
    assert_eq!(
        term.calls()[2..],
        [
            TermCall::SetAttrs { cooked: true },
            TermCall::StopSelf,
            TermCall::SetAttrs { cooked: false },
            TermCall::WindowSize,
        ]
    );
}

#[test]
fn fake_panic_hook_restores_before_the_guard_is_dropped() {
    let (term, _m, slave) = recording();
    let guard = RawModeGuard::enter(term.clone(), rustix::fd::AsFd::as_fd(&slave)).unwrap();
    let result = std::panic::catch_unwind(|| panic!("boom"));
    assert!(result.is_err());
    assert!(
        term.currently_cooked(),
        "the hook restored while the guard lives"
    );
    assert!(!guard.is_raw());
    drop(guard);
    assert_eq!(
        term.calls()
            .iter()
            .filter(|c| **c == TermCall::SetAttrs { cooked: true })
            .count(),
        1
    );
}

// --- real child processes on a real PTY ---------------------------------

const CHILD_ENV: &str = "LAZARET_TERMINAL_MODE_CHILD";
const TEST_NAME: &str = "real_guard_restores_on_signals_panic_and_suspension";

/// The child role: raw mode on the slave named in the environment.
fn child(spec: &str) -> ! {
    let (mode, path) = spec.split_once(':').unwrap();
    let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::NOCTTY, Mode::empty()).unwrap();
    let mut guard = RawModeGuard::enter(Arc::new(RealTerm), rustix::fd::AsFd::as_fd(&fd)).unwrap();
    let events = guard.watch_signals().unwrap();
    let mut out = std::io::stdout();
    writeln!(out, "\nlazaret-child raw").unwrap();
    out.flush().unwrap();
    if mode == "panic" {
        // Only the panic hook can restore now.
        std::mem::forget(guard);
        panic!("child panics with the terminal in raw mode");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if events.recv_timeout(Duration::from_millis(100)).is_ok() {
            let ws = guard.window_size().unwrap();
            writeln!(out, "\nlazaret-child resized {} {}", ws.ws_row, ws.ws_col).unwrap();
            out.flush().unwrap();
        }
    }
    std::process::exit(3)
}

struct Running {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    pidfd: OwnedFd,
}

/// A failed assertion must not leave a stopped or raw child behind.
impl Drop for Running {
    fn drop(&mut self) {
        let _gone = pidfd_send_signal(&self.pidfd, Signal::KILL);
        let _reaped = self.child.wait();
    }
}

fn spawn(mode: &str, slave_path: &str) -> Running {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{mode}:{slave_path}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    let pidfd = pidfd_open(pid, PidfdFlags::empty()).unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut r = Running {
        child,
        lines,
        pidfd,
    };
    wait_line(&mut r, "lazaret-child raw");
    r
}

fn wait_line(r: &mut Running, want: &str) -> String {
    for line in r.lines.by_ref() {
        let line = line.unwrap();
        if line.starts_with(want) {
            return line;
        }
    }
    panic!("child ended before printing {want:?}");
}

fn cooked(path: &str) -> bool {
    let fd = rustix::fs::open(path, OFlags::RDWR | OFlags::NOCTTY, Mode::empty()).unwrap();
    is_cooked(&rustix::termios::tcgetattr(&fd).unwrap())
}

fn stopped(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit_once(')').unwrap().1;
    after.trim_start().starts_with('T')
}

#[test]
fn real_guard_restores_on_signals_panic_and_suspension() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
    }
    let sys = RealPty;
    let (pty, _slave) = SessionPty::allocate(&sys).unwrap();
    let path = pty.slave_name().to_owned();
    for (signal, number) in [(Signal::TERM, 15), (Signal::HUP, 1), (Signal::INT, 2)] {
        let mut r = spawn("wait", &path);
        assert!(!cooked(&path), "child put the terminal in raw mode");
        pidfd_send_signal(&r.pidfd, signal).unwrap();
        let status = r.child.wait().unwrap();
        assert_eq!(status.signal(), Some(number), "dies by the same signal");
        assert!(cooked(&path), "terminal restored after signal {number}");
    }

    let mut r = spawn("panic", &path);
    let status = r.child.wait().unwrap();
    assert_eq!(status.code(), Some(101));
    assert!(cooked(&path), "the panic hook restored the terminal");

    // Local suspension: restore, stop, resume into raw mode, report size.
    // Repeated: the stop/resume ordering is a race if done wrong.
    for _ in 0..8 {
        suspend_and_resume(&pty, &path);
    }
}

fn suspend_and_resume(pty: &SessionPty<'_, RealPty>, path: &str) {
    let mut r = spawn("wait", path);
    pty.resize(lazaret_effects::pty::WindowSize {
        rows: std::num::NonZeroU16::new(50).unwrap(),
        columns: std::num::NonZeroU16::new(150).unwrap(),
        pixel_width: 0,
        pixel_height: 0,
    })
    .unwrap();
    pidfd_send_signal(&r.pidfd, Signal::TSTP).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !stopped(r.child.id()) {
        assert!(Instant::now() < deadline, "child did not stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(cooked(path), "restored before stopping");
    pidfd_send_signal(&r.pidfd, Signal::CONT).unwrap();
    let line = wait_line(&mut r, "lazaret-child resized");
    assert_eq!(line, "lazaret-child resized 50 150");
    assert!(!cooked(path), "raw again after resuming");
    pidfd_send_signal(&r.pidfd, Signal::TERM).unwrap();
    assert_eq!(r.child.wait().unwrap().signal(), Some(15));
    assert!(cooked(path));
}
