//! Root creation one component at a time with mode 0700 and owner checks,
//! symlink refusal, and revalidation through retained plans (spec 3.2). The
//! creation entry point is exercised through `config init`'s parent creation
//! and the full loader; these tests drive it via `write_new_config`, which
//! creates missing parents exactly like a root.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // tests fail by panicking
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;

use lazaret_effects::config_init::write_new_config;
use lazaret_effects::confined::{ConfinedSys, RealSys, RecordedCall, RecordingSys};
use rustix::fs::{Mode, ResolveFlags};

fn uid() -> u32 {
    RealSys.user_ids().expect("ids").uid
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).expect("meta").mode() & 0o7777
}

#[test]
fn missing_components_are_created_one_at_a_time_with_0700() {
    let dir = tempfile::tempdir().expect("tmp");
    let target = dir.path().join("a/b/c/config.toml");
    let sys = RecordingSys::new(RealSys);
    let written = write_new_config(&sys, &target, b"hello", uid()).expect("init");
    assert_eq!(written, target);
    for d in ["a", "a/b", "a/b/c"] {
        assert_eq!(mode(&dir.path().join(d)), 0o700, "{d}");
    }
    assert_eq!(mode(&target), 0o600);
    assert_eq!(std::fs::read(&target).expect("read"), b"hello");
    let mkdirs: Vec<(String, Mode)> = sys
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            RecordedCall::Mkdirat { name, mode } => Some((name.display().to_string(), mode)),
            _ => None,
        })
        .collect();
    let expected: Vec<(String, Mode)> = ["a", "b", "c"]
        .iter()
        .map(|n| ((*n).to_owned(), Mode::from_raw_mode(0o700)))
        .collect();
    assert_eq!(mkdirs, expected);
    // Each created directory and the file get their exact mode set after
    // creation, whatever the umask (three directories, then the file).
    let chmods: Vec<Mode> = sys
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            RecordedCall::Chmod { mode } => Some(mode),
            _ => None,
        })
        .collect();
    assert_eq!(
        chmods,
        [0o700, 0o700, 0o700, 0o600]
            .map(Mode::from_raw_mode)
            .to_vec()
    );
    let all = ResolveFlags::BENEATH
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_XDEV;
    for c in sys.calls() {
        if let RecordedCall::Openat2 { path, resolve, .. } = c {
            if ["a", "b", "c", "config.toml"].contains(&path.to_str().unwrap_or_default()) {
                assert_eq!(resolve, all, "{path:?}");
            }
        }
    }
    // Never overwrites.
    let m = write_new_config(&RealSys, &target, b"again", uid())
        .expect_err("exists")
        .to_string();
    assert!(m.contains("already exists"), "{m}");
    assert_eq!(std::fs::read(&target).expect("read"), b"hello");
}

#[test]
fn a_created_component_with_the_wrong_owner_or_mode_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let sys = RecordingSys::new(RealSys);
    sys.impersonate(lazaret_effects::confined::UserIds {
        uid: 4242,
        gid: 4242,
        groups: vec![],
    });
    let m = write_new_config(&sys, &dir.path().join("new/config.toml"), b"x", 4242)
        .expect_err("owner")
        .to_string();
    assert!(
        m.contains("new") && m.contains("expected the invoking user (uid 4242)"),
        "{m}"
    );
    assert!(!dir.path().join("new/config.toml").exists());
    // An existing Lazaret-owned component with mode 0755 is refused.
    std::fs::create_dir(dir.path().join("loose")).expect("mkdir");
    std::fs::create_dir(dir.path().join("loose/inner")).expect("mkdir");
    std::fs::set_permissions(
        dir.path().join("loose/inner"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    // `loose` exists (ambient, any mode); `inner` exists and would be a
    // created-or-owned component only if missing, so it is used as is.
    assert!(write_new_config(
        &RealSys,
        &dir.path().join("loose/inner/config.toml"),
        b"x",
        uid()
    )
    .is_ok());
}

#[test]
fn mkdir_failure_refuses_and_names_the_component() {
    let dir = tempfile::tempdir().expect("tmp");
    let sys = RecordingSys::new(RealSys);
    sys.fail_next("mkdirat", rustix::io::Errno::ACCESS);
    let m = write_new_config(&sys, &dir.path().join("x/config.toml"), b"x", uid())
        .expect_err("mkdir")
        .to_string();
    assert!(m.contains("/x: creating the directory failed"), "{m}");
}

#[test]
fn a_symlink_at_a_created_component_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let elsewhere = tempfile::tempdir().expect("tmp2");
    // The final component is a symlink: refused, the link target untouched.
    symlink(
        elsewhere.path().join("victim"),
        dir.path().join("config.toml"),
    )
    .expect("symlink");
    let m = write_new_config(&RealSys, &dir.path().join("config.toml"), b"x", uid())
        .expect_err("symlink")
        .to_string();
    assert!(m.contains("already exists"), "{m}");
    assert!(!elsewhere.path().join("victim").exists());
}

/// Delegates to [`RealSys`] and runs `swap` just before the `at`-th
/// `open_root` call: the moment a plan is about to be built by label.
struct SwapBeforeOpenRoot<F: Fn()> {
    at: usize,
    seen: std::cell::Cell<usize>,
    swap: F,
}

impl<F: Fn()> ConfinedSys for SwapBeforeOpenRoot<F> {
    fn open_root(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        self.seen.set(self.seen.get() + 1);
        if self.seen.get() == self.at {
            (self.swap)();
        }
        RealSys.open_root()
    }
    fn open_ambient(&self, path: &Path, follow: bool) -> std::io::Result<std::os::fd::OwnedFd> {
        RealSys.open_ambient(path, follow)
    }
    fn openat2(
        &self,
        dir: std::os::fd::BorrowedFd<'_>,
        path: &Path,
        flags: rustix::fs::OFlags,
        mode: Mode,
        resolve: ResolveFlags,
    ) -> std::io::Result<std::os::fd::OwnedFd> {
        RealSys.openat2(dir, path, flags, mode, resolve)
    }
    fn reopen(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        flags: rustix::fs::OFlags,
    ) -> std::io::Result<std::os::fd::OwnedFd> {
        RealSys.reopen(fd, flags)
    }
    fn fd_path(&self, fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<std::path::PathBuf> {
        RealSys.fd_path(fd)
    }
    fn stat(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
    ) -> std::io::Result<lazaret_effects::confined::FileStat> {
        RealSys.stat(fd)
    }
    fn mkdirat(
        &self,
        dir: std::os::fd::BorrowedFd<'_>,
        name: &Path,
        mode: Mode,
    ) -> std::io::Result<()> {
        RealSys.mkdirat(dir, name, mode)
    }
    fn read_at(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        buf: &mut [u8],
        offset: u64,
    ) -> std::io::Result<usize> {
        RealSys.read_at(fd, buf, offset)
    }
    fn unlinkat(&self, dir: std::os::fd::BorrowedFd<'_>, name: &Path) -> std::io::Result<()> {
        RealSys.unlinkat(dir, name)
    }
    fn chmod(&self, fd: std::os::fd::BorrowedFd<'_>, mode: Mode) -> std::io::Result<()> {
        RealSys.chmod(fd, mode)
    }
    fn write_all(&self, fd: std::os::fd::BorrowedFd<'_>, bytes: &[u8]) -> std::io::Result<()> {
        RealSys.write_all(fd, bytes)
    }
    fn renameat(
        &self,
        dir: std::os::fd::BorrowedFd<'_>,
        from: &std::path::Path,
        to: &std::path::Path,
    ) -> std::io::Result<()> {
        RealSys.renameat(dir, from, to)
    }
    fn read_dir(
        &self,
        dir: std::os::fd::BorrowedFd<'_>,
        max: usize,
    ) -> std::io::Result<(Vec<std::ffi::OsString>, bool)> {
        RealSys.read_dir(dir, max)
    }
    fn user_ids(&self) -> std::io::Result<lazaret_effects::confined::UserIds> {
        RealSys.user_ids()
    }
}

#[test]
fn a_created_parent_replaced_before_the_file_is_written_is_refused() {
    // write_new_config creates a/b (0700), then builds the plan of the file's
    // parent. If a/b is replaced by another 0700 directory of the same name
    // in between, the file must not be created in the impostor: the parent
    // is revalidated against the directory that was created and checked.
    let dir = tempfile::tempdir().expect("tmp");
    let target = dir.path().join("a/b/config.toml");
    let (created, moved) = (dir.path().join("a/b"), dir.path().join("a/b-created"));
    let sys = SwapBeforeOpenRoot {
        // 1: the plan that creates a/b; 2: the file's parent plan.
        at: 2,
        seen: std::cell::Cell::new(0),
        swap: || {
            std::fs::rename(&created, &moved).expect("mv");
            std::fs::create_dir(&created).expect("impostor");
            std::fs::set_permissions(&created, std::fs::Permissions::from_mode(0o700))
                .expect("chmod");
        },
    };
    let m = write_new_config(&sys, &target, b"x", uid())
        .expect_err("impostor parent")
        .to_string();
    assert!(m.contains("a/b") && m.contains("changed"), "{m}");
    assert!(!target.exists(), "written into the replaced directory");
    assert!(!moved.join("config.toml").exists());
}
