//! Host PTY allocation, resize, non-blocking reads with backpressure (spec
//! 3.4, FR-14): with the recording fake and with real PTYs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_effects::pty::fake::{PtyCall, RecordingPty};
use lazaret_effects::pty::*;
use lazaret_runtime::terminal::protocol::{Chunk, MAX_CHUNK_BYTES};
use std::io;
use std::num::NonZeroU16;

fn size(rows: u16, columns: u16) -> WindowSize {
    WindowSize {
        rows: NonZeroU16::new(rows).unwrap(),
        columns: NonZeroU16::new(columns).unwrap(),
        pixel_width: 0,
        pixel_height: 0,
    }
}

#[test]
fn fake_records_allocation_resize_and_budgeted_reads() {
    let sys = RecordingPty::default();
    sys.reads
        .borrow_mut()
        .push_back(Ok(MasterRead::Data(b"abc".to_vec())));
    sys.reads.borrow_mut().push_back(Ok(MasterRead::Eof));
    let (pty, _slave) = SessionPty::allocate(&sys).unwrap();
    assert_eq!(pty.identity().device, 0x1d);
    assert_eq!(pty.identity().inode, 7);
    assert_eq!(pty.pump(0).unwrap(), Pumped::Paused);
    pty.resize(size(24, 80)).unwrap();
    assert_eq!(
        pty.pump(usize::MAX).unwrap(),
        Pumped::Data(Chunk::new(b"abc".to_vec()).unwrap())
    );
    assert_eq!(pty.pump(5).unwrap(), Pumped::Eof);
    assert_eq!(pty.pump(5).unwrap(), Pumped::WouldBlock);
    assert_eq!(
        sys.calls(),
        vec![
            PtyCall::OpenPair,
            PtyCall::SlaveIdentity,
            PtyCall::SetWindowSize(size(24, 80)),
            PtyCall::ReadMaster {
                max: MAX_CHUNK_BYTES
            },
            PtyCall::ReadMaster { max: 5 },
            PtyCall::ReadMaster { max: 5 },
        ],
        "a zero budget makes no read call"
    );
}

#[test]
fn fake_input_stays_pending_while_the_slave_does_not_read() {
    let sys = RecordingPty::default();
    sys.writes.borrow_mut().push_back(Ok(MasterWrite::Wrote(2)));
    sys.writes
        .borrow_mut()
        .push_back(Ok(MasterWrite::WouldBlock));
    let (mut pty, _slave) = SessionPty::allocate(&sys).unwrap();
    pty.write_input(&Chunk::new(b"hello".to_vec()).unwrap())
        .unwrap();
    assert_eq!(pty.input_pending(), 3);
    let err = pty
        .write_input(&Chunk::new(b"more".to_vec()).unwrap())
        .unwrap_err();
    assert!(
        matches!(err, PtyError::InputPending { pending: 3, .. }),
        "{err}"
    );
    pty.flush_input().unwrap();
    assert_eq!(pty.input_pending(), 0);
    let writes: Vec<_> = sys
        .calls()
        .into_iter()
        .filter(|c| matches!(c, PtyCall::WriteMaster(_)))
        .collect();
    assert_eq!(
        writes,
        vec![
            PtyCall::WriteMaster(b"hello".to_vec()),
            PtyCall::WriteMaster(b"llo".to_vec()),
            PtyCall::WriteMaster(b"llo".to_vec()),
        ]
    );
}

#[test]
fn fake_errors_name_the_step() {
    let sys = RecordingPty::default();
    *sys.fail_open.borrow_mut() = Some(io::ErrorKind::PermissionDenied);
    let err = SessionPty::allocate(&sys).unwrap_err().to_string();
    assert!(err.contains("cannot allocate a host PTY pair"), "{err}");
    let sys = RecordingPty::default();
    *sys.fail_resize.borrow_mut() = Some(io::ErrorKind::InvalidInput);
    let (pty, _slave) = SessionPty::allocate(&sys).unwrap();
    let err = pty.resize(size(1, 1)).unwrap_err().to_string();
    assert!(
        err.contains("TIOCSWINSZ") && err.contains("/dev/pts/fake"),
        "{err}"
    );
}

fn pump_until_data(pty: &SessionPty<'_, RealPty>, budget: usize) -> Vec<u8> {
    for _ in 0..200 {
        match pty.pump(budget).unwrap() {
            Pumped::Data(c) => return c.as_bytes().to_vec(),
            Pumped::WouldBlock => std::thread::sleep(std::time::Duration::from_millis(5)),
            other => panic!("unexpected {other:?}"),
        }
    }
    panic!("no data within 1 s");
}

#[test]
fn real_pty_resize_reaches_the_slave_and_identity_is_the_devpts_node() {
    let sys = RealPty;
    let (pty, slave) = SessionPty::allocate(&sys).unwrap();
    pty.resize(size(33, 111)).unwrap();
    let ws = rustix::termios::tcgetwinsize(&slave).unwrap();
    assert_eq!((ws.ws_row, ws.ws_col), (33, 111));
    let by_path = rustix::fs::stat(pty.slave_name()).unwrap();
    assert_eq!(
        (pty.identity().device, pty.identity().inode),
        (by_path.st_dev, by_path.st_ino)
    );
    assert!(pty.slave_name().starts_with("/dev/pts/"));
}

#[test]
fn real_pty_reads_are_budgeted_and_the_kernel_holds_the_rest() {
    let sys = RealPty;
    let (pty, slave) = SessionPty::allocate(&sys).unwrap();
    // Raw slave so the line discipline passes bytes through unchanged.
    let mut attrs = rustix::termios::tcgetattr(&slave).unwrap();
    attrs.make_raw();
    rustix::termios::tcsetattr(&slave, rustix::termios::OptionalActions::Now, &attrs).unwrap();
    let flags = rustix::fs::fcntl_getfl(&slave).unwrap();
    rustix::fs::fcntl_setfl(&slave, flags | rustix::fs::OFlags::NONBLOCK).unwrap();
    // Nobody reads the master: the guest writer is held by the kernel bound.
    let block = [b'x'; 4096];
    let mut buffered = 0usize;
    for _ in 0..10_000 {
        match rustix::io::write(&slave, &block) {
            Ok(n) => buffered += n,
            Err(rustix::io::Errno::AGAIN) => break,
            Err(e) => panic!("{e}"),
        }
    }
    eprintln!("kernel PTY buffer held {buffered} bytes before the writer blocked");
    assert!(buffered > 0 && buffered < 16 * 1024 * 1024, "{buffered}");
    // Paused: no read happens, the data stays in the kernel.
    assert_eq!(pty.pump(0).unwrap(), Pumped::Paused);
    let first = pump_until_data(&pty, 100);
    assert!(!first.is_empty() && first.len() <= 100, "{}", first.len());
    let big = pump_until_data(&pty, usize::MAX);
    assert!(big.len() <= MAX_CHUNK_BYTES);
    // Input goes the other way.
    let mut pty = pty;
    pty.write_input(&Chunk::new(b"typed".to_vec()).unwrap())
        .unwrap();
    let mut got = [0u8; 16];
    let mut n = 0;
    for _ in 0..200 {
        match rustix::io::read(&slave, &mut got) {
            Ok(k) => {
                n = k;
                break;
            }
            Err(rustix::io::Errno::AGAIN) => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(&got[..n], b"typed");
    // Drain what is left, then EOF once the slave is gone.
    drop(slave);
    let mut eof = false;
    for _ in 0..10_000 {
        match pty.pump(usize::MAX).unwrap() {
            Pumped::Eof => {
                eof = true;
                break;
            }
            Pumped::Data(_) | Pumped::WouldBlock => {}
            Pumped::Paused => panic!("budget was not zero"),
        }
    }
    assert!(eof, "closing every slave descriptor must read as EOF");
    assert!(rustix::fs::fstat(pty.master()).is_ok());
    pty.close();
}

/// The master reports the slave's line discipline (spec 3.4 keys; FR-8): a
/// new pair is cooked with the default keys; what the slave's owner sets
/// (`stty raw`, `stty intr ^X`, `stty quit undef`) is what HC reads.
#[test]
fn real_pty_master_reads_the_signal_keys_the_slave_sets() {
    use lazaret_runtime::terminal::keys::SignalKeys;
    use rustix::termios::{tcgetattr, tcsetattr, LocalModes, OptionalActions, SpecialCodeIndex};
    let (pty, slave) = SessionPty::allocate(&RealPty).unwrap();
    assert_eq!(
        pty.signal_keys().unwrap(),
        SignalKeys::from_termios(true, 0x03, 0x1c, 0x1a)
    );
    let mut t = tcgetattr(&slave).unwrap();
    t.special_codes[SpecialCodeIndex::VINTR] = 0x18;
    t.special_codes[SpecialCodeIndex::VQUIT] = 0;
    tcsetattr(&slave, OptionalActions::Now, &t).unwrap();
    assert_eq!(
        pty.signal_keys().unwrap(),
        SignalKeys::from_termios(true, 0x18, 0, 0x1a)
    );
    t.local_modes.remove(LocalModes::ISIG);
    tcsetattr(&slave, OptionalActions::Now, &t).unwrap();
    let keys = pty.signal_keys().unwrap();
    assert!(!keys.isig);
    assert_eq!(keys.signal_of(0x18), None);
    // The fake records the call and answers a cooked terminal by default.
    let fake = RecordingPty::default();
    let (pty, _slave) = SessionPty::allocate(&fake).unwrap();
    assert!(pty.signal_keys().unwrap().signal_of(0x03).is_some());
    assert!(fake.calls().contains(&PtyCall::SignalKeys));
}

/// The modes the guest leader's silence and a command's own settings leave
/// (`stty -echo -icanon`, then `stty raw -echo`) are what HC reads, and
/// they differ from each other (docs/terminals.md "Admission waits for the
/// Running record").
#[test]
fn real_pty_master_reads_the_line_modes_the_slave_sets() {
    use rustix::termios::{tcgetattr, tcsetattr, LocalModes, OptionalActions};
    let (pty, slave) = SessionPty::allocate(&RealPty).unwrap();
    let cooked = pty.line_modes().unwrap();
    assert!(cooked.echo);
    let mut t = tcgetattr(&slave).unwrap();
    t.local_modes.remove(LocalModes::ECHO | LocalModes::ICANON);
    tcsetattr(&slave, OptionalActions::Now, &t).unwrap();
    let silenced = pty.line_modes().unwrap();
    assert!(!silenced.echo);
    assert_ne!(silenced, cooked);
    t.make_raw();
    tcsetattr(&slave, OptionalActions::Now, &t).unwrap();
    let raw = pty.line_modes().unwrap();
    assert!(!raw.echo);
    assert_ne!(raw, silenced);
    let fake = RecordingPty::default();
    let (pty, _slave) = SessionPty::allocate(&fake).unwrap();
    assert!(pty.line_modes().unwrap().echo);
    assert!(fake.calls().contains(&PtyCall::LineModes));
}
