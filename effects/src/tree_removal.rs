//! Removing a tree owned by subordinate IDs (spec 3.6 "descriptor-relative
//! ... deletion beneath validated Storage Root handles", SR-14, OR-7): what
//! `lazaret state reset` discarded and what `lazaret state gc` reclaims.
//!
//! The removal runs as root of a verified user namespace with the
//! developer's subordinate maps (the tree holds files owned by IDs the
//! developer cannot remove). It starts from a directory reached without a
//! symbolic link whose device and inode the caller recorded, and is a
//! bounded walk, one descriptor per level, that never follows a symlink and
//! never crosses a mount.
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use crate::broker::exclusion::spawn_exclusion;
use crate::broker::transient::{Limits, Transient, TransientError};
use crate::crash_point::crash_point;
use crate::recorded_dir::{open_recorded_dir, RecordedDirError};
use crate::userns::{plan_maps, spawn_in_user_namespace, Identity, RealHost, UsernsError};

/// The deepest directory the removal enters (each level holds a
/// descriptor); deeper ones are moved up first.
pub const MAX_DEPTH: usize = 128;
/// The most entries one removal looks at.
pub const MAX_ENTRIES: u64 = 50_000_000;
/// Names read from a directory before they are removed.
const BATCH: usize = 1024;
/// The hidden subcommand of the removal worker.
pub const REMOVE_SUBCOMMAND: &str = "__remove-tree";
/// How long the removal worker may run: far above what removing millions
/// of files takes on a slow disk.
const WORKER_LIMIT: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// Errors of a removal; one variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum RemovalError {
    #[error("cannot open {path} (expected a directory reached without a symbolic link): {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error(
        "{path} is no longer the directory to remove (expected device {device} inode {inode})"
    )]
    Changed {
        path: PathBuf,
        device: u64,
        inode: u64,
    },
    #[error("cannot {step} {path}: {source}")]
    Remove {
        step: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("{path} is another mount (a mount inside the tree); nothing beneath it was removed")]
    MountCrossing { path: PathBuf },
    #[error("more than {MAX_ENTRIES} entries under {path}; removal stopped")]
    TooMany { path: PathBuf },
    #[error("the removal worker's user namespace: {0}")]
    Userns(#[source] UsernsError),
    #[error("the removal worker: {0}")]
    Worker(#[source] TransientError),
    #[error("cannot pass the operation lock to the removal worker: {0}")]
    Inherit(#[source] io::Error),
    #[error("the removal worker failed ({status}): {stderr}")]
    WorkerFailed { status: String, stderr: String },
}

/// Runs `program __remove-tree` as root of a verified user namespace with
/// the developer's subordinate maps (a Domain's, and the preparation
/// worker's), which empties the directory `dir` if it is still
/// `(device, inode)`. The emptied directory stays for its owner to remove.
/// The worker inherits `hold` (a preparation's operation lock) for its
/// whole life.
pub fn run_worker(
    program: &Path,
    dir: &Path,
    device: u64,
    inode: u64,
    hold: Option<BorrowedFd<'_>>,
) -> Result<(), RemovalError> {
    let me = Identity::current(&mut RealHost).map_err(RemovalError::Userns)?;
    let maps = plan_maps(&mut RealHost, &me).map_err(RemovalError::Userns)?;
    let mut cmd = std::process::Command::new(program);
    cmd.arg(REMOVE_SUBCOMMAND)
        .arg("--dir")
        .arg(dir)
        .arg("--device")
        .arg(device.to_string())
        .arg("--inode")
        .arg(inode.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // The worker's spawn and its map helpers form one section.
    let spawning = spawn_exclusion();
    let inherited = hold
        .map(inheritable)
        .transpose()
        .map_err(RemovalError::Inherit)?;
    let child = spawn_in_user_namespace(cmd, &mut RealHost, &maps);
    drop(inherited);
    drop(spawning);
    let child = child.map_err(RemovalError::Userns)?;
    let out = Transient::adopt(child, REMOVE_SUBCOMMAND.to_owned())
        .and_then(|worker| worker.finish(b"", Limits::of(WORKER_LIMIT)))
        .map_err(RemovalError::Worker)?;
    if !out.status.success() {
        return Err(RemovalError::WorkerFailed {
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(())
}

/// Removes everything inside the directory `path`, which must be the
/// directory `(device, inode)` reached without a symbolic link. Run as
/// root of the user namespace whose maps own the tree; the directory
/// itself stays (its owner, the developer, removes it). Returns how many
/// entries were removed.
pub fn remove_contents(path: &Path, device: u64, inode: u64) -> Result<u64, RemovalError> {
    let dir = open_recorded_dir(path, (device, inode)).map_err(|e| match e {
        RecordedDirError::Open { path, source } => RemovalError::Open { path, source },
        RecordedDirError::Changed {
            path,
            device,
            inode,
        } => RemovalError::Changed {
            path,
            device,
            inode,
        },
    })?;
    let mut walk = Walk::default();
    let fence = Fence {
        device,
        mount: mount_id(&dir),
    };
    remove_children(&dir, &dir, path, fence, 0, &mut walk)?;
    Ok(walk.removed)
}

/// What a directory inside the tree must share with its top: the file
/// system (`st_dev`) and, where the kernel says, the mount itself: a bind
/// mount of the same file system has the same device but another mount.
#[derive(Clone, Copy)]
struct Fence {
    device: u64,
    mount: Option<u64>,
}

/// The ID of the mount `fd` is on (`statx` `STATX_MNT_ID`, Linux 5.8);
/// `None` when the kernel does not give it.
fn mount_id(fd: &OwnedFd) -> Option<u64> {
    let st =
        rustix::fs::statx(fd, c"", AtFlags::EMPTY_PATH, rustix::fs::StatxFlags::MNT_ID).ok()?;
    (st.stx_mask & rustix::fs::StatxFlags::MNT_ID.bits() != 0).then_some(st.stx_mnt_id)
}

/// Up to [`BATCH`] names of `dir` other than `.` and `..`.
fn read_names(dir: &OwnedFd, at: &Path) -> Result<Vec<OsString>, RemovalError> {
    let step = |e: rustix::io::Errno| RemovalError::Remove {
        step: "read the directory",
        path: at.to_owned(),
        source: e.into(),
    };
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir.as_fd()).map_err(step)? {
        let entry = entry.map_err(step)?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        names.push(OsStr::from_bytes(name).to_owned());
        if names.len() == BATCH {
            break;
        }
    }
    Ok(names)
}

/// The counts of one removal.
#[derive(Default)]
struct Walk {
    /// Entries looked at (bounded by [`MAX_ENTRIES`]).
    seen: u64,
    /// Entries removed.
    removed: u64,
    /// Subtrees moved up to the emptied directory (names them).
    hoisted: u64,
}

/// Removes what `dir` holds; `top` is the directory being emptied. A directory
/// at the depth bound is not entered but moved up into `top`, whose loop
/// reads it again: any depth the agent made is removed with at most
/// [`MAX_DEPTH`] descriptors open.
fn remove_children(
    top: &OwnedFd,
    dir: &OwnedFd,
    at: &Path,
    fence: Fence,
    depth: usize,
    walk: &mut Walk,
) -> Result<(), RemovalError> {
    debug_assert!(depth < MAX_DEPTH);
    loop {
        let names = read_names(dir, at)?;
        if names.is_empty() {
            return Ok(());
        }
        for name in names {
            walk.seen += 1;
            if walk.seen > MAX_ENTRIES {
                return Err(RemovalError::TooMany {
                    path: at.to_owned(),
                });
            }
            let path = at.join(&name);
            let step = |step: &'static str, path: &Path| {
                let path = path.to_owned();
                move |e: rustix::io::Errno| RemovalError::Remove {
                    step,
                    path,
                    source: e.into(),
                }
            };
            let st = rustix::fs::statat(dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                .map_err(step("inspect", &path))?;
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                if st.st_dev != fence.device {
                    return Err(RemovalError::MountCrossing { path });
                }
                if depth + 1 == MAX_DEPTH {
                    hoist(top, dir, &name, &path, walk)?;
                    continue;
                }
                let child = rustix::fs::openat(dir, name.as_os_str(), dir_flags(), Mode::empty())
                    .map_err(step("open", &path))?;
                if fence.mount.is_some() && mount_id(&child) != fence.mount {
                    return Err(RemovalError::MountCrossing { path });
                }
                remove_children(top, &child, &path, fence, depth + 1, walk)?;
                drop(child);
                rustix::fs::unlinkat(dir, name.as_os_str(), AtFlags::REMOVEDIR)
                    .map_err(step("remove the directory", &path))?;
            } else {
                rustix::fs::unlinkat(dir, name.as_os_str(), AtFlags::empty())
                    .map_err(step("remove", &path))?;
            }
            walk.removed += 1;
            if walk.removed == 1 {
                crash_point!(State, "discard", "after-first", "RemoveDiscarded");
            }
        }
    }
}

/// Moves the directory `name` of `dir` up into the emptied directory `top`
/// under a name of its own.
fn hoist(
    top: &OwnedFd,
    dir: &OwnedFd,
    name: &OsStr,
    path: &Path,
    walk: &mut Walk,
) -> Result<(), RemovalError> {
    for _ in 0..BATCH {
        walk.hoisted += 1;
        let target = format!("deep-{}-{}", std::process::id(), walk.hoisted);
        match rustix::fs::renameat_with(
            dir,
            name,
            top,
            target.as_str(),
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::EXIST) => {}
            Err(e) => {
                return Err(RemovalError::Remove {
                    step: "move up",
                    path: path.to_owned(),
                    source: e.into(),
                })
            }
        }
    }
    Err(RemovalError::Remove {
        step: "move up",
        path: path.to_owned(),
        source: io::ErrorKind::AlreadyExists.into(),
    })
}

/// A copy of `fd` without close-on-exec, so a child spawned while it is
/// open inherits it; closed right after the spawn.
pub fn inheritable(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // dup(2) never sets FD_CLOEXEC on the new descriptor.
    Ok(rustix::io::dup(fd)?)
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// Set in the copy of this test that runs in its own mount namespace.
    const INSIDE: &str = "LAZARET_TEST_REMOVAL_MOUNT_NAMESPACE";
    const NAME: &str = "tree_removal::tests::a_bind_mount_of_the_same_file_system_is_not_crossed";

    /// A bind mount inside the tree, of a directory on the same file system,
    /// has the tree's device but another mount: the removal stops at it and
    /// nothing beneath it (the bound directory's file) is removed. The test
    /// runs itself again in a user and mount namespace of its own (as root or
    /// not), so the mount never reaches the host's mount table.
    #[test]
    fn a_bind_mount_of_the_same_file_system_is_not_crossed(
    ) -> Result<(), Box<dyn std::error::Error>> {
        if std::env::var_os(INSIDE).is_none() {
            let out = std::process::Command::new("unshare")
                .args([
                    "--user",
                    "--map-root-user",
                    "--mount",
                    "--propagation",
                    "private",
                ])
                .arg(std::env::current_exe()?)
                .args(["--exact", NAME, "--nocapture", "--test-threads", "1"])
                .env(INSIDE, "1")
                .output()?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "{}\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            return Ok(());
        }
        let base = tempfile::tempdir()?;
        let tree = base.path().join("tree");
        let point = tree.join("a/bound");
        let outside = base.path().join("outside");
        std::fs::create_dir_all(&point)?;
        std::fs::create_dir_all(&outside)?;
        std::fs::write(outside.join("keep"), b"not the tree's")?;
        std::fs::write(tree.join("a/loose"), b"the tree's")?;
        rustix::mount::mount_bind(&outside, &point)?;
        let st = std::fs::metadata(&tree)?;
        assert_eq!(
            std::fs::metadata(&point)?.dev(),
            st.dev(),
            "not the same file system"
        );
        let result = remove_contents(&tree, st.dev(), st.ino());
        rustix::mount::unmount(&point, rustix::mount::UnmountFlags::empty())?;
        match result {
            Err(RemovalError::MountCrossing { path }) => assert_eq!(path, point),
            other => panic!(
                "expected a mount crossing at {}: {other:?}",
                point.display()
            ),
        }
        assert!(outside.join("keep").is_file(), "removed through the mount");
        Ok(())
    }
}
