//! The product's mount destinations beneath a State Anchor (spec 3.2: the
//! protected resolver configuration `/etc/resolv.conf` and the network
//! directory `/etc/lazaret` are exact transient mounts that may replace a
//! child of a persistent `/etc`).
//!
//! The agent owns the anchor's upper, so at the next launch such a
//! destination may be a symlink (systemd-resolved makes `resolv.conf` one),
//! a directory where a file belongs, or missing. runsc follows a symlinked
//! destination and creates a missing one inside the shared prepared lower
//! (docs/launch-notes.md), which would let one Domain add entries to an
//! artifact others share and move a protected mount. So before runsc
//! starts, each destination is put back as the entry it must be: the
//! directories leading to it must be directories (a symlink there refuses
//! the launch), and the last component is replaced when it has the wrong
//! type. Everything is descriptor-relative from the anchor's mount point
//! and nothing is followed.
//!
//! A developer volume's mount point (schemas "volume": always strictly
//! beneath a persistent path, so inside an anchor) is made the same way,
//! except that what the agent left there is never removed: an entry of the
//! wrong kind refuses the launch, naming it.
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};

/// What a destination must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    File,
    Directory,
}

/// Errors of restoring a destination; one variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum DestinationError {
    #[error("cannot open the State Anchor mount point {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("{path} in the State Anchor leads to a protected mount destination but is not a directory (a symlink or file was put there); remove it from the anchor (its upper) and launch again")]
    NotDirectory { path: PathBuf },
    #[error("{path} in the State Anchor is a symbolic link or a file on the way to a volume's mount point; nothing was removed: launch without that volume, move the entry away inside the sandbox, and launch again")]
    VolumePathBlocked { path: PathBuf },
    #[error("{path} in the State Anchor is {found} where a volume of kind {wanted} is mounted; nothing was removed: launch without that volume, move the entry away inside the sandbox, and launch again")]
    Occupied {
        path: PathBuf,
        found: &'static str,
        wanted: &'static str,
    },
    #[error("cannot {step} {path} in the State Anchor: {source}")]
    Step {
        step: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// What to do with an entry of the wrong kind at the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OnMismatch {
    /// The product owns the destination: the entry goes.
    Replace,
    /// The agent's entry stays and the launch is refused.
    Refuse,
}

fn dir_flags() -> OFlags {
    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Puts each destination (relative to the anchor's `mountpoint`) back as
/// the kind it must be; returns the ones that had to be replaced or made.
pub fn restore_destinations(
    mountpoint: &Path,
    destinations: &[(PathBuf, Destination)],
) -> Result<Vec<PathBuf>, DestinationError> {
    let root = rustix::fs::openat(CWD, mountpoint, dir_flags(), Mode::empty()).map_err(|e| {
        DestinationError::Open {
            path: mountpoint.to_owned(),
            source: e.into(),
        }
    })?;
    let mut restored = Vec::new();
    for (relative, kind) in destinations {
        if restore_one(&root, mountpoint, relative, *kind, OnMismatch::Replace)? {
            restored.push(relative.clone());
        }
    }
    Ok(restored)
}

/// Makes a volume's mount point `relative` (to the anchor's `mountpoint`)
/// when it is missing; returns whether it was made. An existing entry of
/// the right kind is used as it is (the volume covers it).
pub fn make_volume_mount_point(
    mountpoint: &Path,
    relative: &Path,
    kind: Destination,
) -> Result<bool, DestinationError> {
    let root = rustix::fs::openat(CWD, mountpoint, dir_flags(), Mode::empty()).map_err(|e| {
        DestinationError::Open {
            path: mountpoint.to_owned(),
            source: e.into(),
        }
    })?;
    restore_one(&root, mountpoint, relative, kind, OnMismatch::Refuse)
}

fn describe(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        FileType::Unknown => "an entry of unknown type",
    }
}

fn restore_one(
    root: &OwnedFd,
    mountpoint: &Path,
    relative: &Path,
    kind: Destination,
    on_mismatch: OnMismatch,
) -> Result<bool, DestinationError> {
    let names: Vec<&std::ffi::OsStr> = relative
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((last, parents)) = names.split_last() else {
        return Ok(false);
    };
    let step = |step: &'static str, at: PathBuf| {
        move |e: rustix::io::Errno| DestinationError::Step {
            step,
            path: at,
            source: e.into(),
        }
    };
    let mut dir = rustix::fs::openat(root, ".", dir_flags(), Mode::empty())
        .map_err(step("open", mountpoint.to_owned()))?;
    let mut at = mountpoint.to_owned();
    for name in parents {
        at.push(name);
        dir = match rustix::fs::openat(&dir, *name, dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => {
                rustix::fs::mkdirat(&dir, *name, Mode::from_raw_mode(0o755))
                    .map_err(step("create the directory", at.clone()))?;
                rustix::fs::openat(&dir, *name, dir_flags(), Mode::empty())
                    .map_err(step("open", at.clone()))?
            }
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                return Err(match on_mismatch {
                    OnMismatch::Replace => DestinationError::NotDirectory { path: at },
                    OnMismatch::Refuse => DestinationError::VolumePathBlocked { path: at },
                })
            }
            Err(e) => return Err(step("open", at)(e)),
        };
    }
    at.push(last);
    let found = match rustix::fs::statat(&dir, *last, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Some(FileType::from_raw_mode(st.st_mode)),
        Err(rustix::io::Errno::NOENT) => None,
        Err(e) => return Err(step("inspect", at)(e)),
    };
    let wanted = match kind {
        Destination::File => FileType::RegularFile,
        Destination::Directory => FileType::Directory,
    };
    match found {
        Some(t) if t == wanted => return Ok(false),
        Some(t) if on_mismatch == OnMismatch::Refuse => {
            return Err(DestinationError::Occupied {
                path: at,
                found: describe(t),
                wanted: match kind {
                    Destination::File => "file",
                    Destination::Directory => "directory",
                },
            })
        }
        Some(FileType::Directory) => rustix::fs::unlinkat(&dir, *last, AtFlags::REMOVEDIR)
            .map_err(step("remove the directory", at.clone()))?,
        Some(_) => rustix::fs::unlinkat(&dir, *last, AtFlags::empty())
            .map_err(step("remove", at.clone()))?,
        None => {}
    }
    match kind {
        Destination::File => {
            rustix::fs::openat(
                &dir,
                *last,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )
            .map(drop)
            .map_err(step("create the file", at))?;
        }
        Destination::Directory => {
            rustix::fs::mkdirat(&dir, *last, Mode::from_raw_mode(0o755))
                .map_err(step("create the directory", at))?;
        }
    }
    Ok(true)
}

/// The product destinations strictly beneath the persistent path `path`,
/// relative to it: the bundle's fixed file and directory mount points.
pub fn beneath(path: &str) -> Vec<(PathBuf, Destination)> {
    let anchor = Path::new(path);
    let files = lazaret_runtime::bundle::MOUNT_FILES
        .iter()
        .map(|d| (*d, Destination::File));
    let dirs = lazaret_runtime::bundle::MOUNT_POINTS
        .iter()
        .map(|d| (*d, Destination::Directory));
    files
        .chain(dirs)
        .filter_map(|(d, kind)| {
            let rel = Path::new(d).strip_prefix(anchor).ok()?;
            (!rel.as_os_str().is_empty()).then(|| (rel.to_owned(), kind))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;

    #[test]
    fn the_destinations_beneath_etc_are_the_resolver_file_and_network_directory() {
        assert_eq!(
            beneath("/etc"),
            [
                (PathBuf::from("resolv.conf"), Destination::File),
                (PathBuf::from("lazaret"), Destination::Directory),
            ]
        );
        assert!(beneath("/usr").is_empty());
        assert!(beneath("/et").is_empty());
    }

    #[test]
    fn planted_symlinks_and_wrong_kinds_are_replaced_without_being_followed() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        // resolv.conf a symlink out of the anchor, lazaret a file.
        std::os::unix::fs::symlink(outside.join("resolv"), etc.join("resolv.conf")).unwrap();
        std::fs::write(etc.join("lazaret"), b"agent").unwrap();
        let restored = restore_destinations(&etc, &beneath("/etc")).unwrap();
        assert_eq!(restored.len(), 2);
        let resolv = std::fs::symlink_metadata(etc.join("resolv.conf")).unwrap();
        assert!(resolv.file_type().is_file());
        assert!(std::fs::symlink_metadata(etc.join("lazaret"))
            .unwrap()
            .is_dir());
        // Nothing was created where the symlink pointed.
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        // Right kinds stay as they are.
        assert!(restore_destinations(&etc, &beneath("/etc"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn missing_destinations_are_made_and_a_symlinked_parent_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let anchor = dir.path().join("anchor");
        std::fs::create_dir_all(&anchor).unwrap();
        let wanted = [(PathBuf::from("a/b/file"), Destination::File)];
        assert_eq!(restore_destinations(&anchor, &wanted).unwrap().len(), 1);
        assert!(anchor.join("a/b/file").is_file());
        let other = dir.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink(&other, anchor.join("x")).unwrap();
        let err = restore_destinations(&anchor, &[(PathBuf::from("x/file"), Destination::File)])
            .unwrap_err();
        assert!(
            matches!(err, DestinationError::NotDirectory { .. }),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(&other).unwrap().count(), 0);
    }

    #[test]
    fn a_volume_mount_point_is_made_but_the_agents_entry_is_never_removed() {
        let dir = tempfile::tempdir().unwrap();
        let anchor = dir.path().join("root");
        std::fs::create_dir_all(anchor.join("kept")).unwrap();
        std::fs::write(anchor.join("kept/notes"), b"agent").unwrap();
        std::fs::write(anchor.join("file"), b"agent").unwrap();
        // Missing: made, parents included.
        let data = Path::new("data/set");
        assert!(make_volume_mount_point(&anchor, data, Destination::Directory).unwrap());
        assert!(anchor.join("data/set").is_dir());
        assert!(!make_volume_mount_point(&anchor, data, Destination::Directory).unwrap());
        let token = Path::new("data/token");
        assert!(make_volume_mount_point(&anchor, token, Destination::File).unwrap());
        assert!(anchor.join("data/token").is_file());
        // The right kind already there is used as it is.
        assert!(
            !make_volume_mount_point(&anchor, Path::new("kept"), Destination::Directory).unwrap()
        );
        assert_eq!(std::fs::read(anchor.join("kept/notes")).unwrap(), b"agent");
        // The wrong kind refuses, and both entries stay.
        for (at, kind) in [
            ("kept", Destination::File),
            ("file", Destination::Directory),
        ] {
            let err = make_volume_mount_point(&anchor, Path::new(at), kind).unwrap_err();
            assert!(matches!(err, DestinationError::Occupied { .. }), "{err}");
        }
        assert_eq!(std::fs::read(anchor.join("kept/notes")).unwrap(), b"agent");
        assert_eq!(std::fs::read(anchor.join("file")).unwrap(), b"agent");
        // A symlink at the mount point refuses without being followed.
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, anchor.join("link")).unwrap();
        let err = make_volume_mount_point(&anchor, Path::new("link"), Destination::Directory)
            .unwrap_err();
        assert!(
            matches!(
                err,
                DestinationError::Occupied {
                    found: "a symbolic link",
                    ..
                }
            ),
            "{err}"
        );
        // A symlink on the way to one refuses with the volume's own advice.
        let err = make_volume_mount_point(&anchor, Path::new("link/data"), Destination::Directory)
            .unwrap_err();
        assert!(
            matches!(err, DestinationError::VolumePathBlocked { .. }),
            "{err}"
        );
        assert!(std::fs::symlink_metadata(anchor.join("link"))
            .unwrap()
            .is_symlink());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }
}
