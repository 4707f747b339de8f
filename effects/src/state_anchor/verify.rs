//! Structural verification of a Domain's State Anchors (spec 3.9, FR-11):
//! what a later mount or reset relies on, checked without changing
//! anything. The caller holds the Domain's lifecycle lock and has found the
//! Domain inactive (the CLI's `lazaret state verify`), so nothing writes
//! meanwhile.
//!
//! Checked: the `anchors`, `upper` and `work` directories are directories
//! (never symlinks) of the developer with mode 0700; each upper is a
//! directory whose name decodes to a persistent path; no anchor directory
//! is a mount point or has one beneath it in the caller's mount table (the
//! anchor mounts live only in a stopped RS's namespace, whose absence the
//! caller's inactive hold already established); no interrupted reset left
//! discarded state; the recorded lower is well formed and still exists; and
//! inside the uppers there is no device node but whiteouts (character
//! device 0:0). The walk is descriptor-relative, never follows a symlink
//! and is bounded.
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};

use super::reset::DISCARD_DIR;
use super::usage::anchor_path;
use super::LOWER_RECORD;

/// The most entries one verification looks at.
pub const MAX_ENTRIES: u64 = 10_000_000;
/// The deepest directory walked.
pub const MAX_DEPTH: usize = 256;

/// One structural problem.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Finding {
    #[error("{path} is not a directory (expected the Domain's own directory, never a symlink)")]
    NotDirectory { path: PathBuf },
    #[error("{path} has mode {mode:04o}; expected 0700")]
    Mode { path: PathBuf, mode: u32 },
    #[error("{path} is owned by uid {uid}; expected the developer (uid {expected})")]
    Owner {
        path: PathBuf,
        uid: u32,
        expected: u32,
    },
    #[error("{path} is no State Anchor upper (its name decodes to no persistent path)")]
    UnknownUpper { path: PathBuf },
    #[error("{path} is mounted on (or has a mount beneath it) while the Domain is inactive")]
    Mounted { path: PathBuf },
    #[error("{path} holds {entries} entries an interrupted reset left; `lazaret state reset` removes them")]
    Discarded { path: PathBuf, entries: u64 },
    #[error("{path} does not name a prepared lower (expected 64 hex digits)")]
    LowerRecord { path: PathBuf },
    #[error("the recorded prepared lower {path} no longer exists; the next launch prepares the image again")]
    LowerMissing { path: PathBuf },
    #[error(
        "{path} is a device node in an upper (only whiteouts, character device 0:0, belong there)"
    )]
    Device { path: PathBuf },
    #[error("{path} could not be read ({problem}); what is beneath it was not verified")]
    Unread { path: PathBuf, problem: String },
    #[error("more than {MAX_ENTRIES} entries or {MAX_DEPTH} levels under {path}; verification stopped there")]
    TooLarge { path: PathBuf },
}

/// What was looked at, and what was wrong.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verification {
    /// The persistent paths whose uppers were walked.
    pub anchors: Vec<String>,
    pub entries: u64,
    pub findings: Vec<Finding>,
}

/// Errors that stop verification before it could judge.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot read the mount table {path}: {source}")]
    Mounts { path: PathBuf, source: io::Error },
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Mount points at or beneath `dir`, from `/proc/self/mountinfo` text
/// (field 5 is the mount point, with space, tab, newline and backslash as
/// three-digit octal escapes).
pub fn mounts_beneath(mountinfo: &str, dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let unescape = |field: &str| {
        let bytes = field.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let octal = bytes
                .get(i + 1..i + 4)
                .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
            match octal {
                Some(d) => {
                    out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                    i += 4;
                }
                None => {
                    out.push(bytes[i]);
                    i += 1;
                }
            }
        }
        PathBuf::from(std::ffi::OsString::from_vec(out))
    };
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape)
        .filter(|m| m.starts_with(dir))
        .collect()
}

/// Checks one of the Domain's fixed directories; returns it opened when
/// it is a directory.
fn fixed_dir(
    parent: Option<&OwnedFd>,
    path: &Path,
    uid: u32,
    findings: &mut Vec<Finding>,
) -> Option<OwnedFd> {
    let name = path.file_name()?;
    let opened = match parent {
        Some(p) => rustix::fs::openat(p, name, dir_flags(), Mode::empty()),
        None => rustix::fs::openat(CWD, path, dir_flags(), Mode::empty()),
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return None,
        Err(rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => {
            findings.push(Finding::NotDirectory {
                path: path.to_owned(),
            });
            return None;
        }
        Err(e) => {
            findings.push(Finding::Unread {
                path: path.to_owned(),
                problem: io::Error::from(e).to_string(),
            });
            return None;
        }
    };
    if let Ok(st) = rustix::fs::fstat(&fd) {
        if st.st_mode & 0o7777 != 0o700 {
            findings.push(Finding::Mode {
                path: path.to_owned(),
                mode: st.st_mode & 0o7777,
            });
        }
        if st.st_uid != uid {
            findings.push(Finding::Owner {
                path: path.to_owned(),
                uid: st.st_uid,
                expected: uid,
            });
        }
    }
    Some(fd)
}

fn names(dir: &OwnedFd) -> io::Result<Vec<std::ffi::OsString>> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir.as_fd())? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            out.push(std::ffi::OsStr::from_bytes(name).to_owned());
        }
    }
    out.sort();
    Ok(out)
}

/// Walks one upper for device nodes; bounded by `budget`, with one
/// descriptor per level of the current path whatever the tree's width.
/// Returns false once a bound stopped it.
fn walk_upper(
    dir: &OwnedFd,
    path: &Path,
    depth: usize,
    budget: &mut u64,
    v: &mut Verification,
) -> bool {
    let listed = match names(dir) {
        Ok(n) => n,
        Err(e) => {
            v.findings.push(Finding::Unread {
                path: path.to_owned(),
                problem: e.to_string(),
            });
            return true;
        }
    };
    for name in listed {
        let child = path.join(&name);
        if *budget == 0 || depth + 1 >= MAX_DEPTH {
            v.findings.push(Finding::TooLarge {
                path: path.to_owned(),
            });
            return false;
        }
        *budget -= 1;
        v.entries += 1;
        let Ok(st) = rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::CharacterDevice if st.st_rdev == 0 => {}
            FileType::CharacterDevice | FileType::BlockDevice => {
                v.findings.push(Finding::Device { path: child });
            }
            FileType::Directory => match rustix::fs::openat(dir, &name, dir_flags(), Mode::empty())
            {
                Ok(fd) => {
                    if !walk_upper(&fd, &child, depth + 1, budget, v) {
                        return false;
                    }
                }
                Err(e) => v.findings.push(Finding::Unread {
                    path: child,
                    problem: io::Error::from(e).to_string(),
                }),
            },
            _ => {}
        }
    }
    true
}

/// Verifies the anchors of the Domain at `storage_domain_root` (the
/// Storage Root is where recorded lowers live); `uid` is the developer's,
/// `mountinfo` this process's mount table.
pub fn verify_anchors(
    storage_root: &Path,
    storage_domain_root: &Path,
    uid: u32,
    mountinfo: &str,
) -> Verification {
    let mut v = Verification::default();
    let anchors_path = storage_domain_root.join("anchors");
    for m in mounts_beneath(mountinfo, &anchors_path) {
        v.findings.push(Finding::Mounted { path: m });
    }
    let Some(anchors) = fixed_dir(None, &anchors_path, uid, &mut v.findings) else {
        return v;
    };
    let work = fixed_dir(
        Some(&anchors),
        &anchors_path.join("work"),
        uid,
        &mut v.findings,
    );
    drop(work);
    let discard = anchors_path.join(DISCARD_DIR);
    if let Ok(fd) = rustix::fs::openat(&anchors, DISCARD_DIR, dir_flags(), Mode::empty()) {
        let entries = names(&fd).map_or(0, |n| n.len() as u64);
        if entries > 0 {
            v.findings.push(Finding::Discarded {
                path: discard,
                entries,
            });
        }
    }
    let record = anchors_path.join(LOWER_RECORD);
    if let Ok(text) = std::fs::read_to_string(&record) {
        match super::recorded_lower(storage_root, storage_domain_root) {
            Some(rootfs) if !rootfs.is_dir() => {
                v.findings.push(Finding::LowerMissing { path: rootfs });
            }
            Some(_) => {}
            None if text.trim().is_empty() => {}
            None => v.findings.push(Finding::LowerRecord { path: record }),
        }
    }
    let uppers_path = anchors_path.join("upper");
    let Some(uppers) = fixed_dir(Some(&anchors), &uppers_path, uid, &mut v.findings) else {
        return v;
    };
    let listed = match names(&uppers) {
        Ok(n) => n,
        Err(e) => {
            v.findings.push(Finding::Unread {
                path: uppers_path,
                problem: e.to_string(),
            });
            return v;
        }
    };
    let mut budget = MAX_ENTRIES;
    for name in listed {
        let path = uppers_path.join(&name);
        let Some(anchor) = name.to_str().and_then(anchor_path) else {
            v.findings.push(Finding::UnknownUpper { path });
            continue;
        };
        match rustix::fs::openat(&uppers, &name, dir_flags(), Mode::empty()) {
            Ok(fd) => {
                v.anchors.push(anchor);
                if !walk_upper(&fd, &path, 0, &mut budget, &mut v) {
                    break;
                }
            }
            Err(rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => {
                v.findings.push(Finding::NotDirectory { path });
            }
            Err(e) => v.findings.push(Finding::Unread {
                path,
                problem: io::Error::from(e).to_string(),
            }),
        }
    }
    v
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn domain() -> (tempfile::TempDir, PathBuf, u32) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("domains/d");
        for d in ["anchors", "anchors/upper", "anchors/work"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
            std::fs::set_permissions(root.join(d), std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        std::fs::create_dir_all(root.join("anchors/upper/usr/local/bin")).unwrap();
        std::fs::write(root.join("anchors/upper/usr/local/bin/tool"), b"x").unwrap();
        let uid = rustix::process::getuid().as_raw();
        (dir, root, uid)
    }

    #[test]
    fn a_sound_domain_has_no_finding() {
        let (dir, root, uid) = domain();
        let v = verify_anchors(dir.path(), &root, uid, "");
        assert_eq!(v.findings, []);
        assert_eq!(v.anchors, ["/usr"]);
        assert_eq!(v.entries, 3);
    }

    #[test]
    fn each_structural_problem_is_found_and_nothing_changes() {
        let (dir, root, uid) = domain();
        let anchors = root.join("anchors");
        std::fs::set_permissions(anchors.join("work"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::fs::create_dir_all(anchors.join("upper/bad%2")).unwrap();
        std::os::unix::fs::symlink("/etc", anchors.join("upper/etc")).unwrap();
        std::fs::create_dir_all(anchors.join("discard/t-upper-usr")).unwrap();
        std::fs::write(anchors.join(LOWER_RECORD), "a".repeat(64)).unwrap();
        let mountinfo = format!(
            "36 25 0:32 / {} rw - overlay overlay rw\n",
            anchors.join("upper/usr").display()
        );
        let v = verify_anchors(dir.path(), &root, uid, &mountinfo);
        let kinds: Vec<&str> = v
            .findings
            .iter()
            .map(|f| match f {
                Finding::Mounted { .. } => "mounted",
                Finding::Mode { .. } => "mode",
                Finding::Discarded { .. } => "discarded",
                Finding::LowerMissing { .. } => "lower",
                Finding::UnknownUpper { .. } => "unknown",
                Finding::NotDirectory { .. } => "not-directory",
                other => panic!("unexpected {other}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "mounted",
                "mode",
                "discarded",
                "lower",
                "unknown",
                "not-directory"
            ]
        );
        // Verification changed nothing.
        assert!(anchors.join("discard/t-upper-usr").is_dir());
        assert!(anchors
            .join("upper/etc")
            .symlink_metadata()
            .unwrap()
            .is_symlink());
    }

    #[test]
    fn mount_points_are_unescaped_before_they_are_compared() {
        let info =
            "36 25 0:32 / /d/a\\040b\\134c rw - tmpfs t rw\n37 25 0:33 / /other rw - tmpfs t rw\n";
        assert_eq!(
            mounts_beneath(info, Path::new("/d")),
            [PathBuf::from("/d/a b\\c")]
        );
    }

    #[test]
    fn a_device_node_in_an_upper_is_found_but_a_whiteout_is_not() {
        let (dir, root, uid) = domain();
        let usr = root.join("anchors/upper/usr");
        for (name, dev) in [("whiteout", (0, 0)), ("null", (1, 3))] {
            rustix::fs::mknodat(
                CWD,
                usr.join(name),
                FileType::CharacterDevice,
                Mode::from_raw_mode(0o600),
                rustix::fs::makedev(dev.0, dev.1),
            )
            .unwrap();
        }
        let v = verify_anchors(dir.path(), &root, uid, "");
        assert_eq!(
            v.findings,
            [Finding::Device {
                path: usr.join("null")
            }]
        );
    }
}
