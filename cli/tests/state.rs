//! `lazaret state` (spec 3.2, 3.6, 3.9 read-only
//! part, FR-7, FR-17, DX-6), on real store files as the invoking user:
//! locating the Domain from profile and workspace as a launch does, a
//! missing Domain, a live Domain (the flock held by this test), recovery
//! evidence for staged process slots whose real process is gone or alive,
//! and clear refusals of bad arguments. `--domain-root` still reads a
//! Domain Root directly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_effects::coordinator::paths::ShortSocketPath;
use lazaret_effects::domain_lock::DomainLock;
use lazaret_effects::domain_root::DomainRootLayout;
use lazaret_effects::domain_store::{DomainStore, SlotTarget, StoreOp};
use lazaret_effects::process_identity::real::RealProcessSys;
use lazaret_effects::process_identity::{identity_of, ProcessSys};
use lazaret_runtime::ownership::terminal::TerminalOp;
use lazaret_runtime::records::domain::{Domain, Generation, Session};
use lazaret_runtime::records::ids::*;
use lazaret_runtime::records::participant::ParticipantRole;
use lazaret_runtime::records::process::{
    BootId, HostPid, HostProcessOwnershipSlot, PidfsProcessIdentityV1,
};
use lazaret_runtime::records::terminal::{GuestProcessIdentity, PtyIdentity, TerminalSnapshot};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const GEN: GenerationId = GenerationId(4);
const SESSION: SessionId = SessionId([0xab; 16]);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn generation(domain: DomainId, id: GenerationId) -> Generation {
    Generation {
        domain_id: domain,
        generation_id: id,
        configuration_fingerprint: ConfigurationFingerprint([0x22; 32]),
        coordinator_id: CoordinatorId([0x33; 16]),
        network_sidecar_id: NetworkSidecarId([0x44; 16]),
        sandbox_id: SandboxId([0x55; 16]),
        durable_decision: ModelValue::new("Published").unwrap(),
    }
}

/// A store with one generation: a bare Sandbox intent, a session and a
/// terminal with container, PTY and guest recorded.
fn seed_store(root: &Path, record: Domain) {
    let layout = DomainRootLayout::new(root);
    let lock = DomainLock::try_acquire(&layout.lock_path()).unwrap();
    let boot = RealProcessSys.boot_id().unwrap();
    let store = DomainStore::create(&lock, &layout.store_path(), boot).unwrap();
    let domain = record.domain_id;
    store
        .apply(&[
            StoreOp::PutDomain(record),
            StoreOp::InsertGeneration(generation(domain, GEN)),
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

fn default_record() -> Domain {
    Domain {
        domain_id: DomainId([0x11; 32]),
        profile_name: ProfileName::new("default").unwrap(),
        canonical_workspace: HostPath::new("/home/dev/project").unwrap(),
    }
}

fn state(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lazaret"))
        .arg("state")
        .args(args)
        .output()
        .unwrap()
}

/// A HOME with a configuration, an XDG_RUNTIME_DIR and a workspace; the
/// Domain paths are computed here from spec 3.2, not by the code under test.
struct Host {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Host {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("home/.config/lazaret")).unwrap();
        std::fs::create_dir_all(root.join("ws")).unwrap();
        std::fs::create_dir(root.join("run")).unwrap();
        std::fs::set_permissions(root.join("run"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let config = root.join("home/.config/lazaret/config.toml");
        std::fs::write(
            &config,
            "schema = \"lazaret-trusted-host-config-v1\"\n[profiles.dev]\nimage = \"oci:/x/layout:t\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
        Self { _dir: dir, root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn config(&self) -> PathBuf {
        self.path("home/.config/lazaret/config.toml")
    }

    /// SHA-256 of the v1 context, then profile and workspace each framed
    /// by a u32 big-endian length (spec 3.2).
    fn domain_id(&self, profile: &str) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"lazaret-domain-id-v1\0");
        let ws = self.path("ws");
        for part in [profile.as_bytes(), ws.as_os_str().as_encoded_bytes()] {
            h.update(u32::try_from(part.len()).unwrap().to_be_bytes());
            h.update(part);
        }
        h.finalize().into()
    }

    fn storage_root(&self, profile: &str) -> PathBuf {
        self.path("home/.local/share/lazaret/domains")
            .join(hex::encode(self.domain_id(profile)))
    }

    fn runtime_root(&self, profile: &str) -> PathBuf {
        self.path("run/lazaret/domains")
            .join(hex::encode(self.domain_id(profile)))
    }

    fn record(&self, profile: &str) -> Domain {
        Domain {
            domain_id: DomainId(self.domain_id(profile)),
            profile_name: ProfileName::new(profile).unwrap(),
            canonical_workspace: HostPath::new(
                self.path("ws").as_os_str().as_encoded_bytes().to_vec(),
            )
            .unwrap(),
        }
    }

    /// The Domain a launch of `dev` in `ws` would have written.
    fn seed(&self) -> PathBuf {
        let root = self.storage_root("dev");
        std::fs::create_dir_all(&root).unwrap();
        seed_store(&root, self.record("dev"));
        root
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_lazaret"));
        c.env_clear()
            .env("HOME", self.path("home"))
            .env("XDG_RUNTIME_DIR", self.path("run"))
            .env("PATH", "/usr/bin:/bin")
            .arg("state")
            .args(args)
            .current_dir(self.path("ws"));
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn json(&self, args: &[&str]) -> (Option<i32>, Value) {
        let mut all = args.to_vec();
        all.push("--json");
        let out = self.run(&all);
        let v = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", text(&out.stdout), text(&out.stderr)));
        (out.status.code(), v)
    }
}

#[test]
fn locates_the_domain_from_profile_and_workspace_as_a_launch_does() {
    let h = Host::new();
    let root = h.seed();
    let id = hex::encode(h.domain_id("dev"));
    // From the workspace itself, and from elsewhere through --workspace
    // given as a symlink (the canonical workspace decides).
    std::os::unix::fs::symlink(h.path("ws"), h.path("ws-link")).unwrap();
    let link = h.path("ws-link");
    for args in [
        vec!["dev"],
        vec!["dev", "--workspace", link.to_str().unwrap()],
    ] {
        let out = h.run(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        for needle in [
            format!("Domain      {id}"),
            "profile     dev".to_owned(),
            format!("workspace   {}", h.path("ws").display()),
            format!("config      {}", h.config().display()),
            format!("Domain Root {}", root.display()),
            format!("runtime     {}", h.runtime_root("dev").display()),
            "status      inactive".to_owned(),
            "generation 4  decision Published".to_owned(),
            "Sandbox        Intent  (bare intent)".to_owned(),
        ] {
            assert!(stdout.contains(&needle), "missing {needle:?} in\n{stdout}");
        }
    }
    let (code, v) = h.json(&["dev"]);
    assert_eq!(code, Some(0));
    assert_eq!(v["status"], "inactive");
    assert_eq!(v["located"]["domain_id"], id);
    assert_eq!(v["located"]["profile"], "dev");
    assert_eq!(v["located"]["config"], h.config().to_str().unwrap());
    assert_eq!(v["domain_root"], root.to_str().unwrap());
    assert_eq!(v["store"], root.join("domain.redb").to_str().unwrap());
    assert_eq!(
        v["runtime"]["socket"],
        h.runtime_root("dev").join("hc.sock").to_str().unwrap()
    );
    assert_eq!(v["domain"]["domain_id"], id);
    assert_eq!(v["generations"][0]["clean"], false);
    // Reading created nothing on the runtime side.
    assert!(!h.path("run/lazaret").exists());
}

#[test]
fn a_missing_domain_names_the_path_it_looked_at_and_creates_nothing() {
    let h = Host::new();
    let store = h.storage_root("dev").join("domain.redb");
    let out = h.run(&["dev"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "no Domain for profile dev in workspace {}: there is no Domain Store at {}",
            h.path("ws").display(),
            store.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("nothing was created; `lazaret dev --workspace"),
        "{stdout}"
    );
    let (code, v) = h.json(&["dev"]);
    assert_eq!(code, Some(4));
    assert_eq!(v["status"], "absent");
    assert_eq!(v["store"], store.to_str().unwrap());
    assert!(
        !h.path("home/.local").exists(),
        "a storage root was created"
    );
    assert!(
        !h.path("run/lazaret").exists(),
        "a runtime root was created"
    );
}

/// Waits for `child` for at most `limit`: `lazaret state` must not block
/// on a held Domain lock.
fn output_within(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "lazaret state blocked on a live Domain"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_live_domain_is_reported_with_its_runtime_directory_without_blocking() {
    let h = Host::new();
    let root = h.seed();
    let runtime = h.runtime_root("dev");
    std::fs::create_dir_all(runtime.join("gen-4")).unwrap();
    std::fs::create_dir_all(runtime.join("gen-10")).unwrap();
    let socket = runtime.join("hc.sock");
    let short = ShortSocketPath::new(&socket).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(short.path()).unwrap();
    let _held = DomainLock::try_acquire(&root.join("domain.lock")).unwrap();
    let me = std::process::id();

    let started = Instant::now();
    let child = h
        .command(&["dev"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = output_within(child, Duration::from_secs(20));
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for needle in [
        format!(
            "status      live: a Host Coordinator holds the Domain lock {} (PID {me})",
            root.join("domain.lock").display()
        ),
        format!("runtime     {}", runtime.display()),
        format!("socket      {} (present)", socket.display()),
        "generation directories  gen-4 gen-10".to_owned(),
        "cannot ask it yet".to_owned(),
        "then run `lazaret state dev --workspace".to_owned(),
        format!("`ps -o pid,lstart,args -p {me}`"),
    ] {
        assert!(stdout.contains(&needle), "missing {needle:?} in\n{stdout}");
    }
    eprintln!("lazaret state on a live Domain returned in {took:?}");

    let (code, v) = h.json(&["dev"]);
    assert_eq!(code, Some(3));
    assert_eq!(v["status"], "live");
    assert_eq!(v["live"]["lock_holder_pids"], serde_json::json!([me]));
    assert_eq!(v["live"]["socket_present"], true);
    assert_eq!(
        v["live"]["generation_dirs"],
        serde_json::json!(["gen-4", "gen-10"])
    );
    assert_eq!(v["domain"], Value::Null);
    assert!(v["advice"][0].as_str().unwrap().contains("FR-17"));
}

/// A real child whose identity is recorded; it lives until its stdin closes.
struct Sleeper {
    child: Child,
}

impl Sleeper {
    fn spawn() -> Self {
        let child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        Self { child }
    }

    fn identity(&self) -> PidfsProcessIdentityV1 {
        let pidfd = RealProcessSys.pidfd_open(HostPid(self.child.id())).unwrap();
        identity_of(&RealProcessSys, &pidfd).unwrap()
    }

    /// Ends the child by closing its input (no signal) and reaps it.
    fn finish(mut self) {
        drop(self.child.stdin.take());
        self.child.wait().unwrap();
    }
}

fn stage(store: &DomainStore<'_>, generation: GenerationId, identity: PidfsProcessIdentityV1) {
    store
        .apply(&[
            StoreOp::InsertParticipantIntent {
                generation,
                role: ParticipantRole::Sandbox,
            },
            StoreOp::StageProcess {
                target: SlotTarget::Participant {
                    generation,
                    slot: HostProcessOwnershipSlot::SandboxRuntimeSupervisor,
                },
                identity,
            },
        ])
        .unwrap();
}

#[test]
fn staged_slots_show_their_identity_and_whether_the_real_process_is_alive() {
    let h = Host::new();
    let root = h.storage_root("dev");
    std::fs::create_dir_all(&root).unwrap();
    let record = h.record("dev");
    let domain = record.domain_id;
    let gone = Sleeper::spawn();
    let gone_identity = gone.identity();
    gone.finish();
    let alive = Sleeper::spawn();
    let alive_identity = alive.identity();
    let (g_gone, g_alive, g_old_boot) = (GenerationId(1), GenerationId(2), GenerationId(3));
    // A slot staged in an earlier boot: the store only accepts
    // current-boot identities, so that boot is made current for it.
    let earlier = BootId([0x0b; 16]);
    let mut old = alive_identity;
    old.authority.boot_id = earlier;
    {
        let layout = DomainRootLayout::new(&root);
        let lock = DomainLock::try_acquire(&layout.lock_path()).unwrap();
        let boot = RealProcessSys.boot_id().unwrap();
        {
            let store = DomainStore::create(&lock, &layout.store_path(), boot).unwrap();
            store
                .apply(&[
                    StoreOp::PutDomain(record),
                    StoreOp::InsertGeneration(generation(domain, g_gone)),
                    StoreOp::InsertGeneration(generation(domain, g_alive)),
                    StoreOp::InsertGeneration(generation(domain, g_old_boot)),
                ])
                .unwrap();
            stage(&store, g_gone, gone_identity);
            stage(&store, g_alive, alive_identity);
        }
        let store = DomainStore::open(&lock, &layout.store_path(), earlier).unwrap();
        stage(&store, g_old_boot, old);
    }

    let out = h.run(&["dev"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let describe = |id: &PidfsProcessIdentityV1| {
        format!(
            "SandboxRuntimeSupervisor Staged pid {} start {} (boot {}, pidfs {}:{})",
            id.host_pid.0,
            id.start_time_ticks,
            id.authority.boot_id,
            id.authority.pidfs_st_dev.0,
            id.authority.pidfs_st_ino.0
        )
    };
    let pid = alive_identity.host_pid.0;
    for needle in [
        format!("{}  -> gone", describe(&gone_identity)),
        format!(
            "{}  -> running (exact pidfs match)",
            describe(&alive_identity)
        ),
        format!("{}  -> gone: recorded boot", describe(&old)),
        "what to do: no recorded process of generation 1 is running: run `lazaret dev --workspace"
            .to_owned(),
        format!(
            "what to do: PID {pid} (SandboxRuntimeSupervisor) of generation 2 is still running"
        ),
        format!("`ps -o pid,lstart,args -p {pid}`"),
        "what to do: no recorded process of generation 3 is running".to_owned(),
    ] {
        assert!(stdout.contains(&needle), "missing {needle:?} in\n{stdout}");
    }

    let (code, v) = h.json(&["dev"]);
    assert_eq!(code, Some(0));
    // Every Sandbox slot is listed; the runtime supervisor's is the staged one.
    let slot = |g: usize| {
        let slots = v["generations"][g]["process_slots"].as_array().unwrap();
        let names: Vec<&str> = slots.iter().map(|s| s["slot"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "SandboxHostCoordinator",
                "SandboxRuntimeSupervisor",
                "SandboxAttachedRunsc"
            ]
        );
        assert_eq!(slots[0]["phase"], "Unassigned");
        assert_eq!(slots[0]["live"], Value::Null);
        &slots[1]
    };
    for (g, identity, status) in [
        (0, gone_identity, "gone"),
        (1, alive_identity, "running"),
        (2, old, "gone"),
    ] {
        let s = slot(g);
        assert_eq!(s["slot"], "SandboxRuntimeSupervisor");
        assert_eq!(s["participant"], "Sandbox");
        assert_eq!(s["phase"], "Staged");
        assert_eq!(s["host_pid"], identity.host_pid.0);
        assert_eq!(s["start_time_ticks"], identity.start_time_ticks);
        assert_eq!(s["boot_id"], identity.authority.boot_id.to_string());
        assert_eq!(s["pidfs_st_dev"], identity.authority.pidfs_st_dev.0);
        assert_eq!(s["pidfs_st_ino"], identity.authority.pidfs_st_ino.0);
        assert_eq!(s["live"]["status"], status, "{s}");
    }
    assert_eq!(slot(1)["live"]["reason"], Value::Null);
    assert!(slot(2)["live"]["reason"]
        .as_str()
        .unwrap()
        .contains("is not the current boot"));
    assert_eq!(v["advice"].as_array().unwrap().len(), 3);
    assert!(v["generations"][1]["advice"]
        .as_str()
        .unwrap()
        .contains("still running"));
    // Looking was read-only: the recorded live process is untouched.
    let mut alive = alive;
    assert!(
        alive.child.try_wait().unwrap().is_none(),
        "it was signalled"
    );
    alive.finish();
}

#[test]
fn a_located_store_recording_another_domain_is_refused_with_its_evidence() {
    let h = Host::new();
    let root = h.storage_root("dev");
    std::fs::create_dir_all(&root).unwrap();
    seed_store(&root, default_record());
    let out = h.run(&["dev"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "records Domain {} (profile \"default\", workspace /home/dev/project), not Domain {} of profile \"dev\"",
            "11".repeat(32),
            hex::encode(h.domain_id("dev"))
        )) && stderr.contains(&format!("lazaret state --domain-root {}", root.display())),
        "{stderr}"
    );
}

#[test]
fn bad_arguments_are_refused_naming_the_profile_or_file() {
    let h = Host::new();
    let out = h.run(&["nope"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("profile \"nope\"") && stderr.contains(h.config().to_str().unwrap()),
        "{stderr}"
    );
    let missing = h.path("home/absent.toml");
    let out = h.run(&["dev", "--config", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("profile \"dev\"") && stderr.contains(missing.to_str().unwrap()),
        "{stderr}"
    );
    let out = h.run(&["dev", "--workspace", h.path("no-such-ws").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no-such-ws"),
        "{}",
        text(&out.stderr)
    );
    // Usage errors: neither a profile nor a Domain Root; --config with
    // --domain-root.
    let out = h.run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("<PROFILE>"),
        "{}",
        text(&out.stderr)
    );
    let out = h.run(&["--domain-root", "/tmp", "--config", "/x.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--config"),
        "{}",
        text(&out.stderr)
    );
    assert!(!h.path("home/.local").exists());
}

#[test]
fn domain_root_human_output_shows_generation_participants_sessions_and_terminals() {
    let dir = tempfile::tempdir().unwrap();
    seed_store(dir.path(), default_record());
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
        "what to do: no recorded process of generation 4 is running: run `lazaret default --workspace /home/dev/project` to recover it",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in\n{stdout}");
    }
}

#[test]
fn domain_root_json_output_is_machine_readable() {
    let dir = tempfile::tempdir().unwrap();
    seed_store(dir.path(), default_record());
    let out = state(&["--domain-root", dir.path().to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "inactive");
    assert_eq!(v["located"], Value::Null);
    assert_eq!(v["runtime"], Value::Null);
    assert_eq!(v["domain"]["profile"], "default");
    assert_eq!(v["domain"]["domain_id"], "11".repeat(32));
    let g = &v["generations"][0];
    assert_eq!(g["generation_id"], 4);
    assert_eq!(g["durable_decision"], "Published");
    assert_eq!(g["clean"], false);
    assert_eq!(g["participants"][0]["role"], "Sandbox");
    assert_eq!(g["participants"][0]["ownership"], Value::Null);
    assert_eq!(g["sessions"][0]["session_phase"], "Registered");
    let t = &g["terminals"][0];
    assert_eq!(t["state"], "Intent");
    assert_eq!(t["container_id"], "lzr-gen4");
    assert_eq!(t["exec_client"]["phase"], "Unassigned");
    assert_eq!(t["guest_process"]["leader_start_time"], 1635);
    assert_eq!(t["pty_master"]["master_fd"], 12);
    // The terminal's two slots are listed, unassigned, with no live check.
    let slots = g["process_slots"].as_array().unwrap();
    assert_eq!(slots.len(), 2);
    assert_eq!(slots[0]["slot"], "SessionTerminalHostCoordinator");
    assert_eq!(slots[0]["session_id"], "ab".repeat(16));
    assert_eq!(slots[0]["live"], Value::Null);
}

#[test]
fn a_held_domain_root_lock_is_reported_as_live() {
    let dir = tempfile::tempdir().unwrap();
    seed_store(dir.path(), default_record());
    let _held = DomainLock::try_acquire(&DomainRootLayout::new(dir.path()).lock_path()).unwrap();
    let out = state(&["--domain-root", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("live: a Host Coordinator holds the Domain lock")
            && stdout.contains("runtime     unknown with --domain-root")
            && stdout.contains(&format!(
                "run `lazaret state --domain-root {}` again",
                dir.path().display()
            )),
        "{stdout}"
    );
}

#[test]
fn a_domain_root_that_never_ran_is_reported_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let out = state(&["--domain-root", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stdout).contains("never been started"),
        "{}",
        text(&out.stdout)
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
fn with_a_domain_root_profile_and_workspace_must_match_the_record() {
    let dir = tempfile::tempdir().unwrap();
    seed_store(dir.path(), default_record());
    let root = dir.path().to_str().unwrap();
    let out = state(&["other", "--domain-root", root]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("belongs to profile \"default\", not \"other\""));
    let out = state(&["default", "--domain-root", root, "--workspace", "/tmp"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("belongs to workspace /home/dev/project, not /tmp"));
    let out = state(&["default", "--domain-root", root]);
    assert!(out.status.success());
}
