//! What one State Anchor's upper changed against its lower (spec 3.9,
//! FR-11, DX-6): each path the agent added, changed, deleted or replaced,
//! with its kind and size, never its contents.
//!
//! The walk reads the upper descriptor-relatively, never following a
//! symlink, and looks each entry up in the lower (the prepared lower's
//! subtree at the persistent path, opened with `RESOLVE_IN_ROOT` so the
//! image's own symlinks resolve inside the image):
//! - a whiteout (a character device 0:0) is a deleted image path;
//! - a directory the lower lacks is added, and everything below it too;
//!   an opaque directory (`user.overlay.opaque`, as the anchors are
//!   mounted with `userxattr`) replaced the image's directory, and
//!   everything below it is added; any other directory is only walked;
//! - any other entry is changed when the lower has that path, else added.
//!
//! Without a lower to compare with (none recorded), entries are `written`.
//! The walk is bounded in depth and in entries listed; a directory the
//! developer may not read (another sandbox user's, private) is named as
//! unread.
use std::ffi::{CStr, OsStr};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, CWD};

/// The most entries one anchor lists.
pub const MAX_LISTED: usize = 100_000;
/// The deepest directory walked.
pub const MAX_DEPTH: usize = 256;

/// How a path differs from the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Added,
    Changed,
    Deleted,
    /// An opaque directory: the image's directory is hidden.
    Replaced,
    /// Added or changed: there is no lower to compare with.
    Written,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Changed => "changed",
            Self::Deleted => "deleted",
            Self::Replaced => "replaced",
            Self::Written => "written",
        }
    }
}

/// What the entry is (for a deleted path: what the image had).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Directory,
    Symlink,
    Other,
}

impl EntryKind {
    fn of(t: FileType) -> Self {
        match t {
            FileType::RegularFile => Self::File,
            FileType::Directory => Self::Directory,
            FileType::Symlink => Self::Symlink,
            _ => Self::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::File => "file",
            Self::Directory => "directory",
            Self::Symlink => "symlink",
            Self::Other => "other",
        }
    }
}

/// One path that differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangedPath {
    /// The sandbox path (`/usr/local/bin/tool`), lossily UTF-8.
    pub path: String,
    pub change: Change,
    pub kind: EntryKind,
    /// A regular file's size (the image's, for a deleted one); else 0.
    pub bytes: u64,
}

/// The differences of one anchor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnchorChanges {
    pub entries: Vec<ChangedPath>,
    /// Directories of the upper the developer may not read.
    pub unread: Vec<String>,
    /// False past [`MAX_LISTED`] entries or [`MAX_DEPTH`] directories.
    pub complete: bool,
}

/// Errors of the walk; one variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    #[error("cannot open the State Anchor upper {path}: {source}")]
    OpenUpper { path: PathBuf, source: io::Error },
    #[error("cannot read {path} in the State Anchor upper: {source}")]
    Read { path: String, source: io::Error },
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens the lower of the anchor at `anchor_path` inside the prepared
/// lower `rootfs`; `None` when the image has no directory there.
pub fn open_lower(rootfs: &Path, anchor_path: &str) -> Option<OwnedFd> {
    let root = rustix::fs::openat(CWD, rootfs, dir_flags(), Mode::empty()).ok()?;
    let rel = anchor_path.trim_start_matches('/');
    rustix::fs::openat2(
        &root,
        rel,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
    .ok()
}

/// Whether the upper directory `dir` is opaque.
fn opaque(dir: &OwnedFd) -> bool {
    let mut value = [0u8; 2];
    [c"user.overlay.opaque", c"trusted.overlay.opaque"]
        .iter()
        .any(|name: &&CStr| {
            matches!(rustix::fs::fgetxattr(dir, *name, &mut value), Ok(1) if value[0] == b'y')
        })
}

/// Walks the upper of the anchor at `anchor_path` against `lower`.
pub fn anchor_changes(
    anchor_path: &str,
    upper: &Path,
    lower: Option<OwnedFd>,
) -> Result<AnchorChanges, ChangesError> {
    let top = rustix::fs::openat(CWD, upper, dir_flags(), Mode::empty()).map_err(|e| {
        ChangesError::OpenUpper {
            path: upper.to_owned(),
            source: e.into(),
        }
    })?;
    let mut walk = Walk {
        compared: lower.is_some(),
        out: AnchorChanges {
            complete: true,
            ..AnchorChanges::default()
        },
    };
    walk.directory(&top, lower.as_ref(), anchor_path, 0, false)?;
    Ok(walk.out)
}

/// One walk: whether there is a lower, and what was found.
struct Walk {
    compared: bool,
    out: AnchorChanges,
}

fn size(st: &rustix::fs::Stat) -> u64 {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => u64::try_from(st.st_size).unwrap_or(0),
        _ => 0,
    }
}

impl Walk {
    /// The entries of the upper directory `dir` (sandbox path `at`),
    /// against its lower counterpart; `all_new` when nothing below can be
    /// in the image. One descriptor per level of the current path (two
    /// with the lower), whatever the tree's width. Returns false once a
    /// bound stopped the walk.
    fn directory(
        &mut self,
        dir: &OwnedFd,
        lower: Option<&OwnedFd>,
        at: &str,
        depth: usize,
        all_new: bool,
    ) -> Result<bool, ChangesError> {
        let read = |e: rustix::io::Errno| ChangesError::Read {
            path: at.to_owned(),
            source: e.into(),
        };
        let mut names: Vec<Vec<u8>> = Vec::new();
        for entry in rustix::fs::Dir::read_from(dir.as_fd()).map_err(read)? {
            let entry = entry.map_err(read)?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(name.to_vec());
            }
        }
        names.sort();
        let new_or_written = if self.compared {
            Change::Added
        } else {
            Change::Written
        };
        for name in names {
            if self.out.entries.len() >= MAX_LISTED {
                self.out.complete = false;
                return Ok(false);
            }
            let name = OsStr::from_bytes(&name);
            let path = format!("{}/{}", at.trim_end_matches('/'), name.to_string_lossy());
            let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Removed meanwhile (a running sandbox).
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(read(e)),
            };
            let kind = FileType::from_raw_mode(st.st_mode);
            let in_lower = match (lower, all_new) {
                (Some(l), false) => rustix::fs::statat(l, name, AtFlags::SYMLINK_NOFOLLOW).ok(),
                _ => None,
            };
            if kind == FileType::CharacterDevice && st.st_rdev == 0 {
                let (kind, bytes) = in_lower.as_ref().map_or((EntryKind::Other, 0), |l| {
                    (EntryKind::of(FileType::from_raw_mode(l.st_mode)), size(l))
                });
                self.out.entries.push(ChangedPath {
                    path,
                    change: Change::Deleted,
                    kind,
                    bytes,
                });
                continue;
            }
            if kind != FileType::Directory {
                let change = if in_lower.is_some() {
                    Change::Changed
                } else {
                    new_or_written
                };
                self.out.entries.push(ChangedPath {
                    path,
                    change,
                    kind: EntryKind::of(kind),
                    bytes: size(&st),
                });
                continue;
            }
            let child = match rustix::fs::openat(dir, name, dir_flags(), Mode::empty()) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::ACCESS) => {
                    self.out.unread.push(path);
                    continue;
                }
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(read(e)),
            };
            let lower_is_dir = in_lower
                .as_ref()
                .is_some_and(|l| FileType::from_raw_mode(l.st_mode) == FileType::Directory);
            let change = if !self.compared && !all_new {
                None
            } else if all_new || !lower_is_dir {
                Some(new_or_written)
            } else if opaque(&child) {
                Some(Change::Replaced)
            } else {
                None
            };
            if let Some(change) = change {
                self.out.entries.push(ChangedPath {
                    path: path.clone(),
                    change,
                    kind: EntryKind::Directory,
                    bytes: 0,
                });
            }
            if depth + 1 >= MAX_DEPTH {
                self.out.complete = false;
                continue;
            }
            let child_lower = match (lower, change) {
                (Some(l), None) => rustix::fs::openat(l, name, dir_flags(), Mode::empty()).ok(),
                _ => None,
            };
            let below_new = all_new || change.is_some();
            if !self.directory(&child, child_lower.as_ref(), &path, depth + 1, below_new)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;

    fn whiteout(at: &Path) {
        rustix::fs::mknodat(
            CWD,
            at,
            FileType::CharacterDevice,
            Mode::from_raw_mode(0o600),
            rustix::fs::makedev(0, 0),
        )
        .unwrap();
    }

    /// An image `/usr` and an upper that adds, changes, deletes and
    /// replaces; a symlink in the upper is listed, never followed.
    #[test]
    fn each_kind_of_change_is_named_with_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let rootfs = dir.path().join("rootfs");
        let lower = rootfs.join("usr");
        std::fs::create_dir_all(lower.join("bin")).unwrap();
        std::fs::create_dir_all(lower.join("share/doc/old")).unwrap();
        std::fs::write(lower.join("bin/sh"), b"image-shell").unwrap();
        std::fs::write(lower.join("bin/gone"), b"12345678").unwrap();
        let upper = dir.path().join("upper/usr");
        std::fs::create_dir_all(upper.join("bin")).unwrap();
        std::fs::create_dir_all(upper.join("local/bin")).unwrap();
        std::fs::create_dir_all(upper.join("share/doc")).unwrap();
        std::fs::write(upper.join("bin/sh"), b"agent").unwrap();
        whiteout(&upper.join("bin/gone"));
        std::fs::write(upper.join("local/bin/tool"), b"0123").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", upper.join("bin/link")).unwrap();
        // Whiteouts need CAP_MKNOD, which a test run may lack: then the
        // deletion is not part of what this run checks.
        let deleted = upper.join("bin/gone").symlink_metadata().is_ok();
        let lower_fd = open_lower(&rootfs, "/usr");
        assert!(lower_fd.is_some());
        let found = anchor_changes("/usr", &upper, lower_fd).unwrap();
        let mut got: Vec<(String, &str, &str, u64)> = found
            .entries
            .iter()
            .map(|e| (e.path.clone(), e.change.as_str(), e.kind.as_str(), e.bytes))
            .collect();
        got.sort();
        let mut want = vec![
            ("/usr/bin/link".to_owned(), "added", "symlink", 0),
            ("/usr/bin/sh".to_owned(), "changed", "file", 5),
            ("/usr/local".to_owned(), "added", "directory", 0),
            ("/usr/local/bin".to_owned(), "added", "directory", 0),
            ("/usr/local/bin/tool".to_owned(), "added", "file", 4),
        ];
        if deleted {
            want.push(("/usr/bin/gone".to_owned(), "deleted", "file", 8));
        }
        want.sort();
        assert_eq!(got, want);
        assert!(found.complete && found.unread.is_empty());
        // Without a lower, nothing can be told apart: written.
        let blind = anchor_changes("/usr", &upper, None).unwrap();
        assert!(blind
            .entries
            .iter()
            .all(|e| matches!(e.change, Change::Written | Change::Deleted)));
        assert!(blind
            .entries
            .iter()
            .any(|e| e.path == "/usr/local/bin/tool"));
    }

    /// An opaque directory replaced the image's: it is named, and what it
    /// holds is added even where the image had the same names.
    #[test]
    fn an_opaque_directory_is_replaced_and_its_content_added() {
        let dir = tempfile::tempdir().unwrap();
        let rootfs = dir.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("etc/apt")).unwrap();
        std::fs::write(rootfs.join("etc/apt/sources.list"), b"image").unwrap();
        let upper = dir.path().join("upper/etc");
        std::fs::create_dir_all(upper.join("apt")).unwrap();
        std::fs::write(upper.join("apt/sources.list"), b"mine").unwrap();
        let apt = rustix::fs::openat(CWD, upper.join("apt"), dir_flags(), Mode::empty()).unwrap();
        rustix::fs::fsetxattr(
            &apt,
            c"user.overlay.opaque",
            b"y",
            rustix::fs::XattrFlags::empty(),
        )
        .unwrap();
        let found = anchor_changes("/etc", &upper, open_lower(&rootfs, "/etc")).unwrap();
        let got: Vec<(&str, Change)> = found
            .entries
            .iter()
            .map(|e| (e.path.as_str(), e.change))
            .collect();
        assert_eq!(
            got,
            [
                ("/etc/apt", Change::Replaced),
                ("/etc/apt/sources.list", Change::Added)
            ]
        );
    }

    /// The lower is looked up inside the image: an image symlink pointing
    /// at an absolute path resolves within the prepared lower.
    #[test]
    fn the_lower_is_resolved_inside_the_image() {
        let dir = tempfile::tempdir().unwrap();
        let rootfs = dir.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("real/opt")).unwrap();
        std::os::unix::fs::symlink("/real/opt", rootfs.join("opt")).unwrap();
        std::fs::write(rootfs.join("real/opt/x"), b"1").unwrap();
        let lower = open_lower(&rootfs, "/opt").unwrap();
        assert!(rustix::fs::statat(&lower, "x", AtFlags::empty()).is_ok());
        assert!(open_lower(&rootfs, "/missing").is_none());
    }
}
