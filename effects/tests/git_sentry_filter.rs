//! The Git Sentry filter against the real kernel and real Git (spec 3.5,
//! SR-4): mounted over a repository's `.git` in a private user and mount
//! namespace, ordinary Git keeps working through it while every way of
//! replacing the repository's configuration or hooks is refused, and the
//! host directory underneath is left exactly as Git made it.
//!
//! Each test re-runs itself under `unshare --user --map-root-user --mount`
//! (so it works as root and as an ordinary user with `/dev/fuse` 0666) and
//! the outer half checks the inner half's exit status with a deadline.

use lazaret_effects::git_sentry::filter::{mount, scan_layout};
use lazaret_runtime::git_sentry::{Admin, Guard};
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
            "protocol.file.allow=always",
            // No detached background maintenance holding the mount busy at
            // unmount.
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

/// Asserts that `r` failed with EPERM (the filter's refusal).
fn refused<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>) -> Result<(), String> {
    match r {
        Err(e) if e.raw_os_error() == Some(1) => Ok(()),
        other => Err(format!("{what}: expected EPERM, got {other:?}")),
    }
}

/// A repository with one commit, a linked worktree and a submodule.
fn fixture(root: &Path) -> Result<PathBuf, String> {
    let lib = root.join("lib");
    io("mkdir lib", fs::create_dir(&lib))?;
    git(&lib, &["init", "-q"])?;
    io("write lib", fs::write(lib.join("l.txt"), "lib\n"))?;
    git(&lib, &["add", "."])?;
    git(&lib, &["commit", "-q", "-m", "lib"])?;
    let repo = root.join("repo");
    io("mkdir repo", fs::create_dir(&repo))?;
    git(&repo, &["init", "-q"])?;
    io("write a", fs::write(repo.join("a.txt"), "one\n"))?;
    git(&repo, &["add", "."])?;
    git(&repo, &["commit", "-q", "-m", "first"])?;
    git(
        &repo,
        &[
            "submodule",
            "add",
            "-q",
            lib.to_str().unwrap_or_default(),
            "sub",
        ],
    )?;
    git(&repo, &["commit", "-q", "-m", "sub"])?;
    git(&repo, &["worktree", "add", "-q", "../wt"])?;
    // Includes inside the git directory: one present, one not yet created.
    io(
        "write the included config",
        fs::write(
            repo.join(".git/local.gitconfig"),
            "[core]\n\tautocrlf = false\n",
        ),
    )?;
    git(&repo, &["config", "include.path", "local.gitconfig"])?;
    git(
        &repo,
        &[
            "config",
            "includeIf.gitdir:/nowhere/.path",
            "conf/extra.gitconfig",
        ],
    )?;
    Ok(repo)
}

#[test]
fn the_layout_guards_the_worktree_and_submodule_admin_files() -> Result<(), String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = fixture(tmp.path())?;
    let layout = scan_layout(&repo.join(".git")).map_err(|e| e.to_string())?;
    let entries: Vec<(String, Guard)> = layout
        .entries()
        .map(|(p, g)| (p.display().to_string(), g))
        .collect();
    for (path, guard) in [
        ("config", Guard::Sealed),
        ("hooks", Guard::HiddenHooks),
        ("worktrees", Guard::AdminRoot(Admin::Worktrees)),
        ("modules", Guard::AdminRoot(Admin::Modules)),
        ("worktrees/wt", Guard::HostWorktree),
        ("worktrees/wt/commondir", Guard::Sealed),
        ("worktrees/wt/gitdir", Guard::Sealed),
        ("modules/sub", Guard::HostModule),
        ("modules/sub/config", Guard::Sealed),
        ("modules/sub/hooks", Guard::SealedTree),
        ("local.gitconfig", Guard::Sealed),
        ("conf", Guard::Pinned),
        ("conf/extra.gitconfig", Guard::Sealed),
    ] {
        assert!(
            entries.contains(&(path.to_owned(), guard)),
            "{path} {guard:?} missing from {entries:?}"
        );
    }
    // Per-worktree configuration is configuration too: what the common
    // directory's and a linked worktree's `config.worktree` include is
    // sealed, and so are the lock files host Git rewrites them through.
    let wt_config = repo.join(".git/config.worktree");
    io(
        "write config.worktree",
        fs::write(&wt_config, "[include]\n\tpath = wt-main.gitconfig\n"),
    )?;
    io(
        "write the worktree's config.worktree",
        fs::write(
            repo.join(".git/worktrees/wt/config.worktree"),
            "[include]\n\tpath = ../../wt-linked.gitconfig\n",
        ),
    )?;
    let layout = scan_layout(&repo.join(".git")).map_err(|e| e.to_string())?;
    let entries: Vec<(String, Guard)> = layout
        .entries()
        .map(|(p, g)| (p.display().to_string(), g))
        .collect();
    for path in [
        "wt-main.gitconfig",
        "wt-linked.gitconfig",
        "config.lock",
        "worktrees/wt/gitdir.lock",
        "modules/sub/config.lock",
        "local.gitconfig.lock",
    ] {
        assert!(
            entries.contains(&(path.to_owned(), Guard::Sealed)),
            "{path} not sealed in {entries:?}"
        );
    }
    io("remove config.worktree", fs::remove_file(&wt_config))?;
    // An include reached through a symbolic link inside .git is refused.
    io(
        "plant a link",
        std::os::unix::fs::symlink(tmp.path(), repo.join(".git/lnk")),
    )?;
    git(
        &repo,
        &["config", "--add", "include.path", "lnk/x.gitconfig"],
    )?;
    match scan_layout(&repo.join(".git")) {
        Ok(_) => Err("an include through a symbolic link was accepted".to_owned()),
        Err(e) => {
            assert!(e.to_string().contains("symbolic link"), "{e}");
            Ok(())
        }
    }
}

#[test]
fn git_works_through_the_filter_and_guarded_names_are_refused() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("git_works_through_the_filter_and_guarded_names_are_refused");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = fixture(tmp.path())?;
    let dot_git = repo.join(".git");
    let host_hook = dot_git.join("hooks/pre-commit.sample");
    let had_sample = host_hook.exists();
    // Mounted over the repository's own .git here, so real Git in the
    // working tree goes through it (the root descriptor is opened first).
    let filter = mount(&dot_git, &dot_git, None).map_err(|e| e.to_string())?;

    // Ordinary Git through the filter.
    io("edit", fs::write(repo.join("a.txt"), "two\n"))?;
    git(&repo, &["status", "--short"])?;
    git(&repo, &["add", "a.txt"])?;
    git(&repo, &["commit", "-q", "-m", "second"])?;
    git(&repo, &["branch", "feature"])?;
    git(&repo, &["checkout", "-q", "feature"])?;
    io("edit", fs::write(repo.join("a.txt"), "three\n"))?;
    git(&repo, &["stash", "-q"])?;
    git(&repo, &["stash", "pop", "-q"])?;
    git(&repo, &["commit", "-q", "-am", "third"])?;
    git(&repo, &["checkout", "-q", "main"])?;
    git(&repo, &["merge", "-q", "--no-edit", "feature"])?;
    git(&repo, &["tag", "v1"])?;
    git(&repo, &["gc", "-q"])?;
    git(&repo, &["worktree", "add", "-q", "../wt2"])?;
    git(&tmp.path().join("wt"), &["status", "--short"])?;
    git(&repo, &["fsck", "--no-progress"])?;
    let log = git(&repo, &["log", "--oneline"])?;
    assert_eq!(log.lines().count(), 4, "{log}");

    // The configuration cannot be written, replaced, moved or linked.
    let config = dot_git.join("config");
    refused(
        "write config",
        fs::OpenOptions::new().append(true).open(&config),
    )?;
    refused("truncate config", fs::File::create(&config))?;
    refused("rename config", fs::rename(&config, dot_git.join("c2")))?;
    io("scratch", fs::write(dot_git.join("evil"), "[core]\n"))?;
    refused(
        "rename onto config",
        fs::rename(dot_git.join("evil"), &config),
    )?;
    refused("unlink config", fs::remove_file(&config))?;
    refused("link config", fs::hard_link(&config, dot_git.join("c3")))?;
    refused(
        "chmod config",
        fs::set_permissions(&config, fs::Permissions::from_mode(0o666)),
    )?;
    assert!(
        git(&repo, &["config", "core.hooksPath", "/tmp/evil"]).is_err(),
        "git config wrote through the filter"
    );
    // No other file may take its place.
    for name in ["commondir", "config.worktree"] {
        let p = dot_git.join(name);
        refused(name, fs::write(&p, "/tmp/evil\n"))?;
        refused(name, fs::create_dir(&p))?;
        refused(name, std::os::unix::fs::symlink("/tmp/evil", &p))?;
        refused(name, fs::rename(dot_git.join("evil"), &p))?;
        refused(name, fs::hard_link(dot_git.join("evil"), &p))?;
    }
    // The default hooks directory is empty, read-only and cannot move.
    let hooks = dot_git.join("hooks");
    let listed: Vec<_> = io("list hooks", fs::read_dir(&hooks))?.collect();
    assert!(listed.is_empty(), "host hooks visible: {listed:?}");
    refused(
        "write a hook",
        fs::write(hooks.join("pre-commit"), "#!/bin/sh\n"),
    )?;
    refused("rmdir hooks", fs::remove_dir(&hooks))?;
    refused("rename hooks", fs::rename(&hooks, dot_git.join("h2")))?;
    // Included configuration inside the git directory is sealed too, and
    // a missing one cannot be created.
    refused(
        "write an included config",
        fs::OpenOptions::new()
            .append(true)
            .open(dot_git.join("local.gitconfig")),
    )?;
    refused(
        "create the include's directory",
        fs::create_dir(dot_git.join("conf")),
    )?;
    // A host worktree's admin files and a submodule's config and hooks.
    let admin = dot_git.join("worktrees/wt");
    refused(
        "rewrite gitdir",
        fs::write(admin.join("gitdir"), "/tmp/x\n"),
    )?;
    refused(
        "rewrite commondir",
        fs::write(admin.join("commondir"), "/tmp/x\n"),
    )?;
    refused(
        "new config.worktree",
        fs::write(admin.join("config.worktree"), "x"),
    )?;
    refused(
        "move the admin dir",
        fs::rename(&admin, dot_git.join("worktrees/w9")),
    )?;
    refused(
        "move worktrees",
        fs::rename(dot_git.join("worktrees"), dot_git.join("w")),
    )?;
    let sub = dot_git.join("modules/sub");
    refused("submodule config", fs::write(sub.join("config"), "x"))?;
    refused(
        "submodule hook",
        fs::write(sub.join("hooks/post-checkout"), "#!/bin/sh\n"),
    )?;
    refused(
        "move modules",
        fs::rename(dot_git.join("modules"), dot_git.join("m")),
    )?;
    // No symbolic link can be planted for host Git to follow (see
    // `symbolic_links_cannot_be_planted_where_host_git_follows_them`).
    refused(
        "plant a symlink",
        std::os::unix::fs::symlink("/etc", dot_git.join("refs/escape")),
    )?;
    io("remove scratch", fs::remove_file(dot_git.join("evil")))?;
    // Large writes and reads round-trip.
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| u8::try_from(i % 251).unwrap_or(0))
        .collect();
    let mut f = io("create big", fs::File::create(dot_git.join("big")))?;
    io("write big", f.write_all(&big))?;
    drop(f);
    assert_eq!(io("read big", fs::read(dot_git.join("big")))?, big);
    io("remove big", fs::remove_file(dot_git.join("big")))?;

    filter.unmount().map_err(|e| e.to_string())?;
    // Underneath, the host repository is exactly as Git made it.
    for name in ["commondir", "config.worktree", "evil", "c2", "c3", "big"] {
        assert!(!dot_git.join(name).exists(), "{name} reached the host");
    }
    assert!(!host_hook.exists() || had_sample);
    assert!(!hooks.join("pre-commit").exists());
    let log = git(&repo, &["log", "--oneline", "main"])?;
    assert_eq!(log.lines().count(), 4, "{log}");
    assert!(git(&repo, &["config", "core.hooksPath"]).is_err());
    git(&repo, &["fsck", "--no-progress"])?;
    Ok(())
}

/// The host's view of `dir` while the filter is mounted over it: a
/// descriptor opened before the mount reaches the directory underneath, as
/// host Git outside the sandbox does.
struct HostView {
    dir: fs::File,
}

impl HostView {
    fn open(dir: &Path) -> Result<Self, String> {
        Ok(Self {
            dir: io("open the host view", fs::File::open(dir))?,
        })
    }

    fn path(&self, rel: &str) -> PathBuf {
        use std::os::fd::AsRawFd as _;
        PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd())).join(rel)
    }
}

/// Host Git rewrites its configuration by writing `config.lock` and renaming
/// it over `config`. A sandbox that opened that lock file for writing in the
/// meantime would hold a writable descriptor of the host's new `config` (or
/// write into it before the rename): lock files of sealed names are sealed
/// (spec 3.5, SR-4).
#[test]
fn a_host_lock_file_of_a_sealed_name_cannot_be_taken_over() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("a_host_lock_file_of_a_sealed_name_cannot_be_taken_over");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = fixture(tmp.path())?;
    let dot_git = repo.join(".git");
    let before = io("read config", fs::read(dot_git.join("config")))?;
    let host = HostView::open(&dot_git)?;
    let filter = mount(&dot_git, &dot_git, None).map_err(|e| e.to_string())?;
    // The host view really is underneath: it shows the hooks the filter
    // hides.
    let host_hooks = io("list host hooks", fs::read_dir(host.path("hooks")))?.count();
    let seen_hooks = io("list hooks", fs::read_dir(dot_git.join("hooks")))?.count();
    assert!(
        host_hooks > 0 && seen_hooks == 0,
        "{host_hooks} {seen_hooks}"
    );

    // Host `git config` (or `push -u`, `checkout --track`) is mid-write.
    io(
        "host writes config.lock",
        fs::write(host.path("config.lock"), &before),
    )?;
    let lock = dot_git.join("config.lock");
    refused(
        "open the host's config.lock for writing",
        fs::OpenOptions::new().write(true).open(&lock),
    )?;
    refused("truncate the host's config.lock", fs::File::create(&lock))?;
    refused(
        "link the host's config.lock",
        fs::hard_link(&lock, dot_git.join("held")),
    )?;
    refused(
        "move the host's config.lock",
        fs::rename(&lock, dot_git.join("held")),
    )?;
    // Host Git commits its change.
    io(
        "host renames config.lock",
        fs::rename(host.path("config.lock"), host.path("config")),
    )?;
    // Nor can the sandbox create a lock first (host Git would then fail to
    // write its configuration), for any sealed name.
    for name in [
        "config.lock",
        "commondir.lock",
        "config.worktree.lock",
        "local.gitconfig.lock",
        "worktrees/wt/gitdir.lock",
        "worktrees/wt/commondir.lock",
        "modules/sub/config.lock",
    ] {
        refused(name, fs::write(dot_git.join(name), "[core]\n"))?;
        refused(name, fs::create_dir(dot_git.join(name)))?;
    }
    // Git inside still fails to configure, and ordinary locks still work.
    assert!(git(&repo, &["config", "core.fsmonitor", "/tmp/evil"]).is_err());
    io("edit", fs::write(repo.join("a.txt"), "two\n"))?;
    git(&repo, &["commit", "-q", "-am", "second"])?;

    filter.unmount().map_err(|e| e.to_string())?;
    assert_eq!(io("read config", fs::read(dot_git.join("config")))?, before);
    assert!(!dot_git.join("config.lock").exists());
    assert!(!dot_git.join("held").exists());
    Ok(())
}

/// `git branch` in `dir` with its output on a terminal (where Git starts
/// its pager), the environment choosing no pager of its own.
fn git_branch_on_a_terminal(dir: &Path) -> Result<(), String> {
    let out = Command::new("script")
        .args(["-qec", "git branch", "/dev/null"])
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env_remove("GIT_PAGER")
        .env_remove("PAGER")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("script git branch: {e}"))?;
    // Git's own status does not matter (a broken repository fails): only
    // what it ran.
    let _ = out.status;
    Ok(())
}

/// Host Git accepts a directory as a git directory only with a valid
/// `HEAD`, `objects/` and `refs/` (`is_git_directory`). A sandbox that broke
/// any of them would make host Git fall back to treating the workspace root
/// as an implicit bare repository — whose `config` (with a
/// `core.fsmonitor`) is a plain workspace file the sandbox writes. Through
/// the filter `HEAD` changes only by a rename of a valid, single-named file
/// onto it, and `objects/` and `refs/` stay (spec 3.5, SR-4).
#[test]
fn the_git_directory_keeps_the_shape_host_git_requires() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("the_git_directory_keeps_the_shape_host_git_requires");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = fixture(tmp.path())?;
    let dot_git = repo.join(".git");
    let host = HostView::open(&dot_git)?;
    let filter = mount(&dot_git, &dot_git, None).map_err(|e| e.to_string())?;
    let head = dot_git.join("HEAD");
    let valid = "ref: refs/heads/main\n";

    // Git's own HEAD updates pass: branch switches, detaching, a worktree.
    git(&repo, &["checkout", "-q", "-b", "side"])?;
    git(&repo, &["checkout", "-q", "--detach"])?;
    git(&repo, &["checkout", "-q", "main"])?;
    git(&tmp.path().join("wt"), &["checkout", "-q", "--detach"])?;

    // HEAD itself cannot be rewritten, emptied, removed, moved, linked or
    // re-permissioned.
    refused("write HEAD", fs::write(&head, "garbage\n"))?;
    refused(
        "append to HEAD",
        fs::OpenOptions::new().append(true).open(&head),
    )?;
    refused("unlink HEAD", fs::remove_file(&head))?;
    refused("move HEAD", fs::rename(&head, dot_git.join("H2")))?;
    refused("link HEAD", fs::hard_link(&head, dot_git.join("H3")))?;
    refused(
        "chmod HEAD",
        fs::set_permissions(&head, fs::Permissions::from_mode(0o000)),
    )?;
    // Only a valid HEAD may be renamed onto it.
    let lock = dot_git.join("HEAD.lock");
    for bad in [
        "garbage\n",
        "",
        "ref: heads/main\n",
        "0123456789abcdef\n",
        // Blank to Rust, not to Git; and a form Git accepts but never writes.
        "ref:\x0crefs/heads/main\n",
        "ref:refs/heads/main\n",
    ] {
        io("write HEAD.lock", fs::write(&lock, bad))?;
        refused(
            &format!("rename {bad:?} onto HEAD"),
            fs::rename(&lock, &head),
        )?;
        io("remove HEAD.lock", fs::remove_file(&lock))?;
    }
    io("make a directory", fs::create_dir(dot_git.join("d")))?;
    // (The kernel refuses this one itself: ENOTDIR.)
    assert!(
        fs::rename(dot_git.join("d"), &head).is_err(),
        "a directory replaced HEAD"
    );
    io("remove the directory", fs::remove_dir(dot_git.join("d")))?;
    // ... with no second name to write it through afterwards (a lock file
    // takes none; one linked elsewhere before is refused too) ...
    io("write HEAD.lock", fs::write(&lock, valid))?;
    refused(
        "link HEAD.lock",
        fs::hard_link(&lock, dot_git.join("other")),
    )?;
    io("write a file", fs::write(dot_git.join("other"), valid))?;
    io(
        "link it",
        fs::hard_link(dot_git.join("other"), dot_git.join("other2")),
    )?;
    refused(
        "rename a linked file onto HEAD",
        fs::rename(dot_git.join("other"), &head),
    )?;
    for f in ["other", "other2"] {
        io("unlink", fs::remove_file(dot_git.join(f)))?;
    }
    io("unlink", fs::remove_file(&lock))?;
    // ... and no descriptor opened before writes to it after.
    let mut held = io(
        "create HEAD.lock",
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&lock),
    )?;
    io("write HEAD.lock", held.write_all(valid.as_bytes()))?;
    io(
        "rename a valid HEAD.lock onto HEAD",
        fs::rename(&lock, &head),
    )?;
    refused(
        "write through the old descriptor",
        held.write_all(b"garbage"),
    )?;
    refused("truncate through the old descriptor", held.set_len(0))?;
    drop(held);
    // The host's lock file, mid-update, is never written, replaced,
    // removed, re-moded or linked.
    io(
        "host writes HEAD.lock",
        fs::write(host.path("HEAD.lock"), valid),
    )?;
    refused(
        "open the host's HEAD.lock for writing",
        fs::OpenOptions::new().write(true).open(&lock),
    )?;
    refused("truncate the host's HEAD.lock", fs::File::create(&lock))?;
    io("scratch", fs::write(dot_git.join("scratch"), "garbage\n"))?;
    refused(
        "rename over the host's HEAD.lock",
        fs::rename(dot_git.join("scratch"), &lock),
    )?;
    refused("unlink the host's HEAD.lock", fs::remove_file(&lock))?;
    refused(
        "chmod the host's HEAD.lock",
        fs::set_permissions(&lock, fs::Permissions::from_mode(0o000)),
    )?;
    refused(
        "link the host's HEAD.lock",
        fs::hard_link(&lock, dot_git.join("l2")),
    )?;
    io("unlink", fs::remove_file(dot_git.join("scratch")))?;
    io(
        "host commits",
        fs::rename(host.path("HEAD.lock"), host.path("HEAD")),
    )?;
    assert_eq!(io("read HEAD", fs::read_to_string(&head))?, valid);
    // The sandbox's own lock file is its own: reopened, rewritten, renamed.
    io("create own lock", fs::write(&lock, "x"))?;
    io("rewrite own lock", fs::write(&lock, valid))?;
    io("rename own lock onto HEAD", fs::rename(&lock, &head))?;
    // The same for a host worktree's HEAD.
    let wt_head = dot_git.join("worktrees/wt/HEAD");
    refused(
        "write the worktree's HEAD",
        fs::write(&wt_head, "garbage\n"),
    )?;
    io(
        "write its lock",
        fs::write(dot_git.join("worktrees/wt/HEAD.lock"), "x\n"),
    )?;
    refused(
        "rename garbage onto the worktree's HEAD",
        fs::rename(dot_git.join("worktrees/wt/HEAD.lock"), &wt_head),
    )?;
    io(
        "unlink",
        fs::remove_file(dot_git.join("worktrees/wt/HEAD.lock")),
    )?;
    // objects/ and refs/ stay directories, reachable.
    for dir in ["objects", "refs"] {
        let d = dot_git.join(dir);
        refused(dir, fs::rename(&d, dot_git.join("gone")))?;
        refused(dir, fs::remove_dir_all(&d))?;
        refused(
            dir,
            fs::set_permissions(&d, fs::Permissions::from_mode(0o000)),
        )?;
    }
    assert_eq!(io("read HEAD", fs::read_to_string(&head))?, valid);
    git(&repo, &["status", "--short"])?;
    filter.unmount().map_err(|e| e.to_string())?;

    // The sandbox also planted a bare repository's shape at the workspace
    // root, whose config names a marker as the pager. Host Git on a
    // terminal still finds `.git` and runs nothing.
    let marker = tmp.path().join("marker");
    let pager = tmp.path().join("pager.sh");
    io(
        "write the pager",
        fs::write(&pager, format!("#!/bin/sh\ntouch {}\n", marker.display())),
    )?;
    io(
        "chmod the pager",
        fs::set_permissions(&pager, fs::Permissions::from_mode(0o755)),
    )?;
    io("plant HEAD", fs::write(repo.join("HEAD"), valid))?;
    io("plant objects", fs::create_dir(repo.join("objects")))?;
    io("plant refs", fs::create_dir(repo.join("refs")))?;
    io(
        "plant config",
        fs::write(
            repo.join("config"),
            format!("[core]\n\tpager = {}\n", pager.display()),
        ),
    )?;
    let git_dir = git(&repo, &["rev-parse", "--git-dir"])?;
    assert_eq!(git_dir.trim(), ".git");
    git_branch_on_a_terminal(&repo)?;
    assert!(!marker.exists(), "host git ran the planted pager");
    // The planted shape is a live threat once .git is invalid: the same
    // command with a broken HEAD runs the marker (the attack this guards).
    io("break HEAD on the host", fs::write(&head, "garbage\n"))?;
    git_branch_on_a_terminal(&repo)?;
    assert!(
        marker.exists(),
        "the attack did not reproduce without the filter: this test proves nothing"
    );
    Ok(())
}

/// Host Git follows symbolic links inside its git directory: a link planted
/// at `logs/HEAD` makes it append reflog lines (which carry branch names the
/// sandbox chose) to a file outside the repository, a link at `index` makes
/// its lock file replace the target. The git directory takes no new links,
/// and a link the host already had cannot be moved or linked elsewhere
/// (spec 3.5, SR-4). Nor does it take FIFOs.
#[test]
fn symbolic_links_cannot_be_planted_where_host_git_follows_them() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("symbolic_links_cannot_be_planted_where_host_git_follows_them");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = fixture(tmp.path())?;
    let dot_git = repo.join(".git");
    let outside = tmp.path().join("bashrc");
    // A link the host made itself.
    io(
        "host link",
        std::os::unix::fs::symlink(&outside, dot_git.join("host-link")),
    )?;
    let filter = mount(&dot_git, &dot_git, None).map_err(|e| e.to_string())?;

    let reflog = dot_git.join("logs/HEAD");
    io("remove the reflog", fs::remove_file(&reflog))?;
    refused(
        "plant logs/HEAD",
        std::os::unix::fs::symlink(&outside, &reflog),
    )?;
    refused(
        "plant a relative link",
        std::os::unix::fs::symlink("../../bashrc", dot_git.join("ORIG_HEAD")),
    )?;
    refused(
        "link the host's link",
        fs::hard_link(dot_git.join("host-link"), &reflog),
    )?;
    refused(
        "move the host's link",
        fs::rename(dot_git.join("host-link"), &reflog),
    )?;
    io("scratch", fs::write(dot_git.join("scratch"), "x"))?;
    refused(
        "exchange the host's link",
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            dot_git.join("scratch"),
            rustix::fs::CWD,
            dot_git.join("host-link"),
            rustix::fs::RenameFlags::EXCHANGE,
        )
        .map_err(std::io::Error::from),
    )?;
    // Nor a FIFO, which would hang host Git opening it.
    let index = dot_git.join("index");
    io("remove the index", fs::remove_file(&index))?;
    refused(
        "plant a FIFO index",
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &index,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .map_err(std::io::Error::from),
    )?;
    git(&repo, &["reset", "-q"])?;
    // The host's link is still readable where it is.
    assert_eq!(
        io("readlink", fs::read_link(dot_git.join("host-link")))?,
        outside
    );
    // Host Git writes its reflog and index inside the repository only.
    git(&repo, &["checkout", "-q", "-b", "x;touch${IFS}/tmp/pwned;"])?;
    git(&repo, &["checkout", "-q", "main"])?;
    assert!(!outside.exists(), "host Git wrote outside the repository");
    assert!(io("reflog", fs::symlink_metadata(&reflog))?.is_file());
    io("remove scratch", fs::remove_file(dot_git.join("scratch")))?;

    filter.unmount().map_err(|e| e.to_string())?;
    assert!(!outside.exists());
    assert!(io("reflog", fs::symlink_metadata(&reflog))?.is_file());
    Ok(())
}

/// The filter seals a host object under every name it has, also when the
/// sandbox reaches it first by a hard link the host already had: the
/// identities of the sealed files and hooks are known before the first
/// request (spec 3.5, SR-4).
#[test]
fn pre_existing_hard_links_to_sealed_files_stay_sealed() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("pre_existing_hard_links_to_sealed_files_stay_sealed");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = fixture(tmp.path())?;
    let dot_git = repo.join(".git");
    let config = io("read config", fs::read(dot_git.join("config")))?;
    io(
        "link config",
        fs::hard_link(dot_git.join("config"), dot_git.join("cfg-backup")),
    )?;
    let hook = dot_git.join("hooks/pre-commit");
    io("write a host hook", fs::write(&hook, "#!/bin/sh\nexit 0\n"))?;
    io(
        "make it executable",
        fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)),
    )?;
    io(
        "link the hook",
        fs::hard_link(&hook, dot_git.join("hook-copy")),
    )?;
    let sub_hook = dot_git.join("modules/sub/hooks/post-checkout");
    io(
        "write a submodule hook",
        fs::write(&sub_hook, "#!/bin/sh\n"),
    )?;
    io(
        "link the submodule hook",
        fs::hard_link(&sub_hook, dot_git.join("sub-hook-copy")),
    )?;
    let filter = mount(&dot_git, &dot_git, None).map_err(|e| e.to_string())?;

    // Reached first by their other names.
    for name in ["cfg-backup", "hook-copy", "sub-hook-copy"] {
        let p = dot_git.join(name);
        refused(name, fs::OpenOptions::new().append(true).open(&p).map(drop))?;
        refused(name, fs::OpenOptions::new().write(true).open(&p).map(drop))?;
        refused(
            name,
            fs::set_permissions(&p, fs::Permissions::from_mode(0o777)),
        )?;
        refused(name, fs::hard_link(&p, dot_git.join("again")))?;
        // Reading stays possible.
        io(name, fs::read(&p))?;
    }

    filter.unmount().map_err(|e| e.to_string())?;
    assert_eq!(io("read config", fs::read(dot_git.join("config")))?, config);
    assert_eq!(
        io("read hook", fs::read_to_string(&hook))?,
        "#!/bin/sh\nexit 0\n"
    );
    assert!(!dot_git.join("again").exists());
    Ok(())
}

/// Every open directory handle keeps its listing: the listings held at once
/// are bounded in total, so a large directory opened over and over cannot
/// exhaust the Runtime Supervisor's memory, and the bound frees up as
/// handles close.
#[test]
fn open_directory_listings_are_bounded_in_total() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("open_directory_listings_are_bounded_in_total");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = fixture(tmp.path())?;
    let dot_git = repo.join(".git");
    let many = dot_git.join("many");
    io("mkdir many", fs::create_dir(&many))?;
    const FILES: usize = 25_000;
    for i in 0..FILES {
        io("create", fs::File::create(many.join(i.to_string())))?;
    }
    let filter = mount(&dot_git, &dot_git, None).map_err(|e| e.to_string())?;

    let mut held = Vec::new();
    let mut refusal = None;
    // 2,000,000 entries in total are 80 listings of this directory.
    for _ in 0..200 {
        match fs::read_dir(&many) {
            Ok(d) => held.push(d),
            Err(e) => {
                refusal = Some(e);
                break;
            }
        }
    }
    let opened = held.len();
    match refusal {
        Some(e) if e.raw_os_error() == Some(12) => {}
        other => {
            return Err(format!(
                "after {opened} listings: expected ENOMEM, got {other:?}"
            ))
        }
    }
    assert!((70..=80).contains(&opened), "{opened} listings held");
    drop(held);
    // Closed handles give their share back (releasedir is asynchronous).
    let deadline = Instant::now() + Duration::from_secs(10);
    let listed = loop {
        match fs::read_dir(&many) {
            Ok(d) => break d.count(),
            Err(e) if Instant::now() < deadline && e.raw_os_error() == Some(12) => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(format!("listing after closing: {e}")),
        }
    };
    assert_eq!(listed, FILES);

    filter.unmount().map_err(|e| e.to_string())?;
    Ok(())
}

/// Every inode and open file of the filter holds a descriptor of the process
/// serving it (the Runtime Supervisor): a sandbox holding more files open
/// than the descriptor limit must run into the filter's share, not leave the
/// supervisor unable to open anything.
#[test]
fn the_filter_leaves_the_supervisor_descriptors() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("the_filter_leaves_the_supervisor_descriptors");
    }
    use rustix::process::{setrlimit, Resource, Rlimit};
    use std::io::{BufRead as _, BufReader};
    const LIMIT: u64 = 2048;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = fixture(tmp.path())?;
    let dot_git = repo.join(".git");
    let many = dot_git.join("many");
    io("mkdir many", fs::create_dir(&many))?;
    const FILES: usize = 3000;
    for i in 0..FILES {
        io("create", fs::File::create(many.join(i.to_string())))?;
    }
    // The "sandbox": a process with its own (higher) limit that opens files
    // through the filter when told to and keeps them open.
    let script = format!(
        "read go; n=0; for i in $(seq 0 {last}); do \
         exec {{fd}}<{dir}/$i 2>{tmp}/err || break; n=$((n+1)); done; \
         echo \"$n $(cat {tmp}/err)\"; read done",
        last = FILES - 1,
        dir = many.display(),
        tmp = tmp.path().display(),
    );
    let mut sandbox = io(
        "spawn the opener",
        Command::new("bash")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn(),
    )?;
    io(
        "lower the descriptor limit",
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(LIMIT),
                maximum: Some(LIMIT),
            },
        )
        .map_err(std::io::Error::from),
    )?;
    let filter = mount(&dot_git, &dot_git, None).map_err(|e| e.to_string())?;
    let mut to_sandbox = sandbox.stdin.take().ok_or("no stdin")?;
    let mut from_sandbox = BufReader::new(sandbox.stdout.take().ok_or("no stdout")?);
    io("go", to_sandbox.write_all(b"go\n"))?;
    let mut report = String::new();
    io("read the report", from_sandbox.read_line(&mut report))?;
    let held: usize = report
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("bad report {report:?}"))?;
    // The filter refused past its share (a quarter of the limit for open
    // files, half for inodes) ...
    assert!(held < FILES, "{report}");
    assert!(report.contains("Too many open files"), "{report}");
    // ... and the serving process still has its own.
    let mut own = Vec::new();
    for _ in 0..512 {
        own.push(io(
            "the supervisor opens a file",
            fs::File::open("/dev/null"),
        )?);
    }
    drop(own);
    io("done", to_sandbox.write_all(b"done\n"))?;
    io("wait for the opener", sandbox.wait())?;

    filter.unmount().map_err(|e| format!("unmount: {e}"))?;
    Ok(())
}

/// The guards are not only those of launch time: a worktree or submodule
/// the host adds while the sandbox runs is the host repository's too, and
/// its admin files are sealed the moment it exists. The sandbox's own
/// worktrees and submodules stay its own (spec 3.5, SR-4).
#[test]
fn worktrees_and_submodules_the_host_adds_during_the_session_are_guarded() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("worktrees_and_submodules_the_host_adds_during_the_session_are_guarded");
    }
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = fixture(tmp.path())?;
    let dot_git = repo.join(".git");
    let host = HostView::open(&dot_git)?;
    let filter = mount(&dot_git, &dot_git, None).map_err(|e| e.to_string())?;

    // The host adds a worktree and a submodule git directory underneath.
    for dir in ["worktrees/late", "modules/late", "modules/late/hooks"] {
        io(dir, fs::create_dir(host.path(dir)))?;
    }
    io(
        "host gitdir",
        fs::write(host.path("worktrees/late/gitdir"), "/elsewhere/.git\n"),
    )?;
    io(
        "host HEAD",
        fs::write(host.path("modules/late/HEAD"), "ref: refs/heads/main\n"),
    )?;
    let late = dot_git.join("worktrees/late");
    refused(
        "rewrite its gitdir",
        fs::write(late.join("gitdir"), "/tmp/x\n"),
    )?;
    refused(
        "plant its commondir",
        fs::write(late.join("commondir"), "/tmp/x\n"),
    )?;
    refused(
        "plant its config.worktree",
        fs::write(late.join("config.worktree"), "x"),
    )?;
    refused(
        "move it",
        fs::rename(&late, dot_git.join("worktrees/late2")),
    )?;
    refused("remove it", fs::remove_dir_all(&late))?;
    let module = dot_git.join("modules/late");
    refused(
        "plant a submodule config",
        fs::write(module.join("config"), "[core]\n"),
    )?;
    refused(
        "plant a submodule hook",
        fs::write(module.join("hooks/post-checkout"), "#!/bin/sh\n"),
    )?;
    refused(
        "move the submodule",
        fs::rename(&module, dot_git.join("modules/x")),
    )?;
    io(
        "ordinary data still goes in",
        fs::write(late.join("ORIG_HEAD"), "0000\n"),
    )?;
    refused(
        "its HEAD keeps a valid shape",
        fs::write(late.join("HEAD"), "0000\n"),
    )?;
    refused(
        "the admin roots stay",
        fs::remove_dir(dot_git.join("worktrees")),
    )?;

    // The sandbox's own worktree is its own: added, used, removed.
    git(&repo, &["worktree", "add", "-q", "../mine"])?;
    git(&tmp.path().join("mine"), &["status", "--short"])?;
    git(&repo, &["worktree", "remove", "../mine"])?;
    io(
        "its own submodule directory",
        fs::create_dir_all(dot_git.join("modules/own/hooks")),
    )?;
    io(
        "with its own config",
        fs::write(dot_git.join("modules/own/config"), "[core]\n"),
    )?;
    io(
        "removed again",
        fs::remove_dir_all(dot_git.join("modules/own")),
    )?;
    // Pre-making the parent of a host submodule's git directory captures
    // nothing: the host's `libs/foo` inside the sandbox's `libs` is the
    // host's.
    io(
        "the sandbox makes modules/libs",
        fs::create_dir(dot_git.join("modules/libs")),
    )?;
    io(
        "host adds libs/foo",
        fs::create_dir(host.path("modules/libs/foo")),
    )?;
    refused(
        "plant the host submodule's config",
        fs::write(dot_git.join("modules/libs/foo/config"), "[core]\n"),
    )?;
    refused(
        "move the host submodule away",
        fs::rename(
            dot_git.join("modules/libs/foo"),
            dot_git.join("modules/libs/bar"),
        ),
    )?;

    filter.unmount().map_err(|e| e.to_string())?;
    assert!(!late.join("commondir").exists());
    assert!(!late.join("config.worktree").exists());
    assert_eq!(
        io("read gitdir", fs::read_to_string(late.join("gitdir")))?,
        "/elsewhere/.git\n"
    );
    assert!(!module.join("config").exists());
    assert!(!module.join("hooks/post-checkout").exists());
    assert!(!dot_git.join("worktrees/mine").exists());
    Ok(())
}

/// "Made by the sandbox" is an identity (device, inode number), and ext4
/// hands a freed inode number to the next directory made: a directory the
/// sandbox made under `worktrees/` and removed again (itself, or host Git
/// pruning it) must not lend its identity to the worktree the host adds
/// next, whose admin files would then be the sandbox's to rewrite (spec 3.5,
/// SR-4).
#[test]
fn a_host_worktree_never_inherits_the_identity_of_a_removed_sandbox_directory() -> Result<(), String>
{
    if std::env::var_os(INNER).is_none() {
        return outer("a_host_worktree_never_inherits_the_identity_of_a_removed_sandbox_directory");
    }
    use std::os::unix::fs::MetadataExt as _;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = fixture(tmp.path())?;
    let dot_git = repo.join(".git");
    let host = HostView::open(&dot_git)?;
    let filter = mount(&dot_git, &dot_git, None).map_err(|e| e.to_string())?;
    let mut reused = 0;
    for round in 0..8 {
        let bait = dot_git.join(format!("worktrees/bait{round}"));
        io("the sandbox makes a directory", fs::create_dir(&bait))?;
        let ino = io("stat it", fs::metadata(&bait))?.ino();
        if round % 2 == 0 {
            io("the sandbox removes it", fs::remove_dir(&bait))?;
        } else {
            io(
                "host Git prunes it",
                fs::remove_dir(host.path(&format!("worktrees/bait{round}"))),
            )?;
        }
        // The sandbox looks the name up again (gone), so the kernel lets go
        // of the filter's node and the filter of its descriptor.
        assert!(fs::metadata(&bait).is_err());
        std::thread::sleep(Duration::from_millis(100));
        let name = format!("worktrees/host{round}");
        io("the host adds a worktree", fs::create_dir(host.path(&name)))?;
        if io("stat the host's", fs::metadata(host.path(&name)))?.ino() == ino {
            reused += 1;
        }
        let admin = dot_git.join(&name);
        refused(
            "plant the host worktree's commondir",
            fs::write(admin.join("commondir"), "/tmp/evil\n"),
        )?;
        refused(
            "plant its config.worktree",
            fs::write(admin.join("config.worktree"), "[core]\n"),
        )?;
        refused("remove it", fs::remove_dir(&admin))?;
    }
    eprintln!("inode numbers reused by the host: {reused} of 8");
    filter.unmount().map_err(|e| e.to_string())?;
    for round in 0..8 {
        let admin = dot_git.join(format!("worktrees/host{round}"));
        assert!(!admin.join("commondir").exists(), "{}", admin.display());
        assert!(!admin.join("config.worktree").exists());
    }
    Ok(())
}

/// The filter decides a rename by looking at the target first; under
/// `worktrees/` a target found absent may be made by the host before the
/// rename lands, and a sandbox directory renamed over the host's new, still
/// empty worktree would become that worktree — the sandbox's to rewrite
/// (spec 3.5, SR-4). The host here adds and removes a worktree directory in
/// a loop while the sandbox keeps renaming its own directory onto that name:
/// the host's directory is never replaced.
#[test]
fn a_sandbox_directory_never_replaces_a_worktree_the_host_just_made() -> Result<(), String> {
    if std::env::var_os(INNER).is_none() {
        return outer("a_sandbox_directory_never_replaces_a_worktree_the_host_just_made");
    }
    use std::os::unix::fs::MetadataExt as _;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = fixture(tmp.path())?;
    let dot_git = repo.join(".git");
    let host = HostView::open(&dot_git)?;
    let filter = mount(&dot_git, &dot_git, None).map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let sandbox = {
        let stop = Arc::clone(&stop);
        let own = dot_git.join("worktrees/own");
        let race = dot_git.join("worktrees/race");
        std::thread::spawn(move || {
            let mut moved = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = fs::create_dir(&own);
                if fs::rename(&own, &race).is_ok() {
                    moved += 1;
                    let _ = fs::rename(&race, &own);
                }
            }
            moved
        })
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut made = 0u64;
    let mut replaced = 0u64;
    while Instant::now() < deadline {
        let race = host.path("worktrees/race");
        if fs::create_dir(&race).is_err() {
            continue;
        }
        made += 1;
        // No early return while the sandbox thread runs: a directory
        // gone or changed under the host's name was replaced.
        let ino = fs::metadata(&race).map(|m| m.ino()).ok();
        std::thread::yield_now();
        let still = fs::metadata(&race).map(|m| m.ino()).ok();
        if ino.is_none() || still != ino || fs::remove_dir(&race).is_err() {
            replaced += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let moved = sandbox.join().map_err(|_| "the sandbox thread panicked")?;
    eprintln!("host made {made}, sandbox renames onto the name {moved}, replaced {replaced}");
    filter.unmount().map_err(|e| e.to_string())?;
    assert!(
        made > 0 && moved > 0,
        "the race did not run: {made} {moved}"
    );
    assert_eq!(replaced, 0, "a host worktree directory was replaced");
    Ok(())
}

/// A refusal that names a directory under `.git/worktrees` (or
/// `.git/modules`) shows its control characters escaped, and bytes that are
/// not UTF-8 as `\xNN` (spec README 'Terminal output hygiene'): whoever can
/// write the repository chooses that name, and the refusal reaches the
/// developer's terminal as the launch's error.
#[test]
fn a_refusal_names_a_hostile_admin_directory_escaped() -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt as _;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let repo = tmp.path().join("repo");
    io("mkdir repo", fs::create_dir(&repo))?;
    git(&repo, &["init", "-q"])?;
    let name = std::ffi::OsStr::from_bytes(b"evil\x1b]0;x\x07\n\xff");
    let admin = repo.join(".git/worktrees").join(name);
    io("mkdir admin", fs::create_dir_all(&admin))?;
    io(
        "plant a link",
        std::os::unix::fs::symlink(tmp.path(), repo.join(".git/lnk")),
    )?;
    io(
        "include through it",
        fs::write(
            admin.join("config.worktree"),
            "[include]\n\tpath = ../../lnk/x.gitconfig\n",
        ),
    )?;
    let message = match scan_layout(&repo.join(".git")) {
        Ok(_) => return Err("an include through a symbolic link was accepted".to_owned()),
        Err(e) => e.to_string(),
    };
    assert!(
        message.contains("worktrees/evil\\x1b]0;x\\x07\\n\\xff/config.worktree"),
        "{message}"
    );
    assert!(!message.contains(char::is_control), "{message:?}");
    Ok(())
}
