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
//! Exit status 0 on success; 2 for a malformed request; 1 when the
//! observation or the signal failed (the reason on stderr). The caller
//! treats every failure as a mismatch or an unsent signal (fail closed).
use std::io::{self, Write};
use std::os::raw::c_int;

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

extern "C" {
    fn kill(pid: c_int, sig: c_int) -> c_int;
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
        _ => Err(Failure::Usage(
            "usage: stat [PID...] | signal NUMBER PGID".to_owned(),
        )),
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
