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
//! What was discarded is then removed by [`crate::tree_removal`], which runs
//! as root of a verified user namespace with the Domain's maps (an upper
//! holds files owned by subordinate IDs the developer cannot remove): a
//! bounded walk that never follows a symlink and never crosses a mount. A
//! removal that was interrupted leaves only the discard directory, which is
//! never an upper; the next reset removes what is left in it first.
//!
//! The caller holds the Domain's lifecycle lock and has established that
//! no generation is live (the CLI's `lazaret state reset`).
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, CWD};

use crate::crash_point::crash_point;
use crate::tree_removal::{self, RemovalError};

/// The directory beside `upper` and `work` that holds discarded state until
/// it is removed.
pub const DISCARD_DIR: &str = "discard";

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
    #[error("cannot remove the discarded state: {0}")]
    Removal(#[source] RemovalError),
    #[error("cannot remove the emptied discard directory {path}: {source}")]
    RemoveDiscard { path: PathBuf, source: io::Error },
}

/// Runs the removal worker ([`crate::tree_removal`]) on the discard
/// directory of `storage_domain_root`, then removes the emptied directory.
/// Nothing to do when there is no discard directory.
pub fn run_removal_worker(program: &Path, storage_domain_root: &Path) -> Result<(), ResetError> {
    let Some((device, inode)) = discard_identity(storage_domain_root)? else {
        return Ok(());
    };
    tree_removal::run_worker(
        program,
        &discard_path(storage_domain_root),
        device,
        inode,
        None,
    )
    .map_err(ResetError::Removal)?;
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
        Err(e) => Err(ResetError::RemoveDiscard {
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
            tree_removal::remove_contents(&discard_path(&root), device, inode).unwrap(),
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
        tree_removal::remove_contents(&discard_path(&root), device, inode).unwrap();
        assert_eq!(std::fs::read(outside.join("keep/file")).unwrap(), b"host");
        // The worker refuses a discard directory that was replaced.
        let discard = discard_path(&root);
        std::fs::remove_dir(&discard).unwrap();
        std::fs::create_dir(&discard).unwrap();
        assert!(matches!(
            tree_removal::remove_contents(&discard, device, inode),
            Err(RemovalError::Changed { .. })
        ));
        std::fs::remove_dir(&discard).unwrap();
        std::os::unix::fs::symlink(&outside, &discard).unwrap();
        let st = std::fs::metadata(&outside).unwrap();
        assert!(matches!(
            tree_removal::remove_contents(&discard, st.dev(), st.ino()),
            Err(RemovalError::Open { .. })
        ));
        assert!(outside.join("keep/file").is_file());
    }

    /// A chain deeper than the bound (the agent may make one) is removed
    /// whole: its deep part is moved up and removed from there.
    #[test]
    fn a_chain_deeper_than_the_bound_is_removed() {
        let (_dir, root) = domain();
        let mut deep = root.join("anchors/upper/root");
        for _ in 0..tree_removal::MAX_DEPTH + 40 {
            deep.push("d");
        }
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("f"), b"x").unwrap();
        discard_anchor_state(&root, &ResetScope::All, "t").unwrap();
        let (device, inode) = discard_identity(&root).unwrap().unwrap();
        tree_removal::remove_contents(&discard_path(&root), device, inode).unwrap();
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
        tree_removal::remove_contents(&discard_path(&root), device, inode).unwrap();
        assert!(discard_entries(&root).is_empty());
    }
}
