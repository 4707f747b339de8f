//! End-to-end: the Domain process chain under real runsc, as the
//! unprivileged test user (spec 3.1, 3.3, 3.4, DX-1). Every scenario ends
//! with a leak check: no process, mount, runsc state, socket or log of its
//! Domain remains.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

mod support;
use support::{
    actions_of, assert_failed, assert_replays, assert_succeeded, chown_tree, default_image,
    guest_results, host_git, replay_trace, runtime_files, signal_through_pidfd, test_user, text,
    Env, ONE_AT_A_TIME,
};

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

#[test]
fn exit_status_is_the_commands_and_streams_stay_apart() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("status", &default_image());
    let out = env.run(&["default", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.assert_nothing_left();
    // A teardown stops the runtime itself, and its trace line carries both
    // processes observed absent by their exact identities.
    assert_processes_observed_absent(&env, &["ShutdownRuntime"]);
    // The launch's lines carry RS and runsc observed present, by their
    // exact identities, where they are staged and committed.
    assert_launch_processes_observed_running(&env);

    let out = env.run(&[
        "default",
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "out\n");
    assert_eq!(text(&out.stderr), "err\n");
    env.assert_nothing_left();

    // `lazaret run --profile` is the same launch.
    let out = env.run(&[
        "run",
        "--profile",
        "default",
        "--",
        "sh",
        "-c",
        "kill -KILL $$",
    ]);
    assert_eq!(out.status.code(), Some(128 + 9), "{}", text(&out.stderr));
    env.assert_nothing_left();
    let out = env.run(&["default", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(128 + 15), "{}", text(&out.stderr));
    env.assert_nothing_left();
}

#[test]
fn the_command_runs_in_gvisor_on_the_workspace_both_ways() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("workspace", &default_image());
    std::fs::write(env.workspace.join("from-host.txt"), "host wrote this\n").unwrap();
    chown_tree(&env.workspace);
    let out = env.run(&[
        "default",
        "--",
        "sh",
        "-c",
        "cat /proc/version; dmesg | head -n 3; pwd; cat /workspace/from-host.txt; echo sandbox wrote this > /workspace/from-sandbox.txt",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let host_version = std::fs::read_to_string("/proc/version").unwrap();
    assert!(
        !stdout.contains(host_version.trim()),
        "host kernel visible: {stdout}"
    );
    assert!(stdout.contains("gVisor"), "no gVisor kernel log: {stdout}");
    assert!(stdout.contains("/workspace\nhost wrote this\n"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("from-sandbox.txt")).unwrap(),
        "sandbox wrote this\n"
    );
    env.assert_nothing_left();
    // runsc wrote no mount point into the shared prepared lower: its
    // `.lazaret` holds exactly the preparer's (empty) mount points, the
    // credential path's an empty file (spec 3.3: the bundle is a mount),
    // the escalation mailbox's a directory (spec 3.8).
    let prepared = env.home.join(".local/share/lazaret/prepared");
    let lower = std::fs::read_dir(&prepared)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let dot = lower.join("rootfs/.lazaret");
    let mut names: Vec<String> = std::fs::read_dir(&dot)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["credentials", "escalation", "git-common", "sbin"],
        "{}",
        dot.display()
    );
    assert_eq!(std::fs::read_dir(dot.join("sbin")).unwrap().count(), 0);
    let credentials = std::fs::symlink_metadata(dot.join("credentials")).unwrap();
    assert!(credentials.is_file() && credentials.len() == 0);
    // FR-22: nothing in the prepared lower is newer than its record — runsc
    // wrote neither files nor mount points into the immutable tree.
    let changed = Command::new("find")
        .arg(lower.join("rootfs"))
        .arg("-newer")
        .arg(lower.join("artifact.json"))
        .output()
        .unwrap();
    assert!(
        changed.stdout.is_empty(),
        "the prepared lower was written:\n{}",
        text(&changed.stdout)
    );
}

#[test]
fn a_second_session_joins_the_same_sandbox_and_leaving_keeps_the_first() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("join", &default_image());
    let first = env.spawn(&[
        "default",
        "--",
        "sh",
        "-c",
        "echo $$ > /workspace/first.pid; while [ ! -e /workspace/release ]; do sleep 0.1; done; echo first still alive",
    ]);
    let pid_file = env.workspace.join("first.pid");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pid_file.exists() {
        assert!(Instant::now() < deadline, "the first session never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The second session sees the first one's process: one sandbox.
    let out = env.run(&[
        "default",
        "--timings",
        "--",
        "sh",
        "-c",
        "tr '\\0' ' ' < /proc/$(cat /workspace/first.pid)/cmdline",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("/workspace/release"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stderr).contains("timings (join)"),
        "{}",
        text(&out.stderr)
    );
    // The second left; the first is still running in the same sandbox.
    let out = env.run(&[
        "default",
        "--",
        "sh",
        "-c",
        "test -d /proc/$(cat /workspace/first.pid)",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the first session's process is gone"
    );
    std::fs::write(env.workspace.join("release"), "").unwrap();
    let first = first.wait_with_output().unwrap();
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout), "first still alive\n");
    env.assert_nothing_left();
}

#[test]
fn another_configuration_is_refused_naming_the_running_one() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let image = default_image();
    let env = Env::new("fingerprint", &image);
    let other = env.write_config("other.toml", &image, "persistent_dirs = [\"/root\"]");
    let first = env.spawn(&[
        "default",
        "--",
        "sh",
        "-c",
        "touch /workspace/started; while [ ! -e /workspace/release ]; do sleep 0.1; done",
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !env.workspace.join("started").exists() {
        assert!(Instant::now() < deadline, "the first session never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let stderr = assert_refused_for_another_configuration(&env, &other);
    assert!(stderr.contains("config.toml"), "{stderr}");
    std::fs::write(env.workspace.join("release"), "").unwrap();
    assert_eq!(first.wait_with_output().unwrap().status.code(), Some(0));
    env.assert_nothing_left();
}

/// A CLI of the configuration `other` of this Domain is refused, naming
/// the running one; returns its stderr.
fn assert_refused_for_another_configuration(env: &Env, other: &Path) -> String {
    let out = env.run(&[
        "default",
        "--config",
        &other.display().to_string(),
        "--",
        "true",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("already running with another configuration"),
        "{stderr}"
    );
    stderr
}

/// A coordinator of a Vacant Domain refuses a client of another
/// configuration by the model's own steps (`ConnectClient`,
/// `RefuseConfigurationMismatch`), and one that no matching client reaches
/// exits after its linger instead of holding the Domain lock, so the other
/// configuration can then run (FR-2, FR-6, SR-9).
#[test]
fn a_vacant_domains_coordinator_refuses_by_the_model_and_does_not_linger() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let image = default_image();
    let env = Env::new("vacant-refusal", &image);
    let other = env.write_config("other.toml", &image, "persistent_dirs = [\"/root\"]");
    // The coordinator of the default configuration, started as a CLI
    // starts it, with no CLI of its own.
    let workspace = env.workspace.display().to_string();
    let mut coordinator = env
        .command(&[
            "__coordinator",
            "--profile",
            "default",
            "--workspace",
            &workspace,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !runtime_files(&env.home.join("run"))
        .iter()
        .any(|p| p.ends_with("hc.sock"))
    {
        assert!(
            Instant::now() < deadline,
            "the coordinator never bound its socket"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_refused_for_another_configuration(&env, &other);
    // Nobody else comes: the coordinator exits by itself.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = coordinator.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            signal_through_pidfd(&coordinator.id().to_string(), rustix::process::Signal::KILL);
            panic!("the Vacant Domain's coordinator did not exit");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = coordinator.wait_with_output().unwrap();
    assert!(status.success(), "{status}: {}", text(&output.stderr));
    let lines = env.trace_lines();
    let steps: Vec<(&str, &serde_json::Value)> = lines
        .iter()
        .map(|l| (l["action"].as_str().unwrap_or_default(), &l["params"]))
        .collect();
    let actions: Vec<&str> = steps.iter().map(|(a, _)| *a).collect();
    assert_eq!(
        actions,
        [
            "Init",
            "AcquireDomainLock",
            "BootstrapVacantDomain",
            "ConnectClient",
            "RefuseConfigurationMismatch",
            "ExitCoordinator"
        ],
        "{lines:?}"
    );
    assert!(
        steps[3].1.to_string().contains("Mismatch"),
        "the refused client connected as a match: {:?}",
        steps[3]
    );
    env.assert_nothing_running();
    // The Domain is free: the other configuration runs its own generation.
    let out = env.run(&[
        "default",
        "--config",
        &other.display().to_string(),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.assert_nothing_left();
}

#[test]
fn bad_input_gets_one_actionable_message_and_leaves_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let image = default_image();
    let mut env = Env::new("bad-input", &image);
    // Most refusals come before any coordinator; the traces that exist
    // (a missing image is refused by a coordinator) must still replay.
    env.traced = false;
    let unreadable = env.home.join("unreadable-layout");
    std::fs::create_dir_all(&unreadable).unwrap();
    std::fs::write(
        unreadable.join("oci-layout"),
        "{\"imageLayoutVersion\":\"1.0.0\"}",
    )
    .unwrap();
    chown_tree(&unreadable);
    std::fs::set_permissions(&unreadable, std::fs::Permissions::from_mode(0o000)).unwrap();
    let unreadable_cfg = env.write_config(
        "unreadable.toml",
        &format!("oci:{}:default", unreadable.display()),
        "",
    );
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["nosuch".into(), "--".into(), "true".into()], "nosuch"),
        (
            vec![
                "default".into(),
                "--workspace".into(),
                env.home.join("vanished").display().to_string(),
                "--".into(),
                "true".into(),
            ],
            "vanished",
        ),
        (
            vec!["broken".into(), "--".into(), "true".into()],
            "no-such-layout",
        ),
        (
            vec![
                "default".into(),
                "--config".into(),
                unreadable_cfg.display().to_string(),
                "--".into(),
                "true".into(),
            ],
            "unreadable-layout",
        ),
    ];
    for (args, names) in cases {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = env.run(&argv);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{argv:?}: {stderr}");
        assert_eq!(
            stderr.lines().count(),
            1,
            "{argv:?}: not one message: {stderr}"
        );
        assert!(
            stderr.starts_with("lazaret: error: ") && stderr.contains(names),
            "{argv:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{argv:?}");
        env.assert_nothing_left();
    }
    std::fs::set_permissions(&unreadable, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// Three CLIs start at once with no coordinator running: the flock picks
/// one coordinator, the losers fail closed, and every CLI joins the one
/// sandbox (gVisor's boot id is per sandbox).
#[test]
fn simultaneous_first_launches_settle_on_one_sandbox() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("race", &default_image());
    let children: Vec<Child> = (0..3)
        .map(|_| {
            env.spawn(&[
                "default",
                "--",
                "sh",
                "-c",
                "cat /proc/sys/kernel/random/boot_id; sleep 2",
            ])
        })
        .collect();
    let mut boots = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        boots.push(text(&out.stdout));
    }
    assert_eq!(boots[0].trim().len(), 36, "{boots:?}");
    assert!(
        boots.iter().all(|b| *b == boots[0]),
        "more than one sandbox: {boots:?}"
    );
    env.assert_nothing_left();
    // Each coordinator that lost the flock (how many depends on timing; two
    // in the runs seen here) recorded the holder's lock, as its failed flock
    // observed it, and its own loss, and nothing else; the leak check above
    // replayed those traces too.
    for t in env.loser_traces() {
        let actions = actions_of(&std::fs::read_to_string(&t).unwrap());
        assert_eq!(
            &actions[1..],
            ["AcquireDomainLock", "LoseDomainLockRace"],
            "{}",
            t.display()
        );
    }
}

/// Runs `script` (which must create `/workspace/started`) in a session,
/// SIGKILLs the Domain's only coordinator once it has, and returns how the
/// CLI ended.
fn kill_coordinator_while_serving(env: &Env, script: &str) -> Output {
    let session = env.spawn(&["default", "--", "sh", "-c", script]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !env.workspace.join("started").exists() {
        assert!(Instant::now() < deadline, "the session never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_the_coordinator(env);
    session.wait_with_output().unwrap()
}

/// SIGKILLs the Domain's only coordinator.
fn kill_the_coordinator(env: &Env) {
    let coordinators: Vec<String> = env
        .processes()
        .into_iter()
        .filter(|p| p.contains(" __coordinator "))
        .collect();
    assert_eq!(coordinators.len(), 1, "{coordinators:?}");
    let pid = coordinators[0].split(':').next().unwrap().to_owned();
    signal_through_pidfd(&pid, rustix::process::Signal::KILL);
}

/// Waits until no process of the scenario is left.
fn wait_no_processes(env: &Env) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !env.processes().is_empty() {
        assert!(Instant::now() < deadline, "{:?}", env.processes());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Spec 3.4 release step 3: "Record the terminal clean only after the guest
/// group, exec client, and PTY are absent; otherwise retain release
/// intent." A piped command that completes by itself and leaves a member of
/// its group running is released without an observation, so its release
/// is the model's `RetainSessionRelease`, its terminal keeps its
/// ReleaseIntent while the Domain lives (read here after the coordinator is
/// killed, from the store it left), and the next coordinator's recovery
/// cleans it once the runtime is gone (`CleanSessionTerminals`).
#[test]
fn a_retained_release_keeps_its_release_intent_until_the_runtime_is_gone() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("retained-release", &default_image());
    let keeper = env.spawn(&[
        "default",
        "--",
        "sh",
        "-c",
        "touch /workspace/started; sleep 60",
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !env.workspace.join("started").exists() {
        assert!(
            Instant::now() < deadline,
            "the keeping session never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = env.run(&[
        "default",
        "--",
        "sh",
        "-c",
        "sleep 300 >/dev/null 2>&1 & exit 0",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The coordinator took the finished session's last step: retained,
    // not finished clean.
    let live_trace = || {
        runtime_files(&env.home.join("run"))
            .into_iter()
            .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !live_trace().contains("RetainSessionRelease") {
        assert!(
            Instant::now() < deadline,
            "no RetainSessionRelease: {}",
            live_trace()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !live_trace().contains("FinishSessionRelease"),
        "{}",
        live_trace()
    );
    kill_the_coordinator(&env);
    let out = keeper.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    wait_no_processes(&env);
    let state = env.run(&["state", "default", "--json"]);
    let state: serde_json::Value = serde_json::from_slice(&state.stdout).unwrap();
    let terminals = state["generations"][0]["terminals"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let states: Vec<&str> = terminals
        .iter()
        .filter_map(|t| t["state"].as_str())
        .collect();
    // The keeper's terminal was never released; the finished one retained.
    assert_eq!(
        states.iter().filter(|s| **s == "ReleaseIntent").count(),
        1,
        "{states:?}: {state}"
    );
    assert!(!states.contains(&"Clean"), "{states:?}: {state}");
    // Recovery cleans both once the runtime is gone, as the model's step;
    // nothing is left.
    let out = env.run(&["default", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.assert_nothing_left();
    let recovered = env
        .traces()
        .iter()
        .filter_map(|t| std::fs::read_to_string(t).ok())
        .find(|t| t.contains("RetainSessionRelease"))
        .unwrap_or_default();
    assert!(
        recovered.contains("\"CleanSessionTerminals\""),
        "{recovered}"
    );
}

/// HC loss (SIGKILL): the Runtime Supervisor sees its lifetime channel
/// close, stops the sandbox (runsc deletes its state) and exits; the CLI
/// reports the lost coordinator; nothing is left.
#[test]
fn losing_the_coordinator_stops_the_sandbox() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("hc-loss", &default_image());
    let out = kill_coordinator_while_serving(
        &env,
        "echo run >> /workspace/runs; touch /workspace/started; sleep 60",
    );
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    // The CLI had joined before its command started, so it does not retry:
    // the command ran exactly once.
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("runs")).unwrap(),
        "run\n"
    );
    // The sandbox, RS and runsc state go; only the dead coordinator's
    // socket, publication identity, log and trace remain, for the next
    // coordinator to replace (socket, publication, log) and continue
    // (trace) under the flock.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let procs = env.processes();
        let rest: Vec<PathBuf> = runtime_files(&env.home.join("run"))
            .into_iter()
            .filter(|p| {
                !p.ends_with("hc.sock")
                    && !p.ends_with("publication")
                    && !p.ends_with("coordinator.log")
                    && !p.ends_with("gen-1.jsonl")
            })
            .collect();
        if procs.is_empty() && rest.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after HC loss: processes {procs:?}, files {rest:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A new launch in the same Domain recovers generation 1 (bootstrap
    // recovery continues its trace), replaces the stale socket, publication
    // and log, and runs generation 2 with a Trust Anchor of its own.
    let out = env.run(&["default", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.assert_nothing_left();
    let traces = env.traces();
    let names: Vec<String> = traces
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    assert_eq!(names, ["gen-1.jsonl", "gen-2.jsonl"]);
    let recovered = std::fs::read_to_string(&traces[0]).unwrap();
    for action in [
        "\"HostCoordinatorLost\"",
        "\"BootstrapRecover\"",
        "\"RetireGeneration\"",
    ] {
        assert!(
            recovered.contains(action),
            "{action} missing from {recovered}"
        );
    }
}

/// Kills the one process of the scenario that `pick` selects, while a
/// session runs, and returns that session's output.
fn kill_while_serving(env: &Env, what: &str, pick: impl Fn(&str) -> bool) -> Output {
    let session = env.spawn(&[
        "default",
        "--",
        "sh",
        "-c",
        "touch /workspace/started; sleep 120",
    ]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !env.workspace.join("started").exists() {
        assert!(Instant::now() < deadline, "the session never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let found: Vec<String> = env.processes().into_iter().filter(|p| pick(p)).collect();
    assert_eq!(
        found.len(),
        1,
        "{what}: {found:?} among {:?}",
        env.processes()
    );
    let pid = found[0].split(':').next().unwrap().to_owned();
    signal_through_pidfd(&pid, rustix::process::Signal::KILL);
    session.wait_with_output().unwrap()
}

/// The trace's actions from `first` on, in order, keeping only `names`.
fn actions_among(actions: &[String], names: &[&str]) -> Vec<String> {
    actions
        .iter()
        .filter(|a| names.contains(&a.as_str()))
        .cloned()
        .collect()
}

/// FR-12, FR-13: the Runtime Supervisor killed under a live coordinator.
/// The session ends with the runtime's loss, the Domain is torn down and
/// left clean, and the trace records what happened: the supervisor ended
/// on its own, attached runsc followed on its parent-death edge (both
/// observed absent), no session registered after, and no ShutdownRuntime,
/// since nothing was left to stop. The whole trace replays.
#[test]
fn a_killed_runtime_supervisor_ends_the_domain_and_the_trace_says_so() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("rs-killed", &default_image());
    let out = kill_while_serving(&env, "the Runtime Supervisor", |p| {
        p.contains(" __supervisor ") && !p.contains("__wrapper")
    });
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    env.assert_nothing_left();
    let actions = env.trace_actions();
    let runtime = [
        "RuntimeSupervisorEnds",
        "AttachedRunscEnds",
        "AttachedRunscParentDeath",
        "ShutdownRuntime",
        "CloseSession",
        "BeginTeardown",
    ];
    let seen = actions_among(&actions, &runtime);
    assert_eq!(
        seen,
        [
            "CloseSession",
            "RuntimeSupervisorEnds",
            "AttachedRunscParentDeath",
            "BeginTeardown"
        ],
        "{actions:?}"
    );
    assert_processes_observed_absent(&env, &["RuntimeSupervisorEnds", "AttachedRunscParentDeath"]);
}

/// FR-12: attached runsc killed while its supervisor lives. The supervisor
/// stops what is left of the sandbox; the trace records runsc's end first,
/// observed by its exact identity, whichever the coordinator learnt first
/// (the supervisor's report or the session's end). A runsc whose threads
/// are still exiting when the teardown looks is present: the teardown then
/// stops the runtime itself (`ShutdownRuntime`, both observed absent
/// after), which is what the coordinator knew. That race is real under
/// load (the sandbox dies with the first of runsc's threads), so the
/// scenario runs up to three times and must see runsc's end recorded at
/// least once; every run must be one of the two faithful records.
#[test]
fn a_killed_attached_runsc_ends_the_domain_and_the_trace_says_so() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut runs = Vec::new();
    for attempt in 1..=3 {
        let env = Env::new(&format!("runsc-killed-{attempt}"), &default_image());
        let out = kill_while_serving(&env, "attached runsc", |p| {
            p.contains("runsc")
                && p.contains(" run ")
                && !p.contains(" exec ")
                && !p.contains("__wrapper")
                && !p.contains("runsc-sandbox")
                && !p.contains(" gofer ")
                && !p.contains(" boot ")
        });
        assert_ne!(out.status.code(), Some(0), "{}", text(&out.stderr));
        env.assert_nothing_left();
        let actions = env.trace_actions();
        let seen = actions_among(
            &actions,
            &[
                "RuntimeSupervisorEnds",
                "AttachedRunscEnds",
                "AttachedRunscParentDeath",
                "ShutdownRuntime",
            ],
        );
        // The supervisor either exited by itself first or was stopped by
        // the teardown; runsc's end is recorded first when the coordinator
        // saw it gone.
        assert!(
            seen == ["AttachedRunscEnds", "RuntimeSupervisorEnds"]
                || seen == ["AttachedRunscEnds", "ShutdownRuntime"]
                || seen == ["ShutdownRuntime"],
            "{actions:?}"
        );
        let seen: Vec<&str> = seen.iter().map(String::as_str).collect();
        assert_processes_observed_absent(&env, &seen);
        let recorded = seen.first() == Some(&"AttachedRunscEnds");
        runs.push(seen.join(" "));
        if recorded {
            return;
        }
    }
    panic!("runsc's end was never recorded: {runs:?}");
}

/// Each named step is in the trace, and its line carries the processes it
/// ended, observed absent by their exact identities.
fn assert_processes_observed_absent(env: &Env, steps: &[&str]) {
    let lines = env.trace_lines();
    for step in steps {
        let line = lines
            .iter()
            .find(|l| l["action"] == *step)
            .unwrap_or_else(|| panic!("no {step} in {lines:?}"));
        let vars: &[&str] = match *step {
            "ShutdownRuntime" => &["rs", "runsc"],
            s if s.starts_with("RuntimeSupervisor") => &["rs"],
            _ => &["runsc"],
        };
        for var in vars {
            assert_eq!(line["observed"][var], "Absent", "{line}");
        }
    }
}

/// Every `StageProcess` and `CommitProcess` line of the Runtime Supervisor
/// and the attached runsc observed its process Running.
fn assert_launch_processes_observed_running(env: &Env) {
    let lines = env.trace_lines();
    let mut seen = Vec::new();
    for line in &lines {
        let action = line["action"].as_str().unwrap_or_default();
        if action != "StageProcess" && action != "CommitProcess" {
            continue;
        }
        let var = match line["params"]["ps"].as_str() {
            Some("SandboxRuntimeSupervisor") => "rs",
            Some("SandboxAttachedRunsc") => "runsc",
            _ => continue,
        };
        assert_eq!(line["observed"][var], "Running", "{line}");
        seen.push(format!("{action} {var}"));
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "CommitProcess rs",
            "CommitProcess runsc",
            "StageProcess rs",
            "StageProcess runsc"
        ],
        "{lines:?}"
    );
}

/// A recovery whose trace is gone (a reboot empties the runtime directory):
/// the next coordinator rebuilds the generation's state from the Domain
/// Store, records it as its trace's start and recovers from there.
#[test]
fn a_lost_trace_is_recovered_from_the_durable_record() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("lost-trace", &default_image());
    let out = kill_coordinator_while_serving(&env, "touch /workspace/started; sleep 60");
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    wait_no_processes(&env);
    let traces: Vec<PathBuf> = runtime_files(&env.home.join("run"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    assert_eq!(traces.len(), 1, "{traces:?}");
    std::fs::remove_file(&traces[0]).unwrap();
    let out = env.run(&["default", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.assert_nothing_left();
    let kept = env.traces();
    assert_eq!(kept.len(), 2, "{kept:?}");
    let replay = replay_trace(&kept[0]);
    let said = text(&replay.stdout);
    assert!(
        said.contains("from the start state the trace records"),
        "{said}"
    );
}

/// A generation whose trace was tampered with is not recovered (fail
/// closed), and the CLI says why instead of retrying until it gives up.
#[test]
fn an_unrecoverable_generation_is_refused_with_its_reason() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("unrecoverable", &default_image());
    let _ = kill_coordinator_while_serving(&env, "touch /workspace/started; sleep 60");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !env.processes().is_empty() {
        assert!(Instant::now() < deadline, "{:?}", env.processes());
        std::thread::sleep(Duration::from_millis(50));
    }
    let trace = runtime_files(&env.home.join("run"))
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    // A step the model does not allow, in the middle of the trace.
    let original = std::fs::read_to_string(&trace).unwrap();
    let mut lines: Vec<&str> = original.lines().collect();
    let forged = lines[1].replace("AcquireDomainLock", "Publish");
    lines.insert(2, &forged);
    std::fs::write(&trace, lines.join("\n") + "\n").unwrap();
    let started = Instant::now();
    let out = env.run(&["default", "--", "true"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("could not be recovered") && stderr.contains("generation 1"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    // Nothing was adopted or released: the generation is kept as it was.
    let state = env.run(&["state", "default", "--json"]);
    let state: serde_json::Value = serde_json::from_slice(&state.stdout).unwrap();
    assert_ne!(
        state["generations"][0]["durable_decision"], "Vacant",
        "{state}"
    );
    // The refusing coordinator's own trace says so as the model's step: it
    // took the lock, abandoned its bootstrap, wrote nothing; it replays. (It
    // is kept when that coordinator exits, after the CLI has its answer.)
    wait_no_processes(&env);
    let kept = env.traces();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let own = std::fs::read_to_string(&kept[0]).unwrap();
    assert_eq!(
        &actions_of(&own)[1..],
        ["AcquireDomainLock", "AbandonBootstrap"],
        "{own}"
    );
    assert_replays(&kept[0]);
}

/// A generation whose Domain Store is more than one step ahead of its
/// trace is not guessed at: the next coordinator proves the dead runtime
/// absent, records that the record stopped matching
/// (`DurableIdentityDiverges`) and fails closed by the model's
/// `RefuseMismatchedRecord`, leaving the record as it was; the next one
/// refuses the same way, and the trace replays after each (spec 3.3
/// recovery).
#[test]
fn a_store_ahead_of_its_trace_is_refused_by_the_model() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("record-mismatch", &default_image());
    let _ = kill_coordinator_while_serving(&env, "touch /workspace/started; sleep 60");
    wait_no_processes(&env);
    let trace = runtime_files(&env.home.join("run"))
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    // The trace loses its last lines from the publication's snapshot on:
    // the store holds two durable steps more (AcquireSnapshot, Publish).
    let original = std::fs::read_to_string(&trace).unwrap();
    let kept: Vec<&str> = original
        .lines()
        .take_while(|l| !(l.contains("\"AcquireSnapshot\"") && l.contains("\"Publication\"")))
        .collect();
    assert!(kept.len() < original.lines().count(), "{original}");
    std::fs::write(&trace, kept.join("\n") + "\n").unwrap();
    for (attempt, tail) in [
        (
            1,
            &[
                "DurableIdentityDiverges",
                "AcquireDomainLock",
                "RefuseMismatchedRecord",
            ][..],
        ),
        (2, &["AcquireDomainLock", "RefuseMismatchedRecord"][..]),
    ] {
        let out = env.run(&["default", "--", "true"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "attempt {attempt}: {stderr}");
        assert!(
            stderr.contains("could not be recovered")
                && stderr.contains("differ by more than one step"),
            "attempt {attempt}: {stderr}"
        );
        let now = std::fs::read_to_string(&trace).unwrap();
        let steps = actions_of(&now);
        assert!(
            steps.ends_with(&tail.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>()),
            "attempt {attempt}: {steps:?}"
        );
        assert_replays(&trace);
        wait_no_processes(&env);
    }
    // Each refusing coordinator's own trace ends with its abandoned
    // bootstrap, and replays.
    let own = env.traces();
    assert_eq!(own.len(), 2, "{own:?}");
    for t in &own {
        let steps = actions_of(&std::fs::read_to_string(t).unwrap());
        assert_eq!(
            &steps[1..],
            ["AcquireDomainLock", "AbandonBootstrap"],
            "{}",
            t.display()
        );
        assert_replays(t);
    }
    // The record was left as it was.
    let state = env.run(&["state", "default", "--json"]);
    let state: serde_json::Value = serde_json::from_slice(&state.stdout).unwrap();
    assert_eq!(
        state["generations"][0]["durable_decision"], "Published",
        "{state}"
    );
}

/// A CLI that goes away (SIGTERM) ends its session: HC sees the client
/// disconnect, terminates the command (SIGTERM, grace, SIGKILL through the
/// exec client's pidfd), and as it was the last session tears the Domain
/// down.
#[test]
fn a_vanished_client_ends_its_session_and_the_domain() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("client-loss", &default_image());
    let mut session = env.spawn(&[
        "default",
        "--",
        "sh",
        "-c",
        "touch /workspace/started; sleep 60",
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !env.workspace.join("started").exists() {
        assert!(Instant::now() < deadline, "the session never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let clis: Vec<String> = env
        .processes()
        .into_iter()
        .filter(|p| p.contains("lazaret default -- sh"))
        .filter(|p| !p.contains("runuser"))
        .collect();
    assert_eq!(clis.len(), 1, "{clis:?}");
    let pid = clis[0].split(':').next().unwrap().to_owned();
    signal_through_pidfd(&pid, rustix::process::Signal::TERM);
    let _ = session.wait();
    env.assert_nothing_left();
}

/// Git on the host (as root in CI: the repository belongs to the test user).
/// SR-4 through the product (spec 3.5): Git works inside on the
/// shared repository, while neither `.git/config` nor the default hooks can
/// be written, replaced or redirected by any means — including creating a
/// `commondir` or `config.worktree` that would point host Git at another
/// configuration (the Git Sentry filter). Also SR-3: the user's home and the
/// host's `/etc/shadow` are not visible, and `.vscode` (present on the
/// host) and `.idea` (absent) are transient.
#[test]
fn git_works_inside_while_the_host_config_and_hooks_stay_sealed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("git-sentry", &default_image());
    host_git(&env.workspace, &["init", "-q"]);
    std::fs::write(env.workspace.join("a.txt"), "host\n").unwrap();
    host_git(&env.workspace, &["add", "a.txt"]);
    host_git(&env.workspace, &["commit", "-q", "-m", "host"]);
    std::fs::create_dir(env.workspace.join(".vscode")).unwrap();
    std::fs::write(env.workspace.join(".vscode/tasks.json"), "{}\n").unwrap();
    chown_tree(&env.workspace);
    let dot_git = env.workspace.join(".git");
    let config_before = std::fs::read(dot_git.join("config")).unwrap();
    let script = r#"
v() { printf '%s=%s\n' "$1" "$2"; }
cd /workspace
G="git -c user.name=s -c user.email=s@s"
echo x 2>/dev/null >> .git/config; v cfg_append $?
git config user.name evil 2>/dev/null; v git_config $?
ln -s .git/config cfglink; echo x 2>/dev/null >> cfglink; v cfg_via_symlink $?; rm -f cfglink
mv .git moved 2>/dev/null; v mv_git $?
mv .git/hooks .git/h2 2>/dev/null; v mv_hooks $?
rmdir .git/hooks 2>/dev/null; v rmdir_hooks $?
mv .git/config .git/c2 2>/dev/null; v mv_cfg $?
rm -f .git/config 2>/dev/null; v rm_cfg $?
ln .git/config hardlink 2>/dev/null; v hardlink $?
mkdir -p /tmp/evil && printf '[core]\n\thooksPath = /tmp/evil\n' > /tmp/evil/config
echo ../../tmp/evil > .git/commondir 2>/dev/null; v commondir_write $?
ln -s /tmp/evil .git/commondir 2>/dev/null; v commondir_symlink $?
mkdir .git/commondir 2>/dev/null; v commondir_mkdir $?
echo /tmp/evil > .git/scratch; mv .git/scratch .git/commondir 2>/dev/null; v commondir_rename $?
ln .git/scratch .git/commondir 2>/dev/null; v commondir_link $?; rm -f .git/scratch
echo '[core]' > .git/config.worktree 2>/dev/null; v config_worktree $?
echo garbage > .git/HEAD 2>/dev/null; v head_write $?
rm -f .git/HEAD 2>/dev/null; v head_rm $?
echo garbage > .git/HEAD.lock; mv .git/HEAD.lock .git/HEAD 2>/dev/null; v head_rename_garbage $?; rm -f .git/HEAD.lock
mv .git/objects .git/o2 2>/dev/null; v mv_objects $?
mv .git/refs .git/r2 2>/dev/null; v mv_refs $?
printf '#!/bin/sh\necho evil\n' > .git/hooks/pre-commit; v hook_write $?
v vscode "$(ls -A .vscode | wc -l)"
echo '{}' > .vscode/settings.json; v vscode_write $?
mkdir -p .idea && echo '<project/>' > .idea/workspace.xml; v idea_write $?
test -e @HOME@; v home $?
v shadow "$(grep -c "^@USER@:" /etc/shadow)"
echo inside > b.txt; $G add b.txt; v git_add $?
$G commit -q -m inside; v git_commit $?
$G status --porcelain >/dev/null; v git_status $?
$G branch side && $G checkout -q side && $G checkout -q main; v git_branch $?
$G worktree add -q /tmp/wt2 && $G worktree remove /tmp/wt2; v git_worktree $?
exit 0
"#;
    let script = script
        .replace("@HOME@", &env.home.display().to_string())
        .replace("@USER@", &test_user());
    let out = env.run(&["default", "--", "bash", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = guest_results(&text(&out.stdout));
    assert_failed(
        &r,
        &[
            // SR-3: no host path outside the workspace is visible.
            "home",
            "cfg_append",
            "git_config",
            "cfg_via_symlink",
            "mv_git",
            "mv_hooks",
            "rmdir_hooks",
            "mv_cfg",
            "rm_cfg",
            "hardlink",
            "commondir_write",
            "commondir_symlink",
            "commondir_mkdir",
            "commondir_rename",
            "commondir_link",
            "config_worktree",
            // The git directory keeps the shape host Git requires of it.
            "head_write",
            "head_rm",
            "head_rename_garbage",
            "mv_objects",
            "mv_refs",
        ],
    );
    assert_succeeded(
        &r,
        &[
            "hook_write",
            "git_add",
            "git_commit",
            "git_status",
            "git_branch",
            "git_worktree",
        ],
    );
    assert_eq!(r.get("vscode").map(String::as_str), Some("0"), "{r:?}");
    assert_eq!(r.get("shadow").map(String::as_str), Some("0"), "{r:?}");
    assert_succeeded(&r, &["vscode_write", "idea_write"]);
    // The editor directory was hidden behind transient storage.
    assert!(!env.workspace.join(".vscode/settings.json").exists());
    assert!(env.workspace.join(".vscode/tasks.json").is_file());
    // On the host: the configuration is byte-identical, nothing redirects
    // it, no hook arrived, and the sandbox's commit is there.
    assert_eq!(
        std::fs::read(dot_git.join("config")).unwrap(),
        config_before
    );
    for name in [
        "commondir",
        "config.worktree",
        "c2",
        "h2",
        "scratch",
        "o2",
        "r2",
    ] {
        assert!(!dot_git.join(name).exists(), "{name} reached the host");
    }
    assert_eq!(
        std::fs::read_to_string(dot_git.join("HEAD")).unwrap(),
        "ref: refs/heads/main\n"
    );
    assert_eq!(
        host_git(&env.workspace, &["rev-parse", "--git-dir"]),
        ".git\n"
    );
    assert!(
        !dot_git.join("hooks/pre-commit").exists(),
        "hook reached the host"
    );
    assert!(!env.workspace.join("hardlink").exists());
    let log = host_git(&env.workspace, &["log", "--format=%s", "main"]);
    assert_eq!(log, "inside\nhost\n");
    assert_eq!(
        host_git(&env.workspace, &["show", "main:b.txt"]),
        "inside\n"
    );
    assert_eq!(
        host_git(&env.workspace, &["worktree", "list"])
            .lines()
            .count(),
        1
    );
    host_git(&env.workspace, &["fsck", "--no-progress"]);
    env.assert_nothing_left();
    // The host had no .idea: the sandbox's went to transient storage, and
    // the empty directory made for it is gone with the sandbox.
    assert!(!env.workspace.join(".idea").exists());
}

/// The same for a workspace that is a linked worktree: its `.git` file is
/// followed to the common directory, which is served through the filter;
/// the worktree's own admin files cannot be rewritten.
#[test]
fn a_linked_worktree_workspace_is_sealed_through_its_common_directory() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let env = Env::new("git-worktree", &default_image());
    let main = env.home.join("main");
    std::fs::create_dir(&main).unwrap();
    host_git(&main, &["init", "-q"]);
    host_git(&main, &["commit", "-q", "--allow-empty", "-m", "host"]);
    host_git(
        &main,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "ws",
            env.workspace.to_str().unwrap(),
        ],
    );
    chown_tree(&env.home);
    let common = main.join(".git");
    let admin = common.join("worktrees/ws");
    let before: Vec<Vec<u8>> = ["config", "worktrees/ws/commondir", "worktrees/ws/gitdir"]
        .iter()
        .map(|f| std::fs::read(common.join(f)).unwrap())
        .collect();
    let script = r#"
v() { printf '%s=%s\n' "$1" "$2"; }
cd /workspace
C=$(sed -n 's/^gitdir: //p' .git); C=${C%/worktrees/ws}
G="git -c user.name=s -c user.email=s@s"
echo x 2>/dev/null >> "$C/config"; v cfg_append $?
echo x 2>/dev/null > .git; v dot_git_write $?
echo /tmp > "$C/worktrees/ws/commondir" 2>/dev/null; v admin_commondir $?
echo /tmp > "$C/worktrees/ws/gitdir" 2>/dev/null; v admin_gitdir $?
echo '[core]' > "$C/worktrees/ws/config.worktree" 2>/dev/null; v admin_config_worktree $?
mv "$C/worktrees/ws" "$C/worktrees/w9" 2>/dev/null; v admin_move $?
echo /tmp > "$C/commondir" 2>/dev/null; v common_commondir $?
printf '#!/bin/sh\n' > "$C/hooks/post-commit"; v hook_write $?
echo inside > w.txt; $G add w.txt && $G commit -q -m inside; v git_commit $?
exit 0
"#;
    let out = env.run(&["default", "--", "bash", "-c", script]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let r = guest_results(&text(&out.stdout));
    assert_failed(
        &r,
        &[
            "cfg_append",
            "dot_git_write",
            "admin_commondir",
            "admin_gitdir",
            "admin_config_worktree",
            "admin_move",
            "common_commondir",
        ],
    );
    assert_succeeded(&r, &["hook_write", "git_commit"]);
    let after: Vec<Vec<u8>> = ["config", "worktrees/ws/commondir", "worktrees/ws/gitdir"]
        .iter()
        .map(|f| std::fs::read(common.join(f)).unwrap())
        .collect();
    assert_eq!(after, before);
    assert!(!admin.join("config.worktree").exists());
    assert!(!common.join("commondir").exists());
    assert!(!common.join("hooks/post-commit").exists());
    assert_eq!(
        host_git(&main, &["log", "--format=%s", "ws"]),
        "inside\nhost\n"
    );
    env.assert_nothing_left();
}
