//! The Agent Sandbox's credentials (spec 3.3 "Protocol cryptography
//! refinement"), end to end with real runsc, as the unprivileged test user:
//! the credential bundle is mounted read-only at the fixed credential path,
//! its host source is gone once the sandbox runs, and no private key but
//! the sandbox's own is anywhere in the sandbox's view.
//!
//! The processes of a crash-point build disclose the seeds they draw
//! (`LAZARET_SECRETS_LOG`, effects/src/crash_point.rs); the sandbox is
//! scanned for each, masked in the scanner's argv so the secrets never
//! enter the sandbox through the test itself. The sandbox key, which must
//! be at the credential path, is the scan's positive control.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod support;
use lazaret_runtime::bundle::CREDENTIALS;
use lazaret_runtime::protocol::records::{
    ProtocolCredentialRole, ProtocolRecord, SandboxCredentialBundle,
};
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

    // Read-only for the sandbox, whose sessions may override file modes
    // (CAP_DAC_OVERRIDE): the mount refuses, not the mode.
    let out = run(&["default", "--", "/bin/probe", "write", CREDENTIALS]);
    assert!(
        text(&out.stdout).starts_with("refused Read-only file system"),
        "the credential mount is not read-only: {}",
        text(&out.stdout)
    );

    // Every disclosed seed so far: the generation's five, and one Session
    // Anchor and one TLS client key per CLI (the keeper's and the two
    // probes').
    let secrets = disclosed(&log);
    for per_cli in ["session-anchor", "client-tls"] {
        let count = secrets.iter().filter(|(l, _)| l == per_cli).count();
        assert_eq!(count, 3, "{per_cli}: {secrets:?}");
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
