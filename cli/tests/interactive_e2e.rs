//! End-to-end: `lazaret <profile>` on a terminal is an interactive PTY
//! session (spec 3.4, FR-14, FR-15, DX-5). A tmux pane is
//! the user's terminal; the CLI runs in it as the unprivileged test user.
//! The scenario ends with the chain's leak check.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

mod support;
use support::terminal::{shell_quote, Domain, Tmux};
use support::{runtime_files, signal_through_pidfd};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn prompt(s: &str) -> bool {
    s.trim_end().ends_with("/workspace#")
}

#[test]
fn a_terminal_session_resizes_takes_ctrl_c_and_restores_the_terminal() {
    let domain = Domain::new("interactive-e2e");
    let tmux = domain.tmux("main", &domain.pane("main", "default"));
    tmux.wait_for("the first prompt", Duration::from_secs(60), prompt);

    // FR-14: the guest sees the pane's size; FR-15: a resize reaches it.
    tmux.keys(&["stty size", "Enter"]);
    tmux.wait_for("30 100", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "30 100") && prompt(s)
    });
    tmux.run(&["resize-window", "-t", "s", "-x", "120", "-y", "40"]);
    std::thread::sleep(Duration::from_millis(300));
    tmux.keys(&["clear; stty size", "Enter"]);
    tmux.wait_for("40 120", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "40 120") && prompt(s)
    });

    // Ctrl-C interrupts the foreground job, not the session.
    // `clear` wipes the echoed command line, so the wait keys on a marker
    // the shell prints after clearing and just before `sleep` starts.
    tmux.keys(&["clear; echo sleep-starts; sleep 100", "Enter"]);
    tmux.wait_for("sleep to start", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "sleep-starts") && !prompt(s)
    });
    std::thread::sleep(Duration::from_millis(500));
    tmux.keys(&["C-c"]);
    let took = tmux.wait_for("the prompt after Ctrl-C", Duration::from_secs(5), prompt);
    eprintln!("Ctrl-C to the next prompt: {took:?}");

    // Ctrl-Z stops the foreground job (SIGTSTP to the terminal's
    // foreground group); job control sees it stopped, `fg` resumes it and
    // Ctrl-C then ends it.
    tmux.keys(&["clear; echo sleep-again; sleep 100", "Enter"]);
    tmux.wait_for("sleep to start again", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "sleep-again") && !prompt(s)
    });
    std::thread::sleep(Duration::from_millis(500));
    tmux.keys(&["C-z"]);
    let took = tmux.wait_for("the job to stop", Duration::from_secs(5), |s| {
        s.lines()
            .any(|l| l.contains("Stopped") && l.contains("sleep 100"))
            && prompt(s)
    });
    eprintln!("Ctrl-Z to the stopped-job prompt: {took:?}");
    tmux.keys(&["clear; jobs -l; echo jobs-listed", "Enter"]);
    tmux.wait_for(
        "jobs to list the stopped sleep",
        Duration::from_secs(10),
        |s| {
            s.lines().any(|l| l.trim() == "jobs-listed")
                && s.lines().any(|l| {
                    l.starts_with("[1]+") && l.contains("Stopped") && l.contains("sleep 100")
                })
                && prompt(s)
        },
    );
    tmux.keys(&["clear; fg", "Enter"]);
    tmux.wait_for("fg to resume sleep", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "sleep 100") && !prompt(s)
    });
    std::thread::sleep(Duration::from_millis(300));
    tmux.keys(&["C-c"]);
    tmux.wait_for(
        "the prompt after fg and Ctrl-C",
        Duration::from_secs(5),
        prompt,
    );
    tmux.keys(&["clear; jobs; echo no-jobs-left", "Enter"]);
    tmux.wait_for("an empty job table", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "no-jobs-left")
            && !s.lines().any(|l| l.starts_with("[1]"))
            && prompt(s)
    });

    // The command's status is the CLI's, and the terminal is as it was.
    tmux.keys(&["exit 3", "Enter"]);
    assert_eq!(domain.status("main", &tmux), "3");
    drop(tmux);
    domain.finish();
}

/// Host PIDs whose command line contains every one of `needles`, with
/// `argv[0]` equal to `program` when given.
fn pids_with(program: Option<&str>, needles: &[&str]) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.parse::<i32>() else {
            continue;
        };
        let raw = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let argv: Vec<String> = raw
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let line = argv.join(" ");
        if program.is_some_and(|p| argv.first().map(String::as_str) != Some(p)) {
            continue;
        }
        if needles.iter().all(|n| line.contains(n)) {
            found.push(pid);
        }
    }
    found
}

fn alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Spec 3.4 release order on client loss: a CLI killed with SIGKILL gets its
/// session terminal's ReleaseIntent recorded (the model's CloseSession, in
/// the live trace before any signal), then its guest group SIGHUP, then (the
/// guest ignores SIGTERM and traps SIGHUP) SIGTERM and SIGKILL after the
/// graces; the exec client is reaped.
/// Another session holds the sandbox open all along, a third joins after
/// the release, and nothing is left at the end.
#[test]
fn a_killed_client_releases_its_guest_group_in_order_and_the_domain_lives_on() {
    let domain = Domain::new("release-e2e");
    let holder = domain.tmux("holder", &domain.pane("holder", "default"));
    holder.wait_for("the holder's prompt", Duration::from_secs(60), prompt);
    // Scoped to this Domain (its runsc root is under its home): other
    // end-to-end tests run their own exec clients at the same time.
    let home = domain.home.display().to_string();
    let exec_clients = || pids_with(None, &["runsc", " exec ", "--internal-pid-file", &home]);
    let before: Vec<i32> = exec_clients();
    assert_eq!(before.len(), 1, "the holder's exec client: {before:?}");

    // The guest traps SIGHUP (records it) and ignores SIGTERM: only
    // SIGKILL ends it.
    let script = "trap 'echo hup >> /workspace/got-hup' HUP; trap '' TERM; echo trapped-ready; while :; do sleep 1; done";
    let victim = domain.tmux(
        "victim",
        &domain.pane(
            "victim",
            &format!("default -- bash -c {}", shell_quote(script)),
        ),
    );
    victim.wait_for("the trapping guest", Duration::from_secs(20), |s| {
        s.lines().any(|l| l.trim() == "trapped-ready")
    });
    let victim_exec: Vec<i32> = exec_clients()
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert_eq!(victim_exec.len(), 1, "the victim's exec client");
    let cli = pids_with(Some(env!("CARGO_BIN_EXE_lazaret")), &["trapped-ready"]);
    assert_eq!(cli.len(), 1, "the victim's CLI: {cli:?}");
    std::thread::sleep(Duration::from_millis(300));

    let killed = Instant::now();
    signal_through_pidfd(&cli[0].to_string(), rustix::process::Signal::KILL);
    // The moment the guest has its SIGHUP, the live trace already holds the
    // CloseSession step (its store transaction comes first).
    let got_hup = domain.workspace.join("got-hup");
    while !got_hup.exists() {
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "the guest group got no SIGHUP within 20 s"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let trace = live_trace(&domain.home);
    assert!(
        trace.contains("\"CloseSession\""),
        "SIGHUP reached the guest before its ReleaseIntent was recorded:\n{trace}"
    );
    while alive(victim_exec[0]) {
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "the victim's exec client outlived its CLI by 20 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let released = killed.elapsed();
    eprintln!("CLI SIGKILL to exec client reaped (release done): {released:?}");
    let hup = std::fs::read_to_string(domain.workspace.join("got-hup")).unwrap_or_default();
    assert!(
        hup.lines().any(|l| l == "hup"),
        "the guest group got no SIGHUP: {hup:?}"
    );
    // SIGHUP, 1 s grace, SIGTERM (ignored), 1 s grace, SIGKILL.
    assert!(
        released >= Duration::from_secs(2),
        "released after {released:?}: the graces were not waited out"
    );
    assert!(
        released < Duration::from_secs(10),
        "release took {released:?}"
    );

    // The guest group is gone, seen from the session that stayed.
    holder.keys(&[
        "clear; echo left=$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'trapped-read[y]')",
        "Enter",
    ]);
    holder.wait_for("the guest process count", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "left=0") && prompt(s)
    });

    // The Domain lives on: a new session joins after the release.
    let joiner = domain.tmux(
        "joiner",
        &domain.pane(
            "joiner",
            "default -- bash -c 'echo joined-after-release; exit 5'",
        ),
    );
    assert_eq!(domain.status("joiner", &joiner), "5");
    assert!(joiner
        .screen()
        .lines()
        .any(|l| l.trim() == "joined-after-release"));

    holder.keys(&["exit", "Enter"]);
    assert_eq!(domain.status("holder", &holder), "0");
    drop((holder, victim, joiner));
    domain.finish();
}

/// The live trace of the Domain under `home` (one generation running).
fn live_trace(home: &Path) -> String {
    let live: Vec<PathBuf> = runtime_files(&home.join("run"))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("gen-"))
                && p.extension().is_some_and(|e| e == "jsonl")
        })
        .collect();
    assert_eq!(live.len(), 1, "the live trace: {live:?}");
    std::fs::read_to_string(&live[0]).unwrap_or_default()
}

/// Spec 3.4 acquisition steps 3-5: an interactive command starts only once
/// its guest leader identity is recorded (the model's RegisterSession, the
/// terminal's Running record), and terminal events are taken only from
/// then on. A command that ends at once (`true`) is still registered (its
/// identity is read while Lazaret's guest leader holds it), and keys typed
/// before the admission reach the command after it, once.
#[test]
fn a_command_starts_only_after_its_terminal_is_recorded_running() {
    let domain = Domain::new("admission-e2e");
    let holder = domain.tmux("holder", &domain.pane("holder", "default"));
    holder.wait_for("the holder's prompt", Duration::from_secs(60), prompt);
    let actions = || -> Vec<String> {
        live_trace(&domain.home)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["action"].as_str().map(str::to_owned))
            .collect()
    };
    let registered = || actions().iter().filter(|a| *a == "RegisterSession").count();
    assert_eq!(registered(), 1, "{:?}", actions());

    for n in 0..3 {
        let tag = format!("fast{n}");
        let fast = domain.tmux(&tag, &domain.pane(&tag, "default -- true"));
        assert_eq!(domain.status(&tag, &fast), "0");
        assert_eq!(registered(), 2 + n, "{:?}", actions());
    }

    // Typed while the CLI starts: held until the session is admitted (the
    // guest leader would refuse any byte but the admission's), then read
    // by the command.
    let typed = domain.tmux(
        "typed",
        &domain.pane(
            "typed",
            "default -- bash -c 'read -r line; echo \"got=$line\"; exit 7'",
        ),
    );
    typed.keys(&["typed-ahead", "Enter"]);
    assert_eq!(domain.status("typed", &typed), "7");
    let screen = typed.screen();
    assert!(
        screen.lines().any(|l| l.trim() == "got=typed-ahead"),
        "{screen}"
    );
    assert!(!screen.contains("not admitted"), "{screen}");
    assert_eq!(registered(), 5, "{:?}", actions());

    holder.keys(&["exit", "Enter"]);
    assert_eq!(domain.status("holder", &holder), "0");
    drop((holder, typed));
    domain.finish();
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Round trips of typed commands in `tmux`: `echo rt-N` until `rt-N` is on
/// the screen.
fn round_trips(tmux: &Tmux, label: &str, count: usize) -> Vec<Duration> {
    (0..count)
        .map(|n| {
            let mark = format!("{label}-{n}");
            tmux.keys(&[&format!("clear; echo {mark}"), "Enter"]);
            tmux.wait_for(&mark, Duration::from_secs(10), |s| {
                s.lines().any(|l| l.trim() == mark)
            })
        })
        .collect()
}

/// Spec 3.4: bounded queues and PTY backpressure; one session's data
/// cannot consume another session's capacity. A flooding session, first
/// read by its terminal and then with its CLI stopped (nobody reads), does
/// not slow the other session's interactive round trips beyond a generous
/// bound, and the Host Coordinator does not buffer the flood.
#[test]
fn a_flooding_session_does_not_stall_another_sessions_echo() {
    let domain = Domain::new("flood-e2e");
    let quiet = domain.tmux("quiet", &domain.pane("quiet", "default"));
    quiet.wait_for(
        "the quiet session's prompt",
        Duration::from_secs(60),
        prompt,
    );
    let idle = round_trips(&quiet, "idle", 5);

    let flood = "echo flood-starts; yes flood-line-of-text | head -c 200000000000; echo flood-done";
    let flooder = domain.tmux(
        "flooder",
        &domain.pane(
            "flooder",
            &format!("default -- bash -c {}", shell_quote(flood)),
        ),
    );
    flooder.wait_for("the flood", Duration::from_secs(20), |s| {
        s.contains("flood-line-of-text")
    });
    // A child the coordinator forked but has not exec'd yet shows the
    // coordinator's command line too; the coordinator is the one whose
    // parent is not a match.
    let matches = pids_with(
        None,
        &["__coordinator", &domain.workspace.display().to_string()],
    );
    let coordinator: Vec<i32> = matches
        .iter()
        .copied()
        .filter(|p| !parent_of(*p).is_some_and(|pp| matches.contains(&pp)))
        .collect();
    assert_eq!(
        coordinator.len(),
        1,
        "one Host Coordinator: {coordinator:?}"
    );
    let flowing = round_trips(&quiet, "flowing", 5);

    // Nobody reads the flooding session now: its queue fills, the guest
    // blocks on the PTY, and the other session stays interactive.
    let cli = pids_with(Some(env!("CARGO_BIN_EXE_lazaret")), &["flood-starts"]);
    assert_eq!(cli.len(), 1, "the flooding CLI: {cli:?}");
    let runuser = parent_of(cli[0]).filter(|p| {
        std::fs::read(format!("/proc/{p}/cmdline"))
            .unwrap_or_default()
            .starts_with(b"runuser")
    });
    signal_through_pidfd(&cli[0].to_string(), rustix::process::Signal::STOP);
    std::thread::sleep(Duration::from_millis(500));
    let rss_stopped = rss_kib(coordinator[0]);
    let stalled = round_trips(&quiet, "stalled", 5);
    std::thread::sleep(Duration::from_secs(1));
    let rss_later = rss_kib(coordinator[0]);
    eprintln!(
        "round trips idle {idle:?}\n  while the flood is read {flowing:?}\n  while its client is stopped {stalled:?}\n  coordinator RSS {rss_stopped} KiB -> {rss_later} KiB"
    );
    for rt in flowing.iter().chain(&stalled) {
        assert!(
            *rt < Duration::from_secs(3),
            "a round trip took {rt:?} during the other session's flood"
        );
    }
    assert!(
        rss_later < rss_stopped + 8 * 1024,
        "the coordinator grew from {rss_stopped} to {rss_later} KiB while the flood was unread"
    );

    // The flood was still running (head had not finished); Ctrl-C ends it.
    signal_through_pidfd(&cli[0].to_string(), rustix::process::Signal::CONT);
    // runuser, the CLI's parent, stops itself when its child stops
    // (util-linux su-common) and needs its own SIGCONT.
    if let Some(parent) = runuser {
        signal_through_pidfd(&parent.to_string(), rustix::process::Signal::CONT);
    }
    assert!(!domain.home.join("flooder.status").exists());
    std::thread::sleep(Duration::from_millis(300));
    flooder.keys(&["C-c"]);
    assert_eq!(domain.status("flooder", &flooder), "130");
    quiet.keys(&["exit", "Enter"]);
    assert_eq!(domain.status("quiet", &quiet), "0");
    drop((quiet, flooder));
    domain.finish();
}

/// FR-8, FR-15, DX-5: the keys are signals only when the session
/// terminal's line discipline says so. Under `stty raw -echo` Ctrl-C,
/// Ctrl-\ and Ctrl-Z reach the program as the bytes 0x03, 0x1c, 0x1a and it
/// survives; after `stty intr ^X`, Ctrl-X interrupts and Ctrl-C is a plain
/// byte; back in cooked mode Ctrl-C interrupts the foreground job again.
#[test]
fn raw_mode_keys_are_bytes_and_signals_follow_the_line_discipline() {
    let domain = Domain::new("interactive-keys");
    let tmux = domain.tmux("keys", &domain.pane("keys", "default"));
    tmux.wait_for("the first prompt", Duration::from_secs(60), prompt);

    tmux.keys(&[
        "clear; echo raw-starts; stty raw -echo; od -An -tx1 -N3; stty sane; echo survived-raw",
        "Enter",
    ]);
    tmux.wait_for("raw mode", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "raw-starts")
    });
    std::thread::sleep(Duration::from_millis(500));
    tmux.keys(&["C-c", "C-\\", "C-z"]);
    tmux.wait_for("the three bytes", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "03 1c 1a")
            && s.lines().any(|l| l.trim() == "survived-raw")
            && prompt(s)
    });

    // `stty intr ^X`: Ctrl-C is an ordinary byte `cat -v` shows, Ctrl-X
    // interrupts it (status 130; bash abandons the rest of an interrupted
    // command line, so the status is asked for by the next one).
    tmux.keys(&["clear; stty intr ^X; echo cat-starts; cat -v", "Enter"]);
    tmux.wait_for("cat to start", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "cat-starts") && !prompt(s)
    });
    std::thread::sleep(Duration::from_millis(500));
    tmux.keys(&["C-c", "Enter"]);
    tmux.wait_for("^C printed by cat", Duration::from_secs(10), |s| {
        s.lines().filter(|l| l.trim() == "^C").count() >= 2 && !prompt(s)
    });
    tmux.keys(&["C-x"]);
    tmux.wait_for("Ctrl-X to interrupt cat", Duration::from_secs(10), prompt);
    tmux.keys(&["echo cat-status=$?; stty sane", "Enter"]);
    tmux.wait_for("cat's status", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "cat-status=130") && prompt(s)
    });

    // Cooked mode again (`stty sane`): Ctrl-C interrupts the foreground job.
    tmux.keys(&["clear; echo sleep-starts; sleep 100", "Enter"]);
    tmux.wait_for("sleep to start", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "sleep-starts") && !prompt(s)
    });
    std::thread::sleep(Duration::from_millis(500));
    tmux.keys(&["C-c"]);
    tmux.wait_for("Ctrl-C to interrupt sleep", Duration::from_secs(5), prompt);
    tmux.keys(&["echo sleep-status=$?", "Enter"]);
    tmux.wait_for("sleep's status", Duration::from_secs(10), |s| {
        s.lines().any(|l| l.trim() == "sleep-status=130") && prompt(s)
    });

    tmux.keys(&["exit 0", "Enter"]);
    assert_eq!(domain.status("keys", &tmux), "0");
    drop(tmux);
    domain.finish();
}

/// The guest side of the hygiene test: markers around an OSC 52 written in
/// three pieces 0.2 s apart (so each reaches the CLI in its own message),
/// an OSC 0 title and a colour CSI split the same way, then OSC 52 in its
/// UTF-8 C1 form and wrapped for tmux. With `clip_to_stderr` the clipboard
/// sequences go to stderr.
fn hygiene_script(tag: &str, clip_to_stderr: bool) -> String {
    let clip = if clip_to_stderr { " >&2" } else { "" };
    format!(
        "printf '{tag}-start\\n'; \
         printf '\\033]5'{clip}; sleep 0.2; printf '2;c;aGVsbG8='{clip}; sleep 0.2; \
         printf '\\007'{clip}; \
         printf '\\033]0;{tag}-'; sleep 0.2; printf 'title\\007'; \
         printf '\\033['; sleep 0.2; printf '31m{tag}-red\\033[0m\\n'; \
         printf '\\302\\23552;c;aGk=\\007'{clip}; \
         printf '\\033Ptmux;\\033\\033]52;c;aGk=\\007\\033\\\\'{clip}; \
         printf '{tag}-end\\n'"
    )
}

impl Domain {
    /// [`Domain::pane`] with the CLI's stdin from `echo` (the piped form).
    fn piped_pane(&self, tag: &str, cli_args: &str) -> String {
        self.pane_with_stdin(tag, "echo | ", cli_args)
    }

    /// A tmux server that takes OSC 52 from its panes into paste buffers
    /// (`set-clipboard on`), set before `pane` starts.
    fn clipboard_tmux(&self, tag: &str, pane: &str) -> Tmux {
        let tmux = self.tmux(tag, "sleep 1000");
        tmux.run(&["set-option", "-s", "set-clipboard", "on"]);
        tmux.run(&["respawn-pane", "-k", "-t", "s", pane]);
        tmux
    }
}

impl Tmux {
    fn buffers(&self) -> String {
        String::from_utf8_lossy(&self.run(&["list-buffers"]).stdout).into_owned()
    }

    fn title(&self) -> String {
        let out = self.run(&["display-message", "-p", "-t", "s", "#{pane_title}"]);
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

/// Spec README 'Terminal output hygiene': a guest's OSC 52, split across
/// writes, in C1 form or wrapped for tmux, never reaches the developer's
/// terminal, interactive or piped, on stdout or stderr; the title and
/// colour sequences around it do, and so does the text.
#[test]
fn sandbox_output_cannot_write_the_terminals_clipboard() {
    let domain = Domain::new("hygiene-e2e");

    // The control: this tmux takes an OSC 52 from a plain pane.
    let control = domain.clipboard_tmux(
        "control",
        "printf '\\033]52;c;aGVsbG8=\\007'; echo control-done; sleep 100",
    );
    control.wait_for("the control", Duration::from_secs(10), |s| {
        s.contains("control-done")
    });
    let buffers = control.buffers();
    assert!(
        buffers.contains("hello"),
        "tmux did not take a plain OSC 52, the test would prove nothing: {buffers:?}"
    );
    drop(control);

    for (tag, piped, to_stderr) in [
        ("tty", false, false),
        ("piped", true, false),
        ("piperr", true, true),
    ] {
        let cli = format!(
            "default -- bash -c {}",
            shell_quote(&hygiene_script(tag, to_stderr))
        );
        let pane = if piped {
            domain.piped_pane(tag, &cli)
        } else {
            domain.pane(tag, &cli)
        };
        let tmux = domain.clipboard_tmux(tag, &pane);
        let (start_marker, end_marker) = (format!("{tag}-start"), format!("{tag}-end"));
        tmux.wait_for(&end_marker, Duration::from_secs(60), |s| {
            s.contains(&end_marker)
        });
        assert_eq!(domain.status(tag, &tmux), "0", "{}", tmux.screen());
        let screen = tmux.screen();
        let start = screen.lines().position(|l| l.trim() == start_marker);
        let end = screen.lines().position(|l| l.trim() == end_marker);
        assert_eq!(tmux.buffers(), "", "{tag}: a clipboard write reached tmux");
        // tmux reads no C1 controls: an OSC 52 in C1 form that got through
        // would show its payload as text, before the end marker.
        assert!(!screen.contains("aGk"), "{tag}: a payload shows:\n{screen}");
        assert!(
            start.is_some_and(|s| end.is_some_and(|e| s < e)),
            "{tag}: the markers did not print on lines of their own:\n{screen}"
        );
        assert_eq!(tmux.title(), format!("{tag}-title"), "{tag}: the title");
        let styled =
            String::from_utf8_lossy(&tmux.run(&["capture-pane", "-p", "-e", "-t", "s"]).stdout)
                .into_owned();
        assert!(
            styled.contains(&format!("\u{1b}[31m{tag}-red")),
            "{tag}: the colour did not reach the terminal:\n{styled:?}"
        );
        drop(tmux);
    }
    domain.finish();
}
