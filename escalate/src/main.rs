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
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lazaret_wire::client::{
    EscalationClient, ResultReader, CREDENTIALS, SANDBOX_REQUESTS, SANDBOX_RESULTS,
    SESSION_CAPABILITY_ENV,
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
    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    loop {
        if INTERRUPTED.load(Ordering::SeqCst) && !cancelled {
            cancelled = true;
            let file = client.cancellation(&reader).map_err(|e| e.to_string())?;
            put(&inv.requests, MailboxEntry::Cancellation(id), &file)?;
        }
        let next = MailboxEntry::Chunk(id, reader.received());
        if let Some(file) = take(&inv.results, next)? {
            deliver(&mut reader, &file, &mut stdout, &mut stderr)?;
            if let Some(ack) = client.acknowledgement(&reader).map_err(|e| e.to_string())? {
                let highest = reader.received() - 1;
                put(&inv.requests, MailboxEntry::Ack(id, highest), &ack)?;
            }
            pause = POLL_MIN;
            continue;
        }
        if let Some(file) = take(&inv.results, MailboxEntry::Result(id))? {
            let result = reader.result(&file).map_err(|e| e.to_string())?;
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

/// Prints one chunk's bytes on its stream.
fn deliver(
    reader: &mut ResultReader,
    file: &[u8],
    stdout: &mut std::io::Stdout,
    stderr: &mut std::io::Stderr,
) -> Result<(), String> {
    let chunk = reader.chunk(file).map_err(|e| e.to_string())?;
    let written = match chunk.stream {
        ResultStream::Stdout => stdout.write_all(&chunk.bytes).and_then(|()| stdout.flush()),
        ResultStream::Stderr => stderr.write_all(&chunk.bytes).and_then(|()| stderr.flush()),
    };
    // A closed output (a pipe whose reader left) loses the rest of the
    // output, not the run: its status still matters.
    let _ = written;
    Ok(())
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
