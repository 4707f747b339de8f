//! Host escalation end to end (spec 3.8), with real runsc, as the
//! unprivileged test user: a process in the sandbox runs
//! `/.lazaret/sbin/lazaret-escalate`, the Host Coordinator serves the
//! generation's mailbox, and an auto-approved host command runs on the host
//! with its output and status streamed back; a request that differs from
//! the rule by one element is denied and never runs; a request no rule
//! matches is asked on its own session's terminal (a tmux pane) and runs
//! only when the developer types that prompt's code there, or as the
//! developer edited it there; without escalation the sandbox has no
//! mailbox.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests fail by panicking

mod support;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;
use support::terminal::Domain;
use support::{chown_tree, text, Env, ONE_AT_A_TIME};

const CLIENT: &str = "/.lazaret/sbin/lazaret-escalate";

/// The host tool the rule approves: prints its argument and where it runs,
/// writes a marker the sandbox cannot see, and exits 3.
fn host_tool(env: &Env) -> (String, std::path::PathBuf) {
    let dir = env.home.join("tools");
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("ran");
    let tool = dir.join("report");
    std::fs::write(
        &tool,
        format!(
            "#!/bin/sh\nprintf 'host:%s:%s\\n' \"$1\" \"$(cat /proc/sys/kernel/hostname)\"\nprintf 'to stderr\\n' >&2\necho \"$@\" >> {}\nexit 3\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    chown_tree(&dir);
    (tool.display().to_string(), marker)
}

#[test]
fn an_auto_approved_host_command_runs_from_inside_the_sandbox() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let image = support::default_image();
    let env = Env::new("escalation", &image);
    let (tool, marker) = host_tool(&env);
    env.write_config(
        "config.toml",
        &image,
        &format!(
            "[profiles.default.escalation]\nenabled = true\nauto_approve = [{{ executable = \"{tool}\", args = [\"ok\"] }}]\n"
        ),
    );

    // The approved vector: runs on the host (its marker is written, its
    // host name is the host's, not the sandbox's `lazaret`), output on the
    // right streams, status 3.
    let out = env.run(&[
        "default",
        "--",
        CLIENT,
        "--why",
        "the test asks",
        "--",
        &tool,
        "ok",
    ]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "stdout {stdout}\nstderr {stderr}"
    );
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(
        stdout.trim(),
        format!("host:ok:{}", host.trim()),
        "{stderr}"
    );
    assert!(stderr.contains("to stderr"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ok\n");

    // One element more than the rule grants: denied, never run.
    let out = env.run(&[
        "default", "--", CLIENT, "--why", "more", "--", &tool, "ok", "extra",
    ]);
    assert_eq!(out.status.code(), Some(126), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("denied"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ok\n");

    // The executable is checked again before every run, not only when a
    // CLI loads the configuration: within one session, a second hard link
    // made on the host after the launch refuses the next run (status 125,
    // the tool does not run); once the link is gone it runs again.
    let script = format!(
        "C={CLIENT}; T={tool}; \
         $C --why a -- $T ok >/dev/null; echo $? > /workspace/first; \
         while [ ! -e /workspace/go ]; do sleep 0.05; done; \
         $C --why b -- $T ok >/dev/null 2>/workspace/second.err; echo $? > /workspace/second; \
         while [ ! -e /workspace/go2 ]; do sleep 0.05; done; \
         $C --why c -- $T ok >/dev/null; echo $? > /workspace/third"
    );
    let session = env
        .command(&["default", "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let file = |name: &str| env.workspace.join(name);
    let wait = |name: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !file(name).exists() {
            assert!(std::time::Instant::now() < deadline, "waited for {name}");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        std::fs::read_to_string(file(name)).unwrap()
    };
    assert_eq!(wait("first").trim(), "3");
    let second = env.home.join("tools/second-name");
    std::fs::hard_link(&tool, &second).unwrap();
    std::fs::write(file("go"), b"").unwrap();
    assert_eq!(
        wait("second").trim(),
        "125",
        "{}",
        std::fs::read_to_string(file("second.err")).unwrap_or_default()
    );
    assert!(
        std::fs::read_to_string(file("second.err"))
            .unwrap()
            .contains("could not run"),
        "{}",
        std::fs::read_to_string(file("second.err")).unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "ok\nok\n",
        "the linked tool did not run"
    );
    std::fs::remove_file(&second).unwrap();
    std::fs::write(file("go2"), b"").unwrap();
    assert_eq!(wait("third").trim(), "3");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ok\nok\nok\n");
    let status = session.wait_with_output().unwrap().status;
    assert_eq!(status.code(), Some(0));

    // A command string needs a shell: the client refuses it before asking.
    let out = env.run(&["default", "--", CLIENT, "--why", "x", "--", "report ok"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("CommandRequiresShell"),
        "{}",
        text(&out.stderr)
    );

    // The sandbox cannot write results, nor see the host tool's marker.
    let look = format!(
        "touch /.lazaret/escalation/results/x 2>/dev/null && echo wrote; ls /.lazaret/escalation; test -e {} && echo seen; true",
        marker.display()
    );
    let out = env.run(&["default", "--", "sh", "-c", &look]);
    let listing = text(&out.stdout);
    assert!(!listing.contains("wrote"), "{listing}");
    assert!(
        listing.contains("requests") && listing.contains("results"),
        "{listing}"
    );
    assert!(!listing.contains("seen"), "{listing}");

    // Spec 3.8: every step is a step of the coordinator's model trace
    // (which `assert_nothing_left` replays).
    let steps = traced_actions(&env);
    for step in support::AUTO_APPROVED_STEPS
        .into_iter()
        .chain(["RefuseEscalation"])
    {
        assert!(steps.contains(step), "no {step} traced: {steps:?}");
    }
    // Piped sessions only: no request was ever routed to a prompt.
    assert!(!steps.contains("RouteToPrompt"), "{steps:?}");
    env.assert_nothing_left();
    assert_mailboxes_released(&env);
}

/// Spec 3.6: every generation of `env`'s Domain recorded its mailbox as a
/// generation record of its own, and released it with the generation.
fn assert_mailboxes_released(env: &Env) {
    let out = env.run(&["state", "default", "--json"]);
    let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let generations = state["generations"].as_array().cloned().unwrap_or_default();
    assert!(!generations.is_empty(), "{state}");
    for g in &generations {
        let mailbox = &g["mailbox"];
        assert_eq!(mailbox["state"], "Clean", "{g}");
        let path = mailbox["identity_path"].as_str().unwrap_or_default();
        assert!(path.ends_with("/mailbox"), "{g}");
        assert!(!Path::new(path).exists(), "{path} is left");
        assert_eq!(g["clean"], true, "{g}");
    }
}

/// The action names of every kept coordinator trace of `env`.
fn traced_actions(env: &Env) -> std::collections::BTreeSet<String> {
    env.traces()
        .iter()
        .flat_map(|t| {
            std::fs::read_to_string(t)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                .filter_map(|v| v["action"].as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn without_escalation_the_client_finds_no_mailbox() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let image = support::default_image();
    let env = Env::new("no-escalation", &image);
    let out = env.run(&["default", "--", CLIENT, "--why", "x", "--", "/bin/true"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("not enabled"),
        "{}",
        text(&out.stderr)
    );
    assert!(!Path::new(&env.home.join("tools")).exists());
    env.assert_nothing_left();
}

/// The four-digit code `question` names on `screen` ("QUESTION Type
/// CODE and Enter to approve").
fn code_after(screen: &str, question: &str) -> String {
    screen
        .split(question)
        .nth(1)
        .and_then(|rest| rest.strip_prefix(" Type "))
        .and_then(|rest| rest.get(..4))
        .filter(|c| c.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or_else(|| panic!("{question} names its code:\n{screen}"))
        .to_owned()
}

fn shell_prompt(screen: &str) -> bool {
    screen.trim_end().ends_with("/workspace#")
}

/// Spec 3.8, DX-4, FR-5: with no auto-approval rule, a request is asked on
/// the requesting session's terminal only, naming the profile, the exact
/// vector and the justification; the other session's terminal never
/// shows it and keeps working; its code runs the command on the host, an
/// edit shown back and approved by its own code runs the edited command
/// instead, anything else denies it; a piped session has no terminal to
/// ask on and is denied.
#[test]
fn a_request_is_asked_on_its_own_terminal_and_runs_only_when_approved() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let image = support::default_image();
    let domain = Domain::new("prompt-escalation");
    let (tool, marker) = host_tool(&domain.env);
    domain.env.write_config(
        "config.toml",
        &image,
        "[profiles.default.escalation]\nenabled = true\n",
    );
    let a = domain.tmux("esc-a", &domain.pane("a", "default"));
    a.wait_for("session a's shell", Duration::from_secs(90), shell_prompt);
    let b = domain.tmux("esc-b", &domain.pane("b", "default"));
    b.wait_for("session b's shell", Duration::from_secs(60), shell_prompt);

    let ask = |word: &str| {
        format!("clear; {CLIENT} --why 'deploy the {word} build' -- {tool} {word}; echo rc=$?")
    };
    a.keys(&[&ask("approved"), "Enter"]);
    let question = "Run it on the host as you?";
    // The prompt of this request: an earlier one stays on the screen
    // until `clear` runs.
    let asked = |word: &str| {
        let line = format!("[1] {word}");
        move |s: &str| s.contains(question) && s.contains(&line)
    };
    a.wait_for("the prompt", Duration::from_secs(20), asked("approved"));
    let screen = a.screen();
    for shown in [
        "profile  default",
        &format!("[0] {tool}"),
        "[1] approved",
        "reason   deploy the approved build",
    ] {
        assert!(screen.contains(shown), "{shown} in:\n{screen}");
    }
    // The other session's terminal shows nothing of it and still works.
    b.keys(&["clear; echo b-$((6*7))", "Enter"]);
    b.wait_for("session b's echo", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "b-42") && shell_prompt(s)
    });
    assert!(!b.screen().contains(question), "{}", b.screen());
    assert!(!marker.exists(), "nothing runs before the answer");
    // The prompt's own code approves (drawn by the CLI for this prompt).
    let code = code_after(&screen, question);
    a.keys(&[&code, "Enter"]);
    a.wait_for(
        "the approved command's status",
        Duration::from_secs(20),
        |s| s.lines().any(|l| l.trim() == "rc=3") && shell_prompt(s),
    );
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let screen = a.screen();
    assert!(
        screen.contains("approved; the command runs on the host"),
        "{screen}"
    );
    assert!(
        screen.contains(&format!("host:approved:{}", host.trim())),
        "{screen}"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "approved\n");

    // FR-5: edited, then approved: `e` opens an edit line holding the
    // shown vector; the developer starts over (Ctrl-U) and types another;
    // it is shown back argument by argument with a code of its own, which
    // runs it (and only it) on the host.
    a.keys(&[&ask("original"), "Enter"]);
    a.wait_for(
        "the third prompt",
        Duration::from_secs(20),
        asked("original"),
    );
    a.keys(&["e", "Enter"]);
    let edit_line = format!("> {tool} original");
    a.wait_for("the edit line", Duration::from_secs(10), |s| {
        s.contains(&edit_line)
    });
    a.keys(&["C-u"]);
    a.keys(&[&format!("{tool} 'edited value'"), "Enter"]);
    let again = "Run this on the host as you?";
    a.wait_for("the edited vector", Duration::from_secs(10), |s| {
        s.contains(again) && s.contains("[1] edited\\ value")
    });
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "approved\n",
        "nothing runs before the edit is approved"
    );
    let edit_code = code_after(&a.screen(), again);
    a.keys(&[&edit_code, "Enter"]);
    a.wait_for(
        "the edited command's status",
        Duration::from_secs(20),
        |s| s.lines().any(|l| l.trim() == "rc=3") && shell_prompt(s),
    );
    assert!(
        a.screen()
            .contains(&format!("host:edited value:{}", host.trim())),
        "{}",
        a.screen()
    );
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "approved\nedited value\n",
        "the edited vector ran, the requested one did not"
    );

    // Denied at the prompt: never runs.
    a.keys(&[&ask("denied"), "Enter"]);
    a.wait_for(
        "the second prompt",
        Duration::from_secs(20),
        asked("denied"),
    );
    // Anything but this prompt's code denies, `yes` included.
    a.keys(&["yes", "Enter"]);
    a.wait_for("the denied status", Duration::from_secs(20), |s| {
        s.lines().any(|l| l.trim() == "rc=126") && shell_prompt(s)
    });
    assert!(a.screen().contains("lazaret: denied"), "{}", a.screen());
    // The terminal is the sandbox's again.
    a.keys(&["clear; echo a-$((6*7))", "Enter"]);
    a.wait_for("session a's echo", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "a-42") && shell_prompt(s)
    });

    // A piped session has no terminal to ask on: denied at once.
    let out = domain
        .env
        .run(&["default", "--", CLIENT, "--why", "x", "--", &tool, "piped"]);
    assert_eq!(out.status.code(), Some(126), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap(),
        "approved\nedited value\n"
    );

    a.keys(&["exit", "Enter"]);
    assert_eq!(domain.status("a", &a), "0");
    b.keys(&["exit", "Enter"]);
    assert_eq!(domain.status("b", &b), "0");
    drop((a, b));
    // The traces are kept once the Domain is torn down.
    domain.env.assert_nothing_left();
    let steps = traced_actions(&domain.env);
    for step in [
        "RouteToPrompt",
        "ApproveEscalation",
        "DenyEscalation",
        "RefuseEscalation",
        "StartHostProcess",
        "ResumeTerminalForwarding",
    ] {
        assert!(steps.contains(step), "no {step} traced: {steps:?}");
    }
}
