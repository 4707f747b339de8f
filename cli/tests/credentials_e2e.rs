//! The Agent Sandbox's credentials and the control protocol (spec 3.3
//! "Protocol cryptography refinement"), end to end with real runsc, as the
//! unprivileged test user: the credential bundle is mounted read-only at
//! the fixed credential path, its host source is gone once the sandbox
//! runs, and no private key but the sandbox's own is anywhere in the
//! sandbox's view; the Host Coordinator refuses malformed, truncated,
//! oversized and reordered control frames by name and keeps serving.
//!
//! The processes of a crash-point build disclose the seeds they draw
//! (`LAZARET_SECRETS_LOG`, effects/src/crash_point.rs); the sandbox is
//! scanned for each, masked in the scanner's argv so the secrets never
//! enter the sandbox through the test itself. The sandbox key, which must
//! be at the credential path, is the scan's positive control.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod support;
use lazaret_runtime::bundle::{CREDENTIALS, SESSION_CAPABILITY_ENV};
use lazaret_runtime::protocol::records::{
    ProtocolCredentialRole, ProtocolRecord, SandboxCredentialBundle, SessionRegistrationResponse,
    SessionRequestCapability,
};
use lazaret_runtime::protocol::signing::sha256;
use lazaret_runtime::protocol::{verify_registration, ExpectedRegistration};
use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::{runtime_files, text, Env, ONE_AT_A_TIME};

fn wait_for(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `(label, seed)` in the order the processes disclosed them.
fn disclosed(log: &Path) -> Vec<(String, Vec<u8>)> {
    std::fs::read_to_string(log)
        .unwrap_or_else(|e| panic!("{}: {e}", log.display()))
        .lines()
        .map(|line| {
            let (label, seed) = line.split_once(' ').expect("LABEL HEX");
            (label.to_owned(), hex::decode(seed).expect("hex seed"))
        })
        .collect()
}

#[test]
fn the_sandbox_holds_its_credentials_and_no_other_private_key() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let image = support::distroless_image(Path::new("/tmp/lazaret-e2e-credentials-image"));
    let env = Env::new("credentials", &image);
    let log = env.home.join("secrets.log");
    let log_text = log.display().to_string();
    let vars = [("LAZARET_SECRETS_LOG", log_text.as_str())];
    let run = |args: &[&str]| env.command_env(args, &vars).output().unwrap();

    let mut keeper = env
        .command_env(&["default", "--", "/bin/probe", "hold", "keeper"], &vars)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the keeping session", Duration::from_secs(60), || {
        env.workspace.join("keeper").exists()
    });

    // Spec 3.3: the sandbox-key source is unlinked once the sandbox runs.
    let sources: Vec<_> = runtime_files(&env.home.join("run"))
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "credentials"))
        .collect();
    assert!(sources.is_empty(), "the host source is left: {sources:?}");

    // The bundle, read through the mount after its source was unlinked.
    let out = run(&["default", "--", "/bin/probe", "hex", CREDENTIALS]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let bytes = hex::decode(text(&out.stdout).trim()).expect("the bundle's hex");
    let bundle = SandboxCredentialBundle::decode(&bytes).expect("a v1 credential bundle");
    let secrets = disclosed(&log);
    let seed = |label: &str| {
        secrets
            .iter()
            .find(|(l, _)| l == label)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| panic!("no {label} seed disclosed: {secrets:?}"))
    };
    assert_eq!(bundle.sandbox_private_key.to_vec(), seed("sandbox"));
    assert_eq!(
        bundle.sandbox_protocol_credential.role,
        ProtocolCredentialRole::AgentSandbox
    );
    assert_eq!(
        bundle.coordinator_protocol_credential.role,
        ProtocolCredentialRole::SessionCoordinator
    );
    assert_eq!(
        bundle.trust_manifest.generation_identity,
        bundle.generation_identity
    );

    // Spec 3.3: the session's guest process gets its Session Request
    // Capability, which binds this CLI's Session Anchor (the last one
    // disclosed) to this generation and the sandbox credential, signed by
    // the coordinator credential the bundle holds.
    let out = run(&["default", "--", "/bin/probe", "hex", "/proc/self/environ"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let environ = hex::decode(text(&out.stdout).trim()).expect("the environment's hex");
    let wanted = format!("{SESSION_CAPABILITY_ENV}=");
    let value = environ
        .split(|b| *b == 0)
        .find_map(|entry| entry.strip_prefix(wanted.as_bytes()))
        .unwrap_or_else(|| panic!("no {SESSION_CAPABILITY_ENV} in the session's environment"));
    let capability = SessionRequestCapability::decode(&hex::decode(value).unwrap())
        .expect("a v1 Session Request Capability");
    let anchor_seed: [u8; 32] = disclosed(&log)
        .iter()
        .rev()
        .find(|(l, _)| l == "session-anchor")
        .map(|(_, s)| s.as_slice().try_into().unwrap())
        .unwrap();
    let identity = &bundle.generation_identity;
    let expected = ExpectedRegistration {
        domain_id: identity.domain_id,
        configuration_fingerprint: identity.configuration_fingerprint,
        generation_id: identity.generation_id,
        session_anchor: ed25519_dalek::SigningKey::from_bytes(&anchor_seed)
            .verifying_key()
            .to_bytes(),
        trust_manifest_sha256: sha256(&bundle.trust_manifest.encode().unwrap()),
    };
    let response = SessionRegistrationResponse {
        protocol_version: capability.protocol_version,
        session_capability: capability.clone(),
    };
    verify_registration(
        &response,
        &bundle.trust_manifest,
        &bundle.coordinator_protocol_credential,
        &expected,
    )
    .expect("the session's capability verifies against the sandbox's bundle");
    assert_eq!(
        capability.sandbox_credential_id,
        bundle.sandbox_protocol_credential.credential_id
    );

    // Read-only for the sandbox, whose sessions may override file modes
    // (CAP_DAC_OVERRIDE): the mount refuses, not the mode.
    let out = run(&["default", "--", "/bin/probe", "write", CREDENTIALS]);
    assert!(
        text(&out.stdout).starts_with("refused Read-only file system"),
        "the credential mount is not read-only: {}",
        text(&out.stdout)
    );

    // Every disclosed seed so far: the generation's five, and one Session
    // Anchor and one TLS client key per CLI (the keeper's and the three
    // probes').
    let secrets = disclosed(&log);
    for per_cli in ["session-anchor", "client-tls"] {
        let count = secrets.iter().filter(|(l, _)| l == per_cli).count();
        assert_eq!(count, 4, "{per_cli}: {secrets:?}");
    }
    for label in [
        "tls-ca",
        "issuer",
        "coordinator",
        "coordinator-tls",
        "sandbox",
    ] {
        seed(label);
    }
    let random = || {
        let mut out = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut out))
            .unwrap();
        out
    };
    let mask = random();
    // The scan's second positive control: a random value the workspace
    // holds as hex text.
    let canary = random();
    std::fs::write(env.workspace.join("canary"), hex::encode(canary)).unwrap();
    let mut secrets = secrets;
    secrets.push(("canary".to_owned(), canary.to_vec()));
    let mut args = vec![
        "default".to_owned(),
        "--".to_owned(),
        "/bin/probe".to_owned(),
        "scan".to_owned(),
        hex::encode(mask),
    ];
    for (i, (label, seed)) in secrets.iter().enumerate() {
        let masked: Vec<u8> = seed.iter().zip(&mask).map(|(s, m)| s ^ m).collect();
        args.push(format!("{label}#{i}={}", hex::encode(masked)));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let mut found: Vec<&str> = stdout.lines().filter(|l| l.starts_with("found ")).collect();
    found.sort_unstable();
    let unreadable: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("unreadable "))
        .collect();
    assert!(unreadable.is_empty(), "not scanned: {unreadable:?}");
    let at = |label: &str| secrets.iter().position(|(l, _)| l == label).unwrap();
    let mut expected = [
        format!("found sandbox#{} {CREDENTIALS}", at("sandbox")),
        format!("found canary#{} /workspace/canary", at("canary")),
    ];
    expected.sort_unstable();
    assert_eq!(
        found, expected,
        "private keys in the sandbox's view other than its own at {CREDENTIALS}"
    );
    let scanned: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("scanned "))
        .and_then(|n| n.parse().ok())
        .expect("the scan's count");
    assert!(scanned > 10, "only {scanned} files scanned:\n{stdout}");
    eprintln!("credentials: {scanned} files and process environments scanned");

    std::fs::write(env.workspace.join("done"), "").unwrap();
    let out = keeper.wait().unwrap();
    assert_eq!(out.code(), Some(0));
    env.assert_nothing_left();
}

/// Set in the fuzzing client's environment: the Domain's runtime root.
const FUZZ_RUNTIME: &str = "LAZARET_CONTROL_FUZZ_RUNTIME";
/// How many malformed openings the fuzzing client sends.
const FUZZ_ROUNDS: &str = "LAZARET_CONTROL_FUZZ_ROUNDS";
const FUZZ_TEST: &str =
    "the_coordinator_survives_malformed_truncated_oversized_and_reordered_frames";

/// Spec 3.3, 3.4 (v1 wire records): authenticated control connections carry
/// malformed, truncated, oversized and reordered frames, and garbage on
/// open session streams; the Host Coordinator refuses each by name (or
/// closes a connection that ends mid-frame), keeps its memory, and serves
/// the next real session. The frames come from this test's own binary,
/// run as the developer (the test user), which alone may enroll.
#[test]
fn the_coordinator_survives_malformed_truncated_oversized_and_reordered_frames() {
    if let Ok(runtime) = std::env::var(FUZZ_RUNTIME) {
        let rounds = std::env::var(FUZZ_ROUNDS).unwrap().parse().unwrap();
        control_fuzz::client(Path::new(&runtime), rounds);
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Its own image directory: the test runner may run the other test of
    // this file at the same time, in another process.
    let image = support::distroless_image(Path::new("/tmp/lazaret-e2e-control-fuzz-image"));
    let env = Env::new("control-fuzz", &image);
    let mut keeper = env.spawn(&["default", "--", "/bin/probe", "hold", "keeper"]);
    wait_for("the keeping session", Duration::from_secs(60), || {
        env.workspace.join("keeper").exists()
    });
    let coordinator = env
        .processes()
        .into_iter()
        .find(|p| p.contains("__coordinator"))
        .and_then(|p| p.split_once(':').map(|(pid, _)| pid.to_owned()))
        .expect("the Host Coordinator's process");
    let rss = || control_fuzz::rss_kib(&coordinator);
    let fuzz = |rounds: usize| {
        let out = control_fuzz::run_as_developer(&env, rounds);
        assert!(
            out.status.success(),
            "the fuzzing client: {}",
            text(&out.stderr)
        );
        control_fuzz::outcomes(&text(&out.stdout))
    };
    // A first round grows what is grown once (thread stacks, allocator
    // arenas, the issued-leaf table's one entry per client).
    fuzz(120);
    let before = rss();
    let outcomes = fuzz(1200);
    let after = rss();
    eprintln!("control fuzz: {outcomes:?}; coordinator RSS {before} KiB -> {after} KiB");
    control_fuzz::assert_named(&outcomes);
    assert!(
        after <= before + 4096,
        "the coordinator grew from {before} KiB to {after} KiB over 1,200 malformed openings"
    );
    // The same coordinator still serves a real session.
    let out = env.run(&["default", "--", "/bin/probe", "exists", "/workspace/keeper"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "present");
    assert!(
        Path::new(&format!("/proc/{coordinator}")).exists(),
        "the coordinator is gone"
    );
    std::fs::write(env.workspace.join("done"), "").unwrap();
    let out = keeper.wait().unwrap();
    assert_eq!(out.code(), Some(0));
    env.assert_nothing_left();
    env.assert_traces_replay();
}

/// The fuzzing client and what the test reads of it.
mod control_fuzz {
    use super::support::{test_user, Env};
    use lazaret_effects::coordinator::paths::{DomainPaths, ShortSocketPath};
    use lazaret_effects::coordinator::{channel, control_tls, publication};
    use lazaret_runtime::coordinator::control::{
        encode_control_request, opening_requests, ControlRequest, ControlResponse,
        MAX_CONTROL_FRAME,
    };
    use lazaret_runtime::coordinator::frame::PREFIX;
    use lazaret_runtime::coordinator::messages::{
        InteractiveTerminal, SessionRequest, TerminalSize,
    };
    use lazaret_runtime::protocol::records::{ClientEnrollmentRequest, TlsCredential};
    use lazaret_runtime::protocol::tls::ClientTlsKey;
    use lazaret_runtime::records::ids::{CliId, GenerationId, SessionId};
    use std::collections::BTreeMap;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Output};
    use std::time::Duration;

    /// Runs this test's binary as the developer, in the fuzzing client role.
    pub fn run_as_developer(env: &Env, rounds: usize) -> Output {
        Command::new("runuser")
            .args(["-u", &test_user(), "--", "env", "-i"])
            .arg("PATH=/usr/bin:/bin")
            .arg(format!(
                "{}={}",
                super::FUZZ_RUNTIME,
                env.home.join("run").display()
            ))
            .arg(format!("{}={rounds}", super::FUZZ_ROUNDS))
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                super::FUZZ_TEST,
                "--nocapture",
                "--test-threads=1",
            ])
            .output()
            .unwrap()
    }

    pub fn rss_kib(pid: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// `case -> outcome -> count` from the client's `fuzz CASE OUTCOME` lines.
    pub fn outcomes(stdout: &str) -> BTreeMap<String, BTreeMap<String, usize>> {
        let mut all: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
        for line in stdout.lines().filter_map(|l| l.strip_prefix("fuzz ")) {
            let (case, outcome) = line.split_once(' ').expect("fuzz CASE OUTCOME");
            *all.entry(case.to_owned())
                .or_default()
                .entry(outcome.to_owned())
                .or_default() += 1;
        }
        all
    }

    /// Every case ended as it must: refused by name, or closed when the
    /// frame never ended; never registered.
    pub fn assert_named(outcomes: &BTreeMap<String, BTreeMap<String, usize>>) {
        let must: [(&str, &[&str]); 14] = [
            ("session-again", &["refused-SessionIdTaken"]),
            (
                "noise",
                &["refused-Malformed", "refused-Unexpected", "closed"],
            ),
            ("huge-prefix", &["refused-Malformed"]),
            ("oversized", &["refused-Malformed"]),
            ("truncated", &["closed"]),
            ("half-prefix", &["closed"]),
            ("start-first", &["refused-Unexpected"]),
            ("register-twice", &["refused-Unexpected"]),
            ("enroll-again", &["refused-Unexpected"]),
            ("stale", &["refused-StaleGeneration"]),
            ("other-client", &["refused-ClientMismatch"]),
            ("version", &["refused-Version"]),
            ("session-mismatch", &["refused-SessionMismatch"]),
            (
                "damaged",
                &[
                    "refused-Malformed",
                    "refused-Version",
                    "refused-OtherDomain",
                    "refused-StaleGeneration",
                    "refused-ClientMismatch",
                    "refused-Unexpected",
                    "closed",
                ],
            ),
        ];
        for (case, allowed) in must {
            let seen = outcomes
                .get(case)
                .unwrap_or_else(|| panic!("no {case} round ran: {outcomes:?}"));
            for outcome in seen.keys() {
                assert!(
                    allowed.contains(&outcome.as_str()),
                    "{case} ended {outcome}: {outcomes:?}"
                );
            }
        }
        for stream in ["piped-stream", "terminal-stream"] {
            assert_eq!(
                outcomes.get(stream).map(|o| o.keys().collect::<Vec<_>>()),
                Some(vec![&"ended".to_owned()]),
                "{stream}: {outcomes:?}"
            );
        }
    }

    fn random<const N: usize>() -> [u8; N] {
        let mut out = [0u8; N];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut out))
            .unwrap();
        out
    }

    /// The file `name` somewhere under `dir` (the runtime root holds one
    /// Domain).
    fn find(dir: &Path, name: &str) -> Option<PathBuf> {
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            if entry.file_name() == name {
                return Some(path);
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                if let Some(found) = find(&path, name) {
                    return Some(found);
                }
            }
        }
        None
    }

    struct Client {
        socket: PathBuf,
        publication: lazaret_runtime::protocol::records::ProtocolPublicationIdentity,
        key: ClientTlsKey,
        credential: TlsCredential,
        cli_id: CliId,
    }

    impl Client {
        fn connect(&self) -> UnixStream {
            let short = ShortSocketPath::new(&self.socket).unwrap();
            let raw = UnixStream::connect(short.path()).unwrap();
            let stream =
                control_tls::open(raw, &self.publication, &self.key, &self.credential).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            stream
        }

        fn request(&self, terminal: bool) -> SessionRequest {
            let identity = &self.publication.generation_identity;
            SessionRequest {
                domain_id: identity.domain_id.0,
                fingerprint: identity.configuration_fingerprint.0,
                session_id: SessionId(random()),
                argv: vec!["/bin/probe".into(), "hold".into(), "fuzz".into()],
                terminal: terminal.then_some(InteractiveTerminal {
                    size: TerminalSize {
                        rows: 24,
                        columns: 80,
                    },
                    term: None,
                }),
                session_anchor: random(),
            }
        }

        fn opening(&self, request: &SessionRequest) -> [ControlRequest; 2] {
            opening_requests(request, &self.publication.generation_identity, self.cli_id).unwrap()
        }
    }

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = u32::try_from(body.len()).unwrap().to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    fn encoded(request: &ControlRequest) -> Vec<u8> {
        framed(&encode_control_request(request).unwrap())
    }

    /// Writes `bytes`, ends the client's side, and names the answer.
    fn outcome(client: &Client, bytes: &[u8]) -> String {
        let mut stream = client.connect();
        // A refusal may come before everything is written.
        let _ = stream.write_all(bytes);
        let _ = stream.shutdown(std::net::Shutdown::Write);
        match channel::receive_within::<ControlResponse>(
            &mut stream,
            "fuzz",
            PREFIX + MAX_CONTROL_FRAME,
        ) {
            Ok(ControlResponse::Refused(refusal)) => {
                let name = format!("{refusal:?}");
                let variant = name.split([' ', '(', '{']).next().unwrap_or("?");
                format!("refused-{variant}")
            }
            Ok(ControlResponse::Registered(_)) => "registered".into(),
            Ok(other) => format!("answered-{other:?}"),
            Err(channel::ChannelError::Closed { .. }) => "closed".into(),
            Err(e) => format!("error-{e}").replace(' ', "_"),
        }
    }

    /// Opens a real session; opens it again with its Session ID, which is
    /// refused; then sends a frame that is no record on its stream: the
    /// coordinator ends the session as if its client were lost. The second
    /// opening's outcome and the stream's end.
    fn garbage_stream(client: &Client, terminal: bool) -> (String, String) {
        let mut stream = client.connect();
        let request = client.request(terminal);
        let opening = client.opening(&request);
        for frame in &opening {
            channel::send(&mut stream, "fuzz", frame).unwrap();
        }
        for _ in 0..2 {
            match channel::receive::<ControlResponse>(&mut stream, "fuzz") {
                Ok(ControlResponse::Registered(_) | ControlResponse::Started(_)) => {}
                other => panic!("the session did not start: {other:?}"),
            }
        }
        let again = outcome(client, &opening.map(|r| encoded(&r)).concat());
        stream
            .write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3])
            .unwrap();
        // Whatever the session still sends, then its end.
        let mut sink = Vec::new();
        let ended = match stream.read_to_end(&mut sink) {
            Ok(_) => "ended".into(),
            Err(e) => format!("error-{e}").replace(' ', "_"),
        };
        (again, ended)
    }

    pub fn client(runtime: &Path, rounds: usize) {
        let publication_path = find(runtime, "publication")
            .unwrap_or_else(|| panic!("no publication under {}", runtime.display()));
        let dir = publication_path.parent().unwrap();
        let socket = DomainPaths::new(dir, dir).socket();
        let publication = publication::read(&publication_path).unwrap();
        let key = ClientTlsKey::from_seed(&random());
        let cli_id = CliId(random());
        let short = ShortSocketPath::new(&socket).unwrap();
        let raw = UnixStream::connect(short.path()).unwrap();
        let credential = control_tls::enroll(raw, &publication, &key, cli_id).unwrap();
        let client = Client {
            socket,
            publication,
            key,
            credential,
            cli_id,
        };
        let good = client.opening(&client.request(false)).map(|r| encoded(&r));
        let [ControlRequest::Register(register), execute] = client.opening(&client.request(false))
        else {
            unreachable!()
        };
        let variant =
            |edit: &dyn Fn(&mut lazaret_runtime::protocol::records::SessionRegistrationRequest)| {
                let mut r = register.clone();
                edit(&mut r);
                [encoded(&ControlRequest::Register(r)), encoded(&execute)].concat()
            };
        for round in 0..rounds {
            let noise: [u8; 64] = random();
            let (case, bytes): (&str, Vec<u8>) = match round % 13 {
                0 => ("noise", noise[..usize::from(noise[0]) % 64 + 1].to_vec()),
                1 => ("huge-prefix", vec![0xff; 8]),
                2 => (
                    "oversized",
                    u32::try_from(MAX_CONTROL_FRAME + 1)
                        .unwrap()
                        .to_be_bytes()
                        .to_vec(),
                ),
                3 => {
                    let cut = usize::from(noise[1]) % (good[0].len() - PREFIX) + PREFIX;
                    ("truncated", good[0][..cut].to_vec())
                }
                4 => ("half-prefix", good[0][..2].to_vec()),
                5 => ("start-first", good[1].clone()),
                6 => (
                    "register-twice",
                    [good[0].clone(), good[0].clone()].concat(),
                ),
                7 => (
                    "enroll-again",
                    encoded(&ControlRequest::Enroll(ClientEnrollmentRequest {
                        protocol_version: 1,
                        generation_identity: client.publication.generation_identity.clone(),
                        cli_id: client.cli_id,
                        certificate_signing_request_der: noise.to_vec(),
                    })),
                ),
                8 => (
                    "stale",
                    variant(&|r| {
                        let g = &mut r.session_binding.generation_identity.generation_id;
                        *g = GenerationId(g.0.wrapping_add(1));
                    }),
                ),
                9 => (
                    "other-client",
                    variant(&|r| r.session_binding.cli_id = CliId(random())),
                ),
                10 => ("version", variant(&|r| r.protocol_version = 9)),
                11 => (
                    "session-mismatch",
                    variant(&|r| r.session_binding.session_id = SessionId(random())),
                ),
                _ => {
                    // The registration only, with one to four bytes of its
                    // body overwritten: whatever it decodes to is refused, or
                    // waits for a start that never comes.
                    let mut damaged = good[0].clone();
                    for i in 0..usize::from(noise[0] % 4) + 1 {
                        let at = PREFIX + usize::from(noise[2 * i + 1]) % (damaged.len() - PREFIX);
                        damaged[at] = noise[2 * i + 2];
                    }
                    ("damaged", damaged)
                }
            };
            println!("fuzz {case} {}", outcome(&client, &bytes));
        }
        for (name, terminal) in [("piped-stream", false), ("terminal-stream", true)] {
            let (again, ended) = garbage_stream(&client, terminal);
            println!("fuzz session-again {again}");
            println!("fuzz {name} {ended}");
        }
    }
}
