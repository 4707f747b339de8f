//! The crash-point suite (spec 3.3 recovery, 3.6; docs/crash-points.md):
//! real processes as the unprivileged test user, built with the
//! `crash-points` feature (docs/crash-points.md).
//!
//! Each scenario first runs once with `LAZARET_CRASH_LOG` set and no crash:
//! the log lists every crash point its processes passed (each Host
//! Coordinator model step before and after its trace line, the Runtime
//! Supervisor's acquisition of the attached runsc, each broker wrapper before
//! exec, the CLI's session), so the list comes from a real run and cannot
//! drift from the code. Then, for every point: the scenario runs again with
//! `LAZARET_CRASH_POINT` naming it (the process SIGKILLs itself there), every
//! CLI either finishes or reports the failure within a bounded time, the
//! Domain Store still reads as a validated snapshot, a new launch in the same
//! Domain recovers and works, and afterwards nothing is left (process, mount,
//! runtime file, runsc state, socket), the store holds only released
//! generations and every kept trace replays against the model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed unwrap is a failed test

mod support;
use support::{chown_tree, default_image, replay_trace, runtime_files, test_user, text};

use std::collections::BTreeSet;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a CLI may take in a crash run before it counts as hung.
const CLI_LIMIT: Duration = Duration::from_secs(60);
/// How long the Domain's processes and files may take to go.
const QUIET_LIMIT: Duration = Duration::from_secs(20);

/// One Domain for a whole scenario (its prepared image is reused), owned by
/// the test user.
struct Env {
    home: PathBuf,
    workspace: PathBuf,
    image: String,
    /// The profile enables host escalation with one auto-approved host
    /// tool ([`HOST_TOOL`]).
    escalation: bool,
    /// Traces already replayed (an archived trace does not change).
    replayed: BTreeSet<PathBuf>,
}

/// The escalation scenario's host tool, under the test user's HOME.
const HOST_TOOL: &str = "tools/tool";

/// An empty HOME for the test user: config, runtime dir, workspace and the
/// crash logs' directory; with `escalation`, a host tool the profile
/// auto-approves.
fn create_home(home: &Path, image: &str, escalation: bool) {
    let _ = Command::new("rm").arg("-rf").arg(home).status();
    for dir in [
        home.join(".config/lazaret"),
        home.join("run"),
        home.join("logs"),
        home.join("ws"),
    ] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::set_permissions(home.join("run"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let config = home.join(".config/lazaret/config.toml");
    let mut text = format!(
        "schema = \"lazaret-trusted-host-config-v1\"\n[profiles.default]\nimage = \"{image}\"\n"
    );
    if escalation {
        let tool = home.join(HOST_TOOL);
        std::fs::create_dir_all(tool.parent().unwrap()).unwrap();
        std::fs::write(&tool, "#!/bin/sh\necho tool\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        text.push_str(&format!(
            "[profiles.default.escalation]\nenabled = true\nauto_approve = [{{ executable = \"{}\", args = [] }}]\n",
            tool.display()
        ));
    }
    std::fs::write(&config, text).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    chown_tree(home);
}

impl Env {
    fn new(name: &str, image: &str) -> Env {
        Self::with(name, image, false)
    }

    fn with(name: &str, image: &str, escalation: bool) -> Env {
        let home = PathBuf::from(format!("/tmp/lazaret-crash-points-{name}"));
        create_home(&home, image, escalation);
        Env {
            workspace: home.join("ws"),
            home,
            image: image.to_owned(),
            escalation,
            replayed: BTreeSet::new(),
        }
    }

    /// A new, empty crash log the test user's processes can append to.
    fn fresh_log(&self, name: &str) -> PathBuf {
        let path = self.home.join("logs").join(name);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(path.with_extension("fired"));
        path
    }

    /// After a failed point: SIGKILL (through pidfds) whatever of the
    /// Domain still runs and start over with an empty Domain, so the next
    /// point is not judged on this one's leftovers.
    fn reset(&mut self) {
        for p in self.processes() {
            let raw: i32 = p.split(':').next().unwrap().parse().unwrap();
            let pid = rustix::process::Pid::from_raw(raw).unwrap();
            if let Ok(fd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
                let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
            }
        }
        let _ = self.nothing_left();
        create_home(&self.home, &self.image, self.escalation);
        self.replayed.clear();
    }

    /// `lazaret ARGS` as the test user, with a crash point and a crash log
    /// when given.
    fn command(&self, args: &[&str], point: Option<&str>, log: Option<&Path>) -> Command {
        let lazaret = env!("CARGO_BIN_EXE_lazaret");
        let mut vars = vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
            format!("HOME={}", self.home.display()),
            format!("XDG_RUNTIME_DIR={}", self.home.join("run").display()),
            format!("USER={}", test_user()),
        ];
        if let Some(p) = point {
            vars.push(format!("LAZARET_CRASH_POINT={p}"));
        }
        if let Some(l) = log {
            vars.push(format!("LAZARET_CRASH_LOG={}", l.display()));
        }
        let mut cmd = if rustix::process::geteuid().is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", &test_user(), "--", "env", "-i"]);
            c.args(&vars).arg(lazaret);
            c
        } else {
            let mut c = Command::new("env");
            c.arg("-i").args(&vars).arg(lazaret);
            c
        };
        cmd.args(args)
            .current_dir(&self.workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    fn spawn(&self, args: &[&str], point: Option<&str>, log: Option<&Path>) -> Child {
        self.command(args, point, log).spawn().unwrap()
    }

    /// The escalation scenario's session: one auto-approved host command
    /// from inside the sandbox, then the session's own output.
    fn spawn_escalating(&self, point: Option<&str>, log: Option<&Path>) -> Child {
        let script = format!(
            "/.lazaret/sbin/lazaret-escalate --why crash -- {} && echo out",
            self.home.join(HOST_TOOL).display()
        );
        self.spawn(&["default", "--", "sh", "-c", &script], point, log)
    }

    /// Every process whose environment or command line names this Domain's
    /// HOME (CLI, HC, RS, wrappers, runsc, sandbox, gofer).
    fn processes(&self) -> Vec<String> {
        let needle = self.home.display().to_string();
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.bytes().all(|b| b.is_ascii_digit()) || name == std::process::id().to_string() {
                continue;
            }
            let read = |f: &str| std::fs::read(entry.path().join(f)).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&read("cmdline")).replace('\0', " ");
            let environ = String::from_utf8_lossy(&read("environ")).into_owned();
            if cmdline.contains(&needle) || environ.contains(&needle) {
                found.push(format!("{name}: {cmdline}"));
            }
        }
        found
    }

    fn mounts(&self) -> Vec<String> {
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.contains(&*self.home.to_string_lossy()))
            .map(str::to_owned)
            .collect()
    }

    /// Within [`QUIET_LIMIT`] no process, mount or runtime file (socket,
    /// log, trace, bundle, runsc state) of this Domain remains, and no
    /// editor directory made for the sandbox is left in the workspace
    /// (which has none of its own).
    fn nothing_left(&self) -> Result<(), String> {
        let deadline = Instant::now() + QUIET_LIMIT;
        loop {
            let procs = self.processes();
            let mounts = self.mounts();
            let files = runtime_files(&self.home.join("run"));
            let editor: Vec<PathBuf> = [".vscode", ".idea"]
                .iter()
                .map(|d| self.workspace.join(d))
                .filter(|p| p.symlink_metadata().is_ok())
                .collect();
            // Spec 3.6: no prepared-lower lease outlives its generation.
            let leases = lazaret_effects::storage_catalog::StorageCatalog::at(
                &self.home.join(".local/share/lazaret"),
            )
            .leases()
            .map_err(|e| e.to_string())?;
            if procs.is_empty()
                && mounts.is_empty()
                && files.is_empty()
                && editor.is_empty()
                && leases.is_empty()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "left behind: processes {procs:?}, mounts {mounts:?}, runtime files {files:?}, editor directories {editor:?}, catalog leases {leases:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `lazaret state default --json`: (exit code, document).
    fn state(&self) -> Result<(Option<i32>, serde_json::Value), String> {
        let out = self
            .command(&["state", "default", "--json"], None, None)
            .output()
            .unwrap();
        let doc = serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "lazaret state --json (exit {:?}) printed no JSON ({e}): {}{}",
                out.status.code(),
                text(&out.stdout),
                text(&out.stderr)
            )
        })?;
        Ok((out.status.code(), doc))
    }

    /// Right after a crash the Domain Store is either held by a live
    /// coordinator or reads as one validated snapshot; never an error.
    fn store_readable(&self) -> Result<(), String> {
        match self.state()? {
            (Some(0 | 3), _) => Ok(()),
            (code, doc) => Err(format!(
                "after the crash the Domain Store does not read (exit {code:?}): {doc}"
            )),
        }
    }

    /// After recovery: the store reads, and every generation is released —
    /// decision Vacant, every participant Clean, no process slot whose
    /// recorded process still runs, and `lazaret state` calls it clean
    /// (participants, session terminals and mailbox).
    fn store_released(&self) -> Result<usize, String> {
        let (code, doc) = self.state()?;
        if code != Some(0) || doc["status"] != "inactive" {
            return Err(format!("lazaret state (exit {code:?}): {doc}"));
        }
        let generations = doc["generations"].as_array().cloned().unwrap_or_default();
        if generations.is_empty() {
            return Err(format!("the Domain Store holds no generation: {doc}"));
        }
        for g in &generations {
            let id = &g["generation_id"];
            if g["durable_decision"] != "Vacant" {
                return Err(format!(
                    "generation {id} ends {}: {g}",
                    g["durable_decision"]
                ));
            }
            for p in g["participants"].as_array().into_iter().flatten() {
                if p["state"] != "Clean" {
                    return Err(format!(
                        "generation {id}: participant {} is {}: {g}",
                        p["role"], p["state"]
                    ));
                }
            }
            for s in g["process_slots"].as_array().into_iter().flatten() {
                if s["live"]["status"] == "running" {
                    return Err(format!(
                        "generation {id}: slot {} names a running process: {g}",
                        s["slot"]
                    ));
                }
            }
            if g["clean"] != true {
                return Err(format!("generation {id} is not clean: {g}"));
            }
        }
        Ok(generations.len())
    }

    /// Every kept trace not yet replayed replays clean against the model.
    fn traces_replay(&mut self) -> Result<(), String> {
        let kept: Vec<PathBuf> = runtime_files(&self.home.join(".local/share/lazaret"))
            .into_iter()
            .filter(|p| {
                p.parent().is_some_and(|d| d.ends_with("traces"))
                    && p.extension().is_some_and(|e| e == "jsonl")
            })
            .collect();
        if kept.is_empty() {
            return Err("no trace was kept".into());
        }
        for t in kept {
            if self.replayed.contains(&t) {
                continue;
            }
            let out = replay_trace(&t);
            if !out.status.success() {
                return Err(format!(
                    "{} does not replay: {}{}",
                    t.display(),
                    text(&out.stdout),
                    text(&out.stderr)
                ));
            }
            self.replayed.insert(t);
        }
        Ok(())
    }

    /// Removes the scenario's marker files from the workspace.
    fn reset_workspace(&self) {
        for name in ["started", "release"] {
            let _ = std::fs::remove_file(self.workspace.join(name));
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = Command::new("rm").arg("-rf").arg(&self.home).status();
        }
    }
}

/// A finished CLI.
struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Waits for `child` at most `limit`; a CLI still running then is a hang
/// (it is killed through its pidfd and reported).
fn wait_bounded(mut child: Child, limit: Duration, what: &str) -> Result<Finished, String> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stdout = String::new();
            let mut stderr = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut stdout)
                .unwrap();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut stderr)
                .unwrap();
            return Ok(Finished {
                status,
                stdout,
                stderr,
            });
        }
        if Instant::now() > deadline {
            let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
            if let Ok(fd) = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
                let _ = rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL);
            }
            let _ = child.wait();
            return Err(format!("{what} hung for {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How a CLI of a crash run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ending {
    /// The command ran and its output and status arrived (the crash came
    /// after, or did not concern this session).
    Completed,
    /// The CLI reported the failure: status 125 and one `lazaret: error:`.
    Reported,
    /// The CLI was the crashed process.
    Killed,
    /// The session's exec client was the crashed process: the CLI reports
    /// Lazaret's own error (status 125, "the session ended without the
    /// command's status"), never a made-up status such as 137.
    SessionLost,
}

/// Which process of a CLI's own the point crashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Crashes {
    Nothing,
    TheCli,
    ItsExecClient,
}

fn crashes(point: &Point, this_is_second: bool) -> Crashes {
    if point.second != this_is_second {
        Crashes::Nothing
    } else if point.spec.starts_with("cli:") {
        Crashes::TheCli
    } else if point.spec == "wrapper:enter:before-exec" {
        Crashes::ItsExecClient
    } else {
        Crashes::Nothing
    }
}

fn ending(f: &Finished, expected_stdout: &str, crashes: Crashes) -> Result<Ending, String> {
    let killed = f.status.signal() == Some(9) || f.status.code() == Some(128 + 9);
    if crashes == Crashes::TheCli && killed {
        return Ok(Ending::Killed);
    }
    if crashes == Crashes::ItsExecClient {
        // The exec client dies as it is released: the coordinator sees that
        // either while it waits for its readiness (the session could not be
        // started) or once it committed it (the session ended without the
        // command's status), whichever comes first; both are Lazaret's
        // error, never a command status.
        let lost = f.stderr.contains("ended without the command's status")
            || f.stderr
                .contains("the exec client ended before it was ready");
        return if f.status.code() == Some(125) && f.stderr.starts_with("lazaret: error: ") && lost {
            Ok(Ending::SessionLost)
        } else {
            Err(format!(
                "the session's exec client was killed before exec: expected status 125 and \
                 Lazaret's error, got {:?} with stderr {:?}",
                f.status, f.stderr
            ))
        };
    }
    if f.status.code() == Some(0) && f.stdout == expected_stdout {
        return Ok(Ending::Completed);
    }
    if f.status.code() == Some(125) && f.stderr.starts_with("lazaret: error: ") {
        return Ok(Ending::Reported);
    }
    // The Domain's runtime ended under the session (spec 3.7 helper loss,
    // or RS crashed): what the session wrote comes first, then exactly one
    // Lazaret error naming the runtime's end, status 125.
    if f.status.code() == Some(125)
        && f.stderr.matches("lazaret: error: ").count() == 1
        && f.stderr.lines().last().is_some_and(|l| {
            l.starts_with("lazaret: error: ") && l.contains("the Domain's runtime stopped")
        })
    {
        return Ok(Ending::Reported);
    }
    // The session's exec client could not enter the sandbox (it was lost
    // after it ran): the command's status is 126 and the reason is on the
    // session's stderr.
    if f.status.code() == Some(126) && f.stderr.starts_with("lazaret __enter: ") {
        return Ok(Ending::Reported);
    }
    Err(format!(
        "the CLI ended {:?} with stdout {:?}, stderr {:?}",
        f.status, f.stdout, f.stderr
    ))
}

/// One line of a crash log: (verb, point, label).
fn log_lines(path: &Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ' ');
            Some((
                parts.next()?.to_owned(),
                parts.next()?.to_owned(),
                parts.next().unwrap_or("").to_owned(),
            ))
        })
        .collect()
}

/// Waits until `log` has a line for which `found` holds.
fn wait_for_line(
    log: &Path,
    limit: Duration,
    found: impl Fn(&(String, String, String)) -> bool,
) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if log_lines(log).iter().any(&found) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A crash point of a scenario and which CLI's process tree gets it.
#[derive(Clone, Debug)]
struct Point {
    spec: String,
    label: String,
    /// For the join scenario: the second CLI (else the first CLI and the
    /// coordinator it starts).
    second: bool,
}

/// Points in first-passed order, each once.
fn passed(lines: &[(String, String, String)], second: bool, skip: &BTreeSet<String>) -> Vec<Point> {
    let mut seen = skip.clone();
    let mut out = Vec::new();
    for (verb, spec, label) in lines {
        if verb == "passed" && seen.insert(spec.clone()) {
            out.push(Point {
                spec: spec.clone(),
                label: label.clone(),
                second,
            });
        }
    }
    out
}

const LAUNCH: [&str; 5] = ["default", "--", "sh", "-c", "echo out"];
const FIRST: [&str; 5] = [
    "default",
    "--",
    "sh",
    "-c",
    "touch /workspace/started; while [ ! -e /workspace/release ]; do sleep 0.05; done; echo first",
];
const SECOND: [&str; 5] = ["default", "--", "sh", "-c", "echo second"];

/// The recovery launch and the checks after it.
fn recover_and_check(env: &mut Env) -> Result<usize, String> {
    let out = wait_bounded(
        env.spawn(&LAUNCH, None, None),
        Duration::from_secs(90),
        "the recovery launch",
    )?;
    if out.status.code() != Some(0) || out.stdout != "out\n" {
        return Err(format!(
            "the next launch did not recover: {:?}, stdout {:?}, stderr {:?}",
            out.status, out.stdout, out.stderr
        ));
    }
    env.nothing_left()?;
    let generations = env.store_released()?;
    env.traces_replay()?;
    Ok(generations)
}

/// The first session of the join scenario runs and is registered (its
/// RegisterSession traced and its Joined received): from here on the steps
/// are the second session's and the teardown's.
fn first_session_registered(env: &Env, log: &Path) -> Result<(), String> {
    let limit = Duration::from_secs(30);
    let registered = wait_for_line(log, limit, |(_, spec, label)| {
        spec.starts_with("hc:")
            && spec.ends_with(":after-trace")
            && label.starts_with("RegisterSession")
    }) && wait_for_line(log, limit, |(_, spec, _)| spec == "cli:joined:after");
    let deadline = Instant::now() + limit;
    while registered && !env.workspace.join("started").exists() {
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if registered && env.workspace.join("started").exists() {
        Ok(())
    } else {
        Err("the first session never started".into())
    }
}

/// One crash run of the launch scenario: the single CLI's ending.
fn crash_launch(env: &Env, point: &Point, log: &Path) -> Result<Vec<Ending>, String> {
    let child = env.spawn(&LAUNCH, Some(&point.spec), Some(log));
    let out = wait_bounded(child, CLI_LIMIT, "the CLI")?;
    Ok(vec![ending(&out, "out\n", crashes(point, false))?])
}

/// One crash run of the join scenario: both CLIs' endings.
fn crash_join(env: &Env, point: &Point, log: &Path) -> Result<Vec<Ending>, String> {
    env.reset_workspace();
    let (first_point, second_point) = if point.second {
        (None, Some(point.spec.as_str()))
    } else {
        (Some(point.spec.as_str()), None)
    };
    let first = env.spawn(&FIRST, first_point, Some(log));
    if let Err(e) = first_session_registered(env, log) {
        let out = wait_bounded(first, CLI_LIMIT, "the first CLI");
        return Err(format!("{e}: {:?}", out.map(|f| (f.status, f.stderr))));
    }
    let second_log = log.with_extension("second");
    let second = env.spawn(&SECOND, second_point, Some(&second_log));
    let second = wait_bounded(second, CLI_LIMIT, "the second CLI");
    std::fs::write(env.workspace.join("release"), "").unwrap();
    let first = wait_bounded(first, CLI_LIMIT, "the first CLI")?;
    let second = second?;
    // Both logs are one crash log for the fired check.
    let extra = std::fs::read_to_string(&second_log).unwrap_or_default();
    let mut all = std::fs::read_to_string(log).unwrap_or_default();
    all.push_str(&extra);
    std::fs::write(log, all).unwrap();
    Ok(vec![
        ending(&first, "first\n", crashes(point, false))?,
        ending(&second, "second\n", crashes(point, true))?,
    ])
}

/// What happened at one point.
struct Covered {
    endings: Vec<Ending>,
    took: Duration,
}

/// Runs every point: crash, check, recover, check. Returns the covered
/// points and the failures (point and why).
fn run_points(
    env: &mut Env,
    points: &[Point],
    crash: fn(&Env, &Point, &Path) -> Result<Vec<Ending>, String>,
) -> (Vec<Covered>, Vec<String>) {
    let mut covered = Vec::new();
    let mut failures = Vec::new();
    for (i, point) in points.iter().enumerate() {
        let t = Instant::now();
        let log = env.fresh_log(&format!("crash-{i}"));
        let result = crash(env, point, &log).and_then(|endings| {
            // The hook logs `fired` before the SIGKILL: the point was reached
            // and ended its process (a point after the CLI's exit may fire
            // a little later).
            let fired = wait_for_line(&log, QUIET_LIMIT, |(verb, spec, _)| {
                verb == "fired" && *spec == point.spec
            });
            if !fired {
                return Err("the crash point was never reached".into());
            }
            env.store_readable()?;
            recover_and_check(env)?;
            Ok(endings)
        });
        let took = t.elapsed();
        match result {
            Ok(endings) => {
                eprintln!(
                    "crash point {} ({}{}): {:?}, recovered in {:?}",
                    point.spec,
                    point.label,
                    if point.second { ", second CLI" } else { "" },
                    endings,
                    took
                );
                covered.push(Covered { endings, took });
            }
            Err(why) => {
                eprintln!("crash point {} ({}) FAILED: {why}", point.spec, point.label);
                failures.push(format!("{} ({}): {why}", point.spec, point.label));
                env.reset();
            }
        }
    }
    (covered, failures)
}

/// Runs every point of scenario `name` ([`run_points`]), started at `t`,
/// prints its summary and fails on any failed point.
fn crash_every_point(
    env: &mut Env,
    name: &str,
    points: &[Point],
    crash: fn(&Env, &Point, &Path) -> Result<Vec<Ending>, String>,
    t: Instant,
) {
    let (covered, failures) = run_points(env, points, crash);
    summary(name, points, &covered, &failures, t.elapsed());
    assert!(
        failures.is_empty(),
        "{} of {} crash points failed:\n{}",
        failures.len(),
        points.len(),
        failures.join("\n")
    );
}

fn summary(name: &str, points: &[Point], covered: &[Covered], failures: &[String], took: Duration) {
    let per_role = |role: &str| {
        points
            .iter()
            .filter(|p| p.spec.starts_with(&format!("{role}:")))
            .count()
    };
    let slowest = covered.iter().map(|c| c.took).max().unwrap_or_default();
    let reported = covered
        .iter()
        .filter(|c| c.endings.contains(&Ending::Reported))
        .count();
    eprintln!(
        "{name}: {} crash points (hc {}, rs {}, wrapper {}, cli {}); {} recovered, {} failed; {reported} of them with a CLI reporting the failure; {took:?} in all, slowest point {slowest:?}",
        points.len(),
        per_role("hc"),
        per_role("rs"),
        per_role("wrapper"),
        per_role("cli"),
        covered.len(),
        failures.len()
    );
}

/// Launch, first session start, session close and teardown: every point a
/// single `lazaret default -- sh -c 'echo out'` passes.
#[test]
fn every_crash_point_of_a_launch_recovers() {
    let t = Instant::now();
    let mut env = Env::new("launch", &default_image());
    let log = env.fresh_log("enumerate");
    let out = wait_bounded(env.spawn(&LAUNCH, None, Some(&log)), CLI_LIMIT, "the CLI").unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    env.nothing_left().unwrap();
    // The preparation's points are passed only by a launch that prepares:
    // the preparation scenario's.
    let points: Vec<Point> = passed(&log_lines(&log), false, &BTreeSet::new())
        .into_iter()
        .filter(|p| !p.spec.starts_with("prepare:"))
        .collect();
    for role in ["hc", "rs", "wrapper", "cli"] {
        assert!(
            points
                .iter()
                .any(|p| p.spec.starts_with(&format!("{role}:"))),
            "the enumerating run passed no {role} point: {points:?}"
        );
    }
    crash_every_point(&mut env, "launch", &points, crash_launch, t);
}

/// A second session joining a running Domain and its close: every point
/// passed after the first session was registered until the second
/// session's release finished (a point the first session already passed,
/// such as its exec client's wrapper, and the first session's close and the
/// teardown after it are the launch scenario's).
#[test]
fn every_crash_point_of_a_joining_session_recovers() {
    let t = Instant::now();
    let mut env = Env::new("join", &default_image());
    let first_log = env.fresh_log("enumerate");
    let second_log = env.fresh_log("enumerate-second");
    env.reset_workspace();
    let first = env.spawn(&FIRST, None, Some(&first_log));
    first_session_registered(&env, &first_log).unwrap();
    let mark = log_lines(&first_log).len();
    let second = env.spawn(&SECOND, None, Some(&second_log));
    let second = wait_bounded(second, CLI_LIMIT, "the second CLI").unwrap();
    assert_eq!(second.stdout, "second\n", "{}", second.stderr);
    std::fs::write(env.workspace.join("release"), "").unwrap();
    let first = wait_bounded(first, CLI_LIMIT, "the first CLI").unwrap();
    assert_eq!(first.stdout, "first\n", "{}", first.stderr);
    env.nothing_left().unwrap();
    let lines = log_lines(&first_log);
    let before: BTreeSet<String> = lines[..mark].iter().map(|(_, s, _)| s.clone()).collect();
    // The second session's start and close end with its release's last
    // step: `RetainSessionRelease`, since a piped command that completes by
    // itself is released unobserved (docs/terminals.md), or
    // `FinishSessionRelease`; what follows (the first session's close, the
    // teardown) is the launch scenario's.
    let end = mark
        + lines[mark..]
            .iter()
            .position(|(_, spec, label)| {
                spec.ends_with(":after-trace")
                    && (label.starts_with("RetainSessionRelease")
                        || label.starts_with("FinishSessionRelease"))
            })
            .expect("the second session's RetainSessionRelease or FinishSessionRelease")
        + 1;
    let mut points = passed(&lines[mark..end], false, &before);
    points.extend(passed(&log_lines(&second_log), true, &BTreeSet::new()));
    for label in [
        "ConnectClient",
        "RecordTerminalIntent",
        "RegisterSession",
        "CloseSession",
    ] {
        assert!(
            points.iter().any(|p| p.label.starts_with(label)),
            "the enumerating run passed no {label} point: {points:?}"
        );
    }
    assert!(
        points.iter().any(|p| p.second),
        "the second CLI passed no point: {points:?}"
    );
    crash_every_point(&mut env, "join", &points, crash_join, t);
}

/// One crash run of the escalation scenario: the CLI's ending.
fn crash_escalation(env: &Env, point: &Point, log: &Path) -> Result<Vec<Ending>, String> {
    let child = env.spawn_escalating(Some(&point.spec), Some(log));
    let out = wait_bounded(child, CLI_LIMIT, "the CLI")?;
    Ok(vec![ending(&out, "tool\nout\n", crashes(point, false))?])
}

/// Spec 3.8, 3.3 recovery: every Host Coordinator step of one escalation
/// request (each traced, `lazaret_runtime::escalation::steps`) is a crash
/// point; a coordinator killed at any of them takes its host process with
/// it (nothing of the Domain is left, the host command's supervisor
/// included), the CLI finishes or reports the failure, and the next launch
/// recovers and every trace replays.
#[test]
fn every_crash_point_of_an_escalation_recovers() {
    let t = Instant::now();
    let mut env = Env::with("escalation", &default_image(), true);
    let log = env.fresh_log("enumerate");
    let out = wait_bounded(env.spawn_escalating(None, Some(&log)), CLI_LIMIT, "the CLI").unwrap();
    assert_eq!(
        (out.status.code(), out.stdout.as_str()),
        (Some(0), "tool\nout\n"),
        "{}",
        out.stderr
    );
    env.nothing_left().unwrap();
    let escalation_steps = support::AUTO_APPROVED_STEPS;
    let points: Vec<Point> = passed(&log_lines(&log), false, &BTreeSet::new())
        .into_iter()
        .filter(|p| {
            p.spec.starts_with("hc:mailbox:")
                || (p.spec.starts_with("hc:")
                    && escalation_steps.iter().any(|s| p.label.starts_with(s)))
        })
        .collect();
    assert!(
        points.iter().any(|p| p.spec.starts_with("hc:mailbox:")),
        "the enumerating run passed no mailbox point: {points:?}"
    );
    // `CollectResult` is taken with `DeliverResult`, in one turn of the
    // coordinator's loop: no close of the session comes between them.
    for step in escalation_steps {
        assert!(
            points.iter().any(|p| p.label.starts_with(step)),
            "the enumerating run passed no {step} point: {points:?}"
        );
    }
    crash_every_point(&mut env, "escalation", &points, crash_escalation, t);
}

const PLANT: [&str; 5] = [
    "default",
    "--",
    "sh",
    "-c",
    "mkdir -p /usr/local/lz && echo kept > /usr/local/lz/f && echo root > /root/lz-root && echo out",
];
const RESET: [&str; 5] = ["state", "reset", "default", "/usr", "--yes"];
const LOOK: [&str; 5] = [
    "default",
    "--",
    "sh",
    "-c",
    "cat /usr/local/lz/f 2>/dev/null || echo none; cat /root/lz-root",
];

/// One crash point of a reset (OR-5): the killed reset (or the reset whose
/// killed removal worker it reports as a warning) leaves the `/usr` anchor
/// either as it was or gone (the next launch starts it empty), never
/// partial, and `/root` untouched; the next launch works and shows exactly
/// that; a reset run again then finishes and leaves no discarded state.
fn crash_reset(env: &Env, point: &Point) -> Result<(), String> {
    let out = wait_bounded(
        env.spawn(&PLANT, None, None),
        CLI_LIMIT,
        "the planting launch",
    )?;
    if out.status.code() != Some(0) {
        return Err(format!("planting failed: {}", out.stderr));
    }
    env.nothing_left()?;
    let root = support::domain_root(&env.home);
    let upper = root.join("anchors/upper/usr");
    let crashed = wait_bounded(
        env.spawn(&RESET, Some(&point.spec), None),
        CLI_LIMIT,
        "the reset",
    )?;
    let in_worker = point.spec.starts_with("state:discard:");
    let killed = crashed.status.signal() == Some(9) || crashed.status.code() == Some(128 + 9);
    // The rename decided the reset: a killed removal worker leaves a
    // warning and space for the next reset, and the reset still counts.
    let reported = crashed.status.code() == Some(0)
        && crashed.stderr.contains("was not reclaimed")
        && crashed.stderr.contains("removal worker");
    if !(killed || in_worker && reported) {
        return Err(format!(
            "the reset was not killed at {}: {:?} {}",
            point.spec, crashed.status, crashed.stderr
        ));
    }
    let prior = upper.join("local/lz/f").is_file();
    let empty = !upper.exists();
    if !(prior || empty) {
        return Err(format!("{}: the /usr upper is partial", point.spec));
    }
    if point.spec == "state:reset:before-upper" && !prior {
        return Err("a reset killed before its rename changed the upper".to_owned());
    }
    let expected = if prior {
        "kept\nroot\n"
    } else {
        "none\nroot\n"
    };
    let look = wait_bounded(env.spawn(&LOOK, None, None), CLI_LIMIT, "the next launch")?;
    if look.status.code() != Some(0) || look.stdout != expected {
        return Err(format!(
            "{}: the next launch saw {:?} (expected {expected:?}): {}",
            point.spec, look.stdout, look.stderr
        ));
    }
    env.nothing_left()?;
    let again = wait_bounded(env.spawn(&RESET, None, None), CLI_LIMIT, "the second reset")?;
    if again.status.code() != Some(0) {
        return Err(format!("the second reset failed: {}", again.stderr));
    }
    if root.join("anchors/discard").exists() || upper.exists() {
        return Err(format!(
            "{}: the second reset left state behind",
            point.spec
        ));
    }
    Ok(())
}

/// Every crash point of `lazaret state reset default /usr` (the rename of
/// the upper, then of its work directory, and the removal worker) leaves
/// the prior anchor or an empty one, and the next reset finishes.
#[test]
fn every_crash_point_of_a_reset_leaves_the_prior_or_an_empty_anchor() {
    let mut env = Env::new("reset", &default_image());
    let out = wait_bounded(env.spawn(&PLANT, None, None), CLI_LIMIT, "the CLI").unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    env.nothing_left().unwrap();
    let log = env.fresh_log("enumerate");
    let out = wait_bounded(env.spawn(&RESET, None, Some(&log)), CLI_LIMIT, "the reset").unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    let points = passed(&log_lines(&log), false, &BTreeSet::new());
    let specs: Vec<&str> = points.iter().map(|p| p.spec.as_str()).collect();
    assert_eq!(
        specs,
        [
            "state:reset:before-upper",
            "state:reset:after-upper",
            "state:reset:after-work",
            "state:discard:after-first"
        ]
    );
    let mut failures = Vec::new();
    for point in &points {
        if let Err(e) = crash_reset(&env, point) {
            failures.push(format!("{}: {e}", point.spec));
            env.reset();
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

const GC: [&str; 3] = ["state", "gc", "--json"];

/// Spec 3.6, OR-7: every crash point of a preparation (its process dies
/// after the intent, after creating the stage, after recording it Owned,
/// with the tree built, and after the publication's rename but before its
/// catalog commit) is recovered by the next launch, which finds the
/// abandoned operation by its lock, removes exactly what it recorded and
/// prepares again. After each, the catalog holds one Available artifact
/// and no operation, and `prepared/` holds that artifact alone. Each run
/// starts with `lazaret state gc`, which reclaims the unleased artifact so
/// the launch prepares.
#[test]
fn every_crash_point_of_a_preparation_recovers() {
    let mut env = Env::new("prepare", &default_image());
    let log = env.fresh_log("enumerate");
    let out = wait_bounded(env.spawn(&LAUNCH, None, Some(&log)), CLI_LIMIT, "the CLI").unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    env.nothing_left().unwrap();
    prepared_alone(&env).unwrap();
    let points: Vec<Point> = passed(&log_lines(&log), false, &BTreeSet::new())
        .into_iter()
        .filter(|p| p.spec.starts_with("prepare:"))
        .collect();
    let specs: Vec<&str> = points.iter().map(|p| p.spec.as_str()).collect();
    assert_eq!(
        specs,
        [
            "prepare:operation:after-intent",
            "prepare:operation:after-stage",
            "prepare:operation:after-owned",
            "prepare:operation:after-tree",
            "prepare:operation:after-rename",
        ]
    );
    let mut failures = Vec::new();
    for (i, point) in points.iter().enumerate() {
        if let Err(e) = crash_preparation(&mut env, i, point) {
            eprintln!("crash point {} FAILED: {e}", point.spec);
            failures.push(format!("{}: {e}", point.spec));
            env.reset();
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Each recovery was a run of the PreparedLower model (its traces
    // replayed with every other trace): an Intent left with nothing or an
    // empty stage is forgotten, an Owned one's exact stage removed first.
    let mut taken = BTreeSet::new();
    let storage = env.home.join(".local/share/lazaret/catalog/traces");
    for t in runtime_files(&storage) {
        let text = std::fs::read_to_string(&t).unwrap();
        taken.extend(text.lines().map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["action"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        }));
    }
    for step in [
        "ForgetAbandonedIntent",
        "RecoverAbandonedStage",
        "ForgetPrepareOperation",
    ] {
        assert!(taken.contains(step), "no recovery took {step}: {taken:?}");
    }
}

/// One crash run of the preparation scenario.
fn crash_preparation(env: &mut Env, i: usize, point: &Point) -> Result<(), String> {
    let out = wait_bounded(env.spawn(&GC, None, None), CLI_LIMIT, "gc")?;
    let json: serde_json::Value = serde_json::from_str(&out.stdout)
        .map_err(|e| format!("gc: {e}: {:?} {:?}", out.stdout, out.stderr))?;
    if json["artifacts"][0]["action"] != "reclaimed" {
        return Err(format!("gc did not reclaim the artifact: {json}"));
    }
    let log = env.fresh_log(&format!("crash-{i}"));
    let out = wait_bounded(
        env.spawn(&LAUNCH, Some(&point.spec), Some(&log)),
        CLI_LIMIT,
        "the CLI",
    )?;
    let ended = ending(&out, "out\n", Crashes::Nothing)?;
    let fired = wait_for_line(&log, QUIET_LIMIT, |(verb, spec, _)| {
        verb == "fired" && *spec == point.spec
    });
    if !fired {
        return Err("the crash point was never reached".into());
    }
    recover_and_check(env)?;
    prepared_alone(env)?;
    eprintln!("crash point {}: {ended:?}, recovered", point.spec);
    Ok(())
}

/// The catalog holds one Available artifact and no prepare operation, and
/// `prepared/` holds exactly that artifact's directory.
fn prepared_alone(env: &Env) -> Result<(), String> {
    let storage = env.home.join(".local/share/lazaret");
    let catalog = lazaret_effects::storage_catalog::StorageCatalog::at(&storage);
    let operations = catalog.prepare_operations().map_err(|e| e.to_string())?;
    let artifacts = catalog.artifacts().map_err(|e| e.to_string())?;
    if !operations.is_empty() || artifacts.len() != 1 {
        return Err(format!(
            "catalog: operations {operations:?}, artifacts {artifacts:?}"
        ));
    }
    let mut names: Vec<String> = std::fs::read_dir(storage.join("prepared"))
        .map_err(|e| e.to_string())?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    names.sort();
    if names != [artifacts[0].prepared_artifact_id.to_string()] {
        return Err(format!("prepared/ holds {names:?}"));
    }
    Ok(())
}
