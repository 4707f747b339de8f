//! Confined path plans (spec 3.2; schemas.md ConfinedPathPlan): a retained
//! ancestor directory descriptor with its device, inode and mount identity, a
//! normalized relative suffix, and the canonical label, which is a diagnostic
//! and digest input only — never open authority.
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::error::{open_problem, ConfinedError};
use super::sys::{ConfinedSys, FileKind, FileStat, Identity};

/// Components accepted in one path; bounds every walk.
pub(crate) const COMPONENTS_MAX: usize = 256;

/// The v1 resolution flags for every open beneath a retained ancestor.
pub(crate) fn confined_resolve() -> ResolveFlags {
    ResolveFlags::BENEATH
        | ResolveFlags::NO_MAGICLINKS
        | ResolveFlags::NO_SYMLINKS
        | ResolveFlags::NO_XDEV
}

/// A retained ancestor and a relative suffix.
#[derive(Debug)]
pub struct ConfinedPathPlan {
    ancestor: OwnedFd,
    ancestor_identity: Identity,
    ancestor_label: PathBuf,
    suffix: PathBuf,
}

fn normal_components(path: &Path) -> Result<Vec<OsString>, ConfinedError> {
    let comps: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            _ => None,
        })
        .collect();
    if comps.len() > COMPONENTS_MAX {
        return Err(ConfinedError::TooDeep {
            path: path.to_owned(),
            count: comps.len(),
            max: COMPONENTS_MAX,
        });
    }
    Ok(comps)
}

/// Resolves the existing ancestors of the absolute, normalized `path` once:
/// returns the canonical deepest existing proper ancestor and the remaining
/// components (always at least the final one). Symlinks among the existing
/// ancestors are resolved here, once; the suffix is later opened without
/// following any symlink.
pub(crate) fn resolve_ancestors(
    sys: &dyn ConfinedSys,
    path: &Path,
) -> Result<(PathBuf, Vec<OsString>), ConfinedError> {
    let comps = normal_components(path)?;
    if comps.is_empty() {
        return Err(ConfinedError::WrongType {
            path: path.to_owned(),
            found: "the filesystem root",
            expected: "a path beneath /",
        });
    }
    for k in (0..comps.len()).rev() {
        let prefix: PathBuf = std::iter::once(OsString::from("/"))
            .chain(comps[..k].iter().cloned())
            .collect();
        match sys.open_ambient(&prefix, true) {
            Ok(fd) => {
                let canonical =
                    sys.fd_path(fd.as_fd())
                        .map_err(|source| ConfinedError::FdPath {
                            path: prefix.clone(),
                            source,
                        })?;
                return Ok((canonical, comps[k..].to_vec()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(ConfinedError::ResolveAncestors {
                    path: prefix,
                    source,
                })
            }
        }
    }
    Err(ConfinedError::ResolveAncestors {
        path: path.to_owned(),
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    })
}

impl ConfinedPathPlan {
    /// Opens and records the canonical ancestor directory.
    pub(crate) fn new(
        sys: &dyn ConfinedSys,
        canonical_ancestor: &Path,
        suffix: PathBuf,
    ) -> Result<Self, ConfinedError> {
        let root = sys
            .open_root()
            .map_err(|source| ConfinedError::OpenRoot { source })?;
        let rel = canonical_ancestor
            .strip_prefix("/")
            .unwrap_or(canonical_ancestor);
        let ancestor = if rel.as_os_str().is_empty() {
            root
        } else {
            sys.openat2(
                root.as_fd(),
                rel,
                OFlags::PATH | OFlags::DIRECTORY,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            )
            .map_err(|e| ConfinedError::OpenAncestor {
                path: canonical_ancestor.to_owned(),
                problem: open_problem(&e),
            })?
        };
        let st = stat(sys, ancestor.as_fd(), canonical_ancestor)?;
        if st.kind() != FileKind::Directory {
            return Err(ConfinedError::AncestorNotDirectory {
                path: canonical_ancestor.to_owned(),
                found: st.kind().describe(),
            });
        }
        Ok(Self {
            ancestor,
            ancestor_identity: st.identity,
            ancestor_label: canonical_ancestor.to_owned(),
            suffix,
        })
    }

    /// The canonical label: diagnostics and digests only (a `.` suffix adds
    /// nothing to it).
    pub fn label(&self) -> PathBuf {
        self.ancestor_label
            .join(&self.suffix)
            .components()
            .collect()
    }

    pub fn ancestor_identity(&self) -> Identity {
        self.ancestor_identity
    }

    pub fn suffix(&self) -> &Path {
        &self.suffix
    }

    pub(crate) fn ancestor(&self) -> BorrowedFd<'_> {
        self.ancestor.as_fd()
    }

    /// Checks the retained ancestor still has its recorded identity. When
    /// the retained directory is the object itself (suffix `.`: a mount
    /// root), reopening the suffix cannot notice that its label now names
    /// another object (a mount placed over it), so the label is also looked
    /// up once more and must still name the retained directory: a pathname
    /// handed to a trusted external component names the revalidated object
    /// (spec 3.2). The lookup is compared only, never used as authority.
    pub(crate) fn revalidate_ancestor(&self, sys: &dyn ConfinedSys) -> Result<(), ConfinedError> {
        let changed = || ConfinedError::AncestorChanged {
            path: self.ancestor_label.clone(),
        };
        let st = stat(sys, self.ancestor.as_fd(), &self.ancestor_label)?;
        if st.identity != self.ancestor_identity || st.kind() != FileKind::Directory {
            return Err(changed());
        }
        if self.suffix == Path::new(".") {
            let named = sys
                .open_ambient(&self.ancestor_label, false)
                .map_err(|_| changed())?;
            if stat(sys, named.as_fd(), &self.ancestor_label)?.identity != self.ancestor_identity {
                return Err(changed());
            }
        }
        Ok(())
    }

    /// Opens the suffix beneath the revalidated ancestor with the v1 resolve
    /// flags.
    pub fn open(&self, sys: &dyn ConfinedSys, flags: OFlags) -> Result<OwnedFd, ConfinedError> {
        self.revalidate_ancestor(sys)?;
        sys.openat2(
            self.ancestor.as_fd(),
            &self.suffix,
            flags,
            Mode::empty(),
            confined_resolve(),
        )
        .map_err(|e| ConfinedError::Open {
            path: self.label(),
            problem: open_problem(&e),
        })
    }
}

/// The label of `plan`'s object when its suffix is one component naming an
/// existing directory of the invoking user with a filesystem mounted on it
/// (its mount differs from the retained ancestor's); `None` for anything
/// else, which the plan then opens (or refuses) as usual.
fn mount_root(
    sys: &dyn ConfinedSys,
    plan: &ConfinedPathPlan,
) -> Result<Option<PathBuf>, ConfinedError> {
    let mut components = plan.suffix.components();
    let (Some(Component::Normal(name)), None) = (components.next(), components.next()) else {
        return Ok(None);
    };
    let Ok(fd) = sys.openat2(
        plan.ancestor(),
        Path::new(name),
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    ) else {
        return Ok(None);
    };
    let st = stat(sys, fd.as_fd(), &plan.label())?;
    let crossed =
        st.kind() == FileKind::Directory && st.identity.mnt_id != plan.ancestor_identity.mnt_id;
    if !crossed {
        return Ok(None);
    }
    // Only the invoking user's own directory: the root of /proc, /sys,
    // /dev/shm or a shared /tmp stays refused as a mount crossing.
    let user = sys
        .user_ids()
        .map_err(|source| ConfinedError::UserIds { source })?;
    Ok((st.uid == user.uid).then(|| plan.label()))
}

pub(crate) fn stat(
    sys: &dyn ConfinedSys,
    fd: BorrowedFd<'_>,
    path: &Path,
) -> Result<FileStat, ConfinedError> {
    sys.stat(fd).map_err(|source| ConfinedError::Stat {
        path: path.to_owned(),
        source,
    })
}

/// An object opened (`O_PATH`) through its plan, with the metadata recorded
/// at open time.
#[derive(Debug)]
pub struct OpenedObject {
    plan: ConfinedPathPlan,
    fd: OwnedFd,
    stat: FileStat,
}

impl OpenedObject {
    /// Resolves `path` (ancestors once), builds its plan and opens it
    /// `O_PATH` without following a final symlink.
    ///
    /// An existing directory that is itself a mount root (a project on its
    /// own filesystem or bind mount) cannot be reached beneath its parent
    /// without crossing that mount, which the v1 resolve flags refuse. Its
    /// plan retains the directory itself, opened like the ancestors
    /// (beneath `/`, no symlinks, no magic links), with the suffix `.`:
    /// everything beneath it is still opened without crossing a mount.
    pub(crate) fn open_existing(sys: &dyn ConfinedSys, path: &Path) -> Result<Self, ConfinedError> {
        let (ancestor, rest) = resolve_ancestors(sys, path)?;
        let plan = ConfinedPathPlan::new(sys, &ancestor, rest.iter().collect())?;
        let plan = match mount_root(sys, &plan)? {
            Some(dir) => ConfinedPathPlan::new(sys, &dir, PathBuf::from("."))?,
            None => plan,
        };
        Self::through(sys, plan)
    }

    pub(crate) fn through(
        sys: &dyn ConfinedSys,
        plan: ConfinedPathPlan,
    ) -> Result<Self, ConfinedError> {
        let fd = plan.open(sys, OFlags::PATH)?;
        let stat = stat(sys, fd.as_fd(), &plan.label())?;
        Ok(Self { plan, fd, stat })
    }

    pub fn plan(&self) -> &ConfinedPathPlan {
        &self.plan
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub fn stat(&self) -> &FileStat {
        &self.stat
    }

    pub fn label(&self) -> PathBuf {
        self.plan.label()
    }

    /// Reopens through the plan and requires the recorded identity and type.
    pub fn revalidate(&self, sys: &dyn ConfinedSys) -> Result<(), ConfinedError> {
        let fd = self.plan.open(sys, OFlags::PATH)?;
        let now = stat(sys, fd.as_fd(), &self.plan.label())?;
        let held = stat(sys, self.fd.as_fd(), &self.plan.label())?;
        if now.identity == self.stat.identity
            && held.identity == self.stat.identity
            && now.kind() == self.stat.kind()
        {
            Ok(())
        } else {
            Err(ConfinedError::Changed {
                path: self.plan.label(),
            })
        }
    }

    /// The identities of the directories containing this object, nearest
    /// first, walking `..` from the object (a directory) or from its retained
    /// ancestor (anything else) up to the filesystem root. `..` crosses out
    /// of a mount to the directory it is mounted on, so a bind mount of a
    /// containing directory has its source's identity in this list. Bounded
    /// by [`COMPONENTS_MAX`] steps.
    pub(crate) fn containing_identities(
        &self,
        sys: &dyn ConfinedSys,
    ) -> Result<Vec<Identity>, ConfinedError> {
        let label = self.label();
        let mut out = Vec::new();
        let start = if self.stat.kind() == FileKind::Directory {
            self.fd.as_fd()
        } else {
            out.push(self.plan.ancestor_identity);
            self.plan.ancestor()
        };
        let parent = |dir: BorrowedFd<'_>| {
            sys.openat2(
                dir,
                Path::new(".."),
                OFlags::PATH | OFlags::DIRECTORY,
                Mode::empty(),
                ResolveFlags::empty(),
            )
            .map_err(|e| ConfinedError::Open {
                path: label.clone(),
                problem: format!("opening a containing directory: {}", open_problem(&e)),
            })
        };
        let mut current = parent(start)?;
        for _ in 0..COMPONENTS_MAX {
            let id = stat(sys, current.as_fd(), &label)?.identity;
            // `..` of the root is the root itself.
            if out.last() == Some(&id) {
                return Ok(out);
            }
            out.push(id);
            current = parent(current.as_fd())?;
        }
        Err(ConfinedError::TooDeep {
            path: label,
            count: COMPONENTS_MAX + 1,
            max: COMPONENTS_MAX,
        })
    }

    /// Requires the recorded type.
    pub(crate) fn require_kind(
        &self,
        kind: FileKind,
        expected: &'static str,
    ) -> Result<(), ConfinedError> {
        if self.stat.kind() == kind {
            Ok(())
        } else {
            Err(ConfinedError::WrongType {
                path: self.label(),
                found: self.stat.kind().describe(),
                expected,
            })
        }
    }
}
