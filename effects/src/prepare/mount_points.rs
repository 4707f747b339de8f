//! The bundle's fixed mount points inside a prepared tree (spec 3.6
//! "descriptor-relative ... beneath validated Storage Root handles",
//! SR-14): without them runsc would create them in the shared lower on
//! every launch. They are made by the hidden `__mount-points` worker as
//! root of the preparation's user namespace (the image may own `/` by a
//! nonzero ID), descriptor-relatively beneath the tree's `rootfs`, from the
//! stage opened without a symbolic link and checked against its recorded
//! device and inode: every
//! component is opened with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_XDEV` and made with `mkdirat` where it is missing, so an
//! image's symbolic link is never followed out of the tree and nothing is
//! made across a mount.
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

use crate::recorded_dir::{open_recorded_dir, RecordedDirError};

/// The hidden subcommand of the worker.
pub const MOUNT_POINTS_SUBCOMMAND: &str = "__mount-points";

/// Why a mount point could not be made; one variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum MountPointError {
    #[error("cannot open {path} (expected a directory reached without a symbolic link): {source}")]
    Open { path: String, source: io::Error },
    #[error("{path} is a symbolic link or not a directory in the image; a mount point beneath it would leave the tree")]
    NotADirectory { path: String },
    #[error("{path} is on another file system; no mount point is made across a mount")]
    MountCrossing { path: String },
    #[error("the stage {path} is no longer the directory its operation recorded")]
    StageChanged { path: String },
    #[error("{path} is a directory in the image where a file mount point belongs")]
    DirectoryAtFile { path: String },
    #[error("cannot {step} {path}: {source}")]
    Make {
        step: &'static str,
        path: String,
        source: io::Error,
    },
}

/// Makes, beneath the stage's `rootfs`: every product mount point
/// (`lazaret_runtime::bundle::MOUNT_POINTS`, a directory), every file mount
/// point (`MOUNT_FILES`: whatever the image has there is replaced by an
/// empty regular file), and each default persistent path the image reaches
/// without a symbolic link (spec 3.2; one it does not is left alone, and a
/// profile using it refuses at launch). The stage is opened without
/// following a symbolic link and must still be `stage_identity` (the
/// device and inode its operation recorded). Returns the default
/// persistent paths left alone.
pub fn make_mount_points(
    stage: &Path,
    stage_identity: (u64, u64),
) -> Result<Vec<&'static str>, MountPointError> {
    let stage_fd = open_recorded_dir(stage, stage_identity).map_err(|e| match e {
        RecordedDirError::Open { path, source } => MountPointError::Open {
            path: path.display().to_string(),
            source,
        },
        RecordedDirError::Changed { path, .. } => MountPointError::StageChanged {
            path: path.display().to_string(),
        },
    })?;
    let root = child(&stage_fd, "rootfs", "rootfs", false)?;
    for point in lazaret_runtime::bundle::MOUNT_POINTS {
        directory(&root, point)?;
    }
    for file in lazaret_runtime::bundle::MOUNT_FILES {
        empty_file(&root, file)?;
    }
    let mut skipped = Vec::new();
    for dir in lazaret_runtime::config::DEFAULT_PERSISTENT_DIRS {
        match directory(&root, dir) {
            Ok(_) => {}
            Err(MountPointError::NotADirectory { .. }) => skipped.push(dir),
            Err(e) => return Err(e),
        }
    }
    Ok(skipped)
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn components(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty())
}

/// The directory at `path` beneath `root`, each missing component made
/// (0755).
fn directory(root: &OwnedFd, path: &str) -> Result<OwnedFd, MountPointError> {
    let mut at = rustix::io::dup(root).map_err(|e| MountPointError::Make {
        step: "duplicate the descriptor of",
        path: "/".into(),
        source: e.into(),
    })?;
    let mut shown = String::new();
    for c in components(path) {
        shown.push('/');
        shown.push_str(c);
        at = child(&at, c, &shown, true)?;
    }
    Ok(at)
}

/// The directory `name` in `dir`, made if missing and `create`.
fn child(dir: &OwnedFd, name: &str, shown: &str, create: bool) -> Result<OwnedFd, MountPointError> {
    // Bounded: one creation, and a second open if another made it first.
    let mut made = false;
    for _ in 0..2 {
        let opened = rustix::fs::openat2(
            dir,
            name,
            dir_flags(),
            Mode::empty(),
            ResolveFlags::BENEATH
                | ResolveFlags::NO_SYMLINKS
                | ResolveFlags::NO_MAGICLINKS
                | ResolveFlags::NO_XDEV,
        );
        match opened {
            Ok(fd) => {
                if made {
                    // The mode the recipe names, whatever the umask.
                    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o755)).map_err(|e| {
                        MountPointError::Make {
                            step: "set the mode of",
                            path: shown.to_owned(),
                            source: e.into(),
                        }
                    })?;
                }
                return Ok(fd);
            }
            Err(rustix::io::Errno::NOENT) if create => {
                match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755)) {
                    Ok(()) => made = true,
                    Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => {
                        return Err(MountPointError::Make {
                            step: "create the directory",
                            path: shown.to_owned(),
                            source: e.into(),
                        })
                    }
                }
            }
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                return Err(MountPointError::NotADirectory {
                    path: shown.to_owned(),
                })
            }
            Err(rustix::io::Errno::XDEV) => {
                return Err(MountPointError::MountCrossing {
                    path: shown.to_owned(),
                })
            }
            Err(e) => {
                return Err(MountPointError::Open {
                    path: shown.to_owned(),
                    source: e.into(),
                })
            }
        }
    }
    Err(MountPointError::Open {
        path: shown.to_owned(),
        source: io::Error::other("it disappeared as soon as it was made"),
    })
}

/// An empty regular file at `path` beneath `root` (0644), in place of
/// anything but a directory the image has there.
fn empty_file(root: &OwnedFd, path: &str) -> Result<(), MountPointError> {
    let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
    let dir = directory(root, parent)?;
    let make = |step: &'static str| {
        move |e: rustix::io::Errno| MountPointError::Make {
            step,
            path: path.to_owned(),
            source: e.into(),
        }
    };
    match rustix::fs::statat(dir.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
            return Err(MountPointError::DirectoryAtFile {
                path: path.to_owned(),
            })
        }
        // A file, a symlink (never followed), a device: removed.
        Ok(_) => rustix::fs::unlinkat(dir.as_fd(), name, AtFlags::empty())
            .map_err(make("remove what the image has at"))?,
        Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(make("inspect")(e)),
    }
    let file = rustix::fs::openat(
        dir.as_fd(),
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .map_err(make("create the empty file"))?;
    // The mode the recipe names, whatever the umask.
    rustix::fs::fchmod(&file, Mode::from_raw_mode(0o644)).map_err(make("set the mode of"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("rootfs/etc")).unwrap();
        dir
    }

    fn made(dir: &Path) -> Result<Vec<&'static str>, MountPointError> {
        let st = fs::metadata(dir).unwrap();
        use std::os::unix::fs::MetadataExt;
        make_mount_points(dir, (st.dev(), st.ino()))
    }

    #[test]
    fn every_mount_point_is_made_and_resolv_conf_is_an_empty_file() {
        let dir = tree();
        fs::write(
            dir.path().join("rootfs/etc/resolv.conf"),
            "nameserver 1.1.1.1",
        )
        .unwrap();
        assert_eq!(made(dir.path()).unwrap(), Vec::<&str>::new());
        let rootfs = dir.path().join("rootfs");
        for p in lazaret_runtime::bundle::MOUNT_POINTS
            .iter()
            .chain(&lazaret_runtime::config::DEFAULT_PERSISTENT_DIRS)
        {
            assert!(rootfs.join(&p[1..]).is_dir(), "{p}");
        }
        let resolv = rootfs.join("etc/resolv.conf");
        assert!(resolv.is_file());
        assert_eq!(fs::read(&resolv).unwrap(), b"");
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&resolv), 0o644);
        assert_eq!(mode(&rootfs.join("opt")), 0o755);
        // Made again over its own result, nothing changes.
        assert_eq!(made(dir.path()).unwrap(), Vec::<&str>::new());
    }

    /// A symlink at the file mount point is replaced, never followed.
    #[test]
    fn a_symlink_at_the_file_mount_point_is_replaced_not_followed() {
        let dir = tree();
        let target = dir.path().join("host-resolv");
        fs::write(&target, "kept").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("rootfs/etc/resolv.conf")).unwrap();
        made(dir.path()).unwrap();
        let resolv = dir.path().join("rootfs/etc/resolv.conf");
        assert!(!resolv.is_symlink() && resolv.is_file());
        assert_eq!(fs::read_to_string(&target).unwrap(), "kept");
    }

    /// A symlink on the way to a product mount point refuses; nothing is
    /// made outside the tree. One at a default persistent path is left.
    #[test]
    fn a_symlink_on_the_way_refuses_a_product_point_and_skips_a_default() {
        let dir = tree();
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::remove_dir(dir.path().join("rootfs/etc")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.path().join("rootfs/etc")).unwrap();
        let e = made(dir.path()).unwrap_err();
        assert!(
            matches!(&e, MountPointError::NotADirectory { path } if path == "/etc"),
            "{e}"
        );
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);

        let dir = tree();
        std::os::unix::fs::symlink(&outside, dir.path().join("rootfs/opt")).unwrap();
        assert_eq!(made(dir.path()).unwrap(), vec!["/opt"]);
        assert!(dir.path().join("rootfs/opt").is_symlink());
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    }

    #[test]
    fn a_directory_at_the_file_mount_point_or_a_symlinked_rootfs_refuses() {
        let dir = tree();
        fs::create_dir(dir.path().join("rootfs/etc/resolv.conf")).unwrap();
        let e = made(dir.path()).unwrap_err();
        assert!(matches!(e, MountPointError::DirectoryAtFile { .. }), "{e}");

        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("rootfs")).unwrap();
        let e = made(dir.path()).unwrap_err();
        assert!(matches!(e, MountPointError::NotADirectory { .. }), "{e}");
    }

    /// A stage that is not the recorded directory is not touched.
    #[test]
    fn another_stage_than_the_recorded_one_refuses() {
        let dir = tree();
        let e = make_mount_points(dir.path(), (0, 0)).unwrap_err();
        assert!(matches!(e, MountPointError::StageChanged { .. }), "{e}");
        assert!(!dir.path().join("rootfs/workspace").exists());
    }
}
