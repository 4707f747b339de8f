//! A real Session Terminal in a real rootless runsc sandbox (spec 3.4,
//! FR-14, FR-15): a host PTY slave as the stdio of non-detached
//! `runsc exec --process` with `"terminal": true`; `stty size` inside
//! follows TIOCSWINSZ + SIGWINCH; SIGINT to the group interrupts `sleep`;
//! the pure terminal machine drives the release order (SIGHUP, SIGTERM,
//! SIGKILL) against a guest that ignores the first two; under interactive
//! bash only the exec client's signal forwarding reaches the foreground job.
//!
//! Runs as the unprivileged `lazaret-test` user (re-executed through
//! `runuser` when started as root). The sandbox is brought up by the test
//! itself with util-linux `unshare --map-users/--map-groups` (newuidmap /
//! newgidmap: 0 -> user, 1..65536 -> subordinate range) and
//! `runsc --ignore-cgroups --network=none run --detach`; exec clients enter
//! that user namespace with `nsenter -U --preserve-credentials`. This is test
//! scaffolding: the product launches through the Runtime Supervisor.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

use lazaret_effects::pty::{Pumped, RealPty, SessionPty, WindowSize};
use lazaret_effects::runsc_exec::*;
use lazaret_runtime::records::ids::{GenerationId, SessionId};
use lazaret_runtime::records::terminal::GuestProcessIdentity;
use lazaret_runtime::terminal::machine::{
    Command as Effect, ExecStatus, GroupObservation, GuestSignal, Input, Machine, ReleaseTimings,
    TimerKind,
};
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
use std::num::NonZeroU16;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const USER: &str = "lazaret-test";
const NAME: &str = "session_terminal_in_real_runsc";

fn subordinate(file: &str) -> u32 {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            (f.next() == Some(USER)).then(|| {
                (
                    f.next().unwrap().parse().unwrap(),
                    f.next().unwrap().parse::<u32>().unwrap(),
                )
            })
        })
        .find(|(_, count)| *count >= 65536)
        .map(|(start, _)| start)
        .unwrap_or_else(|| panic!("{USER} has no subordinate range of 65536 in {file}"))
}

fn size(rows: u16, columns: u16) -> WindowSize {
    WindowSize {
        rows: NonZeroU16::new(rows).unwrap(),
        columns: NonZeroU16::new(columns).unwrap(),
        pixel_width: 0,
        pixel_height: 0,
    }
}

struct Sandbox {
    dir: PathBuf,
    runsc: Runsc,
    container: String,
}

impl Sandbox {
    /// `tools` holds the static `lazaret-guest`, bound read-only where the
    /// product binds it.
    fn start(dir: &Path, tools: &Path) -> Self {
        let bundle = dir.join("bundle");
        let rootfs = bundle.join("rootfs");
        for d in [
            "usr",
            "proc",
            "dev",
            "tmp",
            "workspace",
            "etc",
            ".lazaret/sbin",
        ] {
            std::fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        for (link, to) in [
            ("bin", "usr/bin"),
            ("lib", "usr/lib"),
            ("lib64", "usr/lib64"),
            ("sbin", "usr/sbin"),
        ] {
            std::os::unix::fs::symlink(to, rootfs.join(link)).unwrap();
        }
        // PID 1 reaps (HOST-NOTES.md): a shell loop that waits for children.
        let config = serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {
                "terminal": false, "user": {"uid": 0, "gid": 0},
                "args": ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1 & wait; done"],
                "env": ["PATH=/usr/bin:/bin"], "cwd": "/",
                "capabilities": {}, "noNewPrivileges": true
            },
            "root": {"path": "rootfs", "readonly": true},
            "hostname": "lazaret-terminal-test",
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
                {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
                {"destination": "/workspace", "type": "tmpfs", "source": "tmpfs"},
                {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]},
                {"destination": "/.lazaret/sbin", "type": "bind", "source": tools, "options": ["rbind", "ro"]}
            ],
            "linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]}
        });
        std::fs::write(
            bundle.join("config.json"),
            serde_json::to_vec(&config).unwrap(),
        )
        .unwrap();
        let root = dir.join("runsc-root");
        std::fs::create_dir_all(&root).unwrap();
        let container = format!("lzt-term-{}", std::process::id());
        let uid = subordinate("/etc/subuid");
        let gid = subordinate("/etc/subgid");
        let global: Vec<std::ffi::OsString> = vec![
            "--root".into(),
            root.clone().into(),
            "--ignore-cgroups".into(),
            "--network=none".into(),
        ];
        let status = Command::new("unshare")
            .args(["--user", "--map-root-user"])
            .arg(format!("--map-users={uid},1,65536"))
            .arg(format!("--map-groups={gid},1,65536"))
            .args(["--mount", "--", "runsc"])
            .args(&global)
            .args(["run", "--detach", &container])
            .current_dir(&bundle)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .unwrap();
        assert!(status.success(), "runsc run --detach failed: {status}");
        let state = Command::new("runsc")
            .args(&global)
            .args(["state", &container])
            .output()
            .unwrap();
        assert!(
            state.status.success(),
            "{}",
            String::from_utf8_lossy(&state.stderr)
        );
        let pid = serde_json::from_slice::<serde_json::Value>(&state.stdout).unwrap()["pid"]
            .as_u64()
            .unwrap();
        let runsc = Runsc {
            prefix: [
                "nsenter",
                "-U",
                "--preserve-credentials",
                "-t",
                &pid.to_string(),
                "--",
            ]
            .into_iter()
            .map(Into::into)
            .collect(),
            runsc: "runsc".into(),
            global,
        };
        Sandbox {
            dir: dir.to_owned(),
            runsc,
            container,
        }
    }

    fn command(&self, inv: &Invocation) -> Command {
        let mut c = Command::new(&inv.argv[0]);
        c.args(&inv.argv[1..]);
        c
    }

    /// A session exec client with the PTY slave as all three streams.
    fn exec_session(&self, name: &str, args: &[&str], slave: &OwnedFd) -> (Child, PathBuf) {
        let process = ExecProcess {
            args: args.iter().map(|s| s.to_string()).collect(),
            env: vec!["PATH=/usr/bin:/bin".into(), "TERM=xterm".into()],
            session_env: Vec::new(),
            terminal: true,
        };
        let json = self.dir.join(format!("{name}.json"));
        std::fs::write(&json, process.to_json([]).unwrap()).unwrap();
        let pid_file = self.dir.join(format!("{name}.pid"));
        let inv = self.runsc.exec_session(&json, &pid_file, &self.container);
        let child = self
            .command(&inv)
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave.try_clone().unwrap())
            .spawn()
            .unwrap();
        (child, pid_file)
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let mut argv = self.runsc.prefix.clone();
        argv.push("runsc".into());
        argv.extend(self.runsc.global.iter().cloned());
        argv.extend([
            "delete".into(),
            "--force".into(),
            self.container.clone().into(),
        ]);
        let _deleted = Command::new(&argv[0]).args(&argv[1..]).status();
    }
}

fn wait_pid_file(path: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "no internal pid file");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Reads the master until `needle` appears (bounded).
fn read_until(pty: &SessionPty<'_, RealPty>, seen: &mut String, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains(needle) {
        assert!(
            Instant::now() < deadline,
            "{needle:?} not seen; output so far: {seen:?}"
        );
        match pty.pump(4096).unwrap() {
            Pumped::Data(c) => seen.push_str(&String::from_utf8_lossy(c.as_bytes())),
            Pumped::WouldBlock => std::thread::sleep(Duration::from_millis(2)),
            Pumped::Eof => panic!("EOF before {needle:?}; output: {seen:?}"),
            Pumped::Paused => unreachable!(),
        }
    }
}

/// Where the delegating root process left the compiled guest tool.
const TOOLS_ENV: &str = "LAZARET_TEST_GUEST_TOOLS";

/// Compiles the product's static guest tool (`cli/init/lazaret_guest.rs`)
/// into `dir` with the flags cli/build.rs uses; the product embeds the same
/// source. Test scaffolding: this test starts its own sandbox.
fn build_guest_tool(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/init/lazaret_guest.rs");
    let status = Command::new("rustc")
        .args([
            "--edition",
            "2021",
            "-C",
            "opt-level=2",
            "-C",
            "panic=abort",
        ])
        .args([
            "-C",
            "target-feature=+crt-static",
            "-C",
            "relocation-model=static",
        ])
        .args(["--crate-type", "bin", "--crate-name", "lazaret_guest", "-o"])
        .arg(dir.join(GUEST_TOOL_NAME))
        .arg(source)
        .status()
        .unwrap();
    assert!(status.success(), "building the guest tool failed: {status}");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn delegate_as_test_user() -> bool {
    if !rustix::process::geteuid().is_root() {
        return false;
    }
    let home = PathBuf::from(format!("/tmp/lazaret-terminal-test-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let tools = home.join("tools");
    build_guest_tool(&tools);
    let status = Command::new("chown")
        .arg(format!("{USER}:{USER}"))
        .arg(&home)
        .status()
        .unwrap();
    assert!(status.success());
    let out = Command::new("runuser")
        .args(["-u", USER, "--", "env"])
        .arg(format!("HOME={}", home.display()))
        .arg(format!("XDG_RUNTIME_DIR={}", home.display()))
        .arg(format!("{TOOLS_ENV}={}", tools.display()))
        .arg(std::env::current_exe().unwrap())
        .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
        .output()
        .unwrap();
    let _removed = Command::new("rm").arg("-rf").arg(&home).status();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("--- as {USER}:\n{stdout}\n{stderr}");
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "failed as {USER}"
    );
    true
}

#[test]
fn session_terminal_in_real_runsc() {
    if delegate_as_test_user() {
        return;
    }
    let home = PathBuf::from(std::env::var("HOME").unwrap());
    let dir = tempfile::tempdir_in(&home).unwrap();
    let t0 = Instant::now();
    let tools = match std::env::var_os(TOOLS_ENV) {
        Some(tools) => PathBuf::from(tools),
        None => {
            let tools = dir.path().join("tools");
            build_guest_tool(&tools);
            tools
        }
    };
    let sandbox = Sandbox::start(dir.path(), &tools);
    eprintln!("sandbox up in {:?}", t0.elapsed());
    let runner = RealRunner;
    let control = GuestControl::new(
        &runner,
        sandbox.runsc.clone(),
        GuestTools::default(),
        sandbox.container.clone(),
    );

    // --- resize and interrupt --------------------------------------------
    let sys = RealPty;
    let (pty, slave) = SessionPty::allocate(&sys).unwrap();
    pty.resize(size(30, 100)).unwrap();
    let script = "echo \"size1 $(stty size)\"; trap 'echo \"winch $(stty size)\"' WINCH; \
                  echo ready; sleep 1000 & wait $!; echo interruptible; exec sleep 1000";
    let spawned = Instant::now();
    let (mut child, pid_file) = sandbox.exec_session("s1", &["/bin/bash", "-c", script], &slave);
    drop(slave);
    let leader = wait_pid_file(&pid_file);
    eprintln!("exec client to guest leader PID in {:?}", spawned.elapsed());
    let identity = control.leader_identity(leader).unwrap();
    assert_eq!(
        identity.process_group_id, leader,
        "the exec'd process leads its own group"
    );
    assert_eq!(control.observe(&identity), GroupObservation::LeaderMatches);
    let mut seen = String::new();
    read_until(&pty, &mut seen, "ready");
    assert!(seen.contains("size1 30 100"), "{seen:?}");

    pty.resize(size(40, 120)).unwrap();
    let sent = Instant::now();
    control
        .signal(&identity, GuestSignal::WindowChange)
        .unwrap();
    eprintln!(
        "guest group SIGWINCH through runsc exec in {:?}",
        sent.elapsed()
    );
    read_until(&pty, &mut seen, "interruptible");
    assert!(seen.contains("winch 40 120"), "{seen:?}");

    let sent = Instant::now();
    control.signal(&identity, GuestSignal::Interrupt).unwrap();
    let status = child.wait().unwrap();
    eprintln!("SIGINT to exit of the exec client in {:?}", sent.elapsed());
    assert_eq!(
        status.code(),
        Some(130),
        "128 + SIGINT from the exec client"
    );
    // The background `sleep 1000 &` of a non-interactive shell ignores
    // SIGINT (POSIX), so it outlives the leader: exactly the "leader absent,
    // group nonempty" case that the release order leaves to Domain teardown.
    assert_eq!(
        control.observe(&identity),
        GroupObservation::LeaderAbsentGroupRemains
    );
    pty.close();

    // --- release order through the pure machine --------------------------
    let (pty, slave) = SessionPty::allocate(&sys).unwrap();
    pty.resize(size(24, 80)).unwrap();
    let stubborn = "trap '' HUP TERM; echo stubborn; exec sleep 1000";
    let (child, pid_file) = sandbox.exec_session("s2", &["/bin/bash", "-c", stubborn], &slave);
    drop(slave);
    let identity = control.leader_identity(wait_pid_file(&pid_file)).unwrap();
    let mut seen = String::new();
    read_until(&pty, &mut seen, "stubborn");
    let log = run_release(&control, &identity, child, &pty);
    eprintln!("release log: {log:?}");
    let signals: Vec<_> = log
        .iter()
        .filter(|l| l.starts_with("signal"))
        .cloned()
        .collect();
    assert_eq!(
        signals,
        ["signal SIGHUP", "signal SIGTERM", "signal SIGKILL"]
    );
    assert_eq!(log.last().map(String::as_str), Some("RecordClean"));
    assert_eq!(control.observe(&identity), GroupObservation::Empty);
    pty.close();

    // --- interactive bash: which group does Ctrl-C need? ------------------
    job_control_needs_the_foreground_group(&sandbox, &control);
    eprintln!("whole test {:?}", t0.elapsed());
}

/// Interactive bash runs a foreground `sleep` in its own process group.
/// SIGINT to the recorded (bash's) group does not interrupt it; SIGINT to
/// the PTY-attached exec client, which runsc forwards to the terminal's
/// foreground group, does. Evidence for docs/terminals.md "Open point".
fn job_control_needs_the_foreground_group(
    sandbox: &Sandbox,
    control: &GuestControl<'_, RealRunner>,
) {
    let sys = RealPty;
    let (mut pty, slave) = SessionPty::allocate(&sys).unwrap();
    pty.resize(size(24, 80)).unwrap();
    let (mut child, pid_file) =
        sandbox.exec_session("s3", &["/bin/bash", "--norc", "--noprofile", "-i"], &slave);
    drop(slave);
    let identity = control.leader_identity(wait_pid_file(&pid_file)).unwrap();
    let mut seen = String::new();
    read_until(&pty, &mut seen, "# ");
    let typed = |pty: &mut SessionPty<'_, RealPty>, text: &str| {
        pty.write_input(
            &lazaret_runtime::terminal::protocol::Chunk::new(text.as_bytes().to_vec()).unwrap(),
        )
        .unwrap();
    };
    typed(&mut pty, "sleep 100; echo sleep-status=$?\r");
    read_until(&pty, &mut seen, "sleep 100; echo");
    // Poll (bounded) until bash has started the foreground job.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (sleep, stats) = loop {
        let stats = control.all_stats().unwrap();
        let sleep = stats.iter().copied().find(|s| {
            s.pid != identity.leader_pid
                && s.session == identity.leader_pid
                && s.pgrp != identity.process_group_id
        });
        if sleep.is_some() || Instant::now() > deadline {
            break (sleep, stats);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!(
        "interactive bash group {}, sleep {:?}",
        identity.process_group_id, sleep
    );
    assert!(
        sleep.is_some(),
        "job control put sleep in its own group: {stats:?}"
    );

    control.signal(&identity, GuestSignal::Interrupt).unwrap();
    let quiet_until = Instant::now() + Duration::from_millis(700);
    while Instant::now() < quiet_until {
        if let Pumped::Data(c) = pty.pump(4096).unwrap() {
            seen.push_str(&String::from_utf8_lossy(c.as_bytes()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        !seen.contains("sleep-status=1"),
        "SIGINT to bash's group must not reach sleep: {seen:?}"
    );

    let pidfd = pidfd_open(
        Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap(),
        PidfdFlags::empty(),
    )
    .unwrap();
    let sent = Instant::now();
    pidfd_send_signal(&pidfd, Signal::INT).unwrap();
    // Interactive bash abandons the rest of the list and prompts again.
    let prompts = seen.matches("# ").count();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.matches("# ").count() == prompts {
        assert!(Instant::now() < deadline, "no new prompt: {seen:?}");
        if let Pumped::Data(c) = pty.pump(4096).unwrap() {
            seen.push_str(&String::from_utf8_lossy(c.as_bytes()));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let sleep_pid = sleep.unwrap().pid;
    assert!(
        control.stats(&[sleep_pid]).unwrap().is_empty(),
        "the foreground sleep is gone"
    );
    eprintln!(
        "SIGINT through the exec client's forwarding interrupted the foreground sleep in {:?}",
        sent.elapsed()
    );
    typed(&mut pty, "exit 7\r");
    assert_eq!(child.wait().unwrap().code(), Some(7));
    pty.close();
}

/// A minimal effects interpreter for the terminal machine.
fn run_release(
    control: &GuestControl<'_, RealRunner>,
    identity: &GuestProcessIdentity,
    mut child: Child,
    pty: &SessionPty<'_, RealPty>,
) -> Vec<String> {
    let timings = ReleaseTimings {
        refusal_wait_ms: 300,
        hangup_grace_ms: 300,
        terminate_grace_ms: 300,
        drain_deadline_ms: 300,
    };
    let mut m = Machine::new(SessionId([1; 16]), GenerationId(1), timings, 64 * 1024);
    // The command here runs without a guest leader: it was never held.
    assert_eq!(
        m.handle(Input::Admitted).unwrap(),
        vec![Effect::AdmitGuestLeader]
    );
    let pidfd = pidfd_open(
        Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap(),
        PidfdFlags::empty(),
    )
    .unwrap();
    let mut log = Vec::new();
    let mut inputs = std::collections::VecDeque::from([Input::ClientLost]);
    let mut timer: Option<(TimerKind, Instant)> = None;
    let mut exited = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !m.is_finished() {
        assert!(Instant::now() < deadline, "release did not finish: {log:?}");
        if let Some(input) = inputs.pop_front() {
            for command in m.handle(input).unwrap() {
                match command {
                    Effect::ObserveGroup => {
                        inputs.push_back(Input::Observed(control.observe(identity)))
                    }
                    Effect::SignalGroup(s) => {
                        control.signal(identity, s).unwrap();
                        log.push(format!("signal {}", s.name()));
                    }
                    Effect::StartTimer { timer: t, after_ms } => {
                        timer = Some((t, Instant::now() + Duration::from_millis(after_ms)));
                    }
                    Effect::CancelTimer(_) => timer = None,
                    Effect::TerminateExecClient => {
                        let _gone = pidfd_send_signal(&pidfd, Signal::KILL);
                        log.push("TerminateExecClient".into());
                    }
                    Effect::ReapExecClient => log.push("ReapExecClient".into()),
                    // The coordinator's answer: durable (nothing here
                    // stands between the release and its record).
                    Effect::RecordReleaseIntent { awaited: true } => {
                        log.push("RecordReleaseIntent".into());
                        inputs.push_front(Input::ReleaseIntentConfirmed);
                    }
                    Effect::CloseOutput => log.push("CloseOutput".into()),
                    other => log.push(format!("{other:?}")),
                }
            }
            continue;
        }
        if !exited {
            if let Some(status) = child.try_wait().unwrap() {
                exited = true;
                let s = match (status.code(), status.signal()) {
                    (Some(c), _) => ExecStatus::Exited(u8::try_from(c).unwrap()),
                    (None, Some(sig)) => ExecStatus::Signalled(u8::try_from(sig).unwrap()),
                    _ => unreachable!(),
                };
                log.push(format!("exec client {s:?}"));
                inputs.push_back(Input::ExecClientExited(s));
                continue;
            }
        }
        if let Some((t, at)) = timer {
            if Instant::now() >= at {
                timer = None;
                inputs.push_back(Input::Timer(t));
                continue;
            }
        }
        if m.pty_read_budget() > 0 {
            if let Pumped::Data(c) = pty.pump(m.pty_read_budget()).unwrap() {
                inputs.push_back(Input::PtyData(c));
                continue;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    log
}
