//! lazaret-guest: the Lazaret-owned guest tool the Host Coordinator runs
//! through `runsc exec` to observe and signal session process groups
//! (spec 3.4 acquisition step 3 and release step 2). A static binary like
//! `lazaret-init` (built by cli/build.rs; no ELF interpreter, no dynamic
//! section), written by Lazaret into the generation's `sbin` directory and
//! bound read-only at `/.lazaret/sbin`. It uses nothing from the image: no
//! shell, no libraries, no environment, so a distroless image works and an
//! agent that replaces `/bin/sh` changes nothing Lazaret observes.
//!
//! Commands (argv after the program name):
//!
//! - `stat`: prints the `/proc/<pid>/stat` line of every guest process,
//!   this tool's own included, one per line. A process that ends while the
//!   listing runs is skipped.
//! - `stat PID...` (at most `PIDS_MAX` decimal PIDs): the lines of those
//!   PIDs that exist.
//! - `signal NUMBER PGID`: sends signal NUMBER to process group PGID
//!   (`kill(-PGID, NUMBER)`, resolved in the container's own PID
//!   namespace). Only the signals the session terminal machine sends are
//!   accepted: HUP 1, INT 2, QUIT 3, KILL 9, TERM 15, TSTP 20, WINCH 28.
//!
//! - `lead -- PROGRAM [ARG...]`: the leader of an interactive session
//!   (spec 3.4 acquisition steps 3-5). `runsc exec` starts this tool as
//!   the session's guest process, leader of its group, on the session's
//!   terminal; it holds there, with the terminal's echo and line editing
//!   off, until the Host Coordinator admits the session by writing one
//!   newline to the terminal, which it does only once the guest leader
//!   identity (this process's PID, start time and group) is in the
//!   Domain Store (a CAN byte, 0x18, says it will not be). It then restores the terminal's settings and executes
//!   PROGRAM in its own place: the same PID, start time and group, so the
//!   recorded identity is the command's. Nothing the session's command
//!   does can happen before its identity is recorded. A session not
//!   admitted within `ADMISSION_WAIT`, or whose terminal's echo cannot be
//!   turned off, ends with status 125 and says so; a
//!   PROGRAM that cannot be executed ends with 127 (not found) or 126, as
//!   a shell would.
//!
//! Exit status 0 on success; 2 for a malformed request; 1 when the
//! observation or the signal failed (the reason on stderr). The caller
//! treats every failure as a mismatch or an unsent signal (fail closed).
use std::io::{self, Write};
use std::os::raw::c_int;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

/// At most this many processes are listed (far above the guest task
/// ceiling of 1024 per guest user; a listing that would exceed it fails).
const PROCESSES_MAX: usize = 65_536;
/// At most this many PIDs may be named in one `stat` request.
const PIDS_MAX: usize = 64;
/// A stat line is far shorter (52 fields and a 16-byte command name).
const STAT_LINE_MAX: usize = 4096;
/// The signals the session terminal machine sends.
const SIGNALS: [c_int; 7] = [1, 2, 3, 9, 15, 20, 28];

const ENOENT: i32 = 2;
const ESRCH: i32 = 3;
const EINTR: i32 = 4;

/// How long a session's leader waits to be admitted. The Host Coordinator
/// answers within its own bounds (the PID, 10 s, the identity read, 10 s,
/// and the record, 30 s); past them nothing will.
const ADMISSION_WAIT: Duration = Duration::from_secs(60);
/// The one byte that admits the session, and the one that refuses it (the
/// Host Coordinator could not record the session running).
const ADMIT: u8 = b'\n';
const REFUSE: u8 = 0x18;

/// The C library's `struct termios`, which `tcgetattr` fills (glibc's
/// `bits/termios-struct.h`, the same in musl on x86_64 and aarch64:
/// `NCCS` 32 and the two speeds, 60 bytes). Not the kernel's own
/// `struct termios`, which has 19 control characters: the library
/// converts.
#[repr(C)]
#[derive(Clone, Copy)]
struct Termios {
    c_iflag: u32,
    c_oflag: u32,
    c_cflag: u32,
    c_lflag: u32,
    c_line: u8,
    c_cc: [u8; 32],
    c_ispeed: u32,
    c_ospeed: u32,
}
const _: () = assert!(std::mem::size_of::<Termios>() == 60);
const ICANON: u32 = 0o000002;
const ECHO: u32 = 0o000010;
const VTIME: usize = 5;
const VMIN: usize = 6;
const TCSANOW: c_int = 0;

#[repr(C)]
struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}
const POLLIN: i16 = 1;

extern "C" {
    fn kill(pid: c_int, sig: c_int) -> c_int;
    fn tcgetattr(fd: c_int, termios: *mut Termios) -> c_int;
    fn tcsetattr(fd: c_int, action: c_int, termios: *const Termios) -> c_int;
    fn poll(fds: *mut PollFd, nfds: std::os::raw::c_ulong, timeout: c_int) -> c_int;
    fn read(fd: c_int, buf: *mut u8, count: usize) -> isize;
}

#[derive(Debug)]
enum Failure {
    Usage(String),
    Failed(String),
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match run(&args) {
        Ok(()) => 0,
        Err(Failure::Usage(text)) => {
            let _ = writeln!(io::stderr(), "lazaret-guest: {text}");
            2
        }
        Err(Failure::Failed(text)) => {
            let _ = writeln!(io::stderr(), "lazaret-guest: {text}");
            1
        }
    };
    std::process::exit(code);
}

fn run(args: &[String]) -> Result<(), Failure> {
    match args.split_first() {
        Some((command, pids)) if command == "stat" => {
            if pids.len() > PIDS_MAX {
                return Err(Failure::Usage(format!(
                    "stat takes at most {PIDS_MAX} PIDs, got {}",
                    pids.len()
                )));
            }
            let pids = pids
                .iter()
                .map(|p| positive(p, "PID"))
                .collect::<Result<Vec<_>, _>>()?;
            let lines = if pids.is_empty() {
                every_stat_line()?
            } else {
                stat_lines(&pids)?
            };
            let mut out = io::stdout().lock();
            for line in lines {
                writeln!(out, "{line}").map_err(|e| Failure::Failed(format!("stdout: {e}")))?;
            }
            out.flush()
                .map_err(|e| Failure::Failed(format!("stdout: {e}")))
        }
        Some((command, rest)) if command == "signal" => match rest {
            [number, pgid] => {
                let number = positive(number, "signal number")?;
                if !SIGNALS.contains(&number) {
                    return Err(Failure::Usage(format!(
                        "signal {number} is not one of {SIGNALS:?}"
                    )));
                }
                let pgid = positive(pgid, "PGID")?;
                signal_group(pgid, number)
            }
            _ => Err(Failure::Usage("usage: signal NUMBER PGID".to_owned())),
        },
        Some((command, rest)) if command == "lead" => match rest.split_first() {
            Some((dashes, argv)) if dashes == "--" && !argv.is_empty() => lead(argv),
            _ => Err(Failure::Usage("usage: lead -- PROGRAM [ARG...]".to_owned())),
        },
        _ => Err(Failure::Usage(
            "usage: stat [PID...] | signal NUMBER PGID | lead -- PROGRAM [ARG...]".to_owned(),
        )),
    }
}

/// `lead`: waits for admission on the terminal, then becomes `argv`.
/// Returns only when either fails.
fn lead(argv: &[String]) -> Result<(), Failure> {
    let mut saved = Termios {
        c_iflag: 0,
        c_oflag: 0,
        c_cflag: 0,
        c_lflag: 0,
        c_line: 0,
        c_cc: [0; 32],
        c_ispeed: 0,
        c_ospeed: 0,
    };
    // SAFETY: tcgetattr writes one C library `struct termios`, which
    // `saved` is (its layout, size checked above), and reads nothing else.
    let terminal = unsafe { tcgetattr(0, &mut saved) } == 0;
    if terminal {
        let mut quiet = saved;
        quiet.c_lflag &= !(ICANON | ECHO);
        quiet.c_cc[VMIN] = 1;
        quiet.c_cc[VTIME] = 0;
        // SAFETY: tcsetattr reads the one `struct termios` passed.
        if unsafe { tcsetattr(0, TCSANOW, &quiet) } != 0 {
            let e = io::Error::last_os_error();
            let _ = writeln!(
                io::stderr(),
                "lazaret: this session was not admitted: the terminal's settings: {e}"
            );
            std::process::exit(125);
        }
    }
    let admitted = wait_for_admission();
    if terminal {
        // SAFETY: as above; the settings this process found.
        unsafe { tcsetattr(0, TCSANOW, &saved) };
    }
    if let Err(why) = admitted {
        let _ = writeln!(io::stderr(), "lazaret: this session was not admitted: {why}");
        std::process::exit(125);
    }
    let error = std::process::Command::new(&argv[0]).args(&argv[1..]).exec();
    let _ = writeln!(io::stderr(), "lazaret: {}: {error}", argv[0]);
    std::process::exit(if error.raw_os_error() == Some(ENOENT) {
        127
    } else {
        126
    });
}

/// Reads the admitting byte from the terminal, at most `ADMISSION_WAIT`.
fn wait_for_admission() -> Result<(), String> {
    let deadline = Instant::now() + ADMISSION_WAIT;
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .ok_or("the Host Coordinator did not record its guest identity in time")?;
        let mut fd = PollFd {
            fd: 0,
            events: POLLIN,
            revents: 0,
        };
        let timeout = c_int::try_from(left.as_millis()).unwrap_or(c_int::MAX).max(1);
        // SAFETY: poll reads and writes the one `PollFd` passed.
        let ready = unsafe { poll(&mut fd, 1, timeout) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(EINTR) {
                continue;
            }
            return Err(format!("waiting on the terminal: {e}"));
        }
        if ready == 0 {
            continue;
        }
        let mut byte = 0u8;
        // SAFETY: read writes at most one byte into `byte`.
        match unsafe { read(0, &mut byte, 1) } {
            1 if byte == ADMIT => return Ok(()),
            1 if byte == REFUSE => {
                return Err("the Host Coordinator could not record it running".to_owned())
            }
            1 => return Err(format!("unexpected byte {byte:#04x} before admission")),
            0 => return Err("the terminal closed before admission".to_owned()),
            _ => {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(EINTR) {
                    continue;
                }
                return Err(format!("reading the terminal: {e}"));
            }
        }
    }
}

/// A decimal in 1..=i32::MAX.
fn positive(text: &str, what: &str) -> Result<c_int, Failure> {
    match text.parse::<c_int>() {
        Ok(n) if n > 0 && text.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(Failure::Usage(format!(
            "{what} {text:?} is not a positive decimal"
        ))),
    }
}

/// One process's stat line, or `None` when it no longer exists.
fn stat_line(pid: c_int) -> Result<Option<String>, Failure> {
    let path = format!("/proc/{pid}/stat");
    match std::fs::read(&path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let line = text.trim_end_matches('\n');
            if line.is_empty() || line.len() > STAT_LINE_MAX || line.contains('\n') {
                return Err(Failure::Failed(format!("{path}: not one stat line")));
            }
            Ok(Some(line.to_owned()))
        }
        Err(e) if matches!(e.raw_os_error(), Some(ENOENT | ESRCH)) => Ok(None),
        Err(e) => Err(Failure::Failed(format!("{path}: {e}"))),
    }
}

fn stat_lines(pids: &[c_int]) -> Result<Vec<String>, Failure> {
    let mut lines = Vec::with_capacity(pids.len());
    for &pid in pids {
        lines.extend(stat_line(pid)?);
    }
    Ok(lines)
}

fn every_stat_line() -> Result<Vec<String>, Failure> {
    let entries =
        std::fs::read_dir("/proc").map_err(|e| Failure::Failed(format!("/proc: {e}")))?;
    let mut lines = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Failure::Failed(format!("/proc: {e}")))?;
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<c_int>().ok())
        else {
            continue;
        };
        if lines.len() == PROCESSES_MAX {
            return Err(Failure::Failed(format!(
                "more than {PROCESSES_MAX} guest processes"
            )));
        }
        lines.extend(stat_line(pid)?);
    }
    Ok(lines)
}

fn signal_group(pgid: c_int, number: c_int) -> Result<(), Failure> {
    // SAFETY: kill(2) takes two integers and touches no memory of ours; a
    // negative first argument names the process group `pgid`.
    if unsafe { kill(-pgid, number) } == 0 {
        Ok(())
    } else {
        Err(Failure::Failed(format!(
            "kill(-{pgid}, {number}): {}",
            io::Error::last_os_error()
        )))
    }
}
