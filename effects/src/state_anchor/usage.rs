//! What a Domain's State Anchors hold (spec 3.9 inspection, FR-11, DX-6):
//! per persistent path, how many files, directories and symlinks its upper
//! holds, how many image paths it deletes (overlayfs whiteouts) and the
//! bytes of its files, never their contents or names. The walk is
//! descriptor-relative from the uppers directory, never follows a symlink
//! (a sandbox can put one anywhere in its upper), and is bounded.
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};

/// The most entries one walk counts (all anchors together); past it the
/// figures are marked incomplete.
pub const MAX_ENTRIES: u64 = 10_000_000;
/// The deepest directory level one walk enters.
pub const MAX_DEPTH: usize = 256;

/// One anchor's upper, counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnchorUsage {
    /// The persistent path (`/usr`), decoded from the upper's name.
    pub path: String,
    /// The upper directory on the host.
    pub upper: PathBuf,
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    /// Image paths the agent deleted (whiteouts).
    pub deleted: u64,
    /// The sizes of the regular files.
    pub bytes: u64,
    /// Directories the developer may not read (owned by another sandbox
    /// user with a private mode): their content is not counted.
    pub unreadable: u64,
    /// Whether every entry was counted (false past [`MAX_ENTRIES`] or
    /// [`MAX_DEPTH`]).
    pub complete: bool,
}

/// Errors of counting; one variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("cannot open the State Anchor uppers {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot read the State Anchor upper {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
}

/// The persistent path an upper's name stands for: the inverse of
/// [`super::anchor_name`]; `None` for a name it could not have made.
pub fn anchor_path(name: &str) -> Option<String> {
    let mut path = String::from("/");
    let mut rest = name;
    while let Some(at) = rest.find('%') {
        path.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("%2F") => path.push('/'),
            Some("%25") => path.push('%'),
            _ => return None,
        }
        rest = &rest[at + 3..];
    }
    path.push_str(rest);
    (path.len() > 1 && !name.contains('/')).then_some(path)
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Counts every anchor upper under `uppers` (the Domain's
/// `anchors/upper`); none when it does not exist.
pub fn anchors_usage(uppers: &Path) -> Result<Vec<AnchorUsage>, UsageError> {
    let root = match rustix::fs::openat(CWD, uppers, dir_flags(), Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(Vec::new()),
        Err(e) => {
            return Err(UsageError::Open {
                path: uppers.to_owned(),
                source: e.into(),
            })
        }
    };
    let read_err = |path: &Path| {
        let path = path.to_owned();
        move |e: rustix::io::Errno| UsageError::Read {
            path,
            source: e.into(),
        }
    };
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(&root).map_err(read_err(uppers))? {
        let entry = entry.map_err(read_err(uppers))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "." && name != ".." {
            names.push(name);
        }
    }
    names.sort();
    let mut budget = MAX_ENTRIES;
    let mut out = Vec::new();
    for name in names {
        let Some(path) = anchor_path(&name) else {
            continue;
        };
        let upper = uppers.join(&name);
        let fd = match rustix::fs::openat(&root, name.as_str(), dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            // Not a directory (or a symlink put there): not an upper.
            Err(rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => continue,
            // An upper whose root another sandbox user owns privately (its
            // image directory's owner and mode): named, not counted.
            Err(rustix::io::Errno::ACCESS) => {
                out.push(AnchorUsage {
                    path,
                    upper,
                    unreadable: 1,
                    complete: false,
                    ..AnchorUsage::default()
                });
                continue;
            }
            Err(e) => return Err(read_err(&upper)(e)),
        };
        let mut usage = AnchorUsage {
            path,
            upper: upper.clone(),
            complete: true,
            ..AnchorUsage::default()
        };
        count(&fd, 0, &mut usage, &mut budget).map_err(read_err(&upper))?;
        out.push(usage);
    }
    Ok(out)
}

/// Depth-first count below `dir`. One descriptor per level of the current
/// path (at most [`MAX_DEPTH`]), whatever the width of the tree: the
/// subdirectories of a level are kept by name and opened one at a time.
fn count(
    dir: &OwnedFd,
    depth: usize,
    usage: &mut AnchorUsage,
    budget: &mut u64,
) -> Result<(), rustix::io::Errno> {
    let mut subdirs: Vec<std::ffi::OsString> = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        if *budget == 0 {
            usage.complete = false;
            return Ok(());
        }
        *budget -= 1;
        let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Removed meanwhile (a running sandbox): not counted.
            Err(rustix::io::Errno::NOENT) => continue,
            // A directory readable but not searchable: its entries are
            // named but not looked at.
            Err(rustix::io::Errno::ACCESS) => {
                usage.unreadable += 1;
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => {
                usage.files += 1;
                usage.bytes = usage
                    .bytes
                    .saturating_add(u64::try_from(st.st_size).unwrap_or(0));
            }
            FileType::Symlink => usage.symlinks += 1,
            FileType::CharacterDevice if st.st_rdev == 0 => usage.deleted += 1,
            FileType::Directory => {
                usage.directories += 1;
                if depth + 1 >= MAX_DEPTH {
                    usage.complete = false;
                } else {
                    subdirs.push(std::ffi::OsStr::from_bytes(name.to_bytes()).to_owned());
                }
            }
            _ => usage.files += 1,
        }
    }
    for name in subdirs {
        match rustix::fs::openat(dir.as_fd(), &name, dir_flags(), Mode::empty()) {
            Ok(child) => count(&child, depth + 1, usage, budget)?,
            Err(rustix::io::Errno::ACCESS) => usage.unreadable += 1,
            // Removed, or replaced by something else, meanwhile.
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => {
            }
            Err(e) => return Err(e),
        }
        if *budget == 0 {
            usage.complete = false;
            return Ok(());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;
    use crate::state_anchor::anchor_name;

    #[test]
    fn names_decode_to_the_paths_they_were_made_from() {
        for path in ["/usr", "/usr/local", "/a%2Fb", "/x%y"] {
            assert_eq!(anchor_path(&anchor_name(path)).as_deref(), Some(path));
        }
        assert_eq!(anchor_path("bad%2"), None);
        assert_eq!(anchor_path("bad%41"), None);
        assert_eq!(anchor_path(""), None);
    }

    #[test]
    fn an_upper_is_counted_without_following_its_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let uppers = dir.path().join("upper");
        let usr = uppers.join("usr");
        std::fs::create_dir_all(usr.join("local/bin")).unwrap();
        std::fs::write(usr.join("local/bin/tool"), b"12345").unwrap();
        std::fs::write(usr.join("local/notes"), b"abc").unwrap();
        // A symlink to a large tree outside: counted as one symlink.
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("big"), vec![0u8; 4096]).unwrap();
        std::os::unix::fs::symlink(&outside, usr.join("escape")).unwrap();
        // An upper that is a symlink itself is no upper.
        std::os::unix::fs::symlink(&outside, uppers.join("etc")).unwrap();
        std::fs::create_dir_all(uppers.join("root")).unwrap();
        let usage = anchors_usage(&uppers).unwrap();
        assert_eq!(usage.len(), 2, "{usage:?}");
        assert_eq!(usage[0].path, "/root");
        assert_eq!(usage[0].files, 0);
        let u = &usage[1];
        assert_eq!(u.path, "/usr");
        assert_eq!((u.files, u.directories, u.symlinks), (2, 2, 1));
        assert_eq!(u.bytes, 8);
        assert_eq!(u.deleted, 0);
        assert!(u.complete);
    }

    #[test]
    fn no_uppers_directory_is_no_anchor() {
        let dir = tempfile::tempdir().unwrap();
        assert!(anchors_usage(&dir.path().join("anchors/upper"))
            .unwrap()
            .is_empty());
    }

    /// A wide upper (more sibling directories than descriptors) is walked
    /// whole by the count, the verification and the inspection: each holds
    /// one descriptor per level, not one per pending directory.
    ///
    /// The descriptor limit is the whole process's, so the walk runs in a
    /// child run of this test binary: other tests of a shared process
    /// (`cargo test` runs them as threads) keep their limit.
    #[test]
    fn a_tree_wider_than_the_descriptor_limit_is_walked_whole() {
        const NAME: &str =
            "state_anchor::usage::tests::a_tree_wider_than_the_descriptor_limit_is_walked_whole";
        const CHILD: &str = "LAZARET_TEST_LOW_DESCRIPTOR_LIMIT";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "{stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let domain = dir.path().join("domain");
        let usr = domain.join("anchors/upper/usr");
        for i in 0..300 {
            let d = usr.join(format!("lib/pkg{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("f"), b"x").unwrap();
        }
        // This child run is a process of its own: the lower limit is its
        // alone.
        let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
        rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit {
                current: Some(64),
                maximum: hard,
            },
        )
        .unwrap();
        let usage = anchors_usage(&domain.join("anchors/upper")).unwrap();
        assert_eq!((usage[0].files, usage[0].directories), (300, 301));
        assert!(usage[0].complete);
        let uid = rustix::process::getuid().as_raw();
        let v = crate::state_anchor::verify::verify_anchors(dir.path(), &domain, uid, "");
        assert_eq!(v.entries, 601);
        let changes = crate::state_anchor::changes::anchor_changes("/usr", &usr, None).unwrap();
        assert_eq!(changes.entries.len(), 300);
        assert!(changes.complete);
    }
}
