//! The Escalation Client binary against the Host Coordinator's mailbox
//! service (spec 3.8): real files in a mailbox directory pair, real
//! signatures under one generation's Trust Anchor, a real host process
//! started by the shell-free launcher and held by its pidfd. The service
//! runs on the test's thread; the client is the `lazaret-escalate` binary
//! (the same source `cli/build.rs` builds static for the sandbox).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use std::fs;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use lazaret_effects::confined::{ConfinedSys, RealSys, UserIds};
use lazaret_effects::escalation::launcher::{open_executable, HostProcessSetting};
use lazaret_effects::escalation::model_steps::{EscalationSteps, StepRefused};
use lazaret_effects::escalation::prompt_desk::{
    PromptAnswer, PromptDesk, Registration, TerminalHold, TerminalUse,
};
use lazaret_effects::escalation::running::RunningHostProcesses;
use lazaret_effects::escalation::service::{ApprovalRule, Limits, Served, Service};
use lazaret_effects::escalation::MailboxDir;
use lazaret_generated::lazaret::{Action, Esc, SessionsId};
use lazaret_runtime::config::ResolvedAutoApprovalRule;
use lazaret_runtime::coordinator::host_model::support::serving_one_session;
use lazaret_runtime::coordinator::host_model::HostModel;
use lazaret_runtime::escalation::prompt::check_decision;
use lazaret_runtime::escalation::steps::EscalationStep;
use lazaret_runtime::escalation::{MailboxAuthority, RequestLedger};
use lazaret_runtime::protocol::mailbox::{
    DeveloperDecision, DeveloperDecisionKind, EscalationOutcome, MailboxEntry, SignedPayload,
    SignedProtocolRecord,
};
use lazaret_runtime::protocol::records::{GenerationIdentity, ProtocolRecord, SessionBinding};
use lazaret_runtime::protocol::signing::sign_payload;
use lazaret_runtime::protocol::{TrustAnchor, TrustAnchorSeeds};
use lazaret_runtime::records::ids::{
    CliId, ConfigurationFingerprint, CoordinatorId, DomainId, GenerationId, ProfileName, SandboxId,
    SessionId,
};
use lazaret_runtime::terminal::protocol::{EscalationPrompt, PromptClosing};

/// 2026-12-05T00:00:00Z.
const NOW: i64 = 1_796_428_800;
const SESSION: SessionId = SessionId([1; 16]);

/// The session's Session Anchor (the Client CLI's key).
fn session_anchor() -> SigningKey {
    SigningKey::from_bytes(&[6; 32])
}

#[derive(Debug)]
struct FixedClock;

impl rustls::time_provider::TimeProvider for FixedClock {
    fn current_time(&self) -> Option<rustls::pki_types::UnixTime> {
        Some(rustls::pki_types::UnixTime::since_unix_epoch(
            Duration::from_secs(NOW as u64),
        ))
    }
}

/// One generation's mailbox, credentials and a host executable (a private
/// copy of `/bin/sh`).
struct Fixture {
    dir: tempfile::TempDir,
    anchor: TrustAnchor,
    capability_hex: String,
    sh: PathBuf,
    steps: ModelSteps,
}

/// The product's model of a coordinator serving the test's one session:
/// the service's every step is checked and taken as the coordinator's
/// event loop takes it (spec 3.8: every step is a generated transition).
struct ModelSteps {
    model: Mutex<(HostModel, SessionsId)>,
    refused: Mutex<Vec<StepRefused>>,
    taken: Mutex<Vec<EscalationStep>>,
}

impl ModelSteps {
    fn new() -> Self {
        Self {
            model: Mutex::new(serving_one_session().expect("a serving model")),
            refused: Mutex::new(Vec::new()),
            taken: Mutex::new(Vec::new()),
        }
    }

    /// The model's names of every step taken so far, in order.
    fn taken(&self) -> Vec<&'static str> {
        self.taken
            .lock()
            .unwrap()
            .iter()
            .map(|s| s.name())
            .collect()
    }

    /// The coordinator's close of the session, as its event loop takes it:
    /// `stop` (the close's effect), then `CloseSession`; a step asked
    /// meanwhile waits and is refused after it.
    fn close_session(&self, stop: impl FnOnce()) {
        let mut model = self.model.lock().unwrap();
        let (m, s) = &mut *model;
        stop();
        let close = Action::CloseSession { c: m.me(), s: *s };
        m.take(close).expect("the model closes the session");
    }

    /// The model took every step asked, and the session is back where a
    /// request starts: none open, its terminal forwarding.
    fn assert_at_rest(&self) {
        assert_eq!(*self.refused.lock().unwrap(), Vec::new());
        let model = self.model.lock().unwrap();
        let (m, s) = &*model;
        assert_eq!(m.state().esc[s.index()], Esc::None);
        assert!(m.state().pty_fwd[s.index()], "the terminal forwards again");
    }
}

impl EscalationSteps for ModelSteps {
    fn take(&self, session: SessionId, steps: &[EscalationStep]) -> Result<(), StepRefused> {
        let mut model = self.model.lock().unwrap();
        let (m, s) = &mut *model;
        for &step in steps {
            if session != SESSION {
                return Err(StepRefused::NotServed { step, session });
            }
            let action = step.action(m.me(), *s);
            let taken = m
                .take(action)
                .map(|_| ())
                .map_err(|e| StepRefused::Disabled {
                    step,
                    why: e.to_string(),
                });
            match taken {
                Ok(()) => self.taken.lock().unwrap().push(step),
                Err(refused) => {
                    self.refused.lock().unwrap().push(refused.clone());
                    return Err(refused);
                }
            }
        }
        Ok(())
    }
}

/// Plays the terminal loop's side of a request's lease on `line`'s
/// terminal: applies what the request wants until `done`, and returns
/// each change applied, in order.
fn apply_holds(
    line: &Registration,
    done: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<TerminalUse>> {
    apply_holds_after(line, done, Duration::ZERO)
}

/// [`apply_holds`] by a terminal loop busy for `busy` first (a guest
/// observation, a signal through runsc).
fn apply_holds_after(
    line: &Registration,
    done: &Arc<AtomicBool>,
    busy: Duration,
) -> std::thread::JoinHandle<Vec<TerminalUse>> {
    let hold: Arc<TerminalHold> = Arc::clone(line.hold());
    let done = Arc::clone(done);
    std::thread::spawn(move || {
        std::thread::sleep(busy);
        let mut applied: Vec<TerminalUse> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
            if let Some((wanted, serial)) = hold.pending() {
                if applied.last() != Some(&wanted) {
                    applied.push(wanted);
                }
                hold.applied(serial);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        applied
    })
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("a scratch directory");
    let identity = GenerationIdentity {
        agent_profile: ProfileName::new("agent").expect("a profile name"),
        domain_id: DomainId([1; 32]),
        generation_id: GenerationId(3),
        configuration_fingerprint: ConfigurationFingerprint([2; 32]),
        coordinator_id: CoordinatorId([3; 16]),
        sandbox_id: SandboxId([4; 16]),
    };
    let seeds = TrustAnchorSeeds {
        tls_ca: [9; 32],
        tls_ca_serial: [10; 16],
        issuer: [11; 32],
        coordinator: [12; 32],
        coordinator_tls: [13; 32],
        sandbox: [14; 32],
    };
    let (mut anchor, _) =
        TrustAnchor::new(identity, &seeds, NOW, Arc::new(FixedClock)).expect("a trust anchor");
    let bundle = anchor.take_sandbox_bundle().expect("the bundle");
    fs::write(
        dir.path().join("credentials"),
        &*bundle.encode_secret().expect("encodes"),
    )
    .expect("writes the credentials");
    let capability = anchor
        .register(
            CliId([5; 16]),
            SESSION,
            session_anchor().verifying_key().to_bytes(),
        )
        .expect("a registration")
        .session_capability;
    let capability_hex = capability
        .encode()
        .expect("encodes")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    for d in ["mailbox/requests", "mailbox/results"] {
        fs::create_dir_all(dir.path().join(d)).expect("creates the mailbox");
    }
    let sh = dir.path().join("sh");
    fs::copy("/bin/sh", &sh).expect("copies /bin/sh");
    fs::set_permissions(&sh, fs::Permissions::from_mode(0o755)).expect("chmod");
    let sh = fs::canonicalize(&sh).expect("canonical");
    Fixture {
        dir,
        anchor,
        capability_hex,
        sh,
        steps: ModelSteps::new(),
    }
}

fn handle(path: &Path) -> MailboxDir {
    let fd: OwnedFd = rustix::fs::open(
        path,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .expect("opens the mailbox directory");
    MailboxDir::new(fd, path.to_owned())
}

impl Fixture {
    /// The client asking for `argv`, its standard output piped.
    fn client(&self, argv: &[&str]) -> Child {
        self.client_in(argv, &std::env::temp_dir())
    }

    /// A client that prints every chunk as it comes, acknowledging it only
    /// once printed: it can keep no output (its `TMPDIR` does not exist),
    /// so output nobody reads holds its acknowledgements back.
    fn client_printing_directly(&self, argv: &[&str]) -> Child {
        self.client_in(argv, &self.dir.path().join("no-such-directory"))
    }

    fn client_in(&self, argv: &[&str], tmpdir: &Path) -> Child {
        Command::new(env!("CARGO_BIN_EXE_lazaret-escalate"))
            .env("TMPDIR", tmpdir)
            .arg("--credentials")
            .arg(self.dir.path().join("credentials"))
            .arg("--mailbox")
            .arg(self.dir.path().join("mailbox"))
            .args(["--why", "the test asks"])
            .arg("--")
            .args(argv)
            .env("LAZARET_SESSION_CAPABILITY", &self.capability_hex)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the client starts")
    }

    /// Serves requests until one was served; `rule_args` is the one
    /// auto-approval rule's arguments for the private `sh`.
    fn serve_one(&self, rule_args: &[&str], limits: Limits) -> Served {
        self.serve_one_prompting(rule_args, limits, None)
    }

    /// [`Fixture::serve_one`] with developer prompts on `prompts`.
    fn serve_one_prompting(
        &self,
        rule_args: &[&str],
        limits: Limits,
        prompts: Option<&PromptDesk>,
    ) -> Served {
        let served = self.serve_one_closable(
            rule_args,
            limits,
            prompts,
            &RunningHostProcesses::default(),
            &AtomicBool::new(true),
        );
        self.steps.assert_at_rest();
        served
    }

    /// [`Fixture::serve_one_prompting`] for a session served while `live`,
    /// its host processes registered in `running`.
    fn serve_one_closable(
        &self,
        rule_args: &[&str],
        limits: Limits,
        prompts: Option<&PromptDesk>,
        running: &RunningHostProcesses,
        live: &AtomicBool,
    ) -> Served {
        let sys = RealSys;
        let user: UserIds = sys.user_ids().expect("user ids");
        let requests = handle(&self.dir.path().join("mailbox/requests"));
        let results = handle(&self.dir.path().join("mailbox/results"));
        let authority = MailboxAuthority::of(&self.anchor);
        let signer = self.anchor.result_signer();
        let rule = ResolvedAutoApprovalRule {
            canonical_executable: self.sh.to_str().expect("UTF-8").as_bytes().to_vec(),
            args: rule_args.iter().map(|a| (*a).to_owned()).collect(),
            allow_extra_args: false,
        };
        let executable = open_executable(&sys, &user, &self.sh).expect("the executable opens");
        let rules = [ApprovalRule {
            rule: &rule,
            executable: &executable,
        }];
        let setting = HostProcessSetting {
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: self.dir.path().to_owned(),
            supervisor: lazaret_binary(),
        };
        let service = Service {
            sys: &sys,
            requests: &requests,
            results: &results,
            authority: &authority,
            signer: &signer,
            rules: &rules,
            prompts,
            user: &user,
            setting: &setting,
            limits,
            steps: &self.steps,
            running,
        };
        let registered =
            |b: &SessionBinding| b.session_id == SESSION && live.load(Ordering::SeqCst);
        let mut ledger = RequestLedger::default();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let pass = service
                .take_requests(&mut ledger, &registered, &|_| false)
                .expect("the inbound directory is read");
            if let Some(a) = pass.admitted.first() {
                return service
                    .serve(a, &registered)
                    .expect("the request is served");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("no request arrived");
    }
}

/// The workspace's `lazaret` binary (its `__host-command` is the host
/// command's supervisor), beside this test binary's `deps/` directory: a
/// workspace build (`cargo nextest run --workspace`, `scripts/test`)
/// builds it with the tests.
fn lazaret_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let binary = exe
        .parent()
        .and_then(Path::parent)
        .map(|profile| profile.join("lazaret"))
        .expect("the target directory");
    assert!(
        binary.is_file(),
        "{} is missing: build the workspace (cargo build -p lazaret-cli)",
        binary.display()
    );
    binary
}

/// Waits (at most 20 s) until eight chunk files wait in `results`;
/// returns the most seen at once.
fn wait_for_eight_chunks(results: &Path) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut most = 0;
    while most < 8 && Instant::now() < deadline {
        let chunks = fs::read_dir(results)
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().contains(".chunk."))
                })
                .count()
            })
            .unwrap_or(0);
        most = most.max(chunks);
        std::thread::sleep(Duration::from_millis(1));
    }
    most
}

/// Runs `run` with a service of `f`'s mailbox that approves nothing.
fn with_service<T>(f: &Fixture, limits: Limits, run: impl FnOnce(&Service<'_>) -> T) -> T {
    let sys = RealSys;
    let user = sys.user_ids().expect("user ids");
    let requests = handle(&f.dir.path().join("mailbox/requests"));
    let results = handle(&f.dir.path().join("mailbox/results"));
    let authority = MailboxAuthority::of(&f.anchor);
    let signer = f.anchor.result_signer();
    let setting = HostProcessSetting {
        env: Vec::new(),
        cwd: f.dir.path().to_owned(),
        supervisor: lazaret_binary(),
    };
    run(&Service {
        sys: &sys,
        requests: &requests,
        results: &results,
        authority: &authority,
        signer: &signer,
        rules: &[],
        prompts: None,
        user: &user,
        setting: &setting,
        limits,
        steps: &f.steps,
        running: &RunningHostProcesses::default(),
    })
}

/// The names in `f`'s mailbox direction `dir` (`requests` or `results`).
fn names(f: &Fixture, dir: &str) -> Vec<String> {
    fs::read_dir(f.dir.path().join("mailbox").join(dir))
        .expect("lists")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// A pidfd of the running client (it is signalled only through one).
fn pidfd_of(client: &Child) -> OwnedFd {
    let pid =
        rustix::process::Pid::from_raw(i32::try_from(client.id()).expect("a PID")).expect("a PID");
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
        .expect("the client's pidfd")
}

fn finish(child: Child) -> (i32, String, String) {
    let out = child.wait_with_output().expect("the client ends");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fast() -> Limits {
    Limits {
        run: Duration::from_secs(20),
        ack: Duration::from_secs(10),
        poll: Duration::from_millis(1),
        temporary: Duration::from_secs(30),
        retention: Duration::from_secs(300),
        prompt: Duration::from_secs(20),
    }
}

#[test]
fn an_auto_approved_command_streams_its_output_and_status() {
    let f = fixture();
    let script = "printf out; printf err >&2; exit 7";
    let sh = f.sh.to_str().expect("UTF-8").to_owned();
    let client = f.client(&[&sh, "-c", script]);
    let served = f.serve_one(&["-c", script], fast());
    assert_eq!(served.outcome, EscalationOutcome::Completed);
    assert_eq!(served.exit_code, Some(7));
    let (code, stdout, stderr) = finish(client);
    assert_eq!(code, 7, "{stderr}");
    assert_eq!(stdout, "out");
    assert_eq!(stderr, "err");
}

#[test]
fn a_request_no_rule_matches_exactly_is_denied_and_never_runs() {
    let f = fixture();
    let sh = f.sh.to_str().expect("UTF-8").to_owned();
    let marker = f.dir.path().join("ran");
    let touch = format!("echo > {}", marker.display());
    // The rule allows `-c true`; the request differs by one element.
    let client = f.client(&[&sh, "-c", &touch]);
    let served = f.serve_one(&["-c", "true"], fast());
    assert_eq!(served.outcome, EscalationOutcome::Denied);
    let (code, _, stderr) = finish(client);
    assert_eq!(code, 126);
    assert!(stderr.contains("denied"), "{stderr}");
    assert!(!marker.exists(), "a denied command ran");
}

#[test]
fn a_flood_read_slowly_keeps_at_most_eight_chunks_outstanding() {
    let f = fixture();
    let sh = f.sh.to_str().expect("UTF-8").to_owned();
    // 6 MiB on standard output.
    let script = "head -c 6291456 /dev/zero";
    let mut client = f.client_printing_directly(&[&sh, "-c", script]);
    let mut stdout = client.stdout.take().expect("piped");
    let results = f.dir.path().join("mailbox/results");
    // A reader that reads nothing until eight chunk files wait unread:
    // the client, blocked on its full output pipe, cannot acknowledge, so
    // the window fills; then it reads everything.
    let reader = std::thread::spawn(move || {
        let most = wait_for_eight_chunks(&results);
        let mut total = 0usize;
        let mut buf = vec![0u8; 65536];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => return (most, total),
                Ok(n) => {
                    assert!(buf[..n].iter().all(|b| *b == 0));
                    total += n;
                }
            }
        }
    });
    let served = f.serve_one(&["-c", script], fast());
    assert_eq!(served.outcome, EscalationOutcome::Completed);
    assert_eq!(served.exit_code, Some(0));
    assert_eq!(served.most_unacknowledged, 8, "the window filled and held");
    // At least as many chunks as full ones would take (a pipe read may
    // return less than a full chunk).
    assert!(served.chunks >= 6_291_456u64.div_ceil(49_152), "{served:?}");
    let status = client.wait().expect("the client ends");
    assert_eq!(status.code(), Some(0));
    let (most_files, total) = reader.join().expect("the reader");
    assert_eq!(most_files, 8, "eight chunk files waited while nobody read");
    assert_eq!(total, 6_291_456);
    // Every chunk file was acknowledged and removed; only the result is left.
    let left = names(&f, "results");
    assert_eq!(left.len(), 1, "{left:?}");
}

/// Spec 3.4: while the host command runs, the session's terminal is not
/// read. The client keeps what it cannot print yet and acknowledges it,
/// so a command with far more output than the window and the output's
/// buffer hold completes, and all of it is printed afterwards, in order.
#[test]
fn output_nobody_reads_while_the_command_runs_is_kept_and_printed_after() {
    let f = fixture();
    let sh = f.sh.to_str().expect("UTF-8").to_owned();
    // About 5 MB on standard output, the rest of the window's worth on
    // standard error after it.
    let script = "seq 1 700000; head -c 100000 /dev/zero >&2";
    let mut client = f.client(&[&sh, "-c", script]);
    let mut stdout = client.stdout.take().expect("piped");
    let mut stderr = client.stderr.take().expect("piped");
    // Nobody reads the client's output until the request is served: a
    // client that waited on its output would time out the window.
    let served = f.serve_one(&["-c", script], fast());
    assert_eq!(served.outcome, EscalationOutcome::Completed);
    assert_eq!(served.exit_code, Some(0));
    assert!(served.chunks > 100, "{served:?}");
    let errors = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        stderr.read_to_end(&mut bytes).expect("reads stderr");
        bytes
    });
    let mut text = String::new();
    stdout.read_to_string(&mut text).expect("reads stdout");
    let expected: String = (1..=700_000).map(|n| format!("{n}\n")).collect();
    assert!(text == expected, "stdout differs ({} bytes)", text.len());
    let errors = errors.join().expect("the stderr reader");
    assert_eq!(errors.len(), 100_000);
    assert!(errors.iter().all(|b| *b == 0));
    assert_eq!(client.wait().expect("the client ends").code(), Some(0));
}

#[test]
fn an_interrupted_client_cancels_and_the_host_process_is_reaped() {
    let f = fixture();
    let sh = f.sh.to_str().expect("UTF-8").to_owned();
    // Starts a background child, prints its own PID and the child's, then
    // stays (exec keeps the PID).
    let script = "sleep 61 & echo $$ $!; exec sleep 60";
    let mut client = f.client(&[&sh, "-c", script]);
    let mut stdout = client.stdout.take().expect("piped");
    let pid = std::thread::spawn(move || {
        let (pid, background) = two_pids(&mut stdout);
        let client_pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(i32::try_from(pid).expect("a PID")).expect("a PID"),
            rustix::process::PidfdFlags::empty(),
        );
        ((pid, background), client_pidfd.is_ok())
    });
    let client_pidfd = pidfd_of(&client);
    let interrupter = std::thread::spawn(move || {
        // The host process has printed its PID: interrupt the client.
        let (pid, alive) = pid.join().expect("the PID reader");
        assert!(alive, "the host process was running");
        rustix::process::pidfd_send_signal(client_pidfd.as_fd(), rustix::process::Signal::INT)
            .expect("SIGINT to the client");
        pid
    });
    let served = f.serve_one(&["-c", script], fast());
    assert_eq!(served.outcome, EscalationOutcome::Cancelled);
    let (host_pid, background) = interrupter.join().expect("the interrupter");
    let (code, _, stderr) = finish(client);
    assert_eq!(code, 130, "{stderr}");
    // Reaped: no process of either PID is the host process or its child
    // any more.
    assert!(
        !runs(host_pid, "60"),
        "the host process outlived its cancellation"
    );
    assert!(
        !runs(background, "61"),
        "the host process's child outlived its cancellation"
    );
}

/// Spec 3.8 (Lazaret.tla `CloseSession` "terminates and reaps the
/// session's host process before anything else"): a session's close stops
/// its running host process and what it started, and reaps them, before
/// the close returns; the request takes no step after it and ends
/// `Cancelled`.
#[test]
fn a_session_close_stops_and_reaps_its_host_process_before_it_returns() {
    let f = fixture();
    let sh = f.sh.to_str().expect("UTF-8").to_owned();
    let script = "sleep 71 & echo $$ $!; exec sleep 70";
    let mut client = f.client(&[&sh, "-c", script]);
    let mut stdout = client.stdout.take().expect("piped");
    let running = RunningHostProcesses::default();
    let live = AtomicBool::new(true);
    std::thread::scope(|scope| {
        let server =
            scope.spawn(|| f.serve_one_closable(&["-c", script], fast(), None, &running, &live));
        let (pid, background) = two_pids(&mut stdout);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(runs(pid, "70") && runs(background, "71")) {
            assert!(Instant::now() < deadline, "the host command never ran");
            std::thread::sleep(Duration::from_millis(5));
        }
        f.steps.close_session(|| {
            running
                .close(SESSION, || live.store(false, Ordering::SeqCst))
                .expect("the host process is stopped and reaped");
            assert!(
                !runs(pid, "70"),
                "the host process outlived its session's close"
            );
            assert!(
                !runs(background, "71"),
                "the host process's child outlived its session's close"
            );
        });
        let served = server.join().expect("the server");
        assert_eq!(served.outcome, EscalationOutcome::Cancelled);
        let taken = f.steps.taken();
        assert!(taken.contains(&"StartHostProcess"), "{taken:?}");
        for after in [
            "HostProcessExits",
            "ResumeTerminalForwarding",
            "DeliverResult",
        ] {
            assert!(
                !taken.contains(&after),
                "{after} after the close: {taken:?}"
            );
        }
    });
    let (code, _, stderr) = finish(client);
    assert_eq!(code, 130, "{stderr}");
}

/// The two PIDs a host command prints on its first line of output (its
/// own and its background child's).
fn two_pids(stdout: &mut impl Read) -> (u32, u32) {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while stdout.read(&mut byte).map(|n| n == 1).unwrap_or(false) && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let line = String::from_utf8(line).expect("UTF-8");
    let pids: Vec<u32> = line
        .split_whitespace()
        .map(|p| p.parse().expect("a PID"))
        .collect();
    let [pid, background] = pids[..] else {
        panic!("two PIDs expected: {line:?}");
    };
    (pid, background)
}

/// Whether process `pid` is `sleep SECONDS` (what the tests' host
/// commands leave behind), read from its command line.
fn runs(pid: u32, seconds: &str) -> bool {
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    cmdline == format!("sleep\0{seconds}\0").into_bytes()
}

/// What a host command starts ends with it (spec 3.8, OR-3): a
/// background child, one that left the command's session (`setsid`) and
/// an orphan whose parent exited are all gone once the command completed
/// (the command's own status delivered), though each would run for five
/// more minutes.
#[test]
fn nothing_a_host_command_started_outlives_it() {
    let f = fixture();
    let sh = f.sh.to_str().expect("UTF-8").to_owned();
    let script = "sleep 301 & echo $!; setsid sleep 302 & echo $!; (sleep 303 & echo $!); exit 3";
    let client = f.client(&[&sh, "-c", script]);
    let served = f.serve_one(&["-c", script], fast());
    assert_eq!(served.outcome, EscalationOutcome::Completed);
    assert_eq!(served.exit_code, Some(3));
    let (code, stdout, stderr) = finish(client);
    assert_eq!(code, 3, "{stderr}");
    let pids: Vec<u32> = stdout
        .split_whitespace()
        .map(|p| p.parse().expect("a PID"))
        .collect();
    assert_eq!(pids.len(), 3, "{stdout:?}");
    for (pid, seconds) in pids.iter().zip(["301", "302", "303"]) {
        assert!(
            !runs(*pid, seconds),
            "`sleep {seconds}` (PID {pid}) outlived its host command"
        );
    }
}

#[test]
fn forged_and_linked_request_files_are_refused_without_an_answer() {
    let f = fixture();
    let requests = f.dir.path().join("mailbox/requests");
    let forged = MailboxEntry::Request(lazaret_runtime::records::ids::EscalationRequestId([7; 16]));
    fs::write(requests.join(forged.name()), b"not a signed record").expect("writes");
    let linked = MailboxEntry::Request(lazaret_runtime::records::ids::EscalationRequestId([8; 16]));
    std::os::unix::fs::symlink(
        f.dir.path().join("credentials"),
        requests.join(linked.name()),
    )
    .expect("a symlink");
    let pass = with_service(&f, fast(), |service| {
        service
            .take_requests(&mut RequestLedger::default(), &|_| true, &|_| false)
            .expect("reads")
    });
    assert!(pass.admitted.is_empty());
    assert_eq!(pass.refused.len(), 2, "{:?}", pass.refused);
    assert_eq!(names(&f, "requests"), Vec::<String>::new(), "both removed");
    assert_eq!(
        names(&f, "results"),
        Vec::<String>::new(),
        "nothing authenticated asked, so nothing is answered"
    );
    // The symlink's target is untouched.
    assert!(f.dir.path().join("credentials").exists());
}

#[test]
fn without_a_mailbox_the_client_says_escalation_is_not_enabled() {
    let f = fixture();
    fs::remove_dir_all(f.dir.path().join("mailbox")).expect("removes");
    let (code, _, stderr) = finish(f.client(&["/bin/true"]));
    assert_eq!(code, 125);
    assert!(stderr.contains("not enabled"), "{stderr}");
}

#[test]
fn junk_in_the_mailbox_never_stops_the_next_request() {
    let f = fixture();
    let requests = f.dir.path().join("mailbox/requests");
    // A directory named like a request (it cannot be removed), a name
    // Lazaret never writes, a stale acknowledgement and an old temporary.
    let id = |b: u8| lazaret_runtime::records::ids::EscalationRequestId([b; 16]);
    fs::create_dir(requests.join(MailboxEntry::Request(id(0)).name())).expect("mkdir");
    fs::write(requests.join("junk"), b"x").expect("writes");
    fs::write(requests.join(MailboxEntry::Ack(id(1), 0).name()), b"x").expect("writes");
    fs::write(requests.join(".tmp.old"), b"x").expect("writes");
    // Older than the second a temporary may live here (its age is its
    // ctime, which the writer cannot set back); the client's own
    // temporary is renamed within milliseconds.
    std::thread::sleep(Duration::from_millis(1_200));
    let script = "printf fine";
    let sh = f.sh.to_str().expect("UTF-8").to_owned();
    let client = f.client(&[&sh, "-c", script]);
    let served = f.serve_one(
        &["-c", script],
        Limits {
            temporary: Duration::from_secs(1),
            ..fast()
        },
    );
    assert_eq!(served.outcome, EscalationOutcome::Completed);
    let (code, stdout, stderr) = finish(client);
    assert_eq!((code, stdout.as_str()), (0, "fine"), "{stderr}");
    let left = names(&f, "requests");
    // The junk, the stale acknowledgement and the old temporary are gone;
    // the directory stays (it cannot be unlinked), and so may the served
    // request's last acknowledgement, written after its result (the next
    // pass removes it).
    for gone in [
        "junk".to_owned(),
        ".tmp.old".to_owned(),
        MailboxEntry::Ack(id(1), 0).name(),
    ] {
        assert!(!left.contains(&gone), "{gone} stays: {left:?}");
    }
    assert!(
        left.contains(&MailboxEntry::Request(id(0)).name()),
        "{left:?}"
    );
}

#[test]
fn cancelling_mid_flood_gives_unread_chunks_up_and_exits_130() {
    let f = fixture();
    let sh = f.sh.to_str().expect("UTF-8").to_owned();
    let script = "head -c 6291456 /dev/zero; sleep 60";
    let mut client = f.client_printing_directly(&[&sh, "-c", script]);
    let stdout = client.stdout.take().expect("piped");
    let results = f.dir.path().join("mailbox/results");
    let client_pidfd = pidfd_of(&client);
    // Nobody reads the client's output: once eight chunk files wait, the
    // client is interrupted with chunks it never printed.
    let interrupter = std::thread::spawn(move || {
        assert_eq!(wait_for_eight_chunks(&results), 8);
        rustix::process::pidfd_send_signal(client_pidfd.as_fd(), rustix::process::Signal::INT)
            .expect("SIGINT to the client");
        // Now drain, so the client can reach its result.
        let mut stdout = stdout;
        let mut sink = Vec::new();
        let _ = stdout.read_to_end(&mut sink);
    });
    let served = f.serve_one(&["-c", script], fast());
    assert_eq!(served.outcome, EscalationOutcome::Cancelled);
    interrupter.join().expect("the interrupter");
    let status = client.wait().expect("the client ends");
    assert_eq!(status.code(), Some(130));
    let left = names(&f, "results");
    assert_eq!(left.len(), 1, "only the result stays: {left:?}");
}

#[test]
fn delivered_results_are_swept_after_their_retention() {
    let f = fixture();
    let sh = f.sh.to_str().expect("UTF-8").to_owned();
    let client = f.client(&[&sh, "-c", "true"]);
    f.serve_one(&["-c", "true"], fast());
    assert_eq!(finish(client).0, 0);
    let results = || names(&f, "results").len();
    assert_eq!(results(), 1);
    let kept = with_service(&f, fast(), |s| s.sweep_results(&|_| false).expect("sweeps"));
    assert_eq!((kept, results()), (0, 1), "within its retention it stays");
    let expired = Limits {
        retention: Duration::ZERO,
        ..fast()
    };
    let open = with_service(&f, expired, |s| s.sweep_results(&|_| true).expect("sweeps"));
    assert_eq!((open, results()), (0, 1), "an open request's result stays");
    let swept = with_service(&f, expired, |s| {
        s.sweep_results(&|_| false).expect("sweeps")
    });
    assert_eq!((swept, results()), (1, 0));
}

/// What a played terminal saw: the prompt, how the service withdrew it
/// while it was open, and what the request wanted of the terminal, in
/// order.
type Played = (EscalationPrompt, Option<PromptClosing>, Vec<TerminalUse>);

/// Plays the session's terminal loop for one prompt until `done`: applies
/// what the request wants of the terminal, takes the prompt, and answers
/// `answer` signed by `key` (through `check_decision`, as the loop does),
/// or, without an answer, waits until the service withdraws it.
fn terminal(
    desk: &Arc<PromptDesk>,
    key: SigningKey,
    answer: Option<DeveloperDecisionKind>,
    done: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<Played> {
    let (line, asks) = desk.register(SESSION, Arc::new(|| {}));
    let holds = apply_holds(&line, done);
    std::thread::spawn(move || {
        let _line = line;
        let ask = asks
            .recv_timeout(Duration::from_secs(30))
            .expect("a prompt reaches the session's terminal");
        let Some(kind) = answer else {
            let deadline = Instant::now() + Duration::from_secs(30);
            while ask.withdrawn().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            let withdrawn = ask.withdrawn();
            return (ask.prompt.clone(), withdrawn, holds.join().expect("holds"));
        };
        let decision = DeveloperDecision {
            protocol_version: lazaret_runtime::protocol::PROTOCOL_VERSION,
            session_binding: ask.expect.open.session_binding.clone(),
            request_id: ask.prompt.request_id,
            request_sha256: ask.prompt.request_sha256,
            decision: kind,
            approved_command_argv: match kind {
                DeveloperDecisionKind::Approve => ask.prompt.command_argv.clone(),
                DeveloperDecisionKind::Deny => Vec::new(),
            },
        };
        let payload_bytes = decision.encode().expect("encodes");
        let signature = sign_payload(&key, DeveloperDecision::NAME, &payload_bytes);
        let record = SignedProtocolRecord::DeveloperDecision(SignedPayload {
            payload_bytes,
            signature,
        });
        // Withdrawn before the answer? Then the withdrawal is how the
        // prompt closed, and the answer is dropped.
        let withdrawn = ask
            .answer(match check_decision(&record, &ask.expect) {
                Ok(d) => PromptAnswer::Decided(Box::new(d)),
                Err(e) => PromptAnswer::Refused(e),
            })
            .err();
        (ask.prompt.clone(), withdrawn, holds.join().expect("holds"))
    })
}

/// Spec 3.4: held from before the prompt until the route is the
/// sandbox's again.
const PROMPTED: [TerminalUse; 2] = [TerminalUse::Held, TerminalUse::Forwarding];

/// A request no rule matches, which writes `marker` and exits 4.
fn marked_request(f: &Fixture) -> (Vec<String>, PathBuf) {
    let sh = f.sh.to_str().expect("UTF-8").to_owned();
    let marker = f.dir.path().join("ran");
    let script = format!("printf approved; echo > {}; exit 4", marker.display());
    (vec![sh, "-c".into(), script], marker)
}

fn strs(argv: &[String]) -> Vec<&str> {
    argv.iter().map(String::as_str).collect()
}

#[test]
fn an_inexact_request_runs_once_its_session_approves_on_its_prompt() {
    let f = fixture();
    let (argv, marker) = marked_request(&f);
    let desk = Arc::new(PromptDesk::new("agent".into()));
    let done = Arc::new(AtomicBool::new(false));
    let term = terminal(
        &desk,
        session_anchor(),
        Some(DeveloperDecisionKind::Approve),
        &done,
    );
    let client = f.client(&strs(&argv));
    let served = f.serve_one_prompting(&["-c", "true"], fast(), Some(&desk));
    done.store(true, Ordering::SeqCst);
    let (prompt, withdrawn, holds) = term.join().expect("the terminal");
    // Spec 3.4: the terminal stops forwarding before the prompt, is the
    // host process's while it runs, and forwards once it ended.
    assert_eq!(
        holds,
        [
            TerminalUse::Held,
            TerminalUse::HostProcess,
            TerminalUse::Held,
            TerminalUse::Forwarding
        ]
    );
    // DX-4: the prompt names the profile, the session, the exact vector
    // and the justification.
    assert_eq!(prompt.profile, "agent");
    assert_eq!(prompt.session_id, SESSION);
    assert_eq!(prompt.command_argv, argv);
    assert_eq!(prompt.justification, "the test asks");
    assert_eq!(withdrawn, None);
    assert_eq!(served.outcome, EscalationOutcome::Completed);
    assert_eq!(served.exit_code, Some(4));
    let (code, stdout, stderr) = finish(client);
    assert_eq!((code, stdout.as_str()), (4, "approved"), "{stderr}");
    assert!(marker.exists(), "the approved command ran");
}

/// A terminal loop busy for longer than a moment delays the request; it
/// never takes it out of the model (the session can ask again at once).
#[test]
fn a_busy_terminal_delays_a_request_and_the_next_one_still_runs() {
    let f = fixture();
    let sh = f.sh.to_str().expect("UTF-8").to_owned();
    let desk = Arc::new(PromptDesk::new("agent".into()));
    let (line, _asks) = desk.register(SESSION, Arc::new(|| {}));
    let done = Arc::new(AtomicBool::new(false));
    let holds = apply_holds_after(&line, &done, Duration::from_millis(2500));
    for _ in 0..2 {
        let client = f.client(&[&sh, "-c", "echo held"]);
        let served = f.serve_one_prompting(&["-c", "echo held"], fast(), Some(&desk));
        assert_eq!(served.outcome, EscalationOutcome::Completed);
        let (code, stdout, stderr) = finish(client);
        assert_eq!((code, stdout.as_str()), (0, "held\n"), "{stderr}");
    }
    done.store(true, Ordering::SeqCst);
    // Spec 3.4: held, the host process's route, held, forwarding; twice.
    let once = [
        TerminalUse::Held,
        TerminalUse::HostProcess,
        TerminalUse::Held,
        TerminalUse::Forwarding,
    ];
    assert_eq!(holds.join().expect("holds"), [once, once].concat());
}

/// An approved vector whose executable cannot run fails without running
/// anything, by the model's way to a result: the session is at rest and
/// its terminal forwards again.
#[test]
fn an_approved_command_that_cannot_run_fails_and_leaves_the_terminal_forwarding() {
    let f = fixture();
    let missing = f.dir.path().join("missing-tool");
    let argv = [missing.to_str().expect("UTF-8").to_owned()];
    let desk = Arc::new(PromptDesk::new("agent".into()));
    let done = Arc::new(AtomicBool::new(false));
    let term = terminal(
        &desk,
        session_anchor(),
        Some(DeveloperDecisionKind::Approve),
        &done,
    );
    let client = f.client(&strs(&argv));
    let served = f.serve_one_prompting(&["-c", "true"], fast(), Some(&desk));
    done.store(true, Ordering::SeqCst);
    let (_, _, holds) = term.join().expect("the terminal");
    assert_eq!(served.outcome, EscalationOutcome::Failed);
    assert_eq!(holds.last(), Some(&TerminalUse::Forwarding), "{holds:?}");
    assert_eq!(finish(client).0, 125);
    // Nothing started, and the model says so.
    assert_eq!(
        f.steps.taken(),
        [
            "SubmitEscalation",
            "AcceptEscalation",
            "PauseTerminalForwarding",
            "RouteToPrompt",
            "ApproveEscalation",
            "HostProcessStartFails",
            "ResumeTerminalForwarding",
            "DeliverResult",
            "CollectResult",
        ]
    );
}

#[test]
fn a_denial_or_a_decision_not_signed_by_the_session_never_runs_the_command() {
    let f = fixture();
    let (argv, marker) = marked_request(&f);
    let desk = Arc::new(PromptDesk::new("agent".into()));
    // Denied by the developer.
    let done = Arc::new(AtomicBool::new(false));
    let term = terminal(
        &desk,
        session_anchor(),
        Some(DeveloperDecisionKind::Deny),
        &done,
    );
    let client = f.client(&strs(&argv));
    let served = f.serve_one_prompting(&["-c", "true"], fast(), Some(&desk));
    done.store(true, Ordering::SeqCst);
    assert_eq!(term.join().expect("the terminal").2, PROMPTED);
    assert_eq!(served.outcome, EscalationOutcome::Denied);
    let (code, _, stderr) = finish(client);
    assert_eq!(code, 126, "{stderr}");
    // An approval signed by any other key (another session's anchor, the
    // sandbox) is not the developer's: denied.
    let other = SigningKey::from_bytes(&[7; 32]);
    let done = Arc::new(AtomicBool::new(false));
    let term = terminal(&desk, other, Some(DeveloperDecisionKind::Approve), &done);
    let client = f.client(&strs(&argv));
    let served = f.serve_one_prompting(&["-c", "true"], fast(), Some(&desk));
    done.store(true, Ordering::SeqCst);
    assert_eq!(term.join().expect("the terminal").2, PROMPTED);
    assert_eq!(served.outcome, EscalationOutcome::Denied);
    assert_eq!(finish(client).0, 126);
    assert!(!marker.exists(), "a command ran without an approval");
}

#[test]
fn an_unanswered_prompt_times_out_and_is_withdrawn_from_the_terminal() {
    let f = fixture();
    let (argv, marker) = marked_request(&f);
    let desk = Arc::new(PromptDesk::new("agent".into()));
    let done = Arc::new(AtomicBool::new(false));
    let term = terminal(&desk, session_anchor(), None, &done);
    let client = f.client(&strs(&argv));
    let limits = Limits {
        prompt: Duration::from_millis(300),
        ..fast()
    };
    let served = f.serve_one_prompting(&["-c", "true"], limits, Some(&desk));
    done.store(true, Ordering::SeqCst);
    let (_, withdrawn, holds) = term.join().expect("the terminal");
    assert_eq!(holds, PROMPTED);
    assert_eq!(served.outcome, EscalationOutcome::TimedOut);
    assert_eq!(withdrawn, Some(PromptClosing::TimedOut));
    let (code, _, stderr) = finish(client);
    assert_eq!(code, 124, "{stderr}");
    assert!(!marker.exists());
}

#[test]
fn a_session_without_a_terminal_is_denied_without_a_prompt() {
    let f = fixture();
    let (argv, marker) = marked_request(&f);
    // A desk on which this session's terminal never registered (a piped
    // session has none).
    let desk = PromptDesk::new("agent".into());
    let client = f.client(&strs(&argv));
    let served = f.serve_one_prompting(&["-c", "true"], fast(), Some(&desk));
    assert_eq!(served.outcome, EscalationOutcome::Denied);
    assert_eq!(finish(client).0, 126);
    assert!(!marker.exists());
    // Refused, never routed to a prompt the model would have shown.
    assert!(
        f.steps.taken().contains(&"RefuseEscalation")
            && !f.steps.taken().contains(&"RouteToPrompt"),
        "{:?}",
        f.steps.taken()
    );
}

#[test]
fn a_cancelled_request_withdraws_its_prompt() {
    let f = fixture();
    let (argv, marker) = marked_request(&f);
    let desk = Arc::new(PromptDesk::new("agent".into()));
    let (line, asks) = desk.register(SESSION, Arc::new(|| {}));
    let done = Arc::new(AtomicBool::new(false));
    let holds = apply_holds(&line, &done);
    let client = f.client(&strs(&argv));
    let client_pidfd = pidfd_of(&client);
    // The terminal takes the prompt; then the asking process is
    // interrupted, which cancels its request.
    // The line stays registered for the whole request, as a running
    // session's does.
    let term = std::thread::spawn(move || {
        let ask = asks
            .recv_timeout(Duration::from_secs(30))
            .expect("a prompt reaches the session's terminal");
        rustix::process::pidfd_send_signal(client_pidfd.as_fd(), rustix::process::Signal::INT)
            .expect("SIGINT to the client");
        let deadline = Instant::now() + Duration::from_secs(30);
        while ask.withdrawn().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        ask.withdrawn()
    });
    let served = f.serve_one_prompting(&["-c", "true"], fast(), Some(&desk));
    done.store(true, Ordering::SeqCst);
    assert_eq!(served.outcome, EscalationOutcome::Cancelled);
    assert_eq!(
        term.join().expect("the terminal"),
        Some(PromptClosing::Withdrawn)
    );
    assert_eq!(holds.join().expect("holds"), PROMPTED);
    drop(line);
    assert_eq!(finish(client).0, 130);
    assert!(!marker.exists());
}

#[test]
fn a_request_too_large_to_show_whole_is_denied_unprompted() {
    let f = fixture();
    let sh = f.sh.to_str().expect("UTF-8").to_owned();
    let marker = f.dir.path().join("ran");
    let script = format!("echo > {}", marker.display());
    // One argument longer than a prompt shows: the developer would approve
    // what they did not see.
    let long = format!("{script}; : {}", "x".repeat(600));
    let desk = Arc::new(PromptDesk::new("agent".into()));
    let (line, asks) = desk.register(SESSION, Arc::new(|| {}));
    let done = Arc::new(AtomicBool::new(false));
    let holds = apply_holds(&line, &done);
    let client = f.client(&[&sh, "-c", &long]);
    let served = f.serve_one_prompting(&["-c", "true"], fast(), Some(&desk));
    done.store(true, Ordering::SeqCst);
    // Refused where it is (`RefuseEscalation`): the terminal kept
    // forwarding the whole time.
    assert_eq!(holds.join().expect("holds"), []);
    assert_eq!(served.outcome, EscalationOutcome::Denied);
    assert!(asks.try_recv().is_err(), "no prompt was shown");
    assert_eq!(
        f.steps.taken(),
        [
            "SubmitEscalation",
            "AcceptEscalation",
            "RefuseEscalation",
            "DeliverResult",
            "CollectResult",
        ]
    );
    assert_eq!(finish(client).0, 126);
    assert!(!marker.exists());
}
