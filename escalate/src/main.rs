//! `lazaret-escalate`: the Escalation Client (spec 3.8), a static binary in
//! the Agent Sandbox at `/.lazaret/sbin/lazaret-escalate`.
//!
//! ```text
//! lazaret-escalate --why TEXT -- /ABSOLUTE/PATH [ARG...]
//! ```
//!
//! It signs a request for exactly that argument vector with the sandbox's
//! key (from the credential bundle at the fixed credential path) under the
//! session's capability (from `LAZARET_SESSION_CAPABILITY`), writes it into
//! the mailbox by atomic rename, then prints the host command's standard
//! output and error as the coordinator's chunks arrive, acknowledging each,
//! and exits with the host command's status. SIGINT (Ctrl-C) sends a
//! cancellation and waits for the coordinator's answer.
//!
//! A chunk is acknowledged once it is kept, not once it is printed: while
//! the host command runs, the Host Coordinator does not read the session's
//! terminal (spec 3.4), so printing there waits until the command ended,
//! and the coordinator's window of eight unacknowledged chunks must not
//! wait with it. What waits is kept in an unnamed file (`O_TMPFILE` in
//! `$TMPDIR` or `/tmp`, the sandbox's own space: `/tmp` is a bounded
//! tmpfs), emptied whenever everything kept is printed. Where no such
//! file can be made, or it is full, chunks are printed as they come.
//!
//! Exit status: the host command's own status when it ran and exited; 126
//! when the request was denied; 124 when it timed out; 130 when it was
//! cancelled; 125 when it failed to run or ended without a status, or when
//! this client could not ask at all (no mailbox: escalation is not enabled
//! for this profile); 2 for a usage error.
//!
//! `--credentials PATH` and `--mailbox DIR` (holding `requests/` and
//! `results/`) replace the fixed locations, for tests; they change nothing
//! the coordinator trusts.
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use lazaret_wire::client::{
    EscalationClient, CREDENTIALS, SANDBOX_REQUESTS, SANDBOX_RESULTS, SESSION_CAPABILITY_ENV,
};
use lazaret_wire::ids::EscalationRequestId;
use lazaret_wire::mailbox::{
    EscalationOutcome, MailboxEntry, ResultStream, MAX_MAILBOX_RECORD, TEMPORARY_PREFIX,
};
use lazaret_wire::records::{ProtocolRecord, SandboxCredentialBundle, SessionRequestCapability};

/// The largest credential bundle read (a bundle is under 2 KiB).
const CREDENTIALS_MAX: u64 = 8192;
/// How often the results directory is looked at, at most and at least.
const POLL_MIN: Duration = Duration::from_millis(1);
const POLL_MAX: Duration = Duration::from_millis(50);

/// Set by the SIGINT handler.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// What the command line asks.
#[derive(Debug)]
struct Invocation {
    why: String,
    argv: Vec<String>,
    credentials: PathBuf,
    requests: PathBuf,
    results: PathBuf,
}

fn usage(problem: &str) -> String {
    format!("{problem}\nusage: lazaret-escalate --why TEXT -- /ABSOLUTE/PATH [ARG...]")
}

fn parse(args: Vec<OsString>) -> Result<Invocation, String> {
    let mut why = None;
    let mut credentials = PathBuf::from(CREDENTIALS);
    let mut requests = PathBuf::from(SANDBOX_REQUESTS);
    let mut results = PathBuf::from(SANDBOX_RESULTS);
    let mut it = args.into_iter().map(|a| {
        a.into_string()
            .map_err(|a| usage(&format!("argument {a:?} is not UTF-8")))
    });
    let mut argv = None;
    while let Some(arg) = it.next() {
        let arg = arg?;
        let mut value = |flag: &str| {
            it.next()
                .unwrap_or_else(|| Err(usage(&format!("{flag} needs a value"))))
        };
        match arg.as_str() {
            "--why" => why = Some(value("--why")?),
            "--credentials" => credentials = PathBuf::from(value("--credentials")?),
            "--mailbox" => {
                let dir = PathBuf::from(value("--mailbox")?);
                requests = dir.join("requests");
                results = dir.join("results");
            }
            "--" => {
                argv = Some(it.collect::<Result<Vec<_>, _>>()?);
                break;
            }
            other => return Err(usage(&format!("unknown argument {other:?}"))),
        }
    }
    let why = why.ok_or_else(|| usage("--why is required: say why the host must run this"))?;
    let argv = argv
        .filter(|a| !a.is_empty())
        .ok_or_else(|| usage("the command follows --"))?;
    Ok(Invocation {
        why,
        argv,
        credentials,
        requests,
        results,
    })
}

/// Reads at most `max` bytes of `path`; more is an error.
fn read_bounded(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    File::open(path)?.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::other(format!("larger than {max} bytes")));
    }
    Ok(bytes)
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The session's client: its bundle and capability.
fn client(credentials: &Path) -> Result<EscalationClient, String> {
    let bundle = read_bounded(credentials, CREDENTIALS_MAX).map_err(|e| {
        format!(
            "cannot read the sandbox credentials {}: {e}",
            credentials.display()
        )
    })?;
    let bundle = SandboxCredentialBundle::decode(&bundle)
        .map_err(|e| format!("the sandbox credentials {}: {e}", credentials.display()))?;
    let capability = std::env::var(SESSION_CAPABILITY_ENV).map_err(|_| {
        format!("{SESSION_CAPABILITY_ENV} is not set: run this from a Lazaret session")
    })?;
    let capability =
        hex_decode(&capability).ok_or_else(|| format!("{SESSION_CAPABILITY_ENV} is not hex"))?;
    let capability = SessionRequestCapability::decode(&capability)
        .map_err(|e| format!("{SESSION_CAPABILITY_ENV}: {e}"))?;
    EscalationClient::new(&bundle, capability).map_err(|e| e.to_string())
}

/// 128 random bits from the kernel.
fn random_id() -> Result<EscalationRequestId, String> {
    let mut id = [0u8; 16];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut id))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(EscalationRequestId(id))
}

/// Writes `bytes` as `entry` in `dir`: a temporary, renamed into place.
fn put(dir: &Path, entry: MailboxEntry, bytes: &[u8]) -> Result<(), String> {
    let name = entry.name();
    let temporary = dir.join(format!("{TEMPORARY_PREFIX}{name}"));
    let written = File::options()
        .write(true)
        .create_new(true)
        .open(&temporary)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| std::fs::rename(&temporary, dir.join(&name)));
    written.map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        format!(
            "cannot write {name} into the mailbox {}: {e}",
            dir.display()
        )
    })
}

/// The bytes of `entry` in `dir`, if it is there.
fn take(dir: &Path, entry: MailboxEntry) -> Result<Option<Vec<u8>>, String> {
    match read_bounded(&dir.join(entry.name()), MAX_MAILBOX_RECORD as u64) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!(
            "cannot read {} from the mailbox: {e}",
            entry.name()
        )),
    }
}

/// What the run ended with.
fn exit_for(outcome: EscalationOutcome, exit_code: Option<i32>) -> (u8, Option<&'static str>) {
    match (outcome, exit_code) {
        (EscalationOutcome::Completed, Some(code)) => (u8::try_from(code).unwrap_or(125), None),
        (EscalationOutcome::Completed, None) => {
            (125, Some("the host command ended without a status"))
        }
        (EscalationOutcome::Denied, _) => (126, Some("the request was denied")),
        (EscalationOutcome::TimedOut, _) => (
            124,
            Some("timed out: the prompt was not answered, or the host command ran too long"),
        ),
        (EscalationOutcome::Cancelled, _) => (130, Some("the request was cancelled")),
        (EscalationOutcome::Failed, _) => (125, Some("the host command could not run")),
    }
}

fn run(inv: Invocation) -> Result<u8, String> {
    if !inv.requests.is_dir() || !inv.results.is_dir() {
        return Err(format!(
            "no escalation mailbox at {}: host escalation is not enabled for this profile",
            inv.requests.parent().unwrap_or(&inv.requests).display()
        ));
    }
    let client = client(&inv.credentials)?;
    let id = random_id()?;
    let (request, mut reader) = client
        .request(id, inv.argv, inv.why)
        .map_err(|e| e.to_string())?;
    // SAFETY: the handler only stores to an atomic, which is
    // async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as *const () as libc::sighandler_t,
        );
    }
    put(&inv.requests, MailboxEntry::Request(id), &request)?;
    let mut cancelled = false;
    let mut pause = POLL_MIN;
    let mut output = Output::new();
    loop {
        if INTERRUPTED.load(Ordering::SeqCst) && !cancelled {
            cancelled = true;
            let file = client.cancellation(&reader).map_err(|e| e.to_string())?;
            put(&inv.requests, MailboxEntry::Cancellation(id), &file)?;
        }
        let next = MailboxEntry::Chunk(id, reader.received());
        if let Some(file) = take(&inv.results, next)? {
            let chunk = reader.chunk(&file).map_err(|e| e.to_string())?;
            output.put(chunk.stream, &chunk.bytes);
            if let Some(ack) = client.acknowledgement(&reader).map_err(|e| e.to_string())? {
                let highest = reader.received() - 1;
                put(&inv.requests, MailboxEntry::Ack(id, highest), &ack)?;
            }
            pause = POLL_MIN;
            continue;
        }
        if let Some(file) = take(&inv.results, MailboxEntry::Result(id))? {
            let result = reader.result(&file).map_err(|e| e.to_string())?;
            output.finish();
            let (code, message) = exit_for(result.outcome, result.exit_code);
            if let Some(message) = message {
                eprintln!("lazaret-escalate: {message}");
            }
            return Ok(code);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(POLL_MAX);
    }
}

/// Prints `bytes` on `stream`. A closed output (a pipe whose reader left)
/// loses the rest of the output, not the run: its status still matters.
fn print(stream: ResultStream, bytes: &[u8]) {
    let _ = match stream {
        ResultStream::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        }
        ResultStream::Stderr => std::io::stderr().lock().write_all(bytes),
    };
}

/// A spilled chunk's header: its stream (0 stdout, 1 stderr) and length.
const HEADER: usize = 5;

/// How far the spill is written and printed, shared with its printer.
#[derive(Debug, Default)]
struct Spilled {
    written: u64,
    printed: u64,
    done: bool,
}

/// A spill file and its printer thread.
struct Spill {
    file: Arc<File>,
    /// Where the next kept chunk goes.
    written: u64,
    shared: Arc<(Mutex<Spilled>, Condvar)>,
    printer: JoinHandle<()>,
}

/// The host command's output on its way to this process's standard
/// output and error (see the module comment); without a spill, printed
/// as it comes.
struct Output {
    spill: Option<Spill>,
}

impl Output {
    fn new() -> Self {
        let dir = std::env::var_os("TMPDIR")
            .map(PathBuf::from)
            .filter(|d| d.is_absolute())
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        let file = File::options()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .mode(0o600)
            .open(&dir);
        let spill = file.ok().map(|file| {
            let file = Arc::new(file);
            let shared = Arc::new((Mutex::new(Spilled::default()), Condvar::new()));
            let printer = {
                let (file, shared) = (Arc::clone(&file), Arc::clone(&shared));
                std::thread::spawn(move || print_spilled(&file, &shared))
            };
            Spill {
                file,
                written: 0,
                shared,
                printer,
            }
        });
        Self { spill }
    }

    /// Keeps one chunk for printing (or prints it, without a spill).
    fn put(&mut self, stream: ResultStream, bytes: &[u8]) {
        let Some(spill) = self.spill.as_mut() else {
            return print(stream, bytes);
        };
        let Ok(len) = u32::try_from(bytes.len()) else {
            return print(stream, bytes);
        };
        let (lock, changed) = &*spill.shared;
        if let Ok(mut spilled) = lock.lock() {
            // Everything kept is printed: the file starts over, so it
            // holds only what waits.
            if spilled.printed == spilled.written
                && spilled.written > 0
                && spill.file.set_len(0).is_ok()
            {
                *spilled = Spilled::default();
                spill.written = 0;
            }
        }
        let mut record = Vec::with_capacity(HEADER + bytes.len());
        record.push(u8::from(stream == ResultStream::Stderr));
        record.extend_from_slice(&len.to_le_bytes());
        record.extend_from_slice(bytes);
        if spill.file.write_all_at(&record, spill.written).is_ok() {
            spill.written += record.len() as u64;
            if let Ok(mut spilled) = lock.lock() {
                spilled.written = spill.written;
            }
            changed.notify_all();
        } else {
            // A full spill: what was kept is printed first, then this and
            // the rest as they come.
            self.finish();
            print(stream, bytes);
        }
    }

    /// Waits until everything kept is printed (also when the run ends in
    /// an error: what was acknowledged is the client's to print).
    fn finish(&mut self) {
        let Some(spill) = self.spill.take() else {
            return;
        };
        let (lock, changed) = &*spill.shared;
        if let Ok(mut spilled) = lock.lock() {
            spilled.done = true;
        }
        changed.notify_all();
        let _ = spill.printer.join();
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The printer thread: prints each kept chunk in order until the spill is
/// done and all of it printed. The file is emptied (by the writer) only
/// while everything in it is printed, so never under this thread's reads.
fn print_spilled(file: &File, shared: &(Mutex<Spilled>, Condvar)) {
    let (lock, changed) = shared;
    // Bounded by the spill: every turn prints what was kept or ends.
    loop {
        let (mut offset, written) = {
            let Ok(mut spilled) = lock.lock() else { return };
            while spilled.written == spilled.printed && !spilled.done {
                spilled = match changed.wait(spilled) {
                    Ok(s) => s,
                    Err(_) => return,
                };
            }
            if spilled.written == spilled.printed {
                return;
            }
            (spilled.printed, spilled.written)
        };
        while offset < written {
            let mut header = [0u8; HEADER];
            if file.read_exact_at(&mut header, offset).is_err() {
                return;
            }
            let [tag, len @ ..] = header;
            let len = u32::from_le_bytes(len) as usize;
            let mut bytes = vec![0u8; len];
            if file
                .read_exact_at(&mut bytes, offset + HEADER as u64)
                .is_err()
            {
                return;
            }
            let stream = if tag == 1 {
                ResultStream::Stderr
            } else {
                ResultStream::Stdout
            };
            print(stream, &bytes);
            offset += (HEADER + len) as u64;
        }
        if let Ok(mut spilled) = lock.lock() {
            spilled.printed = written;
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let inv = match parse(args) {
        Ok(inv) => inv,
        Err(message) => {
            eprintln!("lazaret-escalate: {message}");
            return ExitCode::from(2);
        }
    };
    match run(inv) {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("lazaret-escalate: {message}");
            ExitCode::from(125)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter()
            .map(|s| OsString::from_vec(s.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn the_command_line_is_a_justification_and_an_exact_vector() {
        let inv = parse(args(&[
            "--why",
            "fetch deps",
            "--",
            "/usr/bin/git",
            "fetch",
            "--",
            "x",
        ]))
        .expect("parses");
        assert_eq!(inv.why, "fetch deps");
        assert_eq!(inv.argv, ["/usr/bin/git", "fetch", "--", "x"]);
        assert_eq!(inv.requests, Path::new(SANDBOX_REQUESTS));
        for bad in [
            &["--", "/bin/true"][..],
            &["--why", "x"],
            &["--why", "x", "--"],
            &["--why"],
            &["--bogus", "--", "/bin/true"],
        ] {
            assert!(parse(args(bad)).is_err(), "{bad:?}");
        }
        let inv =
            parse(args(&["--mailbox", "/m", "--why", "w", "--", "/bin/true"])).expect("parses");
        assert_eq!(inv.results, Path::new("/m/results"));
    }

    #[test]
    fn outcomes_map_to_documented_statuses() {
        assert_eq!(exit_for(EscalationOutcome::Completed, Some(3)).0, 3);
        assert_eq!(exit_for(EscalationOutcome::Completed, Some(300)).0, 125);
        assert_eq!(exit_for(EscalationOutcome::Denied, None).0, 126);
        assert_eq!(exit_for(EscalationOutcome::TimedOut, None).0, 124);
        assert_eq!(exit_for(EscalationOutcome::Cancelled, None).0, 130);
        assert_eq!(exit_for(EscalationOutcome::Failed, None).0, 125);
        assert_eq!(hex_decode("0aff"), Some(vec![0x0a, 0xff]));
        assert_eq!(hex_decode("0g"), None);
        assert_eq!(hex_decode("abc"), None);
    }
}
