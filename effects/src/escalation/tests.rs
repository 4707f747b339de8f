//! The mailbox handles and the host launcher against the real kernel (a
//! scratch directory), with the recording fake where a test must see which
//! calls happened.
use std::ffi::OsStr;
use std::fs;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use lazaret_runtime::escalation::command::CommandError;
use lazaret_runtime::protocol::mailbox::{MailboxEntry, MAX_MAILBOX_RECORD};
use lazaret_runtime::records::ids::EscalationRequestId;
use quickcheck::QuickCheck;
use rustix::fs::{Mode, OFlags};

use super::launcher::{host_command, HostProcessSetting, LaunchError};
use super::{MailboxDir, MailboxReadError, MAX_ENTRIES};
use crate::confined::{ConfinedSys, OpenedObject, RealSys, RecordedCall, RecordingSys};

const ID: EscalationRequestId = EscalationRequestId([0xab; 16]);

fn mailbox(dir: &Path) -> MailboxDir {
    let fd = rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .expect("the scratch directory opens");
    MailboxDir::new(fd, dir.to_owned())
}

#[test]
fn entries_are_written_whole_listed_by_name_and_read_back() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let dir = mailbox(scratch.path());
    let entries = [
        MailboxEntry::Request(ID),
        MailboxEntry::Cancellation(ID),
        MailboxEntry::Ack(ID, 0),
        MailboxEntry::Chunk(ID, 17),
        MailboxEntry::Result(ID),
    ];
    for (i, e) in entries.iter().enumerate() {
        dir.write(
            &RealSys,
            *e,
            &vec![u8::try_from(i).expect("small"); i * 100],
        )
        .expect("an entry is written");
    }
    // A writer's unfinished temporary and a name Lazaret never writes.
    fs::write(scratch.path().join(".tmp.half"), b"x").expect("writes");
    fs::write(scratch.path().join("notes.txt"), b"x").expect("writes");
    let listing = dir.list(&RealSys).expect("lists");
    let mut expected = entries.to_vec();
    expected.sort();
    assert_eq!(listing.entries, expected);
    assert_eq!(listing.foreign, vec![OsStr::new("notes.txt").to_owned()]);
    for (i, e) in entries.iter().enumerate() {
        let bytes = dir.read(&RealSys, OsStr::new(&e.name())).expect("reads");
        assert_eq!(bytes, vec![u8::try_from(i).expect("small"); i * 100]);
        let mode = fs::metadata(scratch.path().join(e.name()))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o644, "{}", e.name());
    }
    dir.remove(&RealSys, OsStr::new(&entries[0].name()))
        .expect("removes");
    assert_eq!(
        dir.list(&RealSys).expect("lists").entries.len(),
        entries.len() - 1
    );
}

#[test]
fn links_special_files_and_oversized_entries_are_refused_unread() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let outside = tempfile::tempdir().expect("another directory");
    fs::write(outside.path().join("secret"), b"host secret").expect("writes");
    let dir = mailbox(scratch.path());
    let name = |e: MailboxEntry| e.name();
    std::os::unix::fs::symlink(
        outside.path().join("secret"),
        scratch.path().join(name(MailboxEntry::Request(ID))),
    )
    .expect("a symlink");
    assert!(matches!(
        dir.read(&RealSys, OsStr::new(&name(MailboxEntry::Request(ID)))),
        Err(MailboxReadError::Open { .. })
    ));
    // A FIFO: refused without blocking on its open.
    rustix::fs::mknodat(
        rustix::fs::CWD,
        scratch.path().join(name(MailboxEntry::Cancellation(ID))),
        rustix::fs::FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .expect("a FIFO");
    assert!(matches!(
        dir.read(&RealSys, OsStr::new(&name(MailboxEntry::Cancellation(ID)))),
        Err(MailboxReadError::NotRegular { kind: "a FIFO", .. })
    ));
    fs::create_dir(scratch.path().join(name(MailboxEntry::Result(ID)))).expect("a directory");
    assert!(matches!(
        dir.read(&RealSys, OsStr::new(&name(MailboxEntry::Result(ID)))),
        Err(MailboxReadError::NotRegular {
            kind: "a directory",
            ..
        })
    ));
    // A hard link to a file elsewhere.
    fs::write(scratch.path().join("original"), b"x").expect("writes");
    let linked = name(MailboxEntry::Chunk(ID, 1));
    fs::hard_link(
        scratch.path().join("original"),
        scratch.path().join(&linked),
    )
    .expect("links");
    assert!(matches!(
        dir.read(&RealSys, OsStr::new(&linked)),
        Err(MailboxReadError::Linked { links: 2, .. })
    ));
    // A name that walks out of the directory.
    assert!(matches!(
        dir.read(&RealSys, OsStr::new("../secret")),
        Err(MailboxReadError::Open { .. })
    ));
    // One byte over the bound: refused from its size, before any read.
    let big = name(MailboxEntry::Ack(ID, 3));
    fs::write(scratch.path().join(&big), vec![0u8; MAX_MAILBOX_RECORD + 1]).expect("writes");
    let sys = RecordingSys::new(RealSys);
    assert!(matches!(
        dir.read(&sys, OsStr::new(&big)),
        Err(MailboxReadError::TooLarge { size, .. }) if size == (MAX_MAILBOX_RECORD + 1) as u64
    ));
    assert!(!sys
        .calls()
        .iter()
        .any(|c| matches!(c, RecordedCall::ReadAt { .. })));
    // Exactly the bound is read.
    fs::write(scratch.path().join(&big), vec![7u8; MAX_MAILBOX_RECORD]).expect("writes");
    assert_eq!(
        dir.read(&RealSys, OsStr::new(&big)).expect("reads").len(),
        MAX_MAILBOX_RECORD
    );
}

#[test]
fn a_failed_write_leaves_no_temporary_and_a_crowded_mailbox_is_read_in_part() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let dir = mailbox(scratch.path());
    let sys = RecordingSys::new(RealSys);
    sys.fail_next("renameat", rustix::io::Errno::IO);
    assert!(dir
        .write(&sys, MailboxEntry::Result(ID), b"result")
        .is_err());
    assert_eq!(fs::read_dir(scratch.path()).expect("lists").count(), 0);
    for i in 0..=MAX_ENTRIES {
        fs::write(scratch.path().join(format!("f{i}")), b"").expect("writes");
    }
    // A crowded mailbox is read a bounded part at a time, never refused.
    let listing = dir.list(&RealSys).expect("lists");
    assert!(listing.truncated);
    assert_eq!(listing.foreign.len(), MAX_ENTRIES);
}

#[test]
fn entry_names_round_trip_and_only_canonical_names_parse() {
    fn prop(id: u128, n: u64, kind: u8) -> bool {
        let id = EscalationRequestId(id.to_be_bytes());
        let e = match kind % 5 {
            0 => MailboxEntry::Request(id),
            1 => MailboxEntry::Cancellation(id),
            2 => MailboxEntry::Ack(id, n),
            3 => MailboxEntry::Chunk(id, n),
            _ => MailboxEntry::Result(id),
        };
        MailboxEntry::parse(e.name().as_bytes()) == Some(e)
    }
    QuickCheck::new()
        .tests(10_000)
        .max_tests(10_000)
        .quickcheck(prop as fn(u128, u64, u8) -> bool);
    let id = "ab".repeat(16);
    for bad in [
        format!("{}.request", id.to_uppercase()),
        format!("{id}.ack.01"),
        format!("{id}.ack.-1"),
        format!("{id}.chunk."),
        format!("{id}.request.0"),
        format!("{id}.results"),
        format!("{}.request", &id[..30]),
        "../x.request".to_owned(),
    ] {
        assert_eq!(MailboxEntry::parse(bad.as_bytes()), None, "{bad}");
    }
}

/// A private copy of `/bin/sh` (one hard link, owned by whoever runs the
/// test, mode 0755) and the opened object its rule would hold.
fn executable(scratch: &Path) -> (PathBuf, OpenedObject) {
    let path = scratch.join("tool");
    fs::copy("/bin/sh", &path).expect("copies /bin/sh");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = fs::canonicalize(&path).expect("canonical");
    let object = OpenedObject::open_existing(&RealSys, &path).expect("opens");
    (path, object)
}

fn setting(scratch: &Path) -> HostProcessSetting {
    HostProcessSetting {
        env: vec![("LAZARET_TEST_ONLY".into(), "1".into())],
        cwd: scratch.to_owned(),
        supervisor: lazaret_binary(),
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

/// A report descriptor for a launch that is refused before any spawn.
fn unused_report() -> std::os::fd::OwnedFd {
    let (_read, write) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("a report pipe");
    write
}

fn argv(path: &Path, rest: &[&str]) -> Vec<String> {
    let mut v = vec![path.to_str().expect("UTF-8").to_owned()];
    v.extend(rest.iter().map(|s| (*s).to_owned()));
    v
}

fn run(
    path: &Path,
    object: &OpenedObject,
    rest: &[&str],
    scratch: &Path,
) -> Result<String, LaunchError> {
    let user = RealSys.user_ids().expect("user ids");
    let (_report, report_write) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("a report pipe");
    let mut command = host_command(
        &RealSys,
        &user,
        object,
        &argv(path, rest),
        &setting(scratch),
        report_write.as_fd(),
    )?;
    let mut child = command.spawn().expect("the host process starts");
    drop(report_write);
    // The lifeline stays open until the command ended (closing it stops
    // the command).
    let lifeline = child.stdin.take();
    let out = child.wait_with_output().expect("the host process runs");
    drop(lifeline);
    assert!(out.status.success(), "{out:?}");
    Ok(String::from_utf8(out.stdout).expect("UTF-8"))
}

#[test]
fn the_launcher_runs_the_exact_vector_through_the_held_object() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let (path, object) = executable(scratch.path());
    // Argument zero is the canonical path; no argument is expanded; the
    // environment is exactly the given one; the working directory too.
    let out = run(
        &path,
        &object,
        &[
            "-c",
            r#"tr '\0' '|' < /proc/$$/cmdline; env | sort | tr '\n' '|'; pwd"#,
            "$(id)",
            "a;b",
        ],
        scratch.path(),
    )
    .expect("runs");
    let cwd = fs::canonicalize(scratch.path()).expect("canonical");
    // sh may export SHLVL and a default PATH of its own; what Lazaret
    // passes is exactly LAZARET_TEST_ONLY.
    assert!(out.starts_with(&format!("{}|-c|", path.display())), "{out}");
    assert!(out.contains("|$(id)|a;b|"), "{out}");
    assert!(out.contains("LAZARET_TEST_ONLY=1|"), "{out}");
    assert!(!out.contains("HOME="), "nothing is inherited: {out}");
    assert!(
        out.trim_end().ends_with(&cwd.display().to_string()),
        "{out}"
    );
}

#[test]
fn a_script_runs_by_its_own_interpreter_line() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let path = scratch.path().join("script");
    fs::write(&path, "#!/bin/sh\nprintf '%s,' \"$@\"\n").expect("writes");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = fs::canonicalize(&path).expect("canonical");
    let object = OpenedObject::open_existing(&RealSys, &path).expect("opens");
    let out = run(&path, &object, &["one two", "*"], scratch.path()).expect("runs");
    assert_eq!(out, "one two,*,");
}

/// A command that cannot start (its `#!` interpreter is missing) is the
/// spawn's error with the command's own errno, reported by the supervisor
/// (the service's `Failed`), not an exit status of the supervisor.
#[test]
fn a_command_that_cannot_start_fails_its_spawn_with_its_errno() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let path = scratch.path().join("script");
    fs::write(&path, "#!/nonexistent/interpreter\n").expect("writes");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = fs::canonicalize(&path).expect("canonical");
    let object = OpenedObject::open_existing(&RealSys, &path).expect("opens");
    let refused = spawn_host(&path, &object, &[], scratch.path())
        .and_then(super::host_process::Starting::started)
        .expect_err("the command cannot start");
    assert_eq!(
        refused.raw_os_error(),
        Some(rustix::io::Errno::NOENT.raw_os_error()),
        "{refused}"
    );
}

/// Spawns the host command `path` (opened as `object`) with `rest` under
/// its supervisor, in `scratch`.
fn spawn_host(
    path: &Path,
    object: &OpenedObject,
    rest: &[&str],
    scratch: &Path,
) -> std::io::Result<super::host_process::Starting> {
    let user = RealSys.user_ids().expect("user ids");
    let (report, report_write) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("a report pipe");
    let mut command = host_command(
        &RealSys,
        &user,
        object,
        &argv(path, rest),
        &setting(scratch),
        report_write.as_fd(),
    )
    .expect("the launch is allowed");
    super::host_process::HostProcess::spawn(&mut command, report, report_write)
}

/// What the launcher says of a fresh executable after `change(scratch,
/// path)`.
fn launch_after(change: impl FnOnce(&Path, &Path)) -> Result<std::process::Command, LaunchError> {
    let user = RealSys.user_ids().expect("user ids");
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let (path, object) = executable(scratch.path());
    change(scratch.path(), &path);
    host_command(
        &RealSys,
        &user,
        &object,
        &argv(&path, &[]),
        &setting(scratch.path()),
        unused_report().as_fd(),
    )
}

#[test]
fn an_executable_changed_after_load_is_refused() {
    launch_after(|_, _| {}).expect("an unchanged executable launches");
    let refused = launch_after(|scratch, path| {
        fs::hard_link(path, scratch.join("second-name")).expect("links");
    });
    assert!(
        matches!(&refused, Err(LaunchError::Rules { problem, .. }) if problem.contains("2 hard links")),
        "{refused:?}"
    );
    let refused = launch_after(|scratch, path| {
        let other = scratch.join("other");
        fs::copy("/bin/sh", &other).expect("copies");
        fs::rename(&other, path).expect("renames over");
    });
    assert!(
        matches!(refused, Err(LaunchError::Changed { .. })),
        "{refused:?}"
    );
    let refused = launch_after(|_, path| {
        fs::set_permissions(path, fs::Permissions::from_mode(0o775)).expect("chmod");
    });
    assert!(
        matches!(&refused, Err(LaunchError::Rules { problem, .. }) if problem.contains("no group or other write")),
        "{refused:?}"
    );
}

#[test]
fn only_the_approved_executable_by_its_canonical_path_is_launched() {
    let user = RealSys.user_ids().expect("user ids");
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let (path, object) = executable(scratch.path());
    let link = scratch.path().join("alias");
    std::os::unix::fs::symlink(&path, &link).expect("a symlink");
    let refused = host_command(
        &RealSys,
        &user,
        &object,
        &argv(&link, &[]),
        &setting(scratch.path()),
        unused_report().as_fd(),
    );
    assert!(
        matches!(refused, Err(LaunchError::NotTheExecutable { .. })),
        "{refused:?}"
    );
    let refused = host_command(
        &RealSys,
        &user,
        &object,
        &["tool".to_owned(), "-c".to_owned()],
        &setting(scratch.path()),
        unused_report().as_fd(),
    );
    assert!(
        matches!(
            refused,
            Err(LaunchError::Argv(CommandError::RequiresShell { .. }))
        ),
        "{refused:?}"
    );
}

/// Spec 3.8 (Lazaret.tla `CloseSession` "terminates and reaps the
/// session's host process before anything else"): a close that comes
/// while a host process is being spawned waits for the spawn and stops and
/// reaps what it spawned before it returns; a spawn after the close
/// spawns nothing.
#[test]
fn a_close_during_a_spawn_stops_what_it_spawned_and_a_later_spawn_spawns_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    use lazaret_runtime::records::ids::SessionId;

    use super::running::RunningHostProcesses;

    const SESSION: SessionId = SessionId([7; 16]);
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let (path, object) = executable(scratch.path());
    let running = RunningHostProcesses::default();
    let live = AtomicBool::new(true);
    let (spawning_tx, spawning) = mpsc::channel();
    let started = std::thread::scope(|scope| {
        let spawner = scope.spawn(|| {
            let spawned = running.spawn(
                SESSION,
                || live.load(Ordering::SeqCst),
                || {
                    spawning_tx.send(()).expect("the closer waits");
                    // The close is asked now, while the spawn holds the lock.
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    spawn_host(&path, &object, &["-c", "exec sleep 60"], scratch.path())
                },
            );
            spawned
                .expect("the session was served")
                .and_then(|(starting, _registration)| starting.started())
        });
        spawning.recv().expect("the spawn begins");
        running
            .close(SESSION, || live.store(false, Ordering::SeqCst))
            .expect("the host process is stopped and reaped");
        assert_eq!(running.len(), 0, "nothing stays registered after the close");
        spawner.join().expect("the spawner")
    });
    // Stopped by the close, before or after it reported running: it exited
    // and was reaped before the close returned.
    if let Ok(mut process) = started {
        assert!(
            process.try_reap().expect("reaps").is_some(),
            "the host process still runs after its session's close"
        );
    }
    let after = running.spawn(
        SESSION,
        || live.load(Ordering::SeqCst),
        || panic!("a host process spawned after its session's close"),
    );
    assert!(after.is_none());
}

/// A host process that fails to start is no longer registered once its
/// request lets go of it, so the session's next request runs (spec 3.8:
/// one request of a session at a time, each with its own host process).
#[test]
fn a_failed_start_leaves_no_registration_and_the_next_spawn_runs() {
    use lazaret_runtime::records::ids::SessionId;

    use super::running::RunningHostProcesses;

    const SESSION: SessionId = SessionId([8; 16]);
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let script = scratch.path().join("script");
    fs::write(&script, "#!/nonexistent/interpreter\n").expect("writes");
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).expect("chmod");
    let script = fs::canonicalize(&script).expect("canonical");
    let unstartable = OpenedObject::open_existing(&RealSys, &script).expect("opens");
    let running = RunningHostProcesses::default();
    {
        let (starting, _registration) = running
            .spawn(
                SESSION,
                || true,
                || spawn_host(&script, &unstartable, &[], scratch.path()),
            )
            .expect("served")
            .expect("the supervisor spawns");
        starting.started().expect_err("the command cannot start");
    }
    assert_eq!(running.len(), 0, "a failed start stays registered");
    let (path, object) = executable(scratch.path());
    let (starting, _registration) = running
        .spawn(
            SESSION,
            || true,
            || spawn_host(&path, &object, &["-c", "exit 0"], scratch.path()),
        )
        .expect("served")
        .expect("the next host process spawns");
    let mut process = starting.started().expect("the next host process runs");
    process.kill_and_reap().expect("stopped and reaped");
}
