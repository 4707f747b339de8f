//! Resetting State Anchors (spec 3.9, FR-11, OR-5, SR-14): what the agent
//! changed under one persistent path, or under all of them, is discarded so
//! the next launch follows the current prepared lower.
//!
//! The decision is one `rename`: the selected upper (`anchors/upper/<name>`,
//! or the whole `anchors/upper` for all anchors) moves into the Domain's
//! `anchors/discard` directory, then its work directory follows. A crash
//! before that rename leaves the prior state; after it, the next launch
//! finds no upper and starts a new empty one (`mount_anchors` creates it),
//! so no partially reset upper is ever active (OR-5). Everything is
//! descriptor-relative from the Domain root, which is opened without
//! following a symlink; nothing is followed below it (SR-14).
//!
//! What was discarded is then removed by [`remove_discarded`], which runs
//! as root of a verified user namespace with the Domain's maps (an upper
//! holds files owned by subordinate IDs the developer cannot remove): a
//! bounded walk that never follows a symlink and never crosses a mount. A
//! removal that was interrupted leaves only the discard directory, which is
//! never an upper; the next reset removes what is left in it first.
//!
//! The caller holds the Domain's lifecycle lock and has established that
//! no generation is live (the CLI's `lazaret state reset`).
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, CWD};

use crate::broker::exclusion::spawn_exclusion;
use crate::broker::transient::{Limits, Transient, TransientError};
use crate::crash_point::crash_point;
use crate::userns::{plan_maps, spawn_in_user_namespace, Identity, RealHost, UsernsError};

/// The directory beside `upper` and `work` that holds discarded state until
/// it is removed.
pub const DISCARD_DIR: &str = "discard";
/// The deepest directory the removal enters (each level holds a
/// descriptor); deeper ones are moved up first.
pub const MAX_DEPTH: usize = 128;
/// The most entries one removal looks at.
pub const MAX_ENTRIES: u64 = 50_000_000;
/// Names read from a directory before they are removed.
const BATCH: usize = 1024;
/// The hidden subcommand of the removal worker.
pub const DISCARD_SUBCOMMAND: &str = "__discard";
/// How long the removal worker may run: far above what removing millions
/// of files takes on a slow disk.
const WORKER_LIMIT: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// What to reset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResetScope {
    /// Every anchor of the Domain.
    All,
    /// The anchor of one persistent path (its escaped name,
    /// [`super::anchor_name`]).
    Anchor(String),
}

/// Errors of a reset; one variant per failing step.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    #[error("cannot open the Domain's {what} {path} (expected a directory reached without a symbolic link): {source}")]
    Open {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cannot create the discard directory {path}: {source}")]
    MakeDiscard { path: PathBuf, source: io::Error },
    #[error("cannot move {from} to {to}: {source}")]
    Move {
        from: PathBuf,
        to: PathBuf,
        source: io::Error,
    },
    #[error("cannot write {path}'s entries to disk: {source}")]
    Sync { path: PathBuf, source: io::Error },
    #[error("the discard directory {path} is no longer the directory the reset made (expected device {device} inode {inode})")]
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
    #[error("{path} is on another file system (a mount inside discarded state); nothing beneath it was removed")]
    MountCrossing { path: PathBuf },
    #[error("more than {MAX_ENTRIES} entries under {path}; removal stopped")]
    TooMany { path: PathBuf },
    #[error("the removal worker's user namespace: {0}")]
    Userns(#[source] UsernsError),
    #[error("the removal worker: {0}")]
    Worker(#[source] TransientError),
    #[error("the removal worker failed ({status}): {stderr}")]
    WorkerFailed { status: String, stderr: String },
}

/// Runs `program __discard` as root of a verified user namespace with the
/// developer's subordinate maps (the Domain's), which removes everything in
/// the discard directory of `storage_domain_root`, then removes the emptied
/// directory. Nothing to do when there is no discard directory.
pub fn run_removal_worker(program: &Path, storage_domain_root: &Path) -> Result<(), ResetError> {
    let Some((device, inode)) = discard_identity(storage_domain_root)? else {
        return Ok(());
    };
    let me = Identity::current(&mut RealHost).map_err(ResetError::Userns)?;
    let maps = plan_maps(&mut RealHost, &me).map_err(ResetError::Userns)?;
    let mut cmd = std::process::Command::new(program);
    cmd.arg(DISCARD_SUBCOMMAND)
        .arg("--dir")
        .arg(discard_path(storage_domain_root))
        .arg("--device")
        .arg(device.to_string())
        .arg("--inode")
        .arg(inode.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // The worker's spawn and its map helpers form one section.
    let spawning = spawn_exclusion();
    let child = spawn_in_user_namespace(cmd, &mut RealHost, &maps);
    drop(spawning);
    let child = child.map_err(ResetError::Userns)?;
    let out = Transient::adopt(child, DISCARD_SUBCOMMAND.to_owned())
        .and_then(|worker| worker.finish(b"", Limits::of(WORKER_LIMIT)))
        .map_err(ResetError::Worker)?;
    if !out.status.success() {
        return Err(ResetError::WorkerFailed {
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    remove_discard_dir(storage_domain_root)
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens an absolute `path` as a directory with no symbolic link on the way.
fn open_dir_strict(what: &'static str, path: &Path) -> Result<OwnedFd, ResetError> {
    rustix::fs::openat2(
        CWD,
        path,
        dir_flags(),
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| ResetError::Open {
        what,
        path: path.to_owned(),
        source: e.into(),
    })
}

/// Opens `name` beneath `dir` as a directory, or `None` when it is absent.
fn open_child(
    dir: &OwnedFd,
    name: &str,
    what: &'static str,
    at: &Path,
) -> Result<Option<OwnedFd>, ResetError> {
    match rustix::fs::openat(dir, name, dir_flags(), Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(ResetError::Open {
            what,
            path: at.join(name),
            source: e.into(),
        }),
    }
}

/// The decision: moves the selected upper, then its work directory, into
/// `<storage domain root>/anchors/discard` under names starting with `tag`
/// (unique per reset). Returns the anchors' paths that were moved (empty
/// when the selection held nothing: a Domain that never ran, an anchor
/// never mounted, or one already reset).
pub fn discard_anchor_state(
    storage_domain_root: &Path,
    scope: &ResetScope,
    tag: &str,
) -> Result<Vec<PathBuf>, ResetError> {
    let root = open_dir_strict("root", storage_domain_root)?;
    let anchors_path = storage_domain_root.join("anchors");
    let Some(anchors) = open_child(&root, "anchors", "anchors directory", storage_domain_root)?
    else {
        return Ok(Vec::new());
    };
    let discard_path = anchors_path.join(DISCARD_DIR);
    match rustix::fs::mkdirat(&anchors, DISCARD_DIR, Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => {
            return Err(ResetError::MakeDiscard {
                path: discard_path,
                source: e.into(),
            })
        }
    }
    let discard = open_child(&anchors, DISCARD_DIR, "discard directory", &anchors_path)?
        .ok_or_else(|| ResetError::MakeDiscard {
            path: discard_path.clone(),
            source: io::ErrorKind::NotFound.into(),
        })?;
    crash_point!(State, "reset", "before-upper", "DiscardUpper");
    let mut moved = Vec::new();
    // The upper first: its rename is the decision.
    for kind in ["upper", "work"] {
        let (from_dir, from_at, name) = match scope {
            ResetScope::All => (None, anchors_path.clone(), kind.to_owned()),
            ResetScope::Anchor(name) => {
                let at = anchors_path.join(kind);
                match open_child(&anchors, kind, "anchors directory", &anchors_path)? {
                    Some(fd) => (Some(fd), at, name.clone()),
                    None => continue,
                }
            }
        };
        let target = match scope {
            ResetScope::All => format!("{tag}-{kind}"),
            ResetScope::Anchor(name) => format!("{tag}-{kind}-{name}"),
        };
        let from = from_dir.as_ref().unwrap_or(&anchors);
        match rustix::fs::renameat(from, name.as_str(), &discard, target.as_str()) {
            Ok(()) => moved.push(from_at.join(&name)),
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => {
                return Err(ResetError::Move {
                    from: from_at.join(&name),
                    to: discard_path.join(&target),
                    source: e.into(),
                })
            }
        }
        crash_point!(State, "reset", &format!("after-{kind}"), "DiscardUpper");
    }
    // OR-5 across a power loss too: both directories' entries are on disk
    // before anything is removed.
    for (dir, at) in [(&discard, &discard_path), (&anchors, &anchors_path)] {
        rustix::fs::fsync(dir).map_err(|e| ResetError::Sync {
            path: at.clone(),
            source: e.into(),
        })?;
    }
    if let ResetScope::Anchor(_) = scope {
        for kind in ["upper", "work"] {
            if let Some(fd) = open_child(&anchors, kind, "anchors directory", &anchors_path)? {
                rustix::fs::fsync(&fd).map_err(|e| ResetError::Sync {
                    path: anchors_path.join(kind),
                    source: e.into(),
                })?;
            }
        }
    }
    Ok(moved)
}

/// The discard directory's identity, which the removal worker checks
/// before it removes anything; `None` when there is none.
pub fn discard_identity(storage_domain_root: &Path) -> Result<Option<(u64, u64)>, ResetError> {
    let path = discard_path(storage_domain_root);
    let root = open_dir_strict("root", storage_domain_root)?;
    let Some(anchors) = open_child(&root, "anchors", "anchors directory", storage_domain_root)?
    else {
        return Ok(None);
    };
    let Some(discard) = open_child(&anchors, DISCARD_DIR, "discard directory", &path)? else {
        return Ok(None);
    };
    let st = rustix::fs::fstat(&discard).map_err(|e| ResetError::Open {
        what: "discard directory",
        path,
        source: e.into(),
    })?;
    Ok(Some((st.st_dev, st.st_ino)))
}

/// `<storage domain root>/anchors/discard`.
pub fn discard_path(storage_domain_root: &Path) -> PathBuf {
    storage_domain_root.join("anchors").join(DISCARD_DIR)
}

/// Removes everything inside the discard directory `path`, which must be
/// the directory `(device, inode)` reached without a symbolic link. Run
/// as root of the Domain's user namespace; the directory itself stays (its
/// owner, the developer, removes it).
pub fn remove_discarded(path: &Path, device: u64, inode: u64) -> Result<u64, ResetError> {
    let dir = open_dir_strict("discard directory", path)?;
    let st = rustix::fs::fstat(&dir).map_err(|e| ResetError::Open {
        what: "discard directory",
        path: path.to_owned(),
        source: e.into(),
    })?;
    if (st.st_dev, st.st_ino) != (device, inode) {
        return Err(ResetError::Changed {
            path: path.to_owned(),
            device,
            inode,
        });
    }
    let mut walk = Walk::default();
    remove_children(&dir, &dir, path, st.st_dev, 0, &mut walk)?;
    Ok(walk.removed)
}

/// Up to [`BATCH`] names of `dir` other than `.` and `..`.
fn read_names(dir: &OwnedFd, at: &Path) -> Result<Vec<OsString>, ResetError> {
    let step = |e: rustix::io::Errno| ResetError::Remove {
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
    /// Subtrees moved up to the discard directory (names them).
    hoisted: u64,
}

/// Removes what `dir` holds; `top` is the discard directory. A directory
/// at the depth bound is not entered but moved up into `top`, whose loop
/// reads it again: any depth the agent made is removed with at most
/// [`MAX_DEPTH`] descriptors open.
fn remove_children(
    top: &OwnedFd,
    dir: &OwnedFd,
    at: &Path,
    device: u64,
    depth: usize,
    walk: &mut Walk,
) -> Result<(), ResetError> {
    debug_assert!(depth < MAX_DEPTH);
    loop {
        let names = read_names(dir, at)?;
        if names.is_empty() {
            return Ok(());
        }
        for name in names {
            walk.seen += 1;
            if walk.seen > MAX_ENTRIES {
                return Err(ResetError::TooMany {
                    path: at.to_owned(),
                });
            }
            let path = at.join(&name);
            let step = |step: &'static str, path: &Path| {
                let path = path.to_owned();
                move |e: rustix::io::Errno| ResetError::Remove {
                    step,
                    path,
                    source: e.into(),
                }
            };
            let st = rustix::fs::statat(dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                .map_err(step("inspect", &path))?;
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                if st.st_dev != device {
                    return Err(ResetError::MountCrossing { path });
                }
                if depth + 1 == MAX_DEPTH {
                    hoist(top, dir, &name, &path, walk)?;
                    continue;
                }
                let child = rustix::fs::openat(dir, name.as_os_str(), dir_flags(), Mode::empty())
                    .map_err(step("open", &path))?;
                remove_children(top, &child, &path, device, depth + 1, walk)?;
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

/// Moves the directory `name` of `dir` up into the discard directory `top`
/// under a name of its own.
fn hoist(
    top: &OwnedFd,
    dir: &OwnedFd,
    name: &OsStr,
    path: &Path,
    walk: &mut Walk,
) -> Result<(), ResetError> {
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
                return Err(ResetError::Remove {
                    step: "move up",
                    path: path.to_owned(),
                    source: e.into(),
                })
            }
        }
    }
    Err(ResetError::Remove {
        step: "move up",
        path: path.to_owned(),
        source: io::ErrorKind::AlreadyExists.into(),
    })
}

/// Removes the (emptied) discard directory itself; one still holding
/// something stays for the next reset.
pub fn remove_discard_dir(storage_domain_root: &Path) -> Result<(), ResetError> {
    let anchors_path = storage_domain_root.join("anchors");
    let root = open_dir_strict("root", storage_domain_root)?;
    let Some(anchors) = open_child(&root, "anchors", "anchors directory", storage_domain_root)?
    else {
        return Ok(());
    };
    match rustix::fs::unlinkat(&anchors, DISCARD_DIR, AtFlags::REMOVEDIR) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(ResetError::Remove {
            step: "remove the directory",
            path: anchors_path.join(DISCARD_DIR),
            source: e.into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests fail by panicking
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A Domain root with two anchors' uppers and work directories.
    fn domain() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("domain");
        for d in [
            "upper/usr/local/bin",
            "upper/root",
            "work/usr/work",
            "work/root",
        ] {
            std::fs::create_dir_all(root.join("anchors").join(d)).unwrap();
        }
        std::fs::write(root.join("anchors/upper/usr/local/bin/tool"), b"x").unwrap();
        std::fs::write(root.join("anchors/upper/root/note"), b"y").unwrap();
        (dir, root)
    }

    fn discard_entries(root: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(discard_path(root))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn one_anchor_is_moved_aside_and_the_others_stay() {
        let (_dir, root) = domain();
        let moved =
            discard_anchor_state(&root, &ResetScope::Anchor("usr".to_owned()), "t1").unwrap();
        assert_eq!(
            moved,
            [
                root.join("anchors/upper/usr"),
                root.join("anchors/work/usr")
            ]
        );
        assert!(!root.join("anchors/upper/usr").exists());
        assert!(root.join("anchors/upper/root/note").is_file());
        assert!(root.join("anchors/work/root").is_dir());
        assert_eq!(discard_entries(&root), ["t1-upper-usr", "t1-work-usr"]);
        // Again: nothing is left to move.
        let again =
            discard_anchor_state(&root, &ResetScope::Anchor("usr".to_owned()), "t2").unwrap();
        assert!(again.is_empty());
        let (device, inode) = discard_identity(&root).unwrap().unwrap();
        assert_eq!(
            remove_discarded(&discard_path(&root), device, inode).unwrap(),
            6
        );
        remove_discard_dir(&root).unwrap();
        assert!(!discard_path(&root).exists());
        assert!(root.join("anchors/upper/root/note").is_file());
    }

    #[test]
    fn all_anchors_go_in_one_rename() {
        let (_dir, root) = domain();
        let moved = discard_anchor_state(&root, &ResetScope::All, "t1").unwrap();
        assert_eq!(
            moved,
            [root.join("anchors/upper"), root.join("anchors/work")]
        );
        assert_eq!(discard_entries(&root), ["t1-upper", "t1-work"]);
        assert!(!root.join("anchors/upper").exists());
        // A Domain that never ran has nothing to reset.
        let empty = tempfile::tempdir().unwrap();
        assert!(discard_anchor_state(empty.path(), &ResetScope::All, "t")
            .unwrap()
            .is_empty());
        assert!(discard_identity(empty.path()).unwrap().is_none());
    }

    /// SR-14: a symlink at the Domain root, at `anchors` or at the selected
    /// upper is never followed; a symlink inside discarded state is removed
    /// as a link and its target stays.
    #[test]
    fn nothing_outside_the_domain_root_is_touched() {
        let (dir, root) = domain();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(outside.join("keep")).unwrap();
        std::fs::write(outside.join("keep/file"), b"host").unwrap();
        let link = dir.path().join("link-root");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        assert!(matches!(
            discard_anchor_state(&link, &ResetScope::All, "t"),
            Err(ResetError::Open { .. })
        ));
        // A symlink where an upper is: moved as a link, target untouched.
        std::os::unix::fs::symlink(outside.join("keep"), root.join("anchors/upper/opt")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("anchors/upper/root/out")).unwrap();
        discard_anchor_state(&root, &ResetScope::All, "t").unwrap();
        let (device, inode) = discard_identity(&root).unwrap().unwrap();
        remove_discarded(&discard_path(&root), device, inode).unwrap();
        assert_eq!(std::fs::read(outside.join("keep/file")).unwrap(), b"host");
        // The worker refuses a discard directory that was replaced.
        let discard = discard_path(&root);
        std::fs::remove_dir(&discard).unwrap();
        std::fs::create_dir(&discard).unwrap();
        assert!(matches!(
            remove_discarded(&discard, device, inode),
            Err(ResetError::Changed { .. })
        ));
        std::fs::remove_dir(&discard).unwrap();
        std::os::unix::fs::symlink(&outside, &discard).unwrap();
        let st = std::fs::metadata(&outside).unwrap();
        assert!(matches!(
            remove_discarded(&discard, st.dev(), st.ino()),
            Err(ResetError::Open { .. })
        ));
        assert!(outside.join("keep/file").is_file());
    }

    /// A chain deeper than the bound (the agent may make one) is removed
    /// whole: its deep part is moved up and removed from there.
    #[test]
    fn a_chain_deeper_than_the_bound_is_removed() {
        let (_dir, root) = domain();
        let mut deep = root.join("anchors/upper/root");
        for _ in 0..MAX_DEPTH + 40 {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("f"), b"x").unwrap();
        discard_anchor_state(&root, &ResetScope::All, "t").unwrap();
        let (device, inode) = discard_identity(&root).unwrap().unwrap();
        remove_discarded(&discard_path(&root), device, inode).unwrap();
        assert!(discard_entries(&root).is_empty());
    }

    /// What an interrupted removal left is removed by the next one, with
    /// whatever the next reset moves aside.
    #[test]
    fn leftovers_of_an_interrupted_removal_go_with_the_next_reset() {
        let (_dir, root) = domain();
        discard_anchor_state(&root, &ResetScope::Anchor("root".to_owned()), "t1").unwrap();
        discard_anchor_state(&root, &ResetScope::Anchor("usr".to_owned()), "t2").unwrap();
        assert_eq!(discard_entries(&root).len(), 4);
        let (device, inode) = discard_identity(&root).unwrap().unwrap();
        remove_discarded(&discard_path(&root), device, inode).unwrap();
        assert!(discard_entries(&root).is_empty());
    }
}
