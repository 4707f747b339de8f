//! The ignored-path router against the real kernel and real Git (spec 3.5,
//! "Ignored Workspace State routing contract"; SR-13, SR-4): mounted over a
//! repository in a private user and mount namespace, what the repository's
//! rules ignore goes to isolated state and the rest to the host, a host
//! secret the rules ignore is never shown, a repository made inside is never
//! the host's, and no set-ID or world-writable bit reaches a file.
//!
//! Each test re-runs itself under `unshare --user --map-root-user --mount`
//! (see `support`).

use lazaret_effects::git_sentry::filter::{self, IndexJudge};
use lazaret_effects::workspace_router::mount;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;

mod support;
use support::{outer, INNER};

fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "safe.directory=*",
            "-c",
            "maintenance.auto=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .map_err(|e| format!("git {args:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "git {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn io<T>(what: &str, r: std::io::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// Asserts that `r` failed with `errno`.
fn fails<T: std::fmt::Debug>(what: &str, errno: i32, r: std::io::Result<T>) -> Result<(), String> {
    match r {
        Err(e) if e.raw_os_error() == Some(errno) => Ok(()),
        other => Err(format!("{what}: expected errno {errno}, got {other:?}")),
    }
}

const EPERM: i32 = 1;
const ENOENT: i32 = 2;
const EIO: i32 = 5;
const EOPNOTSUPP: i32 = 95;
const EXDEV: i32 = 18;

/// A repository with ignored host content: a secret, dependencies, a log,
/// build output next to a force-added tracked file.
fn fixture(root: &Path) -> Result<(), String> {
    io("mkdir", fs::create_dir_all(root.join("src")))?;
    io("mkdir", fs::create_dir_all(root.join("build")))?;
    io("mkdir", fs::create_dir_all(root.join("node_modules/dep")))?;
    git(root, &["init", "-q"])?;
    io(
        ".gitignore",
        fs::write(
            root.join(".gitignore"),
            ".env\nnode_modules/\n*.log\nbuild/\n",
        ),
    )?;
    io(
        "main.rs",
        fs::write(root.join("src/main.rs"), "fn main() {}\n"),
    )?;
    io("README", fs::write(root.join("README"), "readme\n"))?;
    io("keep", fs::write(root.join("build/keep.txt"), "kept\n"))?;
    io(".env", fs::write(root.join(".env"), "SECRET=host\n"))?;
    io(
        "dep",
        fs::write(root.join("node_modules/dep/index.js"), "host\n"),
    )?;
    io("log", fs::write(root.join("app.log"), "host log\n"))?;
    io("out", fs::write(root.join("build/out.o"), "host object\n"))?;
    git(root, &["add", ".gitignore", "src", "README"])?;
    git(root, &["add", "-f", "build/keep.txt"])?;
    git(root, &["commit", "-q", "-m", "first"])?;
    Ok(())
}

/// The workspace (with [`fixture`]), the isolated state and the mount
/// point, made in `top`.
fn fixture_dirs(top: &Path) -> Result<(PathBuf, PathBuf, PathBuf), String> {
    let (ws, iso, mnt) = (top.join("ws"), top.join("iso"), top.join("mnt"));
    for d in [&ws, &iso, &mnt] {
        io("mkdir", fs::create_dir(d))?;
    }
    fixture(&ws)?;
    Ok((ws, iso, mnt))
}

/// Waits up to 5 s for `done`: a new snapshot (the watcher looks every
/// 250 ms) or a host change reaching the kernel's caches.
fn eventually(what: &str, done: impl Fn() -> bool) -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if done() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Err(format!("{what}: not seen within 5 s"))
}

fn names(dir: &Path) -> Result<Vec<String>, String> {
    let mut n: Vec<String> = io("list", fs::read_dir(dir))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    Ok(n)
}

#[test]
fn ignored_paths_live_in_isolated_state_and_the_rest_on_the_host() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("ignored_paths_live_in_isolated_state_and_the_rest_on_the_host");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (ws, iso, mnt) = fixture_dirs(tmp.path())?;
    // A stale isolated entry at a path that routes to the host stays
    // hidden (and kept).
    io("stale", fs::write(iso.join("README"), "stale\n"))?;
    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;
    assert_eq!(
        io("read", fs::read_to_string(mnt.join("README")))?,
        "readme\n"
    );

    // Tracked and ordinary paths are the host's, both ways.
    assert_eq!(
        io("read", fs::read_to_string(mnt.join("src/main.rs")))?,
        "fn main() {}\n"
    );
    assert_eq!(
        io("read", fs::read_to_string(mnt.join("build/keep.txt")))?,
        "kept\n"
    );
    // With the host's inode numbers, so Git's index (which records them)
    // stays valid both ways.
    assert_eq!(
        io("stat", fs::metadata(mnt.join("src/main.rs")))?.ino(),
        io("stat", fs::metadata(ws.join("src/main.rs")))?.ino()
    );
    // The host's ignored content is not shown, not even its names.
    for hidden in [".env", "node_modules", "app.log", "build/out.o"] {
        fails(hidden, ENOENT, fs::metadata(mnt.join(hidden)))?;
    }
    assert_eq!(
        names(&mnt)?,
        [".git", ".gitignore", "README", "build", "src"]
    );
    assert_eq!(names(&mnt.join("build"))?, ["keep.txt"]);
    // Nor how many: the root's link count on the host counts the hidden
    // node_modules/; through the router a directory's is 1 (not counted).
    assert!(io("stat", fs::metadata(&ws))?.nlink() > 4);
    assert_eq!(io("stat", fs::metadata(&mnt))?.nlink(), 1);

    // What the sandbox writes at ignored paths goes to isolated state.
    io(".env", fs::write(mnt.join(".env"), "SECRET=sandbox\n"))?;
    io("deps", fs::create_dir_all(mnt.join("node_modules/pkg/bin")))?;
    io(
        "dep",
        fs::write(mnt.join("node_modules/pkg/bin/run"), "sandbox\n"),
    )?;
    io("log", fs::write(mnt.join("src/debug.log"), "sandbox log\n"))?;
    io(
        "out",
        fs::write(mnt.join("build/out.o"), "sandbox object\n"),
    )?;
    assert_eq!(
        io("read", fs::read_to_string(mnt.join(".env")))?,
        "SECRET=sandbox\n"
    );
    assert_eq!(
        io("read", fs::read_to_string(iso.join(".env")))?,
        "SECRET=sandbox\n"
    );
    assert_eq!(
        io("read", fs::read_to_string(ws.join(".env")))?,
        "SECRET=host\n"
    );
    assert!(iso.join("node_modules/pkg/bin/run").is_file());
    assert!(!ws.join("node_modules/pkg").exists());
    assert!(iso.join("src/debug.log").is_file() && !ws.join("src/debug.log").exists());
    assert_eq!(
        io("read", fs::read_to_string(ws.join("build/out.o")))?,
        "host object\n"
    );
    assert_eq!(names(&mnt.join("build"))?, ["keep.txt", "out.o"]);
    // ... and the rest to the host.
    io("new", fs::write(mnt.join("src/lib.rs"), "// lib\n"))?;
    assert_eq!(
        io("read", fs::read_to_string(ws.join("src/lib.rs")))?,
        "// lib\n"
    );
    assert!(!iso.join("src/lib.rs").exists());
    // The host's own changes show at once.
    io("host", fs::write(ws.join("src/host.rs"), "// host\n"))?;
    assert_eq!(
        io("read", fs::read_to_string(mnt.join("src/host.rs")))?,
        "// host\n"
    );

    // Renames and links stay in one backing or fail with EXDEV, untouched.
    fails(
        "rename host to ignored",
        EXDEV,
        fs::rename(mnt.join("src/lib.rs"), mnt.join("src/lib.log")),
    )?;
    fails(
        "rename ignored to host",
        EXDEV,
        fs::rename(mnt.join("src/debug.log"), mnt.join("src/debug.rs")),
    )?;
    fails(
        "link host to ignored",
        EXDEV,
        fs::hard_link(mnt.join("src/lib.rs"), mnt.join("src/lib.log")),
    )?;
    fails(
        "move a tracked directory under an ignored name",
        EXDEV,
        fs::rename(mnt.join("src"), mnt.join("node_modules/src")),
    )?;
    assert!(ws.join("src/lib.rs").is_file() && iso.join("src/debug.log").is_file());
    io(
        "same-backing rename",
        fs::rename(mnt.join("src/debug.log"), mnt.join("src/old.log")),
    )?;
    assert!(iso.join("src/old.log").is_file());
    io(
        "same-backing rename",
        fs::rename(mnt.join("src/lib.rs"), mnt.join("src/lib2.rs")),
    )?;
    assert!(ws.join("src/lib2.rs").is_file());
    // A directory moves only when nothing below it changes backing: not
    // with isolated content below it (it would be left behind) ...
    fails(
        "move a directory holding isolated content",
        EXDEV,
        fs::rename(mnt.join("src"), mnt.join("source")),
    )?;
    // ... nor when a hidden host entry below it would stop being ignored
    // (`build/out.o` under `bld/`).
    fails(
        "move a directory whose hidden entries would show",
        EXDEV,
        fs::rename(mnt.join("build"), mnt.join("bld")),
    )?;
    fails("exchange directories", EXDEV, {
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            mnt.join("build"),
            rustix::fs::CWD,
            mnt.join("src"),
            rustix::fs::RenameFlags::EXCHANGE,
        )
        .map_err(std::io::Error::from)
    })?;
    assert!(ws.join("build/out.o").is_file() && iso.join("src/old.log").is_file());
    io(
        "remove the isolated log",
        fs::remove_file(mnt.join("src/old.log")),
    )?;
    io(
        "rename a directory",
        fs::rename(mnt.join("src"), mnt.join("source")),
    )?;
    assert_eq!(
        io("read", fs::read_to_string(mnt.join("source/lib2.rs")))?,
        "// lib\n"
    );
    // Below the moved directory, routes follow the new path.
    io("log below", fs::write(mnt.join("source/new.log"), "x\n"))?;
    assert!(iso.join("source/new.log").is_file());

    // A repository made inside is never the host's.
    io("mkdir", fs::create_dir(mnt.join("nested")))?;
    git(&mnt.join("nested"), &["init", "-q"])?;
    assert!(ws.join("nested").is_dir() && !ws.join("nested/.git").exists());
    assert!(iso.join("nested/.git/config").is_file());
    git(&mnt.join("nested"), &["status", "--short"])?;

    // No set-ID or world-writable bit reaches a file or directory.
    let f = mnt.join("source/tool");
    io("tool", fs::write(&f, "#!/bin/sh\n"))?;
    for (asked, kept) in [
        (0o4755, 0o755),
        (0o2755, 0o755),
        (0o6777, 0o775),
        (0o777, 0o775),
    ] {
        io(
            "chmod",
            fs::set_permissions(&f, fs::Permissions::from_mode(asked)),
        )?;
        let mode = io("stat", fs::metadata(ws.join("source/tool")))?.mode() & 0o7777;
        assert_eq!(mode, kept, "asked {asked:o}");
    }
    io("mkdir", fs::create_dir(mnt.join("shared")))?;
    io(
        "chmod",
        fs::set_permissions(mnt.join("shared"), fs::Permissions::from_mode(0o2777)),
    )?;
    assert_eq!(
        io("stat", fs::metadata(ws.join("shared")))?.mode() & 0o7777,
        0o775
    );
    io(
        "setuid in isolated state",
        fs::write(mnt.join("x.log"), "x"),
    )?;
    io(
        "chmod",
        fs::set_permissions(mnt.join("x.log"), fs::Permissions::from_mode(0o4777)),
    )?;
    assert_eq!(
        io("stat", fs::metadata(iso.join("x.log")))?.mode() & 0o7777,
        0o775
    );

    // FIFOs are made; device nodes never are.
    let fifo = Command::new("mkfifo").arg(mnt.join("source/pipe")).status();
    assert!(io("mkfifo", fifo)?.success());
    let dev = rustix::fs::mknodat(
        rustix::fs::CWD,
        mnt.join("source/dev"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o644),
        rustix::fs::makedev(1, 3),
    );
    fails("mknod", EPERM, dev.map_err(std::io::Error::from))?;
    assert!(!ws.join("source/dev").exists());

    // Live ignore changes publish a new snapshot: the sandbox ignores a
    // host file through the router (its host entry is hidden from then on,
    // and kept)...
    io(
        "host notes",
        fs::write(ws.join("notes.txt"), "host notes\n"),
    )?;
    assert!(mnt.join("notes.txt").is_file());
    let mut rules = io(
        "read .gitignore",
        fs::read_to_string(mnt.join(".gitignore")),
    )?;
    rules.push_str("notes.txt\n");
    io("edit .gitignore", fs::write(mnt.join(".gitignore"), &rules))?;
    eventually("the sandbox's ignore edit", || {
        !mnt.join("notes.txt").exists()
    })?;
    assert_eq!(
        io("read", fs::read_to_string(ws.join("notes.txt")))?,
        "host notes\n"
    );
    // A new directory's own .gitignore counts at once too.
    io("mkdir", fs::create_dir(mnt.join("fresh")))?;
    io("fresh file", fs::write(mnt.join("fresh/cache.bin"), "x"))?;
    assert!(ws.join("fresh/cache.bin").is_file());
    io(
        "fresh rules",
        fs::write(mnt.join("fresh/.gitignore"), "*.bin\n"),
    )?;
    eventually("a new directory's .gitignore", || {
        !mnt.join("fresh/cache.bin").exists()
    })?;
    // ... and the host un-ignores one on its side.
    rules.push_str("!app.log\n");
    io(
        "host edits .gitignore",
        fs::write(ws.join(".gitignore"), &rules),
    )?;
    eventually("the host's ignore edit", || mnt.join("app.log").is_file())?;
    assert_eq!(
        io("read", fs::read_to_string(mnt.join("app.log")))?,
        "host log\n"
    );

    // A repository that stops looking like one (a broken HEAD) does not
    // make the ignored host files visible: the prior snapshot stays.
    let head = io("read HEAD", fs::read(ws.join(".git/HEAD")))?;
    io("break HEAD", fs::write(ws.join(".git/HEAD"), "garbage\n"))?;
    io(
        "nudge",
        fs::write(mnt.join("fresh/.gitignore"), "*.bin\n*.tmp\n"),
    )?;
    std::thread::sleep(std::time::Duration::from_millis(600));
    fails(
        "a hidden host file after a broken HEAD",
        ENOENT,
        fs::metadata(mnt.join("notes.txt")),
    )?;
    assert_eq!(
        io("read", fs::read_to_string(mnt.join(".env")))?,
        "SECRET=sandbox\n"
    );
    io("restore HEAD", fs::write(ws.join(".git/HEAD"), head))?;

    // Open handles stay with their object across a transition: a host file
    // opened before it became ignored keeps being written on the host, and
    // a new lookup shows the isolated side (absent here); nothing is copied.
    let mut held = io(
        "open draft",
        fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(mnt.join("draft.txt")),
    )?;
    rules.push_str("draft.txt\n");
    io("ignore draft", fs::write(mnt.join(".gitignore"), &rules))?;
    eventually("the draft's transition", || !mnt.join("draft.txt").exists())?;
    io(
        "write through the old handle",
        held.write_all(b"still host\n"),
    )?;
    drop(held);
    assert_eq!(
        io("read", fs::read_to_string(ws.join("draft.txt")))?,
        "still host\n"
    );
    assert!(!iso.join("draft.txt").exists());
    io("new draft", fs::write(mnt.join("draft.txt"), "isolated\n"))?;
    assert_eq!(
        io("read", fs::read_to_string(iso.join("draft.txt")))?,
        "isolated\n"
    );
    assert_eq!(
        io("read", fs::read_to_string(ws.join("draft.txt")))?,
        "still host\n"
    );

    router.unmount().map_err(|e| e.to_string())?;
    // The host's ignored files are as they were.
    assert_eq!(
        io("read", fs::read_to_string(ws.join(".env")))?,
        "SECRET=host\n"
    );
    assert_eq!(
        io(
            "read",
            fs::read_to_string(ws.join("node_modules/dep/index.js"))
        )?,
        "host\n"
    );
    assert_eq!(
        io("read", fs::read_to_string(ws.join("app.log")))?,
        "host log\n"
    );
    assert_eq!(
        io("read", fs::read_to_string(iso.join("README")))?,
        "stale\n"
    );
    Ok(())
}

/// A repository the sandbox makes and registers as a gitlink in the shared
/// index would make a plain host `git status` run its `core.fsmonitor`
/// (docs/git-sentry.md). Through the router its `.git` is isolated state:
/// host Git sees an unpopulated submodule and runs nothing. The control
/// (the same steps straight on the host) runs the marker.
#[test]
fn a_repository_made_inside_never_runs_code_in_host_git() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("a_repository_made_inside_never_runs_code_in_host_git");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let plant = |top: &Path, marker: &Path| -> Result<(), String> {
        let evil = top.join("evil");
        io("mkdir", fs::create_dir(&evil))?;
        git(&evil, &["init", "-q"])?;
        let monitor = evil.join("monitor.sh");
        io(
            "monitor",
            fs::write(&monitor, format!("#!/bin/sh\ntouch {}\n", marker.display())),
        )?;
        io(
            "chmod",
            fs::set_permissions(&monitor, fs::Permissions::from_mode(0o755)),
        )?;
        git(&evil, &["add", "monitor.sh"])?;
        git(&evil, &["commit", "-q", "-m", "x"])?;
        git(
            &evil,
            &["config", "core.fsmonitor", &monitor.display().to_string()],
        )?;
        git(top, &["add", "evil"])?;
        Ok(())
    };

    // Control: straight on the host, the attack works.
    let control = tmp.path().join("control");
    io("mkdir", fs::create_dir(&control))?;
    fixture(&control)?;
    let control_marker = tmp.path().join("control-marker");
    plant(&control, &control_marker)?;
    let _ = git(&control, &["status", "--short"]);
    assert!(
        control_marker.exists(),
        "the attack did not work without the router: this test proves nothing"
    );

    // Through the router it does not.
    let (ws, iso, mnt) = fixture_dirs(tmp.path())?;
    let marker = tmp.path().join("marker");
    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;
    plant(&mnt, &marker)?;
    router.unmount().map_err(|e| e.to_string())?;
    assert!(!marker.exists(), "the planted monitor ran inside");
    assert!(!ws.join("evil/.git").exists());
    let status = git(&ws, &["status", "--short"])?;
    let _ = git(&ws, &["diff", "--stat"]);
    assert!(
        !marker.exists(),
        "host git ran the planted monitor: {status}"
    );
    Ok(())
}

/// A bare repository the sandbox makes anywhere in the workspace (`git init
/// --bare`, with `core.worktree` and `core.fsmonitor` set) is never the
/// host's: its `HEAD` lands in isolated state, so host Git started in that
/// directory finds the workspace's own repository instead. The control
/// (the same steps straight on the host) runs the marker.
#[test]
fn a_bare_repository_made_inside_is_never_the_hosts() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("a_bare_repository_made_inside_is_never_the_hosts");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    // `top`: where the steps run; `host`: the same tree as host Git sees it.
    let plant = |top: &Path, host: &Path, marker: &Path| -> Result<(), String> {
        io("mkdir", fs::create_dir(top.join("tools")))?;
        git(top, &["init", "--bare", "-q", "tools/cache"])?;
        let monitor = top.join("tools/monitor.sh");
        io(
            "monitor",
            fs::write(&monitor, format!("#!/bin/sh\ntouch {}\n", marker.display())),
        )?;
        io(
            "chmod",
            fs::set_permissions(&monitor, fs::Permissions::from_mode(0o755)),
        )?;
        let git_dir = format!("--git-dir={}", top.join("tools/cache").display());
        let host_monitor = host.join("tools/monitor.sh").display().to_string();
        for (key, value) in [
            ("core.bare", "false"),
            ("core.worktree", ".."),
            ("core.fsmonitor", host_monitor.as_str()),
        ] {
            git(top, &[git_dir.as_str(), "config", key, value])?;
        }
        Ok(())
    };

    // Control: straight on the host, host Git in that directory runs it.
    let control = tmp.path().join("control");
    io("mkdir", fs::create_dir(&control))?;
    fixture(&control)?;
    let control_marker = tmp.path().join("control-marker");
    plant(&control, &control, &control_marker)?;
    let _ = git(&control.join("tools/cache"), &["status", "--short"]);
    assert!(
        control_marker.exists(),
        "the attack did not work without the router: this test proves nothing"
    );

    // Through the router the sandbox has its bare repository, the host none.
    let (ws, iso, mnt) = fixture_dirs(tmp.path())?;
    let marker = tmp.path().join("marker");
    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;
    plant(&mnt, &ws, &marker)?;
    assert_eq!(
        io("inside", fs::read_to_string(mnt.join("tools/cache/HEAD")))?,
        "ref: refs/heads/main\n"
    );
    router.unmount().map_err(|e| e.to_string())?;
    assert!(!ws.join("tools/cache/HEAD").exists());
    assert!(iso.join("tools/cache/HEAD").exists());
    let cache = ws.join("tools/cache");
    let found = git(&cache, &["rev-parse", "--absolute-git-dir"])?;
    assert_eq!(found.trim_end(), ws.join(".git").display().to_string());
    let status = git(&cache, &["status", "--short"])?;
    assert!(
        !marker.exists(),
        "host git ran the planted monitor: {status}"
    );
    Ok(())
}

/// A bare repository the host had in the workspace keeps its
/// configuration and hooks, and stays where it is; a `HEAD` Git does not
/// accept stays so. Each attack works on a plain copy of the tree (the
/// control) and runs nothing through the router.
#[test]
fn a_bare_repository_the_host_had_keeps_its_configuration() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("a_bare_repository_the_host_had_keeps_its_configuration");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    // The host's tree: a bare repository and a directory with a `HEAD` Git
    // does not accept, both untracked, and a tracked bare repository inside
    // a directory the rules exclude (which no walk looks into).
    let host_tree = |root: &Path| -> Result<(), String> {
        fixture(root)?;
        io("mkdir", fs::create_dir(root.join("tools")))?;
        git(root, &["init", "--bare", "-q", "tools/cache.git"])?;
        io("mkdir", fs::create_dir(root.join("notes")))?;
        io("HEAD", fs::write(root.join("notes/HEAD"), "not a head\n"))?;
        git(root, &["init", "--bare", "-q", "build/fx.git"])?;
        git(
            root,
            &["add", "-f", "build/fx.git/HEAD", "build/fx.git/config"],
        )?;
        Ok(())
    };
    // `top`: where the sandbox's steps run; `host`: the same tree as host
    // Git sees it. Each step's result is returned, not asserted.
    let attack = |top: &Path,
                  host: &Path,
                  marker: &Path|
     -> Vec<(&'static str, std::io::Result<()>)> {
        let monitor = host.join("tools/monitor.sh");
        let config = format!(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ..\n\tfsmonitor = {}\n",
            monitor.display()
        );
        let script = format!("#!/bin/sh\ntouch {}\n", marker.display());
        vec![
            (
                "monitor",
                fs::write(top.join("tools/monitor.sh"), &script).and_then(|()| {
                    fs::set_permissions(
                        top.join("tools/monitor.sh"),
                        fs::Permissions::from_mode(0o755),
                    )
                }),
            ),
            (
                "config",
                fs::OpenOptions::new()
                    .append(true)
                    .open(top.join("tools/cache.git/config"))
                    .and_then(|mut f| f.write_all(config.as_bytes())),
            ),
            (
                "hook",
                fs::write(top.join("tools/cache.git/hooks/post-checkout"), &script),
            ),
            (
                "tracked config",
                fs::OpenOptions::new()
                    .append(true)
                    .open(top.join("build/fx.git/config"))
                    .and_then(|mut f| f.write_all(config.as_bytes())),
            ),
            (
                "HEAD",
                fs::write(top.join("notes/HEAD"), "ref: refs/heads/main\n"),
            ),
            ("objects", fs::create_dir(top.join("notes/objects"))),
            ("refs", fs::create_dir(top.join("notes/refs"))),
            ("notes config", fs::write(top.join("notes/config"), &config)),
        ]
    };
    // Whether host Git started in each directory ran the monitor.
    let ran = |host: &Path, marker: &Path| -> Vec<bool> {
        ["tools/cache.git", "notes", "build/fx.git"]
            .iter()
            .map(|dir| {
                let _ = fs::remove_file(marker);
                let _ = git(&host.join(dir), &["status", "--short"]);
                marker.exists()
            })
            .collect()
    };

    // Control: straight on the host, the attack works.
    let control = tmp.path().join("control");
    io("mkdir", fs::create_dir(&control))?;
    host_tree(&control)?;
    let control_marker = tmp.path().join("control-marker");
    for (step, r) in attack(&control, &control, &control_marker) {
        io(step, r)?;
    }
    assert_eq!(
        ran(&control, &control_marker),
        [true, true, true],
        "an attack did not work without the router: this test proves nothing"
    );

    // Through the router.
    let (ws, iso, mnt) = (
        tmp.path().join("ws"),
        tmp.path().join("iso"),
        tmp.path().join("mnt"),
    );
    for d in [&ws, &iso, &mnt] {
        io("mkdir", fs::create_dir(d))?;
    }
    host_tree(&ws)?;
    let config_before = io("config", fs::read(ws.join("tools/cache.git/config")))?;
    let marker = tmp.path().join("marker");
    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;
    for (step, r) in attack(&mnt, &ws, &marker) {
        match step {
            "config" | "hook" | "HEAD" | "tracked config" => fails(step, EPERM, r)?,
            _ => io(step, r)?,
        }
    }
    // Neither `HEAD` changes: not in place, not by a second name.
    fails(
        "bare HEAD",
        EPERM,
        fs::write(mnt.join("tools/cache.git/HEAD"), "garbage\n"),
    )?;
    fails(
        "HEAD link",
        EPERM,
        fs::hard_link(mnt.join("notes/HEAD"), mnt.join("notes/alias")),
    )?;
    // It does not move away from its guards, nor does a directory above it.
    fails(
        "move",
        EPERM,
        fs::rename(mnt.join("tools/cache.git"), mnt.join("tools/moved.git")),
    )?;
    fails(
        "move above",
        EPERM,
        fs::rename(mnt.join("tools"), mnt.join("tools2")),
    )?;
    // The sandbox's Git still writes objects and refs in it.
    let bare = format!("--git-dir={}", mnt.join("tools/cache.git").display());
    let blob = git(&mnt, &[bare.as_str(), "hash-object", "-w", "README"])?;
    git(
        &mnt,
        &[bare.as_str(), "update-ref", "refs/tags/t", blob.trim()],
    )?;
    router.unmount().map_err(|e| e.to_string())?;

    assert_eq!(
        io("config", fs::read(ws.join("tools/cache.git/config")))?,
        config_before
    );
    assert!(!ws.join("tools/cache.git/hooks/post-checkout").exists());
    assert_eq!(
        io("HEAD", fs::read_to_string(ws.join("notes/HEAD")))?,
        "not a head\n"
    );
    assert!(ws.join("tools/cache.git/refs/tags/t").exists());
    assert_eq!(
        ran(&ws, &marker),
        [false, false, false],
        "host git ran the planted monitor"
    );
    Ok(())
}

/// A nested repository whose `.git` file names a git directory elsewhere in
/// the workspace (`git init --separate-git-dir`): that directory holds a
/// `HEAD` Git accepts, so its configuration and hooks are guarded there.
#[test]
fn a_separate_git_directory_in_the_workspace_is_guarded() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("a_separate_git_directory_in_the_workspace_is_guarded");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (ws, iso, mnt) = fixture_dirs(tmp.path())?;
    io("mkdir", fs::create_dir_all(ws.join("vendor/lib")))?;
    io("mkdir", fs::create_dir_all(ws.join("meta")))?;
    git(
        &ws.join("vendor/lib"),
        &["init", "-q", "--separate-git-dir", "../../meta/lib.git"],
    )?;
    let config_before = io("config", fs::read(ws.join("meta/lib.git/config")))?;
    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;
    fails(
        "config",
        EPERM,
        fs::OpenOptions::new()
            .append(true)
            .open(mnt.join("meta/lib.git/config")),
    )?;
    fails(
        "hook",
        EPERM,
        fs::write(mnt.join("meta/lib.git/hooks/pre-commit"), "#!/bin/sh\n"),
    )?;
    fails(
        "move",
        EPERM,
        fs::rename(mnt.join("meta"), mnt.join("meta2")),
    )?;
    // Git keeps working in the nested repository.
    io("file", fs::write(mnt.join("vendor/lib/a.txt"), "a\n"))?;
    git(&mnt.join("vendor/lib"), &["add", "a.txt"])?;
    git(&mnt.join("vendor/lib"), &["commit", "-q", "-m", "a"])?;
    router.unmount().map_err(|e| e.to_string())?;
    assert_eq!(
        io("config", fs::read(ws.join("meta/lib.git/config")))?,
        config_before
    );
    assert!(!ws.join("meta/lib.git/hooks/pre-commit").exists());
    assert_eq!(git(&ws.join("vendor/lib"), &["log", "--format=%s"])?, "a\n");
    Ok(())
}

/// A workspace that is no repository (a folder of projects): each project's
/// repository is the host's, guarded and classified by its own rules, and
/// a repository the sandbox makes anywhere else, at the root too, is never
/// the host's.
#[test]
fn a_folder_of_projects_keeps_each_projects_repository() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("a_folder_of_projects_keeps_each_projects_repository");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (ws, iso, mnt) = (
        tmp.path().join("ws"),
        tmp.path().join("iso"),
        tmp.path().join("mnt"),
    );
    for d in [&ws, &iso, &mnt] {
        io("mkdir", fs::create_dir(d))?;
    }
    io("mkdir", fs::create_dir(ws.join("projects")))?;
    let app = ws.join("projects/app");
    io("mkdir", fs::create_dir(&app))?;
    fixture(&app)?;
    io("notes", fs::write(ws.join("notes.txt"), "notes\n"))?;
    let config_before = io("config", fs::read(app.join(".git/config")))?;

    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;
    let inside = mnt.join("projects/app");
    // The project's repository works inside, by its own rules.
    assert_eq!(git(&inside, &["status", "--porcelain"])?, "");
    io("edit", fs::write(inside.join("README"), "changed\n"))?;
    io("build", fs::write(inside.join("build/new.o"), "object\n"))?;
    assert_eq!(git(&inside, &["status", "--porcelain"])?, " M README\n");
    fails(
        "project config",
        EPERM,
        fs::OpenOptions::new()
            .append(true)
            .open(inside.join(".git/config")),
    )?;
    // Outside the project nothing is ignored; a repository made there, or at
    // the root, is the sandbox's.
    io("edit notes", fs::write(mnt.join("notes.txt"), "more\n"))?;
    git(&mnt, &["init", "-q"])?;
    git(&mnt, &["init", "--bare", "-q", "tools/cache"])?;
    router.unmount().map_err(|e| e.to_string())?;

    assert_eq!(
        io("README", fs::read_to_string(app.join("README")))?,
        "changed\n"
    );
    assert!(!app.join("build/new.o").exists());
    assert!(iso.join("projects/app/build/new.o").exists());
    assert_eq!(
        io("config", fs::read(app.join(".git/config")))?,
        config_before
    );
    assert_eq!(
        io("notes", fs::read_to_string(ws.join("notes.txt")))?,
        "more\n"
    );
    assert!(!ws.join(".git").exists());
    assert!(!ws.join("tools/cache/HEAD").exists());
    assert!(iso.join("tools/cache/HEAD").exists());
    Ok(())
}

/// The kernel keeps every inode it has looked up until memory pressure
/// (zero-timeout dentries stay in its unused-dentry cache), and runsc pins
/// the ones it retains: a router holding a descriptor per inode ran out of
/// descriptors on a large tree. With a budget of 256 descriptors, 3,000
/// files are looked up and read; a file unlinked while open keeps its
/// attributes; objects the host moves or replaces are found at their new
/// paths. Listing the directory first (entries answered with their
/// attributes, each counted as a lookup) changes none of it.
#[test]
fn a_large_tree_is_served_within_a_small_descriptor_budget() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("a_large_tree_is_served_within_a_small_descriptor_budget");
    }
    const FILES: usize = 3_000;
    const BUDGET: u64 = 256;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (ws, iso, mnt) = fixture_dirs(tmp.path())?;
    io("mkdir", fs::create_dir(ws.join("src/many")))?;
    for i in 0..FILES {
        io(
            "file",
            fs::write(ws.join(format!("src/many/{i}")), format!("{i}\n")),
        )?;
    }
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(BUDGET),
            maximum: Some(BUDGET),
        },
    )
    .map_err(|e| format!("setrlimit: {e}"))?;
    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;

    // Listed with attributes (the kernel's buffer takes about two hundred
    // entries a reply): every entry once, each the host's object. A file
    // the host removes after the listing began is left out or listed,
    // never an error.
    let listing = io("opendir", fs::read_dir(mnt.join("src/many")))?;
    io("host remove", fs::remove_file(ws.join("src/many/7")))?;
    let mut listed = std::collections::BTreeSet::new();
    for entry in listing {
        let entry = io("readdir", entry)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "7" {
            let host = io("host stat", fs::metadata(ws.join("src/many").join(&name)))?;
            let meta = io("stat listed", entry.metadata())?;
            assert_eq!((meta.ino(), meta.len()), (host.ino(), host.len()), "{name}");
        }
        assert!(listed.insert(name.clone()), "{name} listed twice");
    }
    listed.remove("7");
    let expected: std::collections::BTreeSet<String> = (0..FILES)
        .filter(|i| *i != 7)
        .map(|i| i.to_string())
        .collect();
    assert_eq!(listed, expected);
    io("host restore", fs::write(ws.join("src/many/7"), "7\n"))?;
    eventually("the host's restore", || {
        fs::read_to_string(mnt.join("src/many/7")).is_ok_and(|t| t == "7\n")
    })?;

    // Looked up in one burst (as Git's index refresh does), then read.
    let seen = (0..FILES)
        .map(|i| io("stat", fs::metadata(mnt.join(format!("src/many/{i}")))))
        .collect::<Result<Vec<_>, _>>()?;
    for (i, meta) in seen.iter().enumerate() {
        let path = format!("src/many/{i}");
        assert_eq!(meta.ino(), io("stat", fs::metadata(ws.join(&path)))?.ino());
        assert_eq!(
            io("read", fs::read_to_string(mnt.join(&path)))?,
            format!("{i}\n")
        );
    }
    // What is open is what holds descriptors: the budget was never reached.
    let open = io("fds", fs::read_dir("/proc/self/fd"))?.count();
    assert!(open < 64, "{open} descriptors open after the reads");

    // Unlinked while open: the open file is still the object.
    let mut file = io(
        "open",
        fs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(mnt.join("src/many/0")),
    )?;
    io("unlink", fs::remove_file(mnt.join("src/many/0")))?;
    io("write", file.write_all(b"more\n"))?;
    let meta = io("fstat", file.metadata())?;
    assert_eq!((meta.len(), meta.nlink()), (7, 0));
    drop(file);

    // The host moves a directory and replaces a file behind the router.
    io(
        "host move",
        fs::rename(ws.join("src/many"), ws.join("src/moved")),
    )?;
    eventually("the host's move", || {
        fs::metadata(mnt.join("src/many/1")).is_err()
            && fs::read_to_string(mnt.join("src/moved/1")).is_ok_and(|t| t == "1\n")
    })?;
    fails("old path", ENOENT, fs::metadata(mnt.join("src/many/1")))?;
    io("host new", fs::write(ws.join("src/new"), "replaced\n"))?;
    io(
        "host replace",
        fs::rename(ws.join("src/new"), ws.join("src/moved/2")),
    )?;
    eventually("the host's replacement", || {
        fs::read_to_string(mnt.join("src/moved/2")).is_ok_and(|t| t == "replaced\n")
    })?;
    router.unmount().map_err(|e| e.to_string())?;
    Ok(())
}

/// A listing goes on after the host moves its directory: the entries
/// still to come (with their attributes, since a lookup in the directory
/// came between) are looked up in the directory as it was opened, and
/// every entry is listed once.
#[test]
fn a_listing_goes_on_after_the_host_moves_its_directory() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("a_listing_goes_on_after_the_host_moves_its_directory");
    }
    const FILES: usize = 1_000;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (ws, iso, mnt) = fixture_dirs(tmp.path())?;
    io("mkdir", fs::create_dir(ws.join("src/list")))?;
    for i in 0..FILES {
        io(
            "file",
            fs::write(ws.join(format!("src/list/{i}")), format!("{i}\n")),
        )?;
    }
    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;
    let dir = io("open", fs::File::open(mnt.join("src/list")))?;
    let mut listing = rustix::fs::Dir::read_from(&dir).map_err(|e| format!("opendir: {e}"))?;
    let mut listed = std::collections::BTreeSet::new();
    let mut next = |listed: &mut std::collections::BTreeSet<String>| -> Result<bool, String> {
        match listing.read() {
            None => Ok(false),
            Some(Err(e)) => Err(format!("readdir: {e}")),
            Some(Ok(entry)) => {
                let name = entry.file_name().to_string_lossy().into_owned();
                assert!(listed.insert(name.clone()), "{name} listed twice");
                Ok(true)
            }
        }
    };
    // The first part of the listing (a reply holds about two hundred).
    assert!(next(&mut listed)?, "an empty listing");
    // A lookup in the directory (of a file made after the listing was
    // taken, so the kernel cannot know it): the kernel asks the rest with
    // attributes.
    io("host file", fs::write(ws.join("src/list/later"), "later\n"))?;
    io(
        "lookup",
        rustix::fs::statat(&dir, "later", rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .map_err(std::io::Error::from),
    )?;
    io(
        "host move",
        fs::rename(ws.join("src/list"), ws.join("src/moved")),
    )?;
    eventually("the host's move", || {
        fs::metadata(mnt.join("src/list")).is_err()
    })?;
    // Bounded by the listing's size.
    for _ in 0..=FILES + 2 {
        if !next(&mut listed)? {
            break;
        }
    }
    listed.remove(".");
    listed.remove("..");
    let expected: std::collections::BTreeSet<String> = (0..FILES).map(|i| i.to_string()).collect();
    assert_eq!(listed, expected);
    // The entries are known where they are now: each reads at its new
    // path, and so does the directory's own later one.
    for i in [0, FILES / 2, FILES - 1] {
        assert_eq!(
            io(
                "read",
                fs::read_to_string(mnt.join(format!("src/moved/{i}")))
            )?,
            format!("{i}\n")
        );
    }
    assert_eq!(
        io("read", fs::read_to_string(mnt.join("src/moved/later")))?,
        "later\n"
    );
    drop(listing);
    drop(dir);
    router.unmount().map_err(|e| e.to_string())?;
    Ok(())
}

/// The kernel keeps what the router answers, and what the host changes
/// behind it still reaches the sandbox (spec 3.5: shared in real time): a
/// file's content and mode (also through a file kept open), a new, a
/// removed and a moved entry, a directory moved with its contents.
#[test]
fn host_changes_reach_the_sandbox_through_the_kernels_caches() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("host_changes_reach_the_sandbox_through_the_kernels_caches");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (ws, iso, mnt) = fixture_dirs(tmp.path())?;
    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;
    // Looked up, read and kept open through the router: all cached.
    assert_eq!(
        io("read", fs::read_to_string(mnt.join("README")))?,
        "readme\n"
    );
    let kept = io("open", fs::File::open(mnt.join("README")))?;
    assert_eq!(io("fstat", kept.metadata())?.len(), 7);
    io("stat", fs::metadata(mnt.join("src/main.rs")))?;

    // Content and mode.
    let mut host = io(
        "host open",
        fs::OpenOptions::new().append(true).open(ws.join("README")),
    )?;
    io("host append", host.write_all(b"more\n"))?;
    drop(host);
    eventually("the host's append", || {
        fs::read_to_string(mnt.join("README")).is_ok_and(|t| t == "readme\nmore\n")
            && kept.metadata().is_ok_and(|m| m.len() == 12)
    })?;
    io(
        "host chmod",
        fs::set_permissions(ws.join("README"), fs::Permissions::from_mode(0o600)),
    )?;
    eventually("the host's chmod", || {
        fs::metadata(mnt.join("README")).is_ok_and(|m| m.mode() & 0o777 == 0o600)
    })?;

    // Entries: new, removed, renamed.
    io(
        "host new",
        fs::write(ws.join("src/lib.rs"), "pub fn f() {}\n"),
    )?;
    eventually("the host's new file", || {
        fs::read_to_string(mnt.join("src/lib.rs")).is_ok_and(|t| t == "pub fn f() {}\n")
    })?;
    io("host remove", fs::remove_file(ws.join("src/main.rs")))?;
    eventually("the host's removal", || {
        fs::metadata(mnt.join("src/main.rs")).is_err()
    })?;
    fails("removed", ENOENT, fs::metadata(mnt.join("src/main.rs")))?;
    io(
        "host rename",
        fs::rename(ws.join("src/lib.rs"), ws.join("src/mod.rs")),
    )?;
    eventually("the host's rename", || {
        fs::metadata(mnt.join("src/lib.rs")).is_err()
            && fs::metadata(mnt.join("src/mod.rs")).is_ok()
    })?;

    // A directory moved with what the kernel knows below it.
    io("host move", fs::rename(ws.join("src"), ws.join("lib")))?;
    eventually("the host's directory move", || {
        fs::metadata(mnt.join("src/mod.rs")).is_err()
            && fs::read_to_string(mnt.join("lib/mod.rs")).is_ok_and(|t| t == "pub fn f() {}\n")
    })?;
    fails("moved away", ENOENT, fs::metadata(mnt.join("src")))?;
    // What the kernel cached below the moved directory follows later host
    // changes at the new path.
    let mut host = io(
        "host open moved",
        fs::OpenOptions::new()
            .append(true)
            .open(ws.join("lib/mod.rs")),
    )?;
    io("host append moved", host.write_all(b"// more\n"))?;
    drop(host);
    eventually("the host's change below the moved directory (stat)", || {
        fs::metadata(mnt.join("lib/mod.rs")).is_ok_and(|m| m.len() == 22)
    })?;
    eventually("the host's change below the moved directory", || {
        fs::read_to_string(mnt.join("lib/mod.rs")).is_ok_and(|t| t == "pub fn f() {}\n// more\n")
    })?;
    drop(kept);
    router.unmount().map_err(|e| e.to_string())?;
    Ok(())
}

/// The routing daemon ends when its router stops serving (its FUSE
/// session's request loop ended: every access would fail with `ENOTCONN`),
/// so that RS, which watches the daemon, fails the Domain closed; and it
/// ends cleanly when its exit pipe closes.
#[test]
fn a_daemon_whose_router_stops_serving_ends() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("a_daemon_whose_router_stops_serving_ends");
    }
    use lazaret_effects::broker::{await_ready_byte, ChildPipes};
    use lazaret_effects::coordinator::git_routing::{
        run_git_routing, GitRoutingError, RoutingArgs, RoutingPlan, DAEMON, READY_TIMEOUT,
    };
    use lazaret_effects::coordinator::nsys::RecordingNs;
    use lazaret_effects::network::authority::RecordingAuthority;
    use std::os::fd::{AsRawFd as _, IntoRawFd as _};
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (ws, iso, mnt) = fixture_dirs(tmp.path())?;
    // Each run: the daemon on a thread, as the wrapper runs it in place.
    let start = |ws: &Path, iso: &Path, mnt: &Path| -> Result<_, String> {
        let ChildPipes {
            ready_read,
            ready_write,
            exit_read,
            exit_write,
        } = io("pipes", ChildPipes::new())?;
        let args = RoutingArgs {
            plan: RoutingPlan {
                workspace: ws.to_owned(),
                isolated: iso.to_owned(),
                router_at: mnt.to_owned(),
                sentry: None,
                editor_dirs: Vec::new(),
            },
            ready_fd: ready_write.into_raw_fd(),
            exit_fd: exit_read.into_raw_fd(),
        };
        let daemon = std::thread::spawn(move || {
            run_git_routing(
                &RecordingNs::default(),
                &RecordingAuthority::default(),
                &args,
            )
        });
        await_ready_byte(DAEMON, &ready_read, READY_TIMEOUT, || Ok(()))
            .map_err(|e| e.to_string())?;
        Ok((daemon, exit_write))
    };
    // Its mount detached (nothing else holds it): the session ends, the
    // daemon ends within its check interval, naming the router.
    let (daemon, _exit) = start(&ws, &iso, &mnt)?;
    io("read through the router", fs::read(mnt.join("README")))?;
    io(
        "detach",
        rustix::mount::unmount(&mnt, rustix::mount::UnmountFlags::DETACH).map_err(Into::into),
    )?;
    eventually("the daemon's end", || daemon.is_finished())?;
    match daemon.join().map_err(|_| "the daemon panicked")? {
        Err(GitRoutingError::StoppedServing(what)) => assert_eq!(what, "ignored-path router"),
        other => return Err(format!("{other:?}")),
    }
    // Its exit pipe closed: it unmounts and ends without error.
    let (daemon, exit) = start(&ws, &iso, &mnt)?;
    assert!(exit.as_raw_fd() > 2);
    drop(exit);
    eventually("the daemon's end", || daemon.is_finished())?;
    daemon
        .join()
        .map_err(|_| "the daemon panicked")?
        .map_err(|e| e.to_string())?;
    let mounted = io("mountinfo", fs::read_to_string("/proc/self/mountinfo"))?;
    assert!(!mounted.contains(&*mnt.to_string_lossy()), "{mounted}");
    Ok(())
}

/// A router whose mount is taken away (here: detached; the kernel then
/// ends its FUSE connection) says it no longer serves, which is what ends
/// the routing daemon and with it the Domain (spec 3.5, router loss).
#[test]
fn a_router_whose_mount_is_taken_away_stops_serving() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("a_router_whose_mount_is_taken_away_stops_serving");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (ws, iso, mnt) = fixture_dirs(tmp.path())?;
    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;
    io("read through the router", fs::read(mnt.join("README")))?;
    assert!(router.serving());
    io(
        "detach",
        rustix::mount::unmount(&mnt, rustix::mount::UnmountFlags::DETACH).map_err(Into::into),
    )?;
    eventually("the session's end", || !router.serving())?;
    // Unmounting what is already gone is no error and leaves nothing.
    io("unmount", router.unmount())?;
    Ok(())
}

/// A directory some process works in keeps its place while the host and
/// the sandbox change it: the router tells the kernel a changed entry has
/// expired rather than that it is gone, so Git, started in it after the
/// change, still finds its working directory.
#[test]
fn a_directory_in_use_keeps_its_place_while_it_changes() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("a_directory_in_use_keeps_its_place_while_it_changes");
    }
    use std::io::BufRead as _;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (ws, iso, mnt) = fixture_dirs(tmp.path())?;
    io("mkdir", fs::create_dir(ws.join("src/in-use")))?;
    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;
    let mut child = io(
        "spawn",
        Command::new("sh")
            .args([
                "-c",
                "cd src/in-use && echo in && read _ && exec git rev-parse --show-prefix",
            ])
            .current_dir(&mnt)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", &mnt)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn(),
    )?;
    let mut stdout = std::io::BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let mut line = String::new();
    io("ready", stdout.read_line(&mut line))?;
    assert_eq!(line, "in\n");
    // A host change and one through the router, each an event on the
    // directory's own entry.
    io(
        "host chmod",
        fs::set_permissions(ws.join("src/in-use"), fs::Permissions::from_mode(0o750)),
    )?;
    eventually("the host's chmod", || {
        fs::metadata(mnt.join("src/in-use")).is_ok_and(|m| m.mode() & 0o777 == 0o750)
    })?;
    io(
        "chmod inside",
        fs::set_permissions(mnt.join("src/in-use"), fs::Permissions::from_mode(0o700)),
    )?;
    // The router looks at host events every 250 ms: both have been taken.
    std::thread::sleep(std::time::Duration::from_millis(750));
    io(
        "go",
        child.stdin.take().ok_or("no stdin")?.write_all(b"go\n"),
    )?;
    let out = io("wait", child.wait_with_output())?;
    let mut rest = String::new();
    io(
        "prefix",
        std::io::Read::read_to_string(&mut stdout, &mut rest),
    )?;
    assert!(
        out.status.success(),
        "git lost its working directory: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(rest, "src/in-use/\n");
    router.unmount().map_err(|e| e.to_string())?;
    Ok(())
}

/// A repository the host had inside the workspace (a vendored clone) is
/// host Git's: through the router its configuration, `commondir`, hooks and
/// `.git` entry cannot be changed (`EPERM`), while Git keeps working in it.
#[test]
fn a_nested_host_repository_keeps_its_configuration_and_hooks() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("a_nested_host_repository_keeps_its_configuration_and_hooks");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (ws, iso, mnt) = fixture_dirs(tmp.path())?;
    let lib = ws.join("vendor/lib");
    io("mkdir", fs::create_dir_all(&lib))?;
    git(&lib, &["init", "-q"])?;
    io("file", fs::write(lib.join("lib.c"), "int x;\n"))?;
    io(
        "hook",
        fs::write(lib.join(".git/hooks/pre-commit"), "#!/bin/sh\n"),
    )?;
    git(&lib, &["add", "lib.c"])?;
    git(&lib, &["commit", "-q", "-m", "vendored"])?;
    // Configuration it includes, a linked worktree and a submodule's git
    // directory: the Git Sentry's layout guards them all.
    io(
        "include",
        fs::write(lib.join(".git/extra.cfg"), "[user]\n\tname = x\n"),
    )?;
    git(&lib, &["config", "include.path", "extra.cfg"])?;
    git(&lib, &["worktree", "add", "-q", "../lib-wt"])?;
    io("modules", fs::create_dir(lib.join(".git/modules")))?;
    git(&lib, &["init", "--bare", "-q", ".git/modules/sub"])?;
    let config = io("read", fs::read(lib.join(".git/config")))?;
    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;
    let inner = mnt.join("vendor/lib");
    let git_dir = inner.join(".git");

    for (what, path) in [
        ("included config", "extra.cfg"),
        ("worktree gitdir", "worktrees/lib-wt/gitdir"),
        ("worktree commondir", "worktrees/lib-wt/commondir"),
        ("worktree config", "worktrees/lib-wt/config.worktree"),
        ("submodule config", "modules/sub/config"),
        ("submodule hook", "modules/sub/hooks/post-checkout"),
    ] {
        fails(what, EPERM, fs::write(git_dir.join(path), "[core]\n"))?;
    }
    fails(
        "move a worktree's admin directory",
        EPERM,
        fs::rename(
            git_dir.join("worktrees/lib-wt"),
            git_dir.join("worktrees/x"),
        ),
    )?;
    fails(
        "worktree .git file",
        EPERM,
        fs::write(mnt.join("vendor/lib-wt/.git"), "gitdir: /tmp\n"),
    )?;

    fails(
        "write config",
        EPERM,
        fs::write(git_dir.join("config"), "[core]\n"),
    )?;
    fails(
        "config lock",
        EPERM,
        fs::write(git_dir.join("config.lock"), "[core]\n"),
    )?;
    fails(
        "commondir",
        EPERM,
        fs::write(git_dir.join("commondir"), "..\n"),
    )?;
    fails(
        "new hook",
        EPERM,
        fs::write(git_dir.join("hooks/post-checkout"), "#!/bin/sh\n"),
    )?;
    fails(
        "rewrite hook",
        EPERM,
        fs::write(git_dir.join("hooks/pre-commit"), "#!/bin/sh\nexit 1\n"),
    )?;
    fails(
        "remove hook",
        EPERM,
        fs::remove_file(git_dir.join("hooks/pre-commit")),
    )?;
    fails(
        "chmod config",
        EPERM,
        fs::set_permissions(git_dir.join("config"), fs::Permissions::from_mode(0o666)),
    )?;
    fails(
        "link config",
        EPERM,
        fs::hard_link(git_dir.join("config"), inner.join("cfg")),
    )?;
    fails(
        "move .git",
        EPERM,
        fs::rename(&git_dir, inner.join("old-git")),
    )?;
    fails(
        "move hooks",
        EPERM,
        fs::rename(git_dir.join("hooks"), git_dir.join("h")),
    )?;
    assert!(git(&inner, &["config", "core.fsmonitor", "/bin/true"]).is_err());

    // Git's ordinary work in it goes on: objects, refs, the index.
    io("edit", fs::write(inner.join("lib.c"), "int y;\n"))?;
    git(
        &inner,
        &[
            "-c",
            "core.hooksPath=/dev/null",
            "commit",
            "-q",
            "-am",
            "edit",
        ],
    )?;
    assert_eq!(git(&lib, &["log", "--format=%s", "-1"])?, "edit\n");

    router.unmount().map_err(|e| e.to_string())?;
    assert_eq!(io("read", fs::read(lib.join(".git/config")))?, config);
    assert_eq!(
        io(
            "read",
            fs::read_to_string(lib.join(".git/hooks/pre-commit"))
        )?,
        "#!/bin/sh\n"
    );
    Ok(())
}

/// The index-publication rules of spec 3.5, with the Git Sentry filter
/// serving the git directory as in a sandbox: a guest `git add -f` of a path
/// whose only object is isolated is refused (`EBUSY`) before the index is
/// replaced; with an independent host object of the same kind it is taken
/// and the host object selected; a host index change that tracks an
/// isolated-only path makes it `EIO` until the host's worktree agrees. The
/// isolated objects are kept throughout: nothing is copied or lost.
#[test]
fn an_index_never_tracks_a_path_only_isolated_state_holds() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("an_index_never_tracks_a_path_only_isolated_state_holds");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (ws, iso, mnt) = fixture_dirs(tmp.path())?;
    let sentry = tmp.path().join("sentry");
    io("mkdir", fs::create_dir(&sentry))?;
    // A repository the host had inside, whose own rules ignore `out/`.
    let lib = ws.join("vendor/lib");
    io("mkdir", fs::create_dir_all(&lib))?;
    git(&lib, &["init", "-q"])?;
    io(".gitignore", fs::write(lib.join(".gitignore"), "out/\n"))?;
    git(&lib, &["add", ".gitignore"])?;
    git(&lib, &["commit", "-q", "-m", "vendored"])?;
    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;
    let judge = IndexJudge {
        git_dir: ws.join(".git"),
        admission: router.index_admission(),
    };
    let sentry_mount =
        filter::mount(&ws.join(".git"), &sentry, Some(judge)).map_err(|e| e.to_string())?;
    let git_dir = format!("--git-dir={}", sentry.display());
    let work_tree = format!("--work-tree={}", mnt.display());
    let guest = |args: &[&str]| {
        let mut all = vec![git_dir.as_str(), work_tree.as_str()];
        all.extend_from_slice(args);
        git(&mnt, &all)
    };
    let host_index = || fs::read(ws.join(".git/index")).map_err(|e| format!("index: {e}"));

    // Only isolated state holds it: refused, the index untouched.
    io("mkdir", fs::create_dir_all(mnt.join("node_modules/made")))?;
    io(
        "write",
        fs::write(mnt.join("node_modules/made/x.js"), "sandbox\n"),
    )?;
    let before = host_index()?;
    let refused = guest(&["add", "-f", "node_modules/made/x.js"]);
    match &refused {
        Err(e) if e.contains("index") => {}
        other => return Err(format!("git add -f of an isolated-only path: {other:?}")),
    }
    assert_eq!(host_index()?, before, "the index changed");
    assert!(!ws.join(".git/index.lock").exists(), "a lock was left");
    // The same index made outside, then moved in by hand: EBUSY for a
    // rename and for an exchange; the index in force changes in no other
    // way (in place, through a second name).
    let proposed = tmp.path().join("proposed");
    io("copy", fs::write(&proposed, &before))?;
    let made = Command::new("git")
        .args(["-c", "safe.directory=*", &git_dir, &work_tree])
        .args(["add", "-f", "node_modules/made/x.js"])
        .env("GIT_INDEX_FILE", &proposed)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", tmp.path())
        .output()
        .map_err(|e| format!("git: {e}"))?;
    assert!(made.status.success(), "{made:?}");
    let lock = sentry.join("index.lock");
    io("lock", fs::write(&lock, io("read", fs::read(&proposed))?))?;
    const EBUSY: i32 = 16;
    fails("rename", EBUSY, fs::rename(&lock, sentry.join("index")))?;
    let exchange = rustix::fs::renameat_with(
        rustix::fs::CWD,
        &lock,
        rustix::fs::CWD,
        sentry.join("index"),
        rustix::fs::RenameFlags::EXCHANGE,
    );
    fails("exchange", EBUSY, exchange.map_err(std::io::Error::from))?;
    io("unlock", fs::remove_file(&lock))?;
    fails(
        "write in place",
        EBUSY,
        fs::OpenOptions::new()
            .write(true)
            .open(sentry.join("index")),
    )?;
    fails(
        "second name",
        EBUSY,
        fs::hard_link(sentry.join("index"), sentry.join("index2")),
    )?;
    fails(
        "made in place",
        EBUSY,
        fs::File::create(sentry.join("index")),
    )?;
    assert_eq!(host_index()?, before, "the index changed");
    assert_eq!(git(&ws, &["ls-files", "node_modules"])?, "");
    assert_eq!(
        io(
            "read",
            fs::read_to_string(iso.join("node_modules/made/x.js"))
        )?,
        "sandbox\n"
    );

    // An independent host object of the entry's kind: taken, and the host
    // object is what the path shows from then on.
    io("mkdir", fs::create_dir_all(mnt.join("node_modules/dep")))?;
    io(
        "write",
        fs::write(mnt.join("node_modules/dep/index.js"), "sandbox dep\n"),
    )?;
    guest(&["add", "-f", "node_modules/dep/index.js"])?;
    assert_eq!(
        git(&ws, &["ls-files", "node_modules"])?,
        "node_modules/dep/index.js\n"
    );
    eventually("the host object selected", || {
        fs::read_to_string(mnt.join("node_modules/dep/index.js")).is_ok_and(|t| t == "host\n")
    })?;
    assert_eq!(
        io(
            "read",
            fs::read_to_string(iso.join("node_modules/dep/index.js"))
        )?,
        "sandbox dep\n"
    );
    // Ordinary commits are never judged against isolated state.
    io("edit", fs::write(mnt.join("README"), "edited inside\n"))?;
    guest(&["add", "README"])?;
    guest(&["commit", "-q", "-m", "inside"])?;
    assert_eq!(git(&ws, &["log", "-1", "--format=%s"])?, "inside\n");

    // The host tracks a path only isolated state then holds: EIO, until
    // the host's worktree has it again.
    io(
        "write",
        fs::write(mnt.join("node_modules/late.js"), "sandbox late\n"),
    )?;
    io(
        "host write",
        fs::write(ws.join("node_modules/late.js"), "host late\n"),
    )?;
    git(&ws, &["add", "-f", "node_modules/late.js"])?;
    io("host rm", fs::remove_file(ws.join("node_modules/late.js")))?;
    eventually("EIO on the inconsistent path", || {
        fs::metadata(mnt.join("node_modules/late.js")).is_err_and(|e| e.raw_os_error() == Some(EIO))
    })?;
    fails("read", EIO, fs::read(mnt.join("node_modules/late.js")))?;
    assert_eq!(
        io("read", fs::read_to_string(iso.join("node_modules/late.js")))?,
        "sandbox late\n"
    );
    io(
        "host write",
        fs::write(ws.join("node_modules/late.js"), "host again\n"),
    )?;
    eventually("the host object again", || {
        fs::read_to_string(mnt.join("node_modules/late.js")).is_ok_and(|t| t == "host again\n")
    })?;

    // The nested repository's index, renamed through the router, is judged
    // by its own rules the same way.
    let inner = mnt.join("vendor/lib");
    io("mkdir", fs::create_dir_all(inner.join("out")))?;
    io("write", fs::write(inner.join("out/gen.c"), "int g;\n"))?;
    assert!(iso.join("vendor/lib/out/gen.c").exists());
    let before = io("read", fs::read(lib.join(".git/index")))?;
    match git(&inner, &["add", "-f", "out/gen.c"]) {
        Err(e) if e.contains("index") => {}
        other => {
            return Err(format!(
                "nested git add -f of an isolated-only path: {other:?}"
            ))
        }
    }
    assert_eq!(io("read", fs::read(lib.join(".git/index")))?, before);
    io("write", fs::write(inner.join("lib.c"), "int x;\n"))?;
    git(&inner, &["add", "lib.c"])?;
    assert_eq!(git(&lib, &["ls-files"])?, ".gitignore\nlib.c\n");
    sentry_mount.unmount().map_err(|e| e.to_string())?;
    router.unmount().map_err(|e| e.to_string())?;
    Ok(())
}

/// The operation classes of spec 3.5 beyond read and write, through a real
/// mount and compared with the backing itself: allocation and hole
/// punching, hole and data queries, copy range in one backing and `EXDEV`
/// across, `user.*` extended attributes set, read, listed and removed, and
/// no other namespace set (`EOPNOTSUPP`).
#[test]
fn every_operation_class_reaches_the_selected_backing() -> Result<(), String> {
    use rustix::fs::{FallocateFlags, SeekFrom, XattrFlags};
    if std::env::var_os(INNER).is_none() {
        return outer("every_operation_class_reaches_the_selected_backing");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (ws, iso, mnt) = fixture_dirs(tmp.path())?;
    let router = mount(&ws, &iso, &mnt).map_err(|e| e.to_string())?;
    let kernel = |what: &str, e: rustix::io::Errno| format!("{what}: {e}");

    // Allocation, then a hole punched in data, queried through the router
    // and answered as the host file itself answers.
    let sparse = io(
        "create",
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(mnt.join("sparse.bin")),
    )?;
    rustix::fs::fallocate(&sparse, FallocateFlags::empty(), 0, 1 << 20)
        .map_err(|e| kernel("fallocate", e))?;
    assert_eq!(
        io("stat", fs::metadata(ws.join("sparse.bin")))?.len(),
        1 << 20
    );
    rustix::io::pwrite(&sparse, &[7u8; 1 << 20], 0).map_err(|e| kernel("pwrite", e))?;
    rustix::fs::fallocate(
        &sparse,
        FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
        1 << 18,
        1 << 18,
    )
    .map_err(|e| kernel("punch", e))?;
    let host = io("host open", fs::File::open(ws.join("sparse.bin")))?;
    for to in [
        SeekFrom::Hole(0),
        SeekFrom::Data(1 << 18),
        SeekFrom::Hole(1 << 19),
    ] {
        let through = rustix::fs::seek(&sparse, to).map_err(|e| kernel("seek", e))?;
        let direct = rustix::fs::seek(&host, to).map_err(|e| kernel("host seek", e))?;
        assert_eq!(through, direct, "{to:?}");
    }
    assert_eq!(
        rustix::fs::seek(&sparse, SeekFrom::Hole(0)).map_err(|e| kernel("seek", e))?,
        1 << 18,
        "the punched hole is not where the host has it"
    );
    let mut zero = [1u8; 16];
    rustix::io::pread(&sparse, &mut zero, 1 << 18).map_err(|e| kernel("pread", e))?;
    assert_eq!(zero, [0u8; 16]);

    // Copy range: within the host backing. Across backings the router
    // answers EXDEV and the kernel copies by reading and writing instead
    // (its generic fallback for one file system): the bytes land in the
    // isolated object, nothing reaches the host.
    let readme = io("open", fs::File::open(mnt.join("README")))?;
    let copy = io("create", fs::File::create(mnt.join("copy.txt")))?;
    let n = rustix::fs::copy_file_range(&readme, None, &copy, None, 64)
        .map_err(|e| kernel("copy_file_range", e))?;
    assert_eq!(n, 7);
    assert_eq!(
        io("read", fs::read_to_string(ws.join("copy.txt")))?,
        "readme\n"
    );
    let log = io("create", fs::File::create(mnt.join("copy.log")))?;
    let (mut from, mut to) = (0u64, 0u64);
    let n = rustix::fs::copy_file_range(&readme, Some(&mut from), &log, Some(&mut to), 64)
        .map_err(|e| kernel("copy across", e))?;
    assert_eq!(n, 7);
    assert_eq!(
        io("read", fs::read_to_string(iso.join("copy.log")))?,
        "readme\n"
    );
    assert!(!ws.join("copy.log").exists());

    // user.* extended attributes land on the selected backing's object.
    let on = mnt.join("README");
    rustix::fs::setxattr(&on, "user.origin", b"sandbox", XattrFlags::empty())
        .map_err(|e| kernel("setxattr", e))?;
    let mut value = [0u8; 32];
    let n = rustix::fs::getxattr(ws.join("README"), "user.origin", &mut value[..])
        .map_err(|e| kernel("host getxattr", e))?;
    assert_eq!(&value[..n], b"sandbox");
    let n = rustix::fs::getxattr(&on, "user.origin", &mut value[..])
        .map_err(|e| kernel("getxattr", e))?;
    assert_eq!(&value[..n], b"sandbox");
    let mut names = [0u8; 256];
    let n = rustix::fs::listxattr(&on, &mut names[..]).map_err(|e| kernel("listxattr", e))?;
    assert_eq!(&names[..n], b"user.origin\0");
    rustix::fs::removexattr(&on, "user.origin").map_err(|e| kernel("removexattr", e))?;
    let gone = rustix::fs::getxattr(ws.join("README"), "user.origin", &mut value[..]);
    assert_eq!(gone.err(), Some(rustix::io::Errno::NODATA));
    let isolated = mnt.join("app.log");
    io("write", fs::write(&isolated, "sandbox log\n"))?;
    rustix::fs::setxattr(&isolated, "user.kind", b"log", XattrFlags::empty())
        .map_err(|e| kernel("setxattr isolated", e))?;
    let n = rustix::fs::getxattr(iso.join("app.log"), "user.kind", &mut value[..])
        .map_err(|e| kernel("iso getxattr", e))?;
    assert_eq!(&value[..n], b"log");
    // Another namespace, and a POSIX ACL (a valid one: owner rw, group r,
    // others r), are not set.
    let acl: Vec<u8> = [
        &2u32.to_le_bytes()[..],
        &1u16.to_le_bytes(),
        &6u16.to_le_bytes(),
        &u32::MAX.to_le_bytes(),
        &4u16.to_le_bytes(),
        &4u16.to_le_bytes(),
        &u32::MAX.to_le_bytes(),
        &0x20u16.to_le_bytes(),
        &4u16.to_le_bytes(),
        &u32::MAX.to_le_bytes(),
    ]
    .concat();
    // (`trusted.*` the kernel refuses first: EPERM outside the initial
    // user namespace.)
    for (name, value, errno) in [
        ("security.lazaret", &b"x"[..], EOPNOTSUPP),
        ("trusted.x", b"x", EPERM),
        ("system.posix_acl_access", &acl, EOPNOTSUPP),
    ] {
        let r = rustix::fs::setxattr(&on, name, value, XattrFlags::empty());
        fails(name, errno, r.map_err(std::io::Error::from))?;
    }
    drop((sparse, host, readme, copy, log));
    router.unmount().map_err(|e| e.to_string())?;
    Ok(())
}
