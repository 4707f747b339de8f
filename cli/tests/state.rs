//! `lazaret state` (issue 5 deliverable 5; spec 3.9 read-only part, FR-17,
//! DX-6): reads a Domain Store as the lock holder, in text and JSON; refuses
//! while a Host Coordinator holds the lock; creates nothing for a Domain
//! that never ran.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_effects::domain_lock::DomainLock;
use lazaret_effects::domain_root::DomainRootLayout;
use lazaret_effects::domain_store::{DomainStore, StoreOp};
use lazaret_effects::process_identity::real::RealProcessSys;
use lazaret_effects::process_identity::ProcessSys;
use lazaret_runtime::ownership::terminal::TerminalOp;
use lazaret_runtime::records::domain::{Domain, Generation, Session};
use lazaret_runtime::records::ids::*;
use lazaret_runtime::records::participant::ParticipantRole;
use lazaret_runtime::records::terminal::{GuestProcessIdentity, PtyIdentity, TerminalSnapshot};
use std::path::Path;
use std::process::{Command, Output};

const GEN: GenerationId = GenerationId(4);
const SESSION: SessionId = SessionId([0xab; 16]);

fn seed(root: &Path) {
    let layout = DomainRootLayout::new(root);
    let lock = DomainLock::try_acquire(&layout.lock_path()).unwrap();
    let boot = RealProcessSys.boot_id().unwrap();
    let store = DomainStore::create(&lock, &layout.store_path(), boot).unwrap();
    store
        .apply(&[
            StoreOp::PutDomain(Domain {
                domain_id: DomainId([0x11; 32]),
                profile_name: ProfileName::new("default").unwrap(),
                canonical_workspace: HostPath::new("/home/dev/project").unwrap(),
            }),
            StoreOp::InsertGeneration(Generation {
                domain_id: DomainId([0x11; 32]),
                generation_id: GEN,
                configuration_fingerprint: ConfigurationFingerprint([0x22; 32]),
                coordinator_id: CoordinatorId([0x33; 16]),
                network_sidecar_id: NetworkSidecarId([0x44; 16]),
                sandbox_id: SandboxId([0x55; 16]),
                durable_decision: ModelValue::new("Published").unwrap(),
            }),
            StoreOp::InsertParticipantIntent {
                generation: GEN,
                role: ParticipantRole::Sandbox,
            },
            StoreOp::InsertSession(Session {
                generation_id: GEN,
                session_id: SESSION,
                cli_id: CliId([0x66; 16]),
                session_anchor_id: SessionAnchorId([0x77; 32]),
                session_phase: ModelValue::new("Registered").unwrap(),
            }),
            StoreOp::InsertTerminalIntent {
                generation: GEN,
                session: SESSION,
            },
            StoreOp::Terminal {
                generation: GEN,
                session: SESSION,
                op: TerminalOp::Acquire(TerminalSnapshot {
                    container_id: Some(ContainerId::new("lzr-gen4").unwrap()),
                    pty_master: Some(PtyIdentity {
                        master_fd: 12,
                        device: 0x1d,
                        inode: 9,
                    }),
                    guest_process: Some(GuestProcessIdentity {
                        leader_pid: 2,
                        leader_start_time: 1635,
                        process_group_id: 2,
                    }),
                    ..TerminalSnapshot::default()
                }),
            },
        ])
        .unwrap();
}

fn state(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lazaret"))
        .arg("state")
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn human_output_shows_generation_participants_sessions_and_terminals() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let out = state(&["--domain-root", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for needle in [
        "profile     default",
        "workspace   /home/dev/project",
        &format!("Domain      {}", "11".repeat(32)),
        "generation 4  decision Published",
        "Sandbox        Intent  (bare intent)",
        &format!("session {}  phase Registered", "ab".repeat(16)),
        "Intent  container lzr-gen4",
        "host coordinator Unassigned",
        "pty              master fd 12, devpts 29:9",
        "guest            leader 2 start 1635 group 2",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in\n{stdout}");
    }
}

#[test]
fn json_output_is_machine_readable() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let out = state(&["--domain-root", dir.path().to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["domain"]["profile"], "default");
    assert_eq!(v["domain"]["domain_id"], "11".repeat(32));
    let g = &v["generations"][0];
    assert_eq!(g["generation_id"], 4);
    assert_eq!(g["durable_decision"], "Published");
    assert_eq!(g["participants"][0]["role"], "Sandbox");
    assert_eq!(g["participants"][0]["ownership"], serde_json::Value::Null);
    assert_eq!(g["sessions"][0]["session_phase"], "Registered");
    let t = &g["terminals"][0];
    assert_eq!(t["state"], "Intent");
    assert_eq!(t["container_id"], "lzr-gen4");
    assert_eq!(t["exec_client"]["phase"], "Unassigned");
    assert_eq!(t["guest_process"]["leader_start_time"], 1635);
    assert_eq!(t["pty_master"]["master_fd"], 12);
}

#[test]
fn a_held_domain_lock_refuses_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let _held = DomainLock::try_acquire(&DomainRootLayout::new(dir.path()).lock_path()).unwrap();
    let out = state(&["--domain-root", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("held by a running Host Coordinator") && stderr.contains("IPC"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_domain_that_never_ran_is_reported_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let out = state(&["--domain-root", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("never been started"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing created"
    );
    let missing = dir.path().join("absent");
    let out = state(&["--domain-root", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains(missing.to_str().unwrap()));
}

#[test]
fn profile_and_workspace_must_match_the_domain_record() {
    let dir = tempfile::tempdir().unwrap();
    seed(dir.path());
    let root = dir.path().to_str().unwrap();
    let out = state(&["--domain-root", root, "--profile", "other"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("belongs to profile \"default\", not \"other\""));
    let out = state(&[
        "--domain-root",
        root,
        "--profile",
        "default",
        "--workspace",
        "/tmp",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("belongs to workspace /home/dev/project, not /tmp"));
    let out = state(&["--domain-root", root, "--profile", "default"]);
    assert!(out.status.success());
}

#[test]
fn help_says_where_the_domain_root_comes_from() {
    let out = state(&["--help"]);
    let help = text(&out.stdout);
    assert!(
        help.contains("--domain-root <DIR>") && help.contains("configuration loader"),
        "{help}"
    );
}
